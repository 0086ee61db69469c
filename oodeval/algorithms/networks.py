"""Ensembles of networks: M independent models whose parameters are stacked on a first axis.

The featurizers (`MODELS`, built by `build_featurizer`): ``mlp``, ``cnn`` and ``mnist_cnn`` for
small images, and DomainBed's ``resnet18`` and ``resnet50`` (`ResNet`: torchvision's names, frozen
BatchNorms, ``resnet_dropout``, ImageNet normalisation of the inputs), randomly initialised or
loaded with a torchvision state_dict (``pretrained=``, `oodeval.algorithms.pretrained`).

One batched call (``torch.baddbmm`` for linear layers, a grouped convolution for conv layers) runs
all M models at once, or the conv nets run the M models one after the other on their own
parameter rows (the ``"per_model"`` layout of `conv_layout`, faster on CPU); either way the
trainer trains a unit's N leave-one-out models and its full model together. Model ``m`` only
ever touches row ``m`` of every parameter, so the M models are exactly as independent as M
separate networks: their gradients never mix, and Adam (elementwise) on the stacked tensors is M
independent Adams.

Inputs are either *shared* by all models, shape ``(n, *input_shape)``, or *per model*, shape
``(M, n, *input_shape)``; outputs are always ``(M, n, features)``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
from torch import nn
from torch.nn import functional as F

from oodeval._contextvars import scoped_value
from oodeval.algorithms.hparams import featurizer_hparams
from oodeval.algorithms.pretrained import Weights, checked_weights, load_weights
from oodeval.errors import OodevalError
from oodeval.training.augment import imagenet_stats
from oodeval.training.options import PRECISIONS, check_precision

#: the torch dtype of each precision (`oodeval.training.options.PRECISIONS`): the arithmetic of
#: the ensembles' matrix products and convolutions (see `compute_precision`)
PRECISION_DTYPES = dict(zip(PRECISIONS, (torch.float32, torch.bfloat16), strict=True))
_COMPUTE_DTYPE: ContextVar[torch.dtype] = ContextVar("oodeval_compute_dtype", default=torch.float32)
#: how the conv nets run their M stacked models' convolutions (see `conv_layout`)
CONV_LAYOUTS = ("auto", "grouped", "per_model")
_CONV_LAYOUT: ContextVar[str] = ContextVar("oodeval_conv_layout", default="auto")
_IMAGENET_NORMALIZE: ContextVar[bool] = ContextVar("oodeval_imagenet_normalize", default=True)


@contextmanager
def compute_precision(precision: str, device: str | torch.device = "cpu") -> Iterator[None]:
    """Run the ensembles' matrix products and convolutions in `precision` inside the block.

    ``"fp32"`` (default) is plain float32. ``"bf16"`` is mixed precision: parameters, optimiser
    state, biases, activations between layers, normalisations, losses and penalties stay float32;
    only the products of `EnsembleLinear` and `EnsembleConv2d` take bfloat16 inputs (accumulated
    in float32 by oneDNN, rounded to bfloat16, handed on as float32), and gradients flow back
    through the same casts. On CPUs with native bfloat16 (`native_bf16`) the products run about
    4x faster; elsewhere they are emulated and slower than float32.

    On a GPU (`device` of another kind than ``"cpu"``), ``"bf16"`` is ``torch.autocast`` mixed
    precision instead: the layers run as under fp32, and autocast runs the products (and the other
    ops on its lower-precision list) in bfloat16 and keeps losses and normalisations in float32.

    >>> layer = EnsembleLinear(1, 3, 2)
    >>> with compute_precision("bf16"):
    ...     layer(torch.ones(4, 3)).dtype
    torch.float32
    """
    dtype = compute_dtype(precision)
    kind = torch.device(device).type
    if kind != "cpu" and dtype != torch.float32:
        with torch.autocast(kind, dtype=dtype):
            yield
        return
    with scoped_value(_COMPUTE_DTYPE, dtype):
        yield


@contextmanager
def conv_layout(layout: str) -> Iterator[None]:
    """Run the stacked conv nets' convolutions in `layout` inside the block.

    The math is the same in every layout (each model only ever meets its own parameter rows and
    its own images; float64 results agree to rounding), only the calls differ:

    - ``"grouped"``: the M models' activations side by side on the channel axis, (n, M * C, H, W),
      and one grouped convolution (``groups = M``) per layer for all of them, GroupNorm and
      BatchNorm per model over the same layout: one kernel launch per layer, what a GPU wants;
    - ``"per_model"``: model after model on its own contiguous (n, C, H, W) activations, in
      channels-last memory on the CPU: oneDNN's grouped convolution (its backward above all) slows
      down with the number and width of the groups, and ``torch.func.vmap`` over the models is
      slower still; on one CPU thread, MNIST_CNN forward + backward of 4 models on 192 rows each
      at 28x28 took 1.87 s model after model in channels-last (2.04 s in NCHW) against 2.96 s
      grouped and 4.19 s under vmap (benchmarks/conv_layouts.py, benchmarks/RESULTS.md);
    - ``"auto"`` (default): ``"grouped"`` on GPUs, ``"per_model"`` on the CPU (`stacked_layout`).

    >>> with conv_layout("grouped"):
    ...     stacked_layout(torch.device("cpu"))
    'grouped'
    """
    if layout not in CONV_LAYOUTS:
        raise OodevalError(
            f"unknown conv layout {layout!r}; choose one of {', '.join(CONV_LAYOUTS)}"
        )
    with scoped_value(_CONV_LAYOUT, layout):
        yield


@contextmanager
def imagenet_normalization(on: bool) -> Iterator[None]:
    """Build the ResNets inside the block with ImageNet normalisation of their inputs on or off
    (`ResNet.normalized`; on outside any block): what ``build_featurizer`` and `ResNet` do when
    not told (``normalize=None``). The trainer builds a unit's algorithms inside it with its
    ``imagenet_normalize`` option, so a ResNet that any algorithm builds follows it.

    >>> with imagenet_normalization(False):
    ...     ResNet18(1, (3, 8, 8)).normalize
    False
    >>> ResNet18(1, (3, 8, 8)).normalize
    True
    """
    if not isinstance(on, bool):
        raise OodevalError(f"imagenet_normalize must be true or false, got {on!r}")
    with scoped_value(_IMAGENET_NORMALIZE, on):
        yield


def imagenet_normalization_on() -> bool:
    """Whether the ResNets built now normalise their inputs (`imagenet_normalization`)."""
    return _IMAGENET_NORMALIZE.get()


def stacked_layout(device: torch.device) -> str:
    """``"grouped"`` or ``"per_model"``: the layout of `conv_layout` for tensors on `device`.

    >>> stacked_layout(torch.device("cpu"))
    'per_model'
    """
    layout = _CONV_LAYOUT.get()
    if layout == "auto":
        return "per_model" if device.type == "cpu" else "grouped"
    return layout


def model_images(h: torch.Tensor) -> torch.Tensor:
    """One model's images (n, C, H, W) in the memory format its convolutions run fastest in:
    channels-last on the CPU (oneDNN's native layout: no reorder around each convolution; 1.09x
    faster for MNIST_CNN forward + backward, benchmarks/conv_layouts.py), unchanged elsewhere."""
    if h.device.type != "cpu":
        return h
    return h.contiguous(memory_format=torch.channels_last)


def compute_dtype(precision: str) -> torch.dtype:
    """The torch dtype of `precision` ("fp32" or "bf16"); a one-line error for other names."""
    return PRECISION_DTYPES[check_precision(precision)]


@functools.cache
def native_bf16() -> bool:
    """True when this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX-BF16; Linux only)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


