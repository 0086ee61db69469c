"""benchmarks/training_throughput.py's roofline: the analytic FLOP count against PyTorch's own
counter, its plain MNIST_CNN against oodeval's, and a tiny run of ``--roofline``."""

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
        assert re.search(r"ms/step +\d+\.\d\dx vs plain DataLoader +[\d.]+ GFLOP/s = +\d+% of", row)
