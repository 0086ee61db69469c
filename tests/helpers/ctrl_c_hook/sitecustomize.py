"""Tells a test when a command is inside its Ctrl-C guard, so the test sends SIGINT then.

A Python whose ``PYTHONPATH`` holds this folder imports this module at start-up (``site`` imports
``sitecustomize``). With ``OODEVAL_TEST_ANNOUNCE`` set, every entry into
`oodeval.cli._common.stops_on_ctrl_c` first enters the real guard, then prints the variable's
value as one line on stderr: the test reads that line from the pipe and interrupts at once,
instead of sleeping and hoping the command got there (a SIGINT that comes before the guard is
caught by another handler and prints another line). Without the variable it does nothing.
"""

from __future__ import annotations

import os

if os.environ.get("OODEVAL_TEST_ANNOUNCE"):
    import contextlib
    import sys

    from oodeval.cli import _common

    _guard = _common.stops_on_ctrl_c

    @contextlib.contextmanager
    def _announced(*args, **kwargs):
        with _guard(*args, **kwargs):
            print(os.environ["OODEVAL_TEST_ANNOUNCE"], file=sys.stderr, flush=True)
            yield

    _common.stops_on_ctrl_c = _announced
