"""NICO++ shift metrics (oodeval.shift): sanity cases on real MNIST, references, errors.

Tolerances come from measured runs (mlp, 200 steps, 1,000 training + 1,000 held-out images per
set, seeds 0 and 1): i.i.d. M_cov 0.03-0.06 and M_cpt^max 0.12-0.15 (bounded by the two fit errors,
0.13-0.17 each); re-colored M_cov 0.785-0.788 (Proposition 3.1 predicts 0.8, the total-variation
distance of the color distributions) with M_cpt^max 0.21-0.25; permuted labels M_cpt^min 0.98-0.99
with M_cov 0.02-0.03. Every bound below leaves at least twice the observed seed-to-seed spread.
"""

from __future__ import annotations

import numpy as np
import pytest

from oodeval.errors import OodevalError
from oodeval.shift import concept_shift, covariate_shift, disagreement, shift_metrics
from oodeval.shift.specs import ShiftSet, disjoint_pair, load_spec, parse_spec
from tests.requires import requires_module

N_PER_SET = 2000
FAST = dict(seeds=[0, 1], steps=200, hypothesis="mlp")


@pytest.fixture(scope="module")
def digits14(mnist_dir) -> tuple[np.ndarray, np.ndarray]:
    """Real MNIST test digits, 2x2 average-pooled to 14x14 (shape (10000, 14, 14)) and labels."""
    from oodeval.environments import load_source

    src = load_source(f"mnist:{mnist_dir}")
    images = src.images[:, 0].reshape(-1, 14, 2, 14, 2).mean(axis=(2, 4)).astype(np.float32)
    return images, src.labels


def colored(images: np.ndarray, green: np.ndarray) -> np.ndarray:
    """Put each digit in the red (channel 0) or green (channel 1) channel of a 2-channel image."""
    out = np.zeros((len(images), 2, *images.shape[1:]), dtype=np.float32)
    out[np.arange(len(images)), green.astype(int)] = images
    return out


def two_sets(digits14, p_green_source: float, p_green_target: float, seed: int = 0):
    """Disjoint source and target sets of N_PER_SET digits each with the given green shares."""
    images, labels = digits14
    rng = np.random.default_rng(seed)
    xs, xt = images[:N_PER_SET], images[N_PER_SET : 2 * N_PER_SET]
    ys, yt = labels[:N_PER_SET], labels[N_PER_SET : 2 * N_PER_SET]
    gs = rng.random(N_PER_SET) < p_green_source
    gt = rng.random(N_PER_SET) < p_green_target
    return colored(xs, gs), ys, colored(xt, gt), yt


@pytest.fixture(scope="module")
def iid(digits14):
    """Shift metrics of two disjoint samples of one environment (green share 0.5 on both)."""
    return shift_metrics(*two_sets(digits14, 0.5, 0.5), **FAST)


def test_iid_split_of_one_environment_gives_near_zero_shift(iid):
    res = iid
    assert res.mean("m_cov") < 0.10
    # Concept shift of an i.i.d. pair is only estimation noise: on any x, f_tr != f_te implies
    # one of them is wrong, so each disagreement is at most the sum of the two fit errors.
    fit = res.values("source_fit_error") + res.values("target_fit_error")
    assert np.all(res.values("m_cpt_max") <= fit + 0.05)
    assert res.mean("m_cpt_max") < 0.25


def test_recoloring_raises_covariate_shift_not_concept_shift(digits14, iid):
    res = shift_metrics(*two_sets(digits14, 0.1, 0.9), **FAST)
    # Proposition 3.1: with a rich H and 0-1 loss, M_cov is the total-variation distance, here
    # |0.9 - 0.1| = 0.8 between the color distributions (the digits are identically distributed).
    assert res.mean("m_cov") == pytest.approx(0.8, abs=0.08)
    assert res.mean("m_cov") > 5 * iid.mean("m_cov")
    assert res.mean("m_cpt_max") < 0.35
    assert res.mean("cpt_minus_cov") < 0


def test_permuted_target_labels_raise_concept_shift(digits14):
    xs, ys, xt, yt = two_sets(digits14, 0.5, 0.5)
    res = shift_metrics(xs, ys, xt, (yt + 1) % 10, **FAST)
    # f_te(x) ~ f_tr(x) + 1 (mod 10): they disagree wherever both are right, > 1 - 2 * 0.17.
    assert res.mean("m_cpt_min") > 0.9
    assert res.mean("m_cov") < 0.10
    assert res.mean("cpt_minus_cov") > 0.8


