"""Ratio study: every open-world metric against the base:new sample ratio of the test set.

Property P3 of the OpenworldAUC paper (Section 3, Figure 2): a metric for open-world recognition
should not change when only the proportion of base to new test samples changes. OverallAcc is a
sample-weighted mix of the base and new domains, so it moves with the ratio; HM, AUROC and
OpenworldAUC are per-domain or pairwise averages, so (up to subsampling noise) they do not.
`ratio_study` resamples the same predictions to each ratio (`resample_to_ratio`: per-class
proportional subsampling, seeded) and scores every resample with `openworld_scores`.
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
    ratios : iterable of ratios such as ``"1:5"``, ``"Fwd"``, ``(5, 1)``
    repeats : int
        Resamples per ratio.

    Returns
    -------
    list of dicts, one per ratio: ``ratio``, ``n_base``, ``n_new``, and for each metric in
    `METRICS` its mean under the metric's name and its standard deviation (ddof=0) under
    ``<metric>_std``.

    Examples
    --------
    >>> probs = np.array([[0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.1, 0.9]] * 10)
    >>> rows = ratio_study(probs, [0, 0, 1, 1] * 10, [0], ["1:2", "2:1"], repeats=2)
    >>> [(r["ratio"], r["n_base"], r["n_new"], r["openworld_auc"]) for r in rows]
    [('1:2', 10, 20, 1.0), ('2:1', 20, 10, 1.0)]
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
            "n_base": int(is_base[idx].sum()),
            "n_new": int((~is_base[idx]).sum()),
        }
        for m in METRICS:
            values = np.array([d[m] for d in draws], dtype=np.float64)
            row[m] = float(values.mean())
            row[f"{m}_std"] = float(values.std())
        rows.append(row)
    return rows


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


def ratio_table_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and string cells of the ratio table: one line per ratio, mean+-std of every
    metric, then the spread line (`oodeval.tables` renders them)."""
    shown = [m for m in METRICS if rows and m in rows[0]]
    header = ["ratio", "n_base", "n_new", *shown]
    lines = []
    for r in rows:
        cells = [str(r["ratio"]), str(r["n_base"]), str(r["n_new"])]
        for m in shown:
            value, std = float(r[m]), float(r.get(f"{m}_std", 0.0))
            cells.append("nan" if not np.isfinite(value) else f"{value:.4f}+-{std:.4f}")
        lines.append(cells)
    spread = ratio_spread(rows)
    lines.append(["spread", "", "", *(f"{spread.get(m, float('nan')):.4f}" for m in shown)])
    return header, lines


def format_ratio_table(rows: Sequence[dict[str, Any]]) -> str:
    """Plain-text ratio table (every column right-aligned), as `oodeval openworld ratio-study`."""
    from oodeval.tables import text_table

    header, cells = ratio_table_cells(rows)
    return text_table(header, cells, right=[True] * len(header))
