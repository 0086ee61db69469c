"""ARM-CML: adaptive risk minimisation with a context network (Zhang et al., 2021), as in DomainBed.

A context network maps every image to a one-channel context map; the maps are averaged over each
group of images (one environment's minibatch in training; at prediction, groups of the training
minibatch size B when the batch splits evenly into them, else the whole batch, as DomainBed's
``support_size`` rule) and appended to each image of the group as an extra channel, so the model
adapts its predictions to the batch it sees.

The context network is DomainBed's: three 5x5 convolutions (padding 2) of `arm_context_channels`
(64) channels, the first two followed by BatchNorm and ReLU. Its BatchNorm normalises with the
statistics of all the model's images in the update (all its environments' minibatches) in training
and with running averages (momentum 0.1) at prediction; each stacked model has its own.

On a ResNet, ImageNet normalisation (the trainer's ``imagenet_normalize``) is DomainBed's: the
context network sees the normalised images (`ERM.normalized_images`), and the featurizer
normalises the image channels of its input and leaves the context channel as it is
(``image_channels``), as DomainBed, whose datasets normalise the images before ARM appends the
context, does.

DomainBed's defect, kept by default: DomainBed creates the context network after the optimizer, so
the network is never trained; it keeps its random initialisation (only the BatchNorm running
statistics move). ``arm_train_context_net=True`` adds it to the optimizer, as the paper intends.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from oodeval.algorithms.base import adam
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, fixed
from oodeval.algorithms.networks import (
    EnsembleBatchNorm2d,
    EnsembleConv2d,
    from_grouped,
    model_images,
    stacked_layout,
    to_grouped,
)
from oodeval.algorithms.registry import register_algorithm
from oodeval.errors import OodevalError


def valid_row(valid: torch.Tensor | None, m: int) -> torch.Tensor | None:
    """Model `m`'s row of a (M, n) mask of valid images, or None when every image is valid."""
    return None if valid is None else valid[m]


