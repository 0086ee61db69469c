"""The meta-evaluation layer over long-form tables, against brute-force loops, scipy and pandas."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from oodeval.errors import OodevalError
from oodeval.measures import REGISTRY, measure_label, undefined_measures
from oodeval.measures import meta as mt
from oodeval.measures.registry import measure_names
from oodeval.study.config import DEFAULT_MEASURES

ALGOS = ["ERM", "IRM", "VREx", "GroupDRO", "Mixup"]
# Two scenarios with different numbers of given environments, so units are scored in two groups.
GIVEN = {"s3": ["g0", "g1", "g2"], "s5": ["g0", "g1", "g2", "g3", "g4"]}
SCALE = {"s3": 1, "s5": 2}
ALL_ENVS = ["a0", "a1", "a2", "a3"]
SEEDS = [0, 1, 2]


def long_errors(seed: int = 0, *, shuffle: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for scenario, given_envs in GIVEN.items():
        for s in SEEDS:
            for a in ALGOS:
                rows += [(scenario, s, a, "loo", e, rng.uniform(0.05, 0.6)) for e in given_envs]
                rows += [(scenario, s, a, "all", e, rng.uniform(0.05, 0.9)) for e in ALL_ENVS]
    frame = pd.DataFrame(
        rows, columns=["scenario", "seed", "algorithm", "split", "environment", "error"]
    )
    if shuffle:  # the layer must not depend on how rows are ordered across units
        order = rng.permutation(len(frame))
        frame = frame.iloc[order].reset_index(drop=True)
    return frame


def brute_units(errors: pd.DataFrame) -> dict[tuple, dict[str, float]]:
    """Per unit, the paper's formulas with Python built-ins (Eqs. 2, 4, 6)."""
    out = {}
    for key, rows in errors.groupby(["scenario", "seed", "algorithm"]):
        loo = list(rows.loc[rows["split"] == "loo", "error"])
        full = list(rows.loc[rows["split"] == "all", "error"])
        n, hi, lo = len(loo), max(loo), min(loo)
        out[key] = {
            "average": sum(loo) / n,
            "worst": hi,
            "best": lo,
            "gap": hi - lo,
            "worst_plus_gap": hi + (hi - lo) / (n - 2),
            "worst_only": hi,
            "gap_only": (hi - lo) / (n - 2),
            "scaled_worst": hi * (n + 1) / n,
            "ideal": max(full),
            "n_given": n,
        }
    return out


@pytest.fixture(scope="module")
def units():
    return pd.DataFrame(mt.unit_measures(long_errors()))


def test_unit_measures_match_the_formulas_for_every_unit(units):
    want = brute_units(long_errors())
    assert len(units) == len(want) == len(GIVEN) * len(SEEDS) * len(ALGOS)
    for row in units.itertuples(index=False):
        expected = want[(row.scenario, row.seed, row.algorithm)]
        assert row.n_given == expected["n_given"]
        for name in [*REGISTRY]:
            assert getattr(row, name) == pytest.approx(expected[name], abs=1e-12), name


def test_units_come_in_order_of_first_appearance_and_keep_label_types():
    errors = long_errors(shuffle=False)
    table = mt.unit_measures(errors, ["average"])
    keys = list(zip(table["scenario"], table["seed"], table["algorithm"], strict=True))
    rows = zip(errors.scenario, errors.seed, errors.algorithm, strict=True)
    assert keys == list(dict.fromkeys(rows))
    assert table["seed"].dtype == np.int64 and isinstance(table["algorithm"][0], str)
    assert list(table) == ["scenario", "seed", "algorithm", "n_given", "average", "ideal"]


