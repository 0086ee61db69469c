"""`oodeval study measures DIR [DIR ...]`: the measure leaderboard of finished studies.

Per study, then pooled over the studies: which measure orders the algorithms like the ideal
measure best, with bootstrap intervals over (scenario, seed) cells and a paired test against
average and worst+gap (`oodeval.measures.meta`). Nothing is trained and nothing is
written: the stores are only read. A DomainBed sweep folder has no ideal measure; for it the
command says so and prints each measure's ranking of the algorithms.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import (
    IMPORTS_OPT,
    load_imports,
    measure_specs,
    measures_option,
    reports_errors,
    seed_option,
)
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.errors import OodevalError
from oodeval.limits import MAX_RESAMPLES
from oodeval.measures.meta import (
    BOOTSTRAP_RESAMPLES,
    NO_IDEAL_NOTE,
    VERSUS,
    leaderboard_sentence,
    measure_rankings,
)
from oodeval.measures.registry import check_measures, measure_label, measure_names
from oodeval.study.store import is_export
from oodeval.tables import heading, render_frame, to_json

#: The measures ranked without --measures: every registered plain measure, and one member of
#: each comparator family (median, CVaR of the worst quarter, the 0.75 quantile, mean + 1 std).
DEFAULT_FAMILY_MEMBERS = ("median", "cvar:alpha=0.25", "quantile:q=0.75", "mean_plus_std:lambda=1")


POOLED = "pooled"
"""The ``study`` label of the leaderboard over every study's cells together."""


def default_measures() -> list[str]:
    """Every registered plain LOO measure, then `DEFAULT_FAMILY_MEMBERS`."""
    return check_measures([*measure_names(families=False), *DEFAULT_FAMILY_MEMBERS])


def folder_kind(directory: Path) -> str:
    """``study`` (it holds results.sqlite, or is a study export) or ``sweep`` (run folders with
    results.jsonl)."""
    if not directory.exists():
        raise OodevalError(f"folder not found: {directory}; check the path")
    if is_export(directory):
        return "study"
    if not directory.is_dir():
        raise OodevalError(
            f"{directory} is a file; give a study folder (with results.sqlite) or a DomainBed "
            "sweep folder"
        )
    if (directory / "results.sqlite").is_file():
        return "study"
    if any((d / "results.jsonl").is_file() for d in directory.iterdir() if d.is_dir()):
        return "sweep"
    raise OodevalError(
        f"{directory} holds neither a study (results.sqlite) nor a DomainBed sweep (run folders "
        "with results.jsonl); give the folder `oodeval study run --out` wrote"
    )


def _study_frame(
    directory: Path, names: list[str]
) -> tuple[str, pd.DataFrame, frozenset[tuple[object, str]]]:
    """The study's name, its units (`study_unit_measures`) with the leaderboard's measures, and its
    stored units' (key, checksum) pairs (`oodeval.study.Study.fingerprint`)."""
    from oodeval.study import load_study
    from oodeval.study.analysis import correlatable, study_unit_measures

    study = load_study(directory)
    frame = study_unit_measures(study, list(dict.fromkeys([*names, *VERSUS])))
    name = str(study.config.get("name") or directory.name)
    return name, correlatable(frame), study.fingerprint


def _distinct_folders(directories: list[Path], drop: bool) -> list[Path]:
    """The folders once each by identity (`oodeval.study.identity`: one file by a link, a hard
    link or another path); a repeat is refused, or left out with a note when `drop`."""
    from oodeval.study.identity import distinct_stores, file_identity

    found = [file_identity(d) for d in directories]
    kept, notes = distinct_stores(found, drop=drop, allow_shared=True, harm=_POOLED_TWICE)
    for note in notes:
        typer.echo(safe_text(f"note: {note}"), err=True)
    index = {id(k) for k in kept}
    return [d for d, f in zip(directories, found, strict=True) if id(f) in index]


#: What a repeated study would do to the pooled leaderboard, for the refusal.
_POOLED_TWICE = "its units would be counted twice in the pooled leaderboard"


