"""The registry of image-source kinds: `ImageSource` (what every kind loads), `SourceKind` (what a
kind implements) and `register_source_kind` (the decorator that names it).

A kind is what a source spec names before its colon: ``digits``, ``mnist:DIR``, ``cifar10:DIR``...
(`oodeval.environments.sources.parse_source_spec`). Each kind is one class in a module of its own,
decorated with `register_source_kind`; `oodeval.environments.sources` imports the built-in kind
modules, so importing it fills the registry, and its ``SOURCE_KINDS`` is a live view of it.

A new kind, e.g. ``svhn:DIR``::

    @register_source_kind
    class SvhnKind(SourceKind):
        name = "svhn"
        summary = "SVHN's .mat files"

        def load(self, root, *, size):
            ...  # an ImageSource of the images under root

        def files(self, root):
            yield "test_32x32.mat", root / "test_32x32.mat", False
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

import numpy as np

from oodeval._registry import Registry
from oodeval.errors import OodevalError


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
        digest = hashlib.sha256()
        digest.update(str(self.images.shape).encode())
        digest.update(np.ascontiguousarray(self.images).tobytes())
        digest.update(np.ascontiguousarray(self.labels).tobytes())
        if self.domains is not None:
            digest.update(np.ascontiguousarray(self.domains).tobytes())
        return digest.hexdigest()


class SourceKind(ABC):
    """One kind of image source: how the spec ``KIND:DIR`` (or ``KIND``) is loaded and identified.

    Subclasses set `name` (the spec's prefix, lower case) and `summary` (a few words for help
    texts), set `takes_folder` to False for a kind named without a folder (``digits``), implement
    `load` and `files`, and are registered with `register_source_kind`.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    takes_folder: ClassVar[bool] = True

    @property
    def usage(self) -> str:
        """How a spec names this kind: ``"mnist:DIR"``, or ``"digits"`` without a folder."""
        return f"{self.name}:DIR" if self.takes_folder else self.name

    def folder(self, root: Path | None) -> Path:
        """`root`, the folder a kind that takes one reads; None is refused in one line (as
        `oodeval.environments.sources.parse_source_spec` refuses a spec without its folder)."""
        if root is None:
            raise OodevalError(f"source {self.name!r} needs a folder: use '{self.usage}'")
        return root

    @abstractmethod
    def load(self, root: Path | None, *, size: int | None) -> ImageSource:
        """The labelled images under `root` (None when the kind takes no folder).

        `size` is the side length asked for (None: the kind's choice). A kind may read its images
        at that size; `oodeval.environments.sources.load_source` resizes whatever comes back at
        another side length.
        """

    @abstractmethod
    def files(self, root: Path | None) -> Iterator[tuple[str, Path, bool]]:
        """``(name, path, decompress)`` of every file `load` reads under `root`: the content
        `oodeval.environments.sources.source_identity` digests. `name` is the file's name
        independent of where the source lies (e.g. its path relative to `root`); `decompress`
        says the file is gzip and is hashed decompressed."""


_KINDS: Registry[SourceKind] = Registry("source kind", definition=type)
K = TypeVar("K", bound=type[SourceKind])


def register_source_kind(cls: K) -> K:
    """Class decorator adding a `SourceKind` subclass to the registry under its `name`.

    A name another class holds is refused in one line; the same class again (its module run
    again after an edit) replaces itself. ``auto`` is reserved (real MNIST,
    `oodeval.environments.mnist.resolve_source`).

    >>> class Toy(SourceKind):
    ...     name = "toy-kind"
    ...     def load(self, root, *, size): ...
    ...     def files(self, root): ...
    >>> register_source_kind(Toy) is Toy, registered_source_kinds()["toy-kind"].usage
    (True, 'toy-kind:DIR')
    >>> unregister_source_kind("toy-kind")
    """
    if not (isinstance(cls, type) and issubclass(cls, SourceKind)):
        raise OodevalError(f"register_source_kind expects a subclass of SourceKind, got {cls!r}")
    name = cls.name
    if not name or name != name.strip().lower() or ":" in name or name == "auto":
        raise OodevalError(
            f"{cls.__name__}.name must be a lower-case word without ':' other than 'auto', "
            f"got {name!r}"
        )
    _KINDS.check_free(name, cls)
    _KINDS.add(name, cls())
    return cls


def unregister_source_kind(name: str) -> None:
    """Remove the kind called `name` from the registry (nothing happens when it is absent)."""
    _KINDS.remove(name)


def registered_source_kinds() -> Mapping[str, SourceKind]:
    """The registered kinds by name, in registration order: a read-only, live view."""
    return _KINDS


def manifest_digest(file_digests: Mapping[str, str]) -> str:
    """``"sha256:" + SHA-256`` of the lines ``<name>\\0<sha256>\\n``, sorted by name: a source's
    content digest from its files' SHA-256 hex digests
    (`oodeval.environments.sources.source_identity`).

    >>> manifest_digest({"b": "00", "a": "11"}) == manifest_digest({"a": "11", "b": "00"})
    True
    """
    manifest = "".join(f"{name}\0{file_digests[name]}\n" for name in sorted(file_digests))
    return "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()
