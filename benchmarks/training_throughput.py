"""Trainings per hour: oodeval's batched LOO trainer vs plain loops training N + 1 models in turn.

One unit of the worst+gap protocol trains N leave-one-out models and one full model (a "training"
is one of them). All contenders use the same IRM-style MLP, Adam(lr 1e-3), B rows per environment
per step, the same number of steps, training-domain validation every `--eval-every` steps (and at
the last step) with best-checkpoint restoring, at each checkpoint LOO model k's accuracy on both
parts of e_k (oodeval's checkpoint records), and the same test results (LOO model k on e_k, the
full model on all 101 environments of E_all; oodeval gets them with one prediction per image and
color, the plain loops with one per environment). Baselines, measured in the same run:

- plain loop (tensors): one model after another, minibatches indexed from tensors, one forward per
  validation/test environment, float32 — a careful sequential implementation;
- plain loop (DataLoader): the same with the usual PyTorch idiom, a shuffling DataLoader per
  environment (num_workers=0) for training and DataLoader batches of 64 for evaluation, as in
  DomainBed;
- plain loop (tensors, bf16): the tensor loop under ``torch.autocast("cpu", torch.bfloat16)``,
  to show how much of oodeval's bf16 gain is the precision alone.

oodeval runs in float32 and in bf16 (``precision="bf16"``, mixed precision).

Default mode, per unit: every contender in this process on `--threads` threads (default 1),
warmed up once, then timed `--repeats` times interleaved; the best time counts.
``--machine``: whole-machine throughput on `--units` units (seeds 0..units-1): oodeval's
`run_units` on a `worker_pool` with one process per core (1 thread each) against the plain loops
running the same units one after another on torch's thread pool over all cores, and against the
plain tensor loop run unit by unit in the same kind of pool. Everything is warmed up first (a
pool: processes started and two 2-step units per process, timed and printed apart); scenarios
are built once per process, as a study does.

``--roofline``: per model of `--models` (default mlp on 2x14x14 and DomainBed's MNIST_CNN on
2x28x28), one ERM unit's training steps alone (no validation or tests) for every contender,
oodeval's stacked trainer and the plain loops training the N + 1 models one after another:
milliseconds per step (a step = one update of every model), the ratio to the plain DataLoader loop
(the DomainBed-style idiom), the achieved GFLOP/s (`training_flops` of the step's GEMMs over its
time), and the share of the step's bound, the bound's time over the contender's: the sum over the
step's layers of the fastest kernel per layer and pass (forward, input gradient, weight gradient)
at that layer's own shape, every conv tried contiguous and channels-last with oneDNN on and off
(`conv_pass_seconds`), linear layers as `torch.matmul` (`gemm_seconds`), on the same thread
count, best of several runs before and after the contenders, in float32 (bf16 contenders:
bfloat16). A contender beating the bound is noted, and the bound taken as its time. The bound's
table (layer, shape, pass, best setting, ms) is printed before the contenders.

Run:  .venv/bin/python benchmarks/training_throughput.py [--steps 300] [--scales 1 2]
      .venv/bin/python benchmarks/training_throughput.py --machine [--units 8]
      .venv/bin/python benchmarks/training_throughput.py --roofline [--steps 300] [--cnn-steps 20]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from roofline import (  # noqa: E402  (torch only: shared with gpu_check.py)
    CONV_PASSES,
    CONV_SETTINGS,  # noqa: F401  (re-exported: the settings the bound tries)
    conv_layers,
    conv_pass_seconds,
    forward_gemms,
    gemm_seconds,
    plain_mnist_cnn,  # noqa: F401  (re-exported: this benchmark's plain MNIST_CNN)
    plain_model,
    training_flops,
)

from oodeval.environments import build_scenario  # noqa: E402
from oodeval.environments.mnist import resolve_source  # noqa: E402
from oodeval.study import preset, trainer_backend  # noqa: E402
from oodeval.study.worker import UnitTask, run_units, worker_pool  # noqa: E402
from oodeval.training import run_unit, train_models  # noqa: E402


def _accuracy_tensors(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def _accuracy_loader(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    correct = 0
    with torch.no_grad():
        for xb, yb in DataLoader(TensorDataset(x, y), batch_size=64):
            correct += int((net(xb).argmax(1) == yb).sum())
    return correct / len(y)


def plain_loop(
    scenario,
    *,
    steps: int,
    batch: int,
    eval_every: int,
    seed: int,
    loaders: bool,
    model: str,
    bf16: bool = False,
    evaluate: bool = True,
    timings: dict[str, float] | None = None,
):
    """Train and test the unit's N + 1 models one after another; returns the LOO/all errors.

    ``bf16`` runs forward passes and losses under ``torch.autocast("cpu", torch.bfloat16)`` (the
    standard mixed-precision recipe: backward and optimiser outside it). ``evaluate=False`` only
    trains (no validation, checkpoints or tests, like oodeval's ``selection="last"`` untested);
    `timings` then gets ``"train"``: the seconds of the training steps alone (minibatches,
    forward, backward, Adam), as oodeval's ``timings["train"]``.
    """
    train_seconds = 0.0

    def amp():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    torch.manual_seed(seed)
    given = scenario.given()
    parts = [env.split(0.2, seed) for env in given]
    tr = [(torch.from_numpy(t.images), torch.from_numpy(t.labels)) for t, _ in parts]
    va = [(torch.from_numpy(v.images), torch.from_numpy(v.labels)) for _, v in parts]
    n = len(given)
    measure = _accuracy_loader if loaders else _accuracy_tensors

    def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        with amp():
            return measure(net, x, y)

    errors, records = [], []
    for k in range(n + 1):
        envs = [j for j in range(n) if j != k]
        net = plain_model(model, tuple(tr[0][0].shape[1:]), scenario.num_classes)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(seed + k)
        if loaders:
            iters = [
                iter(DataLoader(TensorDataset(*tr[j]), batch_size=batch, shuffle=True,
                                drop_last=True, generator=gen))
                for j in envs
            ]  # fmt: skip
        best, best_state = -1.0, None
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            if loaders:
                xs, ys = [], []
                for i, j in enumerate(envs):
                    try:
                        xb, yb = next(iters[i])
                    except StopIteration:
                        iters[i] = iter(
                            DataLoader(
                                TensorDataset(*tr[j]),
                                batch_size=batch,
                                shuffle=True,
                                drop_last=True,
                                generator=gen,
                            )
                        )
                        xb, yb = next(iters[i])
                    xs.append(xb)
                    ys.append(yb)
            else:
                idx = [torch.randint(len(tr[j][1]), (batch,), generator=gen) for j in envs]
                xs = [tr[j][0][i] for j, i in zip(envs, idx, strict=True)]
                ys = [tr[j][1][i] for j, i in zip(envs, idx, strict=True)]
            with amp():
                loss = F.cross_entropy(net(torch.cat(xs)), torch.cat(ys))
            opt.zero_grad()
            loss.backward()
            opt.step()
            train_seconds += time.perf_counter() - t0
            if not evaluate:
                continue
            if step % eval_every == 0 or step == steps:
                acc = sum(accuracy(net, *va[j]) for j in envs) / len(envs)
                if k < n:  # the checkpoint record of oodeval: accuracy on both parts of e_k
                    records.append((k, step, accuracy(net, *tr[k]), accuracy(net, *va[k])))
                if acc > best:
                    best, best_state = acc, copy.deepcopy(net.state_dict())
        if not evaluate:
            continue
        net.load_state_dict(best_state)
        if k < n:
            x, y = torch.from_numpy(given[k].images), torch.from_numpy(given[k].labels)
            errors.append(1 - accuracy(net, x, y))
        else:
            for env in scenario.evaluation():
                x, y = torch.from_numpy(env.images), torch.from_numpy(env.labels)
                errors.append(1 - accuracy(net, x, y))
    if timings is not None:
        timings["train"] = train_seconds
    return errors, records


@functools.lru_cache(maxsize=2)
def _scenario(source: str, scale: int):
    """The benchmark's SR-CMNIST 3:1 scenario, built once per process."""
    return trainer_backend.build_scenario("sr-cmnist", source=source, ratio="3:1", scale=scale)


def _plain_unit(source: str, scale: int, options: dict, seed: int) -> float:
    """One plain-loop unit in a worker process (for the pooled plain loop); its seconds."""
    t0 = time.perf_counter()
    plain_loop(_scenario(source, scale), seed=seed, **options)
    return time.perf_counter() - t0


def per_algorithm(args: argparse.Namespace) -> None:
    """Seconds per unit (N + 1 trainings, `--steps` steps) of every paper algorithm, per
    precision: warmed up (2 steps), precisions alternating, best of `--repeats`."""
    from oodeval.algorithms import PAPER_ALGORITHMS

    for scale in args.scales:
        sc = build_scenario("sr-cmnist", source=args.source, ratio="3:1", scale=scale)
        trainings = len(sc.given_names) + 1
        for name in PAPER_ALGORITHMS:
            unit = functools.partial(run_unit, sc, name, seed=0, batch_size=args.batch,
                                     eval_every=args.eval_every, model=args.model)  # fmt: skip
            best = {}
            for precision in args.precisions:
                unit(steps=2, precision=precision)
            for _ in range(args.repeats):
                for precision in args.precisions:
                    t = unit(steps=args.steps, precision=precision).timings
                    if precision not in best or t["total"] < best[precision]["total"]:
                        best[precision] = t
            for precision, t in best.items():
                print(
                    f"{sc.name} {name:9s} {precision} total {t['total']:6.2f}s "
                    f"(train {t['train']:6.2f}s, test eval {t['test_eval']:5.2f}s) = "
                    f"{trainings * 3600 / t['total']:6.0f} trainings/h"
                )


def _report(label: str, trainings: int, seconds: dict[str, float], base: str) -> None:
    """Print each contender's time and trainings/h, and its speed-up over `base`."""
    print(label)
    for name, sec in seconds.items():
        print(
            f"  {name:44s} {sec:7.2f} s = {trainings * 3600 / sec:7.0f} trainings/h"
            f"   {seconds[base] / sec:5.2f}x vs {base}"
        )


def _plain_units(sc, args, threads: int, *, loaders: bool, bf16: bool) -> float:
    """Seconds for the plain loop to run `--units` units in turn on `threads` threads, warmed up."""
    torch.set_num_threads(threads)
    plain = functools.partial(plain_loop, sc, batch=args.batch, eval_every=args.eval_every,
                              loaders=loaders, model=args.model, bf16=bf16)  # fmt: skip
    plain(steps=2, seed=0)
    t0 = time.perf_counter()
    for seed in range(args.units):
        plain(steps=args.steps, seed=seed)
    return time.perf_counter() - t0


def _plain_units_pooled(args, workers: int, scale: int) -> float:
    """Seconds for the plain tensor loop to run `--units` units, one per task, in a warmed-up
    pool of `workers` processes with 1 thread each (the pool oodeval's units run in)."""
    options = {"steps": args.steps, "batch": args.batch, "eval_every": args.eval_every,
               "loaders": False, "model": args.model}  # fmt: skip
    with worker_pool(workers) as pool:
        warm = functools.partial(_plain_unit, args.source, scale, {**options, "steps": 2})
        list(pool.map(warm, range(2 * workers)))
        task = functools.partial(_plain_unit, args.source, scale, options)
        t0 = time.perf_counter()
        list(pool.map(task, range(args.units)))
        return time.perf_counter() - t0


def _oodeval_units(build, args, workers: int, precision: str, startup: list[float]) -> float:
    """Seconds for `run_units` to run `--units` units on a warmed-up pool of `workers`."""
    options = {"batch_size": args.batch, "eval_every": args.eval_every, "model": args.model,
               "precision": precision}  # fmt: skip
    specs = [UnitTask.for_scenario(build, "ERM", s, args.steps, options) for s in range(args.units)]
    with worker_pool(workers) as pool:
        # warm-up as for the plain loops: start the processes, import torch, two tiny units per
        # worker (timed apart: a study pays this once, not per unit)
        t0 = time.perf_counter()
        warm = [UnitTask.for_scenario(build, "ERM", s, 2, options) for s in range(2 * workers)]
        list(run_units(warm, pool=pool))
        startup.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        list(run_units(specs, pool=pool))
        return time.perf_counter() - t0


def machine(args: argparse.Namespace) -> None:
    """Whole-machine throughput on `--units` units: `run_units` on a pool of one process per core
    (1 thread each) versus plain loops running the units in turn on all cores; both warmed up."""
    workers = os.cpu_count() or 1
    for scale in args.scales:
        sc = build_scenario("sr-cmnist", source=args.source, ratio="3:1", scale=scale)
        trainings = (len(sc.given_names) + 1) * args.units
        build = functools.partial(_scenario, args.source, scale)
        contenders = {}
        for loaders, bf16 in ((False, False), (True, False), (False, True)):
            kind = "DataLoader" if loaders else "tensors"
            name = f"plain loop ({kind}), {workers} threads, {'bf16' if bf16 else 'fp32'}"
            contenders[name] = functools.partial(
                _plain_units, sc, args, workers, loaders=loaders, bf16=bf16
            )
        name = f"plain loop (tensors), {workers} worker processes, fp32"
        contenders[name] = functools.partial(_plain_units_pooled, args, workers, scale)
        startup: dict[str, list[float]] = {p: [] for p in args.precisions}
        for precision in args.precisions:
            name = f"oodeval run_units, {workers} workers, {precision}"
            contenders[name] = functools.partial(
                _oodeval_units, build, args, workers, precision, startup[precision]
            )
        seconds = dict.fromkeys(contenders, float("inf"))
        for _ in range(args.repeats):  # interleaved, best of `repeats` for every contender
            for name, run in contenders.items():
                seconds[name] = min(seconds[name], run())
        torch.set_num_threads(args.threads)
        _report(
            f"{sc.name} whole machine, {args.units} units ({trainings} trainings):",
            trainings,
            seconds,
            f"plain loop (tensors), {workers} threads, fp32",
        )
        print(
            "  (not counted above: pool start-up with warm-up units "
            + ", ".join(f"{k} {min(v):.1f}-{max(v):.1f} s" for k, v in startup.items())
            + ")"
        )


def per_unit(args: argparse.Namespace) -> None:
    """One unit at a time, every contender in this process on `--threads` threads."""
    for scale in args.scales:
        sc = build_scenario("sr-cmnist", source=args.source, ratio="3:1", scale=scale)
        trainings = len(sc.given_names) + 1
        contenders = {}
        for precision in args.precisions:
            contenders[f"oodeval run_unit, {precision}"] = functools.partial(
                run_unit, sc, "ERM", seed=0, batch_size=args.batch,
                eval_every=args.eval_every, model=args.model, precision=precision,
            )  # fmt: skip
        plain = functools.partial(plain_loop, sc, batch=args.batch, eval_every=args.eval_every,
                                  seed=0, model=args.model)  # fmt: skip
        contenders["plain loop (tensors), fp32"] = functools.partial(plain, loaders=False)
        contenders["plain loop (DataLoader), fp32"] = functools.partial(plain, loaders=True)
        contenders["plain loop (tensors), bf16"] = functools.partial(
            plain, loaders=False, bf16=True
        )
        for run in contenders.values():  # warm-up: allocator, BLAS and data caches
            run(steps=2)
        best = dict.fromkeys(contenders, float("inf"))
        for _ in range(args.repeats):  # interleaved, best of `repeats`
            for name, run in contenders.items():
                t0 = time.perf_counter()
                run(steps=args.steps)
                best[name] = min(best[name], time.perf_counter() - t0)
        _report(
            f"{sc.name} (N={trainings - 1}, {trainings} trainings per unit), per unit:",
            trainings,
            best,
            "plain loop (tensors), fp32",
        )


def roofline(args: argparse.Namespace) -> None:
    """Per model of `--models` (ERM, one unit of SR-CMNIST 3:1 at the first `--scales`, 28x28 for
    mnist_cnn on MNIST): every contender's seconds per training step (validation and tests left
    out), its ratio to the plain DataLoader loop, its achieved GFLOP/s, and its share of the
    step's bound: the bound's seconds over the contender's. The bound (`_step_bound`) is the sum
    over the step's layers of the fastest kernel per layer and pass at the layer's own shape
    (convolutions in every layout and backend, `conv_pass_seconds`; linear layers as
    `torch.matmul`, `gemm_seconds`) on this thread count, measured before and after the
    contenders, the faster of the two per pass; bf16 contenders against the bfloat16 kernels. A
    contender faster than the bound is said so, and the bound taken as its time (100%)."""
    for model in args.models:
        size = {"size": 28} if model == "mnist_cnn" and args.source.startswith("mnist:") else {}
        sc = build_scenario("sr-cmnist", source=args.source, ratio="3:1", scale=args.scales[0],
                            **size)  # fmt: skip
        n, steps = len(sc.given_names), args.cnn_steps if model != "mlp" else args.steps
        loo = forward_gemms(model, sc.input_shape, args.batch * (n - 1))
        full = forward_gemms(model, sc.input_shape, args.batch * n)
        flops = n * training_flops(loo) + training_flops(full)  # N LOO models + the full one
        # on a shared machine a burst of other work during one measurement would raise the bound:
        # measured before and after the contenders, the faster of the two counted per pass
        bound_step = functools.partial(_step_bound, model, sc.input_shape, n, args.batch,
                                       max(3, args.repeats + 1))  # fmt: skip
        before = {p: bound_step(p) for p in args.precisions}
        contenders = {}
        for p in args.precisions:
            contenders[f"oodeval (stacked), {p}"] = (p, functools.partial(
                _oodeval_train_seconds, sc, model, args.batch, p))  # fmt: skip
            if args.baseline:  # the same unit, trained by the oodeval of another source tree
                params = {"ratio": "3:1", "scale": args.scales[0], **size}
                contenders[f"oodeval, baseline tree, {p}"] = (p, functools.partial(
                    _tree_train_seconds, args, params, model, p))  # fmt: skip
        for loaders, bf16 in ((False, False), (True, False), (False, True)):
            p = "bf16" if bf16 else "fp32"
            if p in args.precisions:
                kind = "DataLoader" if loaders else "tensors"
                contenders[f"plain loop ({kind}), {p}"] = (p, functools.partial(
                    _plain_train_seconds, sc, model, args.batch, loaders, bf16))  # fmt: skip
        for _p, run in contenders.values():
            run(1)  # warm-up
        best = dict.fromkeys(contenders, float("inf"))
        for _ in range(args.repeats):
            for name, (_p, run) in contenders.items():
                best[name] = min(best[name], run(steps))
        tables = {p: _faster(before[p], bound_step(p)) for p in args.precisions}
        bound = {p: sum(row[1] * row[-1] for row in tables[p]) for p in args.precisions}
        print(
            f"{sc.name} {model} {sc.input_shape} (N={n}, {n + 1} models, "
            f"{args.batch * n * n} rows per step), {steps} steps, "
            f"{flops / 1e9:.2f} GFLOP per step; bound (the fastest kernel per layer and pass at "
            f"the layers' own shapes) on {torch.get_num_threads()} thread(s): "
            + ", ".join(
                f"{p} {b * 1e3:.1f} ms/step = {flops / b / 1e9:.1f} GFLOP/s"
                for p, b in bound.items()
            )
        )
        for p in args.precisions:
            print(f"  {p} bound, per model kind (x models per step): layer, shape, pass, best, ms")
            for kind, count, layer, shape, pass_, setting, seconds in tables[p]:
                print(
                    f"    {kind:4s} x{count} {layer:7s} {shape:28s} {pass_:11s} {setting:24s} "
                    f"{seconds * 1e3:8.2f}"
                )
        notes = []
        for p in args.precisions:
            fastest = min(best[name] / steps for name, (q, _r) in contenders.items() if q == p)
            if fastest < bound[p]:
                notes.append(
                    f"  note: a {p} contender ({fastest * 1e3:.1f} ms/step) beat the {p} bound "
                    f"({bound[p] * 1e3:.1f} ms/step, its kernels measured alone); the bound is "
                    f"taken as that contender's time"
                )
                bound[p] = fastest
        base = best.get("plain loop (DataLoader), fp32")
        for name, (p, _run) in contenders.items():
            per_step = best[name] / steps
            achieved = flops / per_step / 1e9
            ratio = f"{base / best[name]:5.2f}x vs plain DataLoader" if base else ""
            print(
                f"  {name:30s} {per_step * 1e3:9.1f} ms/step {ratio}   "
                f"{achieved:6.1f} GFLOP/s = {100 * bound[p] / per_step:3.0f}% of {p} bound"
            )
        for note in notes:
            print(note)


#: the paper-cpu unit's length and checkpoint interval, read from the preset (450 and 100)
PAPER_CPU_STEPS = preset("paper-cpu").steps
PAPER_CPU_EVAL_EVERY = preset("paper-cpu").trainer["eval_every"]
_ARM_UNIT = """
import json, sys, torch
torch.set_num_threads({threads})
from oodeval.environments import build_scenario
from oodeval.training import run_unit
sc = build_scenario("sr-cmnist", source={source!r}, ratio="3:1", scale=1)
r = run_unit(sc, "ARM", seed=0, steps={steps}, eval_every={every}, model="mlp", batch_size=64)
print(json.dumps(r.timings))
"""


_TRAIN_STEPS = """
import sys, torch
torch.set_num_threads({threads})
from oodeval.environments import build_scenario
from oodeval.training import train_models
sc = build_scenario("sr-cmnist", source={source!r}, **{params!r})
t = train_models(sc, "ERM", seed=0, steps={steps}, model={model!r}, batch_size={batch},
                 selection="last", precision={precision!r}).timings
print(t.get("steps", t["train"]))
"""


def _in_tree(tree: str, code: str) -> str:
    """The last stdout line of `code` run by the oodeval of source tree `tree`, fresh process."""
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, cwd=tree).stdout  # fmt: skip
    return out.splitlines()[-1]


