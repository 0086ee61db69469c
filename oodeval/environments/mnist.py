"""MNIST in IDX format: reading (plain or gzip), checksum verification, optional download, and
the test set bundled with oodeval.

IDX layout: a 4-byte magic (two zero bytes, a type code 0x08 for unsigned bytes, the number of
dimensions), one big-endian uint32 per dimension, then the data.

oodeval ships MNIST's test set (10,000 images; CC BY-SA 3.0, credited in NOTICE) in
``oodeval/data/mnist`` (`bundled_mnist_dir`): the last place the source ``"auto"`` looks
(`resolve_source`). DomainBed's ColoredMNIST draws from all 70,000 images
(train + test); `is_test_set_only` tells, from a source's identity alone, when a study trained
on the 10,000 only.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from oodeval._files import write_file
from oodeval._text import read_text
from oodeval.environments.source_kinds import (
    ImageSource,
    SourceKind,
    manifest_digest,
    register_source_kind,
)
from oodeval.errors import OodevalError
from oodeval.limits import MAX_INFLATED_BYTES, human_bytes, inflate_capped

#: Environment variable naming an MNIST folder for the source ``"auto"``.
MNIST_ENV_VAR = "OODEVAL_MNIST"
SPLITS = ("train", "t10k")
FILES = {split: (f"{split}-images-idx3-ubyte", f"{split}-labels-idx1-ubyte") for split in SPLITS}
# SHA-256 of the gzip files as published; used by `download_mnist`.
KNOWN_SHA256 = {
    "train-images-idx3-ubyte.gz": (
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
    ),
    "train-labels-idx1-ubyte.gz": (
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"
    ),
    "t10k-images-idx3-ubyte.gz": (
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
    ),
    "t10k-labels-idx1-ubyte.gz": (
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
    ),
}
#: SHA-256 of MNIST's test-set IDX files, decompressed: the content of the bundled copy.
TEST_SET_SHA256 = {
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
#: Images in MNIST's test set, and in train + test: the pool DomainBed's ColoredMNIST draws from.
TEST_SET_IMAGES = 10_000
ALL_IMAGES = 70_000
DEFAULT_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
CHECKSUM_FILE = "SHA256SUMS"


def load_mnist(root: str | Path, *, split: str | None = None) -> ImageSource:
    """Load MNIST from the IDX files in `root` as float32 (N, 1, 28, 28) images in [0, 1].

    Every split present (``train`` then ``t10k``) is loaded and concatenated unless `split` names
    one. Files may be gzip-compressed (``.gz``). When `root` holds a ``SHA256SUMS`` file
    (``<hex digest>  <file name>`` lines), every listed file that is read is verified first.
    """
    root = Path(root)
    splits = SPLITS if split is None else (split,)
    if split is not None and split not in SPLITS:
        raise OodevalError(f"unknown MNIST split {split!r}; use 'train' or 't10k'")
    sums = read_checksums(root / CHECKSUM_FILE)
    images, labels = [], []
    for name in splits:
        img_path = _find(root, FILES[name][0])
        lbl_path = _find(root, FILES[name][1])
        if img_path is None and lbl_path is None:
            continue
        if img_path is None or lbl_path is None:
            missing = FILES[name][0] if img_path is None else FILES[name][1]
            raise OodevalError(
                f"{root} has only half of the MNIST {name} split: {missing} is missing"
            )
        for path in (img_path, lbl_path):
            verify_checksum(path, sums)
        x = read_idx(img_path)
        y = read_idx(lbl_path)
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise OodevalError(
                f"MNIST files in {root} disagree: images {x.shape}, labels {y.shape}; "
                "re-download them"
            )
        images.append(x)
        labels.append(y)
    if not images:
        raise OodevalError(
            f"no MNIST IDX files in {root}; expected e.g. t10k-images-idx3-ubyte.gz and "
            "t10k-labels-idx1-ubyte.gz (or run oodeval.environments.mnist.download_mnist)"
        )
    x = np.concatenate(images)
    y = np.concatenate(labels).astype(np.int64)
    if y.size and (y.min() < 0 or y.max() > 9):
        raise OodevalError(f"MNIST labels in {root} must be digits 0-9, got {int(y.max())}")
    return ImageSource(
        f"mnist:{root}",
        (x.astype(np.float32) / np.float32(255.0))[:, None],
        y,
        tuple(str(d) for d in range(10)),
    )


def bundled_mnist_dir() -> Path:
    """The folder of the MNIST test set shipped inside the package (``oodeval/data/mnist``).

    Found with `importlib.resources`, so it is the installed package's folder wherever that
    lies (a checkout, site-packages). Raises OodevalError when the files are missing or the
    package is not installed as plain files (e.g. imported from a zip).

    >>> sorted(p.name for p in bundled_mnist_dir().glob("t10k-*"))
    ['t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz']
    """
    from importlib.resources import files

    folder = files("oodeval").joinpath("data").joinpath("mnist")
    names = [stem + ".gz" for stem in FILES["t10k"]]
    if not isinstance(folder, Path) or not all((folder / n).is_file() for n in names):
        raise OodevalError(
            f"oodeval's bundled MNIST test set is missing from {folder} (expected "
            f"{' and '.join(names)}); reinstall oodeval, or set OODEVAL_MNIST=DIR to a folder "
            "holding the MNIST IDX files"
        )
    return folder.resolve()


def is_test_set_only(identity: Mapping[str, str] | None) -> bool:
    """Whether a source identity (``{"kind", "digest"}``, as a study config stores it) is
    MNIST's test set alone: the 10,000 images bundled with oodeval, or the same two IDX files
    anywhere else (the digest names the content, `oodeval.environments.sources.source_identity`).

    >>> from oodeval.environments.sources import source_identity
    >>> is_test_set_only(source_identity(f"mnist:{bundled_mnist_dir()}").as_dict())
    True
    >>> is_test_set_only({"kind": "digits", "digest": "sha256:0"}), is_test_set_only(None)
    (False, False)
    """
    if not identity or identity.get("kind") != "mnist":
        return False
    return identity.get("digest") == manifest_digest(TEST_SET_SHA256)


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file of unsigned bytes (gzip-compressed when its name ends in ``.gz``).

    The header is checked before the data is read: the product of the dimensions (exact Python
    integers, never an int64 that wraps) with the header must fit `MAX_INFLATED_BYTES`, and a file
    must hold exactly that many data bytes; a ``.gz`` is inflated a chunk at a time and refused
    as soon as it holds more (`oodeval.limits.inflate_capped`), so a gzip bomb is never read
    whole.

    >>> read_idx(bundled_mnist_dir() / "t10k-labels-idx1-ubyte.gz").shape
    (10000,)
    """
    path = Path(path)
    try:
        if path.suffix == ".gz":
            stream = inflate_capped(path, MAX_INFLATED_BYTES, str(path))
            return _parse_idx(path, _Chunks(stream))
        if not path.is_file():
            raise OodevalError(f"{path} is not a regular file; give the IDX file's path")
        with open(path, "rb") as fh:
            return _parse_idx(path, _Chunks(iter(lambda: fh.read(1 << 20), b"")))
    except (OSError, EOFError) as exc:
        raise OodevalError(f"cannot read IDX file {path}: {exc}; re-download it") from None


