"""Entry point of the `oodeval` command: assembles the command groups."""

from __future__ import annotations

import typer

from oodeval import __version__
from oodeval.cli import (
    envs,
    importers,
    measures,
    openworld,
    report,
    shift,
    splits,
    variance,
)

app = typer.Typer(
    name="oodeval",
    help="Trustworthy evaluation of models under distribution shift.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"oodeval {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """Trustworthy evaluation of models under distribution shift."""


# Command groups: each module defines `app` (a group) or `register(app)` (top-level commands).
# --- registrations (one line per command module) ---
measures.register(app)
app.add_typer(importers.app, name="import")
variance.register(app)
app.add_typer(openworld.app, name="openworld")
app.add_typer(envs.app, name="envs")
shift.register(app)
app.add_typer(splits.app, name="splits")
report.register(app)
# --- end registrations ---


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
