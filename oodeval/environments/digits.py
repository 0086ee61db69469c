"""The ``digits`` source kind: scikit-learn's bundled 8x8 handwritten digits (no folder)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from oodeval._extras import MissingExtra, missing_extra_message
from oodeval.environments.source_kinds import ImageSource, SourceKind, register_source_kind
from oodeval.errors import OodevalError


def load_digits() -> ImageSource:
    """scikit-learn's bundled handwritten digits: 1,797 grayscale 8x8 images, 10 classes.

    Pixel values 0..16 are scaled to [0, 1]. Needs no network.

    >>> load_digits().labels[:5].tolist()
    [0, 1, 2, 3, 4]
    """
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = (bunch.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    labels = bunch.target.astype(np.int64)
    return ImageSource("digits", images, labels, tuple(str(d) for d in range(10)))


def digits_file() -> Path:
    """scikit-learn's bundled digits file, located without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise MissingExtra(missing_extra_message("the digits source", "sklearn"))
    for base in spec.submodule_search_locations or []:
        path = Path(base) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    raise OodevalError("scikit-learn's digits file is missing; reinstall scikit-learn")


@register_source_kind
class DigitsKind(SourceKind):
    """``digits``: `load_digits`, identified by scikit-learn's ``digits.csv.gz``."""

    name = "digits"
    summary = "scikit-learn's 8x8 digits"
    takes_folder = False

    def load(self, root: Path | None, *, size: int | None) -> ImageSource:
        return load_digits()

    def files(self, root: Path | None) -> Iterator[tuple[str, Path, bool]]:
        yield "digits.csv", digits_file(), True
