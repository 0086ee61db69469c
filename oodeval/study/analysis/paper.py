"""The worst+gap paper's analyses (Sections 5-6) computed from a stored study, as DataFrames.

Per unit (scenario, algorithm, seed) the measures come from the stored rows: the leave-one-out
(LOO) errors are each LOO fold's error on its own held-out environment, and the ideal measure
(Eq. 4) is the largest error of the model trained on all given environments (fold ``all``) over
E_all. All numbers come from `oodeval.measures.meta`, the layer `oodeval measures` uses too;
this module reads the store, adds each scenario's family, Ratio and Scale (and, for the tables of
the image datasets, its ``dataset`` and Envs ``pattern``: `scenario_meta`), and shapes the tables.

- `correlation_with_ideal`: per scenario, mean and std over seeds of Spearman's rho and Kendall's
  tau between a measure and the ideal measure across algorithms (Table 1: worst+gap, average).
- `correlation_by_seed`: the same correlations per seed, not averaged (Tables 3 and 4, set
  beside the paper's by `paper_values.corrupted_vs_paper`; `dataset_tables` adds them, and the
  NICO++ paper's Tables 2 and 5, `paper_values.nico_vs_paper`, for a study of those datasets).
- `ablation_correlations`: the same for worst only, gap only and worst+gap, per scenario and per
  family (the ``(mean)`` row = mean over every scenario of the per-scenario seed means; the
  paper's dataset rows aggregate differently, `paper_values.table5_vs_paper`).
- `selected_algorithms`: the algorithm each measure chooses, per seed and on the seed-averaged
  measure (Table 6); `selection_agreement` counts how often it is the ideal measure's choice.
- `degradation_by_scenario`: selection degradation |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)|
  (Section 6.1, Figure 6).
- `distance_to_ideal_by_scale`: mean |R^IDEAL - R^measure| over algorithms and seeds as Scale
  grows, divided by its value at the smallest Scale (Scale 1 in the paper) of the same family and
  Ratio (Section 6.3, Figure 7).
- `baseline_vs_ideal_best`: ERM against the ideal-best algorithm under each measure (Figure 1).
- `ideal_measure_pairs`: the raw (ideal, measure) pairs of every unit (Figure 5).
- `bounds_by_scenario`: how often Eq. 39's bound (ideal <= worst+gap, Theorem 3.4) held, and
  ideal <= worst, per scenario.
- `correlation_verdicts`: the answer the study is run for, beyond the paper: per scenario, rho of
  worst+gap and of average with the ideal measure with paired bootstrap intervals over
  algorithms, and whether worst+gap is ahead (put in words by
  `oodeval.study.analysis.output.verdict_markdown`).

Partial studies (units pending or failed) are analysed on their finished units; a seed of a
scenario with a single finished algorithm has no correlation and is left out of Tables 1 and 5.
`analyze` returns them under the paper's numbers (``table1``, ``figure7``, ...; see
`PAPER_REFERENCES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from oodeval.errors import OodevalError
from oodeval.measures import check_measures, get_measure, meta
from oodeval.study.analysis.leaderboard import Leaderboard, study_leaderboard
from oodeval.study.analysis.paper_values import (
    CORRUPTED_DATASETS,
    NICO_DATASET,
    PAPER_TABLE1,
    PAPER_TABLE2,
    corrupted_vs_paper,
    nico_vs_paper,
    selection_vs_paper,
    table5_vs_paper,
)
from oodeval.study.analysis.versions import measure_digests
from oodeval.study.config import DEFAULT_MEASURES as DEFAULTS
from oodeval.study.store import ALL_FOLD, Study, load_study

#: The measures Table 1 compares, the ablation of Table 5, and the selections of Table 6.
CORRELATION_MEASURES = ("worst_plus_gap", "average")
ABLATION_MEASURES = ("worst_only", "gap_only", "worst_plus_gap")
SELECTION_MEASURES = ("ideal", "worst_plus_gap", "average")
_META = ("scenario", "family", "ratio", "scale")
#: The image datasets' scenario metadata (the ``dataset`` and ``pattern`` parameters, NA where
#: a scenario has none): in `scenario_meta` and the tables that use it (Tables 3 and 4, NICO++),
#: not in the others, whose columns stay `_META`'s.
DATASET_META = ("dataset", "pattern")

#: Each table of `analyze` (its CSV file's stem) -> the part of the worst+gap paper (or, named,
#: of the NICO++ paper) it reproduces.
PAPER_REFERENCES = {
    "verdict": "Verdict (Table 1 with bootstrap intervals)",
    "units": "per-unit measures",
    "table1": "Table 1",
    "table1_vs_paper": "Table 1",
    "table3_vs_paper": "Tables 3 and 4",
    "nico_vs_paper": "NICO++ paper, Tables 2 and 5",
    "table5": "Table 5",
    "table5_vs_paper": "Table 5",
    "table6": "Table 6",
    "selection_agreement": "Section 6.5",
    "selection_vs_paper": "Section 6.5",
    "bounds": "Theorem 3.4 (Eq. 39)",
    "figure6": "Figure 6",
    "figure7": "Figure 7",
    "figure1": "Figure 1",
    "figure5": "Figure 5",
    "leaderboard": "Measure leaderboard",
}


def study_unit_measures(study: Study, measures: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per finished unit: scenario metadata, the ideal measure and every LOO measure.

    Columns: scenario, family, ratio, scale, algorithm, seed, n_given, ideal, then one column per
    measure (default: the study config's ``measures`` plus the paper's, ``worst``, ``gap`` and
    ``scaled_worst``). Units whose
    status is ``failed`` are left out. Rows are sorted by scenario order, algorithm and seed.
    """
    names = _measure_names(study, measures)
    scenarios = scenario_meta(study)
    if scenarios.empty:
        raise OodevalError(f"{study.directory} has no finished units yet; run the study first")
    units = pd.DataFrame(meta.unit_measures(errors_table(study), names))
    frame = units.merge(scenarios[list(_META)], on="scenario", how="left", validate="many_to_one")
    frame = frame[[*_META, "algorithm", "seed", "n_given", "ideal", *names]]
    return _sort_scenarios(frame, ["algorithm", "seed"])