def test_corrupting_the_target_raises_covariate_shift_not_concept_shift(mnist_dir):
    # Real MNIST digits, the target pixelated at severity 5 (imagecorruptions' deterministic
    # pixelate: 32x32 -> 8x8 -> 32x32), both sides then pooled to 14x14. Measured (seeds 0, 1):
    # M_cov 0.968-0.984 (i.i.d.: 0.03-0.06); M_cpt^max 0.208-0.228, below the sum of the two
    # held-out fit errors (0.324-0.334), i.e. at the i.i.d. noise floor: the digits keep their
    # labels. (Heavy gaussian noise instead drives M_cpt^max to ~0.5: f_tr, fitted on clean
    # digits, fails on noisy ones it never saw, although M_cpt^min stays at the floor.)
    requires_module("imagecorruptions")
    from oodeval.environments import load_source
    from oodeval.environments.corrupted import corrupt_image

    src = load_source(f"mnist:{mnist_dir}")
    n = 1000

    def pooled(images: np.ndarray, corruption: str | None) -> np.ndarray:
        out = np.empty((len(images), 1, 14, 14), dtype=np.float32)
        for i, image in enumerate(images):
            rgb = np.zeros((32, 32, 3), dtype=np.uint8)  # corrupt_image needs >= 32x32 RGB
            rgb[2:30, 2:30] = np.rint(image * 255)[..., None]
            if corruption is not None:
                rgb = corrupt_image(rgb, corruption, 5)
            gray = rgb[2:30, 2:30].mean(axis=2) / 255.0
            out[i, 0] = gray.reshape(14, 2, 14, 2).mean(axis=(1, 3))
        return out

    xs = pooled(src.images[:n, 0], None)
    xt = pooled(src.images[n : 2 * n, 0], "pixelate")
    res = shift_metrics(xs, src.labels[:n], xt, src.labels[n : 2 * n], **FAST)
    assert res.mean("m_cov") > 0.85
    floor = res.values("source_fit_error") + res.values("target_fit_error")
    assert np.all(res.values("m_cpt_max") <= floor + 0.03)
    assert res.mean("m_cpt_max") < 0.3
    assert res.mean("cpt_minus_cov") < -0.5


def test_cnn_hypothesis_measures_the_recolored_shift(digits14):
    xs, ys, xt, yt = two_sets(digits14, 0.1, 0.9)
    est = covariate_shift(xs[:800], xt[:800], num_classes=10, hypothesis="cnn", steps=120, seed=0)
    assert est.value == pytest.approx(0.8, abs=0.12)


def test_same_seed_gives_identical_numbers_and_seeds_differ(digits14):
    xs, ys, xt, yt = two_sets(digits14, 0.3, 0.7)
    a = shift_metrics(xs[:400], ys[:400], xt[:400], yt[:400], seeds=[3, 4], steps=40)
    b = shift_metrics(xs[:400], ys[:400], xt[:400], yt[:400], seeds=[3, 4], steps=40)
    assert a.per_seed == b.per_seed
    assert a.per_seed[0] != a.per_seed[1]


def test_disagreement_matches_a_loop():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 4, 500), rng.integers(0, 4, 500)
    expected = sum(1 for u, v in zip(a, b, strict=True) if u != v) / len(a)
    assert disagreement(a, b) == expected


def test_concept_shift_min_max_and_summary_statistics():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int)
    est = concept_shift(x[:150], y[:150], x[150:], y[150:], steps=60, seed=2)
    assert est.minimum == min(est.source_disagreement, est.target_disagreement)
    assert est.maximum == max(est.source_disagreement, est.target_disagreement)
    res = shift_metrics(x[:150], y[:150], x[150:], y[150:], seeds=[0, 1, 2], steps=30)
    vals = res.values("m_cov")
    assert res.mean("m_cov") == pytest.approx(vals.mean())
    assert res.std("m_cov") == pytest.approx(np.std(vals, ddof=1))
    assert np.allclose(res.values("cpt_minus_cov"), res.values("m_cpt_max") - vals)
    single = shift_metrics(x[:150], y[:150], x[150:], y[150:], seeds=[0], steps=10)
    assert np.isnan(single.std("m_cov"))


