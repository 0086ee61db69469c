"""Tiny stand-ins for the image presets' datasets, written by the tests: a cats-and-dogs class
folder, CIFAR-10 python batches, PACS/VLCS-like domain folders and a NICO++-like tree with the
ten common domains. Pixels are seeded noise; only the layout matters."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from oodeval.protocols.tree import NICO_COMMON_DOMAINS


def _pngs(folder: Path, count: int, rng: np.random.Generator, side: int = 24) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:03d}.png")


def class_folder(root: Path, classes: tuple[str, ...], per_class: int, seed: int = 0) -> Path:
    """``root/<class>/<image>.png``."""
    rng = np.random.default_rng(seed)
    for name in classes:
        _pngs(root / name, per_class, rng)
    return root


def domain_folder(
    root: Path, domains: tuple[str, ...], classes: tuple[str, ...], per_cell: int, seed: int = 0
) -> Path:
    """``root/<domain>/<class>/<image>.png``."""
    rng = np.random.default_rng(seed)
    for domain in domains:
        for name in classes:
            _pngs(root / domain / name, per_cell, rng)
    return root


def cifar_batches(root: Path, per_class: int, seed: int = 0) -> Path:
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
    """Every image preset's dataset under `root`, as ``preset(name, data=...)`` takes them."""
    return {
        "C-Cats&Dogs": str(class_folder(root / "cats-dogs", ("cat", "dog"), 5 * per_cell)),
        "L-CIFAR10": str(cifar_batches(root / "cifar10", 3 * per_cell)),
        "PACS-corrupted": str(
            domain_folder(
                root / "pacs",
                ("art_painting", "cartoon", "photo", "sketch"),
                ("dog", "horse"),
                per_cell,
            )
        ),
        "VLCS-corrupted": str(
            domain_folder(
                root / "vlcs", ("Caltech101", "LabelMe", "SUN09", "VOC2007"), ("bird", "car"), per_cell
            )
        ),
        "NICO++": str(domain_folder(root / "nico", NICO_COMMON_DOMAINS, ("cat", "dog"), per_cell)),
    }
