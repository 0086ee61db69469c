"""Time and measure memory for building all 101 SR-CMNIST evaluation environments from the MNIST
test set, against a naive baseline (a Python loop per image that keeps full copies of all 101
environments), in the same run, and check both draw the same colors.

    PYTHONPATH=. .venv/bin/python benchmarks/environments.py [--mnist DIR] [--eval-fraction 0.2]

Prints, for oodeval and the baseline: seconds to generate every evaluation environment (images and
labels), peak memory allocated while doing so (tracemalloc, numpy included), and the ratios. A
second oodeval row holds out 90% of the images (9,000 per environment) to show how it scales.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from pathlib import Path

import numpy as np

from oodeval.environments import build_scenario, load_source
from oodeval.environments.spurious import replaced_labels

DEFAULT_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"


def measured(fn):
    """(result, seconds, peak MiB allocated) of fn().

    Timed in a first call without tracing (tracemalloc slows allocation-heavy code), then the
    peak allocation is measured in a second, traced call.
    """
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return result, seconds, peak


def oodeval_build(source, eval_fraction: float) -> list[tuple[str, int, int]]:
    """Build the scenario and generate all 101 evaluation environments, one at a time."""
    sc = build_scenario("sr-cmnist", source=source, seed=0, eval_fraction=eval_fraction)
    summary = []
    for env in sc.evaluation():
        summary.append((env.name, len(env), int(env.meta["spurious"].sum())))
    return summary


def naive_build(source, eval_fraction: float) -> list[tuple[str, int, int]]:
    """The baseline: same split and colors, but each image colored in a Python loop and all 101
    environments kept as full copies (what a straightforward implementation does)."""
    sc = build_scenario("sr-cmnist", source=source, seed=0, eval_fraction=eval_fraction)
    gray = sc._eval_base
    final = sc._eval_final
    environments = []
    for j, e in enumerate(sc.all_values):
        rng = np.random.default_rng([sc.seed, 3, j])
        colors = replaced_labels(final, e, 2, rng)
        images = []
        for i in range(len(final)):
            image = np.zeros((2,) + gray.shape[1:], dtype=np.float32)
            image[int(colors[i])] = gray[i]
            images.append(image)
        environments.append((f"e={e:.2f}", np.stack(images), final.copy(), colors))
    return [(name, len(y), int(c.sum())) for name, _, y, c in environments]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnist", type=Path, default=DEFAULT_MNIST)
    parser.add_argument("--eval-fraction", type=float, default=0.2)
    args = parser.parse_args()
    if not (args.mnist / "t10k-images-idx3-ubyte.gz").is_file():
        raise SystemExit(f"MNIST test set not found in {args.mnist}; pass --mnist DIR")
    start = time.perf_counter()
    source = load_source(f"mnist:{args.mnist}")
    load_s = time.perf_counter() - start
    print(f"loaded MNIST test set ({len(source):,} images) in {load_s:.2f} s")

    fast, fast_s, fast_mb = measured(lambda: oodeval_build(source, args.eval_fraction))
    per_env = fast[0][1]
    print(
        f"oodeval : 101 environments x {per_env:,} images in {fast_s:.3f} s, "
        f"peak {fast_mb:.0f} MiB allocated"
    )
    big, big_s, big_mb = measured(lambda: oodeval_build(source, 0.9))
    print(
        f"oodeval : 101 environments x {big[0][1]:,} images in {big_s:.3f} s, "
        f"peak {big_mb:.0f} MiB allocated (eval_fraction 0.9)"
    )
    slow, slow_s, slow_mb = measured(lambda: naive_build(source, args.eval_fraction))
    print(
        f"baseline: 101 environments x {per_env:,} images in {slow_s:.3f} s, "
        f"peak {slow_mb:.0f} MiB allocated (Python loop, full copies)"
    )
    assert fast == slow, "oodeval and the baseline disagree"
    print(f"ratio   : {slow_s / fast_s:.1f}x faster, {slow_mb / fast_mb:.1f}x less memory")
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process max RSS (whole run, baseline included): {max_rss:.0f} MiB")


if __name__ == "__main__":
    main()
