"""Entry point of the `oodeval` command: assembles the command groups."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import ModuleType

import typer

from oodeval import __version__
from oodeval._text import safe_text
from oodeval.cli import (
    envs,
    importers,
    measures,
    openworld,
    protocols,
    report,
    shift,
    study,
    variance,
)
from oodeval.cli._common import (
    INTERRUPTED_BACKSTOP,
    TERMINATED,
    USAGE_ERROR,
    Terminated,
    interrupted,
    sigterm_like_ctrl_c,
)

#: The command modules, in the order `oodeval --help` lists them (single commands first, then
#: groups, as Typer lists them). Each defines ``register(parent)``, which adds its command or
#: group to `parent`. A new command: a module in oodeval/cli/ with `register`, added here.
COMMAND_MODULES: tuple[ModuleType, ...] = (
    measures,
    importers,
    variance,
    openworld,
    study,
    envs,
    shift,
    protocols,
    report,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"oodeval {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """Trustworthy evaluation of models under distribution shift."""


def build_app(modules: Sequence[ModuleType] = COMMAND_MODULES) -> typer.Typer:
    """The `oodeval` app with the commands of `modules` (each module's ``register(app)``)."""
    app = typer.Typer(
        name="oodeval",
        help="Trustworthy evaluation of models under distribution shift.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        # Plain help (click's): the text is printed as written and each paragraph reflowed to
        # the terminal. Rich markup ate "[trainer]" (a TOML table) and kept the docstrings' line
        # breaks (sentences broke mid-line); Markdown drops "<domain>/<class>" and "prob_<j>".
        # Sub-apps inherit the mode from this app.
        rich_markup_mode=None,
    )
    app.callback()(_root)
    for module in modules:
        module.register(app)
    return app


app = build_app()


def _click_kinds(exc: BaseException) -> set[str]:
    # typer >= 0.2x vendors its own click, so match click's exception classes by name.
    return {cls.__name__ for cls in type(exc).__mro__}


def run(args: list[str] | None = None) -> int:
    """Run the `oodeval` command line `args` (default: sys.argv[1:]); return the exit status.

    Usage errors become one `error:` line on stderr and status 2, as bad input does in every
    command (`oodeval.cli._common.reports_errors`). SIGTERM stops a command as Ctrl-C does, with
    status 143 (`oodeval.cli._common.sigterm_like_ctrl_c`). Tests call this to see what a user
    sees.
    """
    try:
        with sigterm_like_ctrl_c():
            return _run(args)
    except Terminated:  # SIGTERM as the command ended, past its own guards: no traceback
        typer.echo(f"terminated: {INTERRUPTED_BACKSTOP}", err=True)
        return TERMINATED


def _run(args: list[str] | None) -> int:
    try:
        code = app(args=args, standalone_mode=False, prog_name="oodeval")
    except Exception as exc:
        kinds = _click_kinds(exc)
        if "NoArgsIsHelpError" in kinds:  # a group without a command: its help, status 2
            typer.echo(exc.format_message())  # type: ignore[attr-defined]
            return USAGE_ERROR
        if "UsageError" in kinds:
            message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
            message = message.replace("Value error, ", "").rstrip(".")
            ctx = getattr(exc, "ctx", None)
            where = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
            typer.echo(safe_text(f"error: {message}{where}"), err=True)
            return USAGE_ERROR
        if "ClickException" in kinds:
            message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
            typer.echo(safe_text(f"error: {message}"), err=True)
            return int(getattr(exc, "exit_code", 1))
        if "Abort" in kinds and isinstance(exc.__cause__, KeyboardInterrupt):
            # Ctrl-C or SIGTERM before a command's own guard (click turns it into Abort)
            return int(interrupted(f"interrupted: {INTERRUPTED_BACKSTOP}").exit_code)
        if "Abort" in kinds:
            typer.echo("aborted", err=True)
            return 1
        raise
    return code if isinstance(code, int) else 0


def main() -> None:
    """Console-script entry point: `run` the command line and exit with its status."""
    code = run()
    # A KeyboardInterrupt raised inside a string given to exec() or eval() (library code does
    # that: dataclasses, typing...) sets a flag in CPython that stays set after the interrupt is
    # caught; run as ``python -m oodeval.cli.main`` (not as the console script), Python then
    # ends by SIGINT itself after exiting with `code`. An exec() of a string clears the flag.
    exec("")
    sys.exit(code)


if __name__ == "__main__":
    main()
