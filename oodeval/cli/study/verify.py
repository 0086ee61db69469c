"""`oodeval study verify`: the full integrity check of a study store, changing nothing."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval.cli._common import reports_errors
from oodeval.cli._output import (
    FORMAT_OPT,
    OUTPUT_OPT,
    OutputFormat,
    check_output_path,
    echo_output,
    render_lines,
)


def verify_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Check a study store without changing it; exit 0 when clean, 1 when damage is found.

    Runs SQLite's full integrity check, checks the config's checksum and every unit's row counts
    and checksum, and counts rows that belong to no unit. Exit 1 also when units carry no
    checksum (a store of an older oodeval), 2 when DIR holds no study. Formats other than table
    give the report as (item, detail) rows.
    """
    from oodeval.study.store import verify_store

    check_output_path(output)
    refuse_aliases([("--output", output)], Inputs().source("DIR", directory))
    report = verify_store(directory)
    echo_output(render_lines(report.lines(), fmt), output)
    raise typer.Exit(code=0 if report.clean else 1)


def register(group: typer.Typer) -> None:
    """Add `verify` to the `study` group."""
    group.command("verify")(reports_errors(verify_command))
