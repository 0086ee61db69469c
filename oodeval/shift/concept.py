"""Concept shift M_cpt^min / M_cpt^max between two labelled sets (NICO++ Section 3.1).

M_cpt^min / M_cpt^max = min / max { L_tr(f_tr, f_te), L_te(f_tr, f_te) } with the 0-1 loss, i.e.
min / max of  int I[f_tr(x) != f_te(x)] p_tr(x) dx  and  int I[f_tr(x) != f_te(x)] p_te(x) dx
(NICO++ Section 3.1, Definition 3.1 and the 0-1 form below Figure 2). As in Section 3.3 the
labelling functions f_tr and f_te are estimated by classifiers fitted (cross-entropy) to the
training half of the source and of the target set; both disagreement rates are measured on the
held-out halves.
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
    as_labels,
    check_same_input_shape,
    fit_options,
    halves,
    minibatches,
)
from oodeval.shift.discrepancy import SOURCE_STREAM, TARGET_STREAM, disagreement
from oodeval.shift.hypotheses import make_hypothesis, predict_labels


@dataclass(frozen=True)
class ConceptShift:
    """One seed's concept-shift estimate: f_tr/f_te disagreement on each held-out half."""

    source_disagreement: float
    target_disagreement: float
    source_fit_error: float
    target_fit_error: float

    @property
    def minimum(self) -> float:
        """M_cpt^min = min(L_tr(f_tr, f_te), L_te(f_tr, f_te))."""
        return min(self.source_disagreement, self.target_disagreement)

    @property
    def maximum(self) -> float:
        """M_cpt^max = max(L_tr(f_tr, f_te), L_te(f_tr, f_te))."""
        return max(self.source_disagreement, self.target_disagreement)


def concept_shift(
    source: Any,
    source_labels: Any,
    target: Any,
    target_labels: Any,
    *,
    num_classes: int | None = None,
    hypothesis: str = "mlp",
    steps: int = 300,
    batch_size: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
) -> ConceptShift:
    """Estimate M_cpt^min and M_cpt^max between a source and a target set (one seed).

    f_tr is fitted to the source training half, f_te to the target training half; then
    L_tr(f_tr, f_te) = mean over held-out source x of I[f_tr(x) != f_te(x)], likewise L_te on the
    held-out target half (NICO++ Section 3.1).

    Parameters
    ----------
    source, target : array-like of shape (n_source, ...) and (n_target, ...)
        Inputs of the two sets, with the same sample shape.
    source_labels, target_labels : array-like of int, shape (n_source,) and (n_target,)
        Class ids in 0..num_classes-1.
    num_classes : int, optional
        Number of classes; by default 1 + the largest label seen (at least 2).
    hypothesis, steps, batch_size, lr, seed : as in `covariate_shift`.

    Returns
    -------
    ConceptShift
        `.minimum` and `.maximum` are M_cpt^min and M_cpt^max; the held-out errors of f_tr on the
        source and f_te on the target are kept as `source_fit_error` / `target_fit_error`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(0.0, 1.0, (400, 2)); y = (x[:, 0] > 0).astype(int)
    >>> est = concept_shift(x[:200], y[:200], x[200:], 1 - y[200:], steps=300, seed=0)
    >>> est.minimum > 0.8
    True
    """
    xs = as_inputs(source, "source")
    xt = as_inputs(target, "target")
    check_same_input_shape(xs, xt)
    ys = as_labels(source_labels, "source_labels", len(xs))
    yt = as_labels(target_labels, "target_labels", len(xt))
    fit = fit_options(hypothesis, steps, batch_size, lr)
    k = max(int(ys.max()), int(yt.max())) + 1
    if num_classes is None:
        num_classes = max(k, 2)
    elif k > num_classes:
        raise OodevalError(f"labels go up to {k - 1} but num_classes is {num_classes}; raise it")
    s_train, s_held = halves(len(xs), seed, SOURCE_STREAM)
    t_train, t_held = halves(len(xt), seed, TARGET_STREAM)
    with single_threaded():
        f_tr = fit_classifier(xs[s_train], ys[s_train], num_classes, fit, seed=seed * 4 + 1)
        f_te = fit_classifier(xt[t_train], yt[t_train], num_classes, fit, seed=seed * 4 + 3)
        tr_on_s, te_on_s = predict_labels(f_tr, xs[s_held]), predict_labels(f_te, xs[s_held])
        tr_on_t, te_on_t = predict_labels(f_tr, xt[t_held]), predict_labels(f_te, xt[t_held])
    return ConceptShift(
        source_disagreement=disagreement(tr_on_s, te_on_s),
        target_disagreement=disagreement(tr_on_t, te_on_t),
        source_fit_error=float(np.mean(tr_on_s != ys[s_held])),
        target_fit_error=float(np.mean(te_on_t != yt[t_held])),
    )


def fit_classifier(
    x: np.ndarray, y: np.ndarray, num_classes: int, fit: FitOptions, *, seed: int
) -> torch.nn.Module:
    """Fit a network of class ``fit.hypothesis`` to (x, y) by Adam on the cross-entropy; seeded."""
    model = make_hypothesis(fit.hypothesis, x.shape[1:], num_classes, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=fit.lr)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    rng = np.random.default_rng([seed, 11])
    for idx in minibatches(len(x), fit.batch_size, fit.steps, rng):
        batch = torch.from_numpy(idx)
        loss = torch.nn.functional.cross_entropy(model(tx[batch]), ty[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model
