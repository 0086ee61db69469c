"""Figures as data plus picture: every plot keeps the exact table it was drawn from.

Each function returns a `Figure` whose `data` DataFrame holds the plotted numbers, so tests can
check that what is drawn equals what the analysis computed, and the HTML page can embed the PNG.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

# Okabe & Ito's colour-blind-safe palette (Color Universal Design), black last.
PALETTE: tuple[str, ...] = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class Figure:
    """A rendered plot: PNG bytes, its caption, and the exact data it shows."""

    key: str
    title: str
    caption: str
    png: bytes
    data: pd.DataFrame

    @property
    def data_uri(self) -> str:
        """The PNG as a `data:` URI, so the page needs no external files."""
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": 110,
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.prop_cycle": plt.cycler(color=list(PALETTE)),
        }
    )
    return plt


def _render(fig) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def color_for(i: int) -> str:
    """The i-th palette colour (cycling)."""
    return PALETTE[i % len(PALETTE)]


def plain(text: object) -> str:
    """`text` as matplotlib shows it literally: `$` would otherwise start mathtext."""
    return str(text).replace("$", r"\$")


def _short(labels: Sequence[str], width: int = 28) -> list[str]:
    return [plain(s if len(s) <= width else s[: width - 1] + "…") for s in map(str, labels)]


def scatter_with_identity(
    data: pd.DataFrame,
    *,
    x: str,
    y: str,
    panel: str | None,
    hue: str | None,
    key: str,
    title: str,
    caption: str,
    xlabel: str,
    ylabel: str,
) -> Figure:
    """Scatter `y` against `x` in one panel per value of `panel`, with the y = x line."""
    plt = _pyplot()
    panels = [None] if panel is None else list(dict.fromkeys(data[panel]))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.2 * len(panels) + 0.6, 3.3), squeeze=False, sharey=True
    )
    lo = float(np.nanmin(data[[x, y]].to_numpy())) if len(data) else 0.0
    hi = float(np.nanmax(data[[x, y]].to_numpy())) if len(data) else 1.0
    pad = 0.03 * max(hi - lo, 1e-6)
    hues = [None] if hue is None else list(dict.fromkeys(data[hue]))
    for ax, value in zip(axes[0], panels, strict=True):
        part = data if value is None else data[data[panel] == value]
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#999999", lw=1, ls="--")
        for i, h in enumerate(hues):
            sub = part if h is None else part[part[hue] == h]
            ax.scatter(
                sub[x],
                sub[y],
                s=22,
                color=color_for(i),
                marker=MARKERS[i % len(MARKERS)],
                label=None if h is None else plain(h),
                alpha=0.85,
                edgecolor="white",
                linewidth=0.4,
            )
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_xlabel(xlabel)
        if value is not None:
            ax.set_title(plain(f"{panel} = {value}"))
    axes[0][0].set_ylabel(ylabel)
    if hue is not None and len(hues) > 1:
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return Figure(key, title, caption, _render(fig), data.reset_index(drop=True))


def grouped_bars(
    data: pd.DataFrame,
    *,
    category: str,
    group: str,
    value: str,
    key: str,
    title: str,
    caption: str,
    ylabel: str,
    panel: str | None = None,
) -> Figure:
    """Bars of `value` per `category` (x axis), one coloured bar per `group`, optional panels.

    The y axis starts at 0 and is never shorter than 0.01, so all-zero bars read as zero.
    """
    plt = _pyplot()
    panels = [None] if panel is None else list(dict.fromkeys(data[panel]))
    cats = list(dict.fromkeys(data[category]))
    groups = list(dict.fromkeys(data[group]))
    width = 0.8 / max(len(groups), 1)
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(max(3.2, 0.75 * len(cats) + 1.2) * len(panels) + 1.6, 3.4),
        squeeze=False,
        sharey=True,
    )
    xs = np.arange(len(cats))
    top = float(np.nanmax(data[value])) if len(data) else 0.0
    slanted = len(cats) > 4 or any(len(line) > 12 for c in cats for line in str(c).split("\n"))
    for ax, pv in zip(axes[0], panels, strict=True):
        part = data if pv is None else data[data[panel] == pv]
        for i, g in enumerate(groups):
            sub = part[part[group] == g].set_index(category)
            heights = [float(sub[value].get(c, np.nan)) for c in cats]
            bars = ax.bar(
                xs + (i - (len(groups) - 1) / 2) * width,
                heights,
                width,
                label=plain(g),
                color=color_for(i),
                hatch=("", "//", "..", "xx")[i % 4],
                edgecolor="white",
            )
            if len(cats) * len(groups) <= 24:
                ax.bar_label(bars, fmt="%.3f", fontsize=6, padding=1)
        ax.set_xticks(
            xs, _short(cats, 40), rotation=35 if slanted else 0, ha="right" if slanted else "center"
        )
        ax.set_ylim(0, max(0.01, 1.15 * top))
        if pv is not None:
            ax.set_title(plain(f"{panel} = {pv}"))
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Figure(key, title, caption, _render(fig), data.reset_index(drop=True))


def lines(
    data: pd.DataFrame,
    *,
    x: str,
    y: str,
    hue: str,
    key: str,
    title: str,
    caption: str,
    xlabel: str,
    ylabel: str,
    panel: str | None = None,
    markers: bool = True,
) -> Figure:
    """One line of `y` against `x` per value of `hue`, optionally one panel per `panel`."""
    plt = _pyplot()
    panels = [None] if panel is None else list(dict.fromkeys(data[panel]))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.6 * len(panels) + 1.4, 3.3), squeeze=False, sharey=True
    )
    hues = list(dict.fromkeys(data[hue]))
    for ax, pv in zip(axes[0], panels, strict=True):
        part = data if pv is None else data[data[panel] == pv]
        for i, h in enumerate(hues):
            sub = part[part[hue] == h].sort_values(x)
            ax.plot(
                sub[x],
                sub[y],
                color=color_for(i),
                lw=1.4,
                label=plain(h),
                marker=MARKERS[i % len(MARKERS)] if markers else None,
                ms=4,
            )
        ax.set_xlabel(xlabel)
        if pv is not None:
            ax.set_title(plain(f"{panel} = {pv}"))
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return Figure(key, title, caption, _render(fig), data.reset_index(drop=True))


def bump_chart(
    ranks: pd.DataFrame, *, label: str, left: str, right: str, key: str, title: str, caption: str
) -> Figure:
    """Lines joining each algorithm's rank under `left` to its rank under `right` (1 = best)."""
    plt = _pyplot()
    n = len(ranks)
    fig, ax = plt.subplots(figsize=(4.6, 0.32 * n + 1.4))
    for i, row in enumerate(ranks.itertuples(index=False)):
        r0, r1 = getattr(row, left), getattr(row, right)
        ax.plot([0, 1], [r0, r1], color=color_for(i), lw=1.8, marker="o")
        name = _short([getattr(row, label)], 24)[0]
        ax.text(-0.04, r0, name, ha="right", va="center", fontsize=8)
        ax.text(1.04, r1, name, ha="left", va="center", fontsize=8)
    ax.set_xlim(-0.9, 1.9)
    ax.set_ylim(n + 0.5, 0.5)
    ax.set_xticks([0, 1], [left.replace("_", " "), right.replace("_", " ")])
    ax.set_yticks(range(1, n + 1))
    ax.set_ylabel("rank (1 = lowest error)")
    ax.spines["left"].set_visible(False)
    return Figure(key, title, caption, _render(fig), ranks.reset_index(drop=True))


