"""benchmarks/training_throughput.py's roofline: the analytic FLOP count against PyTorch's own
counter, its plain MNIST_CNN against oodeval's, the conv layer shapes of its bound against the
layers the plain networks run, and a tiny run of ``--roofline``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.benchmarks import benchmark_module

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "training_throughput.py"


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("training_throughput")


@pytest.mark.parametrize(
    ("model", "shape"), [("mlp", (2, 14, 14)), ("cnn", (2, 14, 14)), ("mnist_cnn", (2, 28, 28))]
)
def test_flop_count_matches_pytorchs_counter(bench, model, shape):
    # FlopCounterMode counts every matmul and convolution PyTorch runs, forward and backward
    # (2 FLOPs per multiply-add; no input gradient where the input needs none), independently of
    # the benchmark's layer-shape formula
    torch.manual_seed(0)
    rows = 3
    net = bench.plain_model(model, shape, 2)
    x, y = torch.randn(rows, *shape), torch.tensor([0, 1, 1])
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(net(x), y).backward()
    counted = counter.get_total_flops()
    assert bench.training_flops(bench.forward_gemms(model, shape, rows)) == counted


def test_plain_mnist_cnn_has_oodevals_layers(bench):
    from oodeval.algorithms.networks import build_featurizer

    plain = bench.plain_mnist_cnn(2, 2)
    stacked = build_featurizer("mnist_cnn", 1, (2, 28, 28))
    # one stacked model's parameters (the leading model axis dropped) against the plain net's,
    # its classifier (128 -> 2) aside: the same parameter shapes (registered in another order)
    plain_shapes = sorted(tuple(p.shape) for p in plain.parameters())
    plain_shapes.remove((2, 128))
    plain_shapes.remove((2,))
    stacked_shapes = sorted(tuple(p.shape[1:]) for p in stacked.parameters())
    assert stacked_shapes == plain_shapes
    assert stacked(torch.zeros(4, 2, 28, 28)).shape[-1] == plain[-1].in_features == 128


@pytest.mark.parametrize(
    ("model", "shape"), [("cnn", (2, 14, 14)), ("mnist_cnn", (2, 28, 28)), ("mlp", (2, 14, 14))]
)
def test_conv_layers_are_the_convolutions_the_network_runs(bench, model, shape):
    # the shapes the bound is measured at, against what each nn.Conv2d of the plain network is
    # given when it runs (a forward hook), and its own channels, stride and 3x3 padding-1 kernel
    seen = []

    def hook(module, inputs, _output):
        assert module.kernel_size == (3, 3) and module.padding == (1, 1)
        _, c, h, w = inputs[0].shape
        seen.append((c, module.out_channels, h, w, module.stride[0]))

    net = bench.plain_model(model, shape, 2)
    for module in net.modules():
        if isinstance(module, torch.nn.Conv2d):
            module.register_forward_hook(hook)
    net(torch.zeros(3, *shape))
    assert bench.conv_layers(model, shape) == seen
    assert (model == "mlp") == (seen == [])


def test_conv_pass_seconds_times_every_pass_with_a_tried_setting(bench):
    best = bench.conv_pass_seconds((2, 8, 6, 6, 2), 4, torch.float32, 1)
    assert set(best) == set(bench.CONV_PASSES)
    settings = {f"{fmt}, {'oneDNN' if on else 'no oneDNN'}" for fmt, on in bench.CONV_SETTINGS}
    for seconds, setting in best.values():
        assert isinstance(seconds, float) and setting in settings  # the value: benchmarks judge it


def test_roofline_runs_and_prints_every_contender(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--roofline", "--source", "digits", "--steps", "2",
         "--cnn-steps", "1", "--repeats", "1", "--scales", "1", "--models", "mlp", "mnist_cnn"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    headers = [line for line in lines if "GFLOP per step" in line]
    assert len(headers) == 2 and "mlp" in headers[0] and "mnist_cnn" in headers[1]
    rows = [line for line in lines if "% of " in line]
    assert len(rows) == 10  # 2 models x (oodeval fp32/bf16, plain tensors/DataLoader, plain bf16)
    for row in rows:
        share = r"ms/step +\d+\.\d\dx vs plain DataLoader +[\d.]+ GFLOP/s = +(\d+)% of (fp32|bf16) "
        assert re.search(share + "bound", row), row  # its value is a timing: benchmarks/ judge it
    # the bound's table: every conv layer of MNIST_CNN but the first in all three passes, for the
    # LOO and the full models, each with the setting that was fastest
    table = [line.split() for line in lines if re.match(r" +(LOO|full) +x\d+ +conv\d", line)]
    assert len(table) == 2 * 2 * (2 + 3 * 3)  # 2 precisions x 2 kinds x (conv1: 2, conv2-4: 3)
    assert {row[-1].replace(".", "", 1).isdigit() for row in table} == {True}
