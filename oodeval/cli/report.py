"""`oodeval report INPUT --out report.html`: one self-contained HTML page of tables and plots."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import (
    IMPORTS_OPT,
    load_imports,
    measure_specs,
    measures_option,
    reports_errors,
    stops_on_ctrl_c,
)


def report_command(
    input_path: Path = typer.Argument(
        ...,
        metavar="input",
        help="A study folder, a results CSV/JSONL (as for `oodeval measures`), or an "
        "open-world predictions .npz/.csv (as for `oodeval openworld`).",
    ),
    out: Path = typer.Option(
        Path("report.html"), "--out", metavar="FILE", help="HTML file to write."
    ),
    base_classes: str | None = typer.Option(
        None, "--base-classes", help="Open-world files only: base class ids, e.g. 0-49."
    ),
    percent: bool = typer.Option(
        False, "--percent", help="Results files only: values are percentages in [0, 100]."
    ),
    exclude_damaged: bool = typer.Option(
        False,
        "--exclude-damaged",
        help="Study folders only: report without the units that fail verification instead "
        "of refusing a damaged store; the report names them.",
    ),
    measures: str | None = measures_option(
        "to add to every table and figure (study folders only), computed from the stored "
        "errors (no unit runs; the store is only read), with their code digests."
    ),
    imports: list[str] = IMPORTS_OPT,
) -> None:
    """Write an HTML report (figures embedded, no network needed) and print its path."""
    import warnings

    from oodeval.report.build import write_report
    from oodeval.study.store import StoreIntegrityWarning

    refuse_aliases([("--out", out)], Inputs().source("INPUT", input_path).imports(imports))
    load_imports(imports)
    specs = measure_specs(measures)
    kept = f"{out} was not written (the page is written at the end); run it again"
    with stops_on_ctrl_c(kept), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StoreIntegrityWarning)
        path = write_report(
            input_path,
            out,
            named_by_user=True,
            base_classes=base_classes,
            percent=percent,
            exclude_damaged=exclude_damaged,
            measures=specs,
        )
    typer.echo(safe_text(path.resolve()))
    for w in caught:
        if issubclass(w.category, StoreIntegrityWarning):
            typer.echo(safe_text(f"warning: {w.message}"), err=True)


def register(parent: typer.Typer) -> None:
    """Add the top-level `report` command to `parent` (the `oodeval` app)."""
    parent.command("report")(reports_errors(report_command))
