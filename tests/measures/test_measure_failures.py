"""A user's measure that misbehaves, and the edges of the measure tools: one `error:` line or a
NaN where the documentation says so, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import oodeval
from oodeval.cli.main import run
from oodeval.errors import OodevalError
from oodeval.measures import domain_measures, register_measure, unregister_measure
from oodeval.results.domainbed import domain_measures_table, results_table, select
from oodeval.results.sweep import read_sweep
from oodeval.study.analysis.leaderboard import leaderboard_footnote
from tests.goldens.cases import quick_study

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "examples" / "results.csv"  # N = 6 given environments


@pytest.fixture
def failing_measures() -> Iterator[None]:
    @register_measure("raises_inside")
    def raises_inside(errors: np.ndarray) -> np.ndarray:
        raise ValueError("inner")

    @register_measure("needs_ten", min_envs=10)
    def needs_ten(errors: np.ndarray) -> np.ndarray:
        return errors.max(axis=-1)

    yield
    unregister_measure("raises_inside")
    unregister_measure("needs_ten")


def cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run(list(args))
    return code, err.getvalue()


def test_a_measure_that_raises_is_one_error_line(failing_measures: None) -> None:
    with pytest.raises(OodevalError, match=r"measure raises_inside failed .*ValueError: inner"):
        domain_measures([[0.1, 0.2, 0.3]], ["raises_inside"])
    code, err = cli("measures", str(RESULTS), "--measures", "raises_inside")
    assert code == 2 and err.count("\n") == 1 and "ValueError: inner" in err, err


def test_too_few_environments_names_the_measure_that_needs_them(failing_measures: None) -> None:
    code, err = cli("measures", str(RESULTS), "--measures", "needs_ten,average")
    assert code == 2 and "needs_ten needs >= 10" in err and "N=6" in err, err
    assert "worst+gap" not in err


def test_analyze_takes_specs_as_written(tmp_path: Path) -> None:
    """`oodeval.analyze` canonicalises specs as the CLI does (cvar:alpha=.5 is cvar:alpha=0.5)."""
    study = quick_study(tmp_path)
    tables = oodeval.analyze(study, ["cvar:alpha=.5", "mean_plus_std:lambda=1.0"])
    assert {"rho_cvar:alpha=0.5_mean", "rho_mean_plus_std:lambda=1_mean"} <= set(
        tables["table1"].columns
    )


def test_leaderboard_seed_below_zero_is_one_error_line(tmp_path: Path) -> None:
    study = quick_study(tmp_path)
    code, err = cli("study", "measures", str(study), "--seed", "-1")
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: Invalid value for '--seed'"), err
    assert "greater than or equal to 0" in lines[0], err


def test_the_footnote_states_the_draws_used() -> None:
    assert "(50 draws" in leaderboard_footnote(50)
    assert "no bootstrap intervals" in leaderboard_footnote(0)


def test_a_study_measures_run_states_its_draws(tmp_path: Path) -> None:
    study = quick_study(tmp_path)
    out = tmp_path / "board.txt"
    code, err = cli("study", "measures", str(study), "--bootstrap", "40", "--output", str(out))
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    assert "(40 draws" in text and "2000 draws" not in text


def test_import_domainbed_gives_nan_where_a_measure_needs_more_domains(
    failing_measures: None, domainbed_sweep: Path, tmp_path: Path
) -> None:
    """The VLCS sweep has 4 test domains: a measure needing 10 is NaN there (as worst+gap is
    with N <= 2), and the command still answers."""
    sweep = read_sweep(domainbed_sweep)
    table = results_table(select(sweep, "training_domain"), sweep)
    measures = domain_measures_table(table, sweep, extra=("needs_ten", "average"))
    assert measures["needs_ten"].isna().all()
    assert measures["average"].notna().all()
    code, err = cli("import", "domainbed", str(domainbed_sweep), "--measures", "needs_ten",
                    "--output", str(tmp_path / "table.txt"))  # fmt: skip
    assert code == 0, err


def test_a_measure_asked_for_twice_is_scored_once() -> None:
    s = oodeval.score(RESULTS, measures=["average", "average", "cvar:alpha=.5", "cvar:alpha=0.5"])
    assert list(s.measures.columns) == ["seed", "algorithm", "average", "cvar:alpha=0.5", "ideal"]