def test_without_scenario_seed_or_all_rows():
    errors = {
        "algorithm": ["A", "A", "A", "B", "B", "B"],
        "split": ["loo"] * 6,
        "environment": ["e1", "e2", "e3"] * 2,
        "error": [0.1, 0.2, 0.4, 0.3, 0.3, 0.3],
    }
    table = mt.unit_measures(errors, ["worst_plus_gap"])
    assert table["scenario"].tolist() == ["", ""] and table["seed"].tolist() == ["", ""]
    assert "ideal" not in table
    # A: 0.4 + 0.3 / 1; B: 0.3 + 0
    assert table["worst_plus_gap"].round(12).tolist() == [0.7, 0.3]
    sel = mt.choices(table, ["worst_plus_gap"])
    assert sel["selected"].tolist() == ["B"] and "degradation" not in sel


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f: f.assign(split=f["split"].replace("all", "full")), "unknown split 'full'"),
        (lambda f: pd.concat([f, f.iloc[[0]]]), "has two"),
        (lambda f: f[~((f["split"] == "loo") & (f["algorithm"] == "IRM"))], "has no loo rows"),
        (
            lambda f: f[~((f["split"] == "all") & (f["algorithm"] == "IRM") & (f["seed"] == 1))],
            "has no all rows while other units have them",
        ),
        (lambda f: f.assign(error=f["error"].where(f.index != 3, np.nan)), "NaN"),
        (lambda f: f.assign(error=f["error"] * 10), "look like percentages"),
        (lambda f: f.drop(columns="algorithm"), "no 'algorithm' column"),
    ],
)
def test_bad_errors_are_one_clear_error(change, message):
    with pytest.raises(OodevalError, match=message):
        mt.unit_measures(change(long_errors(shuffle=False)))


def test_unknown_measure_and_too_few_environments_are_refused():
    with pytest.raises(OodevalError, match="unknown measure.*did you mean 'worst_plus_gap'"):
        mt.unit_measures(long_errors(), ["worst_plus_gapp"])  # "worst+gap", the label, works
    two = {"algorithm": ["A", "A"], "split": ["loo", "loo"], "environment": ["e1", "e2"]}
    with pytest.raises(OodevalError, match=r"N=2"):
        mt.unit_measures({**two, "error": [0.1, 0.2]}, ["worst_plus_gap"])


def test_dense_unit_measures_are_the_long_form_ones_row_by_row():
    """`unit_measures` scores each group of one N through `dense_unit_measures`: called on the
    (units, N) matrices directly it gives the same numbers, bit for bit, for LOO and ideal."""
    errors = long_errors(shuffle=False)
    units = pd.DataFrame(mt.unit_measures(errors))
    for scenario, given_envs in GIVEN.items():
        part = errors[errors["scenario"] == scenario]
        loo = part[part["split"] == "loo"]["error"].to_numpy().reshape(-1, len(given_envs))
        full = part[part["split"] == "all"]["error"].to_numpy().reshape(-1, len(ALL_ENVS))
        dense = mt.dense_unit_measures(loo) | mt.dense_unit_measures(full, split="all")
        mine = units[units["scenario"] == scenario]
        assert list(dense) == list(units.columns[4:])  # every LOO measure, then ideal
        for name, values in dense.items():
            assert values.dtype == np.float64
            np.testing.assert_array_equal(values, mine[name].to_numpy(), err_msg=name)


def test_dense_unit_measures_refuse_what_is_not_a_matrix_of_one_split():
    with pytest.raises(OodevalError, match="errors"):
        mt.dense_unit_measures([0.1, 0.2, 0.3])
    with pytest.raises(OodevalError, match="unknown split 'full'"):
        mt.dense_unit_measures([[0.1, 0.2, 0.3]], split="full")
    with pytest.raises(OodevalError, match=r"worst\+gap \(Eq. 6\) is undefined for N=2"):
        mt.dense_unit_measures([[0.1, 0.2]], ["worst_plus_gap"])


def test_ideal_correlations_are_scipys_per_scenario_and_seed(units):
    corr = pd.DataFrame(mt.ideal_correlations(units, ["worst_plus_gap", "average"]))
    assert len(corr) == len(GIVEN) * len(SEEDS) * 2
    for row in corr.itertuples(index=False):
        part = units[(units["scenario"] == row.scenario) & (units["seed"] == row.seed)]
        assert row.spearman == pytest.approx(
            stats.spearmanr(part[row.measure], part["ideal"]).statistic, abs=1e-12
        )
        assert row.kendall == pytest.approx(
            stats.kendalltau(part[row.measure], part["ideal"]).statistic, abs=1e-12
        )
        assert row.n_algorithms == len(ALGOS)


def test_bootstrap_columns_follow_bootstrap_correlation_ci(units):
    corr = mt.ideal_correlations(units, ["average"], bootstrap=50, bootstrap_seed=4)
    assert {"spearman_low", "spearman_high", "kendall_low", "kendall_high", "n_valid"} <= set(corr)
    assert np.all(corr["spearman_low"] <= corr["spearman_high"])
    assert np.all((corr["n_valid"] > 0) & (corr["n_valid"] <= 50))


