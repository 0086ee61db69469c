"""Covariate shift M_cov: the discrepancy distance between two input distributions (NICO++ Sec. 3).

M_cov(D_tr, D_te; H, l) = disc(D_tr, D_te; H, l) = sup_{h1, h2 in H} |L_tr(h1, h2) - L_te(h1, h2)|
(Definition 3.2 of the NICO++ paper, after Mansour et al. 2009), where L_D(h1, h2) = E_{x~D}
l(h1(x), h2(x)) and l is the 0-1 disagreement. Following Section 3.3, two networks are trained
jointly to maximise L_disc^(1) = L_tr - L_te, two fresh ones to maximise L_disc^(2) = L_te - L_tr,
and the larger absolute value is reported. Training uses the first half of each set and a
differentiable surrogate of the disagreement, 1 - <softmax h1(x), softmax h2(x)> (the probability
that labels sampled from the two predictive distributions differ); the reported value uses the
0-1 disagreement of the argmax predictions on the held-out halves, so a network that memorises the
training halves cannot inflate it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oodeval._torch import single_threaded
from oodeval.errors import OodevalError
from oodeval.shift._data import (
    FitOptions,
    as_inputs,
    check_same_input_shape,
    fit_options,
    halves,
    minibatches,
)
from oodeval.shift.hypotheses import make_hypothesis, predict_labels

SOURCE_STREAM, TARGET_STREAM = 0, 1


@dataclass(frozen=True)
class CovariateShift:
    """One seed's M_cov estimate and the held-out values of the two objectives."""

    source_minus_target: float
    target_minus_source: float

    @property
    def value(self) -> float:
        """M_cov = max(|L_disc^(1)|, |L_disc^(2)|) on the held-out halves."""
        return max(abs(self.source_minus_target), abs(self.target_minus_source))


def disagreement(predictions_a: Any, predictions_b: Any) -> float:
    """Return the 0-1 disagreement rate mean(a != b) of two label vectors, L_D(h1, h2).

    >>> disagreement([0, 1, 2, 2], [0, 2, 2, 1])
    0.5
    """
    a, b = np.asarray(predictions_a), np.asarray(predictions_b)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise OodevalError(
            "predictions must be two non-empty 1-D arrays of one length, "
            f"got shapes {a.shape} and {b.shape}"
        )
    return float(np.mean(a != b))


def covariate_shift(
    source: Any,
    target: Any,
    *,
    num_classes: int = 2,
    hypothesis: str = "mlp",
    steps: int = 300,
    batch_size: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
) -> CovariateShift:
    """Estimate M_cov between the input distributions of `source` and `target` (one seed).

    M_cov = max over the two objectives of |L_tr(h1, h2) - L_te(h1, h2)| on held-out halves,
    NICO++ Definition 3.2 and Section 3.3. Labels are not used.

    Parameters
    ----------
    source, target : array-like of shape (n_source, ...) and (n_target, ...)
        Inputs (images (C, H, W) or feature vectors) of the two sets; the same sample shape.
    num_classes : int
        Size of the label space the hypotheses map into (the task's number of classes).
    hypothesis : {"mlp", "cnn"}
        Hypothesis class H (see `oodeval.shift.hypotheses`).
    steps, batch_size, lr : training length, minibatch size (per set) and Adam learning rate.
    seed : int
        Seeds the halves, the initial weights and the minibatch order.

    Returns
    -------
    CovariateShift
        `.value` is M_cov in [0, 1]; the two signed objective values are kept for inspection.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.normal(0.0, 1.0, (200, 2)); b = rng.normal(6.0, 1.0, (200, 2))
    >>> covariate_shift(a, b, steps=200, seed=0).value > 0.9
    True
    """
    xs = as_inputs(source, "source")
    xt = as_inputs(target, "target")
    check_same_input_shape(xs, xt)
    fit = fit_options(hypothesis, steps, batch_size, lr)
    s_train, s_held = halves(len(xs), seed, SOURCE_STREAM)
    t_train, t_held = halves(len(xt), seed, TARGET_STREAM)
    values = []
    with single_threaded():
        for sign, offset in ((1.0, 0), (-1.0, 1)):
            h1, h2 = _train_pair(
                xs[s_train],
                xt[t_train],
                sign=sign,
                num_classes=num_classes,
                fit=fit,
                seed=seed * 4 + 2 * offset,
            )
            d_source = disagreement(predict_labels(h1, xs[s_held]), predict_labels(h2, xs[s_held]))
            d_target = disagreement(predict_labels(h1, xt[t_held]), predict_labels(h2, xt[t_held]))
            values.append(sign * (d_source - d_target))
    return CovariateShift(source_minus_target=values[0], target_minus_source=values[1])


def soft_disagreement(logits_a: Any, logits_b: Any) -> Any:
    """Differentiable surrogate of the 0-1 disagreement: mean of 1 - <softmax a, softmax b>.

    Equals the probability that labels drawn from the two predictive distributions differ; it
    matches the 0-1 disagreement when both networks are confident.
    """
    pa = torch.softmax(logits_a, dim=1)
    pb = torch.softmax(logits_b, dim=1)
    return (1.0 - (pa * pb).sum(dim=1)).mean()


def _train_pair(
    xs: np.ndarray,
    xt: np.ndarray,
    *,
    sign: float,
    num_classes: int,
    fit: FitOptions,
    seed: int,
) -> tuple[Any, Any]:
    """Train h1, h2 jointly to maximise sign * (L_source(h1, h2) - L_target(h1, h2))."""

    h1 = make_hypothesis(fit.hypothesis, xs.shape[1:], num_classes, seed=seed)
    h2 = make_hypothesis(fit.hypothesis, xs.shape[1:], num_classes, seed=seed + 1)
    params = list(h1.parameters()) + list(h2.parameters())
    opt = torch.optim.Adam(params, lr=fit.lr)
    ts, tt = torch.from_numpy(xs), torch.from_numpy(xt)
    rng = np.random.default_rng([seed, 7])
    batches_s = minibatches(len(xs), fit.batch_size, fit.steps, rng)
    batches_t = minibatches(len(xt), fit.batch_size, fit.steps, rng)
    for idx_s, idx_t in zip(batches_s, batches_t, strict=True):
        bs, bt = ts[torch.from_numpy(idx_s)], tt[torch.from_numpy(idx_t)]
        gap = soft_disagreement(h1(bs), h2(bs)) - soft_disagreement(h1(bt), h2(bt))
        loss = -sign * gap
        opt.zero_grad()
        loss.backward()
        opt.step()
    return h1, h2
