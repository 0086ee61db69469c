"""The paper's analyses on a tiny hand-made stored study, against direct scipy/numpy math."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodeval.errors import OodevalError
from oodeval.study.analysis import (
    ablation_correlations,
    analyze,
    baseline_vs_ideal_best,
    correlation_vs_paper,
    correlation_with_ideal,
    degradation_by_scenario,
    distance_to_ideal_by_scale,
    selected_algorithms,
    study_unit_measures,
    write_analysis,
)
from oodeval.study.store import ResultStore, UnitRecord, load_study
from oodeval.tables import render_frame

ALGOS = ["A", "B", "C", "ERM"]
SEEDS = [0, 1]
# Two scenarios of one family and Ratio that differ in Scale (3 and 4 given environments).
SCENARIOS = {
    "toy/ratio=3:1/scale=1": ({"ratio": "3:1", "scale": 1}, ["g0", "g1", "g2"]),
    "toy/ratio=3:1/scale=2": ({"ratio": "3:1", "scale": 2}, ["g0", "g1", "g2", "g3"]),
}
ALL_ENVS = ["a0", "a1", "a2", "a3", "a4"]


def make_errors():
    """{(scenario, algorithm, seed): (loo errors, all-model errors)} from a fixed generator."""
    rng = np.random.default_rng(7)
    out = {}
    for scenario, (_params, given) in SCENARIOS.items():
        for seed in SEEDS:
            for algorithm in ALGOS:
                out[(scenario, algorithm, seed)] = (
                    rng.uniform(0.05, 0.6, size=len(given)),
                    rng.uniform(0.05, 0.9, size=len(ALL_ENVS)),
                )
    return out


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    directory = tmp_path_factory.mktemp("study")
    errors = make_errors()
    config = {
        "name": "toy",
        "algorithms": [*ALGOS, "D"],  # D's one unit failed
        "seeds": SEEDS,
        "scenarios": [{"family": "toy", **p} for p, _g in SCENARIOS.values()],
        "measures": ["average", "worst_plus_gap", "worst_only", "gap_only"],
        "source": "digits",
        "steps": 1,
        "model": "mlp",
    }
    with ResultStore(directory, create=True) as store:
        store.bind_config(config)
        for (scenario, algorithm, seed), (loo, full) in errors.items():
            params, given = SCENARIOS[scenario]
            rows = [(g, g, e, 50) for g, e in zip(given, loo, strict=True)]
            rows += [("all", env, e, 50) for env, e in zip(ALL_ENVS, full, strict=True)]
            record = UnitRecord(
                scenario, "toy", params, algorithm, seed, {}, 1, "mlp", "done", rows=rows
            )
            store.record_unit(record)
        # a failed unit must be ignored by every analysis
        store.record_unit(
            UnitRecord(
                "toy/ratio=3:1/scale=1",
                "toy",
                SCENARIOS["toy/ratio=3:1/scale=1"][0],
                "D",
                0,
                {},
                1,
                "mlp",
                "failed",
                failure="TrainingDiverged: NaN",
            )
        )
    return directory, errors


def expected_measures(errors):
    """Per unit by hand: Eq. 2 average, Eq. 6 worst+gap, Eq. 4 ideal."""
    rows = []
    for (scenario, algorithm, seed), (loo, full) in errors.items():
        n = len(loo)
        rows.append(
            {
                "scenario": scenario,
                "algorithm": algorithm,
                "seed": seed,
                "average": sum(loo) / n,
                "worst_plus_gap": max(loo) + (max(loo) - min(loo)) / (n - 2),
                "worst_only": max(loo),
                "gap_only": (max(loo) - min(loo)) / (n - 2),
                "ideal": max(full),
            }
        )
    return pd.DataFrame(rows)


def test_unit_measures_by_hand_example(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.bind_config(
            {
                "name": "x",
                "algorithms": ["ERM"],
                "seeds": [0],
                "scenarios": [{}],
                "measures": ["average", "worst_plus_gap"],
            }
        )
        rows = [
            ("e1", "e1", 0.1, 5),
            ("e2", "e2", 0.3, 5),
            ("e3", "e3", 0.2, 5),
            ("all", "e1", 0.1, 5),
            ("all", "e2", 0.5, 5),
            ("all", "e3", 0.4, 5),
        ]
        store.record_unit(UnitRecord("s", "f", {}, "ERM", 0, {}, 1, "mlp", "done", rows=rows))
    frame = study_unit_measures(load_study(tmp_path))
    row = frame.iloc[0]
    # worst 0.3, best 0.1, N = 3: worst+gap = 0.3 + 0.2 / 1 = 0.5; average 0.2; ideal 0.5
    assert row["worst_plus_gap"] == pytest.approx(0.5)
    assert row["average"] == pytest.approx(0.2)
    assert row["ideal"] == pytest.approx(0.5)
    assert row["n_given"] == 3 and pd.isna(row["scale"])


def test_the_old_name_of_study_unit_measures_works_with_a_warning():
    import oodeval.study.analysis as analysis

    with pytest.warns(DeprecationWarning, match="use study_unit_measures"):
        assert analysis.unit_measures is study_unit_measures
    with pytest.raises(AttributeError):
        analysis.no_such_name  # noqa: B018


def test_unit_measures_match_hand_computation_and_skip_failed(stored):
    directory, errors = stored
    frame = study_unit_measures(load_study(directory))
    assert len(frame) == len(errors) and "D" not in set(frame["algorithm"])
    want = expected_measures(errors)
    merged = frame.merge(want, on=["scenario", "algorithm", "seed"], suffixes=("", "_want"))
    for column in ("average", "worst_plus_gap", "worst_only", "gap_only", "ideal"):
        np.testing.assert_allclose(merged[column], merged[f"{column}_want"], rtol=0, atol=1e-12)


def test_correlation_with_ideal_matches_scipy_per_seed_then_mean_and_std(stored):
    directory, errors = stored
    t1 = correlation_with_ideal(study_unit_measures(load_study(directory))).set_index("scenario")
    want = expected_measures(errors)
    for scenario in SCENARIOS:
        for measure in ("worst_plus_gap", "average"):
            rhos, taus = [], []
            for seed in SEEDS:
                part = want[(want["scenario"] == scenario) & (want["seed"] == seed)]
                rhos.append(stats.spearmanr(part[measure], part["ideal"]).statistic)
                taus.append(stats.kendalltau(part[measure], part["ideal"]).statistic)
            row = t1.loc[scenario]
            assert row[f"rho_{measure}_mean"] == pytest.approx(np.mean(rhos))
            assert row[f"rho_{measure}_std"] == pytest.approx(np.std(rhos, ddof=1))
            assert row[f"tau_{measure}_mean"] == pytest.approx(np.mean(taus))
            assert row[f"tau_{measure}_std"] == pytest.approx(np.std(taus, ddof=1))
        assert row["n_seeds"] == 2 and row["n_algorithms"] == 4


def test_ablation_family_row_is_mean_of_scenario_means(stored):
    directory, errors = stored
    frame = study_unit_measures(load_study(directory))
    t5 = ablation_correlations(frame).set_index("scenario")
    t1 = correlation_with_ideal(frame, ("worst_only", "gap_only", "worst_plus_gap")).set_index(
        "scenario"
    )
    for measure in ("worst_only", "gap_only", "worst_plus_gap"):
        per_scenario = [t1.loc[s, f"rho_{measure}_mean"] for s in SCENARIOS]
        assert t5.loc["toy (mean)", f"rho_{measure}"] == pytest.approx(np.mean(per_scenario))
        assert t5.loc["toy/ratio=3:1/scale=2", f"tau_{measure}"] == pytest.approx(
            t1.loc["toy/ratio=3:1/scale=2", f"tau_{measure}_mean"]
        )


def test_selected_algorithms_argmin_per_seed_and_on_the_seed_average(stored):
    directory, errors = stored
    t6 = selected_algorithms(study_unit_measures(load_study(directory)))
    want = expected_measures(errors)
    for scenario in SCENARIOS:
        scen = want[want["scenario"] == scenario]
        for measure in ("ideal", "worst_plus_gap", "average"):
            for seed in SEEDS:
                part = scen[scen["seed"] == seed]
                best = part.loc[part[measure].idxmin(), "algorithm"]
                got = t6[
                    (t6["scenario"] == scenario) & (t6["seed"] == seed) & (t6["measure"] == measure)
                ]["selected"].item()
                assert got == best
            averaged = scen.groupby("algorithm")[measure].mean()
            got = t6[
                (t6["scenario"] == scenario) & (t6["seed"] == "mean") & (t6["measure"] == measure)
            ]["selected"].item()
            assert got == averaged.idxmin()


def test_degradation_by_scenario_by_hand(stored):
    directory, errors = stored
    f6 = degradation_by_scenario(study_unit_measures(load_study(directory)))
    want = expected_measures(errors)
    for scenario in SCENARIOS:
        for measure in ("worst_plus_gap", "average"):
            values = []
            for seed in SEEDS:
                part = want[(want["scenario"] == scenario) & (want["seed"] == seed)]
                chosen = part.loc[part[measure].idxmin(), "ideal"]
                values.append(abs(part["ideal"].min() - chosen))
            row = f6[(f6["scenario"] == scenario) & (f6["measure"] == measure)].iloc[0]
            assert row["degradation_mean"] == pytest.approx(np.mean(values))
            assert row["degradation_std"] == pytest.approx(np.std(values, ddof=1))


def test_distance_to_ideal_normalises_to_scale_one(stored):
    directory, errors = stored
    f7 = distance_to_ideal_by_scale(study_unit_measures(load_study(directory)))
    want = expected_measures(errors)
    for measure in ("worst_plus_gap", "average"):
        diff = (want["ideal"] - want[measure]).abs()
        at = {s: diff[want["scenario"] == f"toy/ratio=3:1/scale={s}"].mean() for s in (1, 2)}
        rows = f7[(f7["measure"] == measure) & (f7["algorithm"] == "(all)")].set_index("scale")
        assert rows.loc[1, "abs_diff"] == pytest.approx(at[1])
        assert rows.loc[1, "normalized"] == pytest.approx(1.0)
        assert rows.loc[2, "normalized"] == pytest.approx(at[2] / at[1])
        assert rows.loc[2, "n_given"] == 4
        erm = f7[(f7["measure"] == measure) & (f7["algorithm"] == "ERM")].set_index("scale")
        erm_diff = {
            s: diff[
                (want["scenario"] == f"toy/ratio=3:1/scale={s}") & (want["algorithm"] == "ERM")
            ].mean()
            for s in (1, 2)
        }
        assert erm.loc[2, "normalized"] == pytest.approx(erm_diff[2] / erm_diff[1])


def test_baseline_vs_ideal_best_erm(stored):
    directory, errors = stored
    f1 = baseline_vs_ideal_best(study_unit_measures(load_study(directory)))
    want = expected_measures(errors)
    for scenario in SCENARIOS:
        scen = want[want["scenario"] == scenario]
        best = scen.groupby("algorithm")["ideal"].mean().idxmin()
        for measure in ("ideal", "worst_plus_gap", "average"):
            row = f1[(f1["scenario"] == scenario) & (f1["measure"] == measure)].iloc[0]
            assert row["best_algorithm"] == best
            assert row["baseline_mean"] == pytest.approx(
                scen.loc[scen["algorithm"] == "ERM", measure].mean()
            )
            assert row["best_std"] == pytest.approx(
                scen.loc[scen["algorithm"] == best, measure].std(ddof=1)
            )


def test_write_analysis_writes_csvs_and_markdown(stored):
    directory, errors = stored
    written = write_analysis(directory)
    for name in ("table1", "table5", "table6", "figure1", "figure5", "figure6", "figure7"):
        assert written[name].is_file()
    figure5 = pd.read_csv(written["figure5"])
    assert len(figure5) == len(errors)
    assert {"ideal", "worst_plus_gap", "average"} <= set(figure5.columns)
    text = written["markdown"].read_text(encoding="utf-8")
    assert "## Table 1" in text and "1 failed" in text and "TrainingDiverged: NaN" in text
    assert set(analyze(directory)) >= {"table1", "table5", "table6", "figure7"}


def test_correlation_vs_paper_pairs_sr_cmnist_rows():
    table = pd.DataFrame(
        {
            "scenario": ["sr-cmnist/ratio=5:1/scale=1"],
            "family": ["sr-cmnist"],
            "ratio": ["5:1"],
            "scale": pd.array([1], dtype="Int64"),
            "rho_worst_plus_gap_mean": [0.5],
            "rho_average_mean": [0.1],
            "tau_worst_plus_gap_mean": [0.4],
            "tau_average_mean": [0.0],
        }
    )
    row = correlation_vs_paper(table).iloc[0]
    assert (row["paper_rho_worst_plus_gap"], row["paper_rho_average"]) == (0.600, -0.458)
    assert (row["paper_tau_worst_plus_gap"], row["paper_tau_average"]) == (0.465, -0.377)


def test_empty_study_is_a_clear_error(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.bind_config({"name": "x", "algorithms": ["ERM"], "seeds": [0], "scenarios": [{}]})
    with pytest.raises(OodevalError, match="no finished units"):
        analyze(tmp_path)


def test_markdown_table_escapes_pipes_and_rounds():
    frame = pd.DataFrame({"name": ["a|b"], "x": [0.12345]})
    text = render_frame(frame, "markdown", digits=3, right=[False, False])  # as analysis.md
    assert text.splitlines()[1:] == ["| --- | --- |", "| a\\|b | 0.123 |"]


def test_markdown_warns_when_units_come_from_different_sources(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.bind_config({"name": "x", "algorithms": ["A", "B"], "seeds": [0], "scenarios": [{}]})
        rows = [("e1", "e1", 0.1, 5), ("e2", "e2", 0.3, 5), ("e3", "e3", 0.2, 5)]
        rows += [("all", "e1", 0.2, 5)]
        for algorithm, digest in (("A", "aaaa"), ("B", "bbbb")):
            record = UnitRecord(
                "s",
                "f",
                {},
                algorithm,
                0,
                {},
                1,
                "mlp",
                "done",
                versions={"oodeval_source": digest},
                rows=rows,
            )
            store.record_unit(record)
    text = write_analysis(tmp_path)["markdown"].read_text(encoding="utf-8")
    assert "computed by 2 different versions of the oodeval sources" in text


def test_a_config_with_fewer_measures_is_analysed_in_full(tmp_path):
    """A config asking only for average and worst+gap trains its units, and `analyze` still
    computes the ablation (worst only, gap only) from the stored errors instead of refusing
    after training: the same Table 5 as a study whose config listed them."""
    from oodeval.study.runner import run_study
    from tests.helpers.studies import synthetic_config

    few = synthetic_config(measures=["average", "worst_plus_gap"], seeds=[0])
    full = synthetic_config(seeds=[0])
    run_study(few, tmp_path / "few", workers=1, progress=False)
    run_study(full, tmp_path / "full", workers=1, progress=False)
    tables_few, tables_full = analyze(tmp_path / "few"), analyze(tmp_path / "full")
    pd.testing.assert_frame_equal(tables_few["table5"], tables_full["table5"])
    assert {"worst_only", "gap_only"} <= set(tables_few["units"].columns)