def _tree_train_seconds(args, params: dict, model: str, precision: str, steps: int) -> float:
    """`_oodeval_train_seconds` with the oodeval of `--baseline` (a fresh process, warmed up by
    one step first: what the in-process contenders get from their warm-up run)."""
    code = _TRAIN_STEPS.format(
        threads=args.threads,
        source=args.source,
        params=params,
        model=model,
        batch=args.batch,
        precision=precision,
        steps=1,
    )
    code += code.replace("steps=1,", f"steps={steps},")  # fmt: skip
    return float(_in_tree(str(Path(args.baseline).resolve()), code))


def arm_unit_seconds(tree: str, args: argparse.Namespace) -> dict[str, float]:
    """One `paper-cpu` ARM unit (SR-CMNIST 3:1, Scale 1, mlp, B = 64) run by the oodeval of
    source tree `tree` in a fresh process for `--arm-steps` steps with a checkpoint every
    `--arm-eval-every`, and its time projected to the preset's 450 steps and 5 checkpoints:
    steps x 450 / S + checkpoint time x 5 / (checkpoints run) + the test on E_all."""
    steps, every = args.arm_steps, args.arm_eval_every
    code = _ARM_UNIT.format(threads=args.threads, source=args.source, steps=steps, every=every)
    t = json.loads(_in_tree(tree, code))
    checkpoints = math.ceil(steps / every)
    n_ckpt = math.ceil(PAPER_CPU_STEPS / PAPER_CPU_EVAL_EVERY)
    projected = (t["steps"] * PAPER_CPU_STEPS / steps + t["selection_eval"] * n_ckpt / checkpoints
                 + t["test_eval"])  # fmt: skip
    return {**t, "projected": projected}


