"""Image sources: the labelled images every environment family is generated from.

A source is named by a spec string (see `load_source`): ``"digits"`` (scikit-learn's bundled 8x8
digits; works offline), ``"mnist:DIR"`` (IDX files), ``"folder:DIR"`` (``<domain>/<class>/<image>``,
the PACS / VLCS / NICO++ layout), ``"classfolder:DIR"`` (``<class>/<image>``, e.g. Cats&Dogs) and
``"cifar10:DIR"`` (CIFAR-10's python batches). Every loader returns an `ImageSource` holding float32
images of shape (N, C, H, W) with values in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oodeval.errors import OodevalError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
DEFAULT_FOLDER_SIZE = 64
SOURCE_KINDS = ("digits", "mnist", "folder", "classfolder", "cifar10")


@dataclass(frozen=True)
class ImageSource:
    """Labelled images: `images` float32 (N, C, H, W) in [0, 1], `labels` int64 (N,).

    `domains` is an int64 (N,) array of indices into `domain_names` for multi-domain sources
    (``folder:``) and None otherwise; `class_names` names label 0, 1, ...
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    domains: np.ndarray | None = None
    domain_names: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_classes(self) -> int:
        """The number of classes (length of `class_names`)."""
        return len(self.class_names)

    def fingerprint(self) -> str:
        """A SHA-256 hex digest of the images, labels and domains (a content key for caches)."""
        import hashlib

        digest = hashlib.sha256()
        digest.update(str(self.images.shape).encode())
        digest.update(np.ascontiguousarray(self.images).tobytes())
        digest.update(np.ascontiguousarray(self.labels).tobytes())
        if self.domains is not None:
            digest.update(np.ascontiguousarray(self.domains).tobytes())
        return digest.hexdigest()


def load_source(spec: str, *, size: int | None = None) -> ImageSource:
    """Load the image source named by `spec`.

    Parameters
    ----------
    spec : str
        ``"digits"``, ``"mnist:DIR"``, ``"folder:DIR"``, ``"classfolder:DIR"`` or ``"cifar10:DIR"``.
    size : int, optional
        Side length images of folder sources are resized to (default 64); for the other sources, a
        side length to resize to (default: keep the native 8, 28 or 32).

    Examples
    --------
    >>> src = load_source("digits")
    >>> src.images.shape, src.images.dtype.name, src.num_classes
    ((1797, 1, 8, 8), 'float32', 10)
    """
    if not isinstance(spec, str) or not spec.strip():
        raise OodevalError(
            f"source must be a spec string such as 'digits' or 'mnist:DIR', got {spec!r}"
        )
    kind, _, location = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in SOURCE_KINDS:
        raise OodevalError(
            f"unknown image source {kind!r}; use one of: digits, mnist:DIR, folder:DIR, "
            "classfolder:DIR, cifar10:DIR"
        )
    if size is not None and (not isinstance(size, int) or size < 1):
        raise OodevalError(f"size must be a positive integer, got {size!r}")
    if kind == "digits":
        if location:
            raise OodevalError(f"the digits source takes no folder, got {spec!r}; use 'digits'")
        source = load_digits()
    else:
        if not location:
            raise OodevalError(f"source {kind!r} needs a folder: use '{kind}:DIR'")
        root = Path(location).expanduser()
        if not root.is_dir():
            raise OodevalError(f"source folder not found: {root}; check the path in {spec!r}")
        if kind == "mnist":
            from oodeval.environments.mnist import load_mnist

            source = load_mnist(root)
        elif kind == "cifar10":
            from oodeval.environments.cifar import load_cifar10

            source = load_cifar10(root)
        elif kind == "folder":
            return load_domain_folder(root, size=size or DEFAULT_FOLDER_SIZE)
        else:
            return load_class_folder(root, size=size or DEFAULT_FOLDER_SIZE)
    if size is not None and size != source.images.shape[-1]:
        source = resized(source, size)
    return source


def as_image_source(source: str | ImageSource, *, size: int | None = None) -> ImageSource:
    """Return `source` itself when it is an `ImageSource`, else the source its spec names.

    `size` is passed to `load_source` for a spec and ignored for a ready source.

    >>> as_image_source("digits").name
    'digits'
    """
    return source if isinstance(source, ImageSource) else load_source(source, size=size)


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


def load_class_folder(root: str | Path, *, size: int = DEFAULT_FOLDER_SIZE) -> ImageSource:
    """Images from a ``<class>/<image>`` tree (e.g. Cats&Dogs), resized to `size` x `size` RGB.

    Classes are the sub-folder names in sorted order.
    """
    root = Path(root)
    classes = _subfolders(root, "class")
    paths, labels = [], []
    for k, cls in enumerate(classes):
        files = _image_files(cls)
        paths += files
        labels += [k] * len(files)
    if not paths:
        raise OodevalError(f"no images found under {root}; expected <class>/<image> files")
    images = _read_images(paths, size)
    return ImageSource(
        f"classfolder:{root}",
        images,
        np.asarray(labels, dtype=np.int64),
        tuple(c.name for c in classes),
    )


def load_domain_folder(root: str | Path, *, size: int = DEFAULT_FOLDER_SIZE) -> ImageSource:
    """Images from a ``<domain>/<class>/<image>`` tree (PACS, VLCS, NICO++), resized to `size`.

    Domains and classes are sorted folder names; the class list is the union over domains.
    """
    root = Path(root)
    domains = _subfolders(root, "domain")
    class_names = sorted({c.name for d in domains for c in _subfolders(d, "class", required=False)})
    if not class_names:
        raise OodevalError(f"no class folders under {root}; expected <domain>/<class>/<image>")
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
    images = _read_images(paths, size)
    return ImageSource(
        f"folder:{root}",
        images,
        np.asarray(labels, dtype=np.int64),
        tuple(class_names),
        domains=np.asarray(domain_ids, dtype=np.int64),
        domain_names=tuple(d.name for d in domains),
    )


def resized(source: ImageSource, size: int) -> ImageSource:
    """`source` with every image resized to `size` x `size` (bilinear, via Pillow)."""
    from PIL import Image

    n, c = source.images.shape[:2]
    out = np.empty((n, c, size, size), dtype=np.float32)
    for i in range(n):
        for ch in range(c):
            img = Image.fromarray(source.images[i, ch], mode="F")
            out[i, ch] = np.asarray(img.resize((size, size), Image.BILINEAR), dtype=np.float32)
    np.clip(out, 0.0, 1.0, out=out)
    return ImageSource(
        source.name,
        out,
        source.labels,
        source.class_names,
        source.domains,
        source.domain_names,
        dict(source.meta),
    )


def _subfolders(root: Path, what: str, *, required: bool = True) -> list[Path]:
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if required and not folders:
        raise OodevalError(f"no {what} folders found in {root}; check the folder layout")
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
                rgb = img.convert("RGB").resize((size, size), Image.BILINEAR)
                arr = np.asarray(rgb, dtype=np.float32)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise OodevalError(
                f"cannot read image {path}: {type(exc).__name__}; remove or replace the file"
            ) from None
        out[i] = arr.transpose(2, 0, 1) / np.float32(255.0)
    return out