class ContextNet(nn.Module):
    """M stacked DomainBed context networks: images -> group-mean context maps.

    conv5x5(C -> k) -> BN -> ReLU -> conv5x5(k -> k) -> BN -> ReLU -> conv5x5(k -> 1), padding 2.
    """

    def __init__(self, num_models: int, in_channels: int, channels: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [
                EnsembleConv2d(num_models, in_channels, channels, 5, padding=2),
                EnsembleConv2d(num_models, channels, channels, 5, padding=2),
                EnsembleConv2d(num_models, channels, 1, 5, padding=2),
            ]
        )
        self.norms = nn.ModuleList(EnsembleBatchNorm2d(num_models, channels) for _ in range(2))
        self.num_models = num_models

    def forward(
        self, x: torch.Tensor, groups: int, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Each group's mean context map (M, groups, 1, H, W) of images (n, C, H, W) shared or
        (M, n, C, H, W) per model, in `groups` consecutive groups; `valid` (M, n) or None.

        The convolutions run as `conv_layout` says. The last convolution is linear, so the mean
        of its maps over a group is its map of the group's mean activations: one convolution per
        group instead of one per image.
        """
        # the ModuleLists' items, typed (nn.ModuleList's are typed nn.Module)
        layers = cast(
            "list[tuple[EnsembleConv2d, EnsembleBatchNorm2d]]",
            list(zip(self.convs[:2], self.norms, strict=True)),
        )
        if stacked_layout(x.device) == "grouped":
            h = to_grouped(x, self.num_models)
            for conv, norm in layers:
                h = F.relu(norm(conv(h), valid))
            h = h.reshape(groups, -1, *h.shape[1:]).mean(dim=1)
            return from_grouped(self.convs[2](h), self.num_models)
        maps = []
        for m in range(self.num_models):
            h = model_images(x if x.dim() == 4 else x[m])
            for conv, norm in layers:
                h = F.relu(norm.forward_model(m, conv.forward_model(m, h), valid_row(valid, m)))
            h = h.reshape(groups, -1, *h.shape[1:]).mean(dim=1)
            maps.append(cast(EnsembleConv2d, self.convs[2]).forward_model(m, h))
        return torch.stack(maps)


@register_algorithm
class ARM(ERM):
    """ERM on images augmented with the group-mean context map of a context network."""

    # a buffer, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    support_size: torch.Tensor

    HPARAMS = {
        "arm_context_channels": HParam(
            64, fixed(64), "width of the context network (DomainBed 64)"
        ),
        "arm_train_context_net": HParam(
            False, fixed(False), "train the context network (DomainBed never does)"
        ),
    }
    batch_dependent = True
    CPU_BUFFERS = ("support_size",)

    def featurizer_input_shape(self) -> tuple[int, ...]:
        if len(self.input_shape) != 3:
            raise OodevalError(f"ARM needs (C, H, W) image inputs, got shape {self.input_shape}")
        c, h, w = self.input_shape
        return (c + 1, h, w)

    def build_extra_parts(self) -> None:
        channels = int(self.hparams["arm_context_channels"])
        self.context_net = ContextNet(self.num_models, self.input_shape[0], channels)
        self.context_net.requires_grad_(self.trains_context())
        #: the training minibatch size B, DomainBed's support size for prediction groups
        self.register_buffer("support_size", torch.zeros(self.num_models, dtype=torch.long))
        #: every model trains on every slot (read from the mask once, not on every update)
        self.all_envs = all(len(own) == self.num_envs for own in self.own_envs)

    def trains_context(self) -> bool:
        """True when the context network learns (``arm_train_context_net``)."""
        return self.flag("arm_train_context_net")

    def build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over the network, plus the context network when it is trained."""
        params = list(self.network.parameters())
        if self.trains_context():
            params += list(self.context_net.parameters())
        return adam(params, self.hparams)

    def with_context(self, x: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Image groups ([M,] G, n, C, H, W) plus their group-mean context map.

        `valid` (M, G * n) marks the images each model's BatchNorm may use (None: all).
        Returns per-model inputs (M, G * n, C + 1, H, W).
        """
        g, n = x.shape[-5:-3]
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.trains_context()):
            ctx = self.context_net(self.normalized_images(self.flat_inputs(x)), g, valid)
        ctx = ctx[:, :, None]
        images = x if x.dim() == 6 else x.expand(self.num_models, *x.shape)
        joint = torch.cat([images, ctx.expand(-1, -1, n, -1, -1, -1)], dim=3)
        return joint.reshape(self.num_models, g * n, *joint.shape[3:])

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        e, b = y.shape[-2:]
        self.support_size.fill_(b)
        valid = None
        if x.dim() == 5 and not self.all_envs:  # shared minibatches, masked models
            valid = self.env_mask.repeat_interleave(b, dim=1)
        logits = self.classifier(self.featurizer(self.with_context(x, valid)))
        loss = self.erm_loss(logits.view(self.num_models, e, b, -1), y)
        self.step(loss)
        return {"loss": loss.detach()}

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.predict_from(x, self.per_image(x))

    def per_image(self, x: torch.Tensor) -> torch.Tensor:
        """Each image's own context map (M, n, 1, H, W) at prediction (eval mode, where the
        context net's BatchNorm uses running statistics, so each map depends on its image only).

        A group's context map is the mean of its images' maps (the last convolution is linear),
        so the maps of images shared by many test environments are computed once
        (`predict_from`).
        """
        return self.context_net(self.normalized_images(x), x.shape[0])

    def predict_from(self, x: torch.Tensor, maps: torch.Tensor) -> torch.Tensor:
        """Logits (M, n, classes) of images `x` (n, C, H, W) whose context maps are `maps`
        (`per_image`): in groups of the training batch size B when B divides n (DomainBed's
        support size), else one group."""
        n = x.shape[0]
        support = int(self.support_size[0])  # a CPU buffer (CPU_BUFFERS): no device read
        groups = n // support if support > 0 and n % support == 0 else 1
        ctx = maps.reshape(self.num_models, groups, n // groups, *maps.shape[2:]).mean(dim=2)
        images = x.reshape(groups, n // groups, *x.shape[1:]).expand(self.num_models, -1, -1, -1,
                                                                     -1, -1)  # fmt: skip
        joint = torch.cat([images, ctx[:, :, None].expand(-1, -1, n // groups, -1, -1, -1)], dim=3)
        joint = joint.reshape(self.num_models, n, *joint.shape[3:])
        return self.classifier(self.featurizer(joint))
