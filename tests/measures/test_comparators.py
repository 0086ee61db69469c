"""The comparators beyond the paper (cvar, quantile, median, mean_plus_std,
weighted_worst_plus_gap) against brute force, and the parsing of their specs.

The references below compute in exact rational arithmetic (`fractions.Fraction`) from the
definitions written in oodeval/measures/comparators.py, by loops over sorted Python lists, not
numpy. On a dyadic grid (multiples of 1/64, at most 16 environments) every sum, difference and
product numpy forms along the way is exact in float64 (numerators stay below 2**53), so the
float64 results must equal the correctly rounded exact value bit for bit: those tests use ==.
On arbitrary floats the tolerance is derived where it is used.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oodeval.cli.main import run
from oodeval.errors import OodevalError
from oodeval.measures import domain_measures, get_measure, worst_plus_gap
from oodeval.measures.comparators import cvar_count

EPS = np.finfo(np.float64).eps

# rows of 1..16 errors on the grid k/64, k in 0..64 (ties are frequent: 65 values)
dyadic_rows = st.lists(st.integers(0, 64), min_size=1, max_size=16).map(
    lambda ks: [k / 64 for k in ks]
)
grid_fraction = st.integers(1, 64).map(lambda k: k / 64)
# mean + lam * std, N <= 16, errors in [0, 1], lam <= 3: numpy rounds the mean (eps/2), each
# deviation and its square (eps/2 + eps relative), the sum of N non-negative squares ((N-1)eps/2)
# and the division by N (eps/2): the variance is within (N+3)eps/2 <= 10 eps relative (the
# mean's own error adds N*(eps/2)**2 absolute, negligible), the std within 5 eps + eps/2 for the
# square root, i.e. <= 6 eps * 0.5 absolute; times lam <= 3, plus eps/2 for the product, eps/2
# for the mean and 2.5 * eps/2 for the final sum: under 12 eps, hence 16 eps.
MEAN_PLUS_STD_TOL = 16 * EPS


def ref_cvar(row: list[float], alpha: float) -> Fraction:
    """Mean of the worst k environments, k the least integer with k / N >= alpha (alpha read
    as the decimal it prints as)."""
    n, a = len(row), Fraction(repr(alpha))
    k = next(k for k in range(1, n + 1) if Fraction(k, n) >= a)
    worst_k = sorted(row, reverse=True)[:k]
    return sum(map(Fraction, worst_k), Fraction(0)) / k


def ref_quantile(row: list[float], q: float) -> Fraction:
    """Hyndman-Fan type 7: h = (N - 1) q, interpolate between the floor(h)-th and next value."""
    xs = sorted(map(Fraction, row))
    h = (len(xs) - 1) * Fraction(q)
    j = math.floor(h)
    if j + 1 >= len(xs):
        return xs[-1]
    return xs[j] + (h - j) * (xs[j + 1] - xs[j])


def ref_variance(row: list[float]) -> Fraction:
    """Population variance (ddof=0), exactly."""
    xs = list(map(Fraction, row))
    mean = sum(xs, Fraction(0)) / len(xs)
    return sum(((x - mean) ** 2 for x in xs), Fraction(0)) / len(xs)


def ref_mean(row: list[float]) -> Fraction:
    return sum(map(Fraction, row), Fraction(0)) / len(row)


# -- exact on the dyadic grid (ties included) -----------------------------------------------


@settings(max_examples=150, deadline=None)
@given(row=dyadic_rows, alpha=grid_fraction)
def test_cvar_is_the_mean_of_the_worst_ceil_alpha_n(row: list[float], alpha: float) -> None:
    got = get_measure(f"cvar:alpha={alpha!r}").function(row)
    assert got == float(ref_cvar(row, alpha))


@settings(max_examples=150, deadline=None)
@given(row=dyadic_rows, q=st.integers(0, 64).map(lambda k: k / 64))
def test_quantile_is_numpys_linear_interpolation(row: list[float], q: float) -> None:
    assert get_measure(f"quantile:q={q!r}").function(row) == float(ref_quantile(row, q))


@settings(max_examples=150, deadline=None)
@given(row=dyadic_rows)
def test_median_is_the_middle_value(row: list[float]) -> None:
    xs = sorted(row)
    n = len(xs)
    middle = xs[n // 2] if n % 2 else (Fraction(xs[n // 2 - 1]) + Fraction(xs[n // 2])) / 2
    assert get_measure("median").function(row) == float(middle)
    assert get_measure("median").function(row) == get_measure("quantile:q=0.5").function(row)


@settings(max_examples=150, deadline=None)
@given(row=dyadic_rows, weight=st.integers(0, 16).map(lambda k: k / 4))
def test_weighted_worst_plus_gap_is_worst_plus_weight_times_gap(row, weight) -> None:
    want = Fraction(max(row)) + Fraction(weight) * (Fraction(max(row)) - Fraction(min(row)))
    assert get_measure(f"weighted_worst_plus_gap:weight={weight!r}").function(row) == float(want)


@settings(max_examples=150, deadline=None)
@given(row=dyadic_rows, lam=st.integers(0, 12).map(lambda k: k / 4))
def test_mean_plus_std_uses_the_population_std(row: list[float], lam: float) -> None:
    got = get_measure(f"mean_plus_std:lambda={lam!r}").function(row)
    want = float(ref_mean(row)) + lam * math.sqrt(ref_variance(row))
    assert abs(got - want) <= MEAN_PLUS_STD_TOL
    if len(set(row)) == 1:  # all tied: the std is exactly 0, the measure exactly the mean
        assert got == row[0]


def test_the_ddof_is_zero_not_one() -> None:
    # [0, 1]: population std 0.5 (ddof=0); the sample std (ddof=1) would be sqrt(0.5)
    assert get_measure("mean_plus_std:lambda=1").function([0.0, 1.0]) == 0.5 + 0.5


# -- arbitrary floats, many rows at once --------------------------------------------------------


def test_vectorised_over_leading_axes_against_brute_force_on_random_floats() -> None:
    rng = np.random.default_rng(21)
    errors = rng.random((3, 50, 7))
    errors[0, 0] = 0.25  # a fully tied row
    errors[1, 1, :3] = errors[1, 1, 3]  # a partly tied row
    # The references are exact; numpy's float64 sums over <= 7 terms of size <= 1 are within
    # 7 * eps of exact, means and interpolations add a few roundings: 16 * eps bounds all of it
    # (every value is <= 1 + 2 * 1 = 3, hence the factor 3).
    tol = 16 * EPS * 3
    specs = {
        "cvar:alpha=0.3": lambda r: ref_cvar(r, 0.3),
        "cvar:alpha=1": ref_mean,
        "quantile:q=0.9": lambda r: ref_quantile(r, 0.9),
        "median": lambda r: ref_quantile(r, 0.5),
        "weighted_worst_plus_gap:weight=2": lambda r: 3 * Fraction(max(r)) - 2 * Fraction(min(r)),
    }
    mean_plus_std = domain_measures(errors, ["mean_plus_std:lambda=3"])["mean_plus_std:lambda=3"]
    want = np.array(
        [
            [float(ref_mean(list(r))) + 3 * math.sqrt(ref_variance(list(r))) for r in b]
            for b in errors
        ]
    )
    np.testing.assert_allclose(mean_plus_std, want, rtol=0, atol=MEAN_PLUS_STD_TOL)
    values = domain_measures(errors, list(specs))
    for spec, ref in specs.items():
        assert values[spec].shape == (3, 50)
        want = np.array([[float(ref(list(row))) for row in block] for block in errors])
        np.testing.assert_allclose(values[spec], want, rtol=0, atol=tol, err_msg=spec)
        np.testing.assert_array_equal(get_measure(spec).function(errors), values[spec])


def test_cvar_at_the_ends_is_the_worst_and_the_average() -> None:
    rng = np.random.default_rng(3)
    errors = rng.random((20, 9))
    np.testing.assert_array_equal(get_measure("cvar:alpha=0.1").function(errors), errors.max(-1))
    np.testing.assert_allclose(
        get_measure("cvar:alpha=1").function(errors), errors.mean(-1), rtol=0, atol=9 * EPS
    )


def test_cvar_count_reads_alpha_as_written() -> None:
    # in float64 arithmetic 0.07 * 100 is 7.000000000000001 (ceil 8), 0.56 * 25 is
    # 14.000000000000002 (ceil 15); read as the decimals they are written as, they are whole
    assert math.ceil(0.07 * 100) == 8 and cvar_count(0.07, 100) == 7
    assert math.ceil(0.56 * 25) == 15 and cvar_count(0.56, 25) == 14
    assert cvar_count(0.1, 10) == 1 and cvar_count(0.3, 10) == 3 and cvar_count(0.31, 10) == 4
    assert [cvar_count(a, 4) for a in (0.01, 0.25, 0.26, 0.5, 0.75, 1.0)] == [1, 1, 2, 2, 3, 4]


def test_the_gap_weight_one_over_n_minus_two_is_worst_plus_gap() -> None:
    rng = np.random.default_rng(8)
    errors = rng.random((30, 5))
    family = get_measure(f"weighted_worst_plus_gap:weight={1 / 3!r}").function(errors)
    # the weight 1/3 is rounded once in float64: a relative error of eps/2 on a gap <= 1
    np.testing.assert_allclose(family, worst_plus_gap(errors), rtol=0, atol=4 * EPS)
    assert np.array_equal(np.argsort(family), np.argsort(worst_plus_gap(errors)))


# -- refusals -------------------------------------------------------------------------------

SPECS = [
    "cvar:alpha=0.25",
    "quantile:q=0.5",
    "median",
    "mean_plus_std:lambda=1",
    "weighted_worst_plus_gap:weight=0.5",
]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(spec: str, bad: float) -> None:
    errors = np.array([[0.1, 0.2, 0.3], [0.2, bad, 0.1]])
    with pytest.raises(OodevalError, match="NaN or infinite"):
        get_measure(spec).function(errors)
    with pytest.raises(OodevalError, match="NaN or infinite"):
        domain_measures(errors, [spec])


@pytest.mark.parametrize("spec", SPECS)
def test_out_of_range_and_empty_input_are_refused(spec: str) -> None:
    with pytest.raises(OodevalError, match="percentages"):
        get_measure(spec).function([0.2, 1.5])
    with pytest.raises(OodevalError, match="no environments"):
        get_measure(spec).function(np.zeros((2, 0)))


def test_accuracies_and_percentages_are_converted_first() -> None:
    spec = get_measure("cvar:alpha=0.5")
    # 1 - 0.6 and 1 - 0.7 are rounded once each (eps/2 on values < 1), their mean once more
    got = spec.function([90.0, 80.0, 60.0, 70.0], accuracy=True, percent=True)
    assert abs(got - 0.35) <= 2 * EPS
    assert spec.function([0.9, 0.8, 0.6, 0.7], accuracy=True) == got


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("cvar", "measure cvar needs alpha; write it as cvar:alpha=<float>"),
        ("cvar:alpha=0", "alpha must lie in (0, 1], got 0"),
        ("cvar:alpha=1.5", "alpha must lie in (0, 1], got 1.5"),
        ("cvar:alpha=nan", "alpha must be finite"),
        ("cvar:alpha=lots", "alpha='lots' is not a valid float"),
        ("cvar:beta=0.5", "measure cvar has no parameter 'beta'"),
        ("cvar:alpha=0.5:alpha=0.2", "gives alpha twice"),
        ("cvar:0.5", "'0.5' is not key=value"),
        ("quantile:q=-0.1", "q must lie in [0, 1], got -0.1"),
        ("mean_plus_std:lambda=-1", "lambda must be >= 0"),
        ("weighted_worst_plus_gap:weight=-0.5", "weight must be >= 0"),
        ("average:alpha=1", "measure average takes no parameters; write average"),
        ("cvr:alpha=0.5", "unknown measure 'cvr:alpha=0.5'; choose from average, "),
    ],
)
def test_bad_specs_are_refused_in_one_line(spec: str, message: str) -> None:
    with pytest.raises(OodevalError) as info:
        get_measure(spec)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_specs_are_canonical() -> None:
    assert get_measure(" cvar : alpha = .250 ").name == "cvar:alpha=0.25"
    assert get_measure("mean_plus_std:lambda=1.0").name == "mean_plus_std:lambda=1"
    assert get_measure("weighted_worst_plus_gap:weight=1e-1").name == (
        "weighted_worst_plus_gap:weight=0.1"
    )
    assert get_measure("cvar:alpha=0.25") is get_measure("cvar:alpha=.25")  # built once
    assert get_measure("cvar:alpha=0.25").label == "CVaR_0.25"
    assert get_measure("cvar:alpha=0.25").params == {"alpha": 0.25}
    assert domain_measures([0.1, 0.4], ["quantile:q=1.0"]) == {"quantile:q=1": 0.4}


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(min_value=0.0, max_value=1.0, exclude_min=True))
def test_a_canonical_spec_reads_back_the_same_value(alpha: float) -> None:
    spec = get_measure(f"cvar:alpha={alpha!r}")
    assert spec.params == {"alpha": alpha}
    assert get_measure(spec.name) is spec and float(spec.name.split("=")[1]) == alpha


def test_a_family_without_its_parameters_says_how_to_write_it() -> None:
    with pytest.raises(OodevalError, match=r"^measure cvar needs alpha; write it as cvar:alpha="):
        domain_measures([0.1, 0.2], ["cvar"])
    with pytest.raises(OodevalError, match=r"^unknown measure\(s\) cvr:alpha=1; choose from"):
        domain_measures([0.1, 0.2], ["cvr:alpha=1"])


def test_a_bad_spec_on_the_command_line_is_one_error_line(tmp_path, capsys) -> None:
    out = tmp_path / "out.csv"
    results = str(Path(__file__).parents[2] / "examples" / "results.csv")
    code = run(["measures", results, "--measures", "cvar:alpha=2", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert (
        err.strip() == "error: measure cvar: alpha must lie in (0, 1], got 2; e.g. cvar:alpha=0.25"
    )