def heatmap(matrix: pd.DataFrame, *, key: str, title: str, caption: str, colorbar: str) -> Figure:
    """A heat map of a numeric matrix (rows x columns), values printed when it is small."""
    plt = _pyplot()
    rows, cols = matrix.shape
    fig, ax = plt.subplots(figsize=(min(0.45 * cols + 2.5, 14), 0.35 * rows + 1.5))
    values = matrix.to_numpy(dtype=float)
    im = ax.imshow(values, aspect="auto", cmap="cividis", interpolation="nearest")
    ax.set_yticks(range(rows), _short(matrix.index))
    step = max(1, cols // 30)
    ax.set_xticks(
        range(0, cols, step),
        _short(matrix.columns[::step], 12),
        rotation=60,
        ha="right",
        fontsize=7,
    )
    if rows * cols <= 150:
        mid = np.nanmean(values)
        for (r, c), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(
                    c,
                    r,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if v < mid else "black",
                )
    fig.colorbar(im, ax=ax, label=colorbar, shrink=0.8)
    tidy = matrix.copy()
    tidy.index.name = tidy.index.name or "row"
    return Figure(key, title, caption, _render(fig), tidy.reset_index())


def curves(
    series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    key: str,
    title: str,
    caption: str,
    xlabel: str,
    ylabel: str,
    diagonal: bool = False,
    step: bool = False,
) -> Figure:
    """Several (name, x, y) curves on one axis; the data frame keeps every point."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(3.8, 3.4))
    frames = []
    for i, (name, xs, ys) in enumerate(series):
        if step:
            ax.step(xs, ys, where="post", color=color_for(i), lw=1.6, label=plain(name))
        else:
            ax.plot(xs, ys, color=color_for(i), lw=1.6, label=plain(name))
        frames.append(pd.DataFrame({"curve": name, "x": np.asarray(xs), "y": np.asarray(ys)}))
    if diagonal:
        ax.plot([0, 1], [0, 1], color="#999999", lw=1, ls="--")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend(fontsize=7, frameon=False)
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Figure(key, title, caption, _render(fig), data)
