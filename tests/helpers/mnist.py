"""A fake MNIST test split in the IDX format (the files' layout, not real digits)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def idx_bytes(array: np.ndarray) -> bytes:
    """`array` as an IDX file of unsigned bytes (magic 0x0000_08_ndim, then each dimension)."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def fake_mnist(folder: Path, seed: int = 0, *, gz: bool = False) -> dict[str, bytes]:
    """A 60-image MNIST test split; returns {file stem: uncompressed bytes}."""
    rng = np.random.default_rng(seed)
    files = {
        "t10k-images-idx3-ubyte": idx_bytes(rng.integers(0, 256, (60, 28, 28))),
        "t10k-labels-idx1-ubyte": idx_bytes(np.arange(60) % 10),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for stem, data in files.items():
        if gz:
            (folder / f"{stem}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / stem).write_bytes(data)
    return files
