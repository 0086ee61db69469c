"""Figures as data plus picture: every plot keeps the exact table it was drawn from.

Each function returns a `Figure` whose `data` DataFrame holds the plotted numbers, so tests can
check that what is drawn equals what the analysis computed, and the HTML page can embed the PNG.
Users' names are drawn shortened (`oodeval.report.names`); `Figure.labels` pairs each shortened
label with its full name, which the page shows beside the figure.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from oodeval._text import safe_text
from oodeval.measures.domain import measure_label
from oodeval.report.names import FIGURE_WIDTH, short_labels

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
HATCHES: tuple[str, ...] = ("", "//", "..", "xx")
_MORE_COLOURS: tuple[str, ...] = ("#999999", "#332288", "#117733", "#882255", "#44AA99", "#AA4499")
"""Paul Tol's muted colours and a grey: measures beyond those of `MEASURE_COLOURS`."""
_COLOURS = PALETTE + _MORE_COLOURS

MEASURE_COLOURS: dict[str, str] = {
    "worst+gap": PALETTE[0],
    "average": PALETTE[1],
    "worst only": PALETTE[2],
    "gap only": PALETTE[3],
    "scaled worst": PALETTE[4],
    "worst": PALETTE[5],
    "gap": PALETTE[6],
    "ideal": PALETTE[7],
}
"""The one colour of each measure (by label), in every figure of every report: worst+gap is
blue and average orange wherever they are drawn. Other measures take the colours left, in
sorted order of their labels (`series_styles`)."""


def series_styles(values: Sequence[object], first: int = 0) -> dict[str, int]:
    """{value: its style number}: the colour ``_COLOURS[k]``, marker ``MARKERS[k % 8]`` and hatch
    ``HATCHES[k % 4]`` its series is drawn with.

    When every value is a measure label, each measure keeps its colour of `MEASURE_COLOURS`
    whatever the figure and the order its values come in; measures without one take the
    colours left, in sorted order, so the same set of measures is coloured alike in every
    figure. Other values (algorithms, "ERM" / "ideal-best algorithm") are numbered in order
    from `first` (`OTHER_STYLES` keeps them off the measures' colours).

    >>> styles = series_styles(["average", "worst+gap"])
    >>> _COLOURS[styles["worst+gap"]], _COLOURS[styles["average"]]
    ('#0072B2', '#E69F00')
    >>> series_styles(["ERM", "IRM"])
    {'ERM': 0, 'IRM': 1}
    """
    names = [str(v) for v in dict.fromkeys(values)]
    if not names or not all(_is_measure_label(n) for n in names):
        return {n: first + i for i, n in enumerate(names)}
    fixed = {n: _COLOURS.index(MEASURE_COLOURS[n]) for n in names if n in MEASURE_COLOURS}
    free = [k for k in range(len(_COLOURS)) if k not in fixed.values()]
    rest = sorted(n for n in names if n not in fixed)
    fixed.update({n: free[i % len(free)] for i, n in enumerate(rest)})
    return {n: fixed[n] for n in names}


OTHER_STYLES = len(PALETTE)
"""`series_styles`' `first` for series that are not measures, drawn beside measures (Figure 1's
ERM and ideal-best bars): grey and indigo, no measure's colour."""


def _is_measure_label(text: str) -> bool:
    from oodeval.errors import OodevalError
    from oodeval.measures.registry import get_measure, measure_names

    if text in MEASURE_COLOURS or text in {measure_label(n) for n in measure_names()}:
        return True
    try:
        get_measure(text)  # a name or a family member such as cvar:alpha=0.25
    except OodevalError:
        return False
    return True


def _drawn_colours(axes) -> tuple[tuple[str, str], ...]:
    """(legend label, hex colour) of every series as matplotlib drew it, first appearance."""
    from matplotlib.colors import to_hex

    found: dict[str, str] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if hasattr(handle, "patches"):  # a bar container
                colour = handle.patches[0].get_facecolor()
            elif hasattr(handle, "get_facecolor"):  # a scatter's collection
                colour = handle.get_facecolor()[0]
            else:
                colour = handle.get_color()
            found.setdefault(label, to_hex(colour))
    return tuple(found.items())


@dataclass(frozen=True)
class Figure:
    """A rendered plot: PNG bytes, its caption, the exact data it shows, the (shortened
    label, full name) pairs of the names it shows shortened, and the colour of each series."""

    key: str
    title: str
    caption: str
    png: bytes
    data: pd.DataFrame
    labels: tuple[tuple[str, str], ...] = ()
    colours: tuple[tuple[str, str], ...] = ()
    """(legend label, hex colour) of each series as drawn (`MEASURE_COLOURS` for measures)."""

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


