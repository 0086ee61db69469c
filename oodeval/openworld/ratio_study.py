"""Ratio study: every open-world metric against the base:new sample ratio of the test set.

Property P3 of the OpenworldAUC paper (Section 3, Figure 2): a metric for open-world recognition
should not change when only the proportion of base to new test samples changes. OverallAcc is a
sample-weighted mix of the base and new domains, so it moves with the ratio; HM, AUROC and
OpenworldAUC are per-domain or pairwise averages, so (up to subsampling noise) they do not.
`ratio_study` resamples the same predictions to each ratio (`resample_to_ratio`: per-class
proportional subsampling, seeded) and scores every resample with `openworld_scores`.

By default the ratios are the paper's Tables 11-12 (App. D.3): new/base = 10, 5, 3, 2, 1, 0.7,
0.5, 0.3, 0.2, 0.1 (base:new 1:10 ... 10:1), and `ratio_summary` gives what those tables print
below them: each metric's mean over the ratios and its variance with ddof = 1 (the sample
variance; recomputing Table 11's "Variance" row from its ten rows gives the printed values with
ddof = 1, e.g. OverallAcc 89.13, and not with ddof = 0, 80.22). As in App. D.3, a ratio keeps
every sample of the domain it favours (new/base > 1: every new sample) and subsamples the other,
when the full test set has at most that ratio of the favoured domain; in general each ratio is
the largest subsample at that ratio (`resample_to_ratio`), the counts rounded down.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import as_class_ids
from oodeval.measures.openworld import openworld_scores
from oodeval.openworld.base_new import (
    DEFAULT_RATIOS,
    format_ratio,
    parse_ratio,
    resample_to_ratio,
)

#: Most resamples per ratio (``--n-repeats``): the spread of a mean settles long before, and a
#: mistyped count is refused instead of running for hours (each repeat scores a resample).
MAX_REPEATS = 1000
METRICS = ("overall_acc", "hm", "base_acc", "new_acc", "auroc", "openworld_auc")
#: ddof of the variance over ratios, as the "Variance" rows of the paper's Tables 11-12.
PAPER_DDOF = 1


def _rows_of(x: Any, idx: np.ndarray) -> Any:
    return None if x is None else np.asarray(x)[idx]


def ratio_study(
    outputs: Any,
    labels: Any,
    base_classes: Iterable[int],
    ratios: Iterable[str | Sequence[float]] = DEFAULT_RATIOS,
    *,
    repeats: int = 5,
    seed: int = 0,
    n_total: int | None = None,
    logits: bool = False,
    detector_scores: Any = None,
    base_predictions: Any = None,
    new_predictions: Any = None,
    tie: float = 0.5,
) -> list[dict[str, float | int | str]]:
    """Score the predictions resampled to each base:new ratio; mean and std over `repeats` draws.

    Repeat ``i`` of every ratio uses the seed ``seed + i``. Arguments after `ratios` that are not
    about resampling are passed to `openworld_scores` (rows selected alongside).

    Parameters
    ----------
    outputs : array-like of shape (n, C) or None
        Probabilities (or logits with ``logits=True``) over all classes.
    labels : array-like of shape (n,)
    base_classes : iterable of int
    ratios : iterable of base:new ratios such as ``"1:5"``, ``"Fwd"`` (5:1), ``(5, 1)``
        Default: the paper's ten (`oodeval.openworld.base_new.PAPER_RATIOS`).
    repeats : int
        Resamples per ratio.

    Returns
    -------
    list of dicts, one per ratio: ``ratio`` (base:new), ``new_per_base`` (the new/base number of
    the paper's tables), ``n_base``, ``n_new``, and for each metric in `METRICS` its mean over
    the repeats under the metric's name and its standard deviation over them (ddof=0) under
    ``<metric>_std``.

    Examples
    --------
    >>> probs = np.array([[0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.1, 0.9]] * 10)
    >>> rows = ratio_study(probs, [0, 0, 1, 1] * 10, [0], ["1:2", "2:1"], repeats=2)
    >>> [(r["ratio"], r["new_per_base"], r["n_base"], r["n_new"], r["openworld_auc"]) for r in rows]
    [('1:2', 2.0, 10, 20, 1.0), ('2:1', 0.5, 20, 10, 1.0)]
    """
    y = as_class_ids(labels, "labels")
    base = [int(c) for c in base_classes]
    if not 1 <= repeats <= MAX_REPEATS:
        raise OodevalError(f"repeats must lie in [1, {MAX_REPEATS:,}], got {repeats:,}")
    parsed = [parse_ratio(r) for r in ratios]
    if not parsed:
        raise OodevalError("give at least one ratio, e.g. 1:5,1:1,5:1")
    is_base = np.isin(y, base)
    rows: list[dict[str, float | int | str]] = []
    for ratio in parsed:
        draws = []
        for i in range(repeats):
            idx = resample_to_ratio(y, base, ratio, seed=seed + i, n_total=n_total)
            draws.append(
                openworld_scores(
                    _rows_of(outputs, idx),
                    y[idx],
                    base,
                    logits=logits,
                    detector_scores=_rows_of(detector_scores, idx),
                    base_predictions=_rows_of(base_predictions, idx),
                    new_predictions=_rows_of(new_predictions, idx),
                    tie=tie,
                )
            )
        row: dict[str, float | int | str] = {
            "ratio": format_ratio(ratio),
            "new_per_base": ratio[1] / ratio[0],
            "n_base": int(is_base[idx].sum()),
            "n_new": int((~is_base[idx]).sum()),
        }
        for m in METRICS:
            values = np.array([d[m] for d in draws], dtype=np.float64)
            row[m] = float(values.mean())
            row[f"{m}_std"] = float(values.std())
        rows.append(row)
    return rows


def ratio_study_of_arrays(
    arrays: dict[str, np.ndarray],
    base_classes: Iterable[int],
    ratios: Iterable[str | Sequence[float]],
    *,
    repeats: int = 5,
    seed: int = 0,
) -> list[dict[str, float | int | str]]:
    """`ratio_study` of a predictions file's arrays (`oodeval.results.read_predictions`).

    The model outputs are ``probs``, else ``logits``; ``scores``, ``base_predictions`` and
    ``new_predictions`` are the separately scored form. ``labels`` is required.

    >>> arrays = {"probs": np.array([[0.8, 0.2], [0.3, 0.7]] * 10), "labels": np.array([0, 1] * 10)}
    >>> [r["ratio"] for r in ratio_study_of_arrays(arrays, [0], ["1:1"], repeats=1)]
    ['1:1']
    """
    outputs_name = "probs" if "probs" in arrays else "logits" if "logits" in arrays else None
    return ratio_study(
        arrays.get(outputs_name) if outputs_name else None,
        arrays["labels"],
        base_classes,
        ratios,
        repeats=repeats,
        seed=seed,
        logits=outputs_name == "logits",
        detector_scores=arrays.get("scores"),
        base_predictions=arrays.get("base_predictions"),
        new_predictions=arrays.get("new_predictions"),
    )


def ratio_spread(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """For each metric, max minus min of its mean over the ratios (0 = ratio-insensitive).

    Examples
    --------
    >>> ratio_spread([{"hm": 0.5, "auroc": 0.9}, {"hm": 0.7, "auroc": 0.9}])
    {'hm': 0.2, 'auroc': 0.0}
    """
    out = {}
    for m in METRICS:
        values = [float(r[m]) for r in rows if m in r and np.isfinite(float(r[m]))]
        if values:
            out[m] = round(max(values) - min(values), 12)
    return out


def ratio_summary(
    rows: Sequence[dict[str, Any]], *, ddof: int = PAPER_DDOF
) -> dict[str, dict[str, float]]:
    """Each metric's mean and variance over the ratios: the rows below Tables 11-12.

    ``mean = sum(v_i) / k`` and ``variance = sum((v_i - mean)^2) / (k - ddof)`` over the k
    ratios' values v_i (each a ratio's mean over its repeats); ``ddof=1`` (default) is the
    sample variance the OpenworldAUC paper prints, ``ddof=0`` the population variance. A metric
    that is NaN at some ratio (OverallAcc without outputs over all classes) gets NaN; so does
    the variance of fewer than ``ddof + 1`` ratios.

    Returns
    -------
    ``{"mean": {metric: value}, "variance": {metric: value}}`` for the metrics in `METRICS`
    that the rows hold.

    Examples
    --------
    >>> s = ratio_summary([{"hm": 0.5}, {"hm": 0.7}, {"hm": 0.6}])
    >>> round(s["mean"]["hm"], 12), round(s["variance"]["hm"], 12)
    (0.6, 0.01)
    >>> round(ratio_summary([{"hm": 0.5}, {"hm": 0.7}, {"hm": 0.6}], ddof=0)["variance"]["hm"], 6)
    0.006667
    """
    if ddof not in (0, 1):
        raise OodevalError(f"ddof must be 0 or 1, got {ddof!r}")
    shown = [m for m in METRICS if rows and all(m in r for r in rows)]
    mean: dict[str, float] = {}
    variance: dict[str, float] = {}
    for m in shown:
        values = np.array([float(r[m]) for r in rows], dtype=np.float64)
        mean[m] = float(values.mean())
        enough = values.size > ddof and np.all(np.isfinite(values))
        variance[m] = float(values.var(ddof=ddof)) if enough else float("nan")
    return {"mean": mean, "variance": variance}


def summary_note(n_ratios: int, repeats: int | None = None, *, ddof: int = PAPER_DDOF) -> str:
    """The two lines printed under the ratio table: what its rows and columns are.

    Examples
    --------
    >>> print(summary_note(10, 5))  # doctest: +NORMALIZE_WHITESPACE
    mean, variance: over the 10 ratios of each ratio's mean of 5 resample(s); variance with
    ddof = 1 (sample variance), as Tables 11-12 of the OpenworldAUC paper.
    base:new = base samples to new samples; new/base = new per base, the paper's ratio.
    """
    per_ratio = (
        f"each ratio's mean of {repeats} resample(s)"
        if repeats
        else "each ratio's value (its mean over the resamples)"
    )
    kind = "ddof = 1 (sample variance)" if ddof == 1 else "ddof = 0 (population variance)"
    paper = ", as Tables 11-12 of the OpenworldAUC paper" if ddof == PAPER_DDOF else ""
    return (
        f"mean, variance: over the {n_ratios} ratios of {per_ratio}; variance with {kind}{paper}.\n"
        "base:new = base samples to new samples; new/base = new per base, the paper's ratio."
    )


def _variance_label(ddof: int) -> str:
    return f"variance (ddof={ddof})"


def ratio_table_cells(
    rows: Sequence[dict[str, Any]], *, ddof: int = PAPER_DDOF
) -> tuple[list[str], list[list[str]]]:
    """Header and string cells of the ratio table: one line per ratio (mean+-std over the
    repeats of every metric), then each metric's mean and variance over the ratios
    (`ratio_summary`), as the paper's Tables 11-12; `oodeval.tables` renders them."""
    shown = [m for m in METRICS if rows and m in rows[0]]
    header = ["base:new", "new/base", "n_base", "n_new", *shown]
    lines = []
    for r in rows:
        cells = [
            str(r["ratio"]),
            f"{float(r['new_per_base']):g}",
            str(r["n_base"]),
            str(r["n_new"]),
        ]
        for m in shown:
            value, std = float(r[m]), float(r.get(f"{m}_std", 0.0))
            cells.append("nan" if not np.isfinite(value) else f"{value:.4f}+-{std:.4f}")
        lines.append(cells)
    summary = ratio_summary(rows, ddof=ddof)
    for label, key, spec in (("mean", "mean", ".4f"), (_variance_label(ddof), "variance", ".6f")):
        values = summary[key]
        lines.append([label, "", "", "", *(f"{values.get(m, float('nan')):{spec}}" for m in shown)])
    return header, lines


def ratio_frame_rows(
    rows: Sequence[dict[str, Any]], *, ddof: int = PAPER_DDOF
) -> list[dict[str, Any]]:
    """The rows of the CSV/JSON output: one per ratio, then a ``mean`` and a ``variance
    (ddof=1)`` row (the label in ``ratio``) holding each metric's `ratio_summary`."""
    summary = ratio_summary(rows, ddof=ddof)
    out = [dict(r) for r in rows]
    for label, key in (("mean", "mean"), (_variance_label(ddof), "variance")):
        out.append({"ratio": label, **summary[key]})
    return out


def format_ratio_table(rows: Sequence[dict[str, Any]], *, repeats: int | None = None) -> str:
    """Plain-text ratio table (every column right-aligned) and its note, as `oodeval openworld
    ratio-study` prints it."""
    from oodeval.tables import text_table

    header, cells = ratio_table_cells(rows)
    table = text_table(header, cells, right=[True] * len(header))
    return f"{table}\n{summary_note(len(rows), repeats)}"
