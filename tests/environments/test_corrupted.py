"""Corrupted environments (Section 4.3 of the worst+gap paper) on tiny synthetic domains."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from oodeval.environments import ImageSource, build_scenario
from oodeval.environments import corrupted as corrupted_module
from oodeval.environments.corrupted import CORRUPTIONS, corrupt_image
from oodeval.errors import OodevalError
from tests.requires import requires_module

requires_module("imagecorruptions")

FEW = ("gaussian_noise", "fog", "pixelate")


def toy_source(n_domains: int = 4, per_domain: int = 6, side: int = 32) -> ImageSource:
    rng = np.random.default_rng(0)
    n = n_domains * per_domain
    images = (np.rint(rng.random((n, 3, side, side)) * 255) / 255).astype(np.float32)
    domains = np.repeat(np.arange(n_domains), per_domain)
    labels = np.tile(np.arange(2), n // 2)
    names = tuple(f"d{j}" for j in range(n_domains))
    return ImageSource("toy", images, labels, ("a", "b"), domains, names)


@pytest.fixture()
def counter(monkeypatch):
    calls = []
    real = corrupted_module.corrupt_image

    def counting(image, corruption, severity):
        calls.append(corruption)
        return real(image, corruption, severity)

    monkeypatch.setattr(corrupted_module, "corrupt_image", counting)
    return calls


def build(tmp_path, **params):
    params.setdefault("workers", 1)
    params.setdefault("progress", False)
    return build_scenario(
        "corrupted",
        source=params.pop("source", toy_source()),
        cache_dir=tmp_path / "cache",
        **params,
    )


def test_e_all_has_each_domain_clean_plus_fifteen_corruptions(tmp_path):
    sc = build(tmp_path)
    assert len(sc.all_names) == 64
    assert sc.all_names[:2] == ["d0", "d0/gaussian_noise"] and sc.all_names[16] == "d1"
    assert len(CORRUPTIONS) == 15 and sc.name == "corrupted/pattern=1-1-1-1/severity=3"


@pytest.mark.parametrize(
    "pattern, counts",
    [
        ("1-1-1-1", [1, 1, 1, 1]),
        ("2-2-2-2", [2, 2, 2, 2]),
        ("1-0-1-1", [1, 0, 1, 1]),
        ("2-0-2-2", [2, 0, 2, 2]),
    ],
)
def test_sampling_patterns_give_the_right_counts_per_domain(tmp_path, pattern, counts):
    sc = build(tmp_path, source=toy_source(per_domain=10), pattern=pattern, seed=3)
    per_domain = [sum(n.startswith(f"d{j}/") for n in sc.given_names) for j in range(4)]
    assert per_domain == counts
    for j in range(4):
        chosen = [n.split("/")[1] for n in sc.given_names if n.startswith(f"d{j}/")]
        assert len(set(chosen)) == len(chosen) and set(chosen) <= set(CORRUPTIONS)
    again = build(tmp_path, source=toy_source(per_domain=10), pattern=pattern, seed=3)
    assert again.given_names == sc.given_names
    others = {tuple(build(tmp_path, pattern=pattern, seed=s).given_names) for s in range(6)}
    assert len(others) > 1


def test_given_environments_use_disjoint_images_apart_from_held_out(tmp_path):
    sc = build(tmp_path, source=toy_source(per_domain=10), pattern="2-2-2-2")
    used = [set(rows.tolist()) for _, _, rows in sc.given_plan]
    held = set().union(*[set(r.tolist()) for r in sc.eval_indices])
    assert sum(map(len, used)) == len(set().union(*used))
    assert not held & set().union(*used)
    assert sc.sizes()["given"] == {name: 4 for name in sc.given_names}


def test_cache_is_reused_and_an_interrupted_build_resumes(tmp_path, counter):
    src = toy_source(n_domains=2, per_domain=4)
    sc = build(tmp_path, source=src, pattern="1-1", corruptions=FEW)
    assert sc.prepare() == 2 * len(FEW)
    assert len(counter) == 8 * len(FEW)
    first = [env.images.copy() for env in sc.evaluation()]

    again = build(tmp_path, source=src, pattern="1-1", corruptions=FEW)
    assert again.prepare() == 0 and len(counter) == 8 * len(FEW)
    assert all(np.array_equal(a, b.images) for a, b in zip(first, again.evaluation(), strict=True))

    victim = sorted((tmp_path / "cache").glob("*.npy"))[0]
    victim.unlink()
    resumed = build(tmp_path, source=src, pattern="1-1", corruptions=FEW)
    assert resumed.prepare() == 1 and len(counter) == 8 * len(FEW) + 4


def test_cache_key_follows_content_and_parameters(tmp_path, counter):
    src = toy_source(n_domains=2, per_domain=4)
    build(tmp_path, source=src, pattern="1-1", corruptions=("fog",)).prepare()
    assert (
        build(tmp_path, source=src, pattern="1-1", corruptions=("fog",), severity=2).prepare() == 2
    )
    changed = ImageSource(
        "toy", src.images[::-1].copy(), src.labels, src.class_names, src.domains, src.domain_names
    )
    assert build(tmp_path, source=changed, pattern="1-1", corruptions=("fog",)).prepare() == 2


def test_cache_is_not_reused_across_imagecorruptions_versions(tmp_path, counter, monkeypatch):
    src = toy_source(n_domains=2, per_domain=4)
    assert "imagecorruptions" in corrupted_module.corruption_library()
    assert build(tmp_path, source=src, pattern="1-1", corruptions=("fog",)).prepare() == 2
    monkeypatch.setattr(corrupted_module, "corruption_library", lambda: "imagecorruptions==99")
    assert build(tmp_path, source=src, pattern="1-1", corruptions=("fog",)).prepare() == 2


def test_corruption_is_deterministic_per_image_and_changes_it():
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    for name in CORRUPTIONS:
        a = corrupt_image(image, name, 3)
        np.random.seed(123)  # global state must not matter
        b = corrupt_image(image, name, 3)
        assert a.shape == image.shape and a.dtype == np.uint8
        assert np.array_equal(a, b), name
        assert not np.array_equal(a, image), name


def test_corrupting_leaves_the_callers_global_numpy_generator_alone():
    image = np.random.default_rng(6).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    np.random.seed(42)
    expected = np.random.random(3)
    np.random.seed(42)
    corrupt_image(image, "gaussian_noise", 3)
    assert np.array_equal(np.random.random(3), expected)


def test_parallel_build_equals_serial_build(tmp_path):
    src = toy_source(n_domains=2, per_domain=4)
    serial = build(tmp_path / "s", source=src, pattern="1-1", corruptions=("gaussian_noise", "fog"))
    parallel = build(
        tmp_path / "p", source=src, pattern="1-1", workers=2, corruptions=("gaussian_noise", "fog")
    )
    assert parallel.prepare() == 4
    for a, b in zip(serial.evaluation(), parallel.evaluation(), strict=True):
        assert a.name == b.name and a.images.tobytes() == b.images.tobytes()


def test_clean_environments_are_the_source_images_and_given_ones_are_corrupted(tmp_path):
    src = toy_source(n_domains=2, per_domain=5)
    sc = build(tmp_path, source=src, pattern="1-1", corruptions=FEW)
    envs = {env.name: env for env in sc.evaluation()}
    rows = sc.eval_indices[0]
    assert np.allclose(envs["d0"].images, src.images[rows], atol=1e-6)
    assert np.array_equal(envs["d0"].labels, src.labels[rows])
    # every environment names the source rows its images come from (as the spurious families do)
    assert all(np.array_equal(envs[f"d0/{c}"].meta["indices"], rows) for c in FEW)
    for env, (_j, _corruption, given_rows) in zip(sc.given(), sc.given_plan, strict=True):
        assert np.array_equal(env.meta["indices"], given_rows)
        assert env.images.shape == (len(given_rows), 3, 32, 32)
        assert not np.allclose(env.images, src.images[given_rows])
        assert np.array_equal(env.labels, src.labels[given_rows])


def test_folder_source_end_to_end(tmp_path):
    rng = np.random.default_rng(1)
    for dom in ("art", "photo"):
        for cls in ("cat", "dog"):
            for k in range(3):
                folder = tmp_path / "data" / dom / cls
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(
                    folder / f"{k}.png"
                )
    sc = build_scenario(
        "corrupted",
        source=f"folder:{tmp_path / 'data'}",
        image_size=32,
        pattern="1-1",
        corruptions=("contrast",),
        cache_dir=tmp_path / "c",
        workers=1,
        progress=False,
    )
    assert sc.all_names == ["art", "art/contrast", "photo", "photo/contrast"]
    assert [len(e) for e in sc.given()] == [5, 5]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"corruptions": ("fog", "rain")}, "unknown corruption 'rain'"),
        ({"pattern": "1-1"}, "has 2 counts but the source has 4 domain"),
        ({"pattern": "1/1/1/1"}, "malformed pattern"),
        ({"pattern": "0-0-0-0"}, "selects no given environment"),
        ({"severity": 6}, "severity must be an integer from 1 to 5"),
        ({"pattern": "3-1-1-1", "corruptions": ("fog", "contrast")}, "only 2 are available"),
    ],
)
def test_bad_corrupted_parameters(tmp_path, params, message):
    with pytest.raises(OodevalError, match=message):
        build(tmp_path, **params)


def test_small_images_and_small_domains_are_rejected(tmp_path):
    with pytest.raises(OodevalError, match="at least 32x32"):
        build(tmp_path, source=toy_source(side=16))
    with pytest.raises(OodevalError, match="too few images"):
        build(tmp_path, source=toy_source(per_domain=2), pattern="2-2-2-2")


def test_unreadable_cache_file_is_a_clear_error(tmp_path):
    src = toy_source(n_domains=2, per_domain=4)
    sc = build(tmp_path, source=src, pattern="1-1", corruptions=("fog",))
    sc.prepare()
    for path in Path(tmp_path / "cache").glob("*.npy"):
        path.write_bytes(b"junk")
    with pytest.raises(OodevalError, match="unreadable.*delete it"):
        sc.given()
