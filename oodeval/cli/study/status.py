"""`oodeval study status`: the units of a study, done, failed, damaged and pending."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import reports_errors
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.tables import frame_records, render_frame, text_table, to_json

if TYPE_CHECKING:  # the study stack is imported when the command runs
    from oodeval.study import Study


def status_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print done/failed/damaged/pending unit counts of the current config, its coverage per
    scenario, algorithm and seed, the failure reasons and the damaged units.

    The store is verified as it is read, as by every command (SQLite's integrity check, each
    unit's row counts and checksum, rows of no unit); `oodeval study verify DIR` gives the
    full report. A folder you may not write is read without writing to it. csv gives the
    coverage table; json the counts, the coverage records and the notes.
    """
    from oodeval.study import load_study

    check_output_path(output)
    refuse_aliases([("--output", output)], Inputs().source("DIR", directory))
    study = load_study(directory, exclude_damaged=True)
    counts = study.counts()
    damaged = f"{counts['damaged']} damaged, " if counts["damaged"] else ""
    title = safe_text(
        f"study {study.config.get('name')}: {counts['done']} done, {counts['failed']} failed, "
        f"{damaged}{counts['pending']} pending (of {counts['planned']})"
    )
    coverage = study.coverage()
    if not coverage["damaged"].any():
        coverage = coverage.drop(columns="damaged")
    notes = status_notes(study, directory)
    if fmt is OutputFormat.csv:
        text = render_frame(coverage, "csv")
    elif fmt is OutputFormat.json:
        text = to_json(
            {
                "study": study.config.get("name"),
                "counts": counts,
                "coverage": frame_records(coverage),
                "notes": notes,
            }
        )
    elif fmt is OutputFormat.markdown:
        bullets = "\n".join(safe_text(f"- {n}") for n in notes)
        text = "\n\n".join([title, render_frame(coverage, "markdown"), bullets])
    else:
        rows = [[str(v) for v in row] for row in coverage.itertuples(index=False)]
        text = "\n".join([title, text_table(list(coverage.columns), rows), *map(safe_text, notes)])
    echo_output(text, output)


def register(group: typer.Typer) -> None:
    """Add `status` to the `study` group."""
    group.command("status")(reports_errors(status_command))


def status_notes(study: Study, directory: Path) -> list[str]:
    """The lines `study status` prints under the coverage table: notes, failures, damage, store."""
    from oodeval.study.store import printable

    notes = [study.data_note(), study.outside_note(), *study.code_notes()]
    lines = [f"note: {n}" for n in filter(None, notes)]
    failed = study.units[study.units["status"] == "failed"]
    for unit in failed.itertuples(index=False):
        lines.append(f"failed: {printable(unit.unit_key)}: {printable(unit.failure)}")
    health = study.health
    assert health is not None  # a study loaded from its store has the store's health
    lines += [f"damaged: {key}: {reason}" for key, reason in health.damaged.items()]
    for key, reason in health.history_damage.items():
        lines.append(f"damaged: config history {key}: {reason} (`study run` sets it aside)")
    if not health.sqlite_ok:
        lines.append(f"store: SQLite's {health.check_kind} FAILED: {health.sqlite_problem()}")
    if health.stray_problem():
        lines.append(f"damaged: {health.stray_problem()}")
    verify = f"`oodeval study verify {directory}` lists every problem"
    if not health.trusted:
        lines.append(
            "damaged store: analyze, report and variance refuse it; `oodeval study run` with the "
            f"same config moves the damage aside and runs the damaged units again; {verify}"
        )
    elif health.history_damage:
        lines.append(
            f"damaged store: its config history (the numbers do not depend on it: "
            f"{health.verified} units verified); {verify}"
        )
    elif health.unverified:
        lines.append(f"store: {health.notes()[-1]}")
    else:
        lines.append(f"store: verified ({health.verified} units match their checksums)")
    return lines
