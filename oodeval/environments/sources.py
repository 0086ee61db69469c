"""Image sources: the labelled images every environment family is generated from.

A source is named by a spec string (see `load_source`): ``"auto"`` (real MNIST: the folder
``$OODEVAL_MNIST`` names, else ``../shared/data/mnist``, else the test set bundled with oodeval;
`oodeval.environments.mnist.resolve_source`), ``"digits"`` (scikit-learn's bundled 8x8
digits), ``"mnist:DIR"`` (IDX files), ``"folder:DIR"`` (``<domain>/<class>/<image>``,
the PACS / VLCS / NICO++ layout), ``"classfolder:DIR"`` (``<class>/<image>``, e.g. Cats&Dogs) and
``"cifar10:DIR"`` (CIFAR-10's python batches). Every loader returns an `ImageSource` holding float32
images of shape (N, C, H, W) with values in [0, 1].

`source_identity` names a source by what it is rather than where it lies: its kind and a SHA-256
digest of the bytes its loader reads, with the folder kept only as a hint, so a study moved to
another machine or resumed from another checkout still recognises its data.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oodeval._extras import MissingExtra, missing_extra_message
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
        ``"auto"``, ``"digits"``, ``"mnist:DIR"``, ``"folder:DIR"``, ``"classfolder:DIR"`` or
        ``"cifar10:DIR"``.
    size : int, optional
        Side length images of folder sources are resized to (default 64); for the other sources, a
        side length to resize to (default: keep the native 8, 28 or 32).

    Examples
    --------
    >>> src = load_source("digits")
    >>> src.images.shape, src.images.dtype.name, src.num_classes
    ((1797, 1, 8, 8), 'float32', 10)
    """
    kind, root = parse_source_spec(spec)
    if size is not None and (not isinstance(size, int) or size < 1):
        raise OodevalError(f"size must be a positive integer, got {size!r}")
    if root is None:
        source = load_digits()
    else:
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


def parse_source_spec(spec: str) -> tuple[str, Path | None]:
    """Split a source spec into its kind and its folder (None for ``digits``), checking both.

    >>> parse_source_spec("digits")
    ('digits', None)
    """
    if not isinstance(spec, str) or not spec.strip():
        raise OodevalError(
            f"source must be a spec string such as 'digits' or 'mnist:DIR', got {spec!r}"
        )
    if spec.strip().lower() == "auto":
        from oodeval.environments.mnist import resolve_source

        spec = resolve_source("auto")
    kind, _, location = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in SOURCE_KINDS:
        raise OodevalError(
            f"unknown image source {kind!r}; use one of: auto, digits, mnist:DIR, folder:DIR, "
            "classfolder:DIR, cifar10:DIR"
        )
    if kind == "digits":
        if location:
            raise OodevalError(f"the digits source takes no folder, got {spec!r}; use 'digits'")
        return kind, None
    if not location:
        raise OodevalError(f"source {kind!r} needs a folder: use '{kind}:DIR'")
    root = Path(location).expanduser()
    if not root.is_dir():
        raise OodevalError(f"source folder not found: {root}; check the path in {spec!r}")
    return kind, root


@dataclass(frozen=True)
class SourceIdentity:
    """What an image source is: its kind and a digest of its content; `hint` says where it lay.

    Two identities are equal when kind and digest are; the hint (the resolved folder, empty for
    ``digits``) is for people and is never compared.
    """

    kind: str
    digest: str
    hint: str = field(default="", compare=False)

    def as_dict(self) -> dict[str, str]:
        """``{"kind": ..., "digest": ...}``: the comparable part, as stored with a study config."""
        return {"kind": self.kind, "digest": self.digest}


def source_identity(spec: str) -> SourceIdentity:
    """The identity of the source `spec` names, independent of where its files lie.

    The digest is ``"sha256:" + SHA-256`` of a manifest with one line ``<name>\\0<sha256>`` per
    file the source's loader reads, sorted by name: for ``mnist`` the IDX files of each split
    present (named without ``.gz`` and hashed decompressed, so a gzip and a plain copy agree),
    for ``cifar10`` the batches and ``batches.meta``, for ``folder`` / ``classfolder`` every
    image by its path relative to the root, for ``digits`` scikit-learn's bundled file. Reading
    costs about what loading costs (MNIST's test set: tens of milliseconds); each file's digest is
    cached in the process by (path, size, modification time).

    >>> ident = source_identity("digits")
    >>> ident.kind, ident.digest.startswith("sha256:"), len(ident.digest)
    ('digits', True, 71)
    """
    kind, root = parse_source_spec(spec)
    if root is None:
        files = [("digits.csv", _digits_file(), True)]
        hint = ""
    else:
        files = list(_source_files(kind, root))
        hint = str(root.resolve())
    digests = {name: _file_sha256(path, decompress) for name, path, decompress in files}
    return SourceIdentity(kind, manifest_digest(digests), hint)


