"""Feature-distribution alignment across environments: Deep CORAL and MMD.

Both add ``gamma`` times the mean, over pairs of a model's training environments, of a distance
between the two environments' feature distributions to the mean risk:
``L = mean_e R_e + gamma * mean_{i<j} D(features_i, features_j)``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import cast

import torch

from oodeval.algorithms.base import env_pairs, mean_over_pairs
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, log_uniform
from oodeval.algorithms.registry import register_algorithm

#: bandwidths of the Gaussian kernel mixture used by MMD, k(a, b) = sum_g exp(-g ||a - b||^2)
MMD_GAMMAS = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)


def coral_distances(feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per model, the mean over its environment pairs of ``mean(dmu^2) + mean(dCov^2)``: (M,).

    feats: (M, E, B, d); covariances are unbiased (divide by B - 1), as in Sun & Saenko (2016).
    """
    b = feats.shape[2]
    mean = feats.mean(dim=2)
    centred = feats - mean[:, :, None]
    cov = torch.einsum("mebi,mebj->meij", centred, centred) / max(b - 1, 1)
    pairs = [
        (
            ((mean[:, i] - mean[:, j]) ** 2).mean(-1)
            + ((cov[:, i] - cov[:, j]) ** 2).mean((-2, -1)),
            k,
        )
        for i, j, k in env_pairs(mask)
    ]
    return mean_over_pairs(pairs, feats.shape[0], feats.device)


def mmd_distances(feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per model, the mean over its environment pairs of the biased Gaussian-mixture MMD^2: (M,).

    ``MMD^2(i, j) = mean k(a_i, a_i') + mean k(b_j, b_j') - 2 mean k(a_i, b_j)`` (Li et al., 2018).
    """
    m, e, b, d = feats.shape
    flat = feats.reshape(m, e * b, d)
    sq = (flat * flat).sum(-1)
    dist = (sq[:, :, None] + sq[:, None, :] - 2 * flat @ flat.transpose(1, 2)).clamp_min(0)
    kernel = cast(torch.Tensor, sum(torch.exp(-g * dist) for g in MMD_GAMMAS))  # never empty
    blocks = kernel.view(m, e, b, e, b).mean(dim=(2, 4))
    pairs = [
        (blocks[:, i, i] + blocks[:, j, j] - 2 * blocks[:, i, j], k) for i, j, k in env_pairs(mask)
    ]
    return mean_over_pairs(pairs, m, feats.device)


class _Alignment(ERM):
    HPARAMS = {"mmd_gamma": HParam(1.0, log_uniform(-1, 1), "weight of the alignment penalty")}

    @abstractmethod
    def distances(self, feats: torch.Tensor) -> torch.Tensor:
        """Per-model feature-distribution distance averaged over environment pairs, shape (M,)."""

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        feats, logits = self.logits_per_env(x)
        nll = self.erm_loss(logits, y)
        penalty = self.distances(feats)
        loss = nll + float(self.hparams["mmd_gamma"]) * penalty
        self.step(loss)
        return {"loss": loss.detach(), "nll": nll.detach(), "penalty": penalty.detach()}


@register_algorithm
class CORAL(_Alignment):
    """Deep CORAL (Sun & Saenko, 2016): match feature means and covariances across environments."""

    def distances(self, feats: torch.Tensor) -> torch.Tensor:
        return coral_distances(feats, self.env_mask)


@register_algorithm
class MMD(_Alignment):
    """MMD-AAE-style alignment (Li et al., 2018): a Gaussian-kernel MMD between environments."""

    def distances(self, feats: torch.Tensor) -> torch.Tensor:
        return mmd_distances(feats, self.env_mask)
