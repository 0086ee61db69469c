"""Check that training on DEVICE gives the CPU's numbers: one unit of every algorithm on each.

For every registered algorithm (the 14 DomainBed ones), one unit (its N leave-one-out models and
the full model) is trained on the CPU and on DEVICE from the same seed on a small SR-CMNIST
scenario for a few steps, and the script prints per algorithm the wall time on each device and
the largest difference between the two units' LOO errors (and, for information, between the full
model's errors on E_all). It exits 1 when a unit fails or the devices disagree beyond the
tolerance below, 0 otherwise. It uses only the trainer's public API, so it runs unchanged on a
CUDA machine (``device_check.py cuda``); ``device_check.py cpu`` checks the CPU against itself.

Both units start from the same weights (initialised on the CPU from the seed, then moved) and
draw the same minibatches (indices drawn on the CPU), so they differ only by floating-point
rounding. Tolerance, per LOO error (a fraction k/n of the n rows of the held-out environment):

- same device: exactly 0. The trainer is deterministic (same seed, same device, same numbers),
  so any difference is a bug.
- another device: float32 products there are summed in another order (cuBLAS/cuDNN kernels,
  and TF32 convolutions on Ampere+, unit roundoff 2^-11 instead of 2^-24), which perturbs each
  logit by a relative 1e-7 to 1e-3 per step. Over STEPS Adam steps (lr 1e-3, each parameter moves
  at most STEPS * lr = 0.02 in all) such perturbations change the prediction of only the images
  whose logit margin is within that perturbation. A flipped image moves an error by 1/n; the
  tolerance allows 2% of the held-out rows to flip (0.02), far below what a real fault does
  (different data, minibatches, initial weights or a leaking mask give other models, whose LOO
  errors differ by 0.05-0.5 on this scenario, as two seeds' do: `--seeds-gap` measures it).

Run:  .venv/bin/python benchmarks/device_check.py DEVICE [--steps 20] [--algorithms ERM,IRM]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oodeval._torch import check_device_spec, resolve_device  # noqa: E402
from oodeval.algorithms import available  # noqa: E402
from oodeval.environments import build_scenario  # noqa: E402
from oodeval.errors import OodevalError  # noqa: E402
from oodeval.training import run_unit  # noqa: E402

#: largest |LOO error on DEVICE - LOO error on the CPU| for another device (module docstring)
OTHER_DEVICE_TOLERANCE = 0.02


def tolerance(device: str) -> float:
    """0 on the CPU itself (the trainer is deterministic), else `OTHER_DEVICE_TOLERANCE`."""
    return 0.0 if device == "cpu" else OTHER_DEVICE_TOLERANCE


def timed_unit(scenario, algorithm: str, device: str, args: argparse.Namespace):
    """(the unit's result, its wall seconds) on `device`; a GPU is synchronised before timing."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    result = run_unit(
        scenario,
        algorithm,
        seed=args.seed,
        steps=args.steps,
        model=args.model,
        eval_every=args.steps,
        batch_size=args.batch_size,
        device=device,
    )
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - t0


def largest_gap(a: dict[str, float], b: dict[str, float]) -> float:
    """max |a[k] - b[k]| over the keys of `a` (which `b` must share)."""
    if list(a) != list(b):
        raise OodevalError(f"the units disagree on their folds: {list(a)} vs {list(b)}")
    return max(abs(a[k] - b[k]) for k in a)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("device", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--n-per-given", type=int, default=300)
    parser.add_argument("--n-eval", type=int, default=300)
    parser.add_argument(
        "--source", default="auto", help="image source (default auto: real MNIST, as a study's)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    parser.add_argument("--algorithms", default=None, help="comma-separated (default: all)")
    parser.add_argument(
        "--seeds-gap", action="store_true", help="also print ERM's LOO gap between seeds 0 and 1"
    )
    args = parser.parse_args(argv)
    try:
        check_device_spec(args.device)
        device = resolve_device(args.device)
    except OodevalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    names = args.algorithms.split(",") if args.algorithms else sorted(available())
    scenario = build_scenario(
        "sr-cmnist",
        source=args.source,
        ratio="3:1",
        scale=1,
        n_per_given=args.n_per_given,
        n_eval=args.n_eval,
    )
    tol = tolerance(device)
    print(
        f"device {device} vs cpu: {scenario.name}, model {args.model}, {args.steps} steps, "
        f"seed {args.seed}, torch {torch.__version__}, tolerance {tol:g}"
    )
    timed_unit(scenario, "ERM", device, argparse.Namespace(**{**vars(args), "steps": 1}))
    second = f"{device} s" if device != "cpu" else "cpu again s"
    print(f"{'algorithm':<10} {'cpu s':>7} {second:>11} {'max|dLOO|':>10} "
          f"{'max|dall|':>10}  verdict")  # fmt: skip
    bad = 0
    for name in names:
        try:
            cpu, cpu_s = timed_unit(scenario, name, "cpu", args)
            dev, dev_s = timed_unit(scenario, name, device, args)
            loo = largest_gap(cpu.loo_errors(), dev.loo_errors())
            full = largest_gap(cpu.all_errors(), dev.all_errors())
        except Exception as exc:  # a unit that fails is reported, then the check goes on
            bad += 1
            print(f"{name:<10} FAILED: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}")
            continue
        ok = loo <= tol and full <= tol
        bad += not ok
        print(
            f"{name:<10} {cpu_s:>7.2f} {dev_s:>11.2f} {loo:>10.4g} {full:>10.4g}  "
            f"{'ok' if ok else 'DISAGREE'}"
        )
    if args.seeds_gap:
        a, _ = timed_unit(scenario, "ERM", "cpu", args)
        b, _ = timed_unit(scenario, "ERM", "cpu", argparse.Namespace(**{**vars(args), "seed": 1}))
        gap = largest_gap(a.loo_errors(), b.loo_errors())
        print(f"ERM seeds 0 vs 1 on cpu: max|dLOO| = {gap:.4g}")
    print(f"{len(names) - bad} of {len(names)} algorithms agree" + (f", {bad} not" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
