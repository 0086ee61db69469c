"""Inter-environment Mixup (Yan et al., 2020; Wang et al., 2020).

Each model orders its training environments by a random permutation and pairs every environment
with the next one (cyclically); a pair (i, j) is mixed with ``lam ~ Beta(alpha, alpha)``:
``x = lam x_i + (1 - lam) x_j`` and ``L = lam CE(f(x), y_i) + (1 - lam) CE(f(x), y_j)``.
A model with a single training environment mixes that environment with itself.
"""

from __future__ import annotations

import torch

from oodeval.algorithms.base import masked_mean, per_env_cross_entropy
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, log_uniform
from oodeval.algorithms.registry import register_algorithm


def cyclic_pairs(mask: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per model, the pairs (order-consecutive environments) of its own environments.

    Returns first (M, E), second (M, E) environment indices and the (M, E) validity of each pair
    slot (a model with k environments fills k slots).

    >>> mask = torch.tensor([[True, False, True], [True, True, True]])
    >>> first, second, valid = cyclic_pairs(mask, torch.tensor([2, 0, 1]))
    >>> first[valid].tolist(), second[valid].tolist()
    ([2, 0, 2, 0, 1], [0, 2, 0, 1, 2])
    """
    m, e = mask.shape
    first = torch.zeros(m, e, dtype=torch.long)
    second = torch.zeros(m, e, dtype=torch.long)
    valid = torch.zeros(m, e, dtype=torch.bool)
    for row in range(m):
        own = [int(i) for i in order if mask[row, i]]
        for slot, env in enumerate(own):
            first[row, slot], second[row, slot] = env, own[(slot + 1) % len(own)]
            valid[row, slot] = True
    return first, second, valid


@register_algorithm
class Mixup(ERM):
    """ERM on convex combinations of minibatches from pairs of training environments."""

    HPARAMS = {"mixup_alpha": HParam(0.2, log_uniform(-1, 1), "Beta(alpha, alpha) mixing weights")}

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        m = self.num_models
        labels = self.labels_per_model(y)
        e, b = labels.shape[1:]
        images = x if x.dim() == len(self.input_shape) + 3 else x.expand(m, *x.shape)
        first, second, valid = cyclic_pairs(self.env_mask, torch.randperm(e))
        alpha = float(self.hparams["mixup_alpha"])
        lam = torch.distributions.Beta(alpha, alpha).sample((m, e))
        rows = torch.arange(m)[:, None]
        shape = (m, e) + (1,) * (images.dim() - 2)
        mixed = lam.view(shape) * images[rows, first] + (1 - lam.view(shape)) * images[rows, second]
        logits = self.classifier(self.featurizer(self.flat_inputs(mixed))).view(m, e, b, -1)
        pair_loss = lam * per_env_cross_entropy(logits, labels[rows, first]) + (1 - lam) * (
            per_env_cross_entropy(logits, labels[rows, second])
        )
        loss = masked_mean(pair_loss, valid)
        self.step(loss)
        return {"loss": loss.detach()}
