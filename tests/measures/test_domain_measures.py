"""Domain measures (worst+gap paper Eqs. 2, 4, 6, Table 5; NICO++ Eq. 5) against hand-worked
values, per-algorithm Python loops and the paper's formulas."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from oodeval.errors import OodevalError
from oodeval.measures import (
    MEASURES,
    average,
    best,
    domain_average,
    domain_measures,
    domain_overall,
    domain_std,
    gap,
    gap_only,
    ideal,
    per_domain_summary,
    worst,
    worst_only,
    worst_plus_gap,
)

HAND = [0.1, 0.2, 0.4, 0.3]


def test_hand_worked_example_from_the_issue():
    assert average(HAND) == pytest.approx(0.25, abs=1e-15)
    assert worst(HAND) == 0.4
    assert best(HAND) == 0.1
    assert gap(HAND) == pytest.approx(0.3, abs=1e-15)
    # Eq. 6: 0.4 + 0.3 / (4 - 2)
    assert worst_plus_gap(HAND) == pytest.approx(0.55, abs=1e-15)
    assert worst_only(HAND) == 0.4
    assert gap_only(HAND) == pytest.approx(0.15, abs=1e-15)


def test_second_hand_worked_example_with_six_environments():
    # SR-CMNIST-like ERM: bad on the minority environment only. N = 6 -> gap / 4.
    e = [0.88, 0.20, 0.18, 0.16, 0.14, 0.12]
    assert average(e) == pytest.approx(1.68 / 6)
    assert worst_plus_gap(e) == pytest.approx(0.88 + 0.76 / 4)
    assert gap_only(e) == pytest.approx(0.19)


def test_accuracy_and_percent_inputs_are_converted_to_errors():
    acc_pct = [90.0, 80.0, 60.0, 70.0]  # the HAND errors as accuracies in percent
    assert worst_plus_gap(acc_pct, accuracy=True, percent=True) == pytest.approx(0.55)
    assert average([10, 20, 40, 30], percent=True) == pytest.approx(0.25)
    assert worst([0.9, 0.8, 0.6, 0.7], accuracy=True) == pytest.approx(0.4)
    assert best([0.9, 0.8, 0.6, 0.7], accuracy=True) == pytest.approx(0.1)


def test_leading_axes_match_a_per_algorithm_python_loop():
    rng = np.random.default_rng(0)
    errors = rng.uniform(size=(3, 7, 5))  # seeds x algorithms x environments
    for name, fn in MEASURES.items():
        got = fn(errors)
        assert got.shape == (3, 7)
        for s in range(3):
            for a in range(7):
                row = list(errors[s, a])
                hi, lo = max(row), min(row)
                expected = {
                    "average": sum(row) / len(row),
                    "worst": hi,
                    "best": lo,
                    "gap": hi - lo,
                    "worst_plus_gap": hi + (hi - lo) / (len(row) - 2),
                    "worst_only": hi,
                    "gap_only": (hi - lo) / (len(row) - 2),
                    "scaled_worst": hi * (len(row) + 1) / len(row),
                }[name]
                assert got[s, a] == pytest.approx(expected, rel=1e-12, abs=1e-15), name


def test_domain_measures_equals_the_individual_functions():
    rng = np.random.default_rng(1)
    errors = rng.uniform(size=(11, 4))
    together = domain_measures(errors)
    assert list(together) == list(MEASURES)
    for name, fn in MEASURES.items():
        np.testing.assert_array_equal(together[name], fn(errors))
    assert list(domain_measures(errors, ["gap", "average"])) == ["gap", "average"]


@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("fn", [worst_plus_gap, gap_only])
def test_worst_plus_gap_is_undefined_for_two_or_fewer_environments(fn, n_envs):
    with pytest.raises(OodevalError, match=r"undefined for N=\d.*needs >= 3 environments"):
        fn([0.2] * n_envs)
    with pytest.raises(OodevalError, match="needs >= 3"):
        domain_measures(np.full((4, n_envs), 0.2))


def test_the_other_measures_work_with_two_environments():
    assert gap([0.2, 0.5]) == pytest.approx(0.3)
    assert average([0.2, 0.5]) == pytest.approx(0.35)
    assert domain_measures([0.2, 0.5], ["average", "worst", "best", "gap"])["worst"] == 0.5


def test_ideal_is_the_max_over_all_environments_eq4():
    all_errors = np.array([[0.25, 0.31, 0.9, 0.05], [0.5, 0.45, 0.52, 0.48]])
    np.testing.assert_array_equal(ideal(all_errors), [0.9, 0.52])
    assert ideal([0.3]) == 0.3


@pytest.mark.parametrize(
    "bad, match",
    [
        ([0.1, float("nan"), 0.2], "NaN"),
        ([[0.1, 0.2, 0.3], [0.1, float("inf"), 0.2]], "1 NaN or infinite"),
        ([0.1, 1.5, 0.2], "look like percentages; divide them by 100"),
        ([0.1, -0.1, 0.2], "negative"),
        ([], "no environments"),
        (0.3, "scalar"),
        (["a", "b", "c"], "numbers"),
    ],
)
def test_bad_errors_raise_one_line_oodeval_errors(bad, match):
    with pytest.raises(OodevalError, match=match) as info:
        worst_plus_gap(bad)
    assert "\n" not in str(info.value)


def test_unknown_measure_name_is_reported():
    with pytest.raises(OodevalError, match="unknown measure.*wrost"):
        domain_measures([0.1, 0.2, 0.3], ["wrost"])


finite_errors = arrays(
    np.float64,
    st.tuples(st.integers(1, 4), st.integers(3, 12)),
    elements=st.floats(0.0, 1.0, allow_nan=False, width=64),
)


@settings(max_examples=200, deadline=None)
@given(finite_errors)
def test_worst_plus_gap_ge_worst_ge_average(errors):
    wg, w, avg = worst_plus_gap(errors), worst(errors), average(errors)
    assert np.all(wg >= w)
    assert np.all(w >= avg - 1e-15)  # the mean of equal floats can round up by one ulp
    assert np.all(best(errors) <= avg + 1e-15)
    np.testing.assert_allclose(worst_only(errors) + gap_only(errors), wg, rtol=1e-15, atol=0)


@settings(max_examples=100, deadline=None)
@given(finite_errors, st.randoms(use_true_random=False))
def test_measures_ignore_the_order_of_environments(errors, rnd):
    perm = list(range(errors.shape[-1]))
    rnd.shuffle(perm)
    for name, fn in MEASURES.items():
        np.testing.assert_allclose(fn(errors[..., perm]), fn(errors), rtol=1e-12, err_msg=name)


# --- NICO++ Eq. 5 and WILDS-style summary ----------------------------------------------------


def test_nico_average_overall_std_against_statistics_module():
    acc = [0.91, 0.78, 0.66, 0.83]
    counts = [1200, 300, 450, 50]
    assert domain_average(acc) == pytest.approx(statistics.fmean(acc))
    overall = sum(a * n for a, n in zip(acc, counts, strict=True)) / sum(counts)
    assert domain_overall(acc, counts) == pytest.approx(overall)
    assert domain_std(acc) == pytest.approx(statistics.stdev(acc))  # ddof = 1
    assert domain_std([91, 78, 66, 83], percent=True) == pytest.approx(statistics.stdev(acc))


def test_nico_measures_are_vectorised_over_leading_axes():
    acc = np.array([[0.9, 0.5, 0.7], [0.6, 0.6, 0.9]])
    np.testing.assert_allclose(domain_overall(acc, [1, 1, 2]), [0.7, 0.75])
    np.testing.assert_allclose(domain_std(acc), [0.2, math.sqrt(0.03)])


def test_nico_std_needs_two_domains_and_overall_needs_samples():
    with pytest.raises(OodevalError, match="needs >= 2 test domains"):
        domain_std([0.8])
    with pytest.raises(OodevalError, match="sum to zero"):
        domain_overall([0.8, 0.7], [0, 0])
    with pytest.raises(OodevalError, match="do not match"):
        domain_overall([0.8, 0.7], [1, 2, 3])
    with pytest.raises(OodevalError, match="whole numbers"):
        domain_overall([0.8, 0.7], [1.5, 2])


def test_per_domain_summary_uses_wilds_style_keys():
    summary = per_domain_summary(
        {"sketch": 0.7, "photo": 0.95, "cartoon": 0.8},
        {"sketch": 100, "photo": 300, "cartoon": 100},
    )
    assert list(summary) == [
        "acc_sketch",
        "count_sketch",
        "acc_photo",
        "count_photo",
        "acc_cartoon",
        "count_cartoon",
        "acc_avg",
        "acc_overall",
        "acc_wg",
        "acc_gap",
    ]
    assert summary["acc_avg"] == pytest.approx((0.7 + 0.95 + 0.8) / 3)
    assert summary["acc_overall"] == pytest.approx((70 + 285 + 80) / 500)
    assert summary["acc_wg"] == 0.7
    assert summary["acc_gap"] == pytest.approx(0.25)
    assert summary["count_photo"] == 300


def test_per_domain_summary_rejects_mismatched_domains():
    with pytest.raises(OodevalError, match="counts lacks b"):
        per_domain_summary({"a": 0.5, "b": 0.6}, {"a": 10})
    with pytest.raises(OodevalError, match="empty"):
        per_domain_summary({}, {})


def test_zero_algorithms_give_empty_results_not_a_numpy_error():
    # A leading axis of length 0 (no algorithms yet) is valid input: every measure is empty.
    empty = np.zeros((0, 4))
    for name, values in domain_measures(empty).items():
        assert np.shape(values) == (0,), name
    assert np.shape(ideal(np.zeros((2, 0, 5)))) == (2, 0)


def test_per_domain_summary_rejects_names_that_collide_as_keys():
    # 1 and "1" would both become acc_1: one domain would silently overwrite the other.
    with pytest.raises(OodevalError, match="distinct"):
        per_domain_summary({1: 0.9, "1": 0.5}, {"1": 3})