def manifest_digest(file_digests: Mapping[str, str]) -> str:
    """``"sha256:" + SHA-256`` of the lines ``<name>\\0<sha256>\\n``, sorted by name: a source's
    content digest from its files' SHA-256 hex digests (`source_identity`).

    >>> manifest_digest({"b": "00", "a": "11"}) == manifest_digest({"a": "11", "b": "00"})
    True
    """
    manifest = "".join(f"{name}\0{file_digests[name]}\n" for name in sorted(file_digests))
    return "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()


def _source_files(kind: str, root: Path) -> Iterator[tuple[str, Path, bool]]:
    """(name, path, decompress) of every file the loader of `kind` reads under `root`."""
    if kind == "mnist":
        from oodeval.environments.mnist import FILES

        stems = [stem for pair in FILES.values() for stem in pair]
        found = False
        for stem in stems:
            # the loader's order: the plain file first, then the gzip copy
            for path in (root / stem, root / (stem + ".gz")):
                if path.is_file():
                    found = True
                    yield stem, path, path.suffix == ".gz"
                    break
        if not found:
            raise OodevalError(
                f"no MNIST IDX files in {root}; expected e.g. t10k-images-idx3-ubyte.gz and "
                "t10k-labels-idx1-ubyte.gz"
            )
    elif kind == "cifar10":
        from oodeval.environments.cifar import META_FILE, TEST_BATCH, TRAIN_BATCHES

        if (root / "cifar-10-batches-py").is_dir():
            root = root / "cifar-10-batches-py"
        names = [n for n in (*TRAIN_BATCHES, TEST_BATCH) if (root / n).is_file()]
        if not names:
            raise OodevalError(
                f"no CIFAR-10 batches in {root}; expected data_batch_1..5 and/or test_batch"
            )
        if (root / META_FILE).is_file():
            names.append(META_FILE)
        for name in names:
            yield name, root / name, False
    else:
        paths = _domain_folder_files(root)[0] if kind == "folder" else _class_folder_files(root)[0]
        for path in paths:
            yield path.relative_to(root).as_posix(), path, False


def _digits_file() -> Path:
    """scikit-learn's bundled digits file, located without importing scikit-learn."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise MissingExtra(missing_extra_message("the digits source", "sklearn"))
    for base in spec.submodule_search_locations or []:
        path = Path(base) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    raise OodevalError("scikit-learn's digits file is missing; reinstall scikit-learn")


_FILE_DIGESTS: dict[tuple[str, int, int, bool], str] = {}


def _file_sha256(path: Path, decompress: bool) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, decompress)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        try:
            with gzip.open(path, "rb") if decompress else open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except (OSError, EOFError) as exc:
            raise OodevalError(f"cannot read {path}: {exc}; replace the file") from None
        _FILE_DIGESTS[key] = digest.hexdigest()
    return _FILE_DIGESTS[key]


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
    paths, labels, classes = _class_folder_files(root)
    images = _read_images(paths, size)
    return ImageSource(
        f"classfolder:{root}",
        images,
        np.asarray(labels, dtype=np.int64),
        classes,
    )


def load_domain_folder(root: str | Path, *, size: int = DEFAULT_FOLDER_SIZE) -> ImageSource:
    """Images from a ``<domain>/<class>/<image>`` tree (PACS, VLCS, NICO++), resized to `size`.

    Domains and classes are sorted folder names; the class list is the union over domains.
    """
    root = Path(root)
    paths, labels, domain_ids, class_names, domain_names = _domain_folder_files(root)
    images = _read_images(paths, size)
    return ImageSource(
        f"folder:{root}",
        images,
        np.asarray(labels, dtype=np.int64),
        class_names,
        domains=np.asarray(domain_ids, dtype=np.int64),
        domain_names=domain_names,
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
