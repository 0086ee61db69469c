"""Report sections for a study folder: the answer first (which algorithm each measure picks, per
scenario), then the verdict (does worst+gap order algorithms like the ideal measure better than
average, how sure are we, and does either track it well), then the worst+gap paper's tables and
figures on your run."""

from __future__ import annotations

import datetime as _dt
import json
import warnings
from pathlib import Path

import pandas as pd

from oodeval.errors import OodevalError
from oodeval.measures.domain import measure_label
from oodeval.measures.meta import TIE_SEPARATOR, leaderboard_sentence, verdict_sentence
from oodeval.report.columns import beside_paper_view, human_columns
from oodeval.report.figures import OTHER_STYLES, grouped_bars, lines, scatter_with_identity
from oodeval.report.names import counted
from oodeval.report.page import Section
from oodeval.report.results_report import answer_block, numeric_environment
from oodeval.study.analysis import (
    BOUNDS_SENTENCE,
    CORRELATION_MEASURES,
    NICO_PAPER_NOTE,
    PAPER_REFERENCES,
    SELECTION_MEASURES,
    TABLE3_PAPER_NOTE,
    TABLE5_PAPER_NOTE,
    VERDICT_FOOTNOTE,
    analyze,
    completeness_sentence,
    measure_version_notes,
    verdict_view,
    verdict_warning,
)
from oodeval.study.analysis.leaderboard import (
    LEADERBOARD_TITLE,
    leaderboard_footnote,
    leaderboard_view,
)
from oodeval.study.store import ALL_FOLD, StoreIntegrityWarning, Study, is_export, load_study
from oodeval.tables import Table, plus_minus

MAX_CURVE_PANELS = 12


