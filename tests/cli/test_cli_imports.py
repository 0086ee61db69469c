"""`oodeval measures` stays fast: it imports no heavy module it does not use.

Scoring a CSV needs numpy, pandas and typer. torch (training), matplotlib (figures), scipy.stats
(about a second to import; the rank correlations are computed in numpy) and scikit-learn are
imported only by the commands that use them. The guard is on which modules get loaded, in a
fresh interpreter, not on wall-clock time (benchmarks/cli_startup.py measures that).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Runs `oodeval ARGS...` and prints, at exit, the sorted names of the loaded modules on stderr.
LISTING = """
import atexit
import json
import sys


def _loaded():
    print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)


atexit.register(_loaded)
sys.argv = ["oodeval", *sys.argv[1:]]
from oodeval.cli.main import main

main()
"""

HEAVY = ("torch", "matplotlib", "scipy.stats", "sklearn", "PIL", "jinja2")


def loaded_modules(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", LISTING, *args], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "args",
    [
        ("measures", "examples/results.csv"),
        ("measures", "examples/results.csv", "--bootstrap", "200", "-f", "json"),
        ("--version",),
    ],
    ids=lambda args: " ".join(args),
)
def test_scoring_imports_no_heavy_module(args):
    modules = loaded_modules(*args)
    assert "oodeval.cli.main" in modules  # the listing works
    assert heavy_in(modules) == []


def test_the_listing_sees_a_heavy_import(tmp_path):
    # the same listing catches a command that does load one (the report draws with matplotlib)
    modules = loaded_modules("report", "examples/results.csv", "--out", str(tmp_path / "r.html"))
    assert "matplotlib" in heavy_in(modules)
