"""The project's central comparison, computed twice: the same errors through `oodeval measures`
(a long-form CSV) and through `oodeval study analyze` (a study store) give identical numbers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.study.analysis import analyze
from oodeval.study.store import ResultStore, UnitRecord

ALGOS = ["ERM", "IRM", "GroupDRO", "VREx", "Mixup", "CORAL"]
SEEDS = [0, 1, 2]
GIVEN = ["e0.80", "e0.85", "e0.90", "e0.95"]  # sorted: the store reads LOO folds in sorted order
ALL_ENVS = ["x0.0", "x0.2", "x0.4", "x0.6", "x0.8", "x1.0"]
SCENARIO = "toy/ratio=3:1/scale=1"
MEASURES = ("worst_plus_gap", "average")


def errors() -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """{(algorithm, seed): (LOO errors, errors of the model trained on all)}."""
    rng = np.random.default_rng(11)
    out = {
        (a, s): (rng.uniform(0.05, 0.6, len(GIVEN)), rng.uniform(0.05, 0.9, len(ALL_ENVS)))
        for s in SEEDS
        for a in ALGOS
    }
    # A tie for seed 1: two algorithms with the same, lowest, LOO errors must be resolved alike.
    lowest = np.array([0.02, 0.03, 0.04, 0.05])
    out[("IRM", 1)] = (lowest, out[("IRM", 1)][1])
    out[("VREx", 1)] = (lowest.copy(), out[("VREx", 1)][1])
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(`oodeval measures --format json` output, `analyze` frames, study folder)."""
    root = tmp_path_factory.mktemp("agreement")
    data = errors()
    rows = []
    for (algorithm, seed), (loo, full) in data.items():
        rows += [
            (algorithm, seed, "loo", e, repr(float(v))) for e, v in zip(GIVEN, loo, strict=True)
        ]
        rows += [
            (algorithm, seed, "all", e, repr(float(v))) for e, v in zip(ALL_ENVS, full, strict=True)
        ]
    csv = root / "results.csv"
    pd.DataFrame(rows, columns=["algorithm", "seed", "split", "environment", "error"]).to_csv(
        csv, index=False
    )
    study = root / "study"
    with ResultStore(study, create=True) as store:
        store.bind_config(
            {
                "name": "agreement",
                "algorithms": ALGOS,
                "seeds": SEEDS,
                "scenarios": [{"family": "toy", "ratio": "3:1", "scale": 1}],
                "measures": ["average", "worst_plus_gap", "worst_only", "gap_only"],
            }
        )
        for (algorithm, seed), (loo, full) in data.items():
            stored = [(e, e, float(v), 100) for e, v in zip(GIVEN, loo, strict=True)]
            stored += [("all", e, float(v), 100) for e, v in zip(ALL_ENVS, full, strict=True)]
            params = {"ratio": "3:1", "scale": 1}
            record = UnitRecord(
                SCENARIO, "toy", params, algorithm, seed, {}, 1, "mlp", "done", rows=stored
            )
            store.record_unit(record)
    runner = CliRunner()
    scored = runner.invoke(app, ["measures", str(csv), "--format", "json"])
    assert scored.exit_code == 0, scored.output
    analyzed = runner.invoke(app, ["study", "analyze", str(study)])
    assert analyzed.exit_code == 0, analyzed.output
    return json.loads(scored.stdout), analyze(study), study


def _records(cli: dict, key: str) -> pd.DataFrame:
    frame = pd.DataFrame(cli[key])
    if "seed" in frame:
        frame["seed"] = frame["seed"].astype(int)
    return frame


def _as_written(x: float) -> float:
    """What `study analyze` writes to its CSVs (`float_format="%.6g"`)."""
    return float(f"{x:.6g}")


def test_unit_measures_agree(both):
    cli, study, directory = both
    scored = _records(cli, "measures").set_index(["algorithm", "seed"]).sort_index()
    units = study["units"].set_index(["algorithm", "seed"]).sort_index()
    written = pd.read_csv(directory / "analysis" / "units.csv")
    written = written.set_index(["algorithm", "seed"]).sort_index()
    for column in ("ideal", "average", "worst_plus_gap", "worst_only", "gap_only"):
        assert scored[column].tolist() == units[column].tolist(), column
        assert written[column].tolist() == [_as_written(v) for v in scored[column]], column


def test_correlations_with_the_ideal_agree(both):
    cli, study, directory = both
    summary = _records(cli, "correlation_summary").set_index("measure")
    table1 = study["table1"].iloc[0]
    written = pd.read_csv(directory / "analysis" / "table1.csv").iloc[0]
    for measure in MEASURES:
        for stat, column in (("rho", "spearman"), ("tau", "kendall")):
            for agg in ("mean", "std"):
                value = summary.loc[measure, f"{column}_{agg}"]
                assert table1[f"{stat}_{measure}_{agg}"] == value, (measure, column, agg)
                assert written[f"{stat}_{measure}_{agg}"] == _as_written(value)
    assert table1["n_seeds"] == len(SEEDS) and table1["n_algorithms"] == len(ALGOS)


def test_selections_agree_seed_by_seed(both):
    cli, study, directory = both
    scored = _records(cli, "selections").set_index(["seed", "measure"])
    for table6 in (study["table6"], pd.read_csv(directory / "analysis" / "table6.csv")):
        per_seed = table6[table6["seed"].astype(str) != "mean"]
        assert len(per_seed) == len(SEEDS) * 3
        for row in per_seed.itertuples(index=False):
            cli_row = scored.loc[(int(row.seed), row.measure)]
            assert row.selected == cli_row["selected"]
            # one separator: the CLI leaves an untied pick's cell empty, Table 6 names it
            assert row.tied == (cli_row["tied"] or row.selected)
    # the planted tie is seen, and broken, alike by both
    for measure in MEASURES:
        assert scored.loc[(1, measure), ["selected", "tied"]].tolist() == ["IRM", "IRM|VREx"]
        row = study["table6"].query("seed == 1 and measure == @measure").iloc[0]
        assert (row["selected"], row["tied"]) == ("IRM", "IRM|VREx")


def test_selection_degradation_agrees(both):
    cli, study, directory = both
    summary = _records(cli, "degradation_summary").set_index("measure")
    figure6 = study["figure6"].set_index("measure")
    written = pd.read_csv(directory / "analysis" / "figure6.csv").set_index("measure")
    for measure in MEASURES:
        for agg in ("mean", "std"):
            value = summary.loc[measure, f"degradation_{agg}"]
            assert figure6.loc[measure, f"degradation_{agg}"] == value, (measure, agg)
            assert written.loc[measure, f"degradation_{agg}"] == _as_written(value)
        assert figure6.loc[measure, "n_seeds"] == summary.loc[measure, "n_seeds"]