def _sweep_units(directory: Path, names: list[str]) -> pd.DataFrame:
    """Per (dataset, selection method) and algorithm, each measure of the trial-mean errors
    over the test environments (algorithms missing one are left out), as `measure_rankings`
    reads them."""
    from oodeval.measures.meta import unit_measures
    from oodeval.results.domainbed import results_table, select
    from oodeval.results.selection import SELECTION_METHODS
    from oodeval.results.sweep import read_sweep

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unreadable lines are skipped, as `import domainbed` does
        sweep = read_sweep(directory)
    selected = pd.concat([select(sweep, m) for m in SELECTION_METHODS], ignore_index=True)
    cells = results_table(selected, sweep)
    size = cells.groupby(["selection", "dataset", "algorithm"])["environment"].transform("size")
    cells = cells[size == cells["dataset"].map(sweep.n_envs)]
    if cells.empty:
        raise OodevalError(f"no algorithm of {directory} has every test environment to rank")
    scenario = cells["dataset"] + ", " + cells["selection"].map(SELECTION_METHODS)
    errors = pd.DataFrame(
        {
            "scenario": scenario,
            "seed": "trial mean",
            "algorithm": cells["algorithm"],
            "split": "loo",
            "environment": cells["environment_name"],
            "error": 1.0 - cells["mean"] / 100.0,
        }
    )
    return pd.DataFrame(unit_measures(errors, names))


def _pooled(frames: dict[str, pd.DataFrame], names: list[str]) -> pd.DataFrame:
    """The studies' units as one table whose cells stay apart (scenario = 'study: scenario')."""
    keep = ["scenario", "seed", "algorithm", "n_given", "ideal", *dict.fromkeys([*names, *VERSUS])]
    parts = [f[keep].assign(scenario=f"{label}: " + f["scenario"]) for label, f in frames.items()]
    return pd.concat(parts, ignore_index=True)


