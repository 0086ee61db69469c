"""`oodeval study merge`: study folders run apart, merged into one."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from oodeval._outputs import Inputs, refuse_aliases, study_files
from oodeval._text import safe_text
from oodeval.cli._common import check_folder_path, reports_errors, stops_on_ctrl_c


def merge_command(
    inputs: list[Path] = typer.Argument(..., metavar="DIR", help="Study folders to merge."),
    out: Path = typer.Option(
        ..., "--out", metavar="DIR", help="Study folder to merge into (created, or resumed)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar."),
    drop_duplicates: bool = typer.Option(
        False,
        "--drop-duplicates",
        help="Leave out, with a note, an input that is the same store as one given before it "
        "(a link, a hard link, another path, or a copy holding the same units) instead of "
        "refusing it.",
    ),
) -> None:
    """Merge study folders run apart (other machines, other algorithms or seeds) into one.

    The inputs' configs must be compatible: they may differ in algorithms, seeds, scenarios and
    imports, never in steps, model, data, trainer options or the hyperparameters of an algorithm
    two of them run. A unit found in several inputs is kept once when its results (result and
    checkpoint rows, hyperparameters) are identical, and refused when they differ; a done unit
    wins over a failed one. Damaged inputs are refused, and so is an input that is the same
    store as another (the same file by a link or another path, or a copy holding the same
    units) unless --drop-duplicates leaves it out. Each unit is copied in its own transaction:
    an interrupted merge resumes when run again.
    """
    from oodeval.study.merge import merge_studies

    check_folder_path(out)
    read = Inputs()
    for directory in inputs:
        read.source("DIR", directory)
    # --out naming an input folder: merge_studies says so itself, naming the folder
    if not any(os.path.realpath(out) == os.path.realpath(d) for d in inputs):
        refuse_aliases([("the merged store", p) for p in study_files(out)], read)

    # StudyInterrupted: the unit being copied was rolled back, its message says what is merged.
    with stops_on_ctrl_c("while reading the inputs; nothing was written"):
        summary = merge_studies(inputs, out, progress=progress, drop_duplicates=drop_duplicates)
    for note in summary.notes:
        typer.echo(safe_text(f"note: {note}"), err=True)
    typer.echo(safe_text(summary.line()))


def register(group: typer.Typer) -> None:
    """Add `merge` to the `study` group."""
    group.command("merge")(reports_errors(merge_command))
