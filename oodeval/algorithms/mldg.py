"""MLDG: meta-learning for domain generalisation (Li et al., 2018), first-order.

Each update splits every model's training environments at random into a meta-train part and one
meta-test environment, takes a virtual SGD step on the meta-train risk and adds the meta-test risk
at the stepped parameters:

``J(theta) = R_tr(theta) + beta R_te(theta - alpha grad R_tr(theta))``, alpha = lr,

with the first-order gradient ``grad R_tr(theta) + beta grad R_te(theta')`` (the inner gradient is
not differentiated again, as in DomainBed). With two training environments the split is one and
one, so the meta-test term is always present (DomainBed's MLDG skips the update there); a model
with a single training environment has no meta-test environment and falls back to ERM.
"""

from __future__ import annotations

import torch
from torch.func import functional_call

from oodeval.algorithms.base import masked_mean, per_env_cross_entropy
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, log_uniform
from oodeval.algorithms.registry import register_algorithm


def meta_split(mask: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per model: meta-test = its last own environment in `order` (if >= 2); meta-train = rest.

    >>> train, test = meta_split(torch.tensor([[True, True, False]]), torch.tensor([1, 0, 2]))
    >>> train.tolist(), test.tolist()
    ([[False, True, False]], [[True, False, False]])
    """
    test = torch.zeros_like(mask)
    for row in range(mask.shape[0]):
        own = [int(i) for i in order if mask[row, i]]
        if len(own) >= 2:
            test[row, own[-1]] = True
    return mask & ~test, test


@register_algorithm
class MLDG(ERM):
    """First-order MLDG with a random meta-train / meta-test split of the environments."""

    HPARAMS = {"mldg_beta": HParam(1.0, log_uniform(-1, 1), "weight of the meta-test risk")}

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        e, b = y.shape[-2:]
        train_mask, test_mask = meta_split(self.env_mask, torch.randperm(e))
        flat = self.flat_inputs(x)
        params = dict(self.network.named_parameters())
        logits = self.network(flat).view(self.num_models, e, b, -1)
        meta_train = masked_mean(per_env_cross_entropy(logits, y), train_mask)
        grads = torch.autograd.grad(meta_train.sum(), list(params.values()), retain_graph=True)
        alpha = float(self.hparams["lr"])
        stepped = {
            k: p - alpha * g.detach() for (k, p), g in zip(params.items(), grads, strict=True)
        }
        logits_te = functional_call(self.network, stepped, (flat,)).view(self.num_models, e, b, -1)
        meta_test = masked_mean(per_env_cross_entropy(logits_te, y), test_mask)
        loss = meta_train + float(self.hparams["mldg_beta"]) * meta_test
        self.step(loss)
        return {
            "loss": loss.detach(),
            "meta_train": meta_train.detach(),
            "meta_test": meta_test.detach(),
        }
