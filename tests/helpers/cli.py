"""Running ``oodeval`` in-process as the console script does, and the bad-input contract.

`invoke` runs a command line through `oodeval.cli.main.run` (the console script's own error
handling) inside typer's CliRunner isolation; an exception that escapes `run` is what the console
script would print as a traceback, so it comes back as one (status 1, ``Traceback`` on stderr)
instead of failing the calling test elsewhere. `assert_refused` is the contract for bad input:
status 2, exactly one ``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import sys
import traceback

from typer.testing import CliRunner

from oodeval.cli.main import run


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run `oodeval ARGV` as the console script does; return (status, stdout, stderr)."""
    shown = ""
    with CliRunner().isolation() as (out, err, _):
        try:
            code = run(argv)
        except SystemExit as exc:  # a command may exit by itself
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # what the console script would show: a traceback, status 1
            code, shown = 1, traceback.format_exc()
        sys.stdout.flush()  # the isolation's streams buffer what a plain write() sent
        sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode() + shown


def assert_refused(code: int, stdout: str, stderr: str, argv: list[str]) -> None:
    """`oodeval ARGV` refused its input: status 2, one ``error:`` line, no traceback."""
    shown = f"oodeval {' '.join(argv)}\nstdout: {stdout[-500:]}\nstderr: {stderr[-2000:]}"
    assert "Traceback" not in stdout + stderr, shown
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, shown
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert len(lines[0]) > len("error: ") + 10 and len(lines[0]) < 600, shown
    # A misspelt option is a usage error too: the case must reach the check it names.
    assert "No such option" not in lines[0] and "Missing argument" not in lines[0], shown
