"""The values the worst+gap paper prints that `study analyze` computes too: the one place they live,
and the tables that put a study's own numbers beside them (columns ``paper_*``).

- `PAPER_TABLE1` (SR-CMNIST) and `PAPER_TABLE2` (C-Cats&Dogs, L-CIFAR10): seed-mean rho and tau of
  worst+gap and average with the ideal measure, per scenario (`correlation_vs_paper` in
  `oodeval.study.analysis.paper` sets them beside Table 1's rows).
- `PAPER_TABLE5`: rho and tau of worst only, gap only and worst+gap per dataset. Its rows are
  aggregated differently: SR-CMNIST's is the mean over all 12 Scale x Ratio scenarios (the mean of
  Table 1's worst+gap column, 0.720), C-Cats&Dogs' and L-CIFAR10's are the Ratio 4:1 scenarios
  only (Table 2's 4:1 rows, 0.641 and 0.632); ``Average`` is the mean of the three.
  `table5_vs_paper` aggregates a study's Table 5 the same way (`PAPER_TABLE5_ROWS`).
- `PAPER_SELECTION_COUNTS`: Section 6.5 / Table 6, how often a measure's choice is the ideal
  measure's on SR-CMNIST (worst+gap 25 of 36 seed-scenarios and 9 of 12 on the seed average;
  average 9 of 36 and 1 of 12); `selection_vs_paper` counts the same on a study.
- `PAPER_TABLE3` (PACS-corrupted, VLCS-corrupted; Envs 1-1-1-1 and 2-2-2-2) and `PAPER_TABLE4`
  (PACS-corrupted; Envs 1-0-1-1 and 2-0-2-2): rho and tau of worst+gap and average with the
  ideal measure for each seed; `corrupted_vs_paper` sets a study's per-seed correlations beside
  them.
- `PAPER_NICO_TABLE2` (ResNet-50) and `PAPER_NICO_TABLE5` (ResNet-18) of the NICO++ paper: per
  algorithm and split (`NICO_SPLITS`), the accuracy (%) on each target domain, Ova., Avg. and
  Std; `nico_vs_paper` computes the same from a study's stored errors and counts.

>>> round(sum(v[0] for v in PAPER_TABLE1.values()) / 12, 3) == PAPER_TABLE5["SR-CMNIST"]["rho"][2]
True
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from oodeval.measures import meta

#: Table 1 of the worst+gap paper (SR-CMNIST, 14 algorithms, 3 seeds): means of
#: (rho worst+gap, rho average, tau worst+gap, tau average) per (scale, ratio).
PAPER_TABLE1 = {
    (1, "3:1"): (0.419, 0.166, 0.305, 0.063),
    (1, "4:1"): (0.596, 0.299, 0.480, 0.209),
    (1, "5:1"): (0.600, -0.458, 0.465, -0.377),
    (2, "3:1"): (0.643, 0.600, 0.526, 0.490),
    (2, "4:1"): (0.758, 0.471, 0.613, 0.365),
    (2, "5:1"): (0.773, 0.315, 0.626, 0.277),
    (3, "3:1"): (0.782, 0.543, 0.670, 0.430),
    (3, "4:1"): (0.752, 0.644, 0.602, 0.457),
    (3, "5:1"): (0.856, 0.391, 0.742, 0.346),
    (4, "3:1"): (0.764, 0.540, 0.646, 0.429),
    (4, "4:1"): (0.905, 0.721, 0.802, 0.551),
    (4, "5:1"): (0.792, 0.235, 0.646, 0.175),
}

#: Table 2 of the worst+gap paper (C-Cats&Dogs = family ``colored``, L-CIFAR10 = ``lined``;
#: 3 seeds): means of (rho worst+gap, rho average, tau worst+gap, tau average) per ratio.
PAPER_TABLE2 = {
    ("colored", "3:2"): (0.496, 0.223, 0.370, 0.158),
    ("colored", "4:1"): (0.641, -0.549, 0.458, -0.429),
    ("colored", "5:0"): (0.253, -0.482, 0.231, -0.335),
    ("lined", "3:2"): (0.600, 0.338, 0.451, 0.319),
    ("lined", "4:1"): (0.632, 0.226, 0.470, 0.191),
    ("lined", "5:0"): (0.808, 0.673, 0.641, 0.546),
}

#: Table 5 of the worst+gap paper: per dataset, rho and tau of (worst only, gap only, worst+gap).
PAPER_TABLE5 = {
    "SR-CMNIST": {"rho": (0.749, 0.694, 0.720), "tau": (0.621, 0.573, 0.594)},
    "C-Cats&Dogs": {"rho": (0.556, 0.662, 0.641), "tau": (0.411, 0.516, 0.458)},
    "L-CIFAR10": {"rho": (0.454, 0.460, 0.632), "tau": (0.337, 0.349, 0.470)},
    "Average": {"rho": (0.586, 0.605, 0.664), "tau": (0.456, 0.479, 0.507)},
}
_TABLE5_MEASURES = ("worst_only", "gap_only", "worst_plus_gap")

#: How each dataset row of Table 5 aggregates: (family, the one Ratio it keeps or None for every
#: scenario, the label of the aggregation). The paper's C-Cats&Dogs and L-CIFAR10 rows equal
#: Table 2's 4:1 rows; its SR-CMNIST row is the mean of Table 1's 12 scenarios.
PAPER_TABLE5_ROWS = {
    "SR-CMNIST": ("sr-cmnist", None, "mean over every scenario (the paper's: 12 Scale x Ratio)"),
    "C-Cats&Dogs": ("colored", "4:1", "Ratio 4:1 scenarios only, as the paper's row"),
    "L-CIFAR10": ("lined", "4:1", "Ratio 4:1 scenarios only, as the paper's row"),
}

#: Section 6.5 (Table 6, SR-CMNIST): measure -> (choices equal to the ideal's per seed, of how
#: many (scenario, seed); on the seed-averaged measure, of how many scenarios).
PAPER_SELECTION_COUNTS = {"worst_plus_gap": (25, 36, 9, 12), "average": (9, 36, 1, 12)}

#: The datasets of Tables 3 and 4 of the worst+gap paper (a scenario's ``dataset`` parameter).
CORRUPTED_DATASETS = ("PACS-corrupted", "VLCS-corrupted")

#: Table 3 of the worst+gap paper (PACS-corrupted and VLCS-corrupted, 14 algorithms): per
#: (dataset, Envs pattern, seed), (rho worst+gap, rho average, tau worst+gap, tau average).
PAPER_TABLE3 = {
    ("PACS-corrupted", "1-1-1-1", 0): (0.420, 0.335, 0.385, 0.256),
    ("PACS-corrupted", "1-1-1-1", 1): (0.918, 0.890, 0.744, 0.718),
    ("PACS-corrupted", "1-1-1-1", 2): (0.822, 0.780, 0.684, 0.641),
    ("PACS-corrupted", "2-2-2-2", 0): (0.856, 0.835, 0.667, 0.667),
    ("PACS-corrupted", "2-2-2-2", 1): (0.822, 0.681, 0.692, 0.564),
    ("PACS-corrupted", "2-2-2-2", 2): (0.617, 0.613, 0.452, 0.426),
    ("VLCS-corrupted", "1-1-1-1", 0): (0.495, 0.319, 0.333, 0.282),
    ("VLCS-corrupted", "1-1-1-1", 1): (0.478, 0.456, 0.359, 0.385),
    ("VLCS-corrupted", "1-1-1-1", 2): (0.772, 0.670, 0.684, 0.410),
    ("VLCS-corrupted", "2-2-2-2", 0): (0.907, 0.857, 0.761, 0.692),
    ("VLCS-corrupted", "2-2-2-2", 1): (0.900, 0.829, 0.753, 0.684),
    ("VLCS-corrupted", "2-2-2-2", 2): (0.454, 0.427, 0.338, 0.323),
}

#: Table 4 of the worst+gap paper (PACS-corrupted only), laid out as `PAPER_TABLE3`.
PAPER_TABLE4 = {
    ("PACS-corrupted", "1-0-1-1", 0): (0.642, 0.415, 0.503, 0.323),
    ("PACS-corrupted", "1-0-1-1", 1): (0.265, 0.121, 0.179, 0.077),
    ("PACS-corrupted", "1-0-1-1", 2): (0.573, 0.445, 0.436, 0.333),
    ("PACS-corrupted", "2-0-2-2", 0): (0.527, 0.451, 0.385, 0.359),
    ("PACS-corrupted", "2-0-2-2", 1): (0.382, 0.360, 0.348, 0.245),
    ("PACS-corrupted", "2-0-2-2", 2): (0.515, 0.447, 0.458, 0.301),
}
_PER_SEED = {**PAPER_TABLE3, **PAPER_TABLE4}
_CORRELATION_MEASURES = ("worst_plus_gap", "average")

#: The dataset of the NICO++ paper's tables (a scenario's ``dataset`` parameter).
NICO_DATASET = "NICO++"

#: The two splits of the NICO++ paper's Tables 2 and 5, by the paper's column header (its
#: training domains): (training domains, target domains in the paper's column order).
NICO_SPLITS = {
    "G,Wa,R,A,I,Di": (
        ("grass", "water", "rock", "autumn", "indoor", "dim"),
        ("sand", "winter", "outdoor", "dark"),
    ),
    "S,G,Wa,R,I,O": (
        ("sand", "grass", "water", "rock", "indoor", "outdoor"),
        ("autumn", "winter", "dark", "dim"),
    ),
}

#: The NICO++ paper's table of each backbone (a study's ``model``); other models have none.
NICO_MODEL_TABLES = {"resnet50": "Table 2", "resnet18": "Table 5"}

#: The names the NICO++ paper prints for DomainBed's algorithms where they differ, per table
#: (Table 2 spells GroupDRO "GroupDRG").
NICO_PAPER_NAMES = {
    "Table 2": {"ERM": "Deepall", "GroupDRO": "GroupDRG"},
    "Table 5": {"ERM": "Deepall"},
}

#: Table 2 of the NICO++ paper (ResNet-50, ImageNet-pretrained, 3 runs), the rows of the
#: algorithms oodeval has (DomainBed's names) and the Oracle: per (split, algorithm), the
#: accuracy (%) on each target domain in `NICO_SPLITS` order, then Ova., Avg. and Std.
PAPER_NICO_TABLE2 = {
    ("G,Wa,R,A,I,Di", "ERM"): (80.95, 79.96, 73.30, 76.27, 77.50, 77.62, 3.05),
    ("S,G,Wa,R,I,O", "ERM"): (81.47, 79.53, 78.13, 77.19, 79.20, 79.08, 1.61),
    ("G,Wa,R,A,I,Di", "RSC"): (80.07, 80.22, 76.67, 76.14, 78.37, 78.27, 1.88),
    ("S,G,Wa,R,I,O", "RSC"): (81.22, 80.61, 78.45, 77.60, 79.42, 79.47, 1.49),
    ("G,Wa,R,A,I,Di", "SagNet"): (80.31, 79.24, 72.97, 75.84, 76.96, 77.09, 2.90),
    ("S,G,Wa,R,I,O", "SagNet"): (80.85, 79.11, 77.50, 76.56, 78.63, 78.51, 1.63),
    ("G,Wa,R,A,I,Di", "MLDG"): (81.46, 80.28, 73.73, 76.92, 77.96, 78.10, 3.02),
    ("S,G,Wa,R,I,O", "MLDG"): (81.88, 79.95, 78.74, 77.79, 79.71, 79.59, 1.53),
    ("G,Wa,R,A,I,Di", "MMD"): (81.37, 80.63, 73.82, 77.10, 78.12, 78.23, 3.01),
    ("S,G,Wa,R,I,O", "MMD"): (81.93, 80.28, 78.71, 77.85, 79.81, 79.69, 1.56),
    ("G,Wa,R,A,I,Di", "CORAL"): (82.66, 81.36, 74.70, 78.25, 79.09, 79.24, 3.07),
    ("S,G,Wa,R,I,O", "CORAL"): (82.84, 81.08, 79.49, 78.82, 80.67, 80.56, 1.55),
    ("G,Wa,R,A,I,Di", "GroupDRO"): (81.08, 79.92, 73.39, 76.58, 77.61, 77.74, 3.01),
    ("S,G,Wa,R,I,O", "GroupDRO"): (81.35, 79.50, 78.14, 77.23, 79.17, 79.05, 1.55),
    ("G,Wa,R,A,I,Di", "IRM"): (70.59, 72.02, 61.83, 69.28, 68.33, 68.43, 3.93),
    ("S,G,Wa,R,I,O", "IRM"): (72.96, 71.52, 67.31, 69.43, 70.25, 70.31, 2.14),
    ("G,Wa,R,A,I,Di", "Oracle"): (86.42, 86.68, 84.44, 84.59, 85.55, 85.53, 1.02),
    ("S,G,Wa,R,I,O", "Oracle"): (87.79, 87.86, 84.33, 85.18, 86.29, 86.29, 1.57),
}

#: Table 5 of the NICO++ paper (ResNet-18; no RSC row), laid out as `PAPER_NICO_TABLE2`;
#: ``Oracle*`` is its per-domain oracle (one model per target domain).
PAPER_NICO_TABLE5 = {
    ("G,Wa,R,A,I,Di", "ERM"): (72.27, 71.64, 63.89, 65.97, 68.38, 68.44, 3.60),
    ("S,G,Wa,R,I,O", "ERM"): (73.86, 71.38, 69.99, 68.00, 71.02, 70.81, 2.14),
    ("G,Wa,R,A,I,Di", "SagNet"): (71.76, 70.90, 63.54, 64.88, 67.72, 67.77, 3.61),
    ("S,G,Wa,R,I,O", "SagNet"): (74.04, 71.08, 70.05, 67.96, 71.00, 70.78, 2.19),
    ("G,Wa,R,A,I,Di", "MLDG"): (73.29, 72.21, 64.90, 66.38, 69.12, 69.19, 3.61),
    ("S,G,Wa,R,I,O", "MLDG"): (74.64, 71.61, 70.96, 68.43, 71.66, 71.41, 2.21),
    ("G,Wa,R,A,I,Di", "MMD"): (72.32, 71.55, 64.07, 66.09, 68.44, 68.51, 3.51),
    ("S,G,Wa,R,I,O", "MMD"): (73.59, 70.79, 70.03, 68.32, 70.87, 70.68, 1.90),
    ("G,Wa,R,A,I,Di", "CORAL"): (74.77, 73.50, 66.43, 68.97, 70.80, 70.92, 3.37),
    ("S,G,Wa,R,I,O", "CORAL"): (75.84, 73.37, 72.12, 71.04, 73.23, 73.09, 1.79),
    ("G,Wa,R,A,I,Di", "GroupDRO"): (72.26, 71.25, 63.49, 65.70, 68.08, 68.18, 3.68),
    ("S,G,Wa,R,I,O", "GroupDRO"): (73.95, 70.97, 69.92, 67.95, 70.91, 70.70, 2.17),
    ("G,Wa,R,A,I,Di", "IRM"): (68.46, 69.26, 59.45, 64.61, 65.38, 65.45, 3.88),
    ("S,G,Wa,R,I,O", "IRM"): (72.51, 70.84, 67.43, 67.99, 69.74, 69.69, 2.08),
    ("G,Wa,R,A,I,Di", "Oracle"): (81.53, 82.21, 78.34, 78.57, 80.22, 80.16, 1.73),
    ("S,G,Wa,R,I,O", "Oracle"): (82.23, 82.83, 77.19, 80.51, 80.54, 80.69, 2.19),
    ("G,Wa,R,A,I,Di", "Oracle*"): (85.69, 84.26, 82.22, 82.92, 83.72, 83.77, 1.33),
    ("S,G,Wa,R,I,O", "Oracle*"): (85.51, 84.26, 82.92, 82.85, 83.93, 83.88, 1.09),
}
_NICO_TABLES = {"Table 2": PAPER_NICO_TABLE2, "Table 5": PAPER_NICO_TABLE5}
_NICO_SUMMARY = ("ova", "avg", "std")


def table5_vs_paper(table5: pd.DataFrame) -> pd.DataFrame:
    """A study's Table 5 aggregated as the paper's rows are, beside the paper's values.

    One row per dataset of `PAPER_TABLE5_ROWS` the study has scenarios for: the mean over the
    kept scenarios (every SR-CMNIST one; the Ratio 4:1 ones of ``colored`` and ``lined``) of the
    per-scenario seed means, then ``Average`` (the mean of the three rows) when all three are
    there. `table5` is `ablation_correlations`' output; its ``<family> (mean)`` rows average
    every scenario and are not used here.

    Returns
    -------
    DataFrame: dataset, family, aggregation, n_scenarios, and per measure ``m`` of Table 5
    (worst only, gap only, worst+gap): ``rho_<m>``, ``paper_rho_<m>``, ``tau_<m>``,
    ``paper_tau_<m>``
    """
    scenarios = table5[table5["scenario"] != table5["family"].astype(str) + " (mean)"]
    records = []
    for dataset, (family, ratio, label) in PAPER_TABLE5_ROWS.items():
        kept = scenarios[scenarios["family"] == family]
        if ratio is not None:
            kept = kept[kept["ratio"] == ratio]
        if kept.empty:
            continue
        row: dict[str, Any] = {"dataset": dataset, "family": family, "aggregation": label}
        row["n_scenarios"] = int(len(kept))
        row.update(_table5_values(dataset, {c: float(kept[c].mean()) for c in _value_columns()}))
        records.append(row)
    if len(records) == len(PAPER_TABLE5_ROWS):
        mean = {c: sum(r[c] for r in records) / len(records) for c in _value_columns()}
        row = {"dataset": "Average", "family": "", "aggregation": "mean of the three rows above"}
        row["n_scenarios"] = sum(r["n_scenarios"] for r in records)
        records.append({**row, **_table5_values("Average", mean)})
    columns = ["dataset", "family", "aggregation", "n_scenarios"]
    columns += [
        f"{prefix}{stat}_{m}"
        for m in _TABLE5_MEASURES
        for stat in ("rho", "tau")
        for prefix in ("", "paper_")
    ]
    return pd.DataFrame.from_records(records, columns=columns)


def _value_columns() -> list[str]:
    return [f"{stat}_{m}" for m in _TABLE5_MEASURES for stat in ("rho", "tau")]


def _table5_values(dataset: str, ours: dict[str, float]) -> dict[str, float]:
    out = {}
    for k, m in enumerate(_TABLE5_MEASURES):
        for stat in ("rho", "tau"):
            out[f"{stat}_{m}"] = ours[f"{stat}_{m}"]
            out[f"paper_{stat}_{m}"] = PAPER_TABLE5[dataset][stat][k]
    return out


def selection_vs_paper(selections: pd.DataFrame) -> pd.DataFrame:
    """Section 6.5's counts on the study's SR-CMNIST scenarios, beside the paper's.

    For worst+gap and average: how often the measure's choice is the ideal measure's per
    (scenario, seed) and on the seed-averaged measures, counted over the SR-CMNIST scenarios
    only (the paper's Table 6 covers its 12). `selections` is `selected_algorithms`' output with
    the ideal measure; empty when the study has no SR-CMNIST scenario.

    Returns
    -------
    DataFrame: measure, per_seed_matches, per_seed_total, paper_per_seed_matches,
    paper_per_seed_total, seed_average_matches, seed_average_total, paper_seed_average_matches,
    paper_seed_average_total
    """
    columns = ["measure"] + [
        f"{prefix}{scope}_{k}"
        for scope in ("per_seed", "seed_average")
        for prefix in ("", "paper_")
        for k in ("matches", "total")
    ]
    mine = selections[selections["family"] == "sr-cmnist"]
    records = []
    for measure, paper in PAPER_SELECTION_COUNTS.items():
        rows = mine[mine["measure"] == measure]
        if rows.empty:
            continue
        averaged = rows["seed"] == meta.SEED_MEAN
        per_seed, on_mean = rows[~averaged], rows[averaged]
        records.append(
            {
                "measure": measure,
                "per_seed_matches": int(per_seed["matches_ideal"].sum()),
                "per_seed_total": int(len(per_seed)),
                "paper_per_seed_matches": paper[0],
                "paper_per_seed_total": paper[1],
                "seed_average_matches": int(on_mean["matches_ideal"].sum()),
                "seed_average_total": int(len(on_mean)),
                "paper_seed_average_matches": paper[2],
                "paper_seed_average_total": paper[3],
            }
        )
    return pd.DataFrame.from_records(records, columns=columns)


def corrupted_vs_paper(by_seed: pd.DataFrame) -> pd.DataFrame:
    """Tables 3 and 4 of the worst+gap paper: a study's rho and tau of worst+gap and average with
    the ideal measure on PACS-corrupted and VLCS-corrupted, per seed, beside the paper's.

    One row per (scenario, seed) of `by_seed` whose ``dataset`` is one of `CORRUPTED_DATASETS`;
    the paper's value is the one printed for the same (dataset, Envs pattern, seed) in
    `PAPER_TABLE3` or `PAPER_TABLE4` (``paper_table`` names which; ``""`` and NaN ``paper_*``
    values for a pattern the paper does not report, NaN for a seed it does not print). The
    paper does not state the corruptions' severity, so the ``severity`` parameter is not matched.

    Reading of the seed: a study's seeds are its training seeds (initialisation, minibatches);
    the corruptions drawn for each base environment come from the study's data seed and are the
    same for every training seed. The paper's seed drew the corruptions too, so its seeds differ
    in their given environments as well: seed k here is set beside the paper's seed k as the same
    repetition, not the same draw of environments.

    Parameters
    ----------
    by_seed : `oodeval.study.analysis.paper.correlation_by_seed`'s output with the ``dataset``
        and ``pattern`` columns (the same Spearman and Kendall code as Table 1, per seed)

    Returns
    -------
    DataFrame: scenario, dataset, pattern, seed, paper_table, n_algorithms, then each of rho and
    tau of worst+gap and average beside its ``paper_`` value

    >>> by_seed = pd.DataFrame({"scenario": ["s"], "dataset": ["PACS-corrupted"],
    ...     "pattern": ["1-1-1-1"], "seed": [0], "n_algorithms": [14],
    ...     "rho_worst_plus_gap": [0.5], "rho_average": [0.3], "tau_worst_plus_gap": [0.4],
    ...     "tau_average": [0.2]})
    >>> corrupted_vs_paper(by_seed)[["paper_table", "paper_rho_worst_plus_gap"]].values.tolist()
    [['Table 3', 0.42]]
    """
    values = [
        f"{prefix}{stat}_{m}"
        for stat in ("rho", "tau")
        for m in _CORRELATION_MEASURES
        for prefix in ("", "paper_")
    ]
    columns = ["scenario", "dataset", "pattern", "seed", "paper_table", "n_algorithms", *values]
    if not {"dataset", "pattern"} <= set(by_seed.columns):
        return pd.DataFrame(columns=columns)
    patterns = {"Table 3": {k[:2] for k in PAPER_TABLE3}, "Table 4": {k[:2] for k in PAPER_TABLE4}}
    records = []
    for row in by_seed[by_seed["dataset"].isin(CORRUPTED_DATASETS)].itertuples(index=False):
        key = (row.dataset, row.pattern)
        source = next((t for t, known in patterns.items() if key in known), "")
        seed = _seed_key(row.seed)
        ref = None if seed is None else _PER_SEED.get((str(row.dataset), str(row.pattern), seed))
        record: dict[str, Any] = {
            "scenario": row.scenario,
            "dataset": row.dataset,
            "pattern": row.pattern,
            "seed": row.seed,
            "paper_table": source,
            "n_algorithms": row.n_algorithms,
        }
        pairs = [(stat, m) for stat in ("rho", "tau") for m in _CORRELATION_MEASURES]
        for k, (stat, m) in enumerate(pairs):  # the paper's tuples are in this order
            record[f"{stat}_{m}"] = getattr(row, f"{stat}_{m}")
            record[f"paper_{stat}_{m}"] = float("nan") if ref is None else ref[k]
        records.append(record)
    return pd.DataFrame.from_records(records, columns=columns)


def _seed_key(seed: object) -> int | None:
    """A seed as the int the paper's keys hold; None for one that is not a whole number."""
    try:
        number = float(seed)  # type: ignore[arg-type]  # any value; a bad one is caught below
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def nico_vs_paper(errors: pd.DataFrame, scenarios: pd.DataFrame, model: object) -> pd.DataFrame:
    """The NICO++ paper's Tables 2 (ResNet-50) and 5 (ResNet-18) on a study's NICO++ scenarios:
    per algorithm, the accuracy (%) of the model trained on all of E_given on each target domain,
    Ova., Avg. and Std, beside the paper's row for the same algorithm and split.

    The target domains of a scenario are its E_all environments that are not in E_given (the
    environments with a leave-one-out fold, the scenario's ``given`` domains). Per seed, the
    accuracy on domain k is acc_k = 100 (1 - error_k) and Ova. = sum_k N_k acc_k / sum_k N_k
    with N_k the stored count of test images of domain k (Eq. 5 of the NICO++ paper); the
    accuracies and Ova. are then averaged over seeds, Avg. is the mean of the seed-mean
    accuracies and Std their population standard deviation (ddof=0). Eq. 5 writes 1/(K - 1),
    but every printed Std of Tables 2 and 5 is the ddof=0 std of the row's printed accuracies
    (Deepall, Table 2: 3.04 with ddof=0 where it prints 3.05; 3.51 with ddof=1), so that is what
    is computed. Without a ``count`` column Ova. is NaN.

    The paper's table follows the study's `model` (`NICO_MODEL_TABLES`; another model has none),
    its split the scenario's training and target domains (`NICO_SPLITS`, names compared without
    case); ``paper_*`` values are NaN where there is no such table, split or algorithm row.

    Parameters
    ----------
    errors : `oodeval.study.analysis.paper.errors_table` with ``counts=True`` (columns
        scenario, seed, algorithm, split, environment, error, count)
    scenarios : one row per scenario with columns scenario and dataset (`scenario_meta`); the
        scenarios whose dataset is `NICO_DATASET` are tabulated, in this frame's order
    model : the study's model name

    Returns
    -------
    DataFrame: scenario, split (the paper's label, ``""`` for another split), paper_table,
    algorithm, paper_algorithm (its name in the paper), n_seeds, then ``acc_<domain>`` for every
    target domain of the scenarios (the paper's column order first), ``ova``, ``avg`` and
    ``std``, each beside its ``paper_`` value
    """
    table = NICO_MODEL_TABLES.get(str(model), "")
    names = scenarios.loc[scenarios["dataset"].isin([NICO_DATASET]), "scenario"]
    records: list[dict[str, Any]] = []
    domains: list[str] = []
    for scenario in dict.fromkeys(names):
        rows = errors[errors["scenario"] == scenario]
        given = set(rows.loc[rows["split"] == "loo", "environment"])
        full = rows[(rows["split"] == "all") & ~rows["environment"].isin(given)]
        split, targets = _nico_split(given, list(dict.fromkeys(full["environment"])))
        domains += [t for t in targets if t not in domains]
        for algorithm, runs in full.groupby("algorithm", sort=True):
            paper = _NICO_TABLES.get(table, {}).get((split, str(algorithm))) if split else None
            record: dict[str, Any] = {
                "scenario": scenario,
                "split": split,
                "paper_table": table if split else "",
                "algorithm": algorithm,
                "paper_algorithm": _nico_name(table, str(algorithm)) if paper else None,
                "n_seeds": int(runs["seed"].nunique()),
            }
            ours = _nico_accuracies(runs, targets)
            theirs = list(paper) if paper else [float("nan")] * len(ours)
            columns = [*(f"acc_{t}" for t in targets), *_NICO_SUMMARY]
            for column, value, printed in zip(columns, ours, theirs, strict=True):
                record[column], record[f"paper_{column}"] = value, float(printed)
            records.append(record)
    columns = ["scenario", "split", "paper_table", "algorithm", "paper_algorithm", "n_seeds"]
    for column in [*(f"acc_{d}" for d in domains), *_NICO_SUMMARY]:
        columns += [column, f"paper_{column}"]
    return pd.DataFrame.from_records(records, columns=columns)


def _nico_split(given: set, targets: list) -> tuple[str, list]:
    """The paper's split with these training and target domains (case aside), and the targets
    in its column order; ``("", targets)`` when it is neither of `NICO_SPLITS`."""
    by_name = {str(t).lower(): t for t in targets}
    for label, (train, test) in NICO_SPLITS.items():
        if {str(g).lower() for g in given} == set(train) and set(by_name) == set(test):
            return label, [by_name[t] for t in test]
    return "", targets


def _nico_name(table: str, algorithm: str) -> str:
    return NICO_PAPER_NAMES.get(table, {}).get(algorithm, algorithm)


def _nico_accuracies(runs: pd.DataFrame, targets: list) -> list[float]:
    """The seed-mean accuracy (%) on each target, then Ova., Avg. and Std of one algorithm's
    full-model rows on the target domains (`nico_vs_paper`)."""
    accuracy = runs.assign(acc=100.0 * (1.0 - runs["error"].astype("float64")))
    per_domain = accuracy.groupby("environment", sort=False)["acc"].mean()
    values = np.array([per_domain.get(t, np.nan) for t in targets], dtype=np.float64)
    ova = float("nan")
    if "count" in runs.columns:
        weighted = accuracy.assign(n=runs["count"].astype("float64"))
        weighted = weighted.assign(hits=weighted["n"] * weighted["acc"])
        per_seed = weighted.groupby("seed")[["hits", "n"]].sum()
        per_seed = per_seed[per_seed["n"] > 0]
        if len(per_seed):
            ova = float((per_seed["hits"] / per_seed["n"]).mean())
    whole = len(values) > 0 and not np.isnan(values).any()
    avg = float(values.mean()) if whole else float("nan")
    std = float(values.std(ddof=0)) if whole else float("nan")
    return [*(float(v) for v in values), ova, avg, std]
