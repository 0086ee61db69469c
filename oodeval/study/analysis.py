"""The worst+gap paper's analyses (Sections 5-6) computed from a stored study, as DataFrames.

Per unit (scenario, algorithm, seed) the measures come from the stored rows: the leave-one-out
(LOO) errors are each LOO fold's error on its own held-out environment, and the ideal measure
(Eq. 4) is the largest error of the model trained on all given environments (fold ``all``) over
E_all. All math goes through `oodeval.measures` (`domain_measures`, `ideal`, `rank_correlation`,
`select_algorithm`, `selection_degradation`, `mean_std`).

- `table1`: per scenario, mean and std over seeds of Spearman's rho and Kendall's tau between a
  measure and the ideal measure across algorithms (Table 1: worst+gap and average).
- `table5`: the same correlations for worst only, gap only and worst+gap, per scenario and per
  family (Table 5's dataset row = mean over scenarios of the per-scenario seed means).
- `table6`: the algorithm each measure selects, per seed and on the seed-averaged measure.
- `figure6`: selection degradation |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| (Section 6.1).
- `figure7`: mean |R^IDEAL - R^measure| over algorithms and seeds as Scale grows, divided by its
  value at the smallest Scale (Scale 1 in the paper) of the same family and Ratio (Section 6.3).
- `figure1`: ERM against the ideal-best algorithm under each measure (Figure 1, Section 6.4).
- `figure5`: the raw (ideal, measure) pairs of every unit (Figure 5).

`write_analysis(DIR)` writes each as CSV plus one ``analysis.md`` to ``DIR/analysis/``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from oodeval.errors import OodevalError
from oodeval.measures.domain import domain_measures, ideal
from oodeval.measures.meta import (
    mean_std,
    rank_correlation,
    select_algorithm,
    selection_degradation,
)
from oodeval.study.config import DEFAULT_MEASURES as DEFAULTS
from oodeval.study.store import ALL_FOLD, Study, load_study

#: The measures Table 1 compares and the ablation of Table 5.
TABLE1_MEASURES = ("worst_plus_gap", "average")
TABLE5_MEASURES = ("worst_only", "gap_only", "worst_plus_gap")
SELECTION_MEASURES = ("ideal", "worst_plus_gap", "average")
_META = ("scenario", "family", "ratio", "scale")

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


def unit_measures(study: Study, measures: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per finished unit: scenario metadata, the ideal measure and every LOO measure.

    Columns: scenario, family, ratio, scale, algorithm, seed, n_given, ideal, then one column per
    measure (default: the study config's ``measures`` plus ``worst`` and ``gap``). Units whose
    status is ``failed`` are left out. Rows are sorted by scenario order, algorithm and seed.
    """
    names = _measure_names(study, measures)
    done = study.units[study.units["status"] == "done"]
    if done.empty:
        raise OodevalError(f"{study.directory} has no finished units yet; run the study first")
    by_unit = {key: rows for key, rows in study.results.groupby("unit_key", sort=False)}
    records = []
    for unit in done.itertuples(index=False):
        rows = by_unit.get(unit.unit_key)
        if rows is None:
            raise OodevalError(f"unit {unit.unit_key} is marked done but has no result rows")
        loo = rows[(rows["fold"] != ALL_FOLD) & (rows["fold"] == rows["environment"])]
        folds = set(rows.loc[rows["fold"] != ALL_FOLD, "fold"])
        if set(loo["fold"]) != folds or loo["fold"].duplicated().any():
            raise OodevalError(
                f"unit {unit.unit_key}: every leave-one-out fold needs exactly one row on its "
                "own held-out environment"
            )
        full = rows.loc[rows["fold"] == ALL_FOLD, "error"].to_numpy()
        if full.size == 0:
            raise OodevalError(f"unit {unit.unit_key} has no rows of the model trained on all")
        values = domain_measures(loo.sort_values("fold")["error"].to_numpy(), names)
        params = unit.params
        records.append(
            {
                "scenario": unit.scenario,
                "family": unit.family,
                "ratio": str(params.get("ratio", "")),
                "scale": _scale(params.get("scale")),
                "algorithm": unit.algorithm,
                "seed": int(unit.seed),
                "n_given": int(len(loo)),
                "ideal": float(ideal(full)),
                **{k: float(v) for k, v in values.items()},
            }
        )
    frame = pd.DataFrame.from_records(records)
    frame["scale"] = frame["scale"].astype("Int64")
    return _sort_scenarios(frame, ["algorithm", "seed"])


