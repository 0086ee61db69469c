"""Stopping ``oodeval study run``: drivers a test stops, and every process of one study.

A driver runs in a subprocess whose environment carries a token (``MARK=token``); every process
of that study (workers, multiprocessing's resource tracker) inherits it, so ``/proc/*/environ``
finds them all, re-parented or not. The studies use ``tests.interrupt_backend``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
MARK = "OODEVAL_TEST_STUDY"
BACKEND = "tests.interrupt_backend"


class Stop(NamedTuple):
    """A way of stopping a command, and how the command must end then (CONTRIBUTING.md)."""

    signum: int  # the signal sent
    status: int  # the command's exit status
    word: str  # its one line starts with ``<word>: ``


#: Ctrl-C (a terminal's SIGINT) and SIGTERM (``kill``, a Slurm time limit or ``scancel``) stop a
#: long command the same way: one line saying what was kept, 130 or 143.
STOPS = {
    "ctrl-c": Stop(signal.SIGINT, 130, "interrupted"),
    "sigterm": Stop(signal.SIGTERM, 143, "terminated"),
}
#: What multiprocessing's resource tracker prints when a driver died without closing its pool.
LEAK_WARNING = "leaked semaphore"

STUDY_TOML = """
name = "interrupt-test"
backend = "{backend}"
algorithms = ["ERM", "IRM", "GroupDRO", "CORAL"]
seeds = [0, 1]
steps = 10
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }},
             {{ family = "synthetic", ratio = "5:1", scale = 1 }}]
[unit_options]
fail_algorithms = ["CORAL"]
{options}
"""


def default_ctrl_c() -> None:
    """``preexec_fn`` of a child that a test interrupts: SIGINT has its default action in it, as
    in a program started from a terminal, even where the test run inherited SIGINT ignored (a
    background job of a non-interactive shell, e.g. ``nohup pytest &``). Python started with
    SIGINT ignored installs no KeyboardInterrupt handler, and Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def write_config(directory: Path, *, backend: str = BACKEND, options: str = "") -> Path:
    """``DIR/study.toml``: 4 algorithms (CORAL fails) x 2 seeds x 2 scenarios, 16 units;
    `options` are more ``[unit_options]`` lines (``started_dir = ...``)."""
    path = directory / "study.toml"
    path.write_text(STUDY_TOML.format(backend=backend, options=options), encoding="utf-8")
    return path


def start_driver(
    config: Path, out: Path, log: Path, token: str, *, hang: str = "", options: tuple = ()
) -> subprocess.Popen:
    """``oodeval study run`` in its own session (a terminal's Ctrl-C reaches its whole group),
    its stdout in `log`, its stderr a pipe; the units of algorithm `hang` run ten minutes;
    `options` are more options (``--executor ray``)."""
    env = {**os.environ, MARK: token, "OODEVAL_TEST_HANG": hang}
    cmd = [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(config)]
    cmd += ["--out", str(out), "--workers", "2", "--no-progress", "--no-report", *options]
    with log.open("wb") as sink:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=default_ctrl_c,
        )


def study_processes(token: str) -> dict[int, str]:
    """{pid: command line} of the live processes carrying the study's token."""
    needle = f"{MARK}={token}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue  # a zombie's environment reads empty: it is dead
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def assert_no_process_survives(token: str, seconds: float = 30.0) -> None:
    """Every process of the study ends within `seconds` (they die on their own; the test does not
    wait for a time, only for them); the ones left are killed and named in the failure."""
    try:
        wait_until(
            lambda: not study_processes(token),
            lambda: (
                f"end of the study's processes after the driver ended: {study_processes(token)}"
            ),
            seconds=seconds,
        )
    finally:
        for pid in study_processes(token):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


#: The source of a ``sitecustomize`` module that tells a test when a command is inside its Ctrl-C
#: guard. A Python whose ``PYTHONPATH`` holds a folder with it imports it at start-up (``site``
#: imports ``sitecustomize``). With ``OODEVAL_TEST_ANNOUNCE`` set, every entry into
#: `oodeval.cli._common.stops_on_ctrl_c` first enters the real guard, then prints the variable's
#: value as one line on stderr: the test reads that line from the pipe and interrupts at once,
#: instead of sleeping and hoping the command got there (a SIGINT that comes before the guard is
#: caught by another handler and prints another line). With ``OODEVAL_TEST_RAISE_IN_EXEC`` set, the
#: guarded work is instead interrupted at once by a KeyboardInterrupt raised inside ``exec()`` of a
#: string, as a Ctrl-C that lands in library code doing that (dataclasses, typing) raises it.
#: With ``OODEVAL_TEST_HOLD`` set too, the command waits for a signal once it has announced itself,
#: before its work: a command whose work takes less time than a signal takes to arrive. Without
#: any of these variables it does nothing.
#: (Written into a test's folder, not kept as a file here: pytest's doctest collection would
#: import it as ``sitecustomize``, which a system Python may already have.)
GUARD_ANNOUNCER = """from __future__ import annotations

import os

if os.environ.get("OODEVAL_TEST_ANNOUNCE") or os.environ.get("OODEVAL_TEST_RAISE_IN_EXEC"):
    import contextlib
    import signal
    import sys

    from oodeval.cli import _common

    _guard = _common.stops_on_ctrl_c

    @contextlib.contextmanager
    def _announced(*args, **kwargs):
        with _guard(*args, **kwargs):
            if os.environ.get("OODEVAL_TEST_RAISE_IN_EXEC"):
                exec("raise KeyboardInterrupt")
            print(os.environ["OODEVAL_TEST_ANNOUNCE"], file=sys.stderr, flush=True)
            while os.environ.get("OODEVAL_TEST_HOLD"):
                signal.pause()  # until a signal's handler raises (Ctrl-C, SIGTERM)
            yield

    _common.stops_on_ctrl_c = _announced
"""


def guard_announcer(folder: Path) -> Path:
    """`folder`, holding `GUARD_ANNOUNCER` as ``sitecustomize.py``: put it on a child's
    ``PYTHONPATH`` and set ``OODEVAL_TEST_ANNOUNCE`` to the line it should print."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(GUARD_ANNOUNCER, encoding="utf-8")
    return folder
