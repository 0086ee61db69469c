"""CONTRIBUTING.md's "where to add" table, checked by adding a toy piece of each kind.

Each test adds one thing the way the table says (one new module, or one decorated function in a
test, standing for that module) and sees it used where users meet it, then removes it.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oodeval.cli.main import run
from oodeval.measures import domain_measures, register_measure, unregister_measure

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def toy_measure() -> Iterator[str]:
    """A measure added as the table says: one function with `@register_measure`."""

    @register_measure("toy_median", label="median")
    def toy_median(errors: np.ndarray) -> np.ndarray:
        return np.median(errors, axis=-1)

    yield "toy_median"
    unregister_measure("toy_median")


def test_a_measure_is_one_registered_function(toy_measure: str, tmp_path: Path) -> None:
    errors = np.array([[0.1, 0.4, 0.2, 0.3], [0.5, 0.5, 0.1, 0.9]])
    # brute force: the middle of the sorted four is the mean of the 2nd and 3rd smallest
    expected = [(np.sort(row)[1] + np.sort(row)[2]) / 2 for row in errors]
    np.testing.assert_allclose(domain_measures(errors, [toy_measure])[toy_measure], expected)

    out = tmp_path / "scores.csv"
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = run(
            ["measures", str(REPO / "examples" / "results.csv"), "--measures", toy_measure]
            + ["--format", "csv", "--output", str(out)]
        )
    assert code == 0, err.getvalue()
    assert "median picks" in err.getvalue()  # the answer line uses the measure's label
    table = pd.read_csv(out)
    rows = table[(table["table"] == "measures") & (table["measure"] == toy_measure)]
    results = pd.read_csv(REPO / "examples" / "results.csv")
    loo = results[results["split"] == "loo"]
    for row in rows.itertuples():
        given = loo[(loo["seed"] == row.seed) & (loo["algorithm"] == row.algorithm)]["error"]
        assert row.value == pytest.approx(float(np.median(given)), abs=1e-15)
    assert len(rows) == loo.groupby(["seed", "algorithm"]).ngroups


def test_a_measure_name_is_registered_once(toy_measure: str) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_measure(toy_measure)(lambda errors: errors.max(axis=-1))
    with pytest.raises(ValueError, match="built-in"):
        unregister_measure("average")
