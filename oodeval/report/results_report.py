"""Report sections for a long-form results file (the input of `oodeval measures`): the answer
first (which algorithm each measure picks, `oodeval.results.scoring.Scores.answer`), then the
measures, rankings, correlations and per-environment errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from oodeval.measures.domain import REGISTRY, measure_label, undefined_measures
from oodeval.measures.meta import (
    algorithm_ranks,
    answer_parts,
    environment_warning,
    interval_warning,
)
from oodeval.report.figures import Figure, bump_chart, heatmap, lines
from oodeval.report.names import NAME_WIDTH, counted, short_labels
from oodeval.report.page import Section
from oodeval.results.longform import LongResults, read_results
from oodeval.results.scoring import score_results
from oodeval.tables import Table

RANKED = ("average", "worst_plus_gap", "worst", "gap")


def measure_ranks(results: LongResults) -> pd.DataFrame:
    """Seed-averaged measures per algorithm and each algorithm's rank under each (1 = lowest).

    Ranks come from `oodeval.measures.meta.algorithm_ranks`: tied algorithms (equal after
    rounding to `TIE_DECIMALS` decimals) share the better rank.
    """
    names = _defined(results)
    tables = score_results(results, measures=names)
    cols = names + (["ideal"] if "ideal" in tables.measures.columns else [])
    mean = tables.measures.groupby("algorithm", sort=False)[cols].mean()
    mean = mean.reindex(list(results.algorithms))
    out = mean.reset_index()
    for c in cols:
        out[f"rank_{c}"] = algorithm_ranks(mean[c].to_numpy(dtype=float)).astype(int)
    return out


def environment_errors(results: LongResults, split: str) -> pd.DataFrame:
    """Seed-mean error per algorithm (rows) and environment (columns) for `split` loo or all."""
    cube = results.loo if split == "loo" else results.full
    envs = results.given_environments if split == "loo" else results.all_environments
    if cube is None:
        return pd.DataFrame()
    frame = pd.DataFrame(cube.mean(axis=0), index=list(results.algorithms), columns=list(envs))
    frame.index.name = "algorithm"
    return frame


def numeric_environment(name: str) -> float | None:
    """The number an environment's name stands for ("0.25" or "e=0.25" -> 0.25), else None."""
    text = name.split("=", 1)[1] if "=" in name else name
    try:
        return float(text)
    except ValueError:
        return None


def results_sections(path: str | Path, *, percent: bool = False) -> list[Section]:
    """All sections of the report on one results file."""
    results = read_results(path, percent=percent)
    return [
        answer_section(results),
        overview_section(results, path),
        measures_section(results),
        _environment_section(results),
    ]


def overview_section(results: LongResults, path: str | Path) -> Section:
    """What the file holds (algorithms, seeds, environments), its notes and warnings."""
    overview = Section(
        "Overview",
        intro="Leave-one-environment-out (loo) errors of each algorithm on its held-out given "
        "environment, and, when present, errors of the model trained on all given environments "
        "on every environment of E_all (all), which define the ideal measure (Eq. 4 of the "
        "worst+gap paper).",
        facts=[
            ("file", str(path)),
            ("algorithms", list(results.algorithms)),
            (
                "seeds",
                counted(results.seeds, "seed") if results.has_seed else "none (one run each)",
            ),
            ("given environments (N)", f"{len(results.given_environments)}"),
            (
                "environments of E_all",
                f"{len(results.all_environments)}"
                if results.all_environments
                else "none: no 'all' rows, so no ideal measure",
            ),
        ],
    )
    overview.notes.extend(results.notes)
    few_envs = environment_warning(len(results.given_environments))
    if few_envs:
        overview.notes.append(f"Warning: {few_envs}.")
    if undefined_measures(["worst_plus_gap"], len(results.given_environments)):
        overview.notes.append(
            f"worst+gap (Eq. 6) needs at least {REGISTRY['worst_plus_gap'].min_envs} given "
            f"environments; this file has {len(results.given_environments)}, so only average, "
            "worst and gap are shown."
        )
    return overview


def measures_section(results: LongResults) -> Section:
    """Each measure with each algorithm's rank, the bump chart from average to worst+gap, and,
    with the ideal measure, the correlations with it and each measure's choice."""
    ranks = measure_ranks(results)
    measure_cols = [c for c in ranks.columns if c != "algorithm" and not c.startswith("rank_")]
    table = ranks[["algorithm"]].copy()
    for c in measure_cols:
        table[measure_label(c)] = [
            f"{v:.3f} ({r})" for v, r in zip(ranks[c], ranks[f"rank_{c}"], strict=True)
        ]
    measures = Section(
        "Measures and rankings",
        intro="Each measure is an error (lower is better), averaged over seeds. worst+gap = "
        "worst + (worst - best)/(N - 2) (Eq. 6); average is Eq. 2; ideal is the max error of the "
        "model trained on all given environments over E_all (Eq. 4).",
        tables=[Table("Measures per algorithm: value (rank, 1 = lowest error)", table)],
    )
    if len(results.algorithms) < 2:
        measures.notes.append(
            f"Only one algorithm ({results.algorithms[0]}): rankings, the bump chart and "
            "correlations need at least two algorithms."
        )
    elif "rank_worst_plus_gap" in ranks.columns:
        measures.figures.append(_bump(ranks))
        if "ideal" in ranks.columns:
            _add_ideal_tables(measures, results)
    return measures