def test_correlation_summary_is_mean_and_sample_std_over_seeds(units):
    corr = pd.DataFrame(mt.ideal_correlations(units, ["worst_plus_gap"]))
    summary = pd.DataFrame(mt.correlation_summary(corr))
    for row in summary.itertuples(index=False):
        rhos = corr.loc[corr["scenario"] == row.scenario, "spearman"].to_numpy()
        taus = corr.loc[corr["scenario"] == row.scenario, "kendall"].to_numpy()
        assert row.n_seeds == len(SEEDS) and row.n_algorithms == len(ALGOS)
        assert row.spearman_mean == pytest.approx(np.mean(rhos), abs=1e-15)
        assert row.spearman_std == pytest.approx(np.std(rhos, ddof=1), abs=1e-15)
        assert row.kendall_std == pytest.approx(np.std(taus, ddof=1), abs=1e-15)


def brute_selection(scores: dict[str, float]) -> tuple[str, tuple[str, ...]]:
    """argmin by a loop; ties (to 12 decimals) to the first name in sorted order."""
    low = min(round(v, 12) for v in scores.values())
    tied = tuple(sorted(a for a, v in scores.items() if round(v, 12) == low))
    return tied[0], tied


def test_selections_and_degradation_by_brute_force(units):
    measures = ["ideal", "worst_plus_gap", "average"]
    sel = pd.DataFrame(mt.choices(units, measures))
    for row in sel.itertuples(index=False):
        part = units[(units["scenario"] == row.scenario) & (units["seed"] == row.seed)]
        ideal = dict(zip(part["algorithm"], part["ideal"], strict=True))
        name, tied = brute_selection(dict(zip(part["algorithm"], part[row.measure], strict=True)))
        best, _ = brute_selection(ideal)
        assert (row.selected, row.tied) == (name, tied)
        assert row.ideal_of_selected == ideal[name]
        assert row.degradation == pytest.approx(abs(ideal[best] - ideal[name]), abs=0)
        assert row.matches_ideal == (name == best)
    summary = pd.DataFrame(mt.degradation_summary(sel))
    for row in summary.itertuples(index=False):
        values = sel.loc[
            (sel["scenario"] == row.scenario) & (sel["measure"] == row.measure), "degradation"
        ]
        assert row.degradation_mean == pytest.approx(values.mean(), abs=1e-15)
        assert row.degradation_std == pytest.approx(values.std(ddof=1), abs=1e-15)
        if row.measure == "ideal":
            assert row.degradation_mean == 0.0


def test_ties_go_to_the_first_sorted_name_and_are_all_listed():
    units = {
        "scenario": [""] * 3,
        "seed": [""] * 3,
        "algorithm": ["VREx", "ERM", "IRM"],
        "average": [0.3 - 0.1, 0.5, 0.4 - 0.2],  # 0.2 both, up to floating-point noise
        "ideal": [0.5, 0.4, 0.6],
    }
    row = mt.choices(units, ["average"])
    assert row["selected"][0] == "IRM" and row["tied"][0] == ("IRM", "VREx")
    assert row["degradation"][0] == pytest.approx(0.2, abs=1e-12)


def test_seed_means_average_only_algorithms_with_every_seed(units):
    partial = units[~((units["algorithm"] == "IRM") & (units["seed"] == 2))]
    means = pd.DataFrame(mt.seed_means(partial, ["average"]))
    assert set(means["seed"]) == {"mean"} and "IRM" not in set(means["algorithm"])
    want = partial.groupby(["scenario", "algorithm"])[["average", "ideal"]].mean()
    for row in means.itertuples(index=False):
        assert row.average == pytest.approx(want.loc[(row.scenario, row.algorithm), "average"])
        assert row.ideal == pytest.approx(want.loc[(row.scenario, row.algorithm), "ideal"])