def arm_versus_baseline(args: argparse.Namespace) -> None:
    """`arm_unit_seconds` of this tree and of `--baseline` (today's code, e.g. a checkout of
    main), interleaved, best of `--repeats`; prints both and the speed-up."""
    trees = {"this tree": str(Path(__file__).resolve().parents[1])}
    if args.baseline:
        trees["baseline " + args.baseline] = str(Path(args.baseline).resolve())
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            t = arm_unit_seconds(tree, args)
            if name not in best or t["projected"] < best[name]["projected"]:
                best[name] = t
    print(
        f"ARM, one paper-cpu unit (SR-CMNIST 3:1 Scale 1, mlp, B=64), {args.arm_steps} steps "
        f"with a checkpoint every {args.arm_eval_every}, projected to {PAPER_CPU_STEPS} steps "
        f"and a checkpoint every {PAPER_CPU_EVAL_EVERY}:"
    )
    first = best["this tree"]["projected"]
    for name, t in best.items():
        ratio = f"   {t['projected'] / first:5.2f}x this tree's time" if name != "this tree" else ""
        print(
            f"  {name:40s} {t['projected']:8.1f} s projected (measured: steps {t['steps']:.1f} s, "
            f"checkpoints {t['selection_eval']:.1f} s, test on E_all {t['test_eval']:.1f} s)"
            + ratio
        )


