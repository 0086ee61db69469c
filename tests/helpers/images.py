"""Tiny image trees written at test time: ``<domain>/<class>/<k>.png``, every image distinct.

`write_domain_tree` writes the layout a ``folder:DIR`` source reads (PACS, VLCS, NICO++), with
seeded random pixels so that no two images are equal and each can be told by its content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image


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