def test_covariate_shift_reports_the_larger_absolute_objective():
    rng = np.random.default_rng(0)
    a = rng.normal(0, 1, (200, 2)).astype(np.float32)
    b = rng.normal(5, 1, (200, 2)).astype(np.float32)
    est = covariate_shift(a, b, steps=100, seed=0)
    assert est.value == max(abs(est.source_minus_target), abs(est.target_minus_source))
    assert est.value > 0.9


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(source=np.zeros((4, 3)), target=np.zeros((20, 3))), "at least 8"),
        (dict(source=np.zeros((20, 3)), target=np.zeros((20, 4))), "differ in shape"),
        (dict(source=np.zeros(20), target=np.zeros(20)), "n_samples"),
        (dict(source=np.zeros((20, 3)), target=np.zeros((20, 3)), hypothesis="svm"), "unknown"),
        (dict(source=np.zeros((20, 3)), target=np.zeros((20, 3)), hypothesis="cnn"), "(C, H, W)"),
        (dict(source=np.zeros((20, 3)), target=np.zeros((20, 3)), steps=0), "steps"),
        (dict(source=np.full((20, 3), np.nan), target=np.zeros((20, 3))), "NaN"),
    ],
)
def test_covariate_shift_rejects_bad_input(kwargs, message):
    with pytest.raises(OodevalError, match=message):
        covariate_shift(**kwargs)


def test_concept_shift_rejects_bad_labels():
    x = np.zeros((20, 3))
    with pytest.raises(OodevalError, match="integer class ids"):
        concept_shift(x, np.full(20, 0.5), x, np.zeros(20, int))
    with pytest.raises(OodevalError, match="same length"):
        concept_shift(x, np.zeros(19, int), x, np.zeros(20, int))
    with pytest.raises(OodevalError, match="num_classes"):
        concept_shift(x, np.arange(20) % 5, x, np.zeros(20, int), num_classes=3)
    with pytest.raises(OodevalError, match="distinct"):
        shift_metrics(x, np.zeros(20, int), x, np.zeros(20, int), seeds=[1, 1])


def test_parse_spec_reads_sources_families_and_colon_values():
    s = parse_spec("folder:/data/pacs:domain=photo+sketch:size=32")
    assert (s.kind, s.location, s.params) == (
        "folder",
        "/data/pacs",
        {"domain": "photo+sketch", "size": "32"},
    )
    s = parse_spec("sr-cmnist:e=0.1:ratio=3:1:images=mnist:/x/y")
    assert s.params == {"e": "0.1", "ratio": "3:1", "images": "mnist:/x/y"}
    assert parse_spec("digits").params == {}
    for bad, msg in [("", "non-empty"), ("sr-cmnist:oops", "key=value"), ("x:e=1:e=2", "twice")]:
        with pytest.raises(OodevalError, match=msg):
            parse_spec(bad)


def test_load_spec_picks_the_named_sr_cmnist_environment():
    a = load_spec("sr-cmnist:e=0.1")
    b = load_spec("sr-cmnist:e=0.15")
    assert a.name.endswith("e=0.10") and b.name.endswith("e=0.15")
    assert a.pool == b.pool and a.images.shape == b.images.shape
    s, t = disjoint_pair(a, b, seed=0)
    assert not np.intersect1d(s.rows, t.rows).size
    assert len(s) + len(t) == len(a)
    with pytest.raises(OodevalError, match="no environment"):
        load_spec("sr-cmnist:e=0.123")
    with pytest.raises(OodevalError, match="e=VALUE or env=NAME"):
        load_spec("sr-cmnist:ratio=3:1")
    with pytest.raises(OodevalError, match="unknown SPEC kind"):
        load_spec("nosuch:e=0.1")
    assert len(load_spec("digits", max_samples=100)) == 100


def test_role_picks_a_given_environment_whose_name_is_also_in_e_all():
    from oodeval.environments import build_scenario

    scenario = build_scenario("sr-cmnist", source="digits", seed=0)
    given = next(e for e in scenario.given() if e.name == "e=0.10")
    evaluation = next(e for e in scenario.evaluation() if e.name == "e=0.10")
    picked = load_spec("sr-cmnist:e=0.1:role=given")
    assert np.array_equal(picked.images, given.images)
    assert np.array_equal(picked.rows, given.meta["indices"])
    assert picked.name.endswith("e=0.10:role=given")
    for text in ("sr-cmnist:e=0.1", "sr-cmnist:e=0.1:role=eval"):  # default: E_all first
        assert np.array_equal(load_spec(text).images, evaluation.images)
    # given and evaluation images are distinct digits: no split needed between them
    s, t = disjoint_pair(picked, load_spec("sr-cmnist:e=0.1"))
    assert (len(s), len(t)) == (len(picked), len(evaluation.labels))
    with pytest.raises(OodevalError, match="no environment e=0.5 in the given environments"):
        load_spec("sr-cmnist:e=0.5:role=given")
    with pytest.raises(OodevalError, match="role=train is unknown; use role=eval"):
        load_spec("sr-cmnist:e=0.1:role=train")


