"""The OpenworldAUC suite: open-world metrics from the OpenworldAUC paper.

An open-world model has three parts (Sec. 2 of the OpenworldAUC paper): a base-to-new detector
``r`` (larger ``r(x)`` means "more likely a base-class sample"), a base-domain classifier ``g``
(argmax over the base classes) and a new-domain classifier ``h`` (argmax over the new classes).
This module scores them with

- ``openworld_auc`` -- Prop. 4.2 / App. C.5: the fraction of (base, new) pairs where ``g`` is right
  on the base sample, ``r`` ranks the base sample above the new one, and ``h`` is right on the new
  sample; counted exactly in O(n log n) by sorting, never by moving misclassified scores to
  ``min - eps`` (that trick breaks when the detector separates the sets or scores are large);
- ``auroc`` -- Sec. 3.3, base samples as the positive class;
- ``openworld_curve`` -- the MissRate_b(t) / HitRate_n(t) curve of Sec. 4.2 whose area is
  OpenworldAUC;
- ``openworld_summary`` (from per-sample correctness) and ``openworld_scores`` (from model outputs
  over all classes, Algorithm 1 of App. C.3): BaseAcc, NewAcc, HM (Sec. 3.1), OverallAcc (Sec. 3.2),
  AUROC and OpenworldAUC.

Ties: a (base, new) pair with equal detector scores counts ``tie`` (0.5 by default, the AUROC
convention; ``tie=0`` is the strict inequality written in the paper). Scores may lie in any real
range and are compared exactly as given, so no tie is created or broken: floats as float64
(float16/float32 convert exactly), integers as integers (int64, uint64: float64 would merge
neighbours beyond 2**53), and integers against floats by exact keys. Inputs that cannot be kept
exact are refused (long doubles float64 would round; a list numpy would read as rounded floats).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import (
    as_bool_array,
    as_class_ids,
    as_float_array,
    as_real_array,
    check_same_length,
)

__all__ = [
    "auroc",
    "openworld_auc",
    "ScoredSamples",
    "openworld_curve",
    "openworld_scored_samples",
    "openworld_scores",
    "openworld_summary",
]

# Probability rows may be rounded (CSV files, float16); anything further from 1 is not a softmax
# over all classes (logits, a softmax over the base classes only, per-class sigmoids).
_ROW_SUM_TOLERANCE = 1e-2
_PROB_RANGE_TOLERANCE = 1e-6


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _check_tie(tie: Any) -> float:
    try:
        value = float(tie)
    except (TypeError, ValueError):
        raise OodevalError(f"tie must be a number in [0, 1], got {tie!r}") from None
    if not (0.0 <= value <= 1.0):
        raise OodevalError(f"tie must be a number in [0, 1] (0.5 = AUROC convention), got {tie!r}")
    return value


def _scores(x: Any, name: str) -> np.ndarray:
    arr = as_real_array(x, name, ndim=1)
    if arr.size == 0:
        raise OodevalError(
            f"{name} is empty; the open-world metrics need at least one base and one new sample"
        )
    return arr


def _scored_inputs(
    base_scores: Any, new_scores: Any, base_correct: Any, new_correct: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    base = _scores(base_scores, "base_scores")
    new = _scores(new_scores, "new_scores")
    base_ok = as_bool_array(base_correct, "base_correct")
    new_ok = as_bool_array(new_correct, "new_correct")
    check_same_length(base_scores=base, base_correct=base_ok)
    check_same_length(new_scores=new, new_correct=new_ok)
    return base, new, base_ok, new_ok


# --------------------------------------------------------------------------------------------
# exact comparison keys and pair counting
# --------------------------------------------------------------------------------------------

_INT64_MAX = np.iinfo(np.int64).max


def _comparable(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays (float64, int64 or uint64) in one dtype that orders and ties them exactly.

    Floats stay float64; integers become int64, or uint64 when none is negative; integers of at
    most 2**53 in magnitude join floats as float64 (exact). Otherwise (integers beyond 2**53
    against floats, or negative integers against integers above int64's range) every value
    gets its rank among all of them, from exact keys (see `_exact_ranks`).
    """
    kinds = {a.dtype.kind for a in arrays}
    if kinds == {"f"}:
        return arrays
    sized = [a for a in arrays if a.size]
    if kinds <= {"i", "u"}:
        if all(a.dtype.kind == "i" or a.max() <= _INT64_MAX for a in sized):
            return tuple(a.astype(np.int64, copy=False) for a in arrays)
        if all(a.dtype.kind == "u" or a.min() >= 0 for a in sized):
            return tuple(a.astype(np.uint64, copy=False) for a in arrays)
    elif all(a.dtype.kind == "f" or -(2**53) <= a.min() and a.max() <= 2**53 for a in sized):
        return tuple(a.astype(np.float64, copy=False) for a in arrays)
    return _exact_ranks(arrays)


