"""One training step of a ResNet-50 ERM unit: oodeval's stacked models against a plain loop.

A unit with N given environments trains N + 1 models: N leave-one-out models (model k on the
N - 1 environments other than e_k) and one on all N. oodeval's step (`StackedUnit`, the trainer's
own: `oodeval.training.data.prepare_data` and ``UnitData.minibatches`` draw B rows per
environment, ``TrainingRun.minibatches`` hands each algorithm instance its share, and
``Algorithm.update`` trains it) runs the N LOO models stacked in one ERM instance and the full
model in a second. The plain loop (`PlainLoop`) does the same work one model at a time, as
DomainBed does: N + 1 separate single ResNet-50s written with ``nn.Conv2d`` / ``nn.BatchNorm2d``
(`PlainResNet50`: torchvision's architecture and initialisation, BatchNorms frozen as DomainBed's
``freeze_bn``, a linear classifier on the 2048 features), each with its own Adam (oodeval's
hyperparameters: lr 1e-3, no weight decay), each updated on ``torch.cat`` of its environments'
minibatches (DomainBed's ``ERM.update``), in PyTorch's default NCHW memory format.

Both train on the same minibatches of random images (uniform in [0, 1), labels uniform over the
classes; `RandomImages`): a step's cost does not depend on the pixels. The FLOPs of one step of
each (matmul + conv, forward and backward, counted by ``torch.utils.flop_counter.FlopCounterMode``
on the warm-up step, oodeval's in its per-model layout, see `counted_flops`) must agree: the
same work. Then the contenders' steps are timed interleaved
(oodeval in each layout of ``--layouts``, then the plain loop, step after step), so that a change
in the machine's load hits them alike; the best step of each counts, and the ratio is the plain
loop's seconds over oodeval's.

Run:

    python benchmarks/resnet_step.py                  # N = 4, B = 4, 3x64x64, 4 steps, 1 thread
    python benchmarks/resnet_step.py --size 224       # DomainBed's image side (about 12x the work)
    python benchmarks/resnet_step.py --layouts grouped,per_model --threads 2

Prints the sizes, the GFLOP per step of each contender, their seconds per step (best and mean of
the timed steps) and the ratio.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oodeval.algorithms import get_algorithm, resolve_hparams  # noqa: E402
from oodeval.algorithms.networks import CONV_LAYOUTS, conv_layout  # noqa: E402
from oodeval.environments.base import Environment, Scenario  # noqa: E402
from oodeval.training import TrainerOptions  # noqa: E402
from oodeval.training.data import TrainingRun, prepare_data  # noqa: E402


class RandomImages(Scenario):
    """N given environments of `rows` random images (3, size, size) each, uniform in [0, 1), with
    labels uniform over `classes`; E_all is E_given. For timing only: nothing to learn.

    >>> sc = RandomImages(2, 8, rows=4)
    >>> sc.given_names, sc.given()[1].images.shape
    (['r0', 'r1'], (4, 3, 8, 8))
    """

    name = "random-images"

    def __init__(self, n: int, size: int, *, rows: int = 8, classes: int = 7) -> None:
        self.n, self.rows = n, rows
        self.num_classes = classes
        self.input_shape = (3, size, size)
        self.params = {"n": n, "size": size, "rows": rows}

    @property
    def given_names(self) -> list[str]:
        return [f"r{k}" for k in range(self.n)]

    @property
    def all_names(self) -> list[str]:
        return self.given_names

    def given(self) -> list[Environment]:
        rng = np.random.default_rng(0)
        return [
            Environment(
                name,
                rng.random((self.rows, *self.input_shape), dtype=np.float32),
                rng.integers(0, self.num_classes, self.rows).astype(np.int64),
            )
            for name in self.given_names
        ]

    def evaluation(self) -> Iterator[Environment]:
        yield from self.given()


def loo_envs(n: int) -> torch.Tensor:
    """(N, N - 1): row k lists the environments of LOO model k, all but k, in order."""
    return torch.stack([torch.cat([torch.arange(k), torch.arange(k + 1, n)]) for k in range(n)])


class StackedUnit:
    """oodeval's step of a unit: the N LOO models stacked in one instance, the full model in a
    second, initialised from seed 0 on the CPU (as `run_unit` does) and moved to `device`."""

    def __init__(
        self, sc: Scenario, algorithm: str, model: str, device: str, batch: int, seed: int = 0
    ) -> None:
        n = len(sc.given_names)
        options = TrainerOptions.from_keywords({"selection": "last", "batch_size": batch})
        self.data = prepare_data(sc, sc.given(), seed, options, device)
        cls = get_algorithm(algorithm)
        hp = resolve_hparams(algorithm, None, model=model)
        shape, classes = tuple(sc.input_shape), sc.num_classes
        torch.manual_seed(seed)
        self.runs = []
        for envs, models in ((loo_envs(n), list(range(n))), (torch.arange(n)[None], [n])):
            mask = torch.ones(envs.shape, dtype=torch.bool)
            algo = cls(shape, classes, mask, hp, model=model).to(device)
            self.runs.append(TrainingRun(algo, envs, models))
        self.generator = torch.Generator().manual_seed(seed)
        self.batch = batch

    def minibatches(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next step's minibatches (N, B, ...), drawn as the trainer draws them."""
        return self.data.minibatches(self.generator, self.batch)

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        """One update of every run on its share of the minibatches (the trainer's step)."""
        for run in self.runs:
            run.algorithm.train()
            run.algorithm.update(*run.minibatches(xb, yb))


class PlainBottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5): conv1x1 -> bn -> relu -> conv3x3(stride) -> bn -> relu ->
    conv1x1 (4 x planes) -> bn, plus the input or its projection, then relu."""

    def __init__(self, in_channels: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, 4 * planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != 4 * planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, 4 * planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(4 * planes),
            )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(h)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (h if self.downsample is None else self.downsample(h)))


class PlainResNet50(nn.Module):
    """One plain ResNet-50 classifier: torchvision's layers (Bottlenecks [3, 4, 6, 3]) and conv
    initialisation (``kaiming_normal_``, fan_out), its BatchNorms kept in eval mode (DomainBed's
    ``freeze_bn``), the pooled 2048 features into ``nn.Linear(2048, classes)``."""

    def __init__(self, in_channels: int, classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        width, layers = 64, []
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True)):
            layer = []
            for j in range(blocks):
                layer.append(PlainBottleneck(width, planes, 2 if i > 0 and j == 0 else 1))
                width = 4 * planes
            layers.append(nn.Sequential(*layer))
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(width, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        self.train()

    def train(self, mode: bool = True) -> PlainResNet50:
        super().train(mode)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        return self.fc(self.layers(h).mean(dim=(2, 3)))


class PlainLoop:
    """The unit's N + 1 models as separate plain ResNet-50s, updated one after the other: model k
    on the minibatches of the environments other than e_k, model N on all of them."""

    def __init__(self, sc: Scenario, device: str, lr: float = 1e-3, seed: int = 0) -> None:
        n = len(sc.given_names)
        torch.manual_seed(seed)
        self.models = [
            PlainResNet50(sc.input_shape[0], sc.num_classes).to(device) for _ in range(n + 1)
        ]
        self.optimizers = [torch.optim.Adam(m.parameters(), lr=lr) for m in self.models]
        self.envs = [*loo_envs(n).tolist(), list(range(n))]

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        """One DomainBed ERM update of each model: cross-entropy on the concatenation of its
        environments' minibatches, Adam."""
        for model, optimizer, envs in zip(self.models, self.optimizers, self.envs, strict=True):
            x = torch.cat([xb[e] for e in envs])
            y = torch.cat([yb[e] for e in envs])
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def counted_flops(step, xb: torch.Tensor, yb: torch.Tensor) -> float:
    """FLOPs (matmul + conv, forward and backward) of ``step(xb, yb)``, by FlopCounterMode, in
    the per-model conv layout: FlopCounterMode counts a grouped convolution's weight gradient
    `groups` times over (its formula ignores the groups), so the grouped layout, the same
    arithmetic, would read M times too many backward FLOPs for every conv."""
    with conv_layout("per_model"), FlopCounterMode(display=False) as counter:
        step(xb, yb)
    return float(counter.get_total_flops())


