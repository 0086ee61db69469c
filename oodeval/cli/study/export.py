"""`oodeval study export`: a study as one text file, to ship beside a paper or in a repository."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval.cli._common import reports_errors
from oodeval.cli._output import check_output_path, echo_output


def export_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    out: str = typer.Option(
        ..., "--out", metavar="FILE", help="File to write the export to (- for stdout)."
    ),
) -> None:
    """Write the study's results, config and provenance as one long-form CSV file.

    The head lines (#) hold the oodeval version, the data digest, the config and every unit
    (algorithm, seed, hyperparameters, status, timings, versions); the table one row per
    (scenario, algorithm, seed, fold, environment) with the error as stored, bit for bit.
    Folders are named by their digest, not their path. Every command that reads a study folder
    (study analyze, study measures, study summary, report) reads the export too. The store is
    verified as it is read and is only read.
    """
    from oodeval.study import load_study
    from oodeval.study.store import export_text

    target = None if out == "-" else out
    check_output_path(target)
    refuse_aliases([("--out", target)], Inputs().source("DIR", directory))
    text = export_text(load_study(directory))
    echo_output(text, target)


def register(group: typer.Typer) -> None:
    """Add `export` to the `study` group."""
    group.command("export")(reports_errors(export_command))
