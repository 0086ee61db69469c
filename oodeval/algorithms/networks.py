"""Ensembles of small networks: M independent models whose parameters are stacked on a first axis.

One batched call (``torch.baddbmm`` for linear layers, a grouped convolution for conv layers) runs
all M models at once, which is how the trainer trains a unit's N leave-one-out models and its full
model together. Model ``m`` only ever touches row ``m`` of every parameter, so the M models are
exactly as independent as M separate networks: their gradients never mix, and Adam (elementwise)
on the stacked tensors is M independent Adams.

Inputs are either *shared* by all models, shape ``(n, *input_shape)``, or *per model*, shape
``(M, n, *input_shape)``; outputs are always ``(M, n, features)``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from oodeval.errors import OodevalError

MODELS = ("mlp", "cnn")
#: arithmetic of the ensembles' matrix products and convolutions (see `compute_precision`)
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
_COMPUTE_DTYPE: ContextVar[torch.dtype] = ContextVar("oodeval_compute_dtype", default=torch.float32)


@contextmanager
def compute_precision(precision: str) -> Iterator[None]:
    """Run the ensembles' matrix products and convolutions in `precision` inside the block.

    ``"fp32"`` (default) is plain float32. ``"bf16"`` is mixed precision: parameters, optimiser
    state, biases, activations between layers, normalisations, losses and penalties stay float32;
    only the products of `EnsembleLinear` and `EnsembleConv2d` take bfloat16 inputs (accumulated
    in float32 by oneDNN, rounded to bfloat16, handed on as float32), and gradients flow back
    through the same casts. On CPUs with native bfloat16 (`native_bf16`) the products run about
    4x faster; elsewhere they are emulated and slower than float32.

    >>> layer = EnsembleLinear(1, 3, 2)
    >>> with compute_precision("bf16"):
    ...     layer(torch.ones(4, 3)).dtype
    torch.float32
    """
    token = _COMPUTE_DTYPE.set(compute_dtype(precision))
    try:
        yield
    finally:
        _COMPUTE_DTYPE.reset(token)


def compute_dtype(precision: str) -> torch.dtype:
    """The torch dtype of `precision` ("fp32" or "bf16"); a one-line error for other names."""
    if precision not in PRECISIONS:
        raise OodevalError(
            f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}"
        )
    return PRECISIONS[precision]


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
    """M stacked 2-D convolutions run as one grouped convolution over ``(n, M * C, H, W)``."""

    def __init__(
        self,
        num_models: int,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        padding: int = 0,
    ) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)
        shape = (num_models, out_channels, in_channels, kernel_size, kernel_size)
        self.weight = nn.Parameter(torch.empty(shape).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_models, out_channels).uniform_(-bound, bound))
        self.stride, self.padding, self.num_models = stride, padding, num_models

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``h``: (n, M * in_channels, H, W) -> (n, M * out_channels, H', W')."""
        m, out_c, in_c, k, _ = self.weight.shape
        low = _low(h, self.weight)
        if low is None:
            return F.conv2d(
                h,
                self.weight.reshape(m * out_c, in_c, k, k),
                self.bias.reshape(-1),
                stride=self.stride,
                padding=self.padding,
                groups=m,
            )
        h, w = low
        out = F.conv2d(
            h, w.reshape(m * out_c, in_c, k, k), stride=self.stride, padding=self.padding, groups=m
        )
        return out.float() + self.bias.reshape(1, -1, 1, 1)


class EnsembleGroupNorm(nn.Module):
    """M stacked GroupNorms over the grouped layout (groups never straddle two models)."""

    def __init__(self, num_models: int, num_groups: int, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_models, channels))
        self.bias = nn.Parameter(torch.zeros(num_models, channels))
        self.num_groups = num_groups

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        m = self.weight.shape[0]
        return F.group_norm(h, m * self.num_groups, self.weight.reshape(-1), self.bias.reshape(-1))


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


class CNNFeaturizer(nn.Module):
    """Small CNN for 2x14x14 images: three 3x3 convs (32, 64, 64 channels; the second with
    stride 2), each followed by ReLU and GroupNorm(8), then global average pooling -> 64 features.

    A scaled-down DomainBed MNIST_CNN; GroupNorm normalises each image alone, so no statistic is
    shared between images (or between the environments of a leave-one-out fold).
    """

    def __init__(self, num_models: int, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise OodevalError(f"model='cnn' needs (C, H, W) inputs, got shape {input_shape}")
        c = input_shape[0]
        self.convs = nn.ModuleList(
            [
                EnsembleConv2d(num_models, c, 32, 3, padding=1),
                EnsembleConv2d(num_models, 32, 64, 3, stride=2, padding=1),
                EnsembleConv2d(num_models, 64, 64, 3, padding=1),
            ]
        )
        self.norms = nn.ModuleList([EnsembleGroupNorm(num_models, 8, ch) for ch in (32, 64, 64)])
        self.num_models = num_models
        self.n_outputs = 64

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = to_grouped(x, self.num_models)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = norm(F.relu(conv(h)))
        return from_grouped(h.mean(dim=(2, 3)), self.num_models)


def build_featurizer(model: str, num_models: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The featurizer called `model` ("mlp" or "cnn") for `num_models` stacked models."""
    if model == "mlp":
        return MLPFeaturizer(num_models, input_shape)
    if model == "cnn":
        return CNNFeaturizer(num_models, input_shape)
    raise OodevalError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
