"""Run oodeval under a cap on its address space, so a reader that allocates without bound fails
its test (a MemoryError, a nonzero exit) instead of taking the machine's memory.

`run_limited` starts ``oodeval ARGV`` (or a Python snippet) in a fresh interpreter whose
address space is capped with ``resource.setrlimit(RLIMIT_AS, ...)`` before oodeval is imported,
and reports the exit status, the output, and the child's peak resident memory and peak address
space (``VmHWM`` / ``VmPeak`` of ``/proc/self/status``, read by the child as it exits).
`capped` does the same inside the test process for a fuzzer's thousands of examples: the soft
limit is set to the current address space plus `HEADROOM` for the block, then restored.

The cap, `MEMORY_LIMIT` = 3 GiB, from normal runs measured with this helper on a 2-core
development machine (VmPeak = peak address space, the quantity RLIMIT_AS caps):
``oodeval measures examples/results.csv`` 0.21 GiB (max RSS 0.08 GiB), ``report`` 0.28 GiB,
``openworld train-gmop`` 0.74 GiB and ``openworld make-features --source digits`` (torch
imported, an encoder trained) 1.07 GiB (max RSS 0.42 GiB). Thread arenas and stacks (64 MiB
and 8 MiB of address space per thread, reserved, not used) grow with the core count, so a
16-core machine needs about 1 GiB more; 3 GiB leaves that room, while each hostile input the
tests give (a 4 GiB gzip, a 64 TiB array header, ``/dev/zero``, a 1-billion-column header)
needs more than 3 GiB to be read whole. A regression is then a MemoryError and a failed test,
not an out-of-memory machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: Address-space cap of every limited run (see the module docstring for how it was chosen).
MEMORY_LIMIT = 3 << 30
#: What an in-process fuzz example may allocate beyond what the process holds (`capped`): the
#: largest valid input a fuzzer makes needs a few megabytes; a hostile header, gigabytes.
HEADROOM = 1 << 30

# The child: cap the address space, run the code, and report the peaks on the way out (also on
# SystemExit and on an uncaught exception, which atexit still sees).
_CHILD = """
import atexit, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
def _report():
    peaks = {{}}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmPeak"):
                peaks[key] = int(value.split()[0]) * 1024
    with open({report!r}, "w") as out:
        json.dump(peaks, out)
atexit.register(_report)
{body}
"""

_CLI = "import sys\nsys.argv = ['oodeval'] + {argv!r}\nfrom oodeval.cli.main import main\nmain()"


@dataclass(frozen=True)
class Limited:
    """What one limited run gave: exit status, stdout, stderr, peak RSS and address space."""

    returncode: int
    stdout: str
    stderr: str
    peak_rss: int
    peak_address_space: int

    @property
    def error_lines(self) -> list[str]:
        """The lines of stderr that start with ``error:``."""
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


def run_limited(
    argv: list[str] | None = None,
    *,
    code: str | None = None,
    stdin: bytes | Path | None = None,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    limit: int = MEMORY_LIMIT,
    timeout: float = 300.0,
) -> Limited:
    """Run ``oodeval ARGV`` (or the Python `code`) under an address-space cap of `limit` bytes.

    `stdin` is bytes fed to the child or a file it reads as standard input; `env` entries are
    added to the environment (the child's ``PYTHONPATH`` starts with this checkout). `timeout`
    only turns a hang into a failure.
    """
    if (argv is None) == (code is None):
        raise ValueError("give argv or code")
    body = code if code is not None else _CLI.format(argv=list(argv or []))
    root = str(Path(__file__).resolve().parents[2])
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, child_env.get("PYTHONPATH", "")) if p
    )
    with tempfile.TemporaryDirectory() as scratch:
        report = os.path.join(scratch, "peaks.json")
        script = _CHILD.format(limit=int(limit), report=report, body=body)
        feed = stdin if isinstance(stdin, bytes) else None
        with open(stdin if isinstance(stdin, Path) else os.devnull, "rb") as given:
            done = subprocess.run(
                [sys.executable, "-c", script],
                input=feed,
                stdin=None if feed is not None else given,
                capture_output=True,
                env=child_env,
                cwd=cwd,
                timeout=timeout,
                check=False,
            )
        peaks = json.loads(Path(report).read_text()) if os.path.exists(report) else {}
    return Limited(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
        int(peaks.get("VmHWM", 0)),
        int(peaks.get("VmPeak", 0)),
    )


def address_space() -> int:
    """This process's current address space in bytes (``VmSize`` of ``/proc/self/status``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")  # pragma: no cover


@contextmanager
def capped(headroom: int = HEADROOM) -> Iterator[None]:
    """Cap this process's address space at its current size plus `headroom` while the block
    runs (the soft RLIMIT_AS, restored after), for in-process fuzzers that run thousands of
    inputs: an input that makes a reader allocate gigabytes raises MemoryError in the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = address_space() + headroom
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
