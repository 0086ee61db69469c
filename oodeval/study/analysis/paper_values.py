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

>>> round(sum(v[0] for v in PAPER_TABLE1.values()) / 12, 3) == PAPER_TABLE5["SR-CMNIST"]["rho"][2]
True
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from oodeval.measures import meta

__all__ = [
    "PAPER_SELECTION_COUNTS",
    "PAPER_TABLE1",
    "PAPER_TABLE2",
    "PAPER_TABLE5",
    "PAPER_TABLE5_ROWS",
    "selection_vs_paper",
    "table5_vs_paper",
]

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
