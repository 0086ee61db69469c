"""Integrity of a study store: per-unit checksums, verdicts, and what a damaged store may yield.

Every unit stored by `oodeval.study.store.ResultStore` carries the number of its result rows, the
number of its checkpoint rows and `unit_checksum` of its content, written in the same transaction
as the rows. Reading a unit back, its rows are counted and hashed again (`unit_damage`): a unit
whose rows do not match is *damaged*, and its numbers reach no analysis unless the caller asks to
leave it out (``--exclude-damaged``), in which case every output says so (`StoreHealth.notes`).

The checksum is SHA-256 over a canonical text: the ``repr`` of the ``units`` row (column order),
then the ``repr`` of every result row and of every checkpoint row, each set sorted, one per line.
``repr`` is exact and type-tagged for what SQLite returns (``1``, ``1.0`` and ``'1'`` differ; a
float's repr is the shortest string that reads back to the same bits; strings are quoted and
escaped), so any change of a stored bit, of a value's type, or of the set of rows changes the
digest. (SQLite returns ``-0.0`` as ``0.0``; the writer stores ``0.0``.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodeval.errors import option as named_option

#: How many damaged units a one-line message names before it says "and N more".
NAMED_IN_LINE = 3


def unit_checksum(
    unit: Sequence[Any],
    results: Iterable[Sequence[Any]],
    checkpoints: Iterable[Sequence[Any]],
) -> str:
    """SHA-256 (hex) of a unit's canonical content.

    `unit` is the ``units`` row (`oodeval.study.store.UNIT_COLUMNS` order), `results` the
    (fold, environment, error, count) rows and `checkpoints` the (fold, step, train_val_acc,
    test_acc, oracle_val_acc) rows, in any order.

    >>> a = unit_checksum(["k", 1], [("f", "e", 0.5, 10)], [])
    >>> a == unit_checksum(("k", 1), [["f", "e", 0.5, 10]], []) and len(a)
    64
    >>> a == unit_checksum(["k", 1], [("f", "e", 0.5000000000000001, 10)], [])
    False
    >>> a == unit_checksum(["k", 1], [("f", "e", 0.5, 10.0)], [])
    False
    """
    text = "\n".join(
        [
            "oodeval-unit-v1",
            repr(tuple(unit)),
            "results",
            *sorted(map(repr, map(tuple, results))),
            "checkpoints",
            *sorted(map(repr, map(tuple, checkpoints))),
        ]
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def text_checksum(text: str) -> str:
    """SHA-256 (hex) of a stored text (the study config)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def unit_damage(
    unit: Sequence[Any],
    expected: tuple[Any, Any, Any],
    results: Sequence[Sequence[Any]],
    checkpoints: Sequence[Sequence[Any]],
) -> str | None:
    """Why a unit read back does not match what was written, or None when it verifies.

    `expected` is the stored (n_results, n_checkpoints, checksum).

    >>> row = ["k", 1]
    >>> ok = (1, 0, unit_checksum(row, [("f", "e", 0.5, 10)], []))
    >>> unit_damage(row, ok, [("f", "e", 0.5, 10)], []) is None
    True
    >>> unit_damage(row, ok, [], [])
    '0 of 1 result rows'
    >>> unit_damage(row, ok, [("f", "e", 0.25, 10)], [])
    'rows differ from their checksum'
    """
    n_results, n_checkpoints, checksum = expected
    if not isinstance(checksum, str) or not isinstance(n_results, int):
        return "its checksum record is missing or unreadable"
    if len(results) != n_results:
        return f"{len(results)} of {n_results} result rows"
    if len(checkpoints) != n_checkpoints:
        return f"{len(checkpoints)} of {n_checkpoints} checkpoint rows"
    digest = unit_checksum(unit, results, checkpoints)
    return None if digest == checksum else "rows differ from their checksum"


def printable(text: object) -> str:
    r"""`text` as a string any terminal can print (undecodable bytes shown as escapes).

    >>> printable("e=0.1\udcff")
    'e=0.1\\udcff'
    """
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def named(items: dict[str, str], limit: int = NAMED_IN_LINE) -> str:
    """'a (why); b (why) and 2 more' for the first `limit` of `items` ({name: reason}).

    >>> named({"a": "x", "b": "y", "c": "z"}, limit=2)
    'a (x); b (y) and 1 more'
    """
    shown = [f"{printable(k)} ({v})" for k, v in list(items.items())[:limit]]
    rest = len(items) - len(shown)
    return "; ".join(shown) + (f" and {rest} more" if rest > 0 else "")


