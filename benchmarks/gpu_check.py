"""One prepared check of oodeval on a GPU: prints a markdown report to paste into RESULTS.md.

Run from a bare checkout (oodeval need not be installed; this script puts the repository root on
``sys.path``):

    python benchmarks/gpu_check.py                 # CUDA; sized for 4-5 min on an H100 (never run)
    python benchmarks/gpu_check.py --device cpu    # the same sections, tiny sizes (CI, a few min)

Needs only torch and numpy. The MNIST test set for the faithful sizes is looked for at
``$OODEVAL_MNIST``, ``shared/data/mnist`` inside the checkout, ``../shared/data/mnist`` and last
the copy bundled in the checkout (``oodeval/data/mnist``), which is always there; only a checkout
stripped of it falls back to scikit-learn's 8x8 digits (resized), which needs scikit-learn.
Mixup's Beta draws need scipy: where it is missing, Mixup is left out of the device check and of
the projection, and the report says so. pandas, typer and the rest of oodeval's dependencies are
never imported.

Sections of the report:

1. the device: name, torch and CUDA versions, TF32 switches;
2. measured peaks: a large ``torch.matmul`` and a large 3x3 convolution (MNIST_CNN's 128 -> 128
   layer at a large batch) in fp32 (TF32 off), TF32 and bf16;
3. ``device_check`` (benchmarks/device_check.py, run as it is): every algorithm's unit on the
   CPU and on the device from the same seed, the largest LOO-error difference, and the tolerance
   it applies with its reason;
4. the faithful unit (``paper`` preset: MNIST_CNN, 2x28x28, B = 64 per environment, Adam) at
   N = 4 and N = 12 for ERM, MLDG and ARM: seconds per step (one update of all N + 1 models) of
   oodeval's stacked trainer in each conv layout (grouped, per model) against a DomainBed-style
   loop on the same device (one model at a time, its own algorithm instance with M = 1, a
   shuffling DataLoader per environment, minibatches copied to the device every step), and the
   achieved TFLOP/s (the step's matmul/conv FLOPs counted by
   ``torch.utils.flop_counter.FlopCounterMode`` over one oodeval step in the per-model layout,
   the same arithmetic as the grouped one, whose weight gradients FlopCounterMode counts `groups`
   times over; checked against benchmarks/roofline.py's analytic count for ERM) as a share of
   the measured TF32 conv peak;
5. the projected wall time of the whole ``paper`` grid (oodeval/study/presets.py: 14 algorithms x
   Ratio 3:1/4:1/5:1 x Scale 1-4 x 3 seeds, 5001 steps, a checkpoint every 100) from every
   algorithm's measured step time at N = 4 and N = 12 (in the conv layout that was faster for
   ERM at that N; a power law in N between and beyond them), ERM's measured checkpoint
   evaluation and test at the same two N, one unit at a time on this one device;
6. a ResNet-50 unit (``model="resnet50"``: DomainBed's featurizer, randomly initialised, frozen
   BatchNorms), ERM, N = 4 given environments (5 models), B = 32 per environment, 3x224x224
   random images (benchmarks/resnet_step.py's `RandomImages`: a step's cost does not depend on
   the pixels), 7 classes: seconds per step of oodeval's step (`StackedUnit`, the trainer's
   minibatch draw and updates) in each conv layout, 3 timed steps after 1 warm-up, against the
   DomainBed-style loop of section 4, and the achieved TFLOP/s as there. One step is 12.4 TFLOP
   (24.3 GFLOP per 224x224 image trained, 512 images); with the counting step, the warm-ups and
   the loop (LOO model 0 and the full model, 4 steps each) the section does about 135 TFLOP:
   under 2 s at a conservative 100 TFLOP/s, 14 s at 10, plus building the 7 models on the host
   (the section prints its own estimate, an upper bound, before it times anything). From the
   faster layout's step it projects the training steps of the ResNet-50 image presets
   (``paper-images``, ``nico``: `image_projection`, a lower bound that counts ERM's step for
   every algorithm and no evaluation).
   On the CPU it runs at tiny sizes (N = 2, B = 2, 32x32, 1 timed step): a smoke run of the
   section, and says so.

Each section prints the seconds spent so far (stdout is line-buffered), so that a run cut short
still says where it was.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import device_check  # noqa: E402  (benchmarks/device_check.py, run as it is)
from resnet_step import RandomImages, StackedUnit, counted_flops  # noqa: E402
from roofline import forward_gemms, training_flops  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from oodeval._torch import deterministic_device, resolve_device  # noqa: E402
from oodeval.algorithms import get_algorithm, resolve_hparams  # noqa: E402
from oodeval.algorithms.networks import conv_layout  # noqa: E402
from oodeval.environments import build_scenario  # noqa: E402
from oodeval.errors import OodevalError  # noqa: E402
from oodeval.training import run_unit, train_models  # noqa: E402

#: the algorithms whose faithful unit is timed against the DomainBed-style loop
LOOP_ALGORITHMS = ("ERM", "MLDG", "ARM")
#: per device kind: image side, rows per environment, timed steps, scales (N = 4 and N = 12 at
#: Ratio 3:1), rows per given environment (None: the scenario's own), E_all rows, peak sizes
SIZES = {
    "cuda": {
        "size": 28,
        "batch": 64,
        "steps": 12,
        "n_per_given": None,
        "n_eval": None,
        "matmul": 8192,
        "conv_batch": 512,
        "check_steps": 20,
        "resnet": {"n": 4, "batch": 32, "size": 224, "steps": 3},
    },
    "cpu": {
        "size": 8,
        "batch": 4,
        "steps": 1,
        "n_per_given": 64,
        "n_eval": 64,
        "matmul": 256,
        "conv_batch": 4,
        "check_steps": 2,
        "resnet": {"n": 2, "batch": 2, "size": 32, "steps": 1},
    },
}
SCALE_OF_N = {4: 1, 12: 3}  # N given environments -> the SR-CMNIST Ratio 3:1 Scale giving it


def paper_grid() -> dict:
    """The ``paper`` preset's grid and setup constants, from `oodeval.paper_grid` (which imports
    nothing, so this check needs only torch and numpy)."""
    from oodeval import paper_grid as grid

    names = ("PAPER_ALGORITHMS", "RATIOS", "SCALES", "SEEDS", "PAPER_STEPS", "PAPER_EVAL_EVERY")
    return {name: getattr(grid, name) for name in (*names, "PAPER_BATCH_SIZE", "PAPER_SIZE")}


def find_source() -> str:
    """The MNIST test set (``mnist:DIR``) when found (the bundled copy at the latest), else
    ``digits`` (needs scikit-learn)."""
    candidates = [os.environ.get("OODEVAL_MNIST", "")]
    candidates += [
        str(REPO / "shared" / "data" / "mnist"),
        str(REPO.parent / "shared" / "data" / "mnist"),
        str(REPO / "oodeval" / "data" / "mnist"),  # the test set bundled with every checkout
    ]
    for folder in candidates:
        if folder and any(
            Path(folder, f"t10k-images-idx3-ubyte{e}").is_file() for e in ("", ".gz")
        ):
            return f"mnist:{Path(folder).resolve()}"
    if not importable("sklearn"):
        raise SystemExit(
            "error: no MNIST test set (set OODEVAL_MNIST=DIR or copy it to shared/data/mnist in "
            "the checkout) and no scikit-learn for the bundled digits; provide one of them"
        )
    return "digits"


def importable(module: str) -> bool:
    """True when `module` imports here."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def best_seconds(fn, device: str, repeats: int = 3) -> float:
    """Best wall time of `fn()` over `repeats` runs after one warm-up, the device synchronised."""
    fn()
    sync(device)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


