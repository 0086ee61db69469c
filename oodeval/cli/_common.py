"""Pieces every command module shares: error reporting and the default-subcommand group."""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from typer.core import TyperGroup

from oodeval.errors import OodevalError

F = TypeVar("F", bound=Callable[..., Any])

USAGE_ERROR = 2


def fail(message: str) -> typer.Exit:
    """Print `message` as one line on stderr and return the Exit(2) to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=USAGE_ERROR)


def reports_errors(fn: F) -> F:
    """Turn OodevalError (bad input) into one stderr line and exit status 2, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OodevalError as exc:
            raise fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        except FileNotFoundError as exc:
            name = exc.filename or str(exc)
            raise fail(f"file not found: {name}; check the path") from None
        except IsADirectoryError as exc:
            raise fail(f"expected a file but got a folder: {exc.filename}") from None
        except PermissionError as exc:
            raise fail(f"permission denied: {exc.filename}") from None
        except sqlite3.Error as exc:  # backstop: the study store translates what it expects
            raise fail(f"SQLite: {exc}; `oodeval study verify DIR` checks a study folder") from None
        # Backstops: readers and writers check their paths (`oodeval._text.read_text`,
        # `check_folder_path`), so these are reached only by a case they do not foresee.
        except (NotADirectoryError, FileExistsError) as exc:
            raise fail(
                f"{exc.filename}: {exc.strerror}; a file stands where a folder is needed"
            ) from None
        except OSError as exc:
            raise fail(f"{exc.filename or 'a file'}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise fail(f"a file is not UTF-8 text ({exc.reason}); save it as UTF-8") from None

    return wrapper  # type: ignore[return-value]


class DefaultCommandGroup(TyperGroup):
    """A group that runs `default_command` when the first argument is not a subcommand.

    `oodeval openworld preds.npz` then means `oodeval openworld score preds.npz`, while
    `oodeval openworld ratio-study ...` still reaches its own subcommand.
    """

    default_command = "score"

    def resolve_command(
        self, ctx: typer.Context, args: list[str]
    ) -> tuple[str | None, Any, list[str]]:
        if self._routes_to_default(args):
            args = [self.default_command, *args]
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if self._routes_to_default(args):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    def _routes_to_default(self, args: list[str]) -> bool:
        # Anything that is neither a subcommand nor the group's own --help belongs to the
        # default command, options included (`oodeval openworld --format json preds.npz`).
        return bool(args) and args[0] not in self.commands and args[0] not in ("--help", "-h")


def check_output_path(output: str | None) -> None:
    """Raise OodevalError now if `output` cannot be written (a folder, or no such parent folder).

    Commands call it before they read or compute anything, so a bad --output is the only line a
    user sees, not warnings about the input followed by the error.
    """
    if output is None:
        return
    path = Path(output)
    if path.is_dir():
        raise OodevalError(f"--output {output} is a folder; give a file name inside it")
    parent = path.parent
    if not parent.is_dir():
        raise OodevalError(
            f"--output {output}: folder {parent} does not exist; create it or choose another path"
        )
    if not os.access(parent, os.W_OK):
        raise OodevalError(f"--output {output}: folder {parent} is not writable")


def echo_output(text: str, output: str | None) -> None:
    """Write `text` to the file `output`, or to stdout when it is None."""
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
        typer.echo(f"wrote {output}", err=True)


def check_folder_path(folder: str | Path, option: str = "--out") -> None:
    """Raise OodevalError if `folder` (or a folder above it) exists as a file.

    Commands whose `option` names a folder to create or reuse (`study run --out`, `study merge
    --out`) call it before anything else, so an existing file there is one line, not a
    FileExistsError from deep inside.

    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "notes.txt"); _ = open(f, "w").write("x")
    >>> check_folder_path(os.path.join(f, "study"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    oodeval.errors.OodevalError: --out .../study: .../notes.txt is a file, not a folder; give ...
    """
    path = Path(folder)
    for step in (path, *path.parents):
        if step.exists():
            if not step.is_dir():
                where = f"{path} is a file" if step == path else f"{path}: {step} is a file"
                raise OodevalError(f"{option} {where}, not a folder; give a new or existing folder")
            return
