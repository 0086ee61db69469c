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

Run:  .venv/bin/python benchmarks/training_throughput.py [--steps 300] [--scales 1 2]
      .venv/bin/python benchmarks/training_throughput.py --machine [--units 8]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oodeval.environments import build_scenario  # noqa: E402
from oodeval.study import trainer_backend  # noqa: E402
from oodeval.training import UnitSpec, run_unit, run_units, worker_pool  # noqa: E402


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
):
    """Train and test the unit's N + 1 models one after another; returns the LOO/all errors.

    ``bf16`` runs forward passes and losses under ``torch.autocast("cpu", torch.bfloat16)`` (the
    standard mixed-precision recipe: backward and optimiser outside it).
    """

    def amp():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    torch.manual_seed(seed)
    given = scenario.given()
    parts = [env.split(0.2, seed) for env in given]
    tr = [(torch.from_numpy(t.images), torch.from_numpy(t.labels)) for t, _ in parts]
    va = [(torch.from_numpy(v.images), torch.from_numpy(v.labels)) for _, v in parts]
    n = len(given)
    n_in = int(tr[0][0][0].numel())
    measure = _accuracy_loader if loaders else _accuracy_tensors

    def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        with amp():
            return measure(net, x, y)

    errors, records = [], []
    for k in range(n + 1):
        envs = [j for j in range(n) if j != k]
        if model == "mlp":
            net = plain_mlp(n_in, scenario.num_classes)
        else:
            net = plain_cnn(tr[0][0].shape[1], scenario.num_classes)
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
            if step % eval_every == 0 or step == steps:
                acc = sum(accuracy(net, *va[j]) for j in envs) / len(envs)
                if k < n:  # the checkpoint record of oodeval: accuracy on both parts of e_k
                    records.append((k, step, accuracy(net, *tr[k]), accuracy(net, *va[k])))
                if acc > best:
                    best, best_state = acc, copy.deepcopy(net.state_dict())
        net.load_state_dict(best_state)
        if k < n:
            x, y = torch.from_numpy(given[k].images), torch.from_numpy(given[k].labels)
            errors.append(1 - accuracy(net, x, y))
        else:
            for env in scenario.evaluation():
                x, y = torch.from_numpy(env.images), torch.from_numpy(env.labels)
                errors.append(1 - accuracy(net, x, y))
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
    specs = [UnitSpec(build, "ERM", s, args.steps, options) for s in range(args.units)]
    with worker_pool(workers) as pool:
        # warm-up as for the plain loops: start the processes, import torch, two tiny units per
        # worker (timed apart: a study pays this once, not per unit)
        t0 = time.perf_counter()
        list(run_units([UnitSpec(build, "ERM", s, 2, options) for s in range(2 * workers)],
                       pool=pool))  # fmt: skip
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--repeats", type=int, default=2)
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
        "--machine",
        action="store_true",
        help="instead: units in parallel worker processes vs the plain loop on all threads",
    )
    default_source = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
    parser.add_argument("--source", default=f"mnist:{default_source}")
    args = parser.parse_args()
    if args.source.startswith("mnist:") and not Path(args.source[6:]).is_dir():
        args.source = "digits"
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    print(
        f"threads={args.threads} steps={args.steps} batch={args.batch}/env "
        f"eval_every={args.eval_every} model={args.model} source={args.source} "
        f"load_avg_1min={load:.1f}"
    )
    if args.per_algorithm:
        per_algorithm(args)
    elif args.machine:
        machine(args)
    else:
        per_unit(args)
    print(f"load_avg_1min at end={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
