"""Colored and Lined families (Section 4.2 of the worst+gap paper) and the family registry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from oodeval.environments import FAMILIES, ImageSource, build_scenario, load_source
from oodeval.environments.colored import TINTS, colored_given_values
from oodeval.environments.domains import NICO_TRAIN_DOMAINS
from oodeval.environments.lined import line_colors, lined_given_values
from oodeval.environments.spurious import compact_pixels, replaced_labels, unit_pixels
from oodeval.errors import OodevalError

ALPHA = 1e-7


def binomial_ok(successes: int, n: int, p: float) -> bool:
    lo, hi = stats.binom.ppf([ALPHA / 2, 1 - ALPHA / 2], n, p)
    return lo <= successes <= hi


@pytest.fixture(scope="module")
def digits():
    return load_source("digits")


def test_registry_lists_every_family_with_parameters():
    assert list(FAMILIES) == ["sr-cmnist", "cmnist", "colored", "lined", "corrupted", "domains"]
    assert FAMILIES["sr-cmnist"].parameters()["ratio"] == "3:1"
    assert FAMILIES["corrupted"].parameters()["severity"] == 3
    assert FAMILIES["domains"].parameters()["given"] == NICO_TRAIN_DOMAINS


def test_colored_default_and_ratio_variants():
    assert colored_given_values("4:1") == (0.05, 0.1, 0.15, 0.2, 0.5)
    assert colored_given_values("3:2") == (0.05, 0.1, 0.15, 0.5, 0.55)
    assert colored_given_values("5:0") == (0.05, 0.1, 0.15, 0.2, 0.25)
    sc = build_scenario("colored", source="digits", ratio="5:0")
    assert sc.given_names == ["e=0.05", "e=0.10", "e=0.15", "e=0.20", "e=0.25"]
    assert len(sc.all_names) == 101 and sc.num_classes == 2


def test_lined_default_and_ratio_variants():
    assert lined_given_values("4:1") == (0.5, 0.8, 0.85, 0.9, 0.95)
    assert lined_given_values("3:2") == (0.45, 0.5, 0.85, 0.9, 0.95)
    assert lined_given_values("5:0") == (0.75, 0.8, 0.85, 0.9, 0.95)
    sc = build_scenario("lined", source="digits")
    assert sc.given_names == ["e=0.50", "e=0.80", "e=0.85", "e=0.90", "e=0.95"]


def test_colored_images_are_the_base_times_the_tint_of_the_color_label(digits):
    sc = build_scenario("colored", source=digits, seed=2)
    for env in [*sc.given(), next(iter(sc.evaluation()))]:
        base = np.repeat(digits.images[env.meta["indices"]], 3, axis=1)
        tint = TINTS[env.meta["spurious"]][:, :, None, None]
        assert np.allclose(env.images, base * tint)
        assert np.array_equal(env.meta["preliminary"], digits.labels[env.meta["indices"]] >= 5)


def test_colored_rates_match_e_and_label_noise(digits):
    sc = build_scenario("colored", source=digits, seed=4)
    pooled_noise = pooled_n = 0
    for env in sc.given():
        assert binomial_ok(int(np.sum(env.meta["spurious"] != env.labels)), len(env), env.meta["e"])
        pooled_noise += int(np.sum(env.labels != env.meta["preliminary"]))
        pooled_n += len(env)
    assert binomial_ok(pooled_noise, pooled_n, 0.25)
    for env in sc.evaluation():
        assert binomial_ok(int(np.sum(env.meta["spurious"] != env.labels)), len(env), env.meta["e"])


def test_lined_line_matches_the_label_with_probability_e(digits):
    sc = build_scenario("lined", source=digits, seed=5)
    colors = line_colors(10)
    thickness = max(1, 8 // 10)
    for env in sc.evaluation():
        line = env.meta["spurious"]
        assert binomial_ok(int(np.sum(line == env.labels)), len(env), env.meta["e"]), env.name
        assert np.allclose(env.images[:, :, 0, 0], colors[line])
        base = np.repeat(digits.images[env.meta["indices"]], 3, axis=1)
        assert np.array_equal(env.images[:, :, thickness:], base[:, :, thickness:])


@pytest.mark.parametrize("k", [2, 10, 13])
def test_every_class_line_shows_on_black_and_on_white_backgrounds(k):
    # A black line on a digit's black background (or a white one on a white photo) would leave
    # that class without its spurious feature.
    colors = line_colors(k)
    assert colors.shape == (k, 3)
    assert np.all(colors.max(axis=1) >= 0.3) and np.all(colors.min(axis=1) <= 0.7)
    gaps = np.abs(colors[:, None] - colors[None]).max(axis=2) + np.eye(k)
    assert gaps.min() >= 0.15


def test_lined_label_noise_is_25_percent_and_uniform_over_other_classes():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, size=200_000)
    noisy = replaced_labels(labels, 0.25, 10, np.random.default_rng(1))
    changed = noisy != labels
    assert binomial_ok(int(changed.sum()), labels.size, 0.25)
    offsets = (noisy[changed] - labels[changed]) % 10
    assert offsets.min() == 1
    counts = np.bincount(offsets, minlength=10)[1:]
    assert stats.chisquare(counts).pvalue > 1e-4


def test_lined_over_a_tiny_ten_class_source_counts_and_classes():
    rng = np.random.default_rng(0)
    images = rng.random((400, 3, 32, 32)).astype(np.float32)
    src = ImageSource("toy", images, np.arange(400) % 10, tuple("abcdefghij"))
    sc = build_scenario("lined", source=src, n_per_given=40, n_eval=50)
    assert sc.num_classes == 10 and sc.input_shape == (3, 32, 32)
    assert [len(e) for e in sc.given()] == [40] * 5
    env = next(iter(sc.evaluation()))
    assert len(env) == 50 and env.images.shape == (50, 3, 32, 32)
    assert np.all(env.images[:, :, :3] == line_colors(10)[env.meta["spurious"]][:, :, None, None])


def test_families_are_deterministic(digits):
    for family in ("colored", "lined"):
        a = build_scenario(family, source=digits, seed=9)
        b = build_scenario(family, source=digits, seed=9)
        assert all(
            x.images.tobytes() == y.images.tobytes()
            for x, y in zip(a.given(), b.given(), strict=True)
        )
        xa, xb = list(a.evaluation())[37], list(b.evaluation())[37]
        assert xa.images.tobytes() == xb.images.tobytes()


@pytest.mark.parametrize(
    "family, params, message",
    [
        ("colored", {"ratio": "2:3"}, "N_major >= N_minor"),
        ("colored", {"given": [0.1, 1.5]}, r"must lie in \[0, 1\]"),
        ("colored", {"given": [0.1, 0.1]}, "duplicate"),
        ("lined", {"ratio": "four:one"}, "malformed ratio"),
        ("lined", {"eval_fraction": 1.0}, "eval_fraction"),
        ("lined", {"scale": 2}, "has no parameter 'scale'"),
    ],
)
def test_bad_family_parameters(family, params, message):
    with pytest.raises(OodevalError, match=message):
        build_scenario(family, source="digits", **params)


def test_too_few_images_in_source_is_a_clear_error():
    src = ImageSource(
        "tiny", np.zeros((30, 1, 8, 8), np.float32), np.arange(30) % 10, tuple("0123456789")
    )
    with pytest.raises(OodevalError, match="source tiny has too few images"):
        build_scenario("colored", source=src)


@settings(max_examples=50, deadline=None)
@given(
    labels=st.lists(st.integers(0, 9), min_size=1, max_size=200),
    k=st.integers(2, 10),
    seed=st.integers(0, 2**31),
)
def test_replaced_labels_keep_or_change_exactly_as_p_says(labels, k, seed):
    y = np.asarray(labels) % k
    assert np.array_equal(replaced_labels(y, 0.0, k, np.random.default_rng(seed)), y)
    changed = replaced_labels(y, 1.0, k, np.random.default_rng(seed))
    assert np.all(changed != y) and changed.min() >= 0 and changed.max() < k


@settings(max_examples=50, deadline=None)
@given(
    codes=st.lists(st.integers(0, 255), min_size=1, max_size=3000),
    bad=st.floats(0.0, 1.0, width=32),
)
def test_pixels_of_k_over_255_are_stored_as_uint8_and_restored_bit_exactly(codes, bad):
    images = np.asarray(codes, dtype=np.uint8).astype(np.float32) / np.float32(255)
    compact = compact_pixels(images.reshape(-1, 1), block=7)
    assert compact.dtype == np.uint8 and compact.ravel().tolist() == codes
    assert unit_pixels(compact).ravel().tobytes() == images.tobytes()
    if not np.any(np.float32(np.rint(bad * 255)) / np.float32(255) == np.float32(bad)):
        other = np.append(images, np.float32(bad)).reshape(-1, 1)
        assert compact_pixels(other, block=7) is other


def test_colored_over_8_bit_images_renders_the_same_floats_as_before(digits):
    """An 8-bit source is stored as uint8 yet renders exactly base x tint in float32."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, size=(200, 3, 8, 8)).astype(np.uint8)
    src = ImageSource("bytes", codes.astype(np.float32) / np.float32(255), rng.integers(0, 2, 200),
                      ("a", "b"))  # fmt: skip
    env = build_scenario("colored", source=src).given()[0]
    base = src.images[env.meta["indices"]]
    assert env.images.dtype == np.float32
    assert np.array_equal(env.images, base * TINTS[env.meta["spurious"]][:, :, None, None])