def correlations(frame: pd.DataFrame, measures: Iterable[str]) -> pd.DataFrame:
    """Spearman's rho and Kendall's tau-b with the ideal measure across algorithms.

    One row per (scenario, seed, measure) with ``spearman``, ``kendall`` and ``n_algorithms``;
    `frame` is `unit_measures`' output.
    """
    records = []
    for (_scenario, seed), group in frame.groupby(["scenario", "seed"], sort=False):
        for measure in measures:
            corr = rank_correlation(group[measure].to_numpy(), group["ideal"].to_numpy())
            records.append(
                {
                    **_meta(group),
                    "seed": int(seed),
                    "measure": measure,
                    "spearman": corr["spearman"],
                    "kendall": corr["kendall"],
                    "n_algorithms": int(len(group)),
                }
            )
    return pd.DataFrame.from_records(records)


def table1(frame: pd.DataFrame, measures: Sequence[str] = TABLE1_MEASURES) -> pd.DataFrame:
    """Table 1: per scenario, mean and std over seeds of rho and tau for each measure.

    Columns: scenario, family, ratio, scale, n_seeds, n_algorithms, and for each measure ``m``:
    ``rho_<m>_mean``, ``rho_<m>_std``, ``tau_<m>_mean``, ``tau_<m>_std`` (std with ddof=1; NaN
    for a single seed).
    """
    corr = correlations(frame, measures)
    records = []
    for _scenario, group in corr.groupby("scenario", sort=False):
        row = {**_meta(group), "n_seeds": int(group["seed"].nunique())}
        row["n_algorithms"] = int(group["n_algorithms"].min())
        for measure in measures:
            part = group[group["measure"] == measure]
            for stat, column in (("rho", "spearman"), ("tau", "kendall")):
                mean, std = mean_std(part[column].to_numpy())
                row[f"{stat}_{measure}_mean"] = mean
                row[f"{stat}_{measure}_std"] = std
        records.append(row)
    return _sort_scenarios(pd.DataFrame.from_records(records))