def scenario_meta(study: Study) -> pd.DataFrame:
    """One row per scenario with a finished unit: scenario, family, ratio, scale, dataset, pattern.

    From each scenario's stored parameters: ``ratio`` as text (``""`` without one), ``scale`` an
    Int64 (NA without one), ``dataset`` (``"PACS-corrupted"``, ``"NICO++"``, ...) and ``pattern``
    (the Envs pattern of Tables 3 and 4, ``"1-1-1-1"``; a list is joined with ``-``) as text, NA
    for a scenario without them. Rows are in the order of the units.
    """
    done = study.units[study.units["status"] == "done"]
    params = list(done["params"])
    return pd.DataFrame(
        {
            "scenario": done["scenario"],
            "family": done["family"],
            "ratio": [str(p.get("ratio", "")) for p in params],
            "scale": pd.array([_scale(p.get("scale")) for p in params], dtype="Int64"),
            "dataset": pd.array([_text(p.get("dataset")) for p in params], dtype=object),
            "pattern": pd.array([_text(p.get("pattern")) for p in params], dtype=object),
        }
    ).drop_duplicates("scenario", ignore_index=True)


def errors_table(study: Study, *, counts: bool = False) -> pd.DataFrame:
    """The errors of the study's finished units in the long form of `oodeval.measures.meta`.

    Columns scenario, seed, algorithm, split, environment, error (and count, the number of test
    examples behind each error, with ``counts=True``): split ``loo`` for each LOO fold's error on
    its own held-out environment (folds in sorted order), ``all`` for the errors of the model
    trained on all given environments. Raises OodevalError naming a unit whose rows do not have
    that shape.
    """
    done = study.units.loc[
        study.units["status"] == "done", ["unit_key", "scenario", "seed", "algorithm"]
    ]
    rows = study.results.merge(done, on="unit_key", how="inner")
    missing = sorted(set(done["unit_key"]) - set(rows["unit_key"]))
    if missing:
        raise OodevalError(f"unit {missing[0]} is marked done but has no result rows")
    is_full = rows["fold"] == ALL_FOLD
    loo = rows[~is_full & (rows["fold"] == rows["environment"])]
    folds = rows[~is_full].groupby("unit_key")["fold"].nunique()
    own = loo.groupby("unit_key")["fold"].agg(["nunique", "size"]).reindex(folds.index)
    bad = folds.index[(own["nunique"] != folds) | (own["size"] != folds)]
    if len(bad):
        raise OodevalError(
            f"unit {bad[0]}: every leave-one-out fold needs exactly one row on its own held-out "
            "environment"
        )
    without_full = sorted(set(done["unit_key"]) - set(rows.loc[is_full, "unit_key"]))
    if without_full:
        raise OodevalError(f"unit {without_full[0]} has no rows of the model trained on all")
    loo = loo.sort_values(["unit_key", "fold"], kind="stable").assign(split="loo")
    full = rows[is_full].assign(split="all")
    columns = ["scenario", "seed", "algorithm", "split", "environment", "error"]
    columns += ["count"] if counts else []
    return pd.concat([loo[columns], full[columns]], ignore_index=True)


