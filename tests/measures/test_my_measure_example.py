"""examples/my_measure.py, a user's own measures (a plain one and a family): their math against
brute force, and the file run end to end the way docs/howto/own-measure.md tells a user to, on
examples/results.csv and on the stored `quick` study (nothing is trained)."""

from __future__ import annotations

import doctest
import gzip
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from oodeval.errors import OodevalError
from oodeval.measures import get_measure, unregister_measure
from oodeval.study import config_from_dict, load_study
from oodeval.study.analysis import errors_table

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "my_measure.py"
QUICK = REPO / "tests" / "goldens" / "quick-results.sqlite.gz"


@pytest.fixture
def example():
    """Import examples/my_measure.py (registers its measures, as a study's ``imports`` does)."""
    spec = importlib.util.spec_from_file_location("my_measure", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["my_measure"] = module
    spec.loader.exec_module(module)
    yield module
    unregister_measure("second_worst")
    unregister_measure("entropic")
    sys.modules.pop("my_measure", None)


@pytest.fixture
def quick(tmp_path: Path) -> Path:
    folder = tmp_path / "quick"
    folder.mkdir()
    with gzip.open(QUICK) as src, open(folder / "results.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return folder


def test_the_doctests_pass(example) -> None:
    assert doctest.testmod(example).failed == 0


def test_the_measures_against_brute_force(example) -> None:
    rng = np.random.default_rng(5)
    errors = rng.random((40, 6))
    errors[0] = 0.3  # all tied
    errors[1, :2] = errors[1].max()  # the worst value twice: the second worst is it again
    second = get_measure("second_worst").function(errors)
    assert second.tolist() == [sorted(row)[-2] for row in errors.tolist()]
    for t in (0.5, 10.0, 200.0):
        got = get_measure(f"entropic:t={t}").function(errors)
        # scipy's logsumexp, an independent stable implementation; both are a handful of
        # float64 operations on values <= 200 in the exponent: agreement to 1e-12 relative
        want = (special.logsumexp(t * errors, axis=-1) - np.log(errors.shape[-1])) / t
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        assert np.all(errors.mean(-1) - 1e-12 <= got) and np.all(got <= errors.max(-1) + 1e-12)
    with pytest.raises(OodevalError, match="t must be > 0"):
        get_measure("entropic:t=0")


def test_a_study_config_accepts_them_through_imports(example, tmp_path: Path) -> None:
    config = config_from_dict(
        {
            "name": "mine",
            "backend": "oodeval.study.synthetic",
            "algorithms": ["ERM", "IRM"],
            "seeds": [0],
            "steps": 3,
            "scenarios": [{"family": "synthetic", "ratio": "3:1", "scale": 1}],
            "imports": [str(EXAMPLE)],
            "measures": ["worst_plus_gap", "entropic:t=10.0", "second_worst"],
        }
    )
    assert config.measures == ("worst_plus_gap", "entropic:t=10", "second_worst")
    assert config.import_digests[str(EXAMPLE)]


def test_the_example_runs_end_to_end(quick: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's oodeval
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), str(quick)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    # examples/results.csv: the measures per algorithm, each checked against the file's rows
    results = pd.read_csv(REPO / "examples" / "results.csv")
    loo = results[(results["split"] == "loo") & (results["seed"] == 0)]
    erm = loo[loo["algorithm"] == "ERM"]["error"].to_numpy()
    erm_row = next(line.split() for line in out.splitlines() if line.split()[:2] == ["0", "ERM"])
    assert float(erm_row[2]) == pytest.approx(sorted(erm)[-2], abs=5e-5)  # printed to 4 places
    t = 10.0
    entropic = (special.logsumexp(t * erm) - np.log(len(erm))) / t
    assert float(erm_row[3]) == pytest.approx(entropic, abs=5e-5)

    # the quick study: per scenario, Spearman with the ideal from the stored errors (one seed)
    errors = errors_table(load_study(quick))
    assert errors["seed"].nunique() == 1  # so a per-algorithm group is one unit
    lines = out.split("rank correlation with the ideal measure")[1].splitlines()[2:]
    assert len(lines) == errors["scenario"].nunique() == 3
    for line in lines:
        scenario, rho_second, rho_entropic = line.split()[:3]
        rows = errors[errors["scenario"] == scenario]
        by_alg = {a: g for a, g in rows.groupby("algorithm")}
        ideal = [g[g["split"] == "all"]["error"].max() for g in by_alg.values()]
        loo_err = [g[g["split"] == "loo"]["error"].to_numpy() for g in by_alg.values()]
        second = [sorted(e)[-2] for e in loo_err]
        ent = [(special.logsumexp(t * e) - np.log(len(e))) / t for e in loo_err]
        assert float(rho_second) == pytest.approx(stats.spearmanr(second, ideal)[0], abs=5e-4)
        assert float(rho_entropic) == pytest.approx(stats.spearmanr(ent, ideal)[0], abs=5e-4)
