"""ARM-CML: adaptive risk minimisation with a context network (Zhang et al., 2021).

A context network maps every image to a one-channel context map; the maps are averaged over the
batch (one environment's minibatch in training, one prediction chunk at test time) and appended to
each image as an extra channel, so the model adapts its predictions to the batch it sees.
The context network is three 3x3 convolutions of `arm_context_channels` channels with GroupNorm
(DomainBed: 64 channels, 5x5, BatchNorm); smaller for CPU, and GroupNorm so that no statistic is
shared across environments of a leave-one-out fold.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from oodeval.algorithms.base import adam
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, fixed
from oodeval.algorithms.networks import (
    EnsembleConv2d,
    EnsembleGroupNorm,
    from_grouped,
    to_grouped,
)
from oodeval.algorithms.registry import register_algorithm
from oodeval.errors import OodevalError


class ContextNet(nn.Module):
    """M stacked context networks: (n, C, H, W) images -> (M, n, 1, H, W) context maps."""

    def __init__(self, num_models: int, in_channels: int, channels: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [
                EnsembleConv2d(num_models, in_channels, channels, 3, padding=1),
                EnsembleConv2d(num_models, channels, channels, 3, padding=1),
                EnsembleConv2d(num_models, channels, 1, 3, padding=1),
            ]
        )
        groups = 4 if channels % 4 == 0 else 1
        self.norms = nn.ModuleList(
            EnsembleGroupNorm(num_models, groups, channels) for _ in range(2)
        )
        self.num_models = num_models

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = to_grouped(x, self.num_models)
        for conv, norm in zip(self.convs[:2], self.norms, strict=True):
            h = F.relu(norm(conv(h)))
        return from_grouped(self.convs[2](h), self.num_models)


@register_algorithm
class ARM(ERM):
    """ERM on images augmented with the batch-mean context map of a learned context network."""

    HPARAMS = {
        "arm_context_channels": HParam(16, fixed(16), "width of the context network"),
    }
    batch_dependent = True

    def featurizer_input_shape(self) -> tuple[int, ...]:
        if len(self.input_shape) != 3:
            raise OodevalError(f"ARM needs (C, H, W) image inputs, got shape {self.input_shape}")
        c, h, w = self.input_shape
        return (c + 1, h, w)

    def build_extra_parts(self) -> None:
        channels = int(self.hparams["arm_context_channels"])
        self.context_net = ContextNet(self.num_models, self.input_shape[0], channels)

    def build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over the network and the context network."""
        return adam([*self.network.parameters(), *self.context_net.parameters()], self.hparams)

    def with_context(self, x: torch.Tensor) -> torch.Tensor:
        """Image groups ([M,] G, n, C, H, W) plus their group-mean context map.

        Returns per-model inputs (M, G * n, C + 1, H, W).
        """
        g, n = x.shape[-5:-3]
        ctx = self.context_net(self.flat_inputs(x))
        ctx = ctx.reshape(self.num_models, g, n, *ctx.shape[2:]).mean(dim=2, keepdim=True)
        images = x if x.dim() == 6 else x.expand(self.num_models, *x.shape)
        joint = torch.cat([images, ctx.expand(-1, -1, n, -1, -1, -1)], dim=3)
        return joint.reshape(self.num_models, g * n, *joint.shape[3:])

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        e, b = y.shape[-2:]
        logits = self.classifier(self.featurizer(self.with_context(x)))
        loss = self.erm_loss(logits.view(self.num_models, e, b, -1), y)
        self.step(loss)
        return {"loss": loss.detach()}

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.featurizer(self.with_context(x[None])))
