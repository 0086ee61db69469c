"""Penalties for invariance across environments: IRM and V-REx.

Both multiply their penalty by 1 during the first ``*_penalty_anneal_iters`` updates and by
``lambda`` afterwards; at the update where the weight switches, Adam's moment estimates are reset
(as DomainBed does), because the loss scale jumps by orders of magnitude.
"""

from __future__ import annotations

from abc import abstractmethod

import torch
from torch.nn import functional as F

from oodeval.algorithms.base import masked_mean, per_env_cross_entropy
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, log_uniform, log_uniform_int
from oodeval.algorithms.registry import register_algorithm


def irm_penalties(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """IRMv1 penalty per (model, environment), unbiased two-half estimate: (M, E).

    ``P_e = grad_w CE(w * f(x_odd)) . grad_w CE(w * f(x_even))`` at the dummy scale w = 1
    (Arjovsky et al., 2019, Eq. IRMv1; the product of two half-batch gradients estimates
    ``||grad_w R_e||^2`` without bias).

    >>> logits = torch.zeros(1, 1, 4, 2)  # d/dw CE(w * 0) = 0, so no penalty
    >>> irm_penalties(logits, torch.tensor([[0, 1, 0, 1]])).tolist()
    [[0.0]]
    """
    m, e, b, c = logits.shape
    scale = torch.ones(m, e, 1, 1, dtype=logits.dtype, device=logits.device, requires_grad=True)
    grads = []
    for half in (slice(0, None, 2), slice(1, None, 2)):
        part = logits[:, :, half] * scale
        labels = y[..., half].expand(m, e, -1)
        loss = F.cross_entropy(part.reshape(-1, c), labels.reshape(-1), reduction="none")
        per_env = loss.view(m, e, -1).mean(dim=2)
        (grad,) = torch.autograd.grad(per_env.sum(), scale, create_graph=True)
        grads.append(grad.view(m, e))
    return grads[0] * grads[1]


def _annealed_hparams(prefix: str, default_lambda: float, label: str) -> dict[str, HParam]:
    """The two hyperparameters of an annealed penalty, with DomainBed's names and search
    distributions: ``PREFIX_lambda`` and ``PREFIX_penalty_anneal_iters``."""
    return {
        f"{prefix}_lambda": HParam(
            default_lambda, log_uniform(-1, 5), f"{label} penalty weight after annealing"
        ),
        f"{prefix}_penalty_anneal_iters": HParam(
            500, log_uniform_int(0, 4), f"updates with penalty weight 1 before {prefix}_lambda"
        ),
    }


class _AnnealedPenalty(ERM):
    """ERM plus ``weight * penalty`` where weight = 1 before the anneal step and lambda after.

    A subclass names its two hyperparameters by `prefix` (`_annealed_hparams`).
    """

    prefix = ""

    @property
    def lambda_key(self) -> str:
        return f"{self.prefix}_lambda"

    @property
    def anneal_key(self) -> str:
        return f"{self.prefix}_penalty_anneal_iters"

    def penalty_weight(self) -> float:
        """The penalty weight for the current update (1 before annealing ends)."""
        anneal = int(self.hparams[self.anneal_key])
        return float(self.hparams[self.lambda_key]) if self.update_count >= anneal else 1.0

    @abstractmethod
    def penalties(self, nll: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The per-model penalty (M,)."""

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.update_count == int(self.hparams[self.anneal_key]):
            self.reset_optimizer()
        _, logits = self.logits_per_env(x)
        per_env = per_env_cross_entropy(logits, y)
        nll = masked_mean(per_env, self.env_mask)
        penalty = self.penalties(per_env, logits, y)
        weight = self.penalty_weight()
        loss = nll + weight * penalty
        self.step(loss)
        return {"loss": loss.detach(), "nll": nll.detach(), "penalty": penalty.detach()}


@register_algorithm
class IRM(_AnnealedPenalty):
    """Invariant risk minimisation, IRMv1 (Arjovsky et al., 2019): ``mean_e CE_e + w mean_e P_e``.

    P_e is `irm_penalties`; w is 1 before `irm_penalty_anneal_iters` updates, then irm_lambda.
    """

    prefix = "irm"
    HPARAMS = _annealed_hparams(prefix, 1e2, "IRM")

    def penalties(self, nll: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return masked_mean(irm_penalties(logits, y), self.env_mask)


@register_algorithm
class VREx(_AnnealedPenalty):
    """Variance risk extrapolation (Krueger et al., 2021): ``mean_e R_e + w Var_e R_e``.

    The variance is the population variance of the per-environment risks of each model's own
    training environments.
    """

    prefix = "vrex"
    HPARAMS = _annealed_hparams(prefix, 1e1, "V-REx")

    def penalties(self, nll: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mean = masked_mean(nll, self.env_mask)
        return masked_mean((nll - mean[:, None]) ** 2, self.env_mask)