@dataclass
class StoreHealth:
    """What opening and verifying a study store found.

    ``problems`` holds damage to the store as a whole (its config); ``sqlite_check`` SQLite's
    full integrity check messages (every command runs it), empty when it passed; ``damaged``
    maps each unit that fails verification to the reason; ``unverified`` lists units stored
    without a checksum (by an oodeval before checksums); ``verified`` counts the units that
    match their checksums; ``excluded`` is True when damaged units were left out on request;
    ``history_damage`` maps each row of the config history that fails its checksum to what is
    wrong (the current config has its own checksum, so numbers never depend on those rows);
    ``stray_rows`` counts the result and checkpoint rows of no stored unit (None when the
    tables cannot be read in full).

    `damage` is the one verdict every command gives about a store: ``study verify`` exits 1
    when it is not empty, ``status`` names each item, and the commands that compute numbers
    refuse a store that is not `trusted`.
    """

    path: Path
    problems: list[str] = field(default_factory=list)
    sqlite_check: list[str] = field(default_factory=list)
    check_kind: str = "integrity check"
    damaged: dict[str, str] = field(default_factory=dict)
    unverified: list[str] = field(default_factory=list)
    verified: int = 0
    excluded: bool = False
    history_damage: dict[str, str] = field(default_factory=dict)
    stray_rows: int | None = 0

    @property
    def sqlite_ok(self) -> bool:
        return not self.sqlite_check

    @property
    def total(self) -> int:
        """How many units are stored (verified, damaged or without checksum)."""
        return self.verified + len(self.damaged) + len(self.unverified)

    @property
    def trusted(self) -> bool:
        """True when numbers may be computed from every unit: SQLite's check passes, no unit is
        damaged and no row belongs to no unit (units without checksums aside)."""
        return self.sqlite_ok and not self.damaged and not self.problems and self.stray_rows == 0

    def damage(self) -> list[str]:
        """Every damage found, one phrase each; empty when the store is undamaged.

        >>> StoreHealth(Path("s/results.sqlite"), stray_rows=2).damage()
        ['2 result/checkpoint row(s) belong to no stored unit']
        """
        what = list(self.problems)
        if not self.sqlite_ok:
            what.append(f"SQLite's {self.check_kind} fails ({self.sqlite_problem()})")
        if self.damaged:
            what.append(
                f"{len(self.damaged)} of {self.total} units fail verification: "
                f"{named(self.damaged)}"
            )
        if self.stray_problem():
            what.append(self.stray_problem())
        if self.history_damage:
            what.append(f"its config history is damaged ({named(self.history_damage)})")
        return what

    def stray_problem(self) -> str:
        """What is wrong with the rows of no stored unit ('' when there are none)."""
        if self.stray_rows is None:
            return "the rows of no stored unit cannot be counted"
        if self.stray_rows:
            return f"{self.stray_rows} result/checkpoint row(s) belong to no stored unit"
        return ""

    def sqlite_problem(self) -> str:
        """SQLite's first complaint and how many follow ('' when its check passed)."""
        if self.sqlite_ok:
            return ""
        first = " ".join(self.sqlite_check[0].split())[:160]
        more = len(self.sqlite_check) - 1
        return first + (f" and {more} more messages" if more > 0 else "")

    def refusal(self, option: str | None = None) -> str:
        """The one-line refusal of a command that computes numbers from a damaged store;
        `option` (as the caller names it: `oodeval.errors.option`) computes without them."""
        what = self.damage()
        verify = f"`oodeval study verify {self.path.parent}` lists every problem"
        if self.problems:  # the study itself cannot be told: nothing to re-run
            return (
                f"{self.path} is damaged: {'; '.join(what)}; no number is computed from it. "
                f"Restore it from a backup, or start the study in a new folder; {verify}"
            )
        fix = (
            "rebuild the store from the units that verify (the damaged file is kept beside it) "
            "and run the others again"
            if not self.sqlite_ok
            else "move the damaged units aside and run them again"
            if self.damaged
            else "move the rows of no stored unit aside"
        )
        skip = f", or pass {option} to compute without them" if option else ""
        return (
            f"{self.path} is damaged: {'; '.join(what)}; no number is computed from it. Run "
            f"`oodeval study run` with the same config to {fix}{skip}; {verify}"
        )

    def notes(self) -> list[str]:
        """Sentences every output computed from this store must carry (empty when clean)."""
        out = []
        if self.excluded and self.damaged:
            out.append(
                f"{len(self.damaged)} of {self.total} stored units are damaged and excluded from "
                f"every number ({named_option('exclude_damaged', True)}): "
                f"{named(self.damaged, limit=10)}."
            )
        if self.excluded and not self.sqlite_ok:
            out.append(
                f"The store fails SQLite's {self.check_kind} ({self.sqlite_problem()}); the "
                "numbers come only from units whose rows match their checksums, and units whose "
                "records were lost count as pending."
            )
        if self.excluded and self.stray_rows:
            out.append(
                f"The store holds {self.stray_rows} result/checkpoint row(s) of no stored unit; "
                "no number uses them, and `oodeval study run` with the same config moves them "
                "aside."
            )
        if self.history_damage:
            out.append(
                f"{len(self.history_damage)} row(s) of the store's config history are damaged "
                f"({named(self.history_damage)}); the current config is intact; `oodeval study "
                "run` with the same config sets them aside."
            )
        if self.unverified:
            out.append(
                f"{len(self.unverified)} unit(s) were stored by an oodeval without checksums and "
                "are not verified; running `oodeval study run` with the same config adds them."
            )
        return out
