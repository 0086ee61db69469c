"""`oodeval study status`: the units of a study, done, failed, damaged and pending."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval.cli._common import reports_errors
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.tables import frame_records, render_frame, to_json


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
    if fmt is OutputFormat.csv:
        text = render_frame(study.status_table(), "csv")
    elif fmt is OutputFormat.json:
        text = to_json(
            {
                "study": study.config.get("name"),
                "counts": study.counts(),
                "coverage": frame_records(study.status_table()),
                "notes": study.status_notes(directory),
            }
        )
    else:
        text = study.render(fmt.value, directory)
    echo_output(text, output)


def register(group: typer.Typer) -> None:
    """Add `status` to the `study` group."""
    group.command("status")(reports_errors(status_command))
