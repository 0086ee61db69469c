"""GroupDRO: minimise a softly-worst mixture of environment risks (Sagawa et al., 2020).

After each minibatch the environment weights are updated by exponentiated gradient ascent,
``q_e <- q_e exp(eta R_e) / sum_e' q_e' exp(eta R_e')``, and the model minimises ``sum_e q_e R_e``;
the weights therefore move toward the environment with the largest risk.
"""

from __future__ import annotations

import torch

from oodeval.algorithms.base import per_env_cross_entropy
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, log_uniform
from oodeval.algorithms.registry import register_algorithm


@register_algorithm
class GroupDRO(ERM):
    """Group distributionally robust optimisation; environment weights ``q`` of shape (M, E)."""

    # a buffer, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    q: torch.Tensor
    HPARAMS = {"groupdro_eta": HParam(1e-2, log_uniform(-3, -1), "step size of the q update")}

    def build_extra_parts(self) -> None:
        mask = self.env_mask.float()
        self.register_buffer("q", mask / mask.sum(dim=1, keepdim=True))

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        _, logits = self.logits_per_env(x)
        risks = per_env_cross_entropy(logits, y)
        with torch.no_grad():
            eta = float(self.hparams["groupdro_eta"])
            # subtracting the per-model max risk before exp() leaves q unchanged after normalising
            own = torch.where(self.env_mask, risks, torch.full((), -torch.inf, device=risks.device))
            shifted = own - own.max(dim=1, keepdim=True).values
            q = torch.where(
                self.env_mask,
                self.q * torch.exp(eta * shifted),
                torch.zeros((), device=risks.device),
            )
            self.q.copy_(q / q.sum(dim=1, keepdim=True))
        loss = (
            self.q * torch.where(self.env_mask, risks, torch.zeros((), device=risks.device))
        ).sum(dim=1)
        self.step(loss)
        return {"loss": loss.detach()}
