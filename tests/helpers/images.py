"""Tiny image trees written at test time: ``<domain>/<class>/<k>.png``, every image distinct.

`write_domain_tree` writes the layout a ``folder:DIR`` source reads (PACS, VLCS, NICO++), with
seeded random pixels so that no two images are equal and each can be told by its content;
`write_class_folder` a ``classfolder:DIR`` tree and `write_cifar_batches` CIFAR-10's python
batches. `image_preset_data` writes a stand-in for every dataset of the image presets.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from oodeval.environments.domains import NICO_COMMON_DOMAINS


def write_domain_tree(
    root: Path,
    domains: Sequence[str],
    classes: Sequence[str] = ("cat", "dog"),
    per_class: int = 5,
    *,
    counts: Mapping[str, int] | None = None,
    side: int = 12,
    seed: int = 0,
) -> Path:
    """Write `per_class` PNGs (`side` x `side` RGB) per class of each domain under `root`;
    `counts` gives some domains another number per class (0: empty class folders). Returns
    `root`."""
    rng = np.random.default_rng(seed)
    for domain in domains:
        for cls in classes:
            folder = root / domain / cls
            folder.mkdir(parents=True, exist_ok=True)
            for k in range((counts or {}).get(domain, per_class)):
                pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{k}.png")
    return root


def write_class_folder(root: Path, classes: Sequence[str], per_class: int, seed: int = 0) -> Path:
    """``root/<class>/<k>.png``: a domain tree without its domain level. Returns `root`."""
    rng = np.random.default_rng(seed)
    for cls in classes:
        folder = root / cls
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(per_class):
            pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{k}.png")
    return root


def write_cifar_batches(root: Path, per_class: int, seed: int = 0) -> Path:
    """CIFAR-10's ``test_batch`` and ``batches.meta`` (10 classes, `per_class` images each)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    labels = [c for c in range(10) for _ in range(per_class)]
    data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    batch = {b"batch_label": b"testing batch 1 of 1", b"labels": labels, b"data": data}
    (root / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    names = [f"class{c}".encode() for c in range(10)]
    (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    return root


def image_preset_data(root: Path, *, per_cell: int = 6) -> dict[str, str]:
    """A stand-in for every dataset of the image presets under `root`, as
    ``preset(name, data=...)`` takes them: only the layouts are the real datasets'."""
    pacs = ("art_painting", "cartoon", "photo", "sketch")
    vlcs = ("Caltech101", "LabelMe", "SUN09", "VOC2007")
    folders = {
        "C-Cats&Dogs": write_class_folder(root / "cats-dogs", ("cat", "dog"), 10 * per_cell),
        "L-CIFAR10": write_cifar_batches(root / "cifar10", 3 * per_cell),
        "PACS-corrupted": write_domain_tree(root / "pacs", pacs, ("dog", "horse"), per_cell),
        "VLCS-corrupted": write_domain_tree(root / "vlcs", vlcs, ("bird", "car"), per_cell),
        "NICO++": write_domain_tree(root / "nico", NICO_COMMON_DOMAINS, per_class=per_cell),
    }
    return {dataset: str(folder) for dataset, folder in folders.items()}