@contextlib.contextmanager
def tf32(matmul: bool, conv: bool):
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def peaks(device: str, sizes: dict) -> dict[str, dict[str, float]]:
    """Measured TFLOP/s of a square matmul and of a 128 -> 128 3x3 conv (14x14, padding 1) in
    fp32 (TF32 off), TF32 and bf16 (autocast-free: bfloat16 tensors)."""
    n, b = sizes["matmul"], sizes["conv_batch"]
    out: dict[str, dict[str, float]] = {"matmul": {}, "conv": {}}
    for mode, dtype, allow in (
        ("fp32", torch.float32, False),
        ("tf32", torch.float32, True),
        ("bf16", torch.bfloat16, False),
    ):
        if mode == "tf32" and not device.startswith("cuda"):
            continue  # CPUs have no TF32
        a = torch.randn(n, n, device=device, dtype=dtype)
        x = torch.randn(b, 128, 14, 14, device=device, dtype=dtype)
        w = torch.randn(128, 128, 3, 3, device=device, dtype=dtype)
        with tf32(allow, allow):
            t_mm = best_seconds(lambda a=a: a @ a, device)
            t_conv = best_seconds(
                lambda x=x, w=w: torch.nn.functional.conv2d(x, w, padding=1), device
            )
        out["matmul"][mode] = 2 * n**3 / t_mm / 1e12
        out["conv"][mode] = 2 * b * 14 * 14 * 128 * 128 * 9 / t_conv / 1e12
    return out


