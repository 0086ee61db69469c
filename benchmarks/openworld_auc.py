"""Benchmark: oodeval's exact OpenworldAUC against sklearn's roc_auc_score on masked scores.

Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/openworld_auc.py   # n = 1,000,000, half base

(`PYTHONPATH=.` is only needed when oodeval is not pip-installed.)

Scores are rounded to 3 decimals, so there are many base/new ties. The baseline is the usual way
to get the same number with scikit-learn: keep the correctly classified samples, compute
roc_auc_score(base vs new) on them, and multiply by BaseAcc * NewAcc (the identity
OWAUC = BaseAcc * NewAcc * AUROC(correct base vs correct new), ties counting 1/2). Both are timed in
the same run on one thread, interleaved (best of --repeats each), both values are printed and
must agree, and the peak memory our function allocates is measured with tracemalloc (targets:
>= 10x faster, < 200 MB). For scale, a bare np.sort and np.argsort of the masked scores (what
any sort-based count must at least do) are timed in the same loop.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one thread, set before numpy is imported

import argparse  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from oodeval.measures.openworld import openworld_auc  # noqa: E402


def sklearn_masked_openworld_auc(base, new, base_ok, new_ok) -> float:
    """Baseline: AUROC of the correct subsets by scikit-learn, times BaseAcc * NewAcc."""
    pos, neg = base[base_ok], new[new_ok]
    if pos.size == 0 or neg.size == 0:
        return 0.0
    y = np.concatenate([np.ones(pos.size, dtype=np.int8), np.zeros(neg.size, dtype=np.int8)])
    auc = roc_auc_score(y, np.concatenate([pos, neg]))
    return float(auc * base_ok.mean() * new_ok.mean())


def best_times(calls: dict, repeats: int) -> dict[str, tuple[float, object]]:
    """Best wall time and last value of each call, the calls interleaved round by round.

    Interleaving gives every call the same share of a busy machine's good and bad moments.
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    values: dict[str, object] = {}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            values[name] = call()
            times[name].append(time.perf_counter() - start)
    return {name: (min(times[name]), values[name]) for name in calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="total samples (half base)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--decimals", type=int, default=3, help="round scores to force ties (-1: no rounding)"
    )
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    n_base = args.n // 2
    n_new = args.n - n_base
    base = rng.normal(0.6, 0.15, n_base)
    new = rng.normal(0.45, 0.15, n_new)
    if args.decimals >= 0:
        base, new = np.round(base, args.decimals), np.round(new, args.decimals)
    base_ok = rng.random(n_base) < 0.75
    new_ok = rng.random(n_new) < 0.65
    distinct = np.unique(np.concatenate([base, new])).size

    masked = np.concatenate([base[base_ok], new[new_ok]])
    with threadpool_limits(limits=1):
        timed = best_times(
            {
                "ours": lambda: openworld_auc(base, new, base_ok, new_ok),
                "sklearn": lambda: sklearn_masked_openworld_auc(base, new, base_ok, new_ok),
                "sort": lambda: np.sort(masked),
                "argsort": lambda: np.argsort(masked),
            },
            args.repeats,
        )
    ours_s, ours = timed["ours"]
    skl_s, skl = timed["sklearn"]
    assert isinstance(ours, float) and isinstance(skl, float)

    tracemalloc.start()
    openworld_auc(base, new, base_ok, new_ok)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(f"n = {args.n:,} ({n_base:,} base, {n_new:,} new), {distinct:,} distinct scores")
    print(f"one thread, best of {args.repeats} interleaved runs")
    print(f"oodeval openworld_auc         : {ours_s * 1e3:8.1f} ms  value {ours!r}")
    print(f"sklearn roc_auc_score (masked): {skl_s * 1e3:8.1f} ms  value {skl!r}")
    print(f"speed-up: {skl_s / ours_s:.1f}x (target >= 10x)")
    print(
        f"for scale, on the {masked.size:,} correctly classified scores: "
        f"np.sort {timed['sort'][0] * 1e3:.1f} ms, np.argsort {timed['argsort'][0] * 1e3:.1f} ms"
    )
    print(f"peak memory of openworld_auc (tracemalloc): {peak / 2**20:.1f} MB (target < 200 MB)")
    agree = abs(ours - skl) <= 1e-12
    print(f"values agree to 1e-12: {agree} (|difference| = {abs(ours - skl):.2e})")
    if not agree:
        raise SystemExit("the two computations disagree")


if __name__ == "__main__":
    main()