def _exact_ranks(arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Dense int64 ranks of the values of all `arrays` together, compared exactly.

    Each value v gets the key (f, v - f) with f = float64(v) (v itself for a float). Rounding to
    the nearest float64 never reverses an order, so v < w exactly iff f_v < f_w, or f_v == f_w
    and v - f_v < w - f_w; the residual v - f is an integer below 2**11 in magnitude, computed
    exactly modulo 2**64 (see `_residual`).
    """
    nearest = [a.astype(np.float64) for a in arrays]
    residual = [
        _residual(a, f) if a.dtype.kind in "iu" else np.zeros(a.size, np.int64)
        for a, f in zip(arrays, nearest, strict=True)
    ]
    f, r = np.concatenate(nearest), np.concatenate(residual)
    order = np.lexsort((r, f))
    f, r = f[order], r[order]
    new_key = np.concatenate([[False], (f[1:] != f[:-1]) | (r[1:] != r[:-1])])
    ranks = np.empty(order.size, np.int64)
    ranks[order] = np.cumsum(new_key)
    return tuple(np.split(ranks, np.cumsum([a.size for a in arrays])[:-1]))


def _residual(values: np.ndarray, nearest: np.ndarray) -> np.ndarray:
    """``values - nearest`` exactly, for 64-bit integers and their nearest float64s.

    Both are taken modulo 2**64 as uint64 (`nearest` is an integer in [-2**63, 2**64]); the
    wrapped difference is the true one, which is far inside int64 (|residual| <= 2**10).
    """
    wrapped = np.where(nearest >= 2.0**64, 0.0, nearest)  # 2**64 = 0 modulo 2**64
    high = wrapped >= 2.0**63
    low = np.where(high, wrapped - 2.0**63, wrapped).astype(np.int64).view(np.uint64)
    as_uint = low + np.where(high, np.uint64(2**63), np.uint64(0))
    return (values.view(np.uint64) - as_uint).view(np.int64)


def _pair_counts(pos: np.ndarray, neg: np.ndarray) -> tuple[int, int]:
    """Return (#pairs with pos > neg, #pairs with pos == neg) in O(n log n) time, O(n) memory.

    Both sides are sorted; for each positive score, searchsorted gives how many negatives lie
    strictly below it (side="left") and at or below it (side="right"). Sorted keys make
    searchsorted walk the array forward, which is much faster than random queries.
    """
    if pos.size == 0 or neg.size == 0:
        return 0, 0
    pos_sorted = np.sort(pos)
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos_sorted, side="left")
    at_or_below = np.searchsorted(neg_sorted, pos_sorted, side="right")
    greater = int(below.sum(dtype=np.int64))
    equal = int(at_or_below.sum(dtype=np.int64)) - greater
    return greater, equal


def _pair_fraction(greater: int, equal: int, tie: float, n_pairs: int) -> float:
    # Integer counts and Fraction keep the ratio exact; float() rounds once, correctly.
    return float((Fraction(greater) + Fraction(tie) * equal) / n_pairs)


# --------------------------------------------------------------------------------------------
# metrics on detector scores and per-sample correctness
# --------------------------------------------------------------------------------------------


def openworld_auc(
    base_scores: Any,
    new_scores: Any,
    base_correct: Any,
    new_correct: Any,
    *,
    tie: float = 0.5,
) -> float:
    """Return OpenworldAUC: joint rate of right detection and right classification over pairs.

    Prop. 4.2 and App. C.5 of the OpenworldAUC paper::

        OWAUC = 1/(N_b N_n) * sum_{b, n} 1[g right on x_b] * 1[r(x_b) > r(x_n)] * 1[h right on x_n]

    with a tied pair ``r(x_b) == r(x_n)`` counting ``tie``. With ``tie=0.5`` this equals
    ``BaseAcc * NewAcc * AUROC(correct base vs correct new)``, and it is 0 when either correct set
    is empty. Computed exactly by sorting: O(n log n) time, O(n) memory.

    Parameters
    ----------
    base_scores : array-like of shape (N_b,)
        Detector scores r(x) of the base-class samples (larger = more base-like); any real range.
    new_scores : array-like of shape (N_n,)
        Detector scores of the new-class samples.
    base_correct : array-like of bool (or 0/1) of shape (N_b,)
        Whether the base classifier g classified each base sample correctly.
    new_correct : array-like of bool (or 0/1) of shape (N_n,)
        Whether the new classifier h classified each new sample correctly.
    tie : float in [0, 1], default 0.5
        Credit for a pair with equal scores (0 = the paper's strict inequality).

    Returns
    -------
    float in [0, 1]

    Examples
    --------
    >>> openworld_auc([0.9, 0.8, 0.3], [0.5, 0.2], [True, True, False], [True, False])
    0.3333333333333333
    """
    base, new, base_ok, new_ok = _scored_inputs(base_scores, new_scores, base_correct, new_correct)
    tie = _check_tie(tie)
    base, new = _comparable(base, new)
    greater, equal = _pair_counts(base[base_ok], new[new_ok])
    return _pair_fraction(greater, equal, tie, base.size * new.size)


def auroc(base_scores: Any, new_scores: Any, *, tie: float = 0.5) -> float:
    """Return the base-vs-new AUROC of the detector, base samples as the positive class.

    Sec. 3.3 of the OpenworldAUC paper: ``AUROC = 1/(N_b N_n) * sum_{b, n} 1[r(x_b) > r(x_n)]``,
    with tied pairs counting ``tie`` (0.5 by default, as in ``sklearn.metrics.roc_auc_score``).

    Parameters
    ----------
    base_scores : array-like of shape (N_b,)
        Detector scores of the base-class samples (larger = more base-like).
    new_scores : array-like of shape (N_n,)
        Detector scores of the new-class samples.
    tie : float in [0, 1], default 0.5
        Credit for a pair with equal scores.

    Returns
    -------
    float in [0, 1]

    Examples
    --------
    >>> auroc([0.9, 0.4, 0.4], [0.4, 0.1])
    0.8333333333333334
    """
    base, new = _comparable(_scores(base_scores, "base_scores"), _scores(new_scores, "new_scores"))
    tie = _check_tie(tie)
    greater, equal = _pair_counts(base, new)
    return _pair_fraction(greater, equal, tie, base.size * new.size)


def openworld_curve(
    base_scores: Any,
    new_scores: Any,
    base_correct: Any,
    new_correct: Any,
    *,
    return_thresholds: bool = False,
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the MissRate_b(t) / HitRate_n(t) curve whose area is OpenworldAUC.

    Sec. 4.2 of the OpenworldAUC paper, for a threshold t (a sample is sent to the base classifier
    when r(x) > t)::

        MissRate_b(t) = 1/N_b * #{base: r(x_b) <= t or g wrong}  = 1 - #{base: g right, r > t}/N_b
        HitRate_n(t)  = 1/N_n * #{new:  r(x_n) <= t and h right}

    The points are taken at t = -inf and at every distinct score of a correctly classified sample,
    in increasing order, so MissRate_b runs from 1 - BaseAcc to 1 and HitRate_n from 0 to NewAcc.
    The trapezoidal area under HitRate_n against MissRate_b (``np.trapezoid(hit, miss)``) equals
    ``openworld_auc(..., tie=0.5)``: a step at a score shared by base and new samples is a
    trapezoid, crediting each tied pair one half (a left-Riemann sum would give ``tie=0``).

    Parameters
    ----------
    base_scores, new_scores : array-like of shape (N_b,) and (N_n,)
        Detector scores (larger = more base-like), any real range.
    base_correct, new_correct : array-like of bool of shape (N_b,) and (N_n,)
        Per-sample correctness of g on the base samples and of h on the new samples.
    return_thresholds : bool, default False
        Also return the thresholds t of the points (the first is -inf), as float64: integer
        scores beyond 2**53 are shown rounded, although the points keep them distinct.

    Returns
    -------
    miss_rate_b : ndarray of shape (k + 1,), non-decreasing
    hit_rate_n : ndarray of shape (k + 1,), non-decreasing
    thresholds : ndarray of shape (k + 1,), only when ``return_thresholds`` is True

    Examples
    --------
    >>> miss, hit = openworld_curve([0.9, 0.3], [0.5, 0.1], [True, True], [True, False])
    >>> miss.tolist(), hit.tolist()
    ([0.0, 0.5, 0.5, 1.0], [0.0, 0.0, 0.5, 0.5])
    """
    base, new, base_ok, new_ok = _scored_inputs(base_scores, new_scores, base_correct, new_correct)
    pos, neg = base[base_ok], new[new_ok]
    keys, first, inverse = np.unique(
        np.concatenate(_comparable(pos, neg)), return_index=True, return_inverse=True
    )
    values = np.concatenate([pos.astype(np.float64), neg.astype(np.float64)])[first]
    inverse = inverse.reshape(-1)
    base_at = np.bincount(inverse[: pos.size], minlength=keys.size)
    new_at = np.bincount(inverse[pos.size :], minlength=keys.size)
    n_base, n_new = base.size, new.size
    base_missed = (n_base - pos.size) + np.concatenate([[0], np.cumsum(base_at)])
    new_hit = np.concatenate([[0], np.cumsum(new_at)])
    miss_rate_b = base_missed / n_base
    hit_rate_n = new_hit / n_new
    if return_thresholds:
        return miss_rate_b, hit_rate_n, np.concatenate([[-np.inf], values])
    return miss_rate_b, hit_rate_n


def _harmonic_mean(a: float, b: float) -> float:
    # HM of Sec. 3.1; defined as 0 when both accuracies are 0.
    return 0.0 if a + b == 0 else 2.0 * a * b / (a + b)


def openworld_summary(
    base_scores: Any,
    new_scores: Any,
    base_correct: Any,
    new_correct: Any,
    *,
    tie: float = 0.5,
) -> dict[str, float]:
    """Return BaseAcc, NewAcc, HM, AUROC and OpenworldAUC from detector scores and correctness.

    BaseAcc = mean(base_correct), NewAcc = mean(new_correct), HM = 2 BaseAcc NewAcc /
    (BaseAcc + NewAcc) (Sec. 3.1 of the OpenworldAUC paper; 0 when both are 0), AUROC over all
    base vs all new samples (Sec. 3.3) and OpenworldAUC (Prop. 4.2); ``tie`` applies to both
    ranking metrics. OverallAcc needs outputs over all classes: see ``openworld_scores``.

    Parameters
    ----------
    base_scores, new_scores : array-like of shape (N_b,) and (N_n,)
        Detector scores (larger = more base-like), any real range.
    base_correct, new_correct : array-like of bool of shape (N_b,) and (N_n,)
        Per-sample correctness of g on the base samples and of h on the new samples.
    tie : float in [0, 1], default 0.5
        Credit for a pair with equal scores.

    Returns
    -------
    dict with float values under "base_acc", "new_acc", "hm", "auroc", "openworld_auc"

    Examples
    --------
    >>> s = openworld_summary([0.9, 0.8], [0.5, 0.85], [True, False], [True, True])
    >>> s["base_acc"], s["new_acc"], s["auroc"], s["openworld_auc"]
    (0.5, 1.0, 0.75, 0.5)
    """
    base, new, base_ok, new_ok = _scored_inputs(base_scores, new_scores, base_correct, new_correct)
    tie = _check_tie(tie)
    base, new = _comparable(base, new)
    base_acc = float(np.count_nonzero(base_ok)) / base.size
    new_acc = float(np.count_nonzero(new_ok)) / new.size
    n_pairs = base.size * new.size
    return {
        "base_acc": base_acc,
        "new_acc": new_acc,
        "hm": _harmonic_mean(base_acc, new_acc),
        "auroc": _pair_fraction(*_pair_counts(base, new), tie, n_pairs),
        "openworld_auc": _pair_fraction(*_pair_counts(base[base_ok], new[new_ok]), tie, n_pairs),
    }


# --------------------------------------------------------------------------------------------
# metrics from model outputs over all classes
# --------------------------------------------------------------------------------------------


class ScoredSamples(NamedTuple):
    """Detector scores and classifier correctness of the base-class and new-class samples."""

    base_scores: np.ndarray
    new_scores: np.ndarray
    base_correct: np.ndarray
    new_correct: np.ndarray


def _log_max_base_softmax(logits: np.ndarray, base_idx: np.ndarray) -> np.ndarray:
    """Return log(max_{j in base} softmax(logits)_j) per row, without saturating near 0.

    With m the largest base logit (at column j*), log r = -log(1 + S) where
    S = sum_{j != j*} exp(l_j - m); computed as -logaddexp(0, log S) so that a probability within
    1e-17 of 1 still keeps its order (a float64 softmax would round it to exactly 1.0 and tie it).
    """
    from scipy.special import logsumexp  # here, not at import: it costs `oodeval measures` ~0.2 s

    base_logits = logits[:, base_idx]
    best = base_idx[np.argmax(base_logits, axis=1)]
    shifted = logits - base_logits.max(axis=1, keepdims=True)
    shifted[np.arange(len(logits)), best] = -np.inf
    return -np.logaddexp(0.0, logsumexp(shifted, axis=1))


def _check_probabilities(probs: np.ndarray) -> None:
    low, high = probs.min(), probs.max()
    if low < -_PROB_RANGE_TOLERANCE or high > 1 + _PROB_RANGE_TOLERANCE:
        raise OodevalError(
            f"outputs hold values in [{low:.4g}, {high:.4g}], outside [0, 1]; if these are logits "
            "pass logits=True (CLI: a 'logits' array or logit_<j> columns)"
        )
    sums = probs.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > _ROW_SUM_TOLERANCE)
    if bad.size:
        raise OodevalError(
            f"outputs must be probabilities over all classes whose rows sum to 1, but row "
            f"{int(bad[0])} sums to {sums[bad[0]]:.4g}; pass logits=True for unnormalised scores"
        )


def _predictions(
    x: Any, name: str, n: int, rows: np.ndarray, base_ids: np.ndarray, *, base: bool
) -> np.ndarray:
    """Check separate-classifier predictions: base (new) class ids on the base (new) rows.

    Rows the classifier is not used on may hold anything integer (e.g. -1 for "not predicted").
    """
    preds = as_class_ids(x, name, check_nonnegative=False)
    check_same_length(labels=np.empty(n), **{name: preds})
    used = preds[rows]
    if used.size and used.min() < 0:
        raise OodevalError(f"{name} must hold class ids >= 0, found {int(used.min())}")
    outside = ~np.isin(used, base_ids) if base else np.isin(used, base_ids)
    if np.any(outside):
        what = "base" if base else "new"
        raise OodevalError(
            f"{name} must be {what}-class ids on the {what}-class samples (global class ids, "
            f"not positions among the {what} classes), found {int(used[outside][0])}"
        )
    return preds


def _base_class_ids(base_classes: Iterable[int]) -> np.ndarray:
    """The sorted base-class ids: non-empty, without duplicates."""
    try:
        raw = base_classes if isinstance(base_classes, np.ndarray) else list(base_classes)
    except TypeError:
        raise OodevalError(
            f"base_classes must be an iterable of class ids, got {type(base_classes).__name__}"
        ) from None
    base_ids = np.sort(as_class_ids(np.asarray(raw), "base_classes"))
    if base_ids.size == 0:
        raise OodevalError("base_classes is empty; name at least one base class id")
    if np.any(np.diff(base_ids) == 0):
        dup = int(base_ids[1:][np.diff(base_ids) == 0][0])
        raise OodevalError(f"base_classes lists class {dup} more than once; list each id once")
    return base_ids


def _checked_outputs(outputs: Any, y: np.ndarray, base_ids: np.ndarray, logits: bool) -> np.ndarray:
    """`outputs` as a float (n, n_classes) array whose columns cover every id in use."""
    out = as_float_array(outputs, "outputs", ndim=2)
    n_classes = out.shape[1]
    check_same_length(outputs=out, labels=y)
    if base_ids.max() >= n_classes:
        raise OodevalError(
            f"base_classes holds class {int(base_ids.max())} but outputs have only "
            f"{n_classes} columns (class ids 0..{n_classes - 1})"
        )
    if base_ids.size == n_classes:
        raise OodevalError(
            f"base_classes lists all {n_classes} classes; at least one class must be new"
        )
    if y.max() >= n_classes:
        raise OodevalError(
            f"labels hold class {int(y.max())} but outputs have only {n_classes} columns "
            f"(class ids 0..{n_classes - 1})"
        )
    if not logits:
        _check_probabilities(out)
    return out


def _check_base_and_new(is_base: np.ndarray) -> None:
    if not np.any(is_base):
        raise OodevalError(
            "no sample has a base-class label; check base_classes (ids of the base classes)"
        )
    if np.all(is_base):
        raise OodevalError(
            "every sample has a base-class label; the metrics need new-class samples too"
        )


def _from_outputs(
    outputs: Any,
    labels: Any,
    base_classes: Iterable[int],
    *,
    logits: bool,
    detector_scores: Any,
    base_predictions: Any,
    new_predictions: Any,
) -> tuple[ScoredSamples, float]:
    """Validate model outputs and return (per-sample scores and correctness, OverallAcc)."""
    y = as_class_ids(labels, "labels")
    base_ids = _base_class_ids(base_classes)
    n = y.size
    if n == 0:
        raise OodevalError("labels is empty; the open-world metrics need base and new samples")
    is_base = np.isin(y, base_ids)
    overall_acc = float("nan")
    if outputs is None:
        given = {
            "detector_scores": detector_scores,
            "base_predictions": base_predictions,
            "new_predictions": new_predictions,
        }
        missing = [name for name, value in given.items() if value is None]
        if missing:
            raise OodevalError(
                f"outputs is None, so {', '.join(missing)} must be given (all of "
                "detector_scores, base_predictions, new_predictions)"
            )
    else:
        out = _checked_outputs(outputs, y, base_ids, logits)
        new_ids = np.setdiff1d(np.arange(out.shape[1]), base_ids)
        if detector_scores is None:
            scores = _log_max_base_softmax(out, base_ids) if logits else out[:, base_ids].max(1)
        g = base_ids[np.argmax(out[:, base_ids], axis=1)]
        h = new_ids[np.argmax(out[:, new_ids], axis=1)]
        overall_acc = float(np.count_nonzero(np.argmax(out, axis=1) == y)) / n
    _check_base_and_new(is_base)
    if detector_scores is not None:
        scores = as_real_array(detector_scores, "detector_scores", ndim=1)
        check_same_length(labels=y, detector_scores=scores)
    if base_predictions is not None:
        g = _predictions(base_predictions, "base_predictions", n, is_base, base_ids, base=True)
    if new_predictions is not None:
        h = _predictions(new_predictions, "new_predictions", n, ~is_base, base_ids, base=False)
        if outputs is not None and np.any(h[~is_base] >= out.shape[1]):
            raise OodevalError(
                f"new_predictions hold class {int(h[~is_base].max())} but outputs have only "
                f"{out.shape[1]} columns"
            )
    samples = ScoredSamples(
        base_scores=scores[is_base],
        new_scores=scores[~is_base],
        base_correct=g[is_base] == y[is_base],
        new_correct=h[~is_base] == y[~is_base],
    )
    return samples, overall_acc


def openworld_scored_samples(
    outputs: Any,
    labels: Any,
    base_classes: Iterable[int],
    *,
    logits: bool = False,
    detector_scores: Any = None,
    base_predictions: Any = None,
    new_predictions: Any = None,
) -> ScoredSamples:
    """Return detector scores and per-sample correctness of g / h, split into base and new.

    The first stage of ``openworld_scores`` (same arguments and conventions: r from Algorithm 1,
    g = argmax over base classes, h = argmax over new classes), for feeding ``openworld_curve``
    or ``openworld_auc`` directly. With ``logits=True`` the scores are log-probabilities.

    Returns
    -------
    ScoredSamples
        Named tuple (base_scores, new_scores, base_correct, new_correct) of 1-D arrays.

    Examples
    --------
    >>> probs = [[0.7, 0.2, 0.1], [0.3, 0.5, 0.2], [0.1, 0.1, 0.8], [0.4, 0.1, 0.5]]
    >>> s = openworld_scored_samples(probs, [0, 0, 2, 2], base_classes=[0, 1])
    >>> s.base_scores.tolist(), s.base_correct.tolist(), s.new_scores.tolist()
    ([0.7, 0.5], [True, False], [0.1, 0.4])
    """
    samples, _ = _from_outputs(
        outputs,
        labels,
        base_classes,
        logits=logits,
        detector_scores=detector_scores,
        base_predictions=base_predictions,
        new_predictions=new_predictions,
    )
    return samples


def openworld_scores(
    outputs: Any,
    labels: Any,
    base_classes: Iterable[int],
    *,
    logits: bool = False,
    detector_scores: Any = None,
    base_predictions: Any = None,
    new_predictions: Any = None,
    tie: float = 0.5,
) -> dict[str, float]:
    """Return the OpenworldAUC suite from model outputs over all (base + new) classes.

    Following Algorithm 1 (App. C.3) and Sec. 3 of the OpenworldAUC paper, with Y_b the base
    classes and Y_n the others:

    - detector r(x) = max_{j in Y_b} softmax(logits)_j, the softmax taken over ALL classes
      (Algorithm 1 applies Softmax(logits, dim=1) to the logits of every class, then maxes over
      the base columns). With ``logits=True`` r is computed as the log of that probability in a
      form that does not round near-certain rows to exactly 1.0; ranking metrics are unchanged by
      the log. With probabilities, r is their max over the base columns.
    - base classifier g(x) = argmax_{j in Y_b} outputs_j; new classifier h(x) = argmax_{j in Y_n}
      outputs_j (ties go to the lowest class id).
    - BaseAcc / NewAcc: accuracy of g on base-class samples / of h on new-class samples;
      HM = 2 BaseAcc NewAcc / (BaseAcc + NewAcc); OverallAcc = accuracy of argmax over all
      classes on all samples (Sec. 3.2); AUROC (base positive) and OpenworldAUC (Prop. 4.2).

    Separate models: ``detector_scores`` replaces r, ``base_predictions`` replaces g and
    ``new_predictions`` replaces h (each of shape (n,), predictions as global class ids; only the
    base-class rows of ``base_predictions`` and the new-class rows of ``new_predictions`` are
    used). With all three given, ``outputs`` may be None; OverallAcc is then NaN (undefined
    without outputs over all classes).

    Parameters
    ----------
    outputs : array-like of shape (n, n_classes) or None
        Probabilities (rows summing to 1) or, with ``logits=True``, logits over all classes.
    labels : array-like of int of shape (n,)
        True class ids; a sample is a base sample when its label is in ``base_classes``.
    base_classes : iterable of int
        Ids of the base classes: non-empty, without duplicates, not every class.
    logits : bool, default False
        Whether ``outputs`` are logits (a softmax over all classes is applied).
    detector_scores : array-like of shape (n,), optional
        Detector scores r(x) from a separate detector (larger = more base-like).
    base_predictions, new_predictions : array-like of int of shape (n,), optional
        Predictions of separate base / new classifiers.
    tie : float in [0, 1], default 0.5
        Credit for a (base, new) pair with equal detector scores.

    Returns
    -------
    dict with float values under "base_acc", "new_acc", "hm", "overall_acc", "auroc",
    "openworld_auc"

    Examples
    --------
    >>> probs = [[0.7, 0.2, 0.1], [0.3, 0.5, 0.2], [0.1, 0.1, 0.8], [0.4, 0.1, 0.5]]
    >>> s = openworld_scores(probs, [0, 1, 2, 2], base_classes=[0, 1])
    >>> s["base_acc"], s["new_acc"], s["overall_acc"], s["auroc"], s["openworld_auc"]
    (1.0, 1.0, 1.0, 1.0, 1.0)
    """
    tie = _check_tie(tie)
    samples, overall_acc = _from_outputs(
        outputs,
        labels,
        base_classes,
        logits=logits,
        detector_scores=detector_scores,
        base_predictions=base_predictions,
        new_predictions=new_predictions,
    )
    summary = openworld_summary(*samples, tie=tie)
    keys = ("base_acc", "new_acc", "hm", "overall_acc", "auroc", "openworld_auc")
    return {k: overall_acc if k == "overall_acc" else summary[k] for k in keys}
