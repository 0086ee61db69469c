"""Meta-evaluation: correlations vs brute-force formulas and scipy, selection ties, degradation vs
a brute-force loop, seed statistics, and the bootstrap interval."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from oodeval.errors import OodevalError
from oodeval.measures import (
    algorithm_choice,
    bootstrap_correlation_ci,
    choice_degradation,
    mean_std,
    rank_correlation,
)
from oodeval.measures.meta import TIE_DECIMALS, TIE_SEPARATOR, algorithm_ranks, tie_text
from oodeval.measures.meta._correlation import (
    KENDALL_PAIRWISE_MAX,
    average_ranks,
    rowwise_kendall_b,
    rowwise_spearman,
)


def brute_kendall_tau_b(x, y):
    """Kendall's tau-b from its definition, by looping over all pairs."""
    conc = disc = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0:
            tied_x += 1
        if dy == 0:
            tied_y += 1
        if dx * dy > 0:
            conc += 1
        elif dx * dy < 0:
            disc += 1
    n0 = len(x) * (len(x) - 1) / 2
    return (conc - disc) / math.sqrt((n0 - tied_x) * (n0 - tied_y))


def brute_spearman_no_ties(x, y):
    """1 - 6 sum d^2 / (n (n^2 - 1)) for distinct values."""
    n = len(x)
    rx = {v: r for r, v in enumerate(sorted(x))}
    ry = {v: r for r, v in enumerate(sorted(y))}
    d2 = sum((rx[a] - ry[b]) ** 2 for a, b in zip(x, y, strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


def test_rank_correlation_hand_worked():
    # measure ranks (ERM, IRM, Mixup) = (1, 3, 2); ideal ranks = (2, 1, 3) -> d = (-1, 2, -1);
    # pairs: (ERM, IRM) discordant, (ERM, Mixup) concordant, (IRM, Mixup) discordant
    r = rank_correlation([0.27, 0.29, 0.28], [0.94, 0.52, 0.97])
    assert r["spearman"] == pytest.approx(1 - 6 * (1 + 4 + 1) / (3 * 8))  # -0.5
    assert r["kendall"] == pytest.approx(-1 / 3)


def test_rank_correlation_matches_brute_force_formulas():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 15))
        x, y = rng.uniform(size=n), rng.uniform(size=n)
        r = rank_correlation(x, y)
        assert r["spearman"] == pytest.approx(brute_spearman_no_ties(list(x), list(y)), abs=1e-12)
        assert r["kendall"] == pytest.approx(brute_kendall_tau_b(x, y), abs=1e-12)


