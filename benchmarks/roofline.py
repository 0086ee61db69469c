"""The roofline arithmetic of the training benchmarks (torch only, no other oodeval dependency):
the plain single-model networks of oodeval's models, their layers as GEMMs, the FLOPs of a
training step, `torch.matmul`'s time at exactly those shapes, and the conv layers' best kernel
time at their own shapes (`conv_pass_seconds`: every layout and backend torch offers on the CPU,
the fastest per layer and pass), the bound a training step's convolutions cannot beat.

Shared by benchmarks/training_throughput.py (``--roofline``) and benchmarks/gpu_check.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "CONV_CHANNELS",
    "CONV_PASSES",
    "CONV_SETTINGS",
    "MLP_WIDTH",
    "conv_layers",
    "conv_pass_seconds",
    "forward_gemms",
    "gemm_seconds",
    "plain_cnn",
    "plain_mlp",
    "plain_mnist_cnn",
    "plain_model",
    "training_flops",
]


def plain_mlp(n_in: int, n_classes: int, width: int = 256) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(n_in, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, n_classes),
    )


class _MeanPool(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.mean(dim=(2, 3))


def plain_cnn(channels: int, n_classes: int) -> nn.Module:
    """The same small CNN as oodeval's ``model="cnn"``, as one ordinary nn.Sequential."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1),
        nn.ReLU(),
        nn.GroupNorm(8, 32),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.GroupNorm(8, 64),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.GroupNorm(8, 64),
        _MeanPool(),
        nn.Linear(64, n_classes),
    )


def plain_mnist_cnn(channels: int, n_classes: int) -> nn.Module:
    """DomainBed's MNIST_CNN (oodeval's ``model="mnist_cnn"``) as one ordinary nn.Sequential:
    3x3 convs to 64, 128 (stride 2), 128, 128 channels, each then ReLU and GroupNorm(8), the mean
    over pixels, a linear classifier."""
    layers: list[nn.Module] = []
    for c_in, c_out, stride in ((channels, 64, 1), (64, 128, 2), (128, 128, 1), (128, 128, 1)):
        layers += [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1), nn.ReLU(),
                   nn.GroupNorm(8, c_out)]  # fmt: skip
    return nn.Sequential(*layers, _MeanPool(), nn.Linear(128, n_classes))


