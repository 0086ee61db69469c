"""GMoP's training objective: its terms, the weight of each, and the gate of the ranking term.

The objective (OP_fin) of Section 5.1 of the OpenworldAUC paper with the cross-entropy
regulariser of Section 6.3 ("Sensitivity Analysis of lambda") and App. D.10, for one batch::

    L = l_ce(g)                                            weight 1, as in (OP_fin)
      + w_rank * (1/K) sum_k R_k                           w_rank = 1 in (OP_fin)
      + lambda * (1/K) sum_k l_ce(r_k)                     the paper's lambda, best in [1/2, 1]

    R_k = 1/(n_b n_n) sum_{i in pseudo-base} sum_{j in pseudo-new}
          phi_b(i) * l_sq(r_k(x_i) - r_k(x_j)) * phi_n(j),     l_sq(t) = (1 - t)^2

* ``l_ce(g)``: the base classifier g's cross-entropy over the base classes;
* ``R_k``: the gated AUC ranking term of sub-detector r_k on pseudo partition k (its pseudo-base
  samples against its pseudo-new ones). Its weight ``w_rank`` (`GMoPConfig.ranking_weight`,
  ``--ranking-weight``) is 1 in the paper, which names no symbol for it; 0 drops the term;
* ``l_ce(r_k)``: sub-detector r_k's cross-entropy on its pseudo-base samples (softmax over every
  base class). This is the paper's "cross-entropy regularisation term lambda * l_ce" that keeps
  the AUC loss from harming the features; ``lambda`` is `GMoPConfig.ce_weight` (``--lambda``,
  also spelled ``--ce-weight``).

Gates (Table 17's three rows, `GMoPConfig.gate`), with ``p(y|x)`` the softmax probability of the
ground-truth class -- g's over the pseudo-base classes for ``phi_b``, the zero-shot h's over the
pseudo-new classes for ``phi_n``:

* ``"sigmoid"`` (the paper's method): ``phi = sigmoid(p(y|x))``;
* ``"hard"`` ("0-1 Gate"): ``phi = 1[argmax_c p(c|x) = y]``, the selection ``v_b, v_n`` of
  Proposition 5.1 itself (no gradient reaches g through it);
* ``"none"`` ("w/o Gate"): ``phi = 1``, every pair counts.

What the sigmoid is applied to. The paper writes ``phi_b = sigmoid(s_b^y)`` with ``s_b^y`` the
ground-truth channel of g's output ``s_b`` and does not say whether that channel is a logit or a
probability. oodeval applies the sigmoid to the ground-truth *probability*: with CLIP's logit
scale (100 times a cosine of about 0.2-0.35) a sigmoid of the logit is 1 to within 1e-8 for
every sample, so the "sigmoid" gate would be the "none" row of Table 17, which the paper
reports as different. On probabilities every gate lies in [0.5, 0.731] and grows with the
classifier's confidence in the true class: a soft re-weighting of the pairs towards correctly
classified samples.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from oodeval._text import safe_text
from oodeval.errors import OodevalError

#: The gates of the ranking term, in Table 17's order reversed: the paper's method first.
GATES = ("sigmoid", "hard", "none")


@dataclass(frozen=True, init=False)
class GMoPConfig:
    """Hyper-parameters of GMoP training (defaults follow Section 5.1: K = 3 partitions).

    The terms of the objective (see `oodeval.openworld.objective`) and their weights:

    * ``ce_weight`` is the paper's **lambda** (Sec. 6.3, App. D.10): the weight of the
      cross-entropy regulariser ``l_ce(r_k)`` on the K sub-detectors; the paper finds lambda in
      [1/2, 1] best. It was called ``detector_weight`` ("alpha") before.
    * ``ranking_weight`` scales the gated AUC ranking term ``(1/K) sum_k R_k``; it is 1 in the
      paper's (OP_fin), which gives it no symbol. It was called ``auc_weight`` and wrongly
      labelled lambda before.
    * g's cross-entropy has weight 1.
    * ``gate``: ``"sigmoid"`` (the paper's), ``"hard"`` (0-1) or ``"none"`` (Table 17).

    ``logit_scale=None`` takes the feature file's scale; ``batch_size=None`` trains on the full
    (few-shot) set each step; ``weight_decay`` pulls every context towards the zero-shot
    classifier. Contexts start at zero (the zero-shot classifier), so ``seed`` only changes the
    mini-batch order: full-batch training gives the same model for every seed. The old keyword
    names ``auc_weight`` and ``detector_weight`` are still accepted for one release, with a
    FutureWarning. Everything after `n_partitions` is keyword-only.

    Examples
    --------
    >>> GMoPConfig(ce_weight=0.5).ce_weight, GMoPConfig().gate
    (0.5, 'sigmoid')
    """

    n_partitions: int = 3
    ce_weight: float = 1.0
    ranking_weight: float = 1.0
    gate: str = "sigmoid"
    steps: int = 200
    lr: float = 1e-2
    weight_decay: float = 1e-3
    batch_size: int | None = None
    logit_scale: float | None = None
    seed: int = 0

    def __init__(
        self,
        n_partitions: int = 3,
        *,
        ce_weight: float | None = None,
        ranking_weight: float | None = None,
        gate: str = "sigmoid",
        steps: int = 200,
        lr: float = 1e-2,
        weight_decay: float = 1e-3,
        batch_size: int | None = None,
        logit_scale: float | None = None,
        seed: int = 0,
        auc_weight: float | None = None,
        detector_weight: float | None = None,
    ) -> None:
        ranking_weight = _renamed(ranking_weight, auc_weight, "ranking_weight", "auc_weight")
        ce_weight = _renamed(ce_weight, detector_weight, "ce_weight", "detector_weight")
        values = {
            "n_partitions": n_partitions,
            "ce_weight": 1.0 if ce_weight is None else ce_weight,
            "ranking_weight": 1.0 if ranking_weight is None else ranking_weight,
            "gate": gate,
            "steps": steps,
            "lr": lr,
            "weight_decay": weight_decay,
            "batch_size": batch_size,
            "logit_scale": logit_scale,
            "seed": seed,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def auc_weight(self) -> float:
        """Deprecated name of `ranking_weight` (it is not the paper's lambda)."""
        warnings.warn(RENAMED["auc_weight"], FutureWarning, stacklevel=2)
        return self.ranking_weight

    @property
    def detector_weight(self) -> float:
        """Deprecated name of `ce_weight`, the paper's lambda."""
        warnings.warn(RENAMED["detector_weight"], FutureWarning, stacklevel=2)
        return self.ce_weight


#: What each old name became, as the FutureWarning says it.
RENAMED = {
    "auc_weight": (
        "GMoPConfig.auc_weight is now ranking_weight: it scales the gated AUC ranking term and is "
        "not the paper's lambda; lambda, the weight of the cross-entropy regulariser, is "
        "ce_weight (formerly detector_weight). auc_weight goes in the next release."
    ),
    "detector_weight": (
        "GMoPConfig.detector_weight is now ce_weight: it is the paper's lambda, the weight of the "
        "cross-entropy regulariser on the sub-detectors (formerly labelled alpha). "
        "detector_weight goes in the next release."
    ),
}


def _renamed(value: Any, old_value: Any, name: str, old_name: str) -> Any:
    """`value`, or the deprecated keyword's `old_value` (which wins, so that
    ``dataclasses.replace(config, auc_weight=0)`` still works) with a FutureWarning."""
    if old_value is None:
        return value
    warnings.warn(RENAMED[old_name], FutureWarning, stacklevel=3)
    return old_value


def check_config(config: GMoPConfig) -> None:
    """Raise OodevalError naming the first out-of-range hyper-parameter of `config`."""
    if not (config.steps >= 0 and config.lr > 0 and config.weight_decay >= 0):
        raise OodevalError("need steps >= 0, lr > 0 and weight_decay >= 0")
    for name, label in (("ce_weight", "ce_weight (lambda)"), ("ranking_weight", "ranking_weight")):
        value = getattr(config, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise OodevalError(f"{label} must be a finite number >= 0, got {safe_text(value)}")
    check_gate(config.gate)
    if config.batch_size is not None and config.batch_size < 1:
        raise OodevalError(
            f"batch_size must be a positive integer, got {config.batch_size}; "
            "omit it for full batch"
        )


def check_gate(gate: object) -> str:
    """`gate` if it is one of `GATES`, else OodevalError naming the accepted ones.

    >>> check_gate("hard")
    'hard'
    """
    if not isinstance(gate, str) or gate not in GATES:
        raise OodevalError(f"unknown gate {safe_text(repr(gate))}; use one of {', '.join(GATES)}")
    return gate


def objective_text(config: GMoPConfig) -> str:
    """The objective `config` trains, in the paper's symbols, on one line (ASCII).

    Examples
    --------
    >>> print(objective_text(GMoPConfig(ce_weight=0.5)))
    L = l_ce(g) + 1 * (1/K) sum_k R_k + lambda * (1/K) sum_k l_ce(r_k) with lambda = 0.5, K = 3; \
R_k = mean over pairs of phi_b * l_sq(r_k(x_b) - r_k(x_n)) * phi_n, gate sigmoid: \
phi = sigmoid(p(y|x))
    """
    gate = {
        "sigmoid": "phi = sigmoid(p(y|x))",
        "hard": "phi = 1[argmax p(.|x) = y]",
        "none": "phi = 1",
    }[config.gate]
    return (
        f"L = l_ce(g) + {config.ranking_weight:g} * (1/K) sum_k R_k + lambda * (1/K) sum_k "
        f"l_ce(r_k) with lambda = {config.ce_weight:g}, K = {config.n_partitions}; R_k = mean "
        f"over pairs of phi_b * l_sq(r_k(x_b) - r_k(x_n)) * phi_n, gate {config.gate}: {gate}"
    )


def gate_weights(logits: torch.Tensor, idx: torch.Tensor, gate: str) -> torch.Tensor:
    """The gate phi of each row of `logits` (n, C) whose true class is column `idx` (n,).

    ``"sigmoid"``: sigmoid of the softmax probability of the true class; ``"hard"``: 1 where the
    argmax is the true class, else 0; ``"none"``: 1 (see the module docstring).

    Examples
    --------
    >>> logits, idx = torch.tensor([[2.0, 0.0], [2.0, 0.0]]), torch.tensor([0, 1])
    >>> [round(v, 4) for v in gate_weights(logits, idx, "sigmoid").tolist()]
    [0.707, 0.5298]
    >>> gate_weights(logits, idx, "hard").tolist(), gate_weights(logits, idx, "none").tolist()
    ([1.0, 0.0], [1.0, 1.0])
    """
    if gate == "none":
        return logits.new_ones(logits.shape[0])
    if gate == "hard":
        return (logits.argmax(dim=1) == idx).to(logits.dtype)
    check_gate(gate)
    prob = logits.softmax(dim=1)
    return torch.sigmoid(prob.gather(1, idx[:, None])[:, 0])


def gated_auc_loss(
    scores_base: torch.Tensor,
    scores_new: torch.Tensor,
    gate_base: torch.Tensor,
    gate_new: torch.Tensor,
) -> torch.Tensor:
    """Mean over all (base, new) pairs of ``phi_b * (1 - (r_b - r_n))^2 * phi_n``, in O(n).

    With ``a_i = 1 - r_b(i)`` the pair term is ``(a_i + r_n(j))^2 = a_i^2 + 2 a_i r_n(j) +
    r_n(j)^2``, so the double sum factorises exactly into single sums::

        sum_ij phi_i phi_j (a_i + r_j)^2 = S(phi a^2) S(phi_n) + 2 S(phi a) S(phi_n r)
                                           + S(phi) S(phi_n r^2)

    Parameters
    ----------
    scores_base, gate_base : tensors of shape (n_b,)
    scores_new, gate_new : tensors of shape (n_n,)

    Examples
    --------
    >>> t = torch.tensor
    >>> float(gated_auc_loss(t([1.0, 0.5]), t([0.0]), t([1.0, 1.0]), t([1.0])))
    0.125
    """
    a = 1.0 - scores_base
    sum_gb, sum_gn = gate_base.sum(), gate_new.sum()
    total = (
        (gate_base * a * a).sum() * sum_gn
        + 2.0 * (gate_base * a).sum() * (gate_new * scores_new).sum()
        + sum_gb * (gate_new * scores_new * scores_new).sum()
    )
    return total / (scores_base.numel() * scores_new.numel())


def gated_auc_loss_pairwise(
    scores_base: torch.Tensor,
    scores_new: torch.Tensor,
    gate_base: torch.Tensor,
    gate_new: torch.Tensor,
) -> torch.Tensor:
    """Reference for `gated_auc_loss`: the explicit n_b x n_n matrix of pair terms, averaged."""
    diff = scores_base[:, None] - scores_new[None, :]
    return (gate_base[:, None] * (1.0 - diff) ** 2 * gate_new[None, :]).mean()
