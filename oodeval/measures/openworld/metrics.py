"""The OpenworldAUC suite's metrics on detector scores and per-sample correctness.

An open-world model has three parts (Sec. 2 of the OpenworldAUC paper): a base-to-new detector
``r`` (larger ``r(x)`` means "more likely a base-class sample"), a base-domain classifier ``g``
(argmax over the base classes) and a new-domain classifier ``h`` (argmax over the new classes).
This module scores them, given r's scores and whether g / h are right on each sample, with

- ``openworld_auc`` -- Prop. 4.2 / App. C.5: the fraction of (base, new) pairs where ``g`` is right
  on the base sample, ``r`` ranks the base sample above the new one, and ``h`` is right on the new
  sample; counted exactly (O(n) when the scores have few distinct values, O(n log n) at worst),
  never by moving misclassified scores to ``min - eps`` (that trick breaks when the detector
  separates the sets or scores are large);
- ``auroc`` -- Sec. 3.3, base samples as the positive class;
- ``openworld_curve`` -- the MissRate_b(t) / HitRate_n(t) curve of Sec. 4.2 whose area is
  OpenworldAUC;
- ``openworld_summary`` -- BaseAcc, NewAcc, HM (Sec. 3.1), AUROC and OpenworldAUC.

Ties: a (base, new) pair with equal detector scores counts ``tie`` (0.5 by default, the AUROC
convention; ``tie=0`` is the strict inequality written in the paper). Scores are compared exactly
as given (`oodeval.measures.openworld.ranking`). Metrics from model outputs over all classes are
in `oodeval.measures.openworld.outputs`.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import as_bool_array, as_real_array, check_same_length
from oodeval.measures.openworld.ranking import checked_tie, comparable, pair_counts, pair_fraction

__all__ = ["auroc", "openworld_auc", "openworld_curve", "openworld_summary"]


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
    is empty. Counted exactly in int64 (`oodeval.measures.openworld.ranking.pair_counts`): O(n)
    time when the scores have few distinct values (rounded scores, heavy ties), O(n log n) when
    they are spread out, O(n) memory.

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
    tie = checked_tie(tie)
    base, new = comparable(base, new)
    greater, equal = pair_counts(np.compress(base_ok, base), np.compress(new_ok, new))
    return pair_fraction(greater, equal, tie, base.size * new.size)


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
    base, new = comparable(_scores(base_scores, "base_scores"), _scores(new_scores, "new_scores"))
    tie = checked_tie(tie)
    greater, equal = pair_counts(base, new)
    return pair_fraction(greater, equal, tie, base.size * new.size)


@overload
def openworld_curve(
    base_scores: Any,
    new_scores: Any,
    base_correct: Any,
    new_correct: Any,
    *,
    return_thresholds: Literal[False] = ...,
) -> tuple[np.ndarray, np.ndarray]: ...
@overload
def openworld_curve(
    base_scores: Any,
    new_scores: Any,
    base_correct: Any,
    new_correct: Any,
    *,
    return_thresholds: Literal[True],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
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
    pos, neg = np.compress(base_ok, base), np.compress(new_ok, new)
    keys, first, inverse = np.unique(
        np.concatenate(comparable(pos, neg)), return_index=True, return_inverse=True
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
    tie = checked_tie(tie)
    base, new = comparable(base, new)
    base_acc = float(np.count_nonzero(base_ok)) / base.size
    new_acc = float(np.count_nonzero(new_ok)) / new.size
    n_pairs = base.size * new.size
    return {
        "base_acc": base_acc,
        "new_acc": new_acc,
        "hm": _harmonic_mean(base_acc, new_acc),
        "auroc": pair_fraction(*pair_counts(base, new), tie, n_pairs),
        "openworld_auc": pair_fraction(
            *pair_counts(np.compress(base_ok, base), np.compress(new_ok, new)), tie, n_pairs
        ),
    }