def test_distance_to_ideal_matches_pandas_groupby(units):
    frame = units.assign(scale=units["scenario"].map(SCALE), family="toy")
    table = pd.DataFrame(
        mt.distance_to_ideal(frame, ["average"], size="scale", group=("family",))
    ).set_index(["algorithm", "scale"])
    diff = frame.assign(d=(frame["ideal"] - frame["average"]).abs())
    overall = diff.groupby("scale")["d"].mean()
    per_algorithm = diff.groupby(["algorithm", "scale"])["d"].mean()
    for scale in (1, 2):
        row = table.loc[("(all)", scale)]
        assert row["abs_diff"] == pytest.approx(overall[scale], abs=1e-15)
        assert row["normalized"] == pytest.approx(overall[scale] / overall[1], abs=1e-12)
        assert row["n_given"] == len(GIVEN["s3" if scale == 1 else "s5"])
        assert row["reference_scale"] == 1
        erm = table.loc[("ERM", scale)]
        assert erm["normalized"] == pytest.approx(
            per_algorithm[("ERM", scale)] / per_algorithm[("ERM", 1)], abs=1e-12
        )


def test_baseline_vs_best_by_brute_force(units):
    table = pd.DataFrame(mt.baseline_vs_best(units, ["ideal", "average"]))
    for row in table.itertuples(index=False):
        scen = units[units["scenario"] == row.scenario]
        best, _ = brute_selection(scen.groupby("algorithm")["ideal"].mean().to_dict())
        assert row.best_algorithm == best and row.baseline == "ERM"
        erm = scen.loc[scen["algorithm"] == "ERM", row.measure]
        assert row.baseline_mean == pytest.approx(erm.mean(), abs=1e-15)
        assert row.baseline_std == pytest.approx(erm.std(ddof=1), abs=1e-15)
    assert mt.baseline_vs_best(units, ["average"], baseline="Oracle")["scenario"].size == 0


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_row_order_changes_no_number(rnd):
    # Errors on a 1/64 grid: every sum is exact, so any row order must give identical numbers.
    errors = long_errors(shuffle=False).assign(error=lambda f: (f["error"] * 64).round() / 64)
    order = list(range(len(errors)))
    rnd.shuffle(order)
    measures = ["worst_plus_gap", "average"]
    results = []
    for frame in (errors, errors.iloc[order]):
        units = pd.DataFrame(mt.unit_measures(frame, measures)).sort_values(
            ["scenario", "seed", "algorithm"], ignore_index=True
        )
        # seeds in the same order for both, so the means over seeds add in the same order
        summary = mt.correlation_summary(mt.ideal_correlations(units, measures))
        chosen = mt.choices(units, ["ideal", *measures])
        results.append((units, summary, chosen))
    (u1, c1, s1), (u2, c2, s2) = results
    pd.testing.assert_frame_equal(u1, u2, check_exact=True)
    for key in c1:
        np.testing.assert_array_equal(c1[key], c2[key])
    for key in ("selected", "degradation"):
        np.testing.assert_array_equal(s1[key], s2[key])


def test_registry_is_the_one_list_of_measures():
    plain = measure_names(families=False)
    assert plain == [n for n, s in REGISTRY.items() if s.split == "loo"]
    assert undefined_measures(plain, 2) == ["worst_plus_gap", "gap_only"]
    assert set(DEFAULT_MEASURES) <= set(plain)
    assert REGISTRY["ideal"].split == "all" and measure_label("worst_plus_gap") == "worst+gap"
    # the declared minimum N is where the function starts to accept input
    for name, spec in REGISTRY.items():
        for n in (1, 2, 3):
            errors = np.linspace(0.1, 0.3, n)
            if n < spec.min_envs:
                assert undefined_measures([name], n) == [name]
                with pytest.raises(OodevalError):
                    spec.function(errors)
            else:
                assert undefined_measures([name], n) == []
                assert np.isfinite(spec.function(errors))


def test_every_registry_measure_is_lower_is_better_on_a_dominated_row():
    # Algorithm B's errors are A's plus 0.1 everywhere: B is worse under every level measure.
    a = np.array([0.1, 0.2, 0.3, 0.25])
    for name, spec in REGISTRY.items():
        if name in ("gap", "gap_only"):
            continue  # a shift leaves the spread unchanged
        assert spec.function(a + 0.1) > spec.function(a), name


def test_docstring_examples_run():
    # Pinned here until doctests are collected by the default run, so they cannot rot.
    names = ["", *(f".{m.name}" for m in pkgutil.iter_modules(mt.__path__))]
    attempted = 0
    for name in names:
        module = importlib.import_module(f"oodeval.measures.meta{name}")
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, name
        attempted += result.attempted
    assert attempted >= 20