def plain_model(model: str, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """The plain loops' single model of oodeval's `model` for inputs of `input_shape` (C, H, W)."""
    if model == "mlp":
        return plain_mlp(int(torch.Size(input_shape).numel()), n_classes)
    if model == "cnn":
        return plain_cnn(input_shape[0], n_classes)
    return plain_mnist_cnn(input_shape[0], n_classes)


# -- roofline: the training steps' GEMMs at their shapes and their FLOPs ----------------------
#: conv channels of oodeval's conv models (3x3, padding 1, stride 2 in the second conv)
CONV_CHANNELS = {"cnn": (32, 64, 64), "mnist_cnn": (64, 128, 128, 128)}
MLP_WIDTH = 256


def forward_gemms(model: str, input_shape: tuple[int, ...], rows: int) -> list[tuple[int, ...]]:
    """The forward pass of one `model` on `rows` inputs of `input_shape` (C, H, W) as GEMMs
    (m, k, n), an m x k matrix times a k x n one, in layer order.

    A linear layer `a` -> `b` is (rows, a, b). A 3x3 conv from C_in to C_out channels with an
    H_out x W_out output is, written as a GEMM (im2col), (rows * H_out * W_out, C_in * 9, C_out);
    with padding 1, H_out = (H - 1) // stride + 1. E.g. the MLP on 2x14x14 images:

    >>> forward_gemms("mlp", (2, 14, 14), 64)
    [(64, 392, 256), (64, 256, 256), (64, 256, 2)]
    """
    c, h, w = input_shape
    if model == "mlp":
        n_in = c * h * w
        return [(rows, n_in, MLP_WIDTH), (rows, MLP_WIDTH, MLP_WIDTH), (rows, MLP_WIDTH, 2)]
    gemms = []
    for i, c_out in enumerate(CONV_CHANNELS[model]):
        stride = 2 if i == 1 else 1
        h, w = (h - 1) // stride + 1, (w - 1) // stride + 1
        gemms.append((rows * h * w, c * 9, c_out))
        c = c_out
    return [*gemms, (rows, c, 2)]  # mean over pixels, then the linear classifier


def training_flops(gemms: list[tuple[int, ...]]) -> int:
    """FLOPs of one training step of one model whose forward GEMMs are `gemms`.

    A GEMM (m, k, n) costs 2mkn (a multiply and an add per term). Backward repeats it twice per
    layer, the weight gradient (k x m times m x n) and the input gradient (m x n times n x k),
    except that the first layer's input (the images) needs no gradient: 2mkn x (3 per layer,
    2 for the first). Elementwise work (bias, ReLU, GroupNorm, loss, Adam) is left out: it grows
    with the activations and parameters, well under 1% here (MNIST_CNN: ~125k activations per
    image against ~440 MFLOP of GEMMs).

    >>> training_flops([(64, 392, 256), (64, 256, 256), (64, 256, 2)])  # the MLP, 64 rows
    51052544
    """
    return sum(2 * m * k * n * (2 if i == 0 else 3) for i, (m, k, n) in enumerate(gemms))


def gemm_seconds(
    gemms: list[tuple[int, ...]], dtype: torch.dtype, repeats: int, *, first: bool = True
) -> float:
    """Seconds `torch.matmul` takes for every GEMM of one training step of `training_flops`
    (forward, weight gradient, input gradient but the first layer's: ``first=False`` when
    `gemms` are later layers, e.g. a conv net's classifier), each the best of `repeats` runs
    after one warm-up, on random contiguous matrices of `dtype`."""
    total = 0.0
    for i, (m, k, n) in enumerate(gemms):
        grad = i > 0 or not first
        pairs = [((m, k), (k, n)), ((k, m), (m, n))] + ([((m, n), (n, k))] if grad else [])
        for a_shape, b_shape in pairs:
            a, b = torch.randn(a_shape, dtype=dtype), torch.randn(b_shape, dtype=dtype)
            torch.matmul(a, b)
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                torch.matmul(a, b)
                best = min(best, time.perf_counter() - t0)
            total += best
    return total


# -- the convolutions' bound: each conv layer at its own shape, the fastest kernel per pass -----
#: a conv layer's three passes of a training step (the first layer needs no input gradient)
CONV_PASSES = ("forward", "input grad", "weight grad")
#: the (memory format, oneDNN on) settings `conv_pass_seconds` tries
CONV_SETTINGS = (("NCHW", True), ("NCHW", False), ("channels_last", True), ("channels_last", False))


def conv_layers(model: str, input_shape: tuple[int, ...]) -> list[tuple[int, int, int, int, int]]:
    """The 3x3, padding-1 conv layers of `model` on inputs of `input_shape` (C, H, W), in order,
    as (C_in, C_out, H_in, W_in, stride); the second conv has stride 2 (none for the MLP).

    >>> conv_layers("cnn", (2, 14, 14))
    [(2, 32, 14, 14, 1), (32, 64, 14, 14, 2), (64, 64, 7, 7, 1)]
    """
    if model == "mlp":
        return []
    c, h, w = input_shape
    layers = []
    for i, c_out in enumerate(CONV_CHANNELS[model]):
        stride = 2 if i == 1 else 1
        layers.append((c, c_out, h, w, stride))
        c, h, w = c_out, (h - 1) // stride + 1, (w - 1) // stride + 1
    return layers


@contextlib.contextmanager
def _onednn(enabled: bool) -> Iterator[None]:
    """torch's oneDNN (mkldnn) convolutions on or off inside the block (off: torch's own
    im2col + GEMM kernels)."""
    keep = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = enabled
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = keep


def _best_of(run, repeats: int) -> float:
    run()  # warm-up: oneDNN primitive creation, allocator
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def conv_pass_seconds(
    layer: tuple[int, int, int, int, int], rows: int, dtype: torch.dtype, repeats: int
) -> dict[str, tuple[float, str]]:
    """The fastest time of each pass of `CONV_PASSES` of one conv `layer` (`conv_layers`) on
    `rows` images of `dtype`, with the setting that reached it (``"channels_last, oneDNN"``...).

    Every setting of `CONV_SETTINGS` is tried: inputs, weights and output gradients contiguous in
    that memory format, oneDNN on or off; each pass is the best of `repeats` runs after one
    warm-up: the forward is ``F.conv2d`` with the bias, the input and the weight gradient (with
    the bias gradient) are ``aten.convolution_backward`` asked for the one or the other alone."""
    c_in, c_out, h, w, stride = layer
    h_out, w_out = (h - 1) // stride + 1, (w - 1) // stride + 1
    best: dict[str, tuple[float, str]] = {}
    for fmt, onednn in CONV_SETTINGS:  # one layer's tensors at a time: a few MiB, not all at once
        memory = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
        x = torch.randn(rows, c_in, h, w, dtype=dtype).contiguous(memory_format=memory)
        wt = torch.randn(c_out, c_in, 3, 3, dtype=dtype).contiguous(memory_format=memory)
        bias = torch.randn(c_out, dtype=dtype)
        g = torch.randn(rows, c_out, h_out, w_out, dtype=dtype).contiguous(memory_format=memory)

        def backward(mask: list[bool], g=g, x=x, wt=wt) -> None:
            torch.ops.aten.convolution_backward(g, x, wt, [c_out], [stride, stride], [1, 1],
                                                [1, 1], False, [0, 0], 1, mask)  # fmt: skip

        runs = {
            "forward": lambda x=x, wt=wt, bias=bias: F.conv2d(x, wt, bias, stride, 1),
            "input grad": lambda: backward([True, False, False]),
            "weight grad": lambda: backward([False, True, True]),
        }
        setting = f"{fmt}, {'oneDNN' if onednn else 'no oneDNN'}"
        with _onednn(onednn):
            for name, run in runs.items():
                seconds = _best_of(run, repeats)
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, setting)
    return best