def test_kendall_is_tau_b_with_ties():
    x = [0.1, 0.1, 0.2, 0.3, 0.3, 0.5]
    y = [0.4, 0.2, 0.2, 0.6, 0.9, 0.9]
    r = rank_correlation(x, y)
    assert r["kendall"] == pytest.approx(brute_kendall_tau_b(x, y))
    assert r["kendall"] == pytest.approx(stats.kendalltau(x, y, variant="b").statistic)
    assert r["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic)


def test_rank_correlation_needs_two_algorithms_and_is_nan_when_constant():
    with pytest.raises(OodevalError, match="need >= 2 algorithms"):
        rank_correlation([0.3], [0.5])
    with pytest.raises(OodevalError, match="same length"):
        rank_correlation([0.3, 0.2], [0.5, 0.1, 0.2])
    r = rank_correlation([0.3, 0.3, 0.3], [0.1, 0.2, 0.3])
    assert math.isnan(r["spearman"]) and math.isnan(r["kendall"])


def test_algorithm_choice_is_argmin_with_sorted_name_tie_break():
    sel = algorithm_choice([0.5, 0.2, 0.9], ["ERM", "IRM", "VREx"])
    assert sel == ("IRM", 1, ("IRM",))
    tied = algorithm_choice([0.2, 0.3, 0.2, 0.2], ["VREx", "ERM", "Mixup", "CORAL"])
    assert tied.name == "CORAL" and tied.index == 3
    assert tied.tied == ("CORAL", "Mixup", "VREx")
    # order of the input does not change the choice
    again = algorithm_choice([0.2, 0.2, 0.3, 0.2], ["Mixup", "CORAL", "ERM", "VREx"])
    assert again.name == "CORAL" and again.tied == tied.tied
    # differences at floating-point noise level count as ties
    noisy = algorithm_choice([0.1 + 0.2, 0.3], ["b", "a"])
    assert noisy.name == "a" and noisy.tied == ("a", "b")


def test_algorithm_choice_rejects_bad_names():
    with pytest.raises(OodevalError, match="distinct"):
        algorithm_choice([0.1, 0.2], ["ERM", "ERM"])
    with pytest.raises(OodevalError, match="same length"):
        algorithm_choice([0.1, 0.2], ["ERM"])


def brute_degradation(measure, ideal, names):
    """Section 6.1 by brute force: pick by sorting (score, name) pairs, then compare ideals."""
    pick_measure = min(zip(measure, names, strict=True), key=lambda p: (round(p[0], 12), p[1]))[1]
    pick_ideal = min(zip(ideal, names, strict=True), key=lambda p: (round(p[0], 12), p[1]))[1]
    ideal_of = dict(zip(names, ideal, strict=True))
    return abs(ideal_of[pick_ideal] - ideal_of[pick_measure])


def test_selection_degradation_matches_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        names = [f"alg{k}" for k in rng.permutation(n)]
        # coarse values force frequent ties
        measure = list(rng.integers(0, 4, size=n) / 4)
        ideal = list(rng.integers(0, 4, size=n) / 4)
        got = choice_degradation(measure, ideal, names)
        assert got == pytest.approx(brute_degradation(measure, ideal, names), abs=1e-15)


def test_selection_degradation_hand_worked():
    # average picks ERM (0.27) whose ideal is 0.94; the truly best is IRM (0.52)
    assert choice_degradation(
        [0.27, 0.29, 0.28], [0.94, 0.52, 0.97], ["ERM", "IRM", "Mixup"]
    ) == pytest.approx(0.42)
    assert choice_degradation([0.9, 0.6], [0.9, 0.6], ["ERM", "IRM"]) == 0.0


def test_mean_std_uses_ddof_one():
    vals = [0.61, 0.72, 0.55]
    mean, std = mean_std(vals)
    assert mean == pytest.approx(statistics.fmean(vals))
    assert std == pytest.approx(statistics.stdev(vals))
    assert mean_std(vals, ddof=0)[1] == pytest.approx(statistics.pstdev(vals))
    m1, s1 = mean_std([0.4])
    assert m1 == 0.4 and math.isnan(s1)
    with pytest.raises(OodevalError):
        mean_std([])


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
        )
    )
)
def test_vectorised_bootstrap_statistics_match_scipy_per_row(pair):
    x = np.array([pair[0]], dtype=float)
    y = np.array([pair[1]], dtype=float)
    rho, tau = rowwise_spearman(x, y)[0], rowwise_kendall_b(x, y)[0]
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        assert math.isnan(rho) and math.isnan(tau)
    else:
        assert rho == pytest.approx(stats.spearmanr(x[0], y[0]).statistic, abs=1e-12)
        assert tau == pytest.approx(stats.kendalltau(x[0], y[0]).statistic, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.lists(
            st.lists(st.one_of(st.integers(0, 3), st.just(None)), min_size=n, max_size=n),
            min_size=1,
            max_size=4,
        )
    )
)
def test_average_ranks_match_scipy_rankdata_with_ties_and_missing_values(rows):
    # scipy.stats stays the reference here; oodeval ranks in numpy so `measures` need not
    # import it (about a second of start-up)
    x = np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)
    np.testing.assert_array_equal(average_ranks(x), stats.rankdata(x, axis=1, nan_policy="omit"))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 20).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 5), min_size=n, max_size=n),
            st.lists(st.integers(0, 5), min_size=n, max_size=n),
        )
    )
)
def test_rank_correlation_matches_scipy_with_ties(pair):
    x, y = (np.array(v, dtype=float) / 10 for v in pair)
    r = rank_correlation(x, y)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        assert math.isnan(r["spearman"]) and math.isnan(r["kendall"])
    else:  # sums of at most 20^2 small integers, one division and a square root: 1e-12 is ample
        assert r["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert r["kendall"] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)


def test_rank_correlation_beyond_the_pairwise_limit_matches_scipy():
    rng = np.random.default_rng(5)
    n = KENDALL_PAIRWISE_MAX + 50
    x, y = np.round(rng.uniform(size=(2, n)), 2)
    r = rank_correlation(x, y)
    assert r["kendall"] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    assert r["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_bootstrap_interval_matches_a_scipy_loop_over_the_same_resamples():
    rng = np.random.default_rng(11)
    m, i = rng.uniform(size=9), rng.uniform(size=9)
    ci = bootstrap_correlation_ci(m, i, n_resamples=300, confidence=0.9, seed=4)
    idx = np.random.default_rng(4).integers(0, 9, size=(300, 9))
    rhos, taus = [], []
    for row in idx:
        if np.ptp(m[row]) == 0 or np.ptp(i[row]) == 0:
            continue
        rhos.append(stats.spearmanr(m[row], i[row]).statistic)
        taus.append(stats.kendalltau(m[row], i[row]).statistic)
    assert ci["n_valid"] == len(rhos)
    np.testing.assert_allclose(ci["spearman"], np.quantile(rhos, [0.05, 0.95]), atol=1e-12)
    np.testing.assert_allclose(ci["kendall"], np.quantile(taus, [0.05, 0.95]), atol=1e-12)
    point = rank_correlation(m, i)
    assert ci["spearman"][0] <= point["spearman"] <= ci["spearman"][1]


def test_bootstrap_is_deterministic_and_handles_degenerate_resamples():
    a = bootstrap_correlation_ci([0.1, 0.5], [0.2, 0.9], n_resamples=500, seed=7)
    b = bootstrap_correlation_ci([0.1, 0.5], [0.2, 0.9], n_resamples=500, seed=7)
    assert a == b
    # with 2 algorithms a resample is either both distinct (rho = 1) or one drawn twice (dropped)
    assert a["spearman"] == (1.0, 1.0) and 0 < a["n_valid"] < 500
    const = bootstrap_correlation_ci([0.3, 0.3, 0.3], [0.1, 0.2, 0.3], n_resamples=50)
    assert const["n_valid"] == 0 and all(math.isnan(v) for v in const["spearman"])


def test_bootstrap_large_n_uses_the_same_statistic():
    rng = np.random.default_rng(2)
    m = rng.uniform(size=250)
    i = m + rng.normal(0, 0.3, size=250)
    ci = bootstrap_correlation_ci(m, i, n_resamples=20, seed=1)
    point = rank_correlation(m, i)
    assert ci["kendall"][0] < point["kendall"] < ci["kendall"][1]
    assert ci["n_valid"] == 20


def test_bootstrap_rejects_bad_options():
    with pytest.raises(OodevalError, match="confidence"):
        bootstrap_correlation_ci([0.1, 0.2], [0.3, 0.4], confidence=1.5)
    with pytest.raises(OodevalError, match="n_resamples"):
        bootstrap_correlation_ci([0.1, 0.2], [0.3, 0.4], n_resamples=0)
    with pytest.raises(OodevalError, match="need >= 2 algorithms"):
        bootstrap_correlation_ci([0.1], [0.3])


@pytest.mark.parametrize("seed", ["1", 1.5, None, True])
def test_bootstrap_seed_must_be_an_integer(seed):
    # A string or float seed would reach numpy as a TypeError, and None would be unseeded.
    with pytest.raises(OodevalError, match="seed must be an integer"):
        bootstrap_correlation_ci([0.1, 0.2, 0.3], [0.3, 0.1, 0.2], seed=seed)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["s0", "s1", "s2"]),
            st.one_of(st.sampled_from([0.1, 0.2, 0.3 - 0.1, 0.25]), st.just(math.nan)),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_algorithm_ranks_match_pandas_min_rank_within_groups(rows):
    # pandas' groupby rank(method="min") on values rounded to TIE_DECIMALS is the reference; NaN
    # gets no rank. 0.3 - 0.1 and 0.2 differ in the last bit and must tie.
    frame = pd.DataFrame(rows, columns=["group", "score"])
    want = frame["score"].round(TIE_DECIMALS).groupby(frame["group"]).rank(method="min")
    got = algorithm_ranks(frame["score"], [frame["group"]])
    np.testing.assert_array_equal(got, want.to_numpy())


def test_algorithm_ranks_without_rounding_keep_last_bit_differences():
    assert algorithm_ranks([0.3 - 0.1, 0.2]).tolist() == [1.0, 1.0]
    assert algorithm_ranks([0.3 - 0.1, 0.2], decimals=None).tolist() == [1.0, 2.0]
    assert algorithm_ranks([]).tolist() == []


def test_tie_text_joins_with_the_one_separator():
    assert TIE_SEPARATOR == "|"
    assert tie_text(algorithm_choice([0.1, 0.3, 0.1], ["VREx", "ERM", "IRM"]).tied) == "IRM|VREx"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Selection", "Choice"),
        ("select_algorithm", "algorithm_choice"),
        ("selection_degradation", "choice_degradation"),
        ("selections", "choices"),
    ],
)
def test_last_releases_selection_names_still_work_and_warn(old, new):
    import oodeval.measures
    import oodeval.measures.meta

    for module in (oodeval.measures, oodeval.measures.meta):
        with pytest.warns(DeprecationWarning, match=f"use {new}"):
            found = getattr(module, old)
        assert found is getattr(module, new)
    with pytest.raises(AttributeError):
        oodeval.measures.no_such_name  # noqa: B018
