"""Both NICO++ shift metrics over several seeds, with mean and std (NICO++ Section 3, Table 1).

For every seed the covariate shift M_cov (`oodeval.shift.discrepancy`) and the concept shifts
M_cpt^min, M_cpt^max (`oodeval.shift.concept`) are estimated on fresh held-out halves, and the
quantity of Theorem 3.3, M_cpt^max - M_cov, is formed: for every h in H,
eps_te(h) >= M_cpt^max - M_cov - eps_tr(h) (NICO++ Eq. 4). The theorem speaks of the true values;
here M_cov is a supremum estimated by training (so from below) and M_cpt comes from imperfect fits
(it holds up to their two held-out errors even without any concept shift), so the estimated
difference indicates the bound rather than proves it. The fit errors are reported with M_cpt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures.meta import mean_std

METRICS: tuple[str, ...] = ("m_cov", "m_cpt_min", "m_cpt_max", "cpt_minus_cov")
FIT_ERRORS: tuple[str, ...] = ("source_fit_error", "target_fit_error")
REPORTED: tuple[str, ...] = ("m_cov", "m_cpt_min", "m_cpt_max", *FIT_ERRORS, "cpt_minus_cov")
"""What `oodeval shift` prints: the metrics with the fit errors next to M_cpt."""

DESCRIPTIONS: dict[str, str] = {
    "m_cov": "covariate shift M_cov (discrepancy distance; higher = stronger shift of P(X))",
    "m_cpt_min": "concept shift M_cpt^min (min of the f_tr/f_te disagreements)",
    "m_cpt_max": "concept shift M_cpt^max (max of the f_tr/f_te disagreements)",
    "source_fit_error": "held-out error of f_tr on the source (noise floor of M_cpt, see below)",
    "target_fit_error": "held-out error of f_te on the target (noise floor of M_cpt, see below)",
    "cpt_minus_cov": "M_cpt^max - M_cov (Theorem 3.3's lower bound on eps_te(h) + eps_tr(h), "
    "for the true values)",
}


@dataclass(frozen=True)
class ShiftMetrics:
    """Per-seed shift estimates and their mean / std (ddof=1; NaN for a single seed)."""

    seeds: tuple[int, ...]
    per_seed: tuple[dict[str, float], ...]
    options: dict[str, Any] = field(default_factory=dict)

    def values(self, metric: str) -> np.ndarray:
        """The per-seed values of `metric` (one of METRICS or a detail key)."""
        return np.array([row[metric] for row in self.per_seed], dtype=float)

    def mean(self, metric: str) -> float:
        """Mean of `metric` over seeds."""
        return mean_std(self.values(metric))[0]

    def std(self, metric: str) -> float:
        """Sample standard deviation (ddof=1) of `metric` over seeds; NaN for one seed."""
        return mean_std(self.values(metric))[1]

    def summary(self) -> dict[str, float]:
        """Flat dict with `<metric>_mean` and `<metric>_std` for every metric in REPORTED."""
        out: dict[str, float] = {}
        for metric in REPORTED:
            out[f"{metric}_mean"] = self.mean(metric)
            out[f"{metric}_std"] = self.std(metric)
        return out


def shift_metrics(
    source: Any,
    source_labels: Any,
    target: Any,
    target_labels: Any,
    *,
    seeds: Iterable[int] = (0, 1, 2),
    num_classes: int | None = None,
    hypothesis: str = "mlp",
    steps: int = 300,
    batch_size: int = 128,
    lr: float = 1e-3,
) -> ShiftMetrics:
    """Estimate M_cov, M_cpt^min, M_cpt^max and M_cpt^max - M_cov for each seed.

    Parameters
    ----------
    source, target : array-like of shape (n_source, ...) and (n_target, ...)
        Inputs (images (C, H, W) or feature vectors) with one sample shape.
    source_labels, target_labels : array-like of int
        Class ids of the two sets.
    seeds : iterable of int
        One independent estimate per seed (halves, initial weights, minibatch order).
    num_classes : int, optional
        Size of the label space; by default 1 + the largest label.
    hypothesis, steps, batch_size, lr : as in `oodeval.shift.covariate_shift`.

    Returns
    -------
    ShiftMetrics
        `per_seed` rows hold m_cov, m_cpt_min, m_cpt_max, cpt_minus_cov and the details
        (cov_source_minus_target, cov_target_minus_source, cpt_source, cpt_target,
        source_fit_error, target_fit_error).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(0.0, 1.0, (400, 2)); y = (x[:, 0] > 0).astype(int)
    >>> res = shift_metrics(x[:200], y[:200], x[200:], y[200:], seeds=[0, 1], steps=100)
    >>> res.mean("m_cov") < 0.2 and res.mean("m_cpt_max") < 0.2
    True
    """
    from oodeval.shift.concept import concept_shift
    from oodeval.shift.discrepancy import covariate_shift

    seed_list = tuple(int(s) for s in seeds)
    if not seed_list:
        raise OodevalError("give at least one seed")
    if len(set(seed_list)) != len(seed_list):
        raise OodevalError(f"seeds must be distinct, got {list(seed_list)}")
    labels_s = np.asarray(source_labels)
    labels_t = np.asarray(target_labels)
    if num_classes is None and labels_s.size and labels_t.size:
        try:
            num_classes = max(int(labels_s.max()), int(labels_t.max()), 1) + 1
        except (TypeError, ValueError):
            num_classes = None  # the concept estimator reports the bad labels
    options: dict[str, Any] = dict(hypothesis=hypothesis, steps=steps, batch_size=batch_size, lr=lr)
    rows = []
    for seed in seed_list:
        cpt = concept_shift(
            source, labels_s, target, labels_t, num_classes=num_classes, seed=seed, **options
        )
        cov = covariate_shift(source, target, num_classes=num_classes or 2, seed=seed, **options)
        rows.append(
            {
                "m_cov": cov.value,
                "m_cpt_min": cpt.minimum,
                "m_cpt_max": cpt.maximum,
                "cpt_minus_cov": cpt.maximum - cov.value,
                "cov_source_minus_target": cov.source_minus_target,
                "cov_target_minus_source": cov.target_minus_source,
                "cpt_source": cpt.source_disagreement,
                "cpt_target": cpt.target_disagreement,
                "source_fit_error": cpt.source_fit_error,
                "target_fit_error": cpt.target_fit_error,
            }
        )
    return ShiftMetrics(
        seeds=seed_list, per_seed=tuple(rows), options={**options, "num_classes": num_classes}
    )
