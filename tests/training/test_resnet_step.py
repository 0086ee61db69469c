"""benchmarks/resnet_step.py: its plain ResNet-50 against oodeval's stacked one, and a tiny run
of the benchmark printing every line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.benchmarks import benchmark_module

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "resnet_step.py"


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("resnet_step")


def test_plain_resnet50_has_the_layers_of_one_stacked_model(bench):
    from oodeval.algorithms.networks import ResNet50

    plain = bench.PlainResNet50(3, 7)
    stacked = ResNet50(1, (3, 32, 32))
    # one stacked model's parameter shapes (the model axis dropped) against the plain net's, its
    # classifier aside (nn.Linear(2048, 7): weight and bias)
    plain_shapes = sorted(tuple(p.shape) for p in plain.parameters())
    plain_shapes.remove((7, 2048))
    plain_shapes.remove((7,))
    assert sorted(tuple(p.shape[1:]) for p in stacked.parameters()) == plain_shapes
    # frozen BatchNorms in training mode, as DomainBed's freeze_bn
    norms = [m for m in plain.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == 53 and not any(m.training for m in norms) and plain.training
    assert plain(torch.zeros(2, 3, 32, 32)).shape == (2, 7)


def test_loo_envs_leave_each_environment_out(bench):
    assert bench.loo_envs(3).tolist() == [[1, 2], [0, 2], [0, 1]]


def test_benchmark_runs_and_prints_every_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--n", "2", "--batch", "1", "--size", "32", "--steps", "1",
         "--layouts", "grouped,per_model"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "sizes: N = 2 given environments (3 models: 2 leave-one-out stacked + 1 on all), " in out
    assert "B = 1 per environment (4 images per step), 3x32x32 random images" in out
    flops = re.search(r"forward and backward\): oodeval ([\d.]+), plain loop ([\d.]+)$", out, re.M)
    assert flops and flops[1] == flops[2] and float(flops[1]) > 0  # the same work
    times = r"\d+\.\d{3} s/step \(best of 1; mean \d+\.\d{3}\), [\d.]+ GFLOP/s$"
    for label in ("oodeval stacked \\(grouped\\)", "oodeval stacked \\(per_model\\)",
                  "plain loop \\(3 x ResNet-50, NCHW\\)"):  # fmt: skip
        assert re.search(f"^{label}: {times}", out, re.M), label
    for layout in ("grouped", "per_model"):
        assert re.search(rf"^ratio plain loop / oodeval \({layout}\): \d+\.\d\dx$", out, re.M)


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--size", "16"], "--size >= 32"), (["--layouts", "vmap"], "--layouts takes grouped")],
)
def test_bad_arguments_fail_in_one_line(tmp_path, args, message):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
