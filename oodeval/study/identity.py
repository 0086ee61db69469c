"""Telling study stores apart by identity, not by path, before their units are pooled or merged.

Two folders given to one command are the *same store* when their ``results.sqlite`` is one file
(the same resolved path, or the same device and inode: a symbolic link to the folder, a hard link
to the store, ``./s`` and ``s``) or when they hold the same stored units: the same unit keys with
the same checksums (`oodeval.study.store.StoreContents.fingerprint`; a checksum covers a unit's
row, its time stamps included, and all its rows, so only a copy of a store matches it). Two
stores *share units* when some, not all, of their (key, checksum) pairs are common: one was
copied or merged from the other, then grown.

`oodeval study measures` pools the cells of the studies it is given, so a repeated store would
count each of its units twice; `distinct_stores` refuses it in one line naming both folders, or,
asked to (``--drop-duplicates``), leaves the repeat out with a note; stores that share units are
refused either way (merging them keeps a shared unit once). `oodeval study merge` keeps a unit
found in several inputs once, yet refuses (or drops) an input that is the same store as another
the same way, since it adds nothing but the risk of merging a study into itself.

>>> a = StoreIdentity("a", Path("/s/a"), (1, 7), frozenset({("k1", "x"), ("k2", "y")}))
>>> same_store(a, StoreIdentity("b", Path("/s/b"), (1, 8), a.units))
'holds the same 2 stored units as a (the same unit keys and checksums: a copy of it)'
>>> same_store(a, StoreIdentity("c", Path("/s/c"), (1, 7)))
'is the same store as a (the same file, by a link or another path)'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from oodeval.errors import OodevalError, option
from oodeval.study.store import STORE_NAME

__all__ = ["StoreIdentity", "distinct_stores", "file_identity", "same_store"]

#: Why a folder named twice by the same path is left out.
GIVEN_TWICE = "is given twice"


@dataclass(frozen=True)
class StoreIdentity:
    """What tells one store from another: the folder as given (``label``), its resolved store
    path, the (device, inode) of the store file (None when it cannot be read) and, once read,
    its units' (key, checksum) pairs (empty until then)."""

    label: str
    resolved: Path
    file: tuple[int, int] | None
    units: frozenset[tuple[Any, str]] = frozenset()

    def with_units(self, units: frozenset[tuple[Any, str]]) -> StoreIdentity:
        """The same identity with its stored units known."""
        return replace(self, units=units)


def file_identity(directory: str | Path, label: str | None = None) -> StoreIdentity:
    """The identity of the store in `directory` (of the folder itself when it holds none, as a
    DomainBed sweep does), before anything in it is read."""
    folder = Path(directory)
    target = folder / STORE_NAME if (folder / STORE_NAME).is_file() else folder
    try:
        stat = os.stat(target)  # follows links: a link and its target are one file
        file: tuple[int, int] | None = (stat.st_dev, stat.st_ino)
    except OSError:
        file = None
    return StoreIdentity(str(folder) if label is None else label, target.resolve(), file)


def same_store(first: StoreIdentity, second: StoreIdentity) -> str | None:
    """Why `second` is the same store as `first` (the rest of a sentence starting with its
    name), or None when they are distinct."""
    if first.resolved == second.resolved or (first.file is not None and first.file == second.file):
        if first.label == second.label:
            return GIVEN_TWICE
        return f"is the same store as {first.label} (the same file, by a link or another path)"
    if first.units and first.units == second.units:
        return (
            f"holds the same {len(first.units):,} stored units as {first.label} (the same unit "
            "keys and checksums: a copy of it)"
        )
    return None


def distinct_stores(
    stores: Sequence[StoreIdentity],
    *,
    drop: bool,
    allow_shared: bool = False,
    harm: str = "its units would be counted twice",
) -> tuple[list[StoreIdentity], list[str]]:
    """The stores with every repeat of an earlier one left out, and a note for each left out.

    A store that is the same as an earlier one (`same_store`) is refused (OodevalError, one
    line naming both and saying `harm`, what the repeat would do) unless `drop`; two stores
    that share some units are refused unless `allow_shared` (a merge keeps a shared unit once).

    >>> a = StoreIdentity("a", Path("/s/a"), (1, 7))
    >>> [k.label for k in distinct_stores([a, a], drop=True)[0]]
    ['a']
    """
    kept: list[StoreIdentity] = []
    notes: list[str] = []
    for store in stores:
        why = next((w for k in kept if (w := same_store(k, store)) is not None), None)
        if why is not None:
            if not drop:
                because = "" if why == GIVEN_TWICE else f"; {harm}"
                raise OodevalError(
                    f"{store.label} {why}{because}; list each study folder once, or pass "
                    f"{option('drop_duplicates', True)} to leave the repeat out"
                )
            notes.append(f"{store.label} left out: it {why}")
            continue
        if not allow_shared:
            _refuse_shared(kept, store)
        kept.append(store)
    return kept, notes


def _refuse_shared(kept: Sequence[StoreIdentity], store: StoreIdentity) -> None:
    for other in kept:
        shared = other.units & store.units
        if shared:
            raise OodevalError(
                f"{store.label} shares {len(shared):,} stored unit(s) with {other.label} (the "
                "same unit keys and checksums: one was copied or merged from the other), which "
                "would be counted twice: merge the two with `oodeval study merge` (it keeps a "
                "shared unit once) and give the merged study instead"
            )
