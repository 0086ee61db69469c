"""The OpenworldAUC suite from model outputs over all (base + new) classes.

`openworld_scores` follows Algorithm 1 (App. C.3) of the OpenworldAUC paper: from probabilities
or logits over every class (or from separate detector and classifiers) it derives the detector
scores and the correctness of g and h per sample (`openworld_scored_samples`), then BaseAcc,
NewAcc, HM, OverallAcc (Sec. 3.2), AUROC and OpenworldAUC. This module holds the validation of
those outputs, labels, base classes and predictions; the metrics themselves are in
`oodeval.measures.openworld.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import (
    as_class_ids,
    as_float_array,
    as_real_array,
    check_same_length,
)
from oodeval.measures.openworld.metrics import openworld_summary
from oodeval.measures.openworld.ranking import checked_tie

__all__ = ["ScoredSamples", "openworld_scored_samples", "openworld_scores"]

# Probability rows may be rounded (CSV files, float16); anything further from 1 is not a softmax
# over all classes (logits, a softmax over the base classes only, per-class sigmoids).
_ROW_SUM_TOLERANCE = 1e-2
_PROB_RANGE_TOLERANCE = 1e-6


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


def _check_separate_models(
    detector_scores: Any, base_predictions: Any, new_predictions: Any
) -> None:
    """Without outputs, every part of the open-world model must be given separately."""
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


def _output_models(
    out: np.ndarray, base_ids: np.ndarray, *, logits: bool, with_scores: bool
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Return (r, g, h) per sample from outputs over all classes (r None unless `with_scores`).

    r = max over the base columns (its log, from logits), g = argmax over the base columns,
    h = argmax over the new columns, as global class ids.
    """
    new_ids = np.setdiff1d(np.arange(out.shape[1]), base_ids)
    scores = None
    if with_scores:
        scores = _log_max_base_softmax(out, base_ids) if logits else out[:, base_ids].max(1)
    g = base_ids[np.argmax(out[:, base_ids], axis=1)]
    h = new_ids[np.argmax(out[:, new_ids], axis=1)]
    return scores, g, h


def _new_predictions(
    x: Any, n: int, is_base: np.ndarray, base_ids: np.ndarray, n_columns: int | None
) -> np.ndarray:
    """Check the new classifier's predictions, also against the outputs' columns when given."""
    h = _predictions(x, "new_predictions", n, ~is_base, base_ids, base=False)
    if n_columns is not None and np.any(h[~is_base] >= n_columns):
        raise OodevalError(
            f"new_predictions hold class {int(h[~is_base].max())} but outputs have only "
            f"{n_columns} columns"
        )
    return h


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
    overall_acc, n_columns = float("nan"), None
    if outputs is None:
        _check_separate_models(detector_scores, base_predictions, new_predictions)
    else:
        out = _checked_outputs(outputs, y, base_ids, logits)
        scores, g, h = _output_models(
            out, base_ids, logits=logits, with_scores=detector_scores is None
        )
        overall_acc = float(np.count_nonzero(np.argmax(out, axis=1) == y)) / n
        n_columns = out.shape[1]
    _check_base_and_new(is_base)
    if detector_scores is not None:
        scores = as_real_array(detector_scores, "detector_scores", ndim=1)
        check_same_length(labels=y, detector_scores=scores)
    if base_predictions is not None:
        g = _predictions(base_predictions, "base_predictions", n, is_base, base_ids, base=True)
    if new_predictions is not None:
        h = _new_predictions(new_predictions, n, is_base, base_ids, n_columns)
    assert scores is not None  # given, or computed from the outputs (checked above)
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
    tie = checked_tie(tie)
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
