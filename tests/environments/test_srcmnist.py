"""SR-CMNIST and CMNIST (Section 4.1 of the worst+gap paper), checked on real MNIST."""

from __future__ import annotations

import inspect
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from oodeval.environments import build_scenario, load_source
from oodeval.environments.spurious import environment_name
from oodeval.environments.srcmnist import given_values
from oodeval.errors import OodevalError

RATIOS = {"3:1": (3, 1), "4:1": (4, 1), "5:1": (5, 1)}
# Binomial acceptance band: a correct generator fails one check with probability < 2e-7, and the
# whole file (about 250 checks) with probability < 1e-4.
ALPHA = 1e-7


@pytest.fixture(scope="module")
def mnist(mnist_dir):
    return load_source(f"mnist:{mnist_dir}")


def expected_given(major: int, minor: int, scale: int) -> list[Fraction]:
    """E_given from the formulas of Section 4.1, in exact rational arithmetic."""
    n_major, n_minor = major * scale, minor * scale
    majors = [Fraction(8, 10) + Fraction(1, 10) * Fraction(k, n_major - 1) for k in range(n_major)]
    if n_minor == 1:
        minors = [Fraction(1, 10)]
    else:
        minors = [
            Fraction(1, 10) + Fraction(1, 10) * Fraction(k, n_minor - 1) for k in range(n_minor)
        ]
    return majors + minors


def binomial_ok(successes: int, n: int, p: float) -> bool:
    """True when `successes` lies in the central 1 - ALPHA band of Binomial(n, p)."""
    lo, hi = stats.binom.ppf([ALPHA / 2, 1 - ALPHA / 2], n, p)
    return lo <= successes <= hi


@pytest.mark.parametrize("ratio", sorted(RATIOS))
@pytest.mark.parametrize("scale", [1, 2, 3, 4])
def test_all_twelve_scenarios_have_exactly_the_papers_given_sets(ratio, scale):
    sc = build_scenario("sr-cmnist", source="digits", ratio=ratio, scale=scale)
    want = expected_given(*RATIOS[ratio], scale)
    got = sc.given_values
    assert len(got) == len(want) == sum(RATIOS[ratio]) * scale
    assert all(abs(g - float(w)) < 1e-11 for g, w in zip(got, want, strict=True))
    assert len(set(sc.given_names)) == len(sc.given_names)
    assert sc.name == f"sr-cmnist/ratio={ratio}/scale={scale}"
    assert sc.params["ratio"] == ratio and sc.params["scale"] == scale


def test_hand_written_given_sets():
    assert given_values("3:1", 1) == (0.8, 0.85, 0.9, 0.1)
    sc = build_scenario("sr-cmnist", ratio="4:1", scale=3)
    assert sc.given_names[-3:] == ["e=0.10", "e=0.15", "e=0.20"]
    assert len(sc.given_names) == 15 and sc.given_names[:2] == ["e=0.80", "e=0.8091"]
    assert given_values("5:1", 2)[-2:] == (0.1, 0.2)


def test_e_all_is_the_101_grid():
    sc = build_scenario("sr-cmnist")
    assert sc.all_names[:3] == ["e=0.00", "e=0.01", "e=0.02"] and sc.all_names[-1] == "e=1.00"
    assert len(set(sc.all_names)) == 101
    assert np.allclose(sc.all_values, np.arange(101) / 100)


@settings(max_examples=40, deadline=None)
@given(major=st.integers(1, 12), minor=st.integers(0, 12), scale=st.integers(1, 4))
def test_given_set_sizes_and_unique_names_for_any_ratio(major, minor, scale):
    if minor > major:
        major, minor = minor, major
    values = given_values(f"{major}:{minor}", scale)
    assert len(values) == (major + minor) * scale
    names = [environment_name(v) for v in values]
    assert len(set(names)) == len(names)
    assert all(0.8 <= v <= 0.9 for v in values[: major * scale])
    assert all(0.1 <= v <= 0.2 for v in values[major * scale :])


