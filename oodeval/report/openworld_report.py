"""Report sections for an open-world predictions file (the input of `oodeval openworld`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodeval.measures.openworld import openworld_curve
from oodeval.openworld.base_new import PAPER_RATIOS, TooFewToResample, resample_to_ratio
from oodeval.report.figures import Figure, curves, lines
from oodeval.report.page import Section
from oodeval.results.predictions import parse_class_ids, read_predictions, score_predictions
from oodeval.tables import Table

#: The ten base:new ratios of the OpenworldAUC paper's Tables 11-12 (new/base 10 ... 0.1).
SWEEP_RATIOS = PAPER_RATIOS
SWEEP_METRICS = ("overall_acc", "openworld_auc", "auroc", "hm")


def roc_points(base_scores: np.ndarray, new_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROC of the base-vs-new detector (base positive): false and true positive rates.

    One point per distinct score t, from the highest down, after (0, 0): TPR(t) = #{base >= t} /
    #base and FPR(t) = #{new >= t} / #new (scikit-learn's ``roc_curve(...,
    drop_intermediate=False)``, without needing it).

    >>> fpr, tpr = roc_points(np.array([0.9, 0.4]), np.array([0.4, 0.1]))
    >>> fpr.tolist(), tpr.tolist()
    ([0.0, 0.0, 0.5, 1.0], [0.0, 0.5, 1.0, 1.0])
    """
    scores = np.concatenate([base_scores, new_scores])
    is_base = np.concatenate([np.ones(base_scores.size), np.zeros(new_scores.size)])
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    last_of_each = np.r_[np.flatnonzero(np.diff(ordered)), ordered.size - 1]
    true_pos = np.cumsum(is_base[order])[last_of_each]
    false_pos = last_of_each + 1 - true_pos
    return np.r_[0.0, false_pos] / new_scores.size, np.r_[0.0, true_pos] / base_scores.size


def feasible_ratios(labels: Any, base: list[int], ratios: tuple[str, ...]) -> list[str]:
    """The ratios of `ratios` a test set with these labels can be resampled to (see
    `resample_to_ratio`: each needs at least one base and one new sample)."""
    keep = []
    for ratio in ratios:
        try:
            resample_to_ratio(labels, base, ratio, seed=0)
        except TooFewToResample:
            continue
        keep.append(ratio)
    return keep


def ratio_sweep_table(
    arrays: dict[str, np.ndarray], base_classes: list[int] | None, *, repeats: int = 5
) -> pd.DataFrame | None:
    """Every metric against the base:new test ratio (resampled per class, seeded), or None.

    The ratios are the paper's ten (`SWEEP_RATIOS`) that the file has samples enough for (the
    frame's ``attrs["left_out"]`` lists the others; TooFewToResample when fewer than two are
    left). Needs labels and class predictions (not the already-scored form).
    """
    from oodeval.openworld.ratio_study import ratio_study_of_arrays

    if "correct" in arrays or "labels" not in arrays:
        return None
    classes = base_classes if base_classes is not None else np.ravel(arrays["base_classes"])
    base = [int(c) for c in classes]
    ratios = tuple(feasible_ratios(arrays["labels"], base, SWEEP_RATIOS))
    if len(ratios) < 2:
        raise TooFewToResample(
            f"only {len(ratios)} of the {len(SWEEP_RATIOS)} ratios leave both base and new samples"
        )
    rows = ratio_study_of_arrays(arrays, base, ratios, repeats=repeats, seed=0)
    frame = pd.DataFrame(rows)
    frame["base_share"] = frame["n_base"] / (frame["n_base"] + frame["n_new"])
    frame.attrs["left_out"] = [r for r in SWEEP_RATIOS if r not in ratios]
    frame.attrs["repeats"] = repeats
    return frame


def openworld_sections(path: str | Path, *, base_classes: str | None = None) -> list[Section]:
    """All sections of the report on one open-world predictions file."""
    ids = parse_class_ids(base_classes) if base_classes is not None else None
    arrays = read_predictions(Path(path))
    metrics, samples = score_predictions(arrays, ids, 0.5)
    names = {
        "n_base": "base samples",
        "n_new": "new samples",
        "base_acc": "BaseAcc",
        "new_acc": "NewAcc",
        "hm": "HM",
        "overall_acc": "OverallAcc",
        "auroc": "AUROC",
        "openworld_auc": "OpenworldAUC",
    }
    table = pd.DataFrame(
        [
            (names.get(k, k), str(v) if isinstance(v, int) else f"{v:.4f}")
            for k, v in metrics.items()
        ],
        columns=["metric", "value"],
    )
    overview = Section(
        "Open-world metrics",
        intro="Base-vs-new detection r (max softmax probability over base classes, Algorithm 1 "
        "of the OpenworldAUC paper), base classifier g and new classifier h scored together. "
        "OpenworldAUC = P(g right on a base sample, h right on a new sample, and the base sample "
        "scored above the new one); ties count one half.",
        facts=[("file", str(path))],
        tables=[Table("The OpenworldAUC suite", table, digits=4)],
    )
    overview.figures.extend(_curve_figures(metrics, samples))
    sections = [overview]
    try:
        sweep = ratio_sweep_table(arrays, ids)
    except TooFewToResample as exc:  # a file too small to resample: the rest is still reported
        overview.notes.append(
            f"No ratio sweep: too few samples to resample to every base:new ratio ({exc})."
        )
        return sections
    if sweep is None:
        overview.notes.append(
            "No ratio sweep: the already-scored form has no class labels to resample by class."
        )
    else:
        sections.append(_sweep_section(sweep))
    return sections


