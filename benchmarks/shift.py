"""NICO++ shift metrics (M_cov, M_cpt^min, M_cpt^max, M_cpt^max - M_cov) for SR-CMNIST pairs.

    PYTHONPATH=. .venv/bin/python benchmarks/shift.py [--mnist DIR] [--seeds 3] [--steps 300]
        [--hypothesis mlp|cnn] [--eval-fraction 0.5]

SR-CMNIST is built on the real MNIST test set (10,000 digits, 14x14, red/green); every pair takes
two of its evaluation environments (re-rendered from the same held-out digits, `eval_fraction` of
the set) and gives each held-out digit to one side only (`oodeval.shift.specs.disjoint_pair`), so
source and target never share an image. Pairs: e=0.1 vs e=0.9 (the spurious color flips),
e=0.1 vs e=0.15 (a small change) and e=0.1 vs e=0.1 (an i.i.d. split of one environment).
Prints mean +- std over seeds and the wall time per pair; then times one M_cov estimate with the
estimators' single torch thread against torch's default thread pool (the baseline), in this run.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch

import oodeval.shift.discrepancy as discrepancy
from oodeval.shift import covariate_shift, shift_metrics
from oodeval.shift.metrics import METRICS
from oodeval.shift.specs import disjoint_pair, load_spec

DEFAULT_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
PAIRS = (("e=0.1", "e=0.9"), ("e=0.1", "e=0.15"), ("e=0.1", "e=0.1"))


def load_pair(source: str, target: str, images: str, eval_fraction: float):
    """The disjoint source and target sets of two SR-CMNIST environments."""
    extra = f":eval_fraction={eval_fraction}"
    src = load_spec(f"sr-cmnist:{source}{extra}", images=images)
    tgt = load_spec(f"sr-cmnist:{target}{extra}", images=images)
    return disjoint_pair(src, tgt, seed=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnist", default=str(DEFAULT_MNIST))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hypothesis", default="mlp", choices=("mlp", "cnn"))
    parser.add_argument("--eval-fraction", type=float, default=0.5)
    args = parser.parse_args()
    images = f"mnist:{args.mnist}"
    print(
        f"SR-CMNIST on {args.mnist}; hypothesis {args.hypothesis}, {args.steps} steps, "
        f"seeds 0..{args.seeds - 1}, eval_fraction {args.eval_fraction}"
    )
    header = "| source | target | n_src | n_tgt | " + " | ".join(METRICS) + " | seconds |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for source, target in PAIRS:
        src, tgt = load_pair(source, target, images, args.eval_fraction)
        start = time.perf_counter()
        res = shift_metrics(
            src.images,
            src.labels,
            tgt.images,
            tgt.labels,
            seeds=range(args.seeds),
            num_classes=2,
            hypothesis=args.hypothesis,
            steps=args.steps,
        )
        seconds = time.perf_counter() - start
        cells = " | ".join(f"{res.mean(m):.3f} +- {res.std(m):.3f}" for m in METRICS)
        print(f"| {source} | {target} | {len(src)} | {len(tgt)} | {cells} | {seconds:.1f} |")

    src, tgt = load_pair(*PAIRS[0], images, args.eval_fraction)

    def one_estimate() -> float:
        start = time.perf_counter()
        covariate_shift(src.images, tgt.images, hypothesis=args.hypothesis, steps=args.steps)
        return time.perf_counter() - start

    ours = one_estimate()
    original = discrepancy.single_threaded
    discrepancy.single_threaded = contextlib.nullcontext  # baseline: torch's default threads
    try:
        baseline = one_estimate()
    finally:
        discrepancy.single_threaded = original
    print(
        f"\none M_cov estimate (e=0.1 vs e=0.9, seed 0): single thread {ours:.2f} s, "
        f"torch default ({torch.get_num_threads()} threads) {baseline:.2f} s, "
        f"ratio {baseline / ours:.1f}x"
    )


if __name__ == "__main__":
    main()
