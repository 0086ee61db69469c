"""Time the domain measures on 10,000 algorithms x 1,000 environments against a naive
per-algorithm Python loop, in the same run, and check both give the same numbers.

    .venv/bin/python benchmarks/domain_measures.py [--algorithms 10000] [--environments 1000]

Prints one line per measure (vectorised seconds), the all-measures-at-once call, the baseline
loop, and the speed-up ratio. Also times the meta-evaluation (correlations, bootstrap interval).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from oodeval.measures import (
    MEASURES,
    bootstrap_correlation_ci,
    domain_measures,
    ideal,
    rank_correlation,
)


def best_of(fn, repeats: int = 3) -> float:
    """Smallest wall time of `repeats` calls of fn()."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def naive_loop(rows: list[list[float]]) -> dict[str, list[float]]:
    """Every measure, one algorithm at a time, with Python built-ins (the baseline)."""
    out: dict[str, list[float]] = {name: [] for name in MEASURES}
    for row in rows:
        n = len(row)
        hi, lo = max(row), min(row)
        out["average"].append(sum(row) / n)
        out["worst"].append(hi)
        out["best"].append(lo)
        out["gap"].append(hi - lo)
        out["worst_plus_gap"].append(hi + (hi - lo) / (n - 2))
        out["worst_only"].append(hi)
        out["gap_only"].append((hi - lo) / (n - 2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", type=int, default=10_000)
    parser.add_argument("--environments", type=int, default=1_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    errors = rng.uniform(0.0, 1.0, size=(args.algorithms, args.environments))
    print(f"errors: {args.algorithms:,} algorithms x {args.environments:,} environments")

    per_measure = {}
    for name, fn in MEASURES.items():
        per_measure[name] = best_of(lambda fn=fn: fn(errors))
        print(f"  {name:<15} {per_measure[name]:8.3f} s")
    t_ideal = best_of(lambda: ideal(errors))
    print(f"  {'ideal':<15} {t_ideal:8.3f} s")
    t_sum = sum(per_measure.values())
    t_all = best_of(lambda: domain_measures(errors))
    print(f"all 7 measures, one call each:       {t_sum:8.3f} s")
    print(f"all 7 measures, domain_measures():   {t_all:8.3f} s")

    rows = errors.tolist()  # conversion not timed: the baseline gets Python lists for free
    start = time.perf_counter()
    reference = naive_loop(rows)
    t_loop = time.perf_counter() - start
    print(f"naive per-algorithm Python loop:     {t_loop:8.3f} s")
    print(
        f"speed-up: {t_loop / t_all:.1f}x (domain_measures), {t_loop / t_sum:.1f}x (one call each)"
    )

    fast = domain_measures(errors)
    for name in MEASURES:
        np.testing.assert_allclose(fast[name], reference[name], rtol=1e-12, atol=1e-12)
    print("vectorised and loop results agree (rtol 1e-12)")

    m = fast["worst_plus_gap"][:14]
    i = ideal(0.5 * errors[:14] + 0.25 * m[:, None])  # ideal loosely tied to the measure
    t_corr = best_of(lambda: rank_correlation(m, i), repeats=5)
    t_boot = best_of(lambda: bootstrap_correlation_ci(m, i, n_resamples=2000), repeats=3)
    print(f"rank_correlation, 14 algorithms:                 {t_corr * 1e3:8.2f} ms")
    print(f"bootstrap_correlation_ci, 14 algs x 2000 resamples: {t_boot * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