def _curve_figures(
    metrics: dict[str, float | int], samples: tuple[np.ndarray, ...]
) -> list[Figure]:
    """The OpenworldAUC curve and the detector's ROC of one predictions file."""
    base_scores, new_scores, base_ok, new_ok = samples
    figures: list[Figure] = []
    miss, hit = openworld_curve(base_scores, new_scores, base_ok, new_ok)
    fpr, tpr = roc_points(np.asarray(base_scores, float), np.asarray(new_scores, float))
    figures.append(
        curves(
            [("OpenworldAUC curve", miss, hit)],
            key="owauc_curve",
            title="MissRate_b - HitRate_n curve",
            caption="Each point is a threshold t on the detector: x is the share of base samples "
            "lost (sent to h, or misclassified by g), y the share of new samples caught and "
            "classified right by h. The area under the curve is OpenworldAUC "
            f"({metrics['openworld_auc']:.4f}); x starts at 1 - BaseAcc and y ends at NewAcc, so "
            "classification errors shrink the area as well as detection errors.",
            xlabel="MissRate_b(t)",
            ylabel="HitRate_n(t)",
        )
    )
    figures.append(
        curves(
            [("ROC", fpr, tpr)],
            key="roc",
            diagonal=True,
            title="ROC of the base-vs-new detector",
            caption=f"True positive rate (base samples kept) against false positive rate (new "
            f"samples kept) over thresholds; area = AUROC ({metrics['auroc']:.4f}). It ignores "
            "whether g and h classify correctly, which is what OpenworldAUC adds.",
            xlabel="false positive rate (new)",
            ylabel="true positive rate (base)",
        )
    )
    return figures


def _sweep_section(sweep: pd.DataFrame) -> Section:
    from oodeval.openworld.ratio_study import PAPER_DDOF, ratio_summary

    tidy = sweep.melt(
        id_vars=["ratio", "base_share"],
        value_vars=list(SWEEP_METRICS),
        var_name="metric",
        value_name="value",
    )
    repeats = sweep.attrs.get("repeats", 5)
    figure: Figure = lines(
        tidy,
        x="base_share",
        y="value",
        hue="metric",
        key="ratio_sweep",
        title="Metrics against the base:new ratio of the test set",
        caption="The test set resampled per class to the new/base ratios of Tables 11-12 of the "
        f"OpenworldAUC paper, 10 to 0.1 (base:new 1:10 to 10:1; mean of {repeats} seeded "
        "draws). A ratio-insensitive metric is a flat line (property P3): OpenworldAUC, AUROC and "
        "HM stay put, up to resampling noise, while OverallAcc follows the share of whichever "
        "side the model is better at. Resampling a small test set makes the noise large: read "
        "the lines against the table's sample counts.",
        xlabel="share of base samples in the test set",
        ylabel="metric",
    )
    keep = ["ratio", "new_per_base", "n_base", "n_new", *SWEEP_METRICS]
    shown = sweep[keep].rename(columns={"ratio": "base:new", "new_per_base": "new/base"})
    summary = ratio_summary(sweep.to_dict("records"), ddof=PAPER_DDOF)
    stats = pd.DataFrame(
        [
            {"statistic": "mean", **{m: summary["mean"][m] for m in SWEEP_METRICS}},
            {
                "statistic": f"variance (ddof={PAPER_DDOF})",
                **{m: summary["variance"][m] for m in SWEEP_METRICS},
            },
        ]
    )
    section = Section(
        "Sensitivity to the base:new ratio",
        intro=f"Mean and variance over the {len(sweep)} ratios of each metric, the variance with "
        "ddof = 1 (sample variance) as the Mean and Variance rows of the paper's Tables 11-12 "
        "(which give percentages: multiply a variance here by 10,000 to compare).",
        tables=[
            Table("Metrics per ratio (mean over resamples)", shown, digits=4),
            Table("Mean and variance over the ratios", stats, digits=6),
        ],
        figures=[figure],
    )
    left_out = sweep.attrs.get("left_out") or []
    if left_out:
        section.notes.append(
            f"Left out base:new {', '.join(left_out)}: too few samples to resample to them."
        )
    return section