def _scenario_label(scenario: str) -> str:
    """'sr-cmnist/ratio=3:1/scale=1' -> 'ratio=3:1 scale=1' (the family is said elsewhere)."""
    parts = scenario.split("/")
    return " ".join(parts[1:]) if len(parts) > 1 else scenario


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as a figure shows it: its scenarios by `_scenario_label`, its measures by
    `measure_label` (where it has those columns)."""
    labels = {"scenario": _scenario_label, "measure": measure_label}
    return frame.assign(**{c: frame[c].map(f) for c, f in labels.items() if c in frame})


def _wall_time(units: pd.DataFrame) -> str:
    if units.empty:
        return "-"
    start = pd.to_datetime(units["started"], utc=True, errors="coerce").min()
    end = pd.to_datetime(units["finished"], utc=True, errors="coerce").max()
    if pd.isna(start) or pd.isna(end):
        return "-"
    compute = sum(float((t or {}).get("wall", 0.0)) for t in units["timings"])
    span = _dt.timedelta(seconds=round((end - start).total_seconds()))
    return f"{span} from first start to last finish; {compute / 60:.1f} unit-minutes of compute"


def verdict_section(
    study: Study, results: dict[str, pd.DataFrame] | None, problem: str = ""
) -> Section:
    """The report's opening block: the verdict sentence, the units it uses, the table.

    `results` is `analyze`'s output, or None with `problem` saying why there is none yet.
    """
    section = Section("Verdict", lead=True, anchor="verdict")
    section.facts.append(("units", completeness_sentence(study)))
    if study.data_note():
        section.notes.append(f"Note: {study.data_note()}.")
    if results is None:
        section.intro = f"No verdict yet: {problem}"
        return section
    verdicts = results["verdict"]
    section.intro = verdict_sentence(verdicts, *CORRELATION_MEASURES)
    section.tables.append(
        Table(
            "Per scenario: Spearman's rho with the ideal measure, 95% bootstrap intervals",
            verdict_view(verdicts),
            VERDICT_FOOTNOTE,
            widths={"worst+gap vs average": 90},
        )
    )
    warning = verdict_warning(verdicts)
    if warning:
        section.notes.append(f"Warning: {warning}.")
    section.notes += [f"Warning: {note}" for note in study.integrity_notes()]
    return section


def answer_section(results: dict[str, pd.DataFrame]) -> Section:
    """The report's first block: per scenario, which algorithm worst+gap and average pick on
    their seed means, whether they disagree, and whether either picks the ideal measure's
    choice (`oodeval.measures.meta.answer_line`; Table 6's "mean" picks), names shortened
    as the page shows them; one line per scenario (`answer_block`)."""
    units = results["units"]
    return answer_block(units, [m for m in CORRELATION_MEASURES if m in units])


def summary_section(study: Study) -> Section:
    """Config, unit counts, wall time, versions and failures of a stored study."""
    cfg = study.config
    counts = study.counts()
    versions: dict[str, object] = {}
    for v in study.units.get("versions", pd.Series(dtype=object)):
        versions.update(v or {})
    scenarios = [", ".join(f"{k}={v}" for k, v in s.items()) for s in cfg.get("scenarios", [])]
    section = Section(
        "Run summary",
        intro="A unit is one (scenario, algorithm, seed): N leave-one-out models, each tested on "
        "the given environment it did not see, and one model trained on all given environments, "
        "tested on every environment of E_all.",
        facts=[
            ("study", [str(cfg.get("name", ""))]),
            ("folder", str(study.directory)),
            (
                "units",
                f"{counts['done']} done, {counts['failed']} failed, "
                + (f"{counts['damaged']} damaged (excluded), " if counts.get("damaged") else "")
                + f"{counts['pending']} pending of {counts['planned']} planned",
            ),
            ("backend", str(cfg.get("backend") or "oodeval.study.trainer_backend (the default)")),
            ("data source", str(cfg.get("source", ""))),
            ("algorithms", [str(a) for a in cfg.get("algorithms", [])]),
            ("seeds", counted(cfg.get("seeds", []), "seed")),
            ("scenarios", scenarios),
            (
                "training",
                f"{cfg.get('steps')} steps, model {cfg.get('model')}, hyperparameters "
                f"{cfg.get('hparams_mode', 'default')}, precision "
                f"{(cfg.get('trainer') or {}).get('precision', 'fp32')}",
            ),
            ("wall time", _wall_time(study.units)),
            ("versions", ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "-"),
        ],
    )
    section.notes += [f"Warning: {note}" for note in study.integrity_notes()]
    section.notes += [f"Warning: {note}." for note in study.code_notes()]
    if study.outside_note():
        section.notes.append(f"{study.outside_note()}.")
    failed = study.units[study.units["status"] == "failed"]
    if not failed.empty:
        section.notes.append(
            f"{len(failed)} unit(s) failed; they are left out of every analysis below."
        )
        section.tables.append(
            Table(
                "Failed units",
                failed[["scenario", "algorithm", "seed", "failure"]].reset_index(drop=True),
                "The reason each failed unit gave; re-run with --retry-failed after fixing it.",
                widths={"failure": 160},
            )
        )
    if counts["pending"]:
        section.notes.append(
            f"{counts['pending']} unit(s) have not run yet: the study is incomplete, and the "
            "numbers below cover the finished units only. Re-run the same command to resume."
        )
    return section


def _pm(frame: pd.DataFrame, stem: str) -> list[str]:
    """``mean ± std`` of columns ``<stem>_mean`` and ``<stem>_std``; ``–`` for a missing mean."""
    return plus_minus(frame[f"{stem}_mean"], frame[f"{stem}_std"], missing="–")


def table_sections(results: dict[str, pd.DataFrame]) -> Section:
    """Tables 1, 5 and 6 of the worst+gap paper, computed on this study."""
    t5 = results["table5"]
    ablated = [c[4:] for c in t5.columns if c.startswith("rho_")]  # the paper's three, and yours
    rename = {
        f"{stat}_{m}": f"{stat} {measure_label(m)}" for stat in ("rho", "tau") for m in ablated
    }
    tables = _table1_tables(results)
    tables.append(
        Table(
            f"{PAPER_REFERENCES['table5']}: worst only, gap only and worst+gap",
            t5[["scenario", *rename]].rename(columns=rename),
            "Seed-mean correlations with the ideal measure for the two terms of Eq. 6 and their "
            "sum; the family rows average the scenarios.",
        )
    )
    tables += _beside_paper(results, "table5_vs_paper", TABLE5_PAPER_NOTE)
    tables.append(
        Table(
            f"{PAPER_REFERENCES['table6']}: the algorithm each measure selects",
            table6_view(results["table6"]),
            "argmin of each measure per seed, and on the seed-averaged measure (seed 'mean'); "
            "ties go to the first name in sorted order and are marked with *.",
        )
    )
    tables.append(
        Table(
            "How often each measure picks the ideal measure's choice",
            results["selection_agreement"],
        )
    )
    tables += _beside_paper(
        results,
        "selection_vs_paper",
        "Counted on the SR-CMNIST scenarios, beside Section 6.5's counts (paper_*: 12 Scale x "
        "Ratio scenarios x 3 seeds, 14 algorithms).",
    )
    tables += _beside_paper(results, "bounds", BOUNDS_SENTENCE)
    if "measure_digests" in results:
        tables.append(
            Table(
                "The measures' code",
                results["measure_digests"],
                "SHA-256 (16 hex digits) of the source of the module defining each measure "
                "(oodeval.measures.measure_code_digest): the code these numbers were computed by.",
            )
        )
    for table in tables:
        table.frame = human_columns(table.frame)
    return Section(
        "Tables",
        intro="The measures are computed per unit from the stored errors; all math goes through "
        "oodeval.measures.",
        tables=tables,
    )


def _beside_paper(results: dict[str, pd.DataFrame], name: str, caption: str) -> list[Table]:
    """Table `name` of `analyze` (a ``*_vs_paper`` table or ``bounds``), when it has rows."""
    table = results.get(name)
    if table is None or table.empty:
        return []
    titles = {
        "table3_vs_paper": f"{PAPER_REFERENCES[name]}: each seed beside the paper's",
        "table5_vs_paper": f"{PAPER_REFERENCES[name]} aggregated as the paper's rows, beside it",
        "selection_vs_paper": f"{PAPER_REFERENCES[name]}: the counts beside the paper's",
        "bounds": f"{PAPER_REFERENCES[name]}: how often the ideal measure is within the bound",
    }
    shown = table.drop(columns=["family"], errors="ignore") if name == "bounds" else table
    return [Table(titles[name], beside_paper_view(shown), caption)]


def _table1_tables(results: dict[str, pd.DataFrame]) -> list[Table]:
    """Table 1 (mean ± std over seeds) and, for the scenarios the paper has, its numbers: Tables
    1 and 2 of the worst+gap paper, its Tables 3 and 4 per seed (PACS-/VLCS-corrupted), and the
    NICO++ paper's Table 2 or 5 (NICO++ scenarios)."""
    t1 = results["table1"]
    compared = [c[4:-5] for c in t1.columns if c.startswith("rho_") and c.endswith("_mean")]
    view1 = pd.DataFrame(
        {
            "scenario": t1["scenario"],
            **{
                f"{stat} {measure_label(m)}": _pm(t1, f"{stat}_{m}")
                for stat in ("rho", "tau")
                for m in compared
            },
            "seeds": t1["n_seeds"],
            "algorithms": t1["n_algorithms"],
        }
    )
    tables = [
        Table(
            f"{PAPER_REFERENCES['table1']}: correlation with the ideal measure",
            view1,
            "Spearman's rho and Kendall's tau-b across algorithms between each measure and the "
            "ideal measure (Eq. 4), per scenario; mean ± std (ddof=1) over seeds. Higher means the"
            " measure orders algorithms as their true worst-case error does.",
        )
    ]
    paper = results.get("table1_vs_paper")
    if paper is not None and not paper.empty:
        tables.append(
            Table(
                f"{PAPER_REFERENCES['table1_vs_paper']} next to the paper's numbers",
                beside_paper_view(paper),
                "This study's means beside Table 1 of the worst+gap paper (14 algorithms, 3 "
                "seeds). Differences in algorithms, steps and data size move the numbers; the "
                "paper's claim is that worst+gap correlates better than average in every scenario.",
            )
        )
    tables += _beside_paper(results, "table3_vs_paper", TABLE3_PAPER_NOTE)
    return tables + _nico_tables(results)


def _nico_tables(results: dict[str, pd.DataFrame]) -> list[Table]:
    """The NICO++ paper's Table 2 or 5 beside the study, one table per NICO++ scenario (each
    has its own target domains: the other scenarios' domain columns are left out)."""
    nico = results.get("nico_vs_paper")
    if nico is None or nico.empty:
        return []
    tables = []
    for scenario, rows in nico.groupby("scenario", sort=False):
        unused = [
            c
            for c in rows.columns
            if c.startswith(("acc_", "paper_acc_"))
            and rows[c].isna().all()
            and rows[c.removeprefix("paper_")].isna().all()
        ]
        source = rows["paper_table"].iloc[0]
        where = f"{source}, split {rows['split'].iloc[0]}" if source else "no table of the paper"
        tables.append(
            Table(
                f"{PAPER_REFERENCES['nico_vs_paper']}: {scenario} ({where})",
                beside_paper_view(rows.drop(columns=["scenario", *unused])),
                NICO_PAPER_NOTE,
            )
        )
    return tables


def leaderboard_section(board: pd.DataFrame) -> Section:
    """The measure leaderboard: which measure tracks the ideal measure best over the cells."""
    table = Table(LEADERBOARD_TITLE, leaderboard_view(board), leaderboard_footnote())
    return Section(
        PAPER_REFERENCES["leaderboard"],
        intro=leaderboard_sentence(board.to_dict("list")),
        tables=[table],
        anchor="leaderboard",
    )


def table6_view(t6: pd.DataFrame) -> pd.DataFrame:
    """Table 6 as the paper prints it: one row per (scenario, seed), one column per measure."""
    tied = t6["tied"].fillna("").str.contains(TIE_SEPARATOR, regex=False)
    cell = t6["selected"].where(~tied, t6["selected"] + "*")
    wide = t6.assign(cell=cell).pivot_table(
        index=["scenario", "seed"], columns="measure", values="cell", aggfunc="first", sort=False
    )
    order = [m for m in SELECTION_MEASURES if m in wide.columns]
    order += [m for m in dict.fromkeys(t6["measure"]) if m not in order]  # --measures
    wide = wide[order].rename(columns=measure_label).reset_index()
    wide.columns.name = None
    return wide


def figure5_data(results: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Long form of Figure 5: (scale, measure, ideal, value) for worst+gap, average and the
    measures added with ``--measures``."""
    raw = results["figure5"]
    frames = []
    for measure in list(raw.columns[list(raw.columns).index("ideal") + 1 :]):
        part = raw[["scenario", "scale", "algorithm", "seed", "ideal"]].copy()
        part["measure"] = measure_label(measure)
        part["value"] = raw[measure].to_numpy()
        frames.append(part)
    data = pd.concat(frames, ignore_index=True)
    data["scale"] = data["scale"].astype(str)
    return data


def figure7_data(results: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Figure 7: mean over algorithms of the normalised |ideal - measure| per N."""
    f7 = results["figure7"]
    if f7.empty:
        return f7
    grouped = f7.groupby(["family", "ratio", "scale", "n_given", "measure"], sort=True)
    data = grouped["normalized"].mean().reset_index()
    data["measure"] = data["measure"].map(measure_label)
    data["ratio"] = data["ratio"].astype(str)
    return data


def figure1_data(results: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Figure 1: ERM and the ideal-best algorithm's mean value of each measure per scenario."""
    f1 = results["figure1"]
    rows = []
    for r in f1.itertuples(index=False):
        label = f"{_scenario_label(r.scenario)}\nbest: {r.best_algorithm}"
        measure = measure_label(r.measure)
        rows.append(
            {
                "scenario": label,
                "measure": measure,
                "who": r.baseline,
                "algorithm": r.baseline,
                "value": r.baseline_mean,
            }
        )
        rows.append(
            {
                "scenario": label,
                "measure": measure,
                "who": "ideal-best algorithm",
                "algorithm": r.best_algorithm,
                "value": r.best_mean,
            }
        )
    return pd.DataFrame(rows)


def environment_curves(study: Study) -> pd.DataFrame:
    """Seed-mean error of each algorithm's full model per environment: (scenario, algorithm, e)."""
    done = study.units.loc[study.units["status"] == "done", ["unit_key", "scenario", "algorithm"]]
    full = study.results[study.results["fold"] == ALL_FOLD].merge(done, on="unit_key")
    if full.empty:
        return pd.DataFrame(columns=["scenario", "algorithm", "environment", "e", "error"])
    full = full.assign(e=[numeric_environment(str(n)) for n in full["environment"]])
    if full["e"].isna().any():
        return pd.DataFrame(columns=["scenario", "algorithm", "environment", "e", "error"])
    curves = full.groupby(["scenario", "algorithm", "environment", "e"], sort=False)["error"]
    return curves.mean().reset_index().sort_values(["scenario", "algorithm", "e"])


def figure_section(study: Study, results: dict[str, pd.DataFrame]) -> Section:
    """Figures 5, 6, 7, 1 and the per-environment error curves."""
    section = Section("Figures")
    _add_figure5(section, results)
    _add_figure6(section, results)
    _add_figure7(section, results)
    _add_figure1(section, results)
    _add_environment_curves(section, study)
    return section


def _add_figure5(section: Section, results: dict[str, pd.DataFrame]) -> None:
    f5 = figure5_data(results)
    section.figures.append(
        scatter_with_identity(
            f5,
            x="ideal",
            y="value",
            panel="scale",
            hue="measure",
            key="figure5",
            title=f"{PAPER_REFERENCES['figure5']}: each measure against the ideal measure, "
            "per Scale",
            caption="One point per unit (algorithm, seed, ratio). A trustworthy measure lies along"
            " the dashed y = x line and rises with the ideal error; the average measure "
            "tends to stay flat while the true worst-case error varies.",
            xlabel="ideal measure (max error over E_all)",
            ylabel="measure value",
        )
    )


def _add_figure6(section: Section, results: dict[str, pd.DataFrame]) -> None:
    f6 = _labelled(results["figure6"])
    if not f6.empty:
        section.figures.append(
            grouped_bars(
                f6,
                category="scenario",
                group="measure",
                value="degradation_mean",
                key="figure6",
                title=f"{PAPER_REFERENCES['figure6']}: what choosing by each measure costs",
                caption="Selection degradation |R_IDEAL(A*_IDEAL) - R_IDEAL(A*_measure)| per "
                "scenario, mean over seeds: how much worse (in true worst-case error) the "
                "algorithm picked by the measure is than the truly best one. 0 means the "
                "measure picked it.",
                ylabel="degradation (error)",
            )
        )


def _add_figure7(section: Section, results: dict[str, pd.DataFrame]) -> None:
    f7 = figure7_data(results)
    if f7["scale"].nunique() > 1 if not f7.empty else False:
        section.figures.append(
            lines(
                f7,
                x="n_given",
                y="normalized",
                hue="measure",
                panel="ratio",
                key="figure7",
                title=f"{PAPER_REFERENCES['figure7']}: distance to the ideal measure as N grows",
                caption="Mean over algorithms and seeds of |ideal - measure|, divided by its value"
                " at the smallest Scale, against the number of given environments N. A "
                "measure that converges to the truth falls below 1 as N grows.",
                xlabel="N (given environments)",
                ylabel="|ideal - measure| (normalised)",
            )
        )
    else:
        section.notes.append("Figure 7 needs scenarios at two or more Scales; this study has one.")


def _add_figure1(section: Section, results: dict[str, pd.DataFrame]) -> None:
    f1 = figure1_data(results)
    if f1.empty:
        section.notes.append("Figure 1 needs ERM among the algorithms.")
    else:
        section.figures.append(
            grouped_bars(
                f1,
                category="scenario",
                group="who",
                value="value",
                panel="measure",
                key="figure1",
                first_style=OTHER_STYLES,
                title=f"{PAPER_REFERENCES['figure1']}: ERM against the truly best algorithm "
                "under each measure",
                caption="Each panel is one measure; bars are ERM's value and that of the algorithm"
                " with the lowest seed-averaged ideal measure, per scenario (mean over "
                "seeds). Under the ideal measure the gap is real; a trustworthy measure "
                "shows it too, while the average measure tends to hide it.",
                ylabel="measure value (error)",
            )
        )


def _add_environment_curves(section: Section, study: Study) -> None:
    curves = environment_curves(study)
    scenarios = list(dict.fromkeys(curves["scenario"]))
    if scenarios:
        shown = _labelled(curves[curves["scenario"].isin(scenarios[:MAX_CURVE_PANELS])])
        section.figures.append(
            lines(
                shown,
                x="e",
                y="error",
                hue="algorithm",
                panel="scenario",
                key="env_curves",
                title="Error of each algorithm's full model across E_all",
                caption="x: the environment e (probability that the colour disagrees with the "
                "label); y: error of the model trained on all given environments, mean over seeds. "
                "Training environments sit near e = 0.1-0.2 and 0.8-0.9; a curve that climbs "
                "towards e = 0 or 1 shows the model relying on colour, the spurious feature. The "
                "highest point of each curve is the ideal measure.",
                xlabel="environment e",
                ylabel="error",
                markers=False,
            )
        )
        if len(scenarios) > MAX_CURVE_PANELS:
            section.notes.append(
                f"Curves shown for the first {MAX_CURVE_PANELS} of {len(scenarios)} scenarios."
            )


def study_sections(
    directory: str | Path, *, exclude_damaged: bool = False, measures: list[str] | None = None
) -> list[Section]:
    """All sections of the report on one study folder.

    A damaged store is refused (StoreDamagedError naming the damaged units) unless
    ``exclude_damaged``; then the summary says which units were left out. `measures`: more
    measures for the tables and figures (`oodeval.study.analysis.analyze`), read from the store
    opened read-only.
    """
    directory = Path(directory)
    if not (directory / "results.sqlite").exists() and not is_export(directory):
        raise OodevalError(
            f"{directory} holds no study (no results.sqlite); run `oodeval study run ... --out "
            f"{directory}` first, or give a results file"
        )
    study = load_study(directory, exclude_damaged=exclude_damaged)
    for note in study.integrity_notes():
        warnings.warn(note, StoreIntegrityWarning, stacklevel=2)
    summary = summary_section(study)
    if study.counts()["done"] == 0:
        summary.notes.append(
            "No finished units yet, so there is nothing to analyse: the tables and figures of "
            "the worst+gap paper need at least one finished unit per algorithm."
        )
        return [verdict_section(study, None, "no unit has finished yet."), summary]
    try:
        results = analyze(study, measures)
    except OodevalError as exc:
        summary.notes.append(f"The analyses could not be computed: {exc}")
        return [verdict_section(study, None, f"the analyses could not be computed: {exc}"), summary]
    if "measure_digests" in results:
        notes = measure_version_notes(study, results["measure_digests"])
        summary.notes += [f"Warning: {note}." for note in notes]
    if results["units"]["algorithm"].nunique() < 2:
        summary.notes.append(
            "Only one algorithm finished: correlations and selections need at least two."
        )
    sections = [answer_section(results), verdict_section(study, results), summary]
    sections.append(table_sections(results))
    if "leaderboard" in results:
        sections.append(leaderboard_section(results["leaderboard"]))
    sections.append(figure_section(study, results))
    sections.append(
        Section(
            "Configuration",
            intro="The study's stored configuration, as run.",
            tables=[
                Table(
                    "config",
                    pd.DataFrame(
                        [(k, json.dumps(v)) for k, v in study.config.items()],
                        columns=["key", "value"],
                    ),
                    widths={"value": 160},
                )
            ],
        )
    )
    return sections


__all__ = [
    "answer_section",
    "environment_curves",
    "figure1_data",
    "figure5_data",
    "figure7_data",
    "leaderboard_section",
    "study_sections",
    "verdict_section",
]
