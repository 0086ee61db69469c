"""`oodeval study analyze`: the verdict and the paper's tables and figures of a stored study."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval.cli._common import (
    FORMAT_OPT,
    OUTPUT_OPT,
    OutputFormat,
    check_output_path,
    echo_output,
    reports_errors,
)
from oodeval.tables import render_frame

_EXCLUDE_HELP = (
    "Compute without the units that fail verification (damaged store) instead of refusing; "
    "every output then names the units left out."
)


def analyze_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    exclude_damaged: bool = typer.Option(False, "--exclude-damaged", help=_EXCLUDE_HELP),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print the verdict, then write it, Table 1/5/6 and the Figure 1/5/6/7 numbers as CSV +
    markdown to DIR/analysis/.

    table and markdown print the verdict section of analysis.md and the files written; csv and
    json the verdict table (one row per measure). A store that fails verification is refused,
    naming the damaged units, unless --exclude-damaged is given.
    """
    from oodeval.study import load_study
    from oodeval.study.analysis import analyze, verdict_markdown, write_analysis

    check_output_path(output)
    study = load_study(directory, exclude_damaged=exclude_damaged)
    results = analyze(study)
    written = write_analysis(study, results=results)
    if fmt.value in ("csv", "json"):
        text = render_frame(results["verdict"], fmt.value)
    else:
        paths = [f"{name}: {path}" for name, path in written.items()]
        text = "\n".join([verdict_markdown(study, results), *paths])
    echo_output(text, output)
    for note in [*study.integrity_notes(), *study.code_notes()]:
        typer.echo(f"warning: {note}", err=True)
    if study.outside_note():
        typer.echo(f"note: {study.outside_note()}", err=True)
    if study.data_note() and fmt.value in ("csv", "json"):  # the verdict block has it otherwise
        typer.echo(f"note: {study.data_note()}", err=True)


def register(group: typer.Typer) -> None:
    """Add `analyze` to the `study` group."""
    group.command("analyze")(reports_errors(analyze_command))
