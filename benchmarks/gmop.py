"""GMoP vs the zero-shot and single-context references on real MNIST features, over 5 seeds.

Usage:  .venv/bin/python benchmarks/gmop.py [--mnist DIR] [--seeds 5] [--quick]

For each seed the features are rebuilt (`oodeval.openworld.features.digit_features`: encoder,
splits and few-shot draws all depend on the seed) and three methods are trained on the same
16-shot base-class set with the same defaults (`GMoPConfig()`: 200 full-batch Adam steps):

* zero-shot  -- fixed class "text" features (prototypes), max-softmax detector (CLIP reference);
* single-ctx -- one feature-space context trained with cross-entropy only (CoOp reference);
* GMoP       -- base context + K = 3 gated sub-detectors + zero-shot new classifier (Sec. 5.1);
* GMoP without the ranking term -- ranking weight 0: the same without the gated AUC term.

Two feature regimes:
* ``digits->MNIST``: encoder trained on the base classes of scikit-learn's digits, applied to MNIST
  redrawn in the digits format (the encoder's training data differs from the task, as CLIP's does);
* ``MNIST->MNIST``: encoder trained on the base classes of one half of MNIST itself.

Then a ratio study of GMoP's seed-0 predictions (property P3) and a timing of the O(n) gated AUC
loss against the n_b x n_n pairwise form, measured in the same run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from oodeval.openworld.features import digit_features
from oodeval.openworld.gmop import (
    GMoPConfig,
    evaluate_model,
    gated_auc_loss,
    gated_auc_loss_pairwise,
    train_gmop,
    train_single_context,
    zero_shot_model,
)
from oodeval.openworld.ratio_study import format_ratio_table, ratio_study

METRICS = ("openworld_auc", "hm", "auroc", "overall_acc", "base_acc", "new_acc")
HEADER = ("OpenworldAUC", "HM", "AUROC", "OverallAcc", "BaseAcc", "NewAcc")


def run_regime(source: str, encoder_source: str | None, seeds: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {
        "zero-shot": [],
        "single-ctx (CE)": [],
        "GMoP, no AUC term": [],
        "GMoP": [],
    }
    for seed in range(seeds):
        train, test = digit_features(source, encoder_source=encoder_source, seed=seed)
        config = GMoPConfig(seed=seed)
        results["zero-shot"].append(evaluate_model(zero_shot_model(train), test))
        results["single-ctx (CE)"].append(evaluate_model(train_single_context(train, config), test))
        no_auc = replace(config, ranking_weight=0.0)
        results["GMoP, no AUC term"].append(evaluate_model(train_gmop(train, no_auc), test))
        results["GMoP"].append(evaluate_model(train_gmop(train, config), test))
    return results


def markdown_table(results: dict[str, list[dict]]) -> str:
    lines = ["| method | " + " | ".join(HEADER) + " |", "|---" * (len(HEADER) + 1) + "|"]
    for method, rows in results.items():
        cells = []
        for m in METRICS:
            v = 100 * np.array([r[m] for r in rows])
            cells.append(f"{v.mean():.2f} ± {v.std(ddof=1):.2f}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def wins(results: dict[str, list[dict]]) -> str:
    out = []
    for ref in ("zero-shot", "single-ctx (CE)", "GMoP, no AUC term"):
        for m in ("openworld_auc", "auroc", "hm"):
            n = sum(g[m] > r[m] for g, r in zip(results["GMoP"], results[ref], strict=True))
            out.append(f"GMoP > {ref} on {m} in {n}/{len(results['GMoP'])} seeds")
    return "\n".join(out)


def time_losses() -> str:
    lines = []
    for n in (500, 2000, 8000):
        g = torch.Generator().manual_seed(0)
        args = [torch.rand(n, generator=g) for _ in range(4)]
        timings = {}
        for name, fn in (("O(n)", gated_auc_loss), ("pairwise", gated_auc_loss_pairwise)):
            fn(*args)
            start = time.perf_counter()
            for _ in range(5):
                fn(*args)
            timings[name] = (time.perf_counter() - start) / 5
        fast, slow = timings["O(n)"], timings["pairwise"]
        lines.append(
            f"n_b = n_n = {n}: O(n) {fast * 1e3:.3f} ms, pairwise {slow * 1e3:.3f} ms, "
            f"ratio {slow / fast:.0f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
    parser.add_argument("--mnist", default=str(default))
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    source = f"mnist:{args.mnist}"
    for title, enc in (("digits->MNIST", "digits"), ("MNIST->MNIST", None)):
        start = time.perf_counter()
        results = run_regime(source, enc, args.seeds)
        print(f"\n### {title} ({args.seeds} seeds, {time.perf_counter() - start:.0f} s)\n")
        print(markdown_table(results))
        print()
        print(wins(results))
    train, test = digit_features(source, encoder_source="digits", seed=0)
    out = train_gmop(train, GMoPConfig(seed=0)).predict(test.features)
    rows = ratio_study(
        out["outputs"],
        test.labels,
        test.base_classes,
        detector_scores=out["detector_scores"],
        base_predictions=out["base_predictions"],
        new_predictions=out["new_predictions"],
    )
    print("\n### Ratio study of GMoP predictions (digits->MNIST, seed 0, 5 resamples)\n")
    print(format_ratio_table(rows))
    print("\n### Gated AUC loss: O(n) vs pairwise (forward, float32, 1 thread)\n")
    print(time_losses())


if __name__ == "__main__":
    main()
