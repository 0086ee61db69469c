"""Inter-environment Mixup (Yan et al., 2020; Wang et al., 2020), as in DomainBed.

Each update, every model orders its E training environments by a random permutation and pairs
every environment with the next one, cyclically (DomainBed's ``random_pairs_of_minibatches``); a
pair (i, j) is mixed with its own ``lam ~ Beta(alpha, alpha)``: ``x = lam x_i + (1 - lam) x_j`` and
the model minimises ``(1 / E) sum_pairs [lam CE(f(x), y_i) + (1 - lam) CE(f(x), y_j)]``. A model
with a single training environment mixes it with itself.

Draws, from each model's own stream (`oodeval.algorithms.base.Algorithm.draw`): ``randperm(E)``,
then E uniforms u (float64), ``lam = F^-1(u)`` with F the Beta(alpha, alpha) CDF (inverse-CDF
sampling; DomainBed draws the same distribution with ``np.random.beta``).
"""

from __future__ import annotations

import torch

from oodeval.algorithms.base import masked_mean, per_env_cross_entropy
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, log_uniform
from oodeval.algorithms.registry import register_algorithm


def cyclic_pairs(
    orders: list[list[int]], num_envs: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per model, each environment of its order paired with the next one (cyclically).

    Returns first (M, E), second (M, E) environment indices and the (M, E) validity of each pair
    slot (a model with k environments fills its first k slots).

    >>> first, second, valid = cyclic_pairs([[2, 0], [1, 2, 0]], 3)
    >>> first[valid].tolist(), second[valid].tolist()
    ([2, 0, 1, 2, 0], [0, 2, 2, 0, 1])
    """
    m = len(orders)
    first = torch.zeros(m, num_envs, dtype=torch.long)
    second = torch.zeros(m, num_envs, dtype=torch.long)
    valid = torch.zeros(m, num_envs, dtype=torch.bool)
    for row, own in enumerate(orders):
        for slot, env in enumerate(own):
            first[row, slot], second[row, slot] = env, own[(slot + 1) % len(own)]
            valid[row, slot] = True
    return first, second, valid


def beta_draw(u: torch.Tensor, alpha: float) -> torch.Tensor:
    """Beta(alpha, alpha) samples from uniforms `u` by the inverse CDF (float64).

    >>> beta_draw(torch.tensor([0.5], dtype=torch.float64), 0.2).tolist()
    [0.5]
    """
    from scipy.special import betaincinv  # here: the rest of oodeval trains without scipy

    return torch.from_numpy(betaincinv(alpha, alpha, u.double().numpy()))


@register_algorithm
class Mixup(ERM):
    """ERM on convex combinations of minibatches from pairs of training environments."""

    HPARAMS = {"mixup_alpha": HParam(0.2, log_uniform(-1, 1), "Beta(alpha, alpha) mixing weights")}
    random_draws = True

    def mixing_draws(self) -> list[tuple[list[int], torch.Tensor]]:
        """Per model, its environments in pairing order and one Beta weight per pair (float64)."""
        alpha = float(self.hparams["mixup_alpha"])

        def sample(m: int, gen: torch.Generator) -> tuple[list[int], torch.Tensor]:
            own = self.own_envs[m]
            order = [own[i] for i in torch.randperm(len(own), generator=gen).tolist()]
            u = torch.rand(len(own), generator=gen, dtype=torch.float64)
            return order, beta_draw(u, alpha)

        return self.draw(sample)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        m = self.num_models
        labels = self.labels_per_model(y)
        e, b = labels.shape[1:]
        images = x if x.dim() == len(self.input_shape) + 3 else x.expand(m, *x.shape)
        draws = self.mixing_draws()
        first, second, valid = cyclic_pairs([order for order, _ in draws], e)
        lam = torch.zeros(m, e, dtype=torch.float64)
        for row, (_, weights) in enumerate(draws):
            lam[row, : len(weights)] = weights
        first, second, valid = (t.to(x.device) for t in (first, second, valid))
        lam = lam.to(device=x.device, dtype=torch.promote_types(x.dtype, torch.float32))
        rows = torch.arange(m, device=x.device)[:, None]
        shape = (m, e) + (1,) * (images.dim() - 2)
        mixed = lam.view(shape) * images[rows, first] + (1 - lam.view(shape)) * images[rows, second]
        logits = self.classifier(self.featurizer(self.flat_inputs(mixed))).view(m, e, b, -1)
        pair_loss = lam * per_env_cross_entropy(logits, labels[rows, first]) + (1 - lam) * (
            per_env_cross_entropy(logits, labels[rows, second])
        )
        loss = masked_mean(pair_loss, valid)
        self.step(loss)
        return {"loss": loss.detach()}