def test_load_spec_selects_folder_domains(tmp_path):
    from PIL import Image

    for dom in ("photo", "sketch"):
        for cls in ("cat", "dog"):
            d = tmp_path / dom / cls
            d.mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(d / f"{i}.png")
    out = load_spec(f"folder:{tmp_path}:domain=photo:size=8")
    assert len(out) == 6 and out.images.shape[1:] == (3, 8, 8)
    assert sorted(set(out.labels.tolist())) == [0, 1]
    both = load_spec(f"folder:{tmp_path}:domain=photo+sketch:size=8")
    assert len(both) == 12
    s, t = disjoint_pair(out, load_spec(f"folder:{tmp_path}:domain=sketch:size=8"))
    assert len(s) == len(t) == 6  # different domains share no rows: unchanged
    with pytest.raises(OodevalError, match="not found; available: photo, sketch"):
        load_spec(f"folder:{tmp_path}:domain=paint")


def test_disjoint_pair_splits_one_set_into_two_halves():
    a = ShiftSet("a", np.arange(10.0)[:, None], np.zeros(10, int), 2, "p", np.arange(10))
    s, t = disjoint_pair(a, a, seed=1)
    assert sorted(np.concatenate([s.rows, t.rows]).tolist()) == list(range(10))
    assert np.array_equal(s.images[:, 0], s.rows.astype(float))


def test_load_spec_reads_frozen_features_from_npz(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "f.npz"
    np.savez(path, features=rng.normal(size=(30, 5)), labels=rng.integers(0, 3, 30))
    out = load_spec(f"npz:{path}")
    assert out.images.shape == (30, 5) and out.images.dtype == np.float32
    assert out.num_classes == int(out.labels.max()) + 1
    s, t = disjoint_pair(out, load_spec(f"npz:{path}"))
    assert len(s) + len(t) == 30
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 2)))
    with pytest.raises(OodevalError, match="'features'"):
        load_spec(f"npz:{tmp_path / 'bad.npz'}")
    np.savez(tmp_path / "obj.npz", features=np.array([{"a": 1}], dtype=object), labels=[0])
    with pytest.raises(OodevalError, match="cannot read"):
        load_spec(f"npz:{tmp_path / 'obj.npz'}")


@pytest.mark.parametrize(
    ("source", "target"),
    [
        # other ratio, same held-out digits: the images must still be split between the sides
        ("sr-cmnist:e=0.1:ratio=3:1", "sr-cmnist:e=0.9:ratio=4:1"),
        # other eval_fraction, nested held-out pools: only the digits both hold are shared
        ("sr-cmnist:e=0.1:eval_fraction=0.3", "sr-cmnist:e=0.9:eval_fraction=0.2"),
    ],
)
def test_scenario_specs_are_made_disjoint_by_source_image(source, target):
    from oodeval.environments import load_source

    digits = load_source("digits").images[:, 0]
    a, b = load_spec(source), load_spec(target)
    for side in (a, b):  # rows name the source digit drawn in each (one-channel) image
        assert np.array_equal(side.images.sum(axis=1), digits[side.rows])
    s, t = disjoint_pair(a, b, seed=0)
    assert not np.intersect1d(s.rows, t.rows).size
    assert len(s) + len(t) == len(np.union1d(a.rows, b.rows))


@pytest.mark.parametrize("kind", ["npy", "csv", "object"])
def test_npz_spec_that_is_not_plain_arrays_is_one_error_without_unpickling_advice(tmp_path, kind):
    path = tmp_path / "features.npz"
    if kind == "npy":  # np.load returns a bare array, not an archive
        with open(path, "wb") as fh:
            np.save(fh, np.zeros((20, 3)))
    elif kind == "csv":  # np.load falls back to pickle for unknown content
        path.write_text("features,labels\n0.1,0\n")
    else:
        np.savez(path, features=np.array([{"a": 1}] * 20, dtype=object), labels=np.zeros(20, int))
    with pytest.raises(OodevalError, match="as an .npz archive of plain arrays") as info:
        load_spec(f"npz:{path}")
    assert "pickle" not in str(info.value)