def correlation_with_ideal(
    frame: pd.DataFrame, measures: Sequence[str] = CORRELATION_MEASURES
) -> pd.DataFrame:
    """Table 1: per scenario, mean and std over seeds of rho and tau for each measure.

    Columns: scenario, family, ratio, scale, n_seeds, n_algorithms, and for each measure ``m``:
    ``rho_<m>_mean``, ``rho_<m>_std``, ``tau_<m>_mean``, ``tau_<m>_std`` (std with ddof=1; NaN
    for a single seed). `frame` is `study_unit_measures`' output; seeds of a scenario with a single
    finished algorithm (a partial study) are left out.
    """
    correlations = meta.ideal_correlations(correlatable(frame), list(measures))
    summary = pd.DataFrame(meta.correlation_summary(correlations))
    records = []
    for scenario, group in summary.groupby("scenario", sort=False):
        row = {"scenario": scenario, "n_seeds": int(group["n_seeds"].iloc[0])}
        row["n_algorithms"] = int(group["n_algorithms"].min())
        by_measure = group.set_index("measure")
        for measure in measures:
            for stat, column in (("rho", "spearman"), ("tau", "kendall")):
                row[f"{stat}_{measure}_mean"] = by_measure.loc[measure, f"{column}_mean"]
                row[f"{stat}_{measure}_std"] = by_measure.loc[measure, f"{column}_std"]
        records.append(row)
    return _sort_scenarios(_with_meta(pd.DataFrame.from_records(records), frame))


def correlation_by_seed(
    frame: pd.DataFrame, measures: Sequence[str] = CORRELATION_MEASURES
) -> pd.DataFrame:
    """Tables 3 and 4's shape: Spearman's rho and Kendall's tau-b of each measure with the ideal
    measure across algorithms, per (scenario, seed), not averaged over seeds.

    The per-seed correlations Table 1 averages (`correlation_with_ideal`: the same
    `oodeval.measures.meta.ideal_correlations` on the same seeds). Columns: scenario, family,
    ratio, scale (then dataset and pattern when `frame` has them, `DATASET_META`), seed,
    n_algorithms, and ``rho_<m>``, ``tau_<m>`` per measure.

    >>> frame = pd.DataFrame({"scenario": ["s"] * 3, "family": ["f"] * 3, "ratio": [""] * 3,
    ...     "scale": pd.array([pd.NA] * 3, dtype="Int64"), "algorithm": ["A", "B", "C"],
    ...     "seed": [0] * 3, "ideal": [0.1, 0.2, 0.3], "average": [0.3, 0.2, 0.1]})
    >>> table = correlation_by_seed(frame, ["average"])
    >>> table["seed"].tolist(), table["rho_average"].tolist(), table["tau_average"].tolist()
    ([0], [-1.0], [-1.0])
    """
    correlations = pd.DataFrame(meta.ideal_correlations(correlatable(frame), list(measures)))
    records = []
    for (scenario, seed), group in correlations.groupby(["scenario", "seed"], sort=False):
        row = {"scenario": scenario, "seed": seed}
        row["n_algorithms"] = int(group["n_algorithms"].min())
        by_measure = group.set_index("measure")
        for measure in measures:
            row[f"rho_{measure}"] = float(by_measure.loc[measure, "spearman"])
            row[f"tau_{measure}"] = float(by_measure.loc[measure, "kendall"])
        records.append(row)
    table = _with_meta(pd.DataFrame.from_records(records), frame)
    return _sort_scenarios(table, ["seed"])