def scenario(n: int, source: str, sizes: dict):
    params = {"size": sizes["size"]}
    for key in ("n_per_given", "n_eval"):
        if sizes[key] is not None:
            params[key] = sizes[key]
    return build_scenario("sr-cmnist", source=source, ratio="3:1", scale=SCALE_OF_N[n], **params)


def oodeval_step_seconds(sc, algorithm: str, device: str, sizes: dict, layout: str) -> float:
    """Seconds per step of oodeval's trainer (all N + 1 models), training steps alone."""
    options = {
        "seed": 0,
        "model": "mnist_cnn",
        "batch_size": sizes["batch"],
        "selection": "last",
        "device": device,
    }
    with conv_layout(layout):
        train_models(sc, algorithm, steps=1, **options)  # warm-up: kernels, allocator
        trained = train_models(sc, algorithm, steps=sizes["steps"], **options)
    return trained.timings["steps"] / sizes["steps"]


def step_flops(sc, algorithm: str, device: str, batch: int) -> float:
    """FLOPs (matmul + conv, forward and backward) of one oodeval step of the unit's N + 1
    models, counted by PyTorch's FlopCounterMode on one update of each run, in the per-model
    conv layout (FlopCounterMode counts a grouped convolution's weight gradient `groups` times
    over; the grouped layout does the same arithmetic)."""
    n = len(sc.given_names)
    hp = resolve_hparams(algorithm, None)
    shape = tuple(sc.input_shape)
    torch.manual_seed(0)
    loo = get_algorithm(algorithm)(
        shape, 2, torch.ones(n, n - 1, dtype=torch.bool), hp, model="mnist_cnn"
    ).to(device)
    full = get_algorithm(algorithm)(
        shape, 2, torch.ones(1, n, dtype=torch.bool), hp, model="mnist_cnn"
    ).to(device)
    x = torch.rand(n, n - 1, batch, *shape, device=device)
    y = torch.randint(0, 2, (n, n - 1, batch), device=device)
    xs, ys = (
        torch.rand(n, batch, *shape, device=device),
        torch.randint(0, 2, (n, batch), device=device),
    )
    with conv_layout("per_model"), FlopCounterMode(display=False) as counter:
        loo.update(x, y)
        full.update(xs, ys)
    return float(counter.get_total_flops())