def timed(step, xb: torch.Tensor, yb: torch.Tensor) -> float:
    t0 = time.perf_counter()
    step(xb, yb)
    return time.perf_counter() - t0


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4, help="given environments N (N + 1 models)")
    parser.add_argument("--batch", type=int, default=4, help="rows per environment per step")
    parser.add_argument("--size", type=int, default=64, help="image side (DomainBed's: 224)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps after one warm-up")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--layouts", default="per_model", help="oodeval conv layouts, comma-separated"
    )
    args = parser.parse_args(argv)
    layouts = [s.strip() for s in args.layouts.split(",") if s.strip()]
    bad = [s for s in layouts if s not in CONV_LAYOUTS[1:]]
    if args.n < 2 or args.batch < 1 or args.size < 32 or args.steps < 1 or args.threads < 1:
        print(
            "error: need --n >= 2, --batch >= 1, --size >= 32 (ResNet-50 downsamples 32x), "
            "--steps >= 1 and --threads >= 1",
            file=sys.stderr,
        )
        return 2
    if bad or not layouts:
        print(
            f"error: --layouts takes grouped and/or per_model, got {args.layouts!r}",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(args.threads)
    n, b, s = args.n, args.batch, args.size
    sc = RandomImages(n, s, rows=max(2 * b, 8))
    images = n * (n - 1) * b + n * b
    print("# ResNet-50 ERM unit, one training step: oodeval stacked vs a plain one-model loop\n")
    print(
        f"sizes: N = {n} given environments ({n + 1} models: {n} leave-one-out stacked + 1 on "
        f"all), B = {b} per environment ({images} images per step), 3x{s}x{s} random images "
        f"(uniform in [0, 1), labels uniform over {sc.num_classes} classes), fp32, Adam lr 1e-3, "
        f"1 warm-up + {args.steps} timed steps interleaved, {args.threads} torch thread(s)"
    )
    print(f"cpu: {cpu_name()}; torch {torch.__version__}")
    t0 = time.perf_counter()
    unit = StackedUnit(sc, "ERM", "resnet50", "cpu", b)
    plain = PlainLoop(sc, "cpu")
    print(f"built the {2 * (n + 1)} models in {time.perf_counter() - t0:.1f} s")
    xb, yb = unit.minibatches()
    flops = counted_flops(unit.step, xb, yb)  # also the warm-up of the per-model layout
    plain_flops = counted_flops(plain.step, xb, yb)
    print(
        f"GFLOP per step (FlopCounterMode, matmul + conv, forward and backward): oodeval "
        f"{flops / 1e9:.2f}, plain loop {plain_flops / 1e9:.2f}"
    )
    if not math.isclose(flops, plain_flops, rel_tol=1e-9):
        print("error: the two contenders do different work (FLOP counts differ)", file=sys.stderr)
        return 1
    for layout in layouts:
        if layout != "per_model":
            with conv_layout(layout):
                unit.step(xb, yb)
    times: dict[str, list[float]] = {key: [] for key in (*layouts, "plain")}
    for _ in range(args.steps):
        xb, yb = unit.minibatches()
        for layout in layouts:
            with conv_layout(layout):
                times[layout].append(timed(unit.step, xb, yb))
        times["plain"].append(timed(plain.step, xb, yb))
    labels = {key: f"oodeval stacked ({key})" for key in layouts}
    labels["plain"] = f"plain loop ({n + 1} x ResNet-50, NCHW)"
    for key, label in labels.items():
        best = min(times[key])
        print(
            f"{label}: {best:.3f} s/step (best of {args.steps}; mean "
            f"{statistics.fmean(times[key]):.3f}), {flops / best / 1e9:.1f} GFLOP/s"
        )
    for layout in layouts:
        ratio = min(times["plain"]) / min(times[layout])
        print(f"ratio plain loop / oodeval ({layout}): {ratio:.2f}x")
    print(f"took {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