def correlatable(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` without the (scenario, seed) groups of a single algorithm, which have no rank
    correlation; unchanged when no group has two (the correlations then say why they fail)."""
    size = frame.groupby(["scenario", "seed"], sort=False)["algorithm"].transform("size")
    kept = frame[size >= 2]
    return frame if kept.empty else kept.reset_index(drop=True)


VERDICT_RESAMPLES = meta.BOOTSTRAP_RESAMPLES
"""Bootstrap resamples of the verdict's intervals (seeded: same study, same intervals)."""


def correlation_verdicts(
    frame: pd.DataFrame, *, n_resamples: int = VERDICT_RESAMPLES, seed: int = 0
) -> pd.DataFrame:
    """The verdict: per scenario, does worst+gap order algorithms like the ideal measure better
    than average does, and how sure are we (`oodeval.measures.meta.correlation_verdicts`).

    rho is the mean over seeds of the per-seed Spearman's rho (Table 1's mean when every seed has
    at least `meta.MIN_VERDICT_ALGORITHMS` algorithms); intervals are 95% percentile
    bootstrap intervals over algorithms, the same draw for every seed and both measures.
    Columns: scenario, family, ratio, scale, then those of `meta.correlation_verdicts`.
    """
    table = meta.correlation_verdicts(
        frame, *CORRELATION_MEASURES, n_resamples=n_resamples, bootstrap_seed=seed
    )
    return _sort_scenarios(_with_meta(pd.DataFrame(table), frame))


def correlation_vs_paper(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 next to the paper's numbers: Table 1's for the SR-CMNIST scenarios, Table 2's for
    the ``colored`` (C-Cats&Dogs) and ``lined`` (L-CIFAR10) ones (others dropped).

    `table` is `correlation_with_ideal`'s output. Columns: scenario, scale, ratio, paper_table
    (the paper's table the values come from), then each of rho and tau of worst+gap and average
    beside its ``paper_`` value.
    """
    columns = ["scenario", "scale", "ratio", "paper_table"] + [
        f"{prefix}{stat}_{m}"
        for stat in ("rho", "tau")
        for m in ("worst_plus_gap", "average")
        for prefix in ("", "paper_")
    ]
    rows = []
    for row in table.itertuples(index=False):
        if row.family == "sr-cmnist" and not pd.isna(row.scale):
            ref, source = PAPER_TABLE1.get((int(row.scale), row.ratio)), "Table 1"
        else:
            ref, source = PAPER_TABLE2.get((row.family, row.ratio)), "Table 2"
        if ref is None:
            continue
        rows.append(
            {
                "scenario": row.scenario,
                "scale": row.scale,
                "ratio": row.ratio,
                "paper_table": source,
                "rho_worst_plus_gap": row.rho_worst_plus_gap_mean,
                "paper_rho_worst_plus_gap": ref[0],
                "rho_average": row.rho_average_mean,
                "paper_rho_average": ref[1],
                "tau_worst_plus_gap": row.tau_worst_plus_gap_mean,
                "paper_tau_worst_plus_gap": ref[2],
                "tau_average": row.tau_average_mean,
                "paper_tau_average": ref[3],
            }
        )
    return pd.DataFrame.from_records(rows, columns=columns)


def ablation_correlations(
    frame: pd.DataFrame, measures: Sequence[str] = ABLATION_MEASURES
) -> pd.DataFrame:
    """Table 5: mean rho and tau (over seeds) of worst only, gap only and worst+gap.

    One row per scenario, then one row per family with ``scenario = "<family> (mean)"`` holding the
    mean over that family's scenarios of the per-scenario means (how the paper's SR-CMNIST row
    relates to its Table 1). Columns ``rho_<m>``, ``tau_<m>`` per measure.
    """
    t1 = correlation_with_ideal(frame, measures)
    keep = [*_META, "n_seeds", "n_algorithms"]
    out = t1[keep].copy()
    for measure in measures:
        out[f"rho_{measure}"] = t1[f"rho_{measure}_mean"]
        out[f"tau_{measure}"] = t1[f"tau_{measure}_mean"]
    family_rows = []
    for family, group in out.groupby("family", sort=False):
        row = {"scenario": f"{family} (mean)", "family": family, "ratio": "", "scale": pd.NA}
        row["n_seeds"] = int(group["n_seeds"].min())
        row["n_algorithms"] = int(group["n_algorithms"].min())
        for measure in measures:
            for stat in ("rho", "tau"):
                row[f"{stat}_{measure}"] = float(group[f"{stat}_{measure}"].mean())
        family_rows.append(row)
    out = pd.concat([out, pd.DataFrame.from_records(family_rows)], ignore_index=True)
    out["scale"] = out["scale"].astype("Int64")
    return out


def selected_algorithms(
    frame: pd.DataFrame, measures: Sequence[str] = SELECTION_MEASURES
) -> pd.DataFrame:
    """Table 6: the algorithm each measure chooses (argmin), per seed and on the seed average.

    Long format: scenario, family, ratio, scale, seed (an int, or ``"mean"`` for the choice on
    each algorithm's measure averaged over seeds), measure, selected, tied (the names that tie
    at the minimum, joined by `oodeval.measures.meta.TIE_SEPARATOR`), matches_ideal. Only
    algorithms finished for every seed of a scenario enter the seed-average.
    """
    by_seed = _sort_scenarios(frame, ["seed", "algorithm"])
    per_seed = pd.DataFrame(meta.choices(by_seed, list(measures)))
    averaged = meta.choices(meta.seed_means(by_seed, measures), list(measures))
    table = pd.concat([per_seed, pd.DataFrame(averaged)], ignore_index=True)
    order = {s: k for k, s in enumerate(dict.fromkeys(by_seed["scenario"]))}
    table = table.sort_values("scenario", key=lambda s: s.map(order), kind="stable")
    table["tied"] = [meta.tie_text(t) for t in table["tied"]]
    columns = ["seed", "measure", "selected", "tied", "matches_ideal"]
    return _with_meta(table[["scenario", *columns]].reset_index(drop=True), frame)


def selection_agreement(selections: pd.DataFrame) -> pd.DataFrame:
    """How often each measure selects the ideal-best algorithm (the counts of Section 6.5).

    Columns: measure, per_seed_matches, per_seed_total, seed_average_matches, seed_average_total.
    """
    per_seed = selections[selections["seed"] != meta.SEED_MEAN]
    averaged = selections[selections["seed"] == meta.SEED_MEAN]
    records = []
    for measure in selections["measure"].unique():
        ps = per_seed[per_seed["measure"] == measure]
        av = averaged[averaged["measure"] == measure]
        records.append(
            {
                "measure": measure,
                "per_seed_matches": int(ps["matches_ideal"].sum()),
                "per_seed_total": int(len(ps)),
                "seed_average_matches": int(av["matches_ideal"].sum()),
                "seed_average_total": int(len(av)),
            }
        )
    return pd.DataFrame.from_records(records)


def degradation_by_scenario(
    frame: pd.DataFrame, measures: Sequence[str] = CORRELATION_MEASURES
) -> pd.DataFrame:
    """Figure 6: selection degradation per scenario, mean and std over seeds (Section 6.1).

    For each seed: |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| over the algorithms of that seed.
    Columns: scenario, family, ratio, scale, measure, degradation_mean, degradation_std, n_seeds.
    """
    by_seed = _sort_scenarios(frame, ["seed", "algorithm"])
    selected = meta.choices(by_seed, list(measures))
    table = pd.DataFrame(meta.degradation_summary(selected))
    table = table[["scenario", "measure", "degradation_mean", "degradation_std", "n_seeds"]]
    return _sort_scenarios(_with_meta(table, frame), ["measure"])


def distance_to_ideal_by_scale(
    frame: pd.DataFrame, measures: Sequence[str] = CORRELATION_MEASURES
) -> pd.DataFrame:
    """Figure 7: |R^IDEAL - R^measure| as Scale grows, normalised to the smallest Scale.

    For each family and Ratio (scenarios that differ only in Scale) and each Scale: the mean over
    algorithms and seeds of |ideal - measure| (``algorithm = "(all)"``), and per algorithm the
    mean over seeds. ``normalized`` divides by the same quantity at the group's smallest Scale
    (``reference_scale``; Scale 1 in the paper). Scenarios without a Scale are left out.
    Columns: family, ratio, scale, n_given, measure, algorithm, abs_diff, normalized,
    reference_scale.
    """
    scaled = frame[frame["scale"].notna()]
    table = meta.distance_to_ideal(scaled, list(measures), size="scale", group=("family", "ratio"))
    out = pd.DataFrame(table)
    return out.sort_values(
        ["family", "ratio", "measure", "algorithm", "scale"], kind="stable", ignore_index=True
    )


def baseline_vs_ideal_best(
    frame: pd.DataFrame,
    measures: Sequence[str] = SELECTION_MEASURES,
    *,
    baseline: str = "ERM",
) -> pd.DataFrame:
    """Figure 1: the baseline (ERM) against the ideal-best algorithm under each measure.

    The ideal-best algorithm A*_IDEAL of a scenario is selected on the seed-averaged ideal measure
    (as Table 6's "Average" column); for it and for the baseline, each measure's mean and std over
    seeds. Columns: scenario, family, ratio, scale, measure, baseline, baseline_mean, baseline_std,
    best_algorithm, best_mean, best_std. Scenarios without the baseline are left out.
    """
    table = pd.DataFrame(meta.baseline_vs_best(frame, list(measures), baseline=baseline))
    return _with_meta(table, frame)


def bounds_by_scenario(frame: pd.DataFrame) -> pd.DataFrame:
    """Theorem 3.4 / Eq. 39 on the study: per scenario, how often ideal <= worst+gap and <= worst.

    Eq. 39 bounds the ideal measure (Eq. 4) of the model trained on all given environments by
    worst+gap (Eq. 6) of its LOO models, under the theorem's assumptions (see the glossary);
    ``share_within_worst_plus_gap`` is the share of the scenario's (algorithm, seed) units where
    the bound held, ``share_within_worst`` where the worst LOO error alone bounded it.
    Columns: scenario, family, ratio, scale, n_given, n_units, within_worst_plus_gap,
    share_within_worst_plus_gap, within_worst, share_within_worst.
    """
    table = pd.DataFrame(meta.ideal_bounds(frame, ("worst_plus_gap", "worst")))
    return _with_meta(table, frame)


def ideal_measure_pairs(
    frame: pd.DataFrame, measures: Sequence[str] = CORRELATION_MEASURES
) -> pd.DataFrame:
    """Figure 5: raw (ideal, measure) values of every unit, one row per unit."""
    keep = [*_META, "algorithm", "seed", "ideal", *measures]
    return frame[keep].reset_index(drop=True)


def analyze(
    study: Study | str | Path, measures: Sequence[str] | None = None
) -> dict[str, pd.DataFrame]:
    """Every analysis of a study, by the paper's number (`PAPER_REFERENCES`): ``verdict``,
    ``units``, ``table1``, ``table1_vs_paper``, ``table5``, ``table5_vs_paper``, ``table6``,
    ``selection_agreement``, ``selection_vs_paper``, ``bounds``, ``figure6``, ``figure7``,
    ``figure1``, ``figure5``, and the measure ``leaderboard``; for a study with PACS-corrupted
    or VLCS-corrupted scenarios also ``table3_vs_paper``, with NICO++ ones ``nico_vs_paper``
    (`dataset_tables`).

    The ``*_vs_paper`` tables put the study's numbers beside the paper's (columns ``paper_*``,
    `oodeval.study.analysis.paper_values`); ``bounds`` is `bounds_by_scenario` (Theorem 3.4).
    ``units`` and the leaderboard include ``scaled_worst`` (Theorem 3.3, Eq. 16).

    `measures` (measure names or specs such as ``cvar:alpha=0.25``): more measures, computed
    from the stored errors and added to every table beside the paper's (Tables 1, 5 and 6,
    Figures 1, 5, 6 and 7; the verdict stays worst+gap against average); the results then also
    hold ``measure_digests`` (`measure_digests`). Nothing is trained and the store is only read.
    """
    study = study if isinstance(study, Study) else load_study(study)
    extra = list(dict.fromkeys(check_measures([m for m in measures or () if m != "ideal"])))
    names = list(dict.fromkeys([*_measure_names(study, None), *extra]))  # a measure once
    frame = study_unit_measures(study, names if extra else None)
    have = set(frame.columns)
    needed = set(CORRELATION_MEASURES) | set(ABLATION_MEASURES)
    if not needed <= have:
        raise OodevalError(
            f"the study's measures lack {sorted(needed - have)}; the paper's analyses need "
            f"{sorted(needed)}"
        )
    compared, ablated, chosen = (
        _with_extra(base, extra)
        for base in (CORRELATION_MEASURES, ABLATION_MEASURES, SELECTION_MEASURES)
    )
    correlations = correlation_with_ideal(frame, compared)
    selections = selected_algorithms(frame, chosen)
    table5 = ablation_correlations(frame, ablated)
    results = {
        "verdict": correlation_verdicts(frame),
        "units": frame,
        "table1": correlations,
        "table1_vs_paper": correlation_vs_paper(correlations),
        **dataset_tables(study, frame),
        "table5": table5,
        "table5_vs_paper": table5_vs_paper(table5),
        "table6": selections,
        "selection_agreement": selection_agreement(selections),
        "selection_vs_paper": selection_vs_paper(selections),
        "bounds": bounds_by_scenario(frame),
        "figure6": degradation_by_scenario(frame, compared),
        "figure7": distance_to_ideal_by_scale(frame, compared),
        "figure1": baseline_vs_ideal_best(frame, chosen),
        "figure5": ideal_measure_pairs(frame, compared),
        "leaderboard": study_leaderboard(correlatable(frame)),
    }
    if measures is not None:
        analysed = [c for c in frame.columns if c not in (*_META, "algorithm", "seed", "n_given")]
        results["measure_digests"] = measure_digests(analysed)
    return results


def dataset_tables(study: Study, frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The tables of `analyze` that only a study of those datasets has (scenario parameter
    ``dataset``, `scenario_meta`): ``table3_vs_paper`` when a scenario is PACS-corrupted or
    VLCS-corrupted (Tables 3 and 4, `paper_values.corrupted_vs_paper` of `correlation_by_seed`),
    ``nico_vs_paper`` when one is NICO++ (the NICO++ paper's Tables 2 and 5 after the study's
    model, `paper_values.nico_vs_paper`). Each is there, possibly empty, exactly when the study
    has such a scenario; `frame` is `study_unit_measures`' output.
    """
    scenarios = scenario_meta(study)
    datasets = set(scenarios["dataset"].dropna())
    tables = {}
    if datasets & set(CORRUPTED_DATASETS):
        described = frame.merge(
            scenarios[["scenario", *DATASET_META]], on="scenario", validate="many_to_one"
        )
        tables["table3_vs_paper"] = corrupted_vs_paper(correlation_by_seed(described))
    if NICO_DATASET in datasets:
        errors = errors_table(study, counts=True)
        tables["nico_vs_paper"] = nico_vs_paper(errors, scenarios, study.config.get("model"))
    return tables


def leaderboard_of(
    study: Study | str | Path,
    measures: Sequence[str] | None = None,
    *,
    n_resamples: int = meta.BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Leaderboard:
    """The measure leaderboard of a study (``analyze(study)["leaderboard"]``) as a
    `Leaderboard`, which prints as ``oodeval study measures`` does and shows itself in a
    notebook: the sentence first, then the table.

    `measures` (names or specs): rank exactly these, as ``oodeval study measures --measures``
    does (average and worst+gap are computed too, for the head to head); default: every
    measure `analyze` ranks. `n_resamples` and `seed` are the bootstrap draws of (scenario,
    seed) cells behind the intervals (0: none), as ``--bootstrap`` and ``--seed``.
    """
    study = study if isinstance(study, Study) else load_study(study)
    if measures is None:
        frame, names = study_unit_measures(study), None
    else:
        names = check_measures(list(measures))
        frame = study_unit_measures(study, list(dict.fromkeys([*names, *meta.VERSUS])))
    board = study_leaderboard(correlatable(frame), names, n_resamples=n_resamples, seed=seed)
    return Leaderboard(board, n_resamples)


def _with_extra(base: Sequence[str], extra: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*base, *extra]))


def _measure_names(study: Study, measures: Sequence[str] | None) -> list[str]:
    requested = measures if measures is not None else study.config.get("measures", DEFAULTS)
    for name in requested if measures is None else ():
        try:
            get_measure(name)
        except OodevalError:  # a user's measure: the file that registers it is not loaded
            raise OodevalError(
                f"the study's measures include {name!r}, which no loaded module registers; give "
                "the file that registers it with --imports FILE"
            ) from None
    names = check_measures(requested)
    # what the paper's tables compare is computed from the stored errors whatever the config
    # listed (a config may ask for fewer measures; its units hold every error they need)
    for extra in (*CORRELATION_MEASURES, *ABLATION_MEASURES, "worst", "gap", "scaled_worst"):
        if extra not in names:
            names.append(extra)
    return names


def _with_meta(table: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """`table` with each scenario's family, ratio and scale (from `frame`) after ``scenario``,
    and its dataset and pattern when `frame` has them (`DATASET_META`)."""
    keys = [*_META, *(c for c in DATASET_META if c in frame.columns)]
    meta = frame[keys].drop_duplicates("scenario")
    out = table.merge(meta, on="scenario", how="left", validate="many_to_one")
    rest = [c for c in table.columns if c != "scenario"]
    return out[[*keys, *rest]]


def _text(value: object) -> object:
    """A ``dataset`` or ``pattern`` parameter as text (a list joined with ``-``), or pd.NA."""
    if value is None:
        return pd.NA
    if isinstance(value, list | tuple):
        return "-".join(str(v) for v in value)
    return str(value)


def _scale(value: object) -> object:
    """The Scale parameter as an int, or pd.NA for scenarios without one."""
    if isinstance(value, bool) or value is None:
        return pd.NA
    try:
        return int(value)  # type: ignore[call-overload]  # any value; a bad one is caught below
    except (TypeError, ValueError):
        return pd.NA


def _sort_scenarios(frame: pd.DataFrame, extra: Sequence[str] = ()) -> pd.DataFrame:
    """Paper order: family, Scale, Ratio, then `extra` columns."""
    keys = ["family", "scale", "ratio", "scenario", *extra]
    return frame.sort_values(keys, kind="stable", ignore_index=True)