def loop_step_seconds(
    sc, algorithm: str, device: str, sizes: dict, model: str = "mnist_cnn"
) -> float:
    """Seconds per step of a DomainBed-style loop: one model at a time (an M = 1 instance of the
    algorithm, DomainBed's update), a shuffling DataLoader per environment yielding CPU
    minibatches copied to the device every step. LOO model 0 and the full model are timed; a
    step of the unit is N x the first + the second (all LOO models cost the same)."""
    n = len(sc.given_names)
    hp = resolve_hparams(algorithm, None, model=model)
    parts = [env.split(0.2, 0)[0] for env in sc.given()]
    data = [TensorDataset(torch.from_numpy(p.images), torch.from_numpy(p.labels)) for p in parts]
    times = []
    for envs in (list(range(1, n)), list(range(n))):
        torch.manual_seed(0)
        single = (
            get_algorithm(algorithm)(
                tuple(sc.input_shape),
                sc.num_classes,
                torch.ones(1, len(envs), dtype=torch.bool),
                hp,
                model=model,
            )
            .to(device)
            .train()
        )
        gen = torch.Generator().manual_seed(0)
        loaders = [
            DataLoader(
                data[e], batch_size=sizes["batch"], shuffle=True, drop_last=True, generator=gen
            )
            for e in envs
        ]
        iters = [iter(dl) for dl in loaders]

        def step(single=single, loaders=loaders, iters=iters) -> None:
            batches = []
            for i, dl in enumerate(loaders):
                try:
                    batches.append(next(iters[i]))
                except StopIteration:
                    iters[i] = iter(dl)
                    batches.append(next(iters[i]))
            x = torch.stack([b[0] for b in batches]).to(device)
            y = torch.stack([b[1] for b in batches]).to(device)
            single.update(x, y)

        with conv_layout("per_model"):  # M = 1: one model, one plain convolution per layer
            step()
            sync(device)
            t0 = time.perf_counter()
            for _ in range(sizes["steps"]):
                step()
            sync(device)
        times.append((time.perf_counter() - t0) / sizes["steps"])
    return n * times[0] + times[1]


def eval_seconds(sc, device: str, sizes: dict) -> tuple[float, float]:
    """ERM's seconds per checkpoint evaluation and for the test on E_all (one unit, 2 steps,
    a checkpoint at each)."""
    result = run_unit(
        sc,
        "ERM",
        seed=0,
        steps=2,
        eval_every=1,
        model="mnist_cnn",
        batch_size=sizes["batch"],
        device=device,
    )
    return result.timings["selection_eval"] / 2, result.timings["test_eval"]


def unit_step_seconds(unit: StackedUnit, layout: str, steps: int, device: str) -> float:
    """Seconds per step of oodeval's step of `unit` (its minibatch draw and every run's update)
    in conv `layout`: `steps` timed steps after one warm-up, the device synchronised."""
    with conv_layout(layout):
        unit.step(*unit.minibatches())
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            unit.step(*unit.minibatches())
        sync(device)
    return (time.perf_counter() - t0) / steps


def resnet_section(device: str, sizes: dict, ref_mode: str, ref: float, t_start: float) -> None:
    """Section 6: the ResNet-50 unit's seconds per step in both layouts against the loop."""
    r = sizes["resnet"]
    n, b, side, steps = r["n"], r["batch"], r["size"], r["steps"]
    cpu = device == "cpu"
    print("\n## ResNet-50 unit: seconds per step (all N + 1 models), vs a DomainBed-style loop\n")
    print(
        f"oodeval's `resnet50` (DomainBed's ResNet-50 featurizer, random initialisation, frozen "
        f"BatchNorms), ERM, N = {n} given environments ({n + 1} models), B = {b} per "
        f"environment, 3x{side}x{side} random images (uniform in [0, 1), 7 classes: a step's "
        f"cost does not depend on the pixels), {steps} timed steps after 1 warm-up per layout; "
        f"the loop as in the faithful unit's section; TFLOP/s from FlopCounterMode's count of "
        f"one step, as a share of the {ref_mode} conv peak ({ref:.2f} TFLOP/s)."
        + (
            f" **CPU run: tiny sizes (N = {n}, B = {b}, {side}x{side}), a smoke run of this "
            "section, not ResNet-50's cost at 224x224.**"
            if cpu
            else ""
        )
        + "\n"
    )
    sc = RandomImages(n, side, rows=max(2 * b, 8))
    unit = StackedUnit(sc, "ERM", "resnet50", device, b)
    flops = counted_flops(unit.step, *unit.minibatches())
    # the counting step, 2 layouts x (1 + steps), the loop's 2 models x (1 + steps) at <= 1 step
    total = flops * (1 + 2 * (1 + steps) + (1 + steps))
    print(
        f"{flops / 1e9:.1f} GFLOP per step; the section's steps about {total / 1e12:.2f} TFLOP, "
        f"{total / 100e12:.2f} s at 100 TFLOP/s ({time.perf_counter() - t_start:.0f} s so far)\n"
    )
    seconds = {
        layout: unit_step_seconds(unit, layout, steps, device)
        for layout in ("grouped", "per_model")
    }
    del unit
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    loop = loop_step_seconds(sc, "ERM", device, {"batch": b, "steps": steps}, model="resnet50")
    fast = min(seconds.values())
    achieved = flops / fast / 1e12
    print(
        "| model | N | B | image | GFLOP/step | oodeval grouped ms | oodeval per-model ms | "
        "DomainBed-style loop ms | best oodeval vs loop | oodeval TFLOP/s | of peak |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| resnet50 | {n} | {b} | {side}x{side} | {flops / 1e9:.1f} | "
        f"{seconds['grouped'] * 1e3:.1f} | {seconds['per_model'] * 1e3:.1f} | {loop * 1e3:.1f} | "
        f"{loop / fast:.2f}x | {achieved:.2f} | {100 * achieved / ref:.0f}% |"
    )
    print(image_projection(fast, n, b, side))
    print(f"\n({time.perf_counter() - t_start:.0f} s so far)")


