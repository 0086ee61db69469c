"""Pieces every command module shares: error reporting, Ctrl-C handling, the folder checks, the
``--imports`` option and ``--measures`` lists, and the default-subcommand group. What a command
prints, and where, is `oodeval.cli._output`.

The command-line contract (CONTRIBUTING.md): a command that prints a table takes
``--format/-f`` and ``--output/-o FILE`` (`oodeval.cli._output`); a command that writes
artefacts (a report, a study folder, a figure, a model) takes ``--out`` without a short form.
Exit status: 0 done, 1 a check found a problem, 2 bad input or usage, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM: ``kill``, a Slurm time limit).
"""

from __future__ import annotations

import functools
import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import typer
from typer.core import TyperGroup

from oodeval._extras import extra_of, missing_extra_message
from oodeval._text import safe_text, shortened
from oodeval.errors import OodevalError, command_line
from oodeval.limits import SEED_LIMIT

F = TypeVar("F", bound=Callable[..., Any])

USAGE_ERROR = 2
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C
TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a command stopped by `kill`


#: Longest error line printed whole; past it, long names and values in it are `shortened`.
LONGEST_ERROR = 500


def fail(message: str) -> typer.Exit:
    """Print `message` as one line on stderr (through `safe_text`: a newline or bidi character in
    a name or path shows as an escape; a line over `LONGEST_ERROR` characters has its long
    quoted values and space-free runs `shortened`) and return the Exit(2) to raise."""
    line = safe_text(message)
    if len(line) > LONGEST_ERROR:
        line = shortened(line)
    typer.echo(f"error: {line}", err=True)
    return typer.Exit(code=USAGE_ERROR)


def command_path() -> str:
    """The running command as the user typed it (``oodeval study run``), for messages."""
    try:  # typer >= 0.2x vendors its own click
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older typer, with click itself
        from click import get_current_context  # type: ignore[no-redef]  # the same function
    ctx = get_current_context(silent=True)
    return ctx.command_path if ctx is not None else "this command"


def reports_errors(fn: F) -> F:
    """Turn OodevalError (bad input) into one stderr line and exit status 2, no traceback.

    The command runs inside `oodeval.errors.command_line`, so a library message names an
    option by its flag (``--percent``), where the Python API names its keyword.

    A missing optional extra (torch for `study run`, matplotlib for `report`...) is one line too,
    naming the command and the extra to install (`oodeval._extras.missing_extra_message`).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with command_line():  # messages name options as flags (`oodeval.errors.option`)
                return fn(*args, **kwargs)
        except OodevalError as exc:
            raise fail(str(exc).strip() or type(exc).__name__) from None
        except ModuleNotFoundError as exc:  # an optional extra's module (torch...) is missing
            extra = extra_of(exc)
            if extra is None:
                raise
            raise fail(missing_extra_message(command_path(), str(exc.name), extra)) from None
        except FileNotFoundError as exc:
            name = exc.filename or str(exc)
            raise fail(f"file not found: {name}; check the path") from None
        except IsADirectoryError as exc:
            raise fail(f"expected a file but got a folder: {exc.filename}") from None
        except PermissionError as exc:
            raise fail(f"permission denied: {exc.filename}") from None
        except sqlite3.Error as exc:  # backstop: the study store translates what it expects
            raise fail(f"SQLite: {exc}; `oodeval study verify DIR` checks a study folder") from None
        except KeyboardInterrupt as exc:  # backstop: long commands say what they kept
            raise interrupted(str(exc) or f"interrupted: {INTERRUPTED_BACKSTOP}") from None
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

    def resolve_command(  # type: ignore[override]  # typer always passes a typer.Context
        self, ctx: typer.Context, args: list[str]
    ) -> tuple[str | None, Any, list[str]]:
        if self._routes_to_default(args):
            args = [self.default_command, *args]
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if self._routes_to_default(args):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    def _routes_to_default(self, args: list[str]) -> bool:
        # Anything that is neither a subcommand nor the group's own --help belongs to the
        # default command, options included (`oodeval openworld --format json preds.npz`).
        return bool(args) and args[0] not in self.commands and args[0] not in ("--help", "-h")


@contextmanager
def stops_on_ctrl_c(kept: str, *, own_message: bool = True) -> Iterator[None]:
    """Turn Ctrl-C inside the block into one stderr line and exit status 130, no traceback.

    `kept` says what was kept and how to resume or re-run, for a plain KeyboardInterrupt; an
    interrupt that carries its own message (`oodeval.study.StudyInterrupted`: how many units are
    stored) prints that instead, unless `own_message` is False. Long commands wrap their work
    in it, so every one stops the same way: ``interrupted: <what is kept>; <how to go on>``.
    SIGTERM stops them the same way (`sigterm_like_ctrl_c`), with ``terminated:`` and 143.
    """
    try:
        yield
    except KeyboardInterrupt as exc:
        raise interrupted((own_message and str(exc)) or f"interrupted: {kept}") from None


INTERRUPTED_BACKSTOP = "stopped before it finished; run the same command again"


def interrupted(line: str) -> typer.Exit:
    """Print `line` (what was kept, how to go on) on stderr and return the Exit(130) to raise.

    After a SIGTERM (`sigterm_like_ctrl_c`) the line starts with ``terminated:`` instead of
    ``interrupted:`` and the status is 143.
    """
    if not _TERMINATING.is_set():
        typer.echo(safe_text(line), err=True)
        return typer.Exit(code=INTERRUPTED)
    typer.echo(safe_text("terminated: " + line.removeprefix("interrupted: ")), err=True)
    return typer.Exit(code=TERMINATED)


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the command (`sigterm_like_ctrl_c`): it stops as on Ctrl-C."""