class _Chunks:
    """Bytes taken in order from an iterator of chunks, never more than asked for plus one chunk."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.held = chunks, bytearray()

    def take(self, n: int) -> bytes:
        """The next `n` bytes, or fewer at the end of the stream."""
        while len(self.held) < n:
            block = next(self.chunks, b"")
            if not block:
                break
            self.held += block
        out = bytes(self.held[:n])
        del self.held[:n]
        return out


def _parse_idx(path: Path, data: _Chunks) -> np.ndarray:
    head = data.take(4)
    if len(head) < 4 or head[0] != 0 or head[1] != 0:
        raise OodevalError(f"{path} is not an IDX file (bad magic number); re-download it")
    if head[2] != 0x08:
        raise OodevalError(f"{path} holds IDX type 0x{head[2]:02x}; only unsigned bytes (0x08)")
    ndim = head[3]
    dims = data.take(4 * ndim)
    if len(dims) < 4 * ndim:
        raise OodevalError(f"{path} is truncated (header); re-download it")
    shape = tuple(int.from_bytes(dims[4 * i : 4 * i + 4], "big") for i in range(ndim))
    expected = math.prod(shape)  # exact: a product past 2**63 stays what it is
    spans = math.prod(max(d, 1) for d in shape)  # (0, 2**31, 2**31) holds 0 bytes, yet no array
    if 4 + 4 * ndim + spans > MAX_INFLATED_BYTES:  # the bound on the whole file
        raise OodevalError(
            f"{path}: its header's shape {shape} spans {spans:,} bytes, over the bound "
            f"of {human_bytes(MAX_INFLATED_BYTES)} on one IDX file; the file is corrupt, "
            "re-download it"
        )
    payload = data.take(expected + 1)
    if len(payload) != expected:
        held = f"{len(payload)}" if len(payload) <= expected else "more"
        raise OodevalError(
            f"{path} holds {held} data bytes but its header says {expected}; "
            "the file is truncated or corrupt, re-download it"
        )
    return np.frombuffer(payload, dtype=np.uint8).reshape(shape)


def read_checksums(path: Path) -> dict[str, str]:
    """Parse a ``SHA256SUMS`` file into {file name: lower-case hex digest}; {} when absent."""
    if not path.is_file():
        return {}
    sums: dict[str, str] = {}
    text = read_text(path, what="checksum file", save_as="UTF-8 text")
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            raise OodevalError(
                f"{path} line {lineno} is not '<sha256>  <file name>': {line[:80]!r}"
            )
        sums[parts[1].lstrip("*").strip()] = parts[0].lower()
    return sums


def sha256_of(path: Path) -> str:
    """The SHA-256 hex digest of the file at `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_checksum(path: Path, sums: dict[str, str]) -> None:
    """Raise OodevalError when `path` is listed in `sums` with a different SHA-256."""
    want = sums.get(path.name)
    if want is None:
        return
    got = sha256_of(path)
    if got != want:
        raise OodevalError(
            f"checksum mismatch for {path}: SHA256SUMS says {want[:12]}..., "
            f"file has {got[:12]}...; "
            "the file is corrupt or was replaced, re-download it"
        )


def download_mnist(
    root: str | Path,
    *,
    splits: tuple[str, ...] = SPLITS,
    mirrors: tuple[str, ...] = DEFAULT_MIRRORS,
    retries: int = 3,
    timeout: float = 30.0,
) -> Path:
    """Download the MNIST gzip files into `root`, verify their SHA-256, write ``SHA256SUMS``.

    Files already present with the right checksum are kept. Each file is tried on every mirror,
    `retries` times with exponential back-off; a file whose checksum does not match is deleted.
    Raises OodevalError (one line) when offline or every attempt failed.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for split in splits:
        if split not in SPLITS:
            raise OodevalError(f"unknown MNIST split {split!r}; use 'train' or 't10k'")
        for stem in FILES[split]:
            name = stem + ".gz"
            target = root / name
            if target.is_file() and sha256_of(target) == KNOWN_SHA256[name]:
                continue
            _fetch(name, target, mirrors, retries, timeout)
    lines = [f"{KNOWN_SHA256[n]}  {n}" for n in sorted(KNOWN_SHA256) if (root / n).is_file()]
    write_file(root / CHECKSUM_FILE, "\n".join(lines) + "\n")
    return root


def _fetch(name: str, target: Path, mirrors: tuple[str, ...], retries: int, timeout: float) -> None:
    import urllib.error  # imported here: urllib.request costs every command ~20 ms (ssl)
    import urllib.request

    last = "no mirror given"
    for attempt in range(max(1, retries)):
        for mirror in mirrors:
            tmp = target.with_suffix(target.suffix + ".part")
            try:
                with urllib.request.urlopen(mirror + name, timeout=timeout) as resp:
                    write_file(tmp, resp.read())
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                last = f"{mirror}{name}: {exc}"
                tmp.unlink(missing_ok=True)
                continue
            if sha256_of(tmp) != KNOWN_SHA256[name]:
                last = f"{mirror}{name}: checksum mismatch"
                tmp.unlink(missing_ok=True)
                continue
            tmp.replace(target)
            return
        time.sleep(min(2.0**attempt, 8.0))
    raise OodevalError(
        f"could not download {name} ({last}); check the network or copy the IDX files into "
        f"{target.parent} by hand"
    )


@register_source_kind
class MnistKind(SourceKind):
    """``mnist:DIR``: `load_mnist`, identified by the IDX files of each split present (named
    without ``.gz`` and hashed decompressed, so a gzip and a plain copy agree)."""

    name = "mnist"
    summary = "MNIST's IDX files"

    def load(self, root: Path | None, *, size: int | None) -> ImageSource:
        return load_mnist(self.folder(root))

    def files(self, root: Path | None) -> Iterator[tuple[str, Path, bool]]:
        base = self.folder(root)
        found = False
        for stem in (stem for pair in FILES.values() for stem in pair):
            # the loader's order: the plain file first, then the gzip copy
            path = _find(base, stem)
            if path is not None:
                found = True
                yield stem, path, path.suffix == ".gz"
        if not found:
            raise OodevalError(
                f"no MNIST IDX files in {base}; expected e.g. t10k-images-idx3-ubyte.gz and "
                "t10k-labels-idx1-ubyte.gz"
            )


def _find(root: Path, stem: str) -> Path | None:
    for candidate in (root / stem, root / (stem + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def resolve_source(source: str, *, cwd: Path | None = None) -> str:
    """Resolve the source ``"auto"`` to real MNIST: ``"mnist:DIR"`` of the first folder found.

    Looks, in order, at the folder the ``OODEVAL_MNIST`` environment variable names (an error
    when it holds no ``t10k-images-idx3-ubyte``, plain or ``.gz``: the user named it), at
    ``../shared/data/mnist`` relative to the working directory (`cwd`), and at the MNIST test set
    bundled with oodeval (`bundled_mnist_dir`, always there in an intact install). Any other
    source string is returned unchanged: scikit-learn's 8x8 digits only as ``"digits"``. A
    folder with MNIST's train files as well gives all 70,000 images (`load_mnist` reads every
    split present).

    >>> resolve_source("digits")
    'digits'
    """
    if source != "auto":
        return source
    named = os.environ.get(MNIST_ENV_VAR)
    if named:
        folder = Path(named).expanduser()
        if not _has_test_images(folder):
            raise OodevalError(
                f"{MNIST_ENV_VAR}={named} holds no t10k-images-idx3-ubyte(.gz); point it at a "
                "folder with MNIST's IDX files, or unset it to use the bundled test set"
            )
        return f"mnist:{folder.resolve()}"
    shared = (Path.cwd() if cwd is None else cwd) / ".." / "shared" / "data" / "mnist"
    if _has_test_images(shared):
        return f"mnist:{shared.resolve()}"
    return f"mnist:{bundled_mnist_dir()}"


def _has_test_images(folder: Path) -> bool:
    return any((folder / f"t10k-images-idx3-ubyte{ext}").is_file() for ext in ("", ".gz"))