#: one row of a bound's table: model kind ("LOO" or "full"), models of that kind per step,
#: layer, shape, pass, best setting, seconds of one model's pass
BoundRow = tuple[str, int, str, str, str, str, float]


def _step_bound(
    model: str, shape: tuple[int, ...], n: int, batch: int, repeats: int, precision: str
) -> list[BoundRow]:
    """The bound of one unit's training step, layer by layer: for the N LOO models (B (N - 1)
    rows each) and the full model (B N rows), every conv layer's passes (`conv_pass_seconds`,
    the fastest setting each; the first layer has no input gradient) and the linear layers'
    GEMMs (`gemm_seconds`, all three products summed into one "fwd+grads" row per layer).
    Identical layer shapes (MNIST_CNN's last two convs) are measured once."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    layers = conv_layers(model, shape)
    cache: dict[tuple, dict[str, tuple[float, str]]] = {}
    table: list[BoundRow] = []
    for kind, rows, count in (("LOO", batch * (n - 1), n), ("full", batch * n, 1)):
        for i, layer in enumerate(layers):
            key = (layer, rows)
            if key not in cache:
                cache[key] = conv_pass_seconds(layer, rows, dtype, repeats)
            c_in, c_out, h, w, stride = layer
            text = f"{rows}x{c_in}x{h}x{w} -> {c_out}, s{stride}"
            for pass_ in CONV_PASSES:
                if i or pass_ != "input grad":  # the images need no gradient
                    seconds, setting = cache[key][pass_]
                    table.append((kind, count, f"conv{i + 1}", text, pass_, setting, seconds))
        gemms = forward_gemms(model, shape, rows)[len(layers) :]
        for j, gemm in enumerate(gemms):
            seconds = gemm_seconds([gemm], dtype, repeats, first=not layers and j == 0)
            text = "x".join(map(str, gemm)) + " (m x k x n)"
            table.append((kind, count, f"linear{j + 1}", text, "fwd+grads", "matmul", seconds))
    return table


def _faster(a: list[BoundRow], b: list[BoundRow]) -> list[BoundRow]:
    """Two measurements of the same bound, row by row the faster one."""
    return [x if x[-1] <= y[-1] else y for x, y in zip(a, b, strict=True)]


def _oodeval_train_seconds(sc, model: str, batch: int, precision: str, steps: int) -> float:
    """Seconds of oodeval's training steps for the unit's N + 1 stacked models (no validation)."""
    trained = train_models(sc, "ERM", seed=0, steps=steps, model=model, batch_size=batch,
                           selection="last", precision=precision)  # fmt: skip
    return trained.timings["steps"]


def _plain_train_seconds(sc, model: str, batch: int, loaders: bool, bf16: bool, steps: int):
    """Seconds of the plain loop's training steps, the N + 1 models one after another."""
    timings: dict[str, float] = {}
    plain_loop(sc, steps=steps, batch=batch, eval_every=steps, seed=0, loaders=loaders,
               model=model, bf16=bf16, evaluate=False, timings=timings)  # fmt: skip
    return timings["train"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", choices=("mlp", "cnn", "mnist_cnn"), default="mlp")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=("mlp", "cnn", "mnist_cnn"),
        default=["mlp", "mnist_cnn"],
        help="models of --roofline",
    )
    parser.add_argument(
        "--cnn-steps", type=int, default=20, help="--roofline steps of the conv models"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--arm-steps", type=int, default=0,
        help="--roofline: also time a paper-cpu ARM unit for this many steps (0: not)",
    )  # fmt: skip
    parser.add_argument("--arm-eval-every", type=int, default=20)
    parser.add_argument(
        "--baseline", default=None,
        help="--roofline: a source tree (e.g. a checkout of main) whose oodeval is timed alike "
        "(the stacked trainer's steps and the ARM unit), each run in a fresh process",
    )  # fmt: skip
    parser.add_argument("--units", type=int, default=8, help="units of --machine")
    parser.add_argument(
        "--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"]
    )
    parser.add_argument(
        "--per-algorithm",
        action="store_true",
        help="instead: time one unit of each of the 14 algorithms (oodeval trainer only)",
    )
    parser.add_argument(
        "--roofline",
        action="store_true",
        help="instead: seconds per training step and its share of the best kernels' bound, "
        "per contender",
    )
    parser.add_argument(
        "--machine",
        action="store_true",
        help="instead: units in parallel worker processes vs the plain loop on all threads",
    )
    parser.add_argument(
        "--source", default="auto", help="image source (default auto: real MNIST, as a study's)"
    )
    args = parser.parse_args()
    args.source = resolve_source(args.source)  # mnist:DIR, so the 28x28 checks below see it
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    print(
        f"threads={args.threads} steps={args.steps} batch={args.batch}/env "
        f"eval_every={args.eval_every} model={args.model} source={args.source} "
        f"load_avg_1min={load:.1f}"
    )
    if args.per_algorithm:
        per_algorithm(args)
    elif args.roofline:
        roofline(args)
        if args.arm_steps:
            arm_versus_baseline(args)
    elif args.machine:
        machine(args)
    else:
        per_unit(args)
    print(f"load_avg_1min at end={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