#: Set once a SIGTERM arrived: `interrupted` then says ``terminated:`` and gives 143.
_TERMINATING = threading.Event()


@contextmanager
def sigterm_like_ctrl_c() -> Iterator[None]:
    """Inside the block, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread.

    So a ``kill`` or Slurm's time limit goes through every Ctrl-C path: worker processes are
    stopped, the store's open transaction rolls back, and the command prints its one line and
    exits 143 (`interrupted`). Only the first SIGTERM raises; later ones (Slurm signals every
    process of a job, ``srun`` forwards the signal too) are ignored while the command cleans up.
    A SIGTERM that comes as the block ends, past the command's own guards, raises `Terminated`
    out of the block, with the previous handler back (`oodeval.cli.main.run` answers it).
    Outside the main thread (SIGTERM handlers can only be set there) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum: int, frame: object) -> None:
        if not _TERMINATING.is_set():
            _TERMINATING.set()
            raise Terminated()

    _TERMINATING.clear()
    previous = signal.getsignal(signal.SIGTERM)
    # None: a handler set outside Python, which cannot be put back; the default then
    restored = signal.SIG_DFL if previous is None else previous
    try:  # set inside the try: a SIGTERM just after it still puts the previous handler back
        signal.signal(signal.SIGTERM, on_sigterm)
        yield
    finally:
        try:
            signal.signal(signal.SIGTERM, restored)
        finally:  # a SIGTERM may raise (once) just before the line above: put it back anyway
            signal.signal(signal.SIGTERM, restored)
            _TERMINATING.clear()


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


def check_writable_folder(folder: str | Path, what: str, fix: str) -> None:
    """Raise OodevalError unless this user may create `folder` or files in it: the folder, or
    the nearest folder above it that exists, must be writable.

    Commands that write into a folder call it before they read or compute anything (after
    `check_folder_path`). The line: ``{what}: {the folder} is not writable for you; {fix}``.

    >>> import tempfile
    >>> check_writable_folder(os.path.join(tempfile.mkdtemp(), "new", "analysis"), "x", "y")
    """
    path = Path(folder)
    for step in (path, *path.parents):
        if step.is_dir():
            if not os.access(step, os.W_OK | os.X_OK):
                raise OodevalError(f"{what}: {step} is not writable for you; {fix}")
            return


IMPORTS_OPT: Any = typer.Option(
    None,
    "--imports",
    metavar="FILE",
    help="A .py file (or module name) to import first, e.g. one that registers measures with "
    "@register_measure; repeat for several. Loaded as a study config's `imports` are.",
)


def fraction_option(default: float | None, flag: str, help: str) -> Any:
    """A float option `flag` that takes a share in [0, 1], `default` when not given."""
    return typer.Option(default, flag, min=0.0, max=1.0, help=help)


def load_imports(entries: list[str] | None) -> dict[str, str]:
    """Import each ``--imports`` entry (a ``.py`` file or a module name) through the study
    configs' loader (`oodeval.study.config.import_module_or_file`); return {file: code digest}
    of the ``.py`` files.

    Raises OodevalError naming the entry and the fix when one cannot be imported; commands call
    it before reading or writing anything, so a bad file is the only line a user sees.
    """
    if not entries:
        return {}
    from oodeval.study.config.imports import code_digest, import_problem, is_path_import

    digests = {}
    for entry in entries:
        path = Path(entry).expanduser()
        name = str(path.resolve()) if is_path_import(entry) else entry
        if is_path_import(entry) and not path.is_file():
            raise OodevalError(f"--imports {entry}: no such file; give the path of a .py file")
        problem = import_problem(name, "--imports")
        if problem is not None:
            raise OodevalError(f"{problem}; fix the file or leave it out")
        if is_path_import(entry):
            digests[name] = code_digest(path)
    return digests


def seed_option(help: str) -> Any:
    """A ``--seed`` option: 0 by default, any seed a study config accepts (below `SEED_LIMIT`).

    >>> seed_option("Seed of the draws.").max == SEED_LIMIT - 1
    True
    """
    return typer.Option(0, "--seed", min=0, max=SEED_LIMIT - 1, help=help)


def measures_option(use: str) -> Any:
    """A ``--measures SPEC,...`` option, read by `measure_specs`; `use` says what the command
    does with the measures.

    >>> measures_option("to add to every table.").help.endswith("to add to every table.")
    True
    """
    return typer.Option(
        None,
        "--measures",
        metavar="SPEC,...",
        help="Comma-separated measures (names, labels such as worst+gap, or specs such as "
        f"cvar:alpha=0.25) {use}",
    )


def measure_specs(measures: str | None) -> list[str] | None:
    """A ``--measures`` list of measure names or specs (``cvar:alpha=0.25``), checked by
    `oodeval.measures.check_measures` (every unknown one named) and in canonical form, without
    repeats; None when not given."""
    if measures is None:
        return None
    from oodeval.measures import check_measures, measure_names

    specs = [m.strip() for m in measures.split(",") if m.strip()]
    if not specs:
        raise OodevalError(f"--measures is empty; choose from {', '.join(measure_names())}")
    return list(dict.fromkeys(check_measures(specs)))