def test_split_carries_per_row_meta(digits):
    env = build_scenario("colored", source=digits).given()[0]
    train, val = env.split(0.25, seed=1)
    assert len(train.meta["spurious"]) == len(train) and len(val.meta["spurious"]) == len(val)
    assert train.meta["e"] == env.meta["e"]
    rows = np.concatenate([train.meta["indices"], val.meta["indices"]])
    assert sorted(rows.tolist()) == sorted(env.meta["indices"].tolist())
    by_index = dict(zip(env.meta["indices"].tolist(), env.meta["spurious"].tolist(), strict=True))
    assert all(
        by_index[i] == c for i, c in zip(val.meta["indices"], val.meta["spurious"], strict=True)
    )


@pytest.mark.parametrize("family", ["sr-cmnist", "cmnist", "colored", "lined"])
def test_scenarios_pickle_into_worker_processes_unchanged(family):
    import pickle

    from oodeval.environments import build_scenario

    scenario = build_scenario(family, source="digits", seed=3)
    copy = pickle.loads(pickle.dumps(scenario))
    for a, b in zip(scenario.given(), copy.given(), strict=True):
        assert a.name == b.name
        assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    first = next(iter(copy.evaluation()))
    assert np.array_equal(first.images, next(iter(scenario.evaluation())).images)


def test_every_spurious_family_passes_its_pool_split_through(digits):
    """seed, eval_fraction, n_per_given and n_eval reach the scenario, each as itself."""
    split = ["seed", "eval_fraction", "n_per_given", "n_eval"]
    spurious = [f for f in FAMILIES.values() if set(split) <= {"seed", *f.parameters()}]
    assert {"sr-cmnist", "cmnist", "colored", "lined"} <= {f.name for f in spurious}
    total = len(digits.labels)
    for family in spurious:
        sc = build_scenario(family.name, source=digits, seed=3, eval_fraction=0.3, n_per_given=40)
        assert sc.seed == 3 and sc.sizes()["given"] == dict.fromkeys(sc.given_names, 40)
        assert set(sc.sizes()["evaluation"].values()) == {round(0.3 * total)}
        sc = build_scenario(family.name, source=digits, n_eval=30)
        assert set(sc.sizes()["evaluation"].values()) == {30}
