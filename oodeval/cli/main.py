"""Entry point of the `oodeval` command: assembles the command groups."""

from __future__ import annotations

import typer

from oodeval import __version__

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
# --- end registrations ---


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
