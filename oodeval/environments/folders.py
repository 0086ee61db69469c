"""The ``folder:DIR`` and ``classfolder:DIR`` source kinds: image files in class folders.

``folder:DIR`` reads a ``<domain>/<class>/<image>`` tree (the PACS / VLCS / NICO++ layout),
``classfolder:DIR`` a ``<class>/<image>`` tree (e.g. Cats&Dogs). Images are read with Pillow as
RGB and resized to a square side (default `DEFAULT_FOLDER_SIZE`); hidden files are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from oodeval._names import refuse_lookalikes
from oodeval.environments.source_kinds import ImageSource, SourceKind, register_source_kind
from oodeval.errors import OodevalError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
DEFAULT_FOLDER_SIZE = 64


def load_class_folder(root: str | Path, *, size: int = DEFAULT_FOLDER_SIZE) -> ImageSource:
    """Images from a ``<class>/<image>`` tree (e.g. Cats&Dogs), resized to `size` x `size` RGB.

    Classes are the sub-folder names in sorted order.
    """
    root = Path(root)
    paths, labels, classes = _class_folder_files(root)
    return _tree_source(f"classfolder:{root}", paths, labels, classes, size)


def load_domain_folder(root: str | Path, *, size: int = DEFAULT_FOLDER_SIZE) -> ImageSource:
    """Images from a ``<domain>/<class>/<image>`` tree (PACS, VLCS, NICO++), resized to `size`.

    Domains and classes are sorted folder names; the class list is the union over domains.
    """
    root = Path(root)
    paths, labels, domain_ids, class_names, domain_names = _domain_folder_files(root)
    return _tree_source(
        f"folder:{root}",
        paths,
        labels,
        class_names,
        size,
        domains=np.asarray(domain_ids, dtype=np.int64),
        domain_names=domain_names,
    )


def _tree_source(
    name: str,
    paths: list[Path],
    labels: list[int],
    class_names: tuple[str, ...],
    size: int,
    *,
    domains: np.ndarray | None = None,
    domain_names: tuple[str, ...] = (),
) -> ImageSource:
    """The source `name` of the images at `paths` (read at side `size`) with their labels."""
    images = _read_images(paths, size)
    labels_array = np.asarray(labels, dtype=np.int64)
    return ImageSource(
        name, images, labels_array, class_names, domains=domains, domain_names=domain_names
    )


def _class_folder_files(root: Path) -> tuple[list[Path], list[int], tuple[str, ...]]:
    """The images of a ``<class>/<image>`` tree, their labels and the sorted class names."""
    classes = _subfolders(root, "class")
    paths, labels = [], []
    for k, cls in enumerate(classes):
        files = _image_files(cls)
        paths += files
        labels += [k] * len(files)
    if not paths:
        raise OodevalError(f"no images found under {root}; expected <class>/<image> files")
    return paths, labels, tuple(c.name for c in classes)


def _domain_folder_files(
    root: Path,
) -> tuple[list[Path], list[int], list[int], tuple[str, ...], tuple[str, ...]]:
    """The images of a ``<domain>/<class>/<image>`` tree, their labels and domain indices, the
    class names (the union over domains) and the domain names, all sorted."""
    domains = _subfolders(root, "domain")
    class_names = sorted({c.name for d in domains for c in _subfolders(d, "class", required=False)})
    if not class_names:
        raise OodevalError(f"no class folders under {root}; expected <domain>/<class>/<image>")
    refuse_lookalikes(class_names, "class", str(root))  # across domains too
    index = {c: k for k, c in enumerate(class_names)}
    paths, labels, domain_ids = [], [], []
    for j, dom in enumerate(domains):
        for cls in _subfolders(dom, "class", required=False):
            files = _image_files(cls)
            paths += files
            labels += [index[cls.name]] * len(files)
            domain_ids += [j] * len(files)
    if not paths:
        raise OodevalError(f"no images found under {root}; expected <domain>/<class>/<image> files")
    return paths, labels, domain_ids, tuple(class_names), tuple(d.name for d in domains)


def _subfolders(root: Path, what: str, *, required: bool = True) -> list[Path]:
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if required and not folders:
        raise OodevalError(f"no {what} folders found in {root}; check the folder layout")
    refuse_lookalikes([p.name for p in folders], what, str(root))
    return folders


def _image_files(folder: Path) -> list[Path]:
    # Hidden files are skipped: macOS copies leave unreadable "._name.jpg" companions.
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES
    )


def _read_images(paths: list[Path], size: int) -> np.ndarray:
    """Read `paths` with Pillow as RGB, resize to `size` x `size`, return float32 (N, 3, H, W)."""
    from PIL import Image, UnidentifiedImageError

    out = np.empty((len(paths), 3, size, size), dtype=np.float32)
    for i, path in enumerate(paths):
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
                arr = np.asarray(rgb, dtype=np.float32)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise OodevalError(
                f"cannot read image {path}: {type(exc).__name__}; remove or replace the file"
            ) from None
        out[i] = arr.transpose(2, 0, 1) / np.float32(255.0)
    return out


#: Per folder kind: its loader and the lister of its image files (first item: the paths, in the
#: loader's reading order).
_TREES: dict[str, tuple[Callable[..., ImageSource], Callable[[Path], tuple[Any, ...]]]] = {
    "folder": (load_domain_folder, _domain_folder_files),
    "classfolder": (load_class_folder, _class_folder_files),
}


class _ImageTreeKind(SourceKind):
    """A folder of image files, read by its `_TREES` loader and identified by every image file
    under DIR."""

    def load(self, root: Path | None, *, size: int | None) -> ImageSource:
        loader, _ = _TREES[self.name]
        return loader(self.folder(root), size=size or DEFAULT_FOLDER_SIZE)

    def files(self, root: Path | None) -> Iterator[tuple[str, Path, bool]]:
        _, lister = _TREES[self.name]
        base = self.folder(root)
        for path in lister(base)[0]:
            yield path.relative_to(base).as_posix(), path, False


@register_source_kind
class FolderKind(_ImageTreeKind):
    """``folder:DIR``: `load_domain_folder`, identified by every image file under DIR."""

    name = "folder"
    summary = "a <domain>/<class>/<image> tree"


@register_source_kind
class ClassFolderKind(_ImageTreeKind):
    """``classfolder:DIR``: `load_class_folder`, identified by every image file under DIR."""

    name = "classfolder"
    summary = "a <class>/<image> tree"
