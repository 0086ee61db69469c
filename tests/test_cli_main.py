"""The `oodeval` entry point: usage errors are one stderr line with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
