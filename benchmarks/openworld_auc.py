"""Benchmark: oodeval's exact OpenworldAUC against sklearn's roc_auc_score on masked scores.

Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/openworld_auc.py   # n = 1,000,000, half base

(`PYTHONPATH=.` is only needed when oodeval is not pip-installed.)

Scores are rounded to 3 decimals, so there are many base/new ties. The baseline is the usual way
to get the same number with scikit-learn: keep the correctly classified samples, compute
roc_auc_score(base vs new) on them, and multiply by BaseAcc * NewAcc (the identity
OWAUC = BaseAcc * NewAcc * AUROC(correct base vs correct new), ties counting 1/2). Both are timed in
the same run (best of --repeats), both values are printed and must agree, and the peak memory
our function allocates is measured with tracemalloc (targets: >= 3x faster, < 200 MB).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from sklearn.metrics import roc_auc_score

from oodeval.measures.openworld import openworld_auc


def sklearn_masked_openworld_auc(base, new, base_ok, new_ok) -> float:
    """Baseline: AUROC of the correct subsets by scikit-learn, times BaseAcc * NewAcc."""
    pos, neg = base[base_ok], new[new_ok]
    if pos.size == 0 or neg.size == 0:
        return 0.0
    y = np.concatenate([np.ones(pos.size, dtype=np.int8), np.zeros(neg.size, dtype=np.int8)])
    auc = roc_auc_score(y, np.concatenate([pos, neg]))
    return float(auc * base_ok.mean() * new_ok.mean())


def best_time(fn, *args, repeats: int) -> tuple[float, float]:
    times, value = [], float("nan")
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="total samples (half base)")
    parser.add_argument("--repeats", type=int, default=5)
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

    ours_s, ours = best_time(openworld_auc, base, new, base_ok, new_ok, repeats=args.repeats)
    skl_s, skl = best_time(
        sklearn_masked_openworld_auc, base, new, base_ok, new_ok, repeats=args.repeats
    )

    tracemalloc.start()
    openworld_auc(base, new, base_ok, new_ok)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    print(f"n = {args.n:,} ({n_base:,} base, {n_new:,} new), {distinct:,} distinct scores")
    print(f"oodeval openworld_auc         : {ours_s * 1e3:8.1f} ms  value {ours!r}")
    print(f"sklearn roc_auc_score (masked): {skl_s * 1e3:8.1f} ms  value {skl!r}")
    print(f"speed-up: {skl_s / ours_s:.1f}x (target >= 3x)")
    print(f"peak memory of openworld_auc (tracemalloc): {peak / 2**20:.1f} MB (target < 200 MB)")
    agree = abs(ours - skl) <= 1e-12
    print(f"values agree to 1e-12: {agree} (|difference| = {abs(ours - skl):.2e})")
    if not agree:
        raise SystemExit("the two computations disagree")


if __name__ == "__main__":
    main()
