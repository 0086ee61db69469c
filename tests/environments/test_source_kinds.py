"""Adding an image-source kind is one class with `register_source_kind`: a toy kind registered
here is parsed, listed, identified, loaded by scenarios and by `oodeval shift` SPECs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from oodeval.environments import build_scenario, load_source
from oodeval.environments.source_kinds import (
    ImageSource,
    SourceKind,
    register_source_kind,
    unregister_source_kind,
)
from oodeval.environments.sources import (
    SOURCE_KINDS,
    parse_source_spec,
    source_forms,
    source_identity,
)
from oodeval.errors import OodevalError
from oodeval.shift.specs import load_spec, parse_spec

FILES = ("images.npy", "labels.npy")


class ToyKind(SourceKind):
    """``toy:DIR``: ``images.npy`` (N, 1, H, W) uint8 and ``labels.npy`` (N,) in DIR."""

    name = "toy"
    summary = "two .npy files"

    def load(self, root: Path | None, *, size: int | None) -> ImageSource:
        root = self.folder(root)
        images = np.load(root / FILES[0]).astype(np.float32) / np.float32(255)
        labels = np.load(root / FILES[1]).astype(np.int64)
        return ImageSource(f"toy:{root}", images, labels, ("a", "b", "c", "d"))

    def files(self, root: Path | None) -> Iterator[tuple[str, Path, bool]]:
        root = self.folder(root)
        for name in FILES:
            yield name, root / name, False


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[Path]:
    rng = np.random.default_rng(0)
    np.save(tmp_path / FILES[0], rng.integers(0, 256, size=(200, 1, 8, 8), dtype=np.uint8))
    np.save(tmp_path / FILES[1], np.arange(200) % 4)
    register_source_kind(ToyKind)
    yield tmp_path
    unregister_source_kind("toy")


def test_a_registered_kind_is_parsed_and_listed(toy: Path) -> None:
    assert parse_source_spec(f"toy:{toy}") == ("toy", toy)
    assert "toy" in SOURCE_KINDS and list(SOURCE_KINDS)[-1] == "toy"
    assert source_forms().endswith(", cifar10:DIR, toy:DIR")
    assert "toy:DIR (two .npy files)" in source_forms(summaries=True)
    with pytest.raises(OodevalError, match=r"^source 'toy' needs a folder: use 'toy:DIR'"):
        parse_source_spec("toy")


def test_a_kind_read_without_its_folder_says_so_in_one_line(toy: Path) -> None:
    kinds = [k for k in SOURCE_KINDS.values() if k.takes_folder]
    assert {"mnist", "cifar10", "folder", "classfolder", "toy"} <= {k.name for k in kinds}
    for kind in kinds:
        line = rf"^source '{kind.name}' needs a folder: use '{kind.name}:DIR'$"
        with pytest.raises(OodevalError, match=line):
            kind.load(None, size=None)
        with pytest.raises(OodevalError, match=line):
            list(kind.files(None))


def test_a_registered_kind_is_identified_by_its_files(toy: Path) -> None:
    sums = {n: hashlib.sha256((toy / n).read_bytes()).hexdigest() for n in FILES}
    manifest = "".join(f"{n}\0{sums[n]}\n" for n in sorted(sums))
    ident = source_identity(f"toy:{toy}")
    assert ident.kind == "toy"
    assert ident.digest == "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()


def test_a_registered_kind_feeds_scenarios_and_shift_specs(toy: Path) -> None:
    src = load_source(f"toy:{toy}")
    assert src.images.shape == (200, 1, 8, 8) and src.num_classes == 4
    assert load_source(f"toy:{toy}", size=4).images.shape == (200, 1, 4, 4)
    sc = build_scenario("colored", source=f"toy:{toy}", seed=1)
    # 200 images: 40 held out, 160 over the 5 given environments of ratio 4:1
    assert sc.params["source"] == f"toy:{toy}"
    assert sc.sizes()["given"] == {name: 32 for name in sc.given_names}
    assert len(next(iter(sc.evaluation()))) == 40
    spec = parse_spec(f"toy:{toy}:size=4")
    assert (spec.kind, spec.location, spec.params) == ("toy", str(toy), {"size": "4"})
    shift_set = load_spec(f"toy:{toy}:size=4")
    assert shift_set.images.shape == (200, 1, 4, 4) and shift_set.num_classes == 4


def test_an_unregistered_kind_is_unknown_again(toy: Path) -> None:
    unregister_source_kind("toy")
    assert "toy" not in SOURCE_KINDS
    with pytest.raises(OodevalError, match=r"^unknown image source 'toy'; use one of: auto, "):
        parse_source_spec(f"toy:{toy}")


@pytest.mark.parametrize("name", ["", "auto", "Toy", "a:b"])
def test_a_kind_needs_a_plain_name(name: str) -> None:
    bad = type("Bad", (ToyKind,), {"name": name})
    with pytest.raises(OodevalError, match="must be a lower-case word"):
        register_source_kind(bad)
    assert name not in SOURCE_KINDS