def test_label_noise_and_color_flips_follow_the_papers_rates(mnist):
    sc = build_scenario("sr-cmnist", source=mnist, ratio="5:1", scale=4, seed=3)
    digits = mnist.labels
    for env in sc.given():
        idx = env.meta["indices"]
        prelim = env.meta["preliminary"]
        assert np.array_equal(prelim, (digits[idx] >= 5).astype(int))
        color = env.meta["spurious"]
        assert binomial_ok(int(np.sum(color != env.labels)), len(env), env.meta["e"])
        assert binomial_ok(int(np.sum(env.labels != prelim)), len(env), 0.25)
    first = None
    for env in sc.evaluation():
        color = env.meta["spurious"]
        assert binomial_ok(int(np.sum(color != env.labels)), len(env), env.meta["e"]), env.name
        if first is None:
            first = env
    noisy = int(np.sum(first.labels != first.meta["preliminary"]))
    assert binomial_ok(noisy, len(first), 0.25)
    assert np.array_equal(first.meta["preliminary"], (digits[first.meta["indices"]] >= 5))


def test_pooled_rates_are_tight(mnist):
    """Pooled over the 101 environments: mean disagreement tracks e with slope 1, intercept 0."""
    sc = build_scenario("sr-cmnist", source=mnist, seed=1)
    rates = np.array([np.mean(env.meta["spurious"] != env.labels) for env in sc.evaluation()])
    slope, intercept = np.polyfit(np.asarray(sc.all_values), rates, 1)
    assert abs(slope - 1) < 0.01 and abs(intercept) < 0.005
    assert rates[0] == 0.0 and rates[-1] == 1.0


def test_images_are_the_downsampled_digit_in_the_color_channel(mnist):
    sc = build_scenario("sr-cmnist", source=mnist, ratio="3:1", scale=1)
    env = sc.given()[0]
    assert env.images.shape == (len(env), 2, 14, 14) and env.images.dtype == np.float32
    digits = mnist.images[env.meta["indices"], 0, ::2, ::2]
    rows = np.arange(len(env))
    color = env.meta["spurious"]
    assert np.array_equal(env.images[rows, color], digits)
    assert not env.images[rows, 1 - color].any()
    full = build_scenario("sr-cmnist", source=mnist, size=28)
    assert full.input_shape == (2, 28, 28) and full.given()[0].images.shape[1:] == (2, 28, 28)


@pytest.mark.parametrize("family", ["sr-cmnist", "cmnist"])
def test_size_28_is_domainbeds_full_resolution_digit_and_is_named_apart(mnist, family):
    full = build_scenario(family, source=mnist, size=28)
    env = full.given()[0]
    assert full.input_shape == (2, 28, 28) and env.images.shape == (len(env), 2, 28, 28)
    rows, color = np.arange(len(env)), env.meta["spurious"]
    assert np.array_equal(env.images[rows, color], mnist.images[env.meta["indices"], 0])
    assert not env.images[rows, 1 - color].any()
    default = build_scenario(family, source=mnist)
    assert full.name == default.name + "/size=28" and full.params["size"] == 28
    explicit = build_scenario(family, source=mnist, size=14)
    assert explicit.name == default.name and explicit.params["size"] == default.params["size"] == 14
    assert explicit.given()[0].images.tobytes() == default.given()[0].images.tobytes()


def test_a_101_environment_scenario_at_28x28_keeps_one_byte_per_source_pixel(mnist):
    """MNIST pixels are k/255, so the scenario keeps them as uint8 (its given pool and held-out
    images: 1.2 bytes per source pixel) and still renders the exact float32 images; float32
    storage would take 4.8 bytes."""
    import pickle

    sc = build_scenario("sr-cmnist", source=mnist, size=28)
    pixels = len(mnist) * 28 * 28
    assert len(sc.all_names) == 101 and len(pickle.dumps(sc)) < 1.3 * pixels
    first = next(sc.evaluation())
    digits = mnist.images[first.meta["indices"], 0]
    assert first.images.dtype == np.float32
    assert np.array_equal(first.images[np.arange(len(first)), first.meta["spurious"]], digits)


def test_digits_are_never_upsampled_to_28():
    with pytest.raises(OodevalError, match="never upsamples; use a 28x28 source") as info:
        build_scenario("sr-cmnist", source="digits", size=28)
    assert "\n" not in str(info.value)
    resized = build_scenario("cmnist", source=load_source("digits", size=28), size=28)
    assert resized.input_shape == (2, 28, 28) and resized.name == "cmnist/size=28"


