"""Waiting for something another process does, without a fixed sleep.

A test waits for an *observable event* (a file written, a row stored, a line printed); the
deadline only turns a hang into a clear failure. Polling is the fallback where no pipe or event
can carry the news (another process's files, its SQLite store, ``/proc``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest

#: Seconds between two looks. Short, so an event is seen soon after it happens; the loop's exit
#: depends on the event, never on how long the polling took.
POLL_SECONDS = 0.02


def wait_until(
    condition: Callable[[], object],
    what: str | Callable[[], str],
    *,
    seconds: float = 120.0,
    proc: subprocess.Popen | None = None,
    every: float = POLL_SECONDS,
) -> None:
    """Return as soon as ``condition()`` is true.

    Fails the test naming `what` (a string, or a function that returns one when the test fails,
    so it can say what was seen) when `proc` (the process expected to make it true) ends first,
    with its stderr when that is a pipe, or when `seconds` pass (a guard against a hang, far
    longer than the event needs on a loaded machine). `every` is the pause between two looks:
    longer where a look is costly (asking a cluster's scheduler).
    """
    deadline = time.monotonic() + seconds

    def named() -> str:
        return what() if callable(what) else what

    while not condition():
        if proc is not None and proc.poll() is not None:
            if condition():  # it happened just before the process ended
                return
            stderr = proc.stderr.read() if proc.stderr is not None else ""
            if isinstance(stderr, bytes):
                stderr = stderr.decode(errors="replace")
            pytest.fail(
                f"the process ended (status {proc.returncode}) before {named()}: {stderr!r}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"no {named()} within {seconds:g} s")
        time.sleep(every)
