"""The `oodeval` entry point: usage errors are one stderr line with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", *args], capture_output=True, text=True, cwd=ROOT
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("measures",), "Missing argument 'results'; see 'oodeval measures --help'"),
        (("measures", "--format", "xml", "examples/results.csv"), "'xml' is not one of"),
        (("nosuch",), "No such command 'nosuch'"),
        (("openworld", "--bogus", "x"), "No such option: --bogus"),
    ],
)
def test_usage_errors_are_one_line_with_exit_status_2(args, expected):
    done = _run(*args)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


def test_version_and_help_exit_zero():
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.startswith("oodeval ")
    helped = _run("measures", "--help")
    assert helped.returncode == 0 and "RESULTS" in helped.stdout.upper()


def test_no_arguments_shows_help_and_exits_2():
    done = _run()
    assert done.returncode == 2 and "Usage: oodeval" in done.stdout + done.stderr


def test_sigterm_raises_terminated_once_and_the_line_says_terminated_with_143(capsys):
    """Inside `sigterm_like_ctrl_c` the first SIGTERM is a KeyboardInterrupt (every Ctrl-C path
    runs), a second one during the clean-up is ignored, and `interrupted` then prints
    ``terminated:`` and gives 143; outside it the previous handler is back."""
    import signal

    from oodeval.cli._common import Terminated, interrupted, sigterm_like_ctrl_c

    before = signal.getsignal(signal.SIGTERM)
    with sigterm_like_ctrl_c():
        with pytest.raises(Terminated):  # raise_signal runs the handler before it returns
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # ignored while the command cleans up
        code = interrupted("interrupted: 3 of 8 units stored; run it again").exit_code
    assert code == 143
    assert capsys.readouterr().err == "terminated: 3 of 8 units stored; run it again\n"
    assert signal.getsignal(signal.SIGTERM) is before
    with sigterm_like_ctrl_c():  # a new command starts clean
        assert interrupted("interrupted: nothing kept").exit_code == 130
    assert capsys.readouterr().err == "interrupted: nothing kept\n"


@pytest.mark.parametrize("when", ["returned", "restoring"])
def test_a_sigterm_as_the_command_ends_gives_the_line_and_143_not_a_traceback(
    when, monkeypatch, capsys
):
    """The window past the command's own guards: after it returned, before `sigterm_like_ctrl_c`
    put the previous handler back. The signal is raised there by a hook (raise_signal runs the
    handler before it returns)."""
    import signal

    from oodeval.cli import main

    before = signal.getsignal(signal.SIGTERM)
    real_signal = signal.signal
    raised: list[bool] = []

    def command(args):
        if when == "returned":  # the command is done, its guards left
            signal.raise_signal(signal.SIGTERM)
        return 0

    def signal_then_set(signum, handler):
        if signum == signal.SIGTERM and handler is before and not raised:
            raised.append(True)
            signal.raise_signal(signal.SIGTERM)
        return real_signal(signum, handler)

    monkeypatch.setattr(main, "_run", command)
    if when == "restoring":  # inside the block's clean-up
        monkeypatch.setattr(signal, "signal", signal_then_set)
    try:
        code = main.run([])
    except KeyboardInterrupt as exc:  # raised, it would stop pytest's whole run
        pytest.fail(f"{type(exc).__name__} escaped run(): a traceback for the user")
    finally:
        handler = signal.getsignal(signal.SIGTERM)
        real_signal(signal.SIGTERM, before)  # never leave the command's handler behind
    assert code == 143 and handler is before
    assert capsys.readouterr().err == (
        "terminated: stopped before it finished; run the same command again\n"
    )