def _rankings_view(rankings: pd.DataFrame, names: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """Per sweep scenario: one row per algorithm, one column per measure, 'rank (score)'."""
    out = []
    for scenario, part in rankings.groupby("scenario", sort=False):
        cell = part["rank"].astype(str) + " (" + part["score"].map("{:.4f}".format) + ")"
        wide = part.assign(cell=cell).pivot_table(
            index="algorithm", columns="measure", values="cell", aggfunc="first", sort=True
        )
        wide = wide[names].rename(columns=measure_label).reset_index()
        wide.columns.name = None
        out.append((str(scenario), wide))
    return out


def _text(
    boards: dict[str, pd.DataFrame],
    rankings: dict[str, pd.DataFrame],
    names: list[str],
    fmt: str,
    n_resamples: int,
) -> str:
    from oodeval.study.analysis.leaderboard import Leaderboard, leaderboard_footnote

    parts = []
    studies = [label for label in boards if label != POOLED]
    for label, board in boards.items():
        title = f"Study {label}"
        if label == POOLED:
            title = f"Pooled over {len(studies)} studies ({', '.join(studies)})"
        parts.append(heading(title, fmt))
        parts.append(Leaderboard(board, n_resamples).render(fmt, footnote=False))
    if boards:
        parts.append(leaderboard_footnote(n_resamples))
    for label, ranks in rankings.items():
        parts.append(heading(f"DomainBed sweep {label}", fmt))
        parts.append(f"Note: {NO_IDEAL_NOTE}. Cells: rank (1 = lowest error) and score.")
        for scenario, wide in _rankings_view(ranks, names):
            parts += [safe_text(scenario), render_frame(wide, fmt)]
    return "\n\n".join(parts)


def _tables(
    boards: dict[str, pd.DataFrame], rankings: dict[str, pd.DataFrame]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The leaderboards and the rankings as two long tables with a ``study`` column."""
    return _stacked(boards), _stacked(rankings)


def _stacked(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The frames of each study one under another, a first column ``study`` naming it."""
    if not frames:
        return pd.DataFrame()
    return pd.concat(
        [f.assign(study=t).reindex(columns=["study", *f.columns]) for t, f in frames.items()],
        ignore_index=True,
    )


def measures_command(
    directories: list[Path] = typer.Argument(
        ..., help="Study folders (results.sqlite) or DomainBed sweep folders.", metavar="DIR"
    ),
    measures: str | None = measures_option(
        "to rank (e.g. average,worst_plus_gap,cvar:alpha=0.25); default: every registered "
        "measure plus median, cvar:alpha=0.25, "
        "quantile:q=0.75 and mean_plus_std:lambda=1. average and worst_plus_gap are always "
        "computed, for the head to head."
    ),
    bootstrap: int = typer.Option(
        BOOTSTRAP_RESAMPLES,
        "--bootstrap",
        min=0,
        max=MAX_RESAMPLES,
        help="Bootstrap draws of (scenario, seed) cells for the 95% intervals; 0 for none; at "
        f"most {MAX_RESAMPLES:,}.",
    ),
    seed: int = seed_option("Seed of the bootstrap draws."),
    imports: list[str] = IMPORTS_OPT,
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
    drop_duplicates: bool = typer.Option(
        False,
        "--drop-duplicates",
        help="Leave out, with a note, a folder that is the same store as one given before it "
        "(a link, a hard link, another path, or a copy holding the same units) instead of "
        "refusing it.",
    ),
) -> None:
    """Rank measures by how well they track the ideal measure, per study and pooled.

    Per measure, over the (scenario, seed) cells: mean Spearman's rho and Kendall's tau-b with
    the ideal measure, mean choice degradation, how often it picks the ideal measure's choice,
    the slope of rho against N, 95% bootstrap intervals over cells, and wins, losses and ties
    against average and worst+gap with a Wilcoxon signed-rank test. Nothing is trained or
    written. A DomainBed sweep has no ideal measure: for it each measure's ranking of the
    algorithms is shown. csv: the leaderboard rows (or, with sweeps only, the rankings); json:
    an object with both tables and the sentences. A folder that is the same store as another
    given (a link, a hard link, another path, a copy with the same units), or that shares units
    with one (merged from it), is refused: its cells would be pooled twice.
    """
    check_output_path(output)
    read = Inputs().imports(imports)
    for directory in directories:
        read.source("DIR", directory)
    refuse_aliases([("--output", output)], read)
    load_imports(imports)
    names = check_measures(measure_specs(measures) or default_measures())
    kinds = {d: folder_kind(d) for d in directories}
    kinds = {d: kinds[d] for d in _distinct_folders(directories, drop_duplicates)}
    if fmt is OutputFormat.csv and len(set(kinds.values())) > 1:
        raise OodevalError(
            "csv holds one table: give studies and DomainBed sweeps in separate runs, or use "
            "--format json"
        )
    _run(kinds, names, bootstrap, seed, fmt, output, drop_duplicates)


def _run(
    kinds: dict[Path, str],
    names: list[str],
    bootstrap: int,
    seed: int,
    fmt: OutputFormat,
    output: str | None,
    drop_duplicates: bool = False,
) -> None:
    from oodeval.study.analysis.leaderboard import study_leaderboard
    from oodeval.study.identity import distinct_stores, file_identity

    frames: dict[str, Any] = {}
    rankings, stores = {}, []
    for directory, kind in kinds.items():
        if kind == "study":
            label, frame, units = _study_frame(directory, names)
            stores.append(file_identity(directory).with_units(units))
            kept, notes = distinct_stores(stores, drop=drop_duplicates, harm=_POOLED_TWICE)
            if len(kept) < len(stores):  # a copy of a study before it, left out
                stores.pop()
                typer.echo(safe_text(f"note: {notes[-1]}"), err=True)
                continue
            frames[label if label not in (*frames, POOLED) else str(directory)] = frame
        else:
            units = _sweep_units(directory, names)
            rankings[str(directory)] = pd.DataFrame(measure_rankings(units, names))
    boards = {
        label: study_leaderboard(frame, names, n_resamples=bootstrap, seed=seed)
        for label, frame in frames.items()
    }
    if len(frames) > 1:
        pooled = study_leaderboard(_pooled(frames, names), names, n_resamples=bootstrap, seed=seed)
        boards[POOLED] = pooled
    board, ranks = _tables(boards, rankings)
    if fmt is OutputFormat.csv:
        text = render_frame(board if boards else ranks, "csv")
    elif fmt is OutputFormat.json:
        from oodeval.tables import frame_records

        sentences = [
            {"study": t, "sentence": leaderboard_sentence(b.to_dict("list"))}
            for t, b in boards.items()
        ]
        no_ideal = [{"study": t, "note": NO_IDEAL_NOTE} for t in rankings]
        payload = {"leaderboard": frame_records(board), "rankings": frame_records(ranks)}
        text = to_json({**payload, "sentences": sentences, "notes": no_ideal})
    else:
        text = _text(boards, rankings, names, fmt.value, bootstrap)
    echo_output(text, output)
    if rankings and fmt in (OutputFormat.csv, OutputFormat.json):
        typer.echo(f"note: {NO_IDEAL_NOTE}", err=True)


def register(group: typer.Typer) -> None:
    """Add `measures` to the `study` group."""
    group.command("measures")(reports_errors(measures_command))