def _panels_figure(
    fig,
    axes,
    ylabel: str,
    legend: bool,
    key: str,
    title: str,
    caption: str,
    data: pd.DataFrame,
    labels: _Labels,
) -> Figure:
    """The `Figure` of a row of panels: `ylabel` on the first, the legend (when `legend`) right
    of the last, the series' colours as drawn, the PNG and `data` with a fresh index."""
    axes[0][0].set_ylabel(ylabel)
    if legend:
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    colours = _drawn_colours(axes[0])
    png = _render(fig)
    return Figure(key, title, caption, png, data.reset_index(drop=True), labels.pairs(), colours)


def color_for(i: int) -> str:
    """The i-th palette colour (cycling through `PALETTE`, then the colours after it for a
    style number of `series_styles`)."""
    return _COLOURS[i] if i < len(_COLOURS) else PALETTE[i % len(PALETTE)]


def plain(text: object) -> str:
    """`text` as matplotlib shows it literally: `$` would otherwise start mathtext, and a tab,
    control or bidi character is shown as its `safe_text` escape (no font draws it, and a bidi
    override would reverse the label).

    >>> print(plain("a$b\\u202ec"))
    a\\$b\\u202ec
    """
    return safe_text(text).replace("$", r"\$")


class _Labels:
    """Shortened labels of one figure (distinct per call), remembering which were shortened."""

    def __init__(self, width: int = FIGURE_WIDTH) -> None:
        self.width = width
        self.shortened: dict[str, str] = {}

    def __call__(self, values: Sequence[object]) -> dict[str, str]:
        """{value: label as matplotlib draws it}; multi-line values are shortened line by line."""
        texts = [str(v) for v in values]
        lines = short_labels((ln for v in texts for ln in v.split("\n")), self.width)
        self.shortened.update({full: s for full, s in lines.items() if s != full})
        return {v: "\n".join(plain(lines[ln]) for ln in v.split("\n")) for v in texts}

    def pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((s, full) for full, s in self.shortened.items())


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
    labels = _Labels()
    hue_label = labels([h for h in hues if h is not None])
    panel_label = labels([p for p in panels if p is not None])
    style = series_styles([h for h in hues if h is not None])
    for ax, value in zip(axes[0], panels, strict=True):
        part = data if value is None else data[data[panel] == value]
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#999999", lw=1, ls="--")
        for h in hues:
            i = 0 if h is None else style[str(h)]
            sub = part if h is None else part[part[hue] == h]
            ax.scatter(
                sub[x],
                sub[y],
                s=22,
                color=color_for(i),
                marker=MARKERS[i % len(MARKERS)],
                label=None if h is None else hue_label[str(h)],
                alpha=0.85,
                edgecolor="white",
                linewidth=0.4,
            )
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_xlabel(xlabel)
        if value is not None:
            ax.set_title(f"{plain(panel)} = {panel_label[str(value)]}")
    legend = hue is not None and len(hues) > 1
    return _panels_figure(fig, axes, ylabel, legend, key, title, caption, data, labels)


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
    first_style: int = 0,
) -> Figure:
    """Bars of `value` per `category` (x axis), one coloured bar per `group`, optional panels.

    The y axis starts at 0 and is never shorter than 0.01, so all-zero bars read as zero.
    Groups are coloured by `series_styles` (`first_style`: its `first`).
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
    labels = _Labels()
    cat_label, group_label = labels(cats), labels(groups)
    panel_label = labels([p for p in panels if p is not None])
    slanted = len(cats) > 4 or any(
        len(line) > 12 for c in cats for line in cat_label[str(c)].split("\n")
    )
    style = series_styles(groups, first_style)
    for ax, pv in zip(axes[0], panels, strict=True):
        part = data if pv is None else data[data[panel] == pv]
        for i, g in enumerate(groups):
            k = style[str(g)]
            sub = part[part[group] == g].set_index(category)
            heights = [float(sub[value].get(c, np.nan)) for c in cats]
            bars = ax.bar(
                xs + (i - (len(groups) - 1) / 2) * width,
                heights,
                width,
                label=group_label[str(g)],
                color=color_for(k),
                hatch=HATCHES[k % len(HATCHES)],
                edgecolor="white",
            )
            if len(cats) * len(groups) <= 24:
                ax.bar_label(bars, fmt="%.3f", fontsize=6, padding=1)
        ax.set_xticks(
            xs,
            [cat_label[str(c)] for c in cats],
            rotation=35 if slanted else 0,
            ha="right" if slanted else "center",
        )
        ax.set_ylim(0, max(0.01, 1.15 * top))
        if pv is not None:
            ax.set_title(f"{plain(panel)} = {panel_label[str(pv)]}")
    return _panels_figure(fig, axes, ylabel, True, key, title, caption, data, labels)


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
    labels = _Labels()
    hue_label = labels(hues)
    panel_label = labels([p for p in panels if p is not None])
    style = series_styles(hues)
    for ax, pv in zip(axes[0], panels, strict=True):
        part = data if pv is None else data[data[panel] == pv]
        for h in hues:
            i = style[str(h)]
            sub = part[part[hue] == h].sort_values(x)
            ax.plot(
                sub[x],
                sub[y],
                color=color_for(i),
                lw=1.4,
                label=hue_label[str(h)],
                marker=MARKERS[i % len(MARKERS)] if markers else None,
                ms=4,
            )
        ax.set_xlabel(xlabel)
        if pv is not None:
            ax.set_title(f"{plain(panel)} = {panel_label[str(pv)]}")
    return _panels_figure(fig, axes, ylabel, True, key, title, caption, data, labels)


def bump_chart_figure(ranks: pd.DataFrame, *, label: str, left: str, right: str):
    """The matplotlib figure `bump_chart` renders (open; the caller closes it).

    Layout, so that no two texts overlap whatever the names: each algorithm has its own row per
    column (tied algorithms share a rank but take consecutive rows, ordered by name), its label
    reads "name  rank" left of the left column and "rank  name" right of the right column, so
    the rank numbers sit between the names and the lines; the column headers stand above the
    labels on their own side, and the axis title above the headers. There are no ticks or axis
    labels to collide with; names are shortened to `FIGURE_WIDTH` characters (distinct).
    """
    plt = _pyplot()
    n = len(ranks)
    names = _Labels()(ranks[label])
    height = 0.3 * n + 0.8
    fig, ax = plt.subplots(figsize=(2.0, height))
    fig.subplots_adjust(left=0.05, right=0.95, top=1 - 0.6 / height, bottom=0.15 / height)
    rows = {}
    for column in (left, right):
        order = sorted(range(n), key=lambda k: (ranks[column].iloc[k], str(ranks[label].iloc[k])))
        rows[column] = {k: slot + 1 for slot, k in enumerate(order)}
    for k in range(n):
        name, colour = names[str(ranks[label].iloc[k])], color_for(k)
        y0, y1 = rows[left][k], rows[right][k]
        ax.plot([0, 1], [y0, y1], color=colour, lw=1.8, marker="o", ms=5)
        r0, r1 = (int(ranks[c].iloc[k]) for c in (left, right))
        text = {"va": "center", "fontsize": 8, "textcoords": "offset points"}
        ax.annotate(f"{name}  {r0}", (0, y0), xytext=(-7, 0), ha="right", **text)
        ax.annotate(f"{r1}  {name}", (1, y1), xytext=(7, 0), ha="left", **text)
    head = {"xycoords": ("data", "axes fraction"), "textcoords": "offset points", "va": "bottom"}
    for x, column, dx, ha in ((0, left, -7, "right"), (1, right, 7, "left")):
        ax.annotate(
            plain(measure_label(column)),
            (x, 1),
            xytext=(dx, 6),
            ha=ha,
            weight="bold",
            fontsize=8,
            **head,
        )
    ax.set_title("rank (1 = lowest error)", fontsize=8, pad=24)
    ax.set_xlim(-0.04, 1.04)
    ax.set_ylim(n + 0.5, 0.5)
    ax.axis("off")
    return fig


def bump_chart(
    ranks: pd.DataFrame, *, label: str, left: str, right: str, key: str, title: str, caption: str
) -> Figure:
    """Lines joining each algorithm's rank under `left` to its rank under `right` (1 = best).

    Laid out by `bump_chart_figure`; the data are `ranks` as given.
    """
    fig = bump_chart_figure(ranks, label=label, left=left, right=right)
    pairs = _Labels()
    pairs(ranks[label])
    return Figure(key, title, caption, _render(fig), ranks.reset_index(drop=True), pairs.pairs())


def heatmap(matrix: pd.DataFrame, *, key: str, title: str, caption: str, colorbar: str) -> Figure:
    """A heat map of a numeric matrix (rows x columns), values printed when it is small."""
    plt = _pyplot()
    rows, cols = matrix.shape
    fig, ax = plt.subplots(figsize=(min(0.45 * cols + 2.5, 14), 0.35 * rows + 1.5))
    values = matrix.to_numpy(dtype=float)
    im = ax.imshow(values, aspect="auto", cmap="cividis", interpolation="nearest")
    labels = _Labels()
    row_label = labels(matrix.index)
    ax.set_yticks(range(rows), [row_label[str(r)] for r in matrix.index])
    step = max(1, cols // 30)
    column_label = _Labels(12)
    shown = column_label(matrix.columns[::step])
    labels.shortened.update(column_label.shortened)
    ax.set_xticks(
        range(0, cols, step),
        [shown[str(c)] for c in matrix.columns[::step]],
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
    return Figure(key, title, caption, _render(fig), tidy.reset_index(), labels.pairs())


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
    labels = _Labels()
    name_label = labels([name for name, _, _ in series])
    for i, (name, xs, ys) in enumerate(series):
        if step:
            ax.step(xs, ys, where="post", color=color_for(i), lw=1.6, label=name_label[str(name)])
        else:
            ax.plot(xs, ys, color=color_for(i), lw=1.6, label=name_label[str(name)])
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
    return Figure(key, title, caption, _render(fig), data, labels.pairs())
