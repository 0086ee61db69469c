"""One line per study: what it shows about worst+gap against average, on correlation with the
ideal measure and on the algorithm each one selects, with the intervals that say how sure it is.

The line is computed from the study's stored errors, as every table of `study analyze` is:

- correlation: per scenario, Spearman's rho with the ideal measure of worst+gap and of average
  (the mean over seeds, Table 1) and the paired bootstrap interval of their difference over
  algorithms (the verdict of `study analyze`, `oodeval.study.analysis.correlation_verdicts`);
- selection: over the (scenario, seed) cells, the mean selection degradation of each measure
  (Section 6.1) and the 95% percentile bootstrap interval of the mean of their per-cell
  difference, cells drawn with replacement (counted only from `MIN_SELECTION_CELLS` cells); and
  the algorithm the ideal measure selects most
  often, with how often each measure selects it.

The line says the study is *too small to separate the measures* when it has fewer than
`MIN_SELECTION_CELLS` (scenario, seed) cells, whatever its intervals say (an interval over the
algorithms of one seed cannot tell the measures from the noise of training), or when no interval
excludes 0.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from oodeval.limits import check_resamples, check_seed
from oodeval.measures import meta
from oodeval.study.analysis.paper import correlatable, correlation_verdicts, study_unit_measures

__all__ = [
    "MIN_SELECTION_CELLS",
    "SUMMARY_MEASURES",
    "TOO_SMALL",
    "degradation_difference",
    "study_summary",
]

#: The two measures a summary compares: the paper's proposal, then the usual practice.
SUMMARY_MEASURES = ("worst_plus_gap", "average")
#: What a summary says when no interval excludes 0.
TOO_SMALL = "too small to separate the measures"
#: Fewest cells for a selection interval to count: below 6 no test of the sign of the per-cell
#: differences can reach p < 0.05 (the exact signed-rank test's smallest p is 2 / 2^n), and a
#: percentile bootstrap of so few values excludes 0 whenever they share a sign.
MIN_SELECTION_CELLS = 6


def degradation_difference(
    cells: pd.DataFrame, *, n_resamples: int = meta.BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """Mean over cells of degradation(worst+gap) - degradation(average), and its 95% percentile
    bootstrap interval (cells drawn with replacement, `n_resamples` draws seeded by `seed`).

    `cells` has one row per cell with columns ``worst_plus_gap`` and ``average`` (the
    degradations).

    >>> cells = pd.DataFrame({"worst_plus_gap": [0.25, 0.5, 0.0], "average": [0.0, 0.0, 0.0]})
    >>> mean, low, high = degradation_difference(cells, n_resamples=500)
    >>> mean, 0.0 <= low <= mean <= high <= 0.5
    (0.25, True)
    """
    check_resamples(n_resamples, "n_resamples", minimum=1)
    check_seed(seed, "seed")
    d = (cells["worst_plus_gap"] - cells["average"]).to_numpy(np.float64)
    draws = np.random.default_rng(seed).integers(0, d.size, size=(n_resamples, d.size))
    boot = d[draws].mean(axis=1)
    low, high = np.quantile(boot, [(1 - meta.CONFIDENCE) / 2, (1 + meta.CONFIDENCE) / 2])
    return float(d.mean()), float(low), float(high)


def _label(frame: pd.DataFrame) -> dict[str, str]:
    """Scenario -> a short name: its ratio when every scenario has one and one scale."""
    first = frame.drop_duplicates("scenario")
    short = first["ratio"].astype(str)
    if short.eq("").any() or first["scale"].nunique(dropna=False) > 1 or short.duplicated().any():
        short = first["scenario"].astype(str)
    return dict(zip(first["scenario"], short, strict=True))


def _correlation_text(frame: pd.DataFrame, n_resamples: int, seed: int) -> tuple[str, bool]:
    v = correlation_verdicts(frame, n_resamples=n_resamples, seed=seed)
    v = v[v["verdict"] != "undefined"]
    if v.empty:
        return "correlation with the ideal measure: undefined (too few algorithms)", False
    label = _label(frame)
    ahead = int((v["difference"] > 0).sum())
    clear = v[v["verdict"].str.startswith("clearly")]
    per = ", ".join(
        f"{label[s]} {a:+.2f} vs {b:+.2f}"
        for s, a, b in zip(v["scenario"], v["rho_worst_plus_gap"], v["rho_average"], strict=True)
    )
    text = (
        f"rho with the ideal measure, worst+gap vs average: {per}; worst+gap ahead in "
        f"{ahead} of {len(v)}"
    )
    if clear.empty:
        low, high = v["difference_low"].min(), v["difference_high"].max()
        text += f", no scenario clearly (every difference's 95% interval covers 0: {low:+.2f} "
        text += f"to {high:+.2f})"
    else:
        parts = ", ".join(
            f"{'ahead' if d > 0 else 'behind'} at {label[s]} by {d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
            for s, d, lo, hi in zip(
                clear["scenario"],
                clear["difference"],
                clear["difference_low"],
                clear["difference_high"],
                strict=True,
            )
        )
        text += f", clearly {parts}"
    return text, not clear.empty


def _selection_text(frame: pd.DataFrame, n_resamples: int, seed: int) -> tuple[str, bool]:
    chosen = pd.DataFrame(meta.choices(frame, [*SUMMARY_MEASURES, "ideal"]))
    cells = chosen.pivot_table(
        index=["scenario", "seed"], columns="measure", values="degradation", sort=False
    )
    mean, low, high = degradation_difference(cells, n_resamples=n_resamples, seed=seed)
    n = len(cells)
    wg, avg = cells["worst_plus_gap"].mean(), cells["average"].mean()
    clear = n >= MIN_SELECTION_CELLS and (low > 0 or high < 0)
    lower = "worst+gap's" if mean < 0 else "average's"
    if clear:
        how = f": {lower} lower, clearly)"
    elif n < MIN_SELECTION_CELLS:
        how = f"; fewer than {MIN_SELECTION_CELLS} cells, too few to tell)"
    else:
        how = ", the interval covers 0)"
    text = (
        f"selection degradation over {n} cells, worst+gap {wg:.2f} vs average {avg:.2f} "
        f"(difference {mean:+.2f} [{low:+.2f}, {high:+.2f}]{how}"
    )
    picks = chosen.pivot_table(
        index=["scenario", "seed"], columns="measure", values="selected", aggfunc="first"
    )
    favourite, times = Counter(picks["ideal"]).most_common(1)[0]
    of = {m: int((picks[m] == favourite).sum()) for m in SUMMARY_MEASURES}
    text += (
        f"; {favourite} is the ideal measure's choice in {times} of {n} cells, worst+gap's in "
        f"{of['worst_plus_gap']} and average's in {of['average']}"
    )
    return text, clear


def study_summary(study: Any, *, n_resamples: int = meta.BOOTSTRAP_RESAMPLES, seed: int = 0) -> str:
    """What `study` (a loaded `oodeval.study.Study`) shows about worst+gap against average, in
    one line: its size, then correlation and selection with their intervals, `TOO_SMALL` first
    when the study is too small or no interval excludes 0 (see the module docstring)."""
    frame = correlatable(study_unit_measures(study, list(SUMMARY_MEASURES)))
    n_alg = frame["algorithm"].nunique()
    n_scen = frame["scenario"].nunique()
    n_seeds = frame["seed"].nunique()
    size = (
        f"{n_alg} algorithms, {n_scen} scenario{'s' if n_scen != 1 else ''} x {n_seeds} "
        f"seed{'s' if n_seeds != 1 else ''}"
    )
    correlation, clear_rho = _correlation_text(frame, n_resamples, seed)
    selection, clear_pick = _selection_text(frame, n_resamples, seed)
    n_cells = len(frame.drop_duplicates(["scenario", "seed"]))
    if n_cells < MIN_SELECTION_CELLS:
        verdict = f"{TOO_SMALL} ({n_cells} cells, fewer than {MIN_SELECTION_CELLS}): "
    else:
        verdict = "" if clear_rho or clear_pick else f"{TOO_SMALL}: "
    return f"{size}: {verdict}{correlation}; {selection}"
