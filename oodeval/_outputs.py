"""An output is never an input: the one check every command makes before it writes anything.

``oodeval report DIR --out DIR/results.sqlite`` would replace the study's store with an HTML
page; ``measures r.csv -o r.csv`` the results with their scores. So each command names, before
it writes, every file it will write (its outputs) and every file it reads (its inputs), and
`refuse_aliases` refuses, in one line naming both, an output that is an input, and two outputs
that are one file. Two paths are one file when they resolve to the same path (``./``, ``..``,
symbolic links in any part, a folder given twice) or name the same device and inode (a hard
link, a bind mount). A study folder read is its store and the store's side files
(`study_files`: ``-wal``, ``-shm``, ``-journal``, written by SQLite beside it), whether they
exist or not; a DomainBed sweep folder its runs' ``results.jsonl`` and ``done`` files; a folder
of images (a protocol's tree, ``--source mnist:DIR``) every file below it (`Inputs.tree`).

A character device, a pipe or a socket (``/dev/stdout``, ``/dev/null``, the shell's ``>(...)``,
a terminal) is never the same file as anything: writing it does not change what is read. A
folder output (``--analysis-dir``, ``study merge --out``) may hold inputs; only the files
written into it are compared, and the folder itself when it is an input file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from oodeval._files import is_stream
from oodeval._text import STDIN
from oodeval.errors import OodevalError

__all__ = ["Inputs", "refuse_aliases", "study_files", "sweep_files"]


def study_files(folder: str | Path) -> list[Path]:
    """The store of the study folder `folder` and its side files (existing or not).

    >>> [p.name for p in study_files("s")]
    ['results.sqlite', 'results.sqlite-wal', 'results.sqlite-shm', 'results.sqlite-journal']
    """
    from oodeval.study.store.schema import SIDE_SUFFIXES, STORE_NAME  # the study stack: lazily

    store = Path(folder) / STORE_NAME
    return [store, *(store.with_name(store.name + s) for s in SIDE_SUFFIXES)]


def sweep_files(folder: str | Path) -> list[Path]:
    """The files a DomainBed sweep folder is read from: each run folder's ``results.jsonl`` and
    ``done``; none when `folder` is no folder (or cannot be listed)."""
    try:
        runs = sorted(d for d in Path(folder).iterdir() if d.is_dir())
    except OSError:
        return []
    return [run / name for run in runs for name in ("results.jsonl", "done")]


@dataclass
class Inputs:
    """What a command reads: labelled files, and folders every file of which it reads (trees).

    >>> Inputs().file("RESULTS", "r.csv").source("--imports", None).files
    [('RESULTS', 'r.csv')]
    """

    files: list[tuple[str, str | Path]] = field(default_factory=list)
    trees: list[tuple[str, str | Path]] = field(default_factory=list)

    def file(self, label: str, path: str | Path | None) -> Inputs:
        """Add the file `path` (nothing when None, or ``-``: standard input is no file here)."""
        if path is not None and str(path) != STDIN:
            self.files.append((label, path))
        return self

    def source(self, label: str, path: str | Path | None) -> Inputs:
        """Add what a command reads at `path`: a file, a study folder's store (`study_files`),
        or a sweep folder's run files (`sweep_files`); nothing for ``-`` (standard input)."""
        if path is None or str(path) == STDIN:
            return self
        if os.path.isdir(path):
            store, *sides = study_files(path)
            if store.exists():
                self.files.append(("the study store", store))
                self.files += [("the study store's side file", p) for p in sides]
            else:
                self.files += [(label, p) for p in sweep_files(path)]
        else:
            self.files.append((label, path))
        return self

    def imports(self, entries: Iterable[str] | None) -> Inputs:
        """Add the ``--imports`` entries that are files (a module name is not one)."""
        for entry in entries or ():
            if os.path.isfile(os.path.expanduser(entry)):
                self.file("--imports", os.path.expanduser(entry))
        return self

    def tree(self, label: str, path: str | Path | None) -> Inputs:
        """Add a folder every file below which the command may read (images): an output that
        is an existing file below it, or a hard link to one, is refused; a new file is not."""
        if path is not None:
            self.trees.append((label, path))
        return self

    def spec(self, label: str, spec: str | None) -> Inputs:
        """Add the files and folders a data SPEC names (``mnist:DIR``, ``npz:F.npz``,
        ``cmnist:e=0.9:images=folder:DIR``): each ``:``/``=``-separated part that exists."""
        for part in _spec_parts(spec or ""):
            if os.path.isdir(part):
                self.tree(label, part)
            elif os.path.exists(part):
                self.file(label, part)
        return self


def _spec_parts(spec: str) -> list[str]:
    parts = spec.split(":")
    return [p for chunk in parts for p in {chunk, chunk.partition("=")[2]} if p]


@dataclass(frozen=True)
class _Place:
    label: str
    path: str
    real: str
    inode: tuple[int, int] | None

    @classmethod
    def of(cls, label: str, path: str | Path) -> _Place | None:
        """The place `path` names; None for a device, pipe or socket (never an alias)."""
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            st = None
        if st is not None and is_stream(st.st_mode):
            return None
        inode = None if st is None else (st.st_dev, st.st_ino)
        return cls(label, str(path), os.path.realpath(path), inode)

    def same(self, other: _Place) -> bool:
        return self.real == other.real or (self.inode is not None and self.inode == other.inode)

    def named(self) -> str:
        return f"{self.label} {self.path}" if self.label else self.path


def refuse_aliases(
    outputs: Iterable[tuple[str, str | Path | None]], inputs: Inputs | None = None
) -> None:
    """Raise OodevalError when one of `outputs` (label, path) is one of the `inputs` or inside
    one of their trees, or when two of `outputs` are one file. Nothing is written or created.

    Outputs that are None (not asked for) are skipped. See the module docstring for what "one
    file" means.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); r = os.path.join(d, "r.csv"); _ = open(r, "w").write("x")
    >>> refuse_aliases([("--output", os.path.join(d, ".", "r.csv"))], Inputs().file("RESULTS", r))
    Traceback (most recent call last):
    oodeval.errors.OodevalError: --output .../r.csv is the same file as RESULTS .../r.csv, ...
    """
    inputs = inputs or Inputs()
    places = [p for label, path in outputs if path is not None for p in [_Place.of(label, path)]]
    written = [p for p in places if p is not None]
    read = [p for label, path in inputs.files for p in [_Place.of(label, path)] if p is not None]
    for i, out in enumerate(written):
        for source in read:
            if out.same(source):
                raise OodevalError(
                    f"{out.named()} is the same file as {source.named()}, which this command "
                    "reads; writing it would destroy it: choose another output file"
                )
        for label, tree in inputs.trees:
            if _inside(out, tree):
                raise OodevalError(
                    f"{out.named()} is a file inside {label} {tree}, which this command reads; "
                    "choose an output file outside it"
                )
        for other in written[:i]:
            if out.same(other):
                raise OodevalError(
                    f"{other.named()} and {out.named()} are the same file; give each output a "
                    "file of its own"
                )


def _inside(out: _Place, tree: str | Path) -> bool:
    """`out` is an existing file below the folder `tree` (by path, or as a hard link to one)."""
    if out.inode is None or os.path.isdir(out.real):  # a new file, a folder: nothing read
        return False
    root = os.path.realpath(tree)
    if out.real.startswith(root + os.sep):
        return True
    try:
        if os.stat(out.path).st_nlink < 2:  # no other name: no hard link into the tree
            return False
    except OSError:
        return False
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == out.inode:
                return True
    return False