def image_projection(step: float, n: int, batch: int, side: int) -> str:
    """The training steps of the ResNet-50 image presets (paper-images, nico), projected from
    one measured ERM step at `n` given environments: a step trains N LOO models on N - 1
    minibatches and the full model on N, N^2 minibatches in all, so t(N) = t(n) (N / n)^2.
    A lower bound: ERM's step for every algorithm, no evaluation, every scenario at `side`."""
    from oodeval import paper_grid as grid
    from oodeval.environments.domains import NICO_TRAIN_DOMAINS

    corrupted = [
        sum(int(count) for count in pattern.split("-"))
        for patterns in grid.CORRUPTED_PATTERNS.values()
        for pattern in patterns
    ]
    grids = {
        "paper-images": (
            [grid.IMAGE_RATIO_GIVEN] * (2 * len(grid.IMAGE_RATIOS)) + corrupted,
            len(grid.PAPER_ALGORITHMS),
        ),
        "nico": ([len(NICO_TRAIN_DOMAINS)] * 2, len(grid.NICO_ALGORITHMS)),
    }
    lines = [
        f"\nProjected training steps of the image presets from this step ({step:.3f} s at "
        f"N = {n}, B = {batch}, {side}x{side}; t(N) = t({n}) (N / {n})^2, ERM's step for every "
        f"algorithm, no evaluation, {grid.PAPER_STEPS} steps, {len(grid.SEEDS)} seeds; "
        "C-Cats&Dogs and L-CIFAR10 counted at this size too):\n",
        "| preset | N of its scenarios | units | projected GPU-hours |",
        "| --- | --- | ---: | ---: |",
    ]
    for name, (ns, algorithms) in grids.items():
        units = len(ns) * algorithms * len(grid.SEEDS)
        seconds = sum(step * (m / n) ** 2 * grid.PAPER_STEPS for m in ns)
        hours = seconds * algorithms * len(grid.SEEDS) / 3600
        lines.append(f"| {name} | {sorted(ns)} | {units} | {hours:.1f} |")
    return "\n".join(lines)


def power_law(t4: float, t12: float, n: int) -> float:
    """t(N) = t(4) (N / 4)^p with p from the two measured points."""
    p = math.log(t12 / t4) / math.log(3)
    return t4 * (n / 4) ** p


def device_check_section(
    device: str, source: str, sizes: dict, algorithms: list[str], model: str = "mlp"
) -> str:
    """benchmarks/device_check.py's output for `algorithms` with `model`, and its exit code."""
    argv = [device, "--steps", str(sizes["check_steps"]), "--algorithms", ",".join(algorithms)]
    argv += ["--model", model]
    if sizes["n_per_given"] is not None:
        argv += ["--n-per-given", "100", "--n-eval", "100"]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = device_check.main(argv + ["--source", source])
    output = buffer.getvalue().rstrip()
    return f"`device_check.py {' '.join(argv)}`: exit {code}\n\n```\n{output}\n```\n"


