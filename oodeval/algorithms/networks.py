"""Ensembles of small networks: M independent models whose parameters are stacked on a first axis.

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
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from oodeval.errors import OodevalError
from oodeval.training.options import PRECISIONS, check_precision

#: the torch dtype of each precision (`oodeval.training.options.PRECISIONS`): the arithmetic of
#: the ensembles' matrix products and convolutions (see `compute_precision`)
PRECISION_DTYPES = dict(zip(PRECISIONS, (torch.float32, torch.bfloat16), strict=True))
_COMPUTE_DTYPE: ContextVar[torch.dtype] = ContextVar("oodeval_compute_dtype", default=torch.float32)
#: how the conv nets run their M stacked models' convolutions (see `conv_layout`)
CONV_LAYOUTS = ("auto", "grouped", "per_model")
_CONV_LAYOUT: ContextVar[str] = ContextVar("oodeval_conv_layout", default="auto")


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
    token = _COMPUTE_DTYPE.set(dtype)
    try:
        yield
    finally:
        _COMPUTE_DTYPE.reset(token)


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
    token = _CONV_LAYOUT.set(layout)
    try:
        yield
    finally:
        _CONV_LAYOUT.reset(token)


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
    (`forward`), or one model at a time (`forward_model`)."""

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

    def forward_model(self, m: int, h: torch.Tensor) -> torch.Tensor:
        """Model `m` alone: ``h`` (n, in_channels, H, W) -> (n, out_channels, H', W')."""
        low = _low(h, self.weight[m])
        if low is None:
            return F.conv2d(h, self.weight[m], self.bias[m], self.stride, self.padding)
        out = F.conv2d(low[0], low[1], stride=self.stride, padding=self.padding)
        return out.float() + self.bias[m].reshape(1, -1, 1, 1)


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


FEATURIZERS: dict[str, type[MLPFeaturizer | ConvFeaturizer]] = {
    "mlp": MLPFeaturizer,
    "cnn": CNNFeaturizer,
    "mnist_cnn": MNISTCNNFeaturizer,
}
#: the model names `build_featurizer` knows
MODELS = tuple(FEATURIZERS)


def build_featurizer(
    model: str, num_models: int, input_shape: tuple[int, ...]
) -> MLPFeaturizer | ConvFeaturizer:
    """The featurizer called `model` (one of `MODELS`) for `num_models` stacked models.

    >>> build_featurizer("mnist_cnn", 3, (2, 28, 28))(torch.zeros(5, 2, 28, 28)).shape
    torch.Size([3, 5, 128])
    """
    if model not in FEATURIZERS:
        raise OodevalError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    return FEATURIZERS[model](num_models, input_shape)