def _bump(ranks: pd.DataFrame) -> Figure:
    bump = ranks[["algorithm", "rank_average", "rank_worst_plus_gap"]].rename(
        columns={"rank_average": "average", "rank_worst_plus_gap": "worst_plus_gap"}
    )
    return bump_chart(
        bump,
        label="algorithm",
        left="average",
        right="worst_plus_gap",
        key="bump",
        title="How the ranking changes from average to worst+gap",
        caption="Each line is one algorithm: its rank under the average of the LOO errors "
        "(left) and under worst+gap (right); 1 is the lowest error. Crossing lines are "
        "algorithms that the average measure orders differently.",
    )


def _add_ideal_tables(measures: Section, results: LongResults) -> None:
    """The correlations with the ideal measure and each measure's choice, into `measures`."""
    tables = score_results(results, measures=["average", "worst_plus_gap"])
    summary = tables.correlation_summary
    corr = tables.correlations if summary is None else summary
    measures.tables.append(
        Table(
            "Rank correlation with the ideal measure",
            corr,
            "Spearman's rho and Kendall's tau-b across algorithms between "
            "each measure and the ideal measure; closer to 1 means the measure orders "
            "algorithms as the truth does. Over several seeds: mean and std (ddof=1).",
        )
    )
    warning = interval_warning(len(results.algorithms))
    if warning:
        measures.notes.append(f"Warning: {warning}.")
    measures.tables.append(
        Table(
            "Algorithm selected by each measure",
            tables.choices,
            "The algorithm with the lowest value of each measure (ties go to the first "
            "name in sorted order) and its degradation "
            "|R_IDEAL(A*_IDEAL) - R_IDEAL(A*_measure)|.",
        )
    )


def answer_section(results: LongResults) -> Section:
    """The report's opening block: the answer line (which algorithm worst+gap and average pick,
    whether they disagree and, with the ideal measure, which picks its choice)."""
    names: list[str] = [m for m in ("worst_plus_gap", "average") if m in _defined(results)]
    units = score_results(results, measures=names or None).measures
    return answer_block(units, names)


ANSWER_INTRO = "Which algorithm each measure picks, per scenario:"


def answer_block(units: pd.DataFrame, measures: list[str]) -> Section:
    """The Answer section of both reports: `report_answer`'s words, one line per scenario (a
    list under `ANSWER_INTRO`), or one sentence when the table has no scenarios."""
    parts = report_answer(units, measures)
    section = Section("Answer", lead=True, anchor="answer")
    if all(scenario == "" for scenario, _ in parts):
        section.intro = ". ".join(text for _, text in parts)
    else:
        section.intro, section.items = ANSWER_INTRO, parts
    return section


def report_answer(units: pd.DataFrame, measures: list[str]) -> list[tuple[str, str]]:
    """`answer_parts` (one (scenario, answer) pair per scenario) with algorithm and scenario
    names shortened as the page shows them (each at most `NAME_WIDTH` characters, still
    distinct), so a long name costs one line."""
    units = units.copy()
    for column in ("algorithm", "scenario"):
        if column in units.columns:
            units[column] = units[column].astype(str).map(short_labels(units[column], NAME_WIDTH))
    return answer_parts(units, measures or None)


def _defined(results: LongResults) -> list[str]:
    undefined = undefined_measures(RANKED, len(results.given_environments))
    return [m for m in RANKED if m not in undefined]


def _environment_section(results: LongResults) -> Section:
    section = Section(
        "Per-environment errors",
        intro="Where each algorithm fails: errors per environment, averaged over seeds.",
    )
    loo = environment_errors(results, "loo")
    section.figures.append(
        heatmap(
            loo,
            key="heat_loo",
            colorbar="LOO error",
            title="Leave-one-out error per algorithm and held-out environment",
            caption="Row: algorithm; column: the given environment left out in training and tested "
            "on; colour: error (brighter is worse). worst is the brightest cell of a row, best the "
            "darkest, and gap their difference.",
        )
    )
    full = environment_errors(results, "all")
    if full.empty:
        section.notes.append(
            "No 'all' rows: the errors of the model trained on all given "
            "environments, and so the ideal measure, are not available."
        )
        return section
    positions = [numeric_environment(c) for c in full.columns]
    if all(p is not None for p in positions) and len(positions) > 2:
        tidy = full.reset_index().melt(
            id_vars="algorithm", var_name="environment", value_name="error"
        )
        tidy["position"] = [numeric_environment(e) for e in tidy["environment"]]
        section.figures.append(_env_curve(tidy))
    else:
        section.figures.append(
            heatmap(
                full,
                key="heat_all",
                colorbar="error",
                title="Error of the model trained on all given environments, per environment",
                caption="Row: algorithm; column: environment of E_all; colour: error. The ideal "
                "measure of an algorithm is the brightest cell of its row.",
            )
        )
    return section


def _env_curve(tidy: pd.DataFrame) -> Figure:
    return lines(
        tidy,
        x="position",
        y="error",
        hue="algorithm",
        key="env_curve",
        title="Error of the model trained on all given environments across E_all",
        caption="x: the environment's parameter (e.g. e, the probability that colour disagrees "
        "with the label); y: error of each algorithm's full model there. The highest point of a "
        "curve is that algorithm's ideal measure; a curve that climbs towards one end shows the "
        "model relying on the spurious feature.",
        xlabel="environment",
        ylabel="error",
        markers=len(tidy["position"].unique()) <= 25,
    )


__all__ = [
    "ANSWER_INTRO",
    "answer_block",
    "answer_section",
    "environment_errors",
    "measure_ranks",
    "measures_section",
    "numeric_environment",
    "overview_section",
    "report_answer",
    "results_sections",
]
