"""`oodeval report SOURCE --out report.html`: one self-contained HTML page of tables and plots."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval.cli._common import reports_errors


def register(app: typer.Typer) -> None:
    """Add the top-level `report` command to `app`."""

    @app.command("report")
    @reports_errors
    def report(
        source: Path = typer.Argument(
            ...,
            help="A study folder, a results CSV/JSONL (as for `oodeval measures`), or an "
            "open-world predictions .npz/.csv (as for `oodeval openworld`).",
        ),
        out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write."),
        base_classes: str | None = typer.Option(
            None, "--base-classes", help="Open-world files only: base class ids, e.g. 0-49."
        ),
        percent: bool = typer.Option(
            False, "--percent", help="Results files only: values are percentages in [0, 100]."
        ),
    ) -> None:
        """Write an HTML report (figures embedded, no network needed) and print its path."""
        from oodeval.report.build import write_report

        path = write_report(source, out, base_classes=base_classes, percent=percent)
        typer.echo(str(path.resolve()))
