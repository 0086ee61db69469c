"""Image sources: the labelled images every environment family is generated from.

A source is named by a spec string, ``KIND`` or ``KIND:DIR`` (see `load_source`): ``"auto"`` (real
MNIST: the folder ``$OODEVAL_MNIST`` names, else ``../shared/data/mnist``, else the test set
bundled with oodeval; `oodeval.environments.mnist.resolve_source`) or one of the registered kinds,
`SOURCE_KINDS`: ``"digits"`` (scikit-learn's bundled 8x8 digits), ``"mnist:DIR"`` (IDX files),
``"folder:DIR"`` (``<domain>/<class>/<image>``, the PACS / VLCS / NICO++ layout),
``"classfolder:DIR"`` (``<class>/<image>``, e.g. Cats&Dogs) and ``"cifar10:DIR"`` (CIFAR-10's
python batches). Every kind loads an `ImageSource` holding float32 images of shape (N, C, H, W)
with values in [0, 1]. A new kind is one module with a `SourceKind` class decorated with
`register_source_kind` (`oodeval.environments.source_kinds`), imported below.

`source_identity` names a source by what it is rather than where it lies: its kind and a SHA-256
digest of the bytes its loader reads, with the folder kept only as a hint, so a study moved to
another machine or resumed from another checkout still recognises its data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# The built-in kinds, in the order help and error messages list them: importing a kind's module
# registers it (`register_source_kind`). A new kind is one more line here.
# isort: off
from oodeval.environments import digits  # noqa: F401
from oodeval.environments import mnist  # noqa: F401
from oodeval.environments import folders  # noqa: F401
from oodeval.environments import cifar  # noqa: F401

# isort: on
from oodeval.environments.mnist import resolve_source
from oodeval.environments.source_kinds import (
    ImageSource,
    SourceKind,
    manifest_digest,
    registered_source_kinds,
)
from oodeval.errors import OodevalError
from oodeval.limits import MAX_INFLATED_BYTES, inflate_capped

#: The registered image-source kinds by name (``"digits"``, ``"mnist"``, ...): a live read-only
#: view of the registry, so a kind registered later is listed too.
SOURCE_KINDS: Mapping[str, SourceKind] = registered_source_kinds()
#: Largest image side a source is resized to: 1024 x 1024 is past any benchmark's images, and
#: a mistyped side is refused before it asks for terabytes.
MAX_IMAGE_SIZE = 1024
#: What ``auto`` names, for help texts.
AUTO_SUMMARY = "real MNIST: $OODEVAL_MNIST, ../shared/data/mnist or the bundled test set"


def source_forms(*, summaries: bool = False) -> str:
    """The spec forms a source may take, ``auto`` first, optionally with each kind's summary.

    >>> source_forms()
    'auto, digits, mnist:DIR, folder:DIR, classfolder:DIR, cifar10:DIR'
    """
    forms = [("auto", AUTO_SUMMARY)] + [(k.usage, k.summary) for k in SOURCE_KINDS.values()]
    return ", ".join(f"{form} ({text})" if summaries and text else form for form, text in forms)


def load_source(spec: str, *, size: int | None = None) -> ImageSource:
    """Load the image source named by `spec`.

    Parameters
    ----------
    spec : str
        ``"auto"`` or a registered kind: ``"digits"``, ``"mnist:DIR"``, ``"folder:DIR"``,
        ``"classfolder:DIR"``, ``"cifar10:DIR"`` (`SOURCE_KINDS`).
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
    if size is not None and (not isinstance(size, int) or not 1 <= size <= MAX_IMAGE_SIZE):
        raise OodevalError(f"size must be an integer in [1, {MAX_IMAGE_SIZE}], got {size!r}")
    source = SOURCE_KINDS[kind].load(root, size=size)
    if size is not None and size != source.images.shape[-1]:
        source = resized(source, size)
    return source


def parse_source_spec(spec: str) -> tuple[str, Path | None]:
    """Split a source spec into its kind and its folder (None for a kind without one, such as
    ``digits``), checking both.

    >>> parse_source_spec("digits")
    ('digits', None)
    """
    if not isinstance(spec, str) or not spec.strip():
        raise OodevalError(
            f"source must be a spec string such as 'digits' or 'mnist:DIR', got {spec!r}"
        )
    if spec.strip().lower() == "auto":
        spec = resolve_source("auto")
    kind, _, location = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in SOURCE_KINDS:
        raise OodevalError(f"unknown image source {kind!r}; use one of: {source_forms()}")
    if not SOURCE_KINDS[kind].takes_folder:
        if location:
            raise OodevalError(f"the {kind} source takes no folder, got {spec!r}; use '{kind}'")
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

    The digest is ``"sha256:" + SHA-256`` of a manifest (`manifest_digest`) with one line
    ``<name>\\0<sha256>`` per file the source's loader reads, sorted by name (the kind's
    `SourceKind.files`): for ``mnist`` the IDX files of each split present (named without ``.gz``
    and hashed decompressed, so a gzip and a plain copy agree), for ``cifar10`` the batches and
    ``batches.meta``, for ``folder`` / ``classfolder`` every image by its path relative to the
    root, for ``digits`` scikit-learn's bundled file. Reading costs about what loading costs
    (MNIST's test set: tens of milliseconds); each file's digest is cached in the process by
    (path, size, modification time).

    >>> ident = source_identity("digits")
    >>> ident.kind, ident.digest.startswith("sha256:"), len(ident.digest)
    ('digits', True, 71)
    """
    kind, root = parse_source_spec(spec)
    files = list(SOURCE_KINDS[kind].files(root))
    hint = "" if root is None else str(root.resolve())
    digests = {name: _file_sha256(path, decompress) for name, path, decompress in files}
    return SourceIdentity(kind, manifest_digest(digests), hint)


_FILE_DIGESTS: dict[tuple[str, int, int, bool], str] = {}


def _file_sha256(path: Path, decompress: bool) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, decompress)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        try:
            for block in _file_blocks(path, decompress):
                digest.update(block)
        except (OSError, EOFError) as exc:
            raise OodevalError(f"cannot read {path}: {exc}; replace the file") from None
        _FILE_DIGESTS[key] = digest.hexdigest()
    return _FILE_DIGESTS[key]


def _file_blocks(path: Path, decompress: bool) -> Iterator[bytes]:
    """The bytes of `path` a block at a time, inflated (and capped at `MAX_INFLATED_BYTES`, so a
    gzip bomb is refused, not hashed for minutes) when `decompress`."""
    if decompress:
        yield from inflate_capped(path, MAX_INFLATED_BYTES, str(path))
        return
    with open(path, "rb") as fh:
        yield from iter(lambda: fh.read(1 << 20), b"")


def as_image_source(source: str | ImageSource, *, size: int | None = None) -> ImageSource:
    """Return `source` itself when it is an `ImageSource`, else the source its spec names.

    `size` is passed to `load_source` for a spec and ignored for a ready source.

    >>> as_image_source("digits").name
    'digits'
    """
    return source if isinstance(source, ImageSource) else load_source(source, size=size)


def resized(source: ImageSource, size: int) -> ImageSource:
    """`source` with every image resized to `size` x `size` (bilinear, via Pillow)."""
    from PIL import Image

    n, c = source.images.shape[:2]
    out = np.empty((n, c, size, size), dtype=np.float32)
    for i in range(n):
        for ch in range(c):
            img = Image.fromarray(source.images[i, ch], mode="F")
            out[i, ch] = np.asarray(
                img.resize((size, size), Image.Resampling.BILINEAR), dtype=np.float32
            )
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