def test_cli_show_refuses_to_upsample_digits():
    from typer.testing import CliRunner

    from oodeval.cli.main import app

    bad = CliRunner().invoke(
        app, ["envs", "show", "sr-cmnist", "--size", "28", "--source", "digits"]
    )
    assert bad.exit_code == 2 and "never upsamples" in bad.output


def test_cli_show_takes_the_size(mnist_dir):
    from typer.testing import CliRunner

    from oodeval.cli.main import app

    args = ["envs", "show", "cmnist", "--source", f"mnist:{mnist_dir}", "--size", "28"]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert "scenario: cmnist/size=28" in ok.output and "input shape: 2x28x28" in ok.output


def test_given_environments_are_disjoint_and_apart_from_the_held_out_images(mnist):
    sc = build_scenario("sr-cmnist", source=mnist, ratio="5:1", scale=4)
    sets = [set(idx.tolist()) for idx in sc.given_indices]
    held_out = set(sc.eval_indices.tolist())
    assert sum(map(len, sets)) == len(set().union(*sets))
    assert not held_out & set().union(*sets)
    assert len(held_out) == 2000 and all(len(s) == 8000 // 24 for s in sets)
    sizes = sc.sizes()
    assert set(sizes["evaluation"].values()) == {2000} and len(sizes["given"]) == 24


def test_same_seed_same_bytes_other_seed_other_data(mnist):
    a = build_scenario("sr-cmnist", source=mnist, ratio="4:1", scale=2, seed=7)
    b = build_scenario("sr-cmnist", source=mnist, ratio="4:1", scale=2, seed=7)
    c = build_scenario("sr-cmnist", source=mnist, ratio="4:1", scale=2, seed=8)
    for ea, eb in zip(a.given(), b.given(), strict=True):
        assert ea.images.tobytes() == eb.images.tobytes()
        assert ea.labels.tobytes() == eb.labels.tobytes()
    for ea, eb in zip(a.evaluation(), b.evaluation(), strict=True):
        assert ea.images.tobytes() == eb.images.tobytes() and ea.name == eb.name
    assert a.given()[0].images.tobytes() != c.given()[0].images.tobytes()


def test_evaluation_is_generated_lazily():
    sc = build_scenario("sr-cmnist", source="digits")
    gen = sc.evaluation()
    assert inspect.isgenerator(gen)
    first = next(gen)
    assert first.name == "e=0.00"


def test_digits_keep_their_8x8_resolution_and_splits_work():
    sc = build_scenario("sr-cmnist", source="digits", ratio="5:1", scale=4)
    assert sc.input_shape == (2, 8, 8)
    env = sc.given()[0]
    train, val = env.split(0.2, seed=0)
    assert len(train) + len(val) == len(env) and len(val) == round(0.2 * len(env))


def test_cmnist_has_the_three_classic_environments():
    sc = build_scenario("cmnist", source="digits")
    assert sc.given_names == ["e=0.10", "e=0.20", "e=0.90"]
    assert len(sc.all_names) == 101 and sc.name == "cmnist"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"scale": 0}, "scale must be an integer >= 1"),
        ({"scale": 1.5}, "scale must be an integer >= 1"),
        ({"ratio": "4-1"}, "malformed ratio '4-1'"),
        ({"ratio": "a:b"}, "malformed ratio"),
        ({"ratio": "1:4"}, "N_major >= N_minor"),
        ({"n_per_given": 5000}, "too few images"),
        ({"n_eval": 5000}, "too few images"),
        ({"size": 5}, "must divide"),
        ({"pattern": "1-1"}, "has no parameter 'pattern'"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, message):
    with pytest.raises(OodevalError, match=message) as info:
        build_scenario("sr-cmnist", source="digits", **params)
    assert "\n" not in str(info.value)


def test_unknown_family_is_a_clear_error():
    with pytest.raises(OodevalError, match="unknown dataset family 'rotated-mnist'"):
        build_scenario("rotated-mnist")