def tolerance_note(device: str) -> str:
    """device_check's tolerance on `device` and its reason (from its docstring)."""
    why = " ".join(
        device_check.__doc__.split("Tolerance, per LOO error")[1].split("Run:")[0].split()
    )
    return f"Tolerance {device_check.tolerance(device)} per LOO error {why}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--skip-device-check", action="store_true")
    args = parser.parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):  # a run cut short keeps every line it printed
        sys.stdout.reconfigure(line_buffering=True)
    try:
        device = resolve_device(args.device)
    except OodevalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kind = device.partition(":")[0]
    sizes = SIZES[kind]
    deterministic_device(device)
    torch.set_num_threads(1 if kind == "cpu" else torch.get_num_threads())
    grid = paper_grid()
    source = find_source()
    if kind == "cpu" and source.startswith("mnist:"):
        sizes = {**sizes, "size": 7}  # a side dividing MNIST's 28
    t_start = time.perf_counter()
    algorithms = list(grid["PAPER_ALGORITHMS"])
    left_out = [] if importable("scipy") else ["Mixup"]
    algorithms = [a for a in algorithms if a not in left_out]
    name = torch.cuda.get_device_name(device) if kind == "cuda" else platform.processor() or "cpu"
    print(f"# oodeval GPU check: {name}\n")
    print(
        f"- device `{device}`: {name}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"Python {platform.python_version()}; source `{source}`; sizes {sizes}"
    )
    print(
        f'- TF32 (PyTorch defaults, oodeval\'s `tf32 = "default"`): matmul '
        f"{torch.backends.cuda.matmul.allow_tf32}, cuDNN conv {torch.backends.cudnn.allow_tf32}"
    )
    if left_out:
        print(
            f"- left out: {', '.join(left_out)} (scipy is missing: Mixup draws its Beta weights "
            "with scipy.special.betaincinv)"
        )
    print("\n## Measured peaks (TFLOP/s)\n")
    peak = peaks(device, sizes)
    modes = list(peak["matmul"])
    print("| kernel | " + " | ".join(modes) + " |\n| --- |" + " ---: |" * len(modes))
    for kernel, label in (
        ("matmul", f"matmul {sizes['matmul']}^3"),
        ("conv", f"conv 3x3 128->128 14x14, batch {sizes['conv_batch']}"),
    ):
        print(f"| {label} | " + " | ".join(f"{peak[kernel][m]:.2f}" for m in modes) + " |")
    print(f"\n({time.perf_counter() - t_start:.0f} s so far)")
    print("\n## device_check: CPU vs this device, every algorithm\n")
    if args.skip_device_check:
        print("skipped (--skip-device-check)\n")
    else:
        print(tolerance_note(device))
        print(device_check_section(device, source, sizes, algorithms))
        # the conv paths: grouped convolutions on a GPU against the CPU's per-model loop
        conv = [a for a in ("ERM", "ARM", "MTL") if a in algorithms]
        print(device_check_section(device, source, sizes, conv, model="cnn"))
    ref_mode = "tf32" if "tf32" in peak["conv"] else "fp32"
    ref = peak["conv"][ref_mode]
    print(f"({time.perf_counter() - t_start:.0f} s so far)\n")
    print("## Faithful unit: seconds per step (all N + 1 models), vs a DomainBed-style loop\n")
    print(
        f"MNIST_CNN on {sizes['size']}x{sizes['size']}, B = {sizes['batch']} per environment, "
        f"{sizes['steps']} timed steps after a warm-up; TFLOP/s from FlopCounterMode's count "
        f"of one step, as a share of the {ref_mode} conv peak ({ref:.2f} TFLOP/s). Both "
        "contenders run under oodeval's deterministic CUDA settings (deterministic kernels, "
        "no cuDNN autotuning), which DomainBed itself does not ask for.\n"
    )
    print(
        "| algorithm | N | GFLOP/step | oodeval grouped ms | oodeval per-model ms | "
        "DomainBed-style loop ms | best oodeval vs loop | oodeval TFLOP/s | of peak |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    steps: dict[tuple[str, int], float] = {}
    faster: dict[int, str] = {}
    scenarios = {n: scenario(n, source, sizes) for n in SCALE_OF_N}
    for n, sc in scenarios.items():
        for algorithm in LOOP_ALGORITHMS:
            flops = step_flops(sc, algorithm, device, sizes["batch"])
            if algorithm == "ERM":  # the analytic count of benchmarks/roofline.py agrees
                b, shape = sizes["batch"], tuple(sc.input_shape)
                analytic = n * training_flops(forward_gemms("mnist_cnn", shape, b * (n - 1)))
                analytic += training_flops(forward_gemms("mnist_cnn", shape, b * n))
                assert abs(analytic - flops) <= 1e-6 * flops, (analytic, flops)
            grouped = oodeval_step_seconds(sc, algorithm, device, sizes, "grouped")
            per_model = oodeval_step_seconds(sc, algorithm, device, sizes, "per_model")
            loop = loop_step_seconds(sc, algorithm, device, sizes)
            fast = min(grouped, per_model)
            steps[algorithm, n] = fast
            if algorithm == "ERM":  # the other algorithms are timed in ERM's faster layout
                faster[n] = "grouped" if grouped <= per_model else "per_model"
            achieved = flops / fast / 1e12
            print(
                f"| {algorithm} | {n} | {flops / 1e9:.1f} | {grouped * 1e3:.1f} | "
                f"{per_model * 1e3:.1f} | {loop * 1e3:.1f} | {loop / fast:.2f}x | "
                f"{achieved:.2f} | {100 * achieved / ref:.0f}% |"
            )
    print(f"\n({time.perf_counter() - t_start:.0f} s so far)")
    print("\n## Projected wall time of the `paper` grid on this device\n")
    for algorithm in algorithms:
        for n, sc in scenarios.items():
            if (algorithm, n) not in steps:
                steps[algorithm, n] = oodeval_step_seconds(sc, algorithm, device, sizes, faster[n])
    evals = {n: eval_seconds(sc, device, sizes) for n, sc in scenarios.items()}
    n_of = {
        (r, s): len(
            build_scenario(
                "sr-cmnist", source=source, ratio=r, scale=s, n_per_given=10, n_eval=10
            ).given_names
        )
        for r in grid["RATIOS"]
        for s in grid["SCALES"]
    }
    total_steps, checkpoints = (
        grid["PAPER_STEPS"],
        math.ceil(grid["PAPER_STEPS"] / grid["PAPER_EVAL_EVERY"]),
    )
    seeds = len(grid["SEEDS"])
    print("| algorithm | s/step N=4 | s/step N=12 | unit h, N=4 | grid share h |")
    print("| --- | ---: | ---: | ---: | ---: |")
    grid_seconds = 0.0
    for algorithm in algorithms:
        total = 0.0
        for n in n_of.values():
            step = power_law(steps[algorithm, 4], steps[algorithm, 12], n)
            ckpt = power_law(evals[4][0], evals[12][0], n)
            test = power_law(evals[4][1], evals[12][1], n)
            total += seeds * (total_steps * step + checkpoints * ckpt + test)
        grid_seconds += total
        unit4 = total_steps * steps[algorithm, 4] + checkpoints * evals[4][0] + evals[4][1]
        print(
            f"| {algorithm} | {steps[algorithm, 4]:.4f} | {steps[algorithm, 12]:.4f} | "
            f"{unit4 / 3600:.2f} | {total / 3600:.1f} |"
        )
    units = len(algorithms) * len(n_of) * seeds
    print(
        f"\n**Projected: {grid_seconds / 3600:.1f} h for {units} units** ({len(n_of)} scenarios, "
        f"N in {sorted(set(n_of.values()))}, {total_steps} steps, {checkpoints} checkpoints; "
        f"ERM's checkpoint evaluation {evals[4][0]:.2f} s / {evals[12][0]:.2f} s and test "
        f"{evals[4][1]:.2f} s / {evals[12][1]:.2f} s at N = 4 / 12)"
        + (f"; without {', '.join(left_out)}" if left_out else "")
    )
    print(f"\n({time.perf_counter() - t_start:.0f} s so far)")
    resnet_section(device, sizes, ref_mode, ref, t_start)
    print(f"\nThe check took {time.perf_counter() - t_start:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