def _low(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
    """The tensors cast to the compute dtype of `compute_precision`, or None under fp32."""
    dtype = _COMPUTE_DTYPE.get()
    if dtype == torch.float32:
        return None
    return tuple(t.to(dtype) for t in tensors)


class EnsembleLinear(nn.Module):
    """M stacked linear layers ``y_m = x_m W_m + b_m`` with nn.Linear's default initialisation."""

    def __init__(self, num_models: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(
            torch.empty(num_models, in_features, out_features).uniform_(-bound, bound)
        )
        self.bias = nn.Parameter(torch.empty(num_models, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: (n, in) shared or (M, n, in) per model -> (M, n, out)."""
        low = _low(x, self.weight)
        if low is not None:
            return torch.matmul(*low).float() + self.bias
        if x.dim() == 2:
            return torch.matmul(x, self.weight) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """M stacked MLPs: `depth` linear layers, hidden width `width`, ReLU + dropout (DomainBed)."""

    def __init__(
        self,
        num_models: int,
        n_inputs: int,
        n_outputs: int,
        *,
        width: int = 256,
        depth: int = 3,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        sizes = [n_inputs] + [width] * (depth - 1) + [n_outputs]
        self.layers = nn.ModuleList(
            EnsembleLinear(num_models, a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        )
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.dropout(F.relu(x), self.dropout, self.training)
        return x


class MLPFeaturizer(nn.Module):
    """IRM-style MLP featurizer: flatten -> Linear(width) -> ReLU -> Linear(width) -> ReLU.

    The Colored-MNIST MLP of Arjovsky et al. (2019); ``n_outputs = width``.
    """

    def __init__(self, num_models: int, input_shape: tuple[int, ...], width: int = 256) -> None:
        super().__init__()
        self.input_shape = tuple(input_shape)
        n_in = math.prod(self.input_shape)
        self.fc1 = EnsembleLinear(num_models, n_in, width)
        self.fc2 = EnsembleLinear(num_models, width, width)
        self.n_outputs = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[: x.dim() - len(self.input_shape)]
        h = x.reshape(*lead, -1)
        return F.relu(self.fc2(F.relu(self.fc1(h))))


class EnsembleConv2d(nn.Module):
    """M stacked 2-D convolutions: all at once as one grouped convolution over ``(n, M * C, H, W)``
    (`forward`), or one model at a time (`forward_model`).

    Initialised as nn.Conv2d (uniform on +-1/sqrt(fan_in)), unless ``initialise=False`` leaves
    the weights for the caller to draw (the ResNets draw torchvision's).
    """

    def __init__(
        self,
        num_models: int,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
        initialise: bool = True,
    ) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)
        shape = (num_models, out_channels, in_channels, kernel_size, kernel_size)
        self.weight = nn.Parameter(torch.empty(shape))
        if initialise:
            self.weight.data.uniform_(-bound, bound)
        self.bias: nn.Parameter | None = None
        if bias:
            self.bias = nn.Parameter(torch.empty(num_models, out_channels).uniform_(-bound, bound))
        self.stride, self.padding, self.num_models = stride, padding, num_models

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``h``: (n, M * in_channels, H, W) -> (n, M * out_channels, H', W')."""
        m, out_c, in_c, k, _ = self.weight.shape
        bias = None if self.bias is None else self.bias.reshape(-1)
        low = _low(h, self.weight)
        if low is None:
            return F.conv2d(
                h,
                self.weight.reshape(m * out_c, in_c, k, k),
                bias,
                stride=self.stride,
                padding=self.padding,
                groups=m,
            )
        h, w = low
        out = F.conv2d(
            h, w.reshape(m * out_c, in_c, k, k), stride=self.stride, padding=self.padding, groups=m
        ).float()
        return out if bias is None else out + bias.reshape(1, -1, 1, 1)

    def forward_model(self, m: int, h: torch.Tensor) -> torch.Tensor:
        """Model `m` alone: ``h`` (n, in_channels, H, W) -> (n, out_channels, H', W')."""
        bias = None if self.bias is None else self.bias[m]
        low = _low(h, self.weight[m])
        if low is None:
            return F.conv2d(h, self.weight[m], bias, self.stride, self.padding)
        out = F.conv2d(low[0], low[1], stride=self.stride, padding=self.padding).float()
        return out if bias is None else out + bias.reshape(1, -1, 1, 1)


class EnsembleGroupNorm(nn.Module):
    """M stacked GroupNorms over the grouped layout (groups never straddle two models), or one
    model at a time (`forward_model`)."""

    def __init__(self, num_models: int, num_groups: int, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_models, channels))
        self.bias = nn.Parameter(torch.zeros(num_models, channels))
        self.num_groups = num_groups

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        m = self.weight.shape[0]
        return F.group_norm(h, m * self.num_groups, self.weight.reshape(-1), self.bias.reshape(-1))

    def forward_model(self, m: int, h: torch.Tensor) -> torch.Tensor:
        """Model `m` alone on ``h`` (n, channels, H, W)."""
        return F.group_norm(h, self.num_groups, self.weight[m], self.bias[m])


class EnsembleBatchNorm2d(nn.Module):
    """M stacked BatchNorm2d over the grouped layout (n, M * C, H, W), each on its own images.

    In training each model normalises with the mean and biased variance of its valid images
    (``valid`` (M, n); all images when None) and updates its running mean and unbiased variance
    with `momentum`; in evaluation it uses the running statistics (nn.BatchNorm2d's rules). With
    ``track_batches`` (the ResNets, whose names are torchvision's) it also counts each model's
    training batches in ``num_batches_tracked`` (M,), as nn.BatchNorm2d does; with momentum set,
    the count never enters the running averages.
    """

    # buffers, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    running_mean: torch.Tensor
    running_var: torch.Tensor
    num_batches_tracked: torch.Tensor

    def __init__(
        self,
        num_models: int,
        channels: int,
        *,
        momentum: float = 0.1,
        eps: float = 1e-5,
        track_batches: bool = False,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_models, channels))
        self.bias = nn.Parameter(torch.zeros(num_models, channels))
        self.register_buffer("running_mean", torch.zeros(num_models, channels))
        self.register_buffer("running_var", torch.ones(num_models, channels))
        if track_batches:
            self.register_buffer("num_batches_tracked", torch.zeros(num_models, dtype=torch.long))
        self.momentum, self.eps, self.track_batches = momentum, eps, track_batches

    def forward(self, h: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """All M models on the grouped layout (n, M * C, H, W); `valid` (M, n) or None."""
        m, c = self.weight.shape
        self.count_batch(slice(None))
        if valid is None or not self.training:  # every image counts: torch's fused kernel
            return F.batch_norm(
                h,
                self.running_mean.view(-1),
                self.running_var.view(-1),
                self.weight.reshape(-1),
                self.bias.reshape(-1),
                training=self.training,
                momentum=self.momentum,
                eps=self.eps,
            )
        n, _, height, width = h.shape
        out = self.masked(slice(None), h.view(n, m, c, height, width), valid)
        return out.view(n, m * c, height, width)

    def forward_model(
        self, m: int, h: torch.Tensor, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Model `m` alone on its images (n, C, H, W); `valid` (n,) or None."""
        self.count_batch(m)
        if valid is None or not self.training:
            return F.batch_norm(
                h,
                self.running_mean[m],
                self.running_var[m],
                self.weight[m],
                self.bias[m],
                training=self.training,
                momentum=self.momentum,
                eps=self.eps,
            )
        return self.masked(slice(m, m + 1), h[:, None], valid[None]).squeeze(1)

    def count_batch(self, rows: int | slice) -> None:
        """Count a training batch of models `rows` (only with ``track_batches``)."""
        if self.track_batches and self.training:
            with torch.no_grad():
                self.num_batches_tracked[rows] += 1

    def masked(self, rows: slice, v: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Training-mode BatchNorm of models `rows` (k of them) on ``v`` (n, k, C, H, W) with the
        statistics of their `valid` (k, n) images; updates their running statistics."""
        k, c = v.shape[1:3]
        weight, bias = self.weight[rows], self.bias[rows]
        w = valid.t().to(v.dtype).view(-1, k, 1, 1, 1)
        count = w.sum(dim=0).view(k, 1) * (v.shape[3] * v.shape[4])
        mean = (v * w).sum(dim=(0, 3, 4)) / count
        var = (((v - mean.view(1, k, c, 1, 1)) ** 2) * w).sum(dim=(0, 3, 4)) / count
        with torch.no_grad():
            unbiased = var * count / (count - 1).clamp_min(1)
            self.running_mean[rows].lerp_(mean.to(self.running_mean.dtype), self.momentum)
            self.running_var[rows].lerp_(unbiased.to(self.running_var.dtype), self.momentum)
        scale = weight / torch.sqrt(var + self.eps)
        out = (v - mean.view(1, k, c, 1, 1)) * scale.view(1, k, c, 1, 1)
        return out + bias.view(1, k, c, 1, 1)


def to_grouped(x: torch.Tensor, num_models: int, image_dims: int = 3) -> torch.Tensor:
    """Images shared (n, C, H, W) or per model (M, n, C, H, W) -> grouped (n, M * C, H, W)."""
    if x.dim() == image_dims + 1:
        return x.repeat(1, num_models, 1, 1)
    m, n, c, h, w = x.shape
    return x.transpose(0, 1).reshape(n, m * c, h, w)


def from_grouped(h: torch.Tensor, num_models: int) -> torch.Tensor:
    """Grouped (n, M * C, ...) -> per model (M, n, C, ...)."""
    n = h.shape[0]
    return h.reshape(n, num_models, -1, *h.shape[2:]).transpose(0, 1)


class ConvFeaturizer(nn.Module):
    """M stacked conv nets: 3x3 convs of `CHANNELS` channels (padding 1; stride 2 in the second),
    each followed by ReLU then GroupNorm(8 groups), then global average pooling.

    GroupNorm normalises each image alone, so no statistic is shared between images (or between
    the environments of a leave-one-out fold). Subclasses set `CHANNELS` and `NAME`.

    The M models run as one grouped convolution per layer or one after the other
    (`EnsembleConv2d.forward_model`), as `conv_layout` says (by default grouped on GPUs, model by
    model on the CPU, where the loop's forward + backward is 1.5x (fp32) to 1.9x (bf16) faster for
    mnist_cnn at M = 4, 2x faster for cnn at M = 12, and no slower at M = 1).
    """

    CHANNELS: tuple[int, ...] = ()
    NAME = "conv"
    GROUPS = 8

    def __init__(self, num_models: int, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise OodevalError(
                f"model={self.NAME!r} needs (C, H, W) inputs, got shape {input_shape}"
            )
        sizes = (input_shape[0], *self.CHANNELS)
        self.convs = nn.ModuleList(
            EnsembleConv2d(num_models, a, b, 3, stride=2 if i == 1 else 1, padding=1)
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))
        )
        self.norms = nn.ModuleList(
            EnsembleGroupNorm(num_models, self.GROUPS, ch) for ch in self.CHANNELS
        )
        self.num_models = num_models
        self.n_outputs = self.CHANNELS[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: images (n, C, H, W) shared or (M, n, C, H, W) per model -> (M, n, features)."""
        shared = x.dim() == 4
        if not shared and x.shape[0] != self.num_models:
            raise ValueError(
                f"per-model images for {x.shape[0]} models, expected {self.num_models}"
            )
        # the ModuleLists' items, typed (nn.ModuleList's are typed nn.Module)
        layers = cast(
            "list[tuple[EnsembleConv2d, EnsembleGroupNorm]]",
            list(zip(self.convs, self.norms, strict=True)),
        )
        if stacked_layout(x.device) == "grouped":
            h = to_grouped(x, self.num_models)
            for conv, norm in layers:
                h = norm(F.relu(conv(h)))
            return from_grouped(h.mean(dim=(2, 3)), self.num_models)
        feats = []
        for m in range(self.num_models):
            h = model_images(x if shared else x[m])
            for conv, norm in layers:
                h = norm.forward_model(m, F.relu(conv.forward_model(m, h)))
            feats.append(h.mean(dim=(2, 3)))
        return torch.stack(feats)


class CNNFeaturizer(ConvFeaturizer):
    """``model="cnn"``: a small CPU-friendly conv net for 2x14x14 images, 32, 64, 64 channels ->
    64 features; the layout of DomainBed's MNIST_CNN (`MNISTCNNFeaturizer`) with one conv fewer
    and half the channels."""

    CHANNELS = (32, 64, 64)
    NAME = "cnn"


class MNISTCNNFeaturizer(ConvFeaturizer):
    """``model="mnist_cnn"``: DomainBed's MNIST_CNN (its featurizer for 28x28 inputs), stacked.

    Four 3x3 convs with 64, 128, 128, 128 output channels, all with bias and padding 1, the second
    with stride 2 (28x28 -> 14x14); each followed by ReLU then GroupNorm(8 groups, eps 1e-5,
    affine); then the mean over all pixels -> 128 features (``n_outputs = 128``). DomainBed puts
    ``networks.Classifier`` on top, a plain linear layer unless ``nonlinear_classifier``; the
    algorithms here put an `EnsembleLinear` on top, the same.

    Initialisation: every stacked model is drawn from PyTorch's default initialisation of a
    single model (the same distributions, not the same random stream): conv and linear weights and
    biases uniform on +-1/sqrt(fan_in) (``kaiming_uniform_(a=sqrt(5))`` reduces to that bound;
    fan_in = in_channels x 3 x 3, or in_features), GroupNorm weight 1 and bias 0.
    """

    CHANNELS = (64, 128, 128, 128)
    NAME = "mnist_cnn"


def _run(
    layer: EnsembleConv2d | EnsembleBatchNorm2d, m: int | None, h: torch.Tensor
) -> torch.Tensor:
    """`layer` on all models in the grouped layout (`m` None) or on model `m` alone."""
    return layer(h) if m is None else layer.forward_model(m, h)


def _conv_bn(
    num_models: int, a: int, b: int, k: int, stride: int = 1
) -> tuple[EnsembleConv2d, EnsembleBatchNorm2d]:
    """A bias-free k x k convolution (padding k // 2) and the BatchNorm that follows it."""
    conv = EnsembleConv2d(
        num_models, a, b, k, stride=stride, padding=k // 2, bias=False, initialise=False
    )
    return conv, EnsembleBatchNorm2d(num_models, b, track_batches=True)


class ResidualBlock(nn.Module):
    """M stacked residual blocks: ``relu(residual(h) + shortcut(h))``, the shortcut being the
    identity or ``downsample`` (conv1x1(stride) -> bn) where the shape changes."""

    EXPANSION = 1
    downsample: nn.Sequential | None

    def residual(self, h: torch.Tensor, m: int | None) -> torch.Tensor:
        """The block's path before the sum with its input."""
        raise NotImplementedError

    def run(self, h: torch.Tensor, m: int | None) -> torch.Tensor:
        """The block on all models, grouped (`m` None), or on model `m` alone."""
        shortcut = h
        if self.downsample is not None:
            conv, bn = cast("tuple[EnsembleConv2d, EnsembleBatchNorm2d]", tuple(self.downsample))
            shortcut = _run(bn, m, _run(conv, m, h))
        return F.relu(self.residual(h, m) + shortcut)


class BasicBlock(ResidualBlock):
    """M stacked torchvision BasicBlocks: conv3x3(stride) -> bn -> relu -> conv3x3 -> bn."""

    def __init__(self, num_models: int, in_channels: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(num_models, in_channels, planes, 3, stride)
        self.conv2, self.bn2 = _conv_bn(num_models, planes, planes, 3)
        self.downsample = _downsample(num_models, in_channels, planes * self.EXPANSION, stride)

    def residual(self, h: torch.Tensor, m: int | None) -> torch.Tensor:
        out = F.relu(_run(self.bn1, m, _run(self.conv1, m, h)))
        return _run(self.bn2, m, _run(self.conv2, m, out))


class Bottleneck(ResidualBlock):
    """M stacked torchvision Bottlenecks (ResNet v1.5: the stride on the 3x3 conv): conv1x1 ->
    bn -> relu -> conv3x3(stride) -> bn -> relu -> conv1x1 (4 x planes) -> bn."""

    EXPANSION = 4

    def __init__(self, num_models: int, in_channels: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(num_models, in_channels, planes, 1)
        self.conv2, self.bn2 = _conv_bn(num_models, planes, planes, 3, stride)
        self.conv3, self.bn3 = _conv_bn(num_models, planes, planes * self.EXPANSION, 1)
        self.downsample = _downsample(num_models, in_channels, planes * self.EXPANSION, stride)

    def residual(self, h: torch.Tensor, m: int | None) -> torch.Tensor:
        out = F.relu(_run(self.bn1, m, _run(self.conv1, m, h)))
        out = F.relu(_run(self.bn2, m, _run(self.conv2, m, out)))
        return _run(self.bn3, m, _run(self.conv3, m, out))


def _downsample(num_models: int, a: int, b: int, stride: int) -> nn.Sequential | None:
    """torchvision's shortcut projection (conv1x1(stride) -> bn) where the shape changes."""
    if stride == 1 and a == b:
        return None
    return nn.Sequential(*_conv_bn(num_models, a, b, 1, stride))


def adapt_first_conv(weight: torch.Tensor, channels: int) -> torch.Tensor:
    """DomainBed's first conv for `channels` input channels: channel i of the new weight is
    channel ``i % 3`` of the RGB `weight` (..., out, 3, k, k).

    >>> w = torch.arange(3.0).view(1, 3, 1, 1)
    >>> adapt_first_conv(w, 4).flatten().tolist()
    [0.0, 1.0, 2.0, 0.0]
    """
    return weight[..., [i % 3 for i in range(channels)], :, :]


ModuleT = TypeVar("ModuleT", bound=nn.Module)


class ResNet(nn.Module):
    """M stacked DomainBed ResNets (``networks.ResNet``): torchvision's ResNet without ``fc``,
    its BatchNorms frozen, dropout on the features.

    conv7x7/2 (64, no bias) -> bn -> relu -> maxpool3x3/2 -> layer1..layer4 (`BLOCK` x
    `LAYERS`, 64, 128, 256, 512 planes, stride 2 from layer2 on) -> mean over the pixels ->
    dropout(`dropout`, DomainBed's ``resnet_dropout``) -> ``n_outputs`` features (512 for
    resnet18, 2048 for resnet50). Parameter and buffer names are torchvision's (``conv1.weight``,
    ``layer1.0.bn1.running_mean``, ``layer1.0.downsample.0.weight``...), each with the model axis
    first: model m's rows are a torchvision state_dict (less ``fc.*``), and `load_pretrained`
    reads one into every model.

    With ``freeze_bn`` (DomainBed's, the default) the BatchNorms stay in eval mode when the
    network trains: they normalise with their running statistics, which never change (their
    weight and bias still train). An input with C != 3 channels gets a first conv with C input
    channels whose channel i is channel ``i % 3`` of the RGB one (`adapt_first_conv`), pretrained
    or not. Without pretrained weights every model is drawn from torchvision's initialisation
    (convs ``kaiming_normal_(mode="fan_out")``, BatchNorm weight 1 and bias 0) by the global RNG;
    ``pretrained`` is None then, else the weights' SHA-256 (`weights_sha256`).

    ImageNet normalisation (``normalize``; None, the default, follows `imagenet_normalization`,
    on unless turned off): every input, in training and prediction, is first `normalized`,
    ``x_i <- (x_i - mean_i) / std_i`` on each channel i of the images (floats in [0, 1]), with
    ImageNet's statistics of RGB channel ``i % 3`` (mean 0.485, 0.456, 0.406, std 0.229, 0.224,
    0.225; `oodeval.training.augment.imagenet_stats`), the channels the adapted first conv
    copied. DomainBed's image datasets normalise every image so
    (``transforms.Normalize``, after the training augmentation); here the network does, so that
    every path to it (training, validation, testing, an algorithm's own) sees normalised images
    and augmentation (in [0, 1]) comes first. Only the first `image_channels` input channels
    (default all) are images: channels an algorithm appends (ARM's context map) pass unchanged.
    ``normalize=False`` feeds the images as they are (a departure from DomainBed). The statistics
    are non-persistent float64 buffers (``input_mean``, ``input_std``; mean 0 and std 1 on the
    other channels), used in the images' precision (float32 at least, so bfloat16 images are
    normalised in float32): they move with the network, and its state_dict keeps torchvision's
    keys.

    Dropout is drawn from the global RNG on the stacked (M, n, d) features, the same in both
    layouts of `conv_layout`. Subclasses set `NAME`, `BLOCK` and `LAYERS`.
    """

    # buffers, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    input_mean: torch.Tensor
    input_std: torch.Tensor

    NAME = "resnet"
    BLOCK: type[ResidualBlock] = BasicBlock
    LAYERS: tuple[int, ...] = ()
    PLANES = (64, 128, 256, 512)

    def __init__(
        self,
        num_models: int,
        input_shape: tuple[int, ...],
        *,
        dropout: float = 0.0,
        freeze_bn: bool = True,
        pretrained: Weights | None = None,
        normalize: bool | None = None,
        image_channels: int | None = None,
    ) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise OodevalError(
                f"model={self.NAME!r} needs (C, H, W) inputs, got shape {input_shape}"
            )
        self.num_models, self.in_channels = num_models, int(input_shape[0])
        self.normalize = imagenet_normalization_on() if normalize is None else bool(normalize)
        images = self.in_channels if image_channels is None else int(image_channels)
        if not 0 < images <= self.in_channels:
            raise OodevalError(
                f"model={self.NAME!r}: image_channels must be in [1, {self.in_channels}] (the "
                f"input channels), got {image_channels}"
            )
        mean, std = imagenet_stats(images)
        rest = self.in_channels - images
        for name, values, other in (("input_mean", mean, 0.0), ("input_std", std, 1.0)):
            stats = torch.tensor(values + (other,) * rest, dtype=torch.float64).view(-1, 1, 1)
            self.register_buffer(name, stats, persistent=False)
        self.conv1, self.bn1 = _conv_bn(num_models, self.in_channels, 64, 7, 2)
        width, layers = 64, []
        for i, (planes, blocks) in enumerate(zip(self.PLANES, self.LAYERS, strict=True)):
            stride = 1 if i == 0 else 2
            layer = []
            for j in range(blocks):
                layer.append(self.BLOCK(num_models, width, planes, stride if j == 0 else 1))
                width = planes * self.BLOCK.EXPANSION
            layers.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.n_outputs = width
        self.dropout, self.freeze_bn = float(dropout), freeze_bn
        self.pretrained: str | None = None
        self.reset_parameters()
        if pretrained is not None:
            self.load_pretrained(pretrained)
        self.train()

    def reset_parameters(self) -> None:
        """torchvision's initialisation, each model drawn afresh: conv weights normal with std
        sqrt(2 / (out_channels k^2)); BatchNorm weight 1, bias 0, running mean 0, variance 1."""
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, EnsembleConv2d):
                    m, out_c, in_c, k, _ = module.weight.shape
                    std = math.sqrt(2.0 / (out_c * k * k))
                    shape = (m, out_c, 3 if name == "conv1" else in_c, k, k)
                    weight = torch.randn(shape, dtype=module.weight.dtype) * std
                    module.weight.copy_(
                        adapt_first_conv(weight, in_c) if name == "conv1" else weight
                    )
                elif isinstance(module, EnsembleBatchNorm2d):
                    module.weight.fill_(1.0)
                    module.bias.zero_()
                    module.running_mean.zero_()
                    module.running_var.fill_(1.0)
                    module.num_batches_tracked.zero_()

    def torchvision_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every key of a torchvision state_dict of this network (less ``fc.*``) and its shape:
        one model's, with the RGB first conv (64, 3, 7, 7) whatever the input channels."""
        shapes = {key: tuple(v.shape[1:]) for key, v in self.state_dict().items()}
        shapes["conv1.weight"] = (64, 3, 7, 7)
        return shapes

    def load_pretrained(self, source: Weights) -> str:
        """Copy the torchvision state_dict `source` (a ``.pth``/``.pt``/``.safetensors`` file, a
        dict, or either read already, `oodeval.algorithms.pretrained.LoadedWeights`; ``fc.*``
        ignored) into every stacked model, the first conv adapted to the input channels; return
        (and keep in ``pretrained``) the weights' SHA-256. A file is read once, for both.

        A file that is not a state dict, a missing or unexpected key or a wrong shape raise one
        OodevalError line naming the first mismatching key, before any weight changes.
        """
        weights = load_weights(source)
        shapes = self.torchvision_shapes()
        state = checked_weights(weights.state, shapes, self.NAME, weights.label)
        targets = dict(self.state_dict(keep_vars=True))
        with torch.no_grad():
            for key, value in state.items():
                if key == "conv1.weight":
                    value = adapt_first_conv(value, self.in_channels)
                targets[key].copy_(value)
        self.pretrained = weights.sha256
        return self.pretrained

    def train(self: ModuleT, mode: bool = True) -> ModuleT:
        """nn.Module's train(mode), then (with ``freeze_bn``) every BatchNorm back in eval mode."""
        nn.Module.train(self, mode)
        if getattr(self, "freeze_bn", False):
            for module in self.modules():
                if isinstance(module, EnsembleBatchNorm2d):
                    module.eval()
        return self

    def normalized(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``x`` (..., c, H, W), c <= the input channels, as the network sees them:
        ``(x_i - input_mean_i) / input_std_i`` on each channel i with ``normalize`` (ImageNet's
        statistics of RGB channel ``i % 3`` on the image channels), in the precision of ``x``
        (float32 at least), else ``x`` itself.

        >>> mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        >>> ResNet18(1, (3, 32, 32)).normalized(mean).flatten().tolist()
        [0.0, 0.0, 0.0]
        """
        if not self.normalize:
            return x
        c, dtype = x.shape[-3], torch.promote_types(x.dtype, torch.float32)
        return (x - self.input_mean[:c].to(dtype)) / self.input_std[:c].to(dtype)

    def features(self, h: torch.Tensor, m: int | None) -> torch.Tensor:
        """Pooled features before dropout: of every model from grouped images (`m` None,
        -> (n, M * d)) or of model `m` from its own images (-> (n, d))."""
        h = F.relu(_run(self.bn1, m, _run(self.conv1, m, h)))
        h = F.max_pool2d(h, kernel_size=3, stride=2, padding=1)
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):
            for block in cast("list[ResidualBlock]", list(layer)):
                h = block.run(h, m)
        return h.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: images (n, C, H, W) shared or (M, n, C, H, W) per model -> (M, n, n_outputs);
        `normalized` first."""
        shared = x.dim() == 4
        if not shared and x.shape[0] != self.num_models:
            raise ValueError(
                f"per-model images for {x.shape[0]} models, expected {self.num_models}"
            )
        x = self.normalized(x)
        if stacked_layout(x.device) == "grouped":
            feats = from_grouped(
                self.features(to_grouped(x, self.num_models), None), self.num_models
            )
        else:
            feats = torch.stack(
                [
                    self.features(model_images(x if shared else x[m]), m)
                    for m in range(self.num_models)
                ]
            )
        return F.dropout(feats, self.dropout, self.training)


class ResNet18(ResNet):
    """``model="resnet18"``: DomainBed's ResNet-18 featurizer (BasicBlocks [2, 2, 2, 2], 512
    features), stacked.

    >>> net = ResNet18(2, (3, 32, 32))
    >>> net(torch.zeros(1, 3, 32, 32)).shape, net.pretrained is None
    (torch.Size([2, 1, 512]), True)
    """

    NAME = "resnet18"
    BLOCK = BasicBlock
    LAYERS = (2, 2, 2, 2)


class ResNet50(ResNet):
    """``model="resnet50"``: DomainBed's ResNet-50 featurizer (Bottlenecks [3, 4, 6, 3], 2048
    features), stacked."""

    NAME = "resnet50"
    BLOCK = Bottleneck
    LAYERS = (3, 4, 6, 3)


FEATURIZERS: dict[str, type[MLPFeaturizer | ConvFeaturizer | ResNet]] = {
    "mlp": MLPFeaturizer,
    "cnn": CNNFeaturizer,
    "mnist_cnn": MNISTCNNFeaturizer,
    "resnet18": ResNet18,
    "resnet50": ResNet50,
}
#: the model names `build_featurizer` knows
MODELS = tuple(FEATURIZERS)
Featurizer = MLPFeaturizer | ConvFeaturizer | ResNet


def build_featurizer(
    model: str,
    num_models: int,
    input_shape: tuple[int, ...],
    *,
    hparams: Mapping[str, Any] | None = None,
    pretrained: Weights | None = None,
    normalize: bool | None = None,
    image_channels: int | None = None,
) -> Featurizer:
    """The featurizer called `model` (one of `MODELS`) for `num_models` stacked models.

    `hparams` gives the featurizer's own hyperparameters (``resnet_dropout`` for the ResNets;
    missing ones take their defaults, `oodeval.algorithms.hparams.FEATURIZER_HPARAMS`).
    `pretrained` (ResNets only): a torchvision state_dict, as a ``.pth``/``.pt``/``.safetensors``
    file or a dict, loaded into every model (`ResNet.load_pretrained`); None (default) keeps the
    seeded random initialisation. `normalize` and `image_channels`: the ResNets' ImageNet
    normalisation of their inputs (`ResNet.normalized`; None: as `imagenet_normalization` says,
    on unless turned off, as DomainBed's image datasets), of the first `image_channels` input
    channels (None: all); the small networks take their inputs as they are, whatever these say.

    >>> build_featurizer("mnist_cnn", 3, (2, 28, 28))(torch.zeros(5, 2, 28, 28)).shape
    torch.Size([3, 5, 128])
    """
    if model not in FEATURIZERS:
        raise OodevalError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    cls = FEATURIZERS[model]
    if not issubclass(cls, ResNet):
        if pretrained is not None:
            resnets = [name for name, c in FEATURIZERS.items() if issubclass(c, ResNet)]
            raise OodevalError(
                f"model={model!r} has no pretrained weights; pretrained= is for "
                f"{', '.join(resnets)}"
            )
        return cls(num_models, input_shape)
    own = {key: hp.default for key, hp in featurizer_hparams(model).items()}
    own.update({key: hparams[key] for key in own if hparams and key in hparams})
    return cls(
        num_models,
        input_shape,
        dropout=float(own["resnet_dropout"]),
        pretrained=pretrained,
        normalize=normalize,
        image_channels=image_channels,
    )
