"""Units in a study store: the verified read of a store (every unit read back with its rows and
checked), and writing one unit, its rows, checkpoints and checksum in one transaction.

A unit's ``units`` row, its ``results`` rows, its ``checkpoints`` rows and its integrity
record (`oodeval.study.store.unit_checksum`) are written together or not at all
(`write_unit`, `copy_unit`); a ``done`` unit is never rewritten. `read_contents` reads every
unit, says per unit whether it verifies, and sums it up in a health verdict. Everything here
works on a `oodeval.study.store.database.StoreFile`;
`oodeval.study.store.result_store.ResultStore` is the entry point.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from oodeval.errors import OodevalError
from oodeval.study.store._integrity import StoreHealth, printable, unit_checksum, unit_damage
from oodeval.study.store.database import StoreFile, key_match, or_default
from oodeval.study.store.history import read_config, read_history
from oodeval.study.store.records import (
    StoreContents,
    StoreDamagedError,
    StoredUnit,
    UnitRecord,
    unit_values,
)
from oodeval.study.store.schema import (
    CHECKPOINT_COLUMNS,
    INTEGRITY_COLUMNS,
    JSON_COLUMNS,
    RESTORE_HINT,
    RESULT_COLUMNS,
    UNIT_COLUMNS,
)


def read_contents(db: StoreFile) -> StoreContents:
    """Read every unit and verify it: counts and checksum of its rows, with the config and its
    history (see `oodeval.study.store`), and count the rows of no stored unit.

    Raises StoreDamagedError only when nothing can be salvaged (the units or study table
    cannot be read); damaged units and a failed SQLite check are reported in ``health``.
    """
    health = StoreHealth(db.path, sqlite_check=list(db.sqlite_check), check_kind=db.check_kind)
    with db.guard("reading the study config"):
        config, problem = read_config(db)
    if problem:
        health.problems.append(problem)
    try:
        history, damaged = read_history(db)
    except sqlite3.DatabaseError as exc:
        history, damaged = [], {0: f"cannot be read ({exc})"}
    health.history_damage = {
        (f"row {printable(k)}" if k else "the table"): v for k, v in damaged.items()
    }
    health.stray_rows = or_default(lambda: count_stray_rows(db), None)
    units = read_units(db, legacy=not db.has_checksums)
    for unit in units:
        if unit.damage is not None:
            health.damaged[printable(unit.key)] = unit.damage
        elif unit.verified:
            health.verified += 1
        else:
            health.unverified.append(printable(unit.key))
    return StoreContents(config, units, health, history)


def count_stray_rows(db: StoreFile) -> int:
    """How many result and checkpoint rows belong to no stored unit."""
    total = 0
    for table in ("results", "checkpoints"):
        if table in db.tables:
            total += db.execute(
                f"SELECT COUNT(*) FROM {table} WHERE unit_key NOT IN (SELECT unit_key FROM units)"
            ).fetchone()[0]
    return int(total)


def read_units(db: StoreFile, *, legacy: bool) -> list[StoredUnit]:
    """Every unit of the store with its rows, each verified against its integrity record
    (``legacy``: a schema 1 store, no record: units are read, not verified)."""
    columns = UNIT_COLUMNS if legacy else UNIT_COLUMNS + INTEGRITY_COLUMNS
    try:
        rows = db.execute(
            f"SELECT rowid, {', '.join(columns)} FROM units ORDER BY unit_key"
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        raise StoreDamagedError(
            f"{db.path}: the units table cannot be read ({exc}), so no unit can be "
            f"salvaged; {RESTORE_HINT}"
        ) from None
    return [_read_unit(db, tuple(row), legacy=legacy) for row in rows]


def _read_unit(db: StoreFile, row: tuple, *, legacy: bool) -> StoredUnit:
    rowid, row = row[0], row[1:]
    unit = StoredUnit(row[: len(UNIT_COLUMNS)], rowid, row[len(UNIT_COLUMNS) :])
    where, key = key_match(unit.key)
    try:
        # the rows are decoded strictly (fast); text that is not UTF-8 makes them unreadable
        with db.strict_text():
            unit.results = db.execute(
                f"SELECT {', '.join(RESULT_COLUMNS)} FROM results WHERE {where} "
                "ORDER BY fold, environment",
                (key,),
            ).fetchall()
            if "checkpoints" in db.tables:
                unit.checkpoints = db.execute(
                    f"SELECT {', '.join(CHECKPOINT_COLUMNS)} FROM checkpoints WHERE {where} "
                    "ORDER BY fold, step",
                    (key,),
                ).fetchall()
    except sqlite3.DatabaseError as exc:
        unit.damage = f"its rows cannot be read: {exc}"
        return unit
    if not legacy:
        unit.damage = unit_damage(unit.row, unit.integrity, unit.results, unit.checkpoints)
        unit.verified = unit.damage is None
    if unit.damage is None:
        at = {c: i for i, c in enumerate(UNIT_COLUMNS)}
        try:
            unit.decoded = {c: json.loads(unit.row[at[c]]) for c in JSON_COLUMNS}
        except (TypeError, ValueError):
            unit.damage, unit.verified = "its metadata is not readable JSON", False
    return unit


def write_unit(db: StoreFile, record: UnitRecord) -> None:
    """Write a unit's ``units`` row, result rows, checkpoints and checksum in one transaction.

    A unit already ``done`` is left as it is; a ``failed`` one is replaced, its attempt count
    increased. Two rows with the same (fold, environment) or (fold, step) are refused
    (OodevalError) and nothing of the unit is written.
    """
    # +0.0 stores -0.0 as 0.0, which is what SQLite returns for it (the checksum is exact)
    rows = [(str(f), str(e), float(err) + 0.0, int(c)) for f, e, err, c in record.rows]
    checkpoints = [
        (str(f), int(s), float(v) + 0.0, float(t) + 0.0, float(o) + 0.0)
        for f, s, v, t, o in record.checkpoints
    ]
    _refuse_duplicates(record.key, [tuple(r[:2]) for r in rows], "(fold, environment)")
    _refuse_duplicates(record.key, [c[:2] for c in checkpoints], "(fold, step)")
    key = record.key
    with db.guard(f"recording unit {key}"), db.transaction():
        prior = db.execute("SELECT status, attempts FROM units WHERE unit_key=?", (key,)).fetchone()
        if prior is not None and prior[0] == "done":
            return
        attempts = 1 if prior is None else int(prior[1]) + 1
        delete_unit(db, key)
        values = unit_values(record, attempts)
        checksum = unit_checksum(values, rows, checkpoints)
        _insert_unit(db, (*values, len(rows), len(checkpoints), checksum), rows, checkpoints)


def copy_unit(db: StoreFile, unit: StoredUnit) -> bool:
    """Copy a verified unit read from another store, its rows exactly as stored (checksum,
    attempts and time stamps included), in one transaction. A ``failed`` unit of the same key
    is replaced; a ``done`` one never is: then nothing is written and False is returned."""
    if unit.damage is not None or not unit.verified:
        raise OodevalError(f"unit {printable(unit.key)} is not verified; it cannot be copied")
    key = unit.key
    with db.guard(f"copying unit {printable(key)}"), db.transaction():
        prior = db.execute("SELECT status FROM units WHERE unit_key=?", (key,)).fetchone()
        if prior is not None and prior[0] == "done":
            return False
        delete_unit(db, key)
        _insert_unit(db, unit.row + unit.integrity, unit.results, unit.checkpoints)
    return True


def _insert_unit(
    db: StoreFile, row: Sequence[Any], results: Sequence[Sequence], checkpoints: Sequence[Sequence]
) -> None:
    """Insert a ``units`` row (`UNIT_COLUMNS` then `INTEGRITY_COLUMNS`) and its rows."""
    columns = UNIT_COLUMNS + INTEGRITY_COLUMNS
    db.execute(
        f"INSERT INTO units({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", row
    )
    key = row[0]
    db.executemany(
        f"INSERT INTO results(unit_key, {', '.join(RESULT_COLUMNS)}) VALUES (?, ?, ?, ?, ?)",
        [(key, *r) for r in results],
    )
    db.executemany(
        f"INSERT INTO checkpoints(unit_key, {', '.join(CHECKPOINT_COLUMNS)}) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(key, *c) for c in checkpoints],
    )


def delete_unit(db: StoreFile, key: Any, rowid: int | None = None) -> None:
    """Delete a unit's rows; its ``units`` row by `rowid` when given (its key may be damaged
    beyond matching), else by key (inside the caller's transaction)."""
    where, param = key_match(key)
    db.execute(f"DELETE FROM results WHERE {where}", (param,))
    if "checkpoints" in db.tables:
        db.execute(f"DELETE FROM checkpoints WHERE {where}", (param,))
    if rowid is None:
        db.execute(f"DELETE FROM units WHERE {where}", (param,))
    else:
        db.execute("DELETE FROM units WHERE rowid=?", (rowid,))


def _refuse_duplicates(key: str, pairs: Sequence[tuple], what: str) -> None:
    seen: set[tuple] = set()
    for pair in pairs:
        if pair in seen:
            raise OodevalError(
                f"unit {key}: two rows share the {what} {pair}; the backend must return each once"
            )
        seen.add(pair)
