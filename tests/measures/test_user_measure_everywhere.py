"""Issue 21's "done when": a measure defined in a user's file appears in `measures`, `study
analyze`, the measure leaderboard (`study measures`) and the report, loaded with ``--imports``.

Each command runs as its own process (as a user runs it), so the example's measures never leak
into this test process's registry. The study is the stored `quick` study of the goldens.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.goldens.cases import quick_study

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "my_measure.py"
SPECS = "second_worst,entropic:t=10,worst_plus_gap,average"


def oodeval(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return quick_study(tmp_path_factory.mktemp("user-measure"))


def test_in_measures() -> None:
    out = oodeval("measures", "examples/results.csv", "--imports", str(EXAMPLE),
                  "--measures", SPECS, "-f", "json").stdout  # fmt: skip
    rows = json.loads(out)["measures"]  # one record per (seed, algorithm), a column per measure
    assert {"second_worst", "entropic:t=10"} <= set(rows[0])
    assert len(rows) == 10  # 5 algorithms x 2 seeds


def test_in_analyze_and_the_leaderboard_section(study: Path, tmp_path: Path) -> None:
    oodeval("study", "analyze", str(study), "--imports", str(EXAMPLE), "--measures", SPECS,
            "--analysis-dir", str(tmp_path))  # fmt: skip
    table1 = (tmp_path / "table1.csv").read_text(encoding="utf-8")
    assert "rho_second_worst" in table1 and "rho_entropic:t=10" in table1
    board = (tmp_path / "leaderboard.csv").read_text(encoding="utf-8")
    assert "second_worst" in board and "entropic:t=10" in board
    digests = pd.read_csv(tmp_path / "measure_digests.csv").set_index("measure")
    # the digest is the first 16 hex digits of the SHA-256 of the file defining the measure
    expected = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()[:16]
    assert digests.loc["second_worst", "code_digest"] == expected
    assert digests.loc["entropic:t=10", "code_digest"] == expected
    assert digests.loc["second_worst", "defined_in"] == "my_measure"


def test_in_the_leaderboard_command(study: Path) -> None:
    out = oodeval("study", "measures", str(study), "--imports", str(EXAMPLE),
                  "--measures", SPECS, "--bootstrap", "50", "-f", "csv").stdout  # fmt: skip
    assert "second_worst" in out and "entropic:t=10" in out


def test_in_the_report(study: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    oodeval("report", str(study), "--imports", str(EXAMPLE), "--measures", SPECS,
            "--out", str(page))  # fmt: skip
    html = page.read_text(encoding="utf-8")
    assert "2nd worst" in html and "entropic_10" in html  # the measures' labels
