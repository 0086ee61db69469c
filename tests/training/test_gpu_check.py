"""benchmarks/gpu_check.py runs on the CPU with its smallest sizes, without oodeval's non-torch
dependencies, and prints every section of its report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.benchmarks import benchmark_module

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"
#: run the script with these top-level packages made unimportable, as on a bare GPU machine
#: where only torch and numpy exist (scipy and scikit-learn too when MNIST is at hand)
BLOCKER = """
import importlib.abc, importlib.machinery, runpy, sys
BLOCKED = set(sys.argv[1].split(","))
class Absent(importlib.abc.Loader):
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r} (blocked)", name=spec.name)
    def exec_module(self, module):
        pass
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in BLOCKED:
            return importlib.machinery.ModuleSpec(name, Absent())
        return None
sys.meta_path.insert(0, Blocker())
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def mnist_folder() -> Path | None:
    for folder in (os.environ.get("OODEVAL_MNIST"), REPO.parent / "shared" / "data" / "mnist"):
        if folder and Path(folder, "t10k-images-idx3-ubyte.gz").is_file():
            return Path(folder)
    return None


def test_gpu_check_on_the_cpu_prints_every_section_with_torch_and_numpy_only(tmp_path):
    blocked = ["pandas", "typer", "rich", "tqdm", "matplotlib", "click", "hypothesis"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a bare checkout
    mnist = mnist_folder()
    if mnist is not None:  # the faithful source: then scipy and scikit-learn can go as well
        blocked += ["scipy", "sklearn"]
        env["OODEVAL_MNIST"] = str(mnist)
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKER, ",".join(blocked), str(SCRIPT), "--device", "cpu"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for heading in (
        "# oodeval GPU check:",
        "## Measured peaks (TFLOP/s)",
        "## device_check: CPU vs this device, every algorithm",
        "## Faithful unit: seconds per step",
        "## Projected wall time of the `paper` grid on this device",
        "## ResNet-50 unit: seconds per step (all N + 1 models), vs a DomainBed-style loop",
    ):
        assert heading in out
    assert re.search(r"\| matmul 256\^3 \| [\d.]+ \| [\d.]+ \|", out)  # fp32 and bf16 on a CPU
    algorithms = 13 if mnist is not None else 14
    assert f"{algorithms} of {algorithms} algorithms agree" in out
    assert out.count(": exit 0\n") == 2 and "Tolerance 0.0 per LOO error" in out
    assert "3 of 3 algorithms agree" in out  # ERM, ARM, MTL with the cnn
    if mnist is not None:
        assert "left out: Mixup (scipy is missing" in out
    rows = re.findall(r"^\| (ERM|MLDG|ARM) \| (4|12) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| "
                      r"[\d.]+x \| [\d.]+ \| \d+% \|$", out, flags=re.M)  # fmt: skip
    assert sorted(rows) == sorted((a, n) for a in ("ERM", "MLDG", "ARM") for n in ("4", "12"))
    units = algorithms * 36  # 12 scenarios x 3 seeds
    assert re.search(rf"\*\*Projected: [\d.]+ h for {units} units\*\* \(12 scenarios", out)
    # the ResNet-50 unit at the CPU's tiny sizes, said so, after the seconds so far
    resnet = out.split("## ResNet-50 unit")[1]
    assert "**CPU run: tiny sizes (N = 2, B = 2, 32x32), a smoke run of this section" in resnet
    assert re.search(r"^[\d.]+ GFLOP per step; .* \(\d+ s so far\)$", resnet, flags=re.M)
    assert re.search(r"^\| resnet50 \| 2 \| 2 \| 32x32 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| "
                     r"[\d.]+ \| [\d.]+x \| [\d.]+ \| \d+% \|$", resnet, flags=re.M)  # fmt: skip
    # the image presets' training steps projected from that step: 12 and 2 scenarios
    paper_ns = r"\[3, 4, 4, 5, 5, 5, 5, 5, 5, 6, 8, 8\]"
    assert re.search(rf"^\| paper-images \| {paper_ns} \| 504 \| [\d.]+ \|$", resnet, flags=re.M)
    assert re.search(r"^\| nico \| \[6, 6\] \| 48 \| [\d.]+ \|$", resnet, flags=re.M)
    assert re.search(r"\(\d+ s so far\)\n\nThe check took \d+ s\.\n$", out)


def test_step_flops_count_a_grouped_step_once():
    # FlopCounterMode counts a grouped convolution's weight gradient `groups` times over: the
    # count of an ERM step must still be the analytic one of benchmarks/roofline.py when the
    # grouped layout (a GPU's default) is in force
    check = benchmark_module("gpu_check")
    from oodeval.algorithms.networks import conv_layout

    sc, b = check.RandomImages(3, 8, rows=8), 2
    shape = tuple(sc.input_shape)
    analytic = 3 * check.training_flops(check.forward_gemms("mnist_cnn", shape, b * 2))
    analytic += check.training_flops(check.forward_gemms("mnist_cnn", shape, b * 3))
    with conv_layout("grouped"):
        assert check.step_flops(sc, "ERM", "cpu", b) == analytic


def test_gpu_check_without_a_gpu_says_so_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without CUDA")
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: device 'cuda' requested but CUDA is not available")
    assert len(proc.stderr.strip().splitlines()) == 1