def table1_vs_paper(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 next to the paper's numbers for the SR-CMNIST scenarios (others dropped)."""
    columns = ["scenario", "scale", "ratio"] + [
        f"{prefix}{stat}_{m}"
        for stat in ("rho", "tau")
        for m in ("worst_plus_gap", "average")
        for prefix in ("", "paper_")
    ]
    rows = []
    for row in table.itertuples(index=False):
        known = row.family == "sr-cmnist" and not pd.isna(row.scale)
        ref = PAPER_TABLE1.get((int(row.scale), row.ratio)) if known else None
        if ref is None:
            continue
        rows.append(
            {
                "scenario": row.scenario,
                "scale": row.scale,
                "ratio": row.ratio,
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


def table5(frame: pd.DataFrame, measures: Sequence[str] = TABLE5_MEASURES) -> pd.DataFrame:
    """Table 5: mean rho and tau (over seeds) of worst only, gap only and worst+gap.

    One row per scenario, then one row per family with ``scenario = "<family> (mean)"`` holding the
    mean over that family's scenarios of the per-scenario means (how the paper's SR-CMNIST row
    relates to its Table 1). Columns ``rho_<m>``, ``tau_<m>`` per measure.
    """
    t1 = table1(frame, measures)
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


def table6(frame: pd.DataFrame, measures: Sequence[str] = SELECTION_MEASURES) -> pd.DataFrame:
    """Table 6: the algorithm each measure selects (argmin), per seed and on the seed average.

    Long format: scenario, family, ratio, scale, seed (an int, or ``"mean"`` for the selection on
    each algorithm's measure averaged over seeds), measure, selected, tied (``|``-joined names
    that tie at the minimum), matches_ideal. Only algorithms finished for every seed of a
    scenario enter the seed-average.
    """
    records = []
    for _scenario, group in frame.groupby("scenario", sort=False):
        pieces = [(int(seed), part) for seed, part in group.groupby("seed", sort=True)]
        complete = group.groupby("algorithm")["seed"].nunique()
        complete = complete[complete == group["seed"].nunique()].index
        averaged = (
            group[group["algorithm"].isin(complete)]
            .groupby("algorithm", sort=True)[list(measures)]
            .mean()
            .reset_index()
        )
        pieces.append(("mean", averaged))
        for seed, part in pieces:
            names = part["algorithm"].tolist()
            chosen = {m: select_algorithm(part[m].to_numpy(), names) for m in measures}
            for measure in measures:
                records.append(
                    {
                        **_meta(group),
                        "seed": seed,
                        "measure": measure,
                        "selected": chosen[measure].name,
                        "tied": "|".join(chosen[measure].tied),
                        "matches_ideal": chosen[measure].name == chosen["ideal"].name
                        if "ideal" in chosen
                        else np.nan,
                    }
                )
    return pd.DataFrame.from_records(records)


def selection_agreement(selections: pd.DataFrame) -> pd.DataFrame:
    """How often each measure selects the ideal-best algorithm (the counts of Section 6.5).

    Columns: measure, per_seed_matches, per_seed_total, seed_average_matches, seed_average_total.
    """
    per_seed = selections[selections["seed"] != "mean"]
    averaged = selections[selections["seed"] == "mean"]
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


def figure6(frame: pd.DataFrame, measures: Sequence[str] = TABLE1_MEASURES) -> pd.DataFrame:
    """Figure 6: selection degradation per scenario, mean and std over seeds (Section 6.1).

    For each seed: |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| over the algorithms of that seed.
    Columns: scenario, family, ratio, scale, measure, degradation_mean, degradation_std, n_seeds.
    """
    records = []
    for _scenario, group in frame.groupby("scenario", sort=False):
        for measure in measures:
            values = [
                selection_degradation(
                    part[measure].to_numpy(), part["ideal"].to_numpy(), part["algorithm"].tolist()
                )
                for _seed, part in group.groupby("seed", sort=True)
            ]
            mean, std = mean_std(values)
            records.append(
                {
                    **_meta(group),
                    "measure": measure,
                    "degradation_mean": mean,
                    "degradation_std": std,
                    "n_seeds": len(values),
                }
            )
    return _sort_scenarios(pd.DataFrame.from_records(records), ["measure"])


def figure7(frame: pd.DataFrame, measures: Sequence[str] = TABLE1_MEASURES) -> pd.DataFrame:
    """Figure 7: |R^IDEAL - R^measure| as Scale grows, normalised to the smallest Scale.

    For each family and Ratio (scenarios that differ only in Scale) and each Scale: the mean over
    algorithms and seeds of |ideal - measure| (``algorithm = "(all)"``), and per algorithm the
    mean over seeds. ``normalized`` divides by the same quantity at the group's smallest Scale
    (``reference_scale``; Scale 1 in the paper). Scenarios without a Scale are left out.
    Columns: family, ratio, scale, n_given, measure, algorithm, abs_diff, normalized,
    reference_scale.
    """
    scaled = frame[frame["scale"].notna()]
    records = []
    for (family, ratio), group in scaled.groupby(["family", "ratio"], sort=True):
        reference = int(group["scale"].min())
        for measure in measures:
            diff = group.assign(abs_diff=(group["ideal"] - group[measure]).abs())
            overall = diff.groupby("scale")["abs_diff"].mean()
            per_algorithm = diff.groupby(["algorithm", "scale"])["abs_diff"].mean()
            n_given = diff.groupby("scale")["n_given"].first()
            for scale, value in overall.items():
                records.append(
                    _fig7_row(
                        family,
                        ratio,
                        scale,
                        n_given[scale],
                        measure,
                        "(all)",
                        value,
                        overall[reference],
                        reference,
                    )
                )
            for (algorithm, scale), value in per_algorithm.items():
                base = per_algorithm.get((algorithm, reference), np.nan)
                records.append(
                    _fig7_row(
                        family,
                        ratio,
                        scale,
                        n_given[scale],
                        measure,
                        algorithm,
                        value,
                        base,
                        reference,
                    )
                )
    columns = [
        "family",
        "ratio",
        "scale",
        "n_given",
        "measure",
        "algorithm",
        "abs_diff",
        "normalized",
        "reference_scale",
    ]
    out = pd.DataFrame.from_records(records, columns=columns)
    return out.sort_values(
        ["family", "ratio", "measure", "algorithm", "scale"], kind="stable", ignore_index=True
    )


def figure1(
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
    records = []
    for _scenario, group in frame.groupby("scenario", sort=False):
        if baseline not in set(group["algorithm"]):
            continue
        averaged = group.groupby("algorithm", sort=True)["ideal"].mean()
        best = select_algorithm(averaged.to_numpy(), averaged.index.tolist()).name
        for measure in measures:
            base_mean, base_std = mean_std(group.loc[group["algorithm"] == baseline, measure])
            best_mean, best_std = mean_std(group.loc[group["algorithm"] == best, measure])
            records.append(
                {
                    **_meta(group),
                    "measure": measure,
                    "baseline": baseline,
                    "baseline_mean": base_mean,
                    "baseline_std": base_std,
                    "best_algorithm": best,
                    "best_mean": best_mean,
                    "best_std": best_std,
                }
            )
    columns = [*_META, "measure", "baseline", "baseline_mean", "baseline_std"]
    columns += ["best_algorithm", "best_mean", "best_std"]
    return pd.DataFrame.from_records(records, columns=columns)


def figure5(frame: pd.DataFrame, measures: Sequence[str] = TABLE1_MEASURES) -> pd.DataFrame:
    """Figure 5: raw (ideal, measure) values of every unit, one row per unit."""
    keep = [*_META, "algorithm", "seed", "ideal", *measures]
    return frame[keep].reset_index(drop=True)


def analyze(study: Study | str | Path) -> dict[str, pd.DataFrame]:
    """Every analysis of a study, by name (``units``, ``table1``, ``table1_vs_paper``, ...)."""
    study = study if isinstance(study, Study) else load_study(study)
    frame = unit_measures(study)
    have = set(frame.columns)
    needed = set(TABLE1_MEASURES) | set(TABLE5_MEASURES)
    if not needed <= have:
        raise OodevalError(
            f"the study's measures lack {sorted(needed - have)}; the paper's analyses need "
            f"{sorted(needed)}"
        )
    t1 = table1(frame)
    t6 = table6(frame)
    return {
        "units": frame,
        "table1": t1,
        "table1_vs_paper": table1_vs_paper(t1),
        "table5": table5(frame),
        "table6": t6,
        "selection_agreement": selection_agreement(t6),
        "figure6": figure6(frame),
        "figure7": figure7(frame),
        "figure1": figure1(frame),
        "figure5": figure5(frame),
    }


def write_analysis(
    directory: Study | str | Path, *, exclude_damaged: bool = False
) -> dict[str, Path]:
    """Compute `analyze` for the study in `directory`; write CSVs and ``analysis.md``.

    Returns {name: path} of the written files (in ``directory/analysis/``). A damaged store is
    refused unless ``exclude_damaged`` (see `load_study`); then every file starts with the
    study's integrity notes (``# `` comment lines in the CSVs: read them with
    ``pd.read_csv(path, comment="#")``).
    """
    study = (
        directory
        if isinstance(directory, Study)
        else load_study(directory, exclude_damaged=exclude_damaged)
    )
    results = analyze(study)
    out_dir = Path(study.directory) / "analysis"
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = "".join(f"# WARNING: {note}\n" for note in study.integrity_notes())
    written = {}
    for name, frame in results.items():
        path = out_dir / f"{name}.csv"
        path.write_text(notes + frame.to_csv(index=False, float_format="%.6g"), encoding="utf-8")
        written[name] = path
    path = out_dir / "analysis.md"
    path.write_text(analysis_markdown(study, results), encoding="utf-8")
    written["markdown"] = path
    return written


def analysis_markdown(study: Study, results: dict[str, pd.DataFrame]) -> str:
    """One markdown document with every table of `analyze`."""
    counts = study.counts()
    lines = [
        f"# Study analysis: {study.config.get('name', 'study')}",
        "",
        f"Units: {counts['done']} done, {counts['failed']} failed, "
        + (f"{counts['damaged']} damaged (excluded), " if counts.get("damaged") else "")
        + f"{counts['pending']} pending "
        f"(of {counts['planned']}). Source: `{study.config.get('source')}`, steps "
        f"{study.config.get('steps')}, model `{study.config.get('model')}`, precision "
        f"{(study.config.get('trainer') or {}).get('precision', 'fp32')}.",
        "",
    ]
    for note in study.integrity_notes():
        lines += [f"**Warning:** {note}", ""]
    digests = {v.get("oodeval_source") for v in study.units["versions"]} - {None}
    if len(digests) > 1:
        lines += [
            f"Warning: the units were computed by {len(digests)} different versions of the "
            "oodeval sources (see `versions` in the units table); results may not be comparable.",
            "",
        ]
    failed = study.units[study.units["status"] == "failed"]
    if len(failed):
        lines += ["Failed units (left out of every analysis):", ""]
        lines += [f"- {u.unit_key}: {u.failure}" for u in failed.itertuples(index=False)]
        lines.append("")
    t1 = results["table1"]
    lines += [
        "## Table 1: correlation with the ideal measure (mean ± std over seeds)",
        "",
        markdown_table(
            pd.DataFrame(
                {
                    "scenario": t1["scenario"],
                    "seeds": t1["n_seeds"],
                    "algorithms": t1["n_algorithms"],
                    **{
                        f"{stat} {label}": _pm(t1[f"{stat}_{m}_mean"], t1[f"{stat}_{m}_std"])
                        for stat in ("rho", "tau")
                        for m, label in (("worst_plus_gap", "W+G"), ("average", "AVG"))
                    },
                }
            )
        ),
        "",
    ]
    if len(results["table1_vs_paper"]):
        lines += [
            "### Table 1 next to the paper's means",
            "",
            markdown_table(results["table1_vs_paper"]),
            "",
        ]
    lines += [
        "## Table 5: worst only, gap only, worst+gap (mean over seeds)",
        "",
        markdown_table(results["table5"].drop(columns=["family"], errors="ignore")),
        "",
    ]
    t6 = results["table6"]
    wide = t6.assign(
        column=t6["seed"].map(lambda s: f"seed {s}" if s != "mean" else "average")
        + ": "
        + t6["measure"]
    )
    wide = wide.pivot_table(
        index="scenario", columns="column", values="selected", aggfunc="first", sort=False
    ).reset_index()
    lines += [
        "## Table 6: selected algorithm per measure",
        "",
        markdown_table(wide),
        "",
        markdown_table(results["selection_agreement"]),
        "",
    ]
    lines += [
        "## Figure 6: selection degradation (mean ± std over seeds)",
        "",
        markdown_table(results["figure6"].drop(columns=["family"], errors="ignore")),
        "",
    ]
    f7 = results["figure7"]
    lines += [
        "## Figure 7: |ideal - measure| by Scale, normalised to the smallest Scale",
        "",
        markdown_table(f7[f7["algorithm"] == "(all)"].drop(columns=["algorithm"], errors="ignore")),
        "",
    ]
    lines += [
        "## Figure 1: ERM vs the ideal-best algorithm",
        "",
        markdown_table(results["figure1"].drop(columns=["family"], errors="ignore")),
        "",
    ]
    lines += ["Figure 5's raw pairs are in `figure5.csv`; per-unit measures in `units.csv`.", ""]
    return "\n".join(lines)


def markdown_table(frame: pd.DataFrame, *, digits: int = 3) -> str:
    """A GitHub-flavoured markdown table of `frame` (floats rounded to `digits`).

    >>> print(markdown_table(pd.DataFrame({"a": [1.23456], "b": ["x"]})))
    | a | b |
    | --- | --- |
    | 1.235 | x |
    """
    if frame.empty:
        return "(no rows)"

    def cell(value: object) -> str:
        if value is pd.NA:
            return ""
        if isinstance(value, float | np.floating):
            return "nan" if math.isnan(value) else f"{value:.{digits}f}"
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _pm(means: pd.Series, stds: pd.Series) -> list[str]:
    return [
        f"{m:.3f} ± {s:.3f}" if not math.isnan(s) else f"{m:.3f}"
        for m, s in zip(means, stds, strict=True)
    ]


def _fig7_row(family, ratio, scale, n_given, measure, algorithm, value, base, reference) -> dict:
    return {
        "family": family,
        "ratio": ratio,
        "scale": int(scale),
        "n_given": int(n_given),
        "measure": measure,
        "algorithm": algorithm,
        "abs_diff": float(value),
        "normalized": float(value / base) if base and not math.isnan(base) else np.nan,
        "reference_scale": reference,
    }


def _measure_names(study: Study, measures: Sequence[str] | None) -> list[str]:
    names = list(measures if measures is not None else study.config.get("measures", DEFAULTS))
    for extra in ("worst", "gap"):
        if extra not in names:
            names.append(extra)
    return names


def _meta(group: pd.DataFrame) -> dict:
    first = group.iloc[0]
    return {k: first[k] for k in _META}


def _scale(value: object) -> object:
    """The Scale parameter as an int, or pd.NA for scenarios without one."""
    if isinstance(value, bool) or value is None:
        return pd.NA
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return pd.NA


def _sort_scenarios(frame: pd.DataFrame, extra: Sequence[str] = ()) -> pd.DataFrame:
    """Paper order: family, Scale, Ratio, then `extra` columns."""
    keys = ["family", "scale", "ratio", "scenario", *extra]
    return frame.sort_values(keys, kind="stable", ignore_index=True)
