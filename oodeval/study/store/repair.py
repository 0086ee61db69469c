"""Repairs of a damaged study store, by its writer: quarantine, and rebuilding a damaged file.

- Units that fail verification, rows of no stored unit and damaged rows of the config history
  are moved to the ``quarantine`` table (`set_damaged_aside`, `set_history_aside`), with the
  reason, the time and everything that could be read of them, so a run stores them again.
- A file that fails SQLite's integrity check is rebuilt (`rebuild`): its config, history rows
  and the units that verify are copied into a new file that replaces it; the damaged file is
  kept beside it as ``results.sqlite.damaged-<time>``.

`SetAside` says what was done. `oodeval.study.store.result_store.ResultStore.move_damaged_aside`
is the entry point; everything here works on a `oodeval.study.store.database.StoreFile`.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodeval._time import utc_file_stamp, utc_timestamp
from oodeval.study.store._integrity import named, printable
from oodeval.study.store.database import (
    StoreFile,
    fresh_sqlite_file,
    fsync,
    link_or_copy,
    or_default,
    unused_path,
)
from oodeval.study.store.history import (
    append_config,
    config_row,
    current_config,
    read_history,
)
from oodeval.study.store.records import ConfigRecord, StoreContents, StoreDamagedError
from oodeval.study.store.schema import (
    CHECKPOINT_COLUMNS,
    CONFIG_COLUMNS,
    RESTORE_HINT,
    RESULT_COLUMNS,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    STORE_NAME,
)
from oodeval.study.store.units import delete_unit, read_contents


@dataclass(frozen=True)
class SetAside:
    """What `ResultStore.move_damaged_aside` did: units moved to the quarantine table (with the
    reason), keys of stray rows moved there, and the damaged file kept after a rebuild."""

    units: dict[str, str] = field(default_factory=dict)
    stray_keys: int = 0
    damaged_copy: Path | None = None
    history_rows: int = 0

    def summary(self) -> str | None:
        """One line for the user, or None when nothing was done."""
        parts = []
        if self.damaged_copy is not None:
            parts.append(
                f"the store failed SQLite's integrity check and was rebuilt from the units that "
                f"verify; the damaged file is kept as {self.damaged_copy.name}"
            )
        if self.units:
            parts.append(
                f"{len(self.units)} damaged unit(s) moved aside to run again: {named(self.units)}"
            )
        if self.stray_keys:
            parts.append(f"rows of {self.stray_keys} unknown unit key(s) moved aside")
        if self.history_rows:
            parts.append(f"{self.history_rows} damaged row(s) of the config history moved aside")
        return "; ".join(parts) or None


def set_damaged_aside(db: StoreFile, earlier: int) -> SetAside:
    """Move every unit that fails verification, rows of no stored unit and damaged rows of the
    config history to the quarantine table, in one transaction (a file that passes SQLite's
    check). `earlier`: history rows already set aside since the store was opened."""
    contents = read_contents(db)
    if contents.health.problems:
        raise StoreDamagedError(f"{db.path}: {contents.health.problems[0]}; {RESTORE_HINT}")
    damaged = [(u, u.damage) for u in contents.units if u.damage is not None]
    with db.guard("moving damaged units aside"):
        history, bad_rows = read_history(db)
        stray = _stray_rows(db, {u.key for u in contents.units})
        if not damaged and not stray and not bad_rows:
            return SetAside(history_rows=earlier)
        with db.transaction():
            for unit, damage in damaged:
                quarantine(db, unit.key, damage, unit.as_json(db.unit_columns()))
                delete_unit(db, unit.key, unit.rowid)
            for key, data in stray.items():
                quarantine(db, key, "rows of no stored unit", data)
                delete_unit(db, key)
            set_history_aside(db, bad_rows, history, contents.config)
    units = {printable(u.key): damage for u, damage in damaged}
    return SetAside(units, len(stray), history_rows=earlier + len(bad_rows))


def set_history_aside(
    db: StoreFile, bad_rows: Mapping[int, str], history: Sequence[ConfigRecord], config: Any
) -> None:
    """Move damaged rows of the config history to the quarantine table; record the current
    config again when its own row was among them (inside the caller's transaction)."""
    if bad_rows and (not history or history[-1].config != config):
        names = history[-1].scenario_names if history else {}
        text = db.study_rows()["config"]
        append_config(db, text, names, "recorded again (history row damaged)")
    for seq, reason in bad_rows.items():
        row = db.execute("SELECT * FROM configs WHERE seq=?", (seq,)).fetchone()
        data = json.dumps(list(row), default=repr)
        quarantine(db, f"config history row {seq}", f"config history row {reason}", data)
        db.execute("DELETE FROM configs WHERE seq=?", (seq,))


def quarantine(db: StoreFile, key: Any, reason: str, data: str) -> None:
    """Add one row to the quarantine table (inside the caller's transaction)."""
    db.execute(
        "INSERT INTO quarantine(unit_key, moved, reason, data) VALUES (?, ?, ?, ?)",
        (printable(key), utc_timestamp(), reason, data),
    )


def _stray_rows(db: StoreFile, known: set) -> dict[Any, str]:
    """{unit key: its rows as JSON} of result and checkpoint rows of no stored unit."""
    stray: dict[Any, dict[str, list]] = {}
    for table in ("results", "checkpoints"):
        if table not in db.tables:
            continue
        columns = RESULT_COLUMNS if table == "results" else CHECKPOINT_COLUMNS
        query = (
            f"SELECT unit_key, {', '.join(columns)} FROM {table} WHERE unit_key NOT IN "
            "(SELECT unit_key FROM units)"
        )
        for key, *row in db.execute(query):
            if key not in known:
                stray.setdefault(key, {"results": [], "checkpoints": []})[table].append(row)
    return {k: json.dumps({"unit": None, **v}, default=repr) for k, v in stray.items()}


def count_quarantined(db: StoreFile) -> int:
    """How many rows the quarantine table holds (0 when the store has none)."""
    if "quarantine" not in db.tables:
        return 0
    return int(db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0])


def rebuilt_records(study: Mapping[str, Any]) -> list:
    """The records of earlier rebuilds of a store (its ``study.rebuilt`` JSON list), or []."""
    text = study.get("rebuilt")
    try:
        value = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def rebuild(db: StoreFile, earlier: int) -> SetAside:
    """A store failing SQLite's integrity check is rebuilt: its config and the units that verify
    are copied into a new file, which then replaces it; the damaged file is kept beside it
    as ``results.sqlite.damaged-<time>``. `earlier`: history rows already set aside."""
    if current_config(db) is None:
        raise StoreDamagedError(
            f"{db.path} fails SQLite's integrity check and holds no study config; {RESTORE_HINT}"
        )
    contents = read_contents(db)
    if contents.health.problems:
        raise StoreDamagedError(f"{db.path}: {contents.health.problems[0]}; {RESTORE_HINT}")
    study = db.study_rows()
    kept_quarantine = or_default(lambda: db.execute("SELECT * FROM quarantine").fetchall(), [])
    aside = unused_path(
        db.directory / f"{STORE_NAME}.damaged-{utc_file_stamp()}", with_suffixes=("-wal",)
    )
    record = {
        "at": utc_timestamp(),
        "damaged_copy": aside.name,
        "sqlite": db.sqlite_check[:5],
        "kept": len(contents.usable),
        "damaged": len(contents.health.damaged),
    }
    old_schema = study.get("schema", "1")
    study.update(rebuilt=json.dumps(rebuilt_records(study) + [record]), schema=SCHEMA_VERSION)
    configs = _history_to_keep(db, contents, study["config"], old_schema)
    tmp = db.directory / f"{STORE_NAME}.rebuild"
    new = fresh_sqlite_file(tmp)
    try:
        new.executescript(SCHEMA_SQL)
        new.execute("BEGIN IMMEDIATE")
        new.executemany("INSERT INTO study(key, value) VALUES (?, ?)", list(study.items()))
        new.executemany("INSERT INTO quarantine VALUES (?, ?, ?, ?)", kept_quarantine)
        new.executemany("INSERT INTO configs VALUES (?, ?, ?, ?, ?, ?, ?)", configs)
        _copy_units(new, contents, db.unit_columns())
        new.execute("COMMIT")
    finally:
        new.close()
    _swap_in(db, tmp, aside)
    lost = earlier + len(contents.health.history_damage)
    return SetAside(dict(contents.health.damaged), 0, aside, history_rows=lost)


def _copy_units(new: sqlite3.Connection, contents: StoreContents, columns: Sequence[str]) -> None:
    """Copy the units that verify into the new file `new`; quarantine the others there."""
    for unit in contents.units:
        if unit.damage is not None:
            new.execute(
                "INSERT INTO quarantine VALUES (?, ?, ?, ?)",
                (printable(unit.key), utc_timestamp(), unit.damage, unit.as_json(columns)),
            )
            continue
        new.execute(
            f"INSERT INTO units({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            unit.row + unit.integrity,
        )
        new.executemany(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?)",
            [(unit.key, *r) for r in unit.results],
        )
        new.executemany(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
            [(unit.key, *c) for c in unit.checkpoints],
        )


def _history_to_keep(
    db: StoreFile, contents: StoreContents, current: str, schema: str
) -> list[tuple]:
    """The ``configs`` rows a rebuilt store keeps: those that verify, then the current config
    again when its own row is not among them (or the store had no history yet)."""
    configs, last = [], 0
    if "configs" in db.tables:
        good = {r.seq for r in contents.history if r.recorded}
        columns = ", ".join((*CONFIG_COLUMNS, "checksum"))
        rows = or_default(
            lambda: db.execute(f"SELECT {columns} FROM configs ORDER BY seq").fetchall(), []
        )
        configs = [r for r in rows if r[0] in good]
        last = max((r[0] for r in rows if isinstance(r[0], int)), default=0)
    if not configs or json.loads(configs[-1][1]) != contents.config:
        origin = (
            "recorded again (history row damaged)"
            if "configs" in db.tables
            else f"migrated from schema {schema}"
        )
        names = configs[-1][2] if configs else "{}"
        configs.append(config_row(last + 1, current, names, origin))
    return configs


def _swap_in(db: StoreFile, rebuilt: Path, aside: Path) -> None:
    """Replace the damaged store by `rebuilt`, keeping the damaged file (and its WAL) as
    `aside`. The store path is never missing: a crash leaves either file in place."""
    fsync(rebuilt)
    db.disconnect()
    link_or_copy(db.path, aside)
    wal = db.path.with_name(STORE_NAME + "-wal")
    if wal.exists():
        link_or_copy(wal, aside.with_name(aside.name + "-wal"))
        wal.unlink()  # a WAL of the damaged file must never be replayed onto the new one
    db.path.with_name(STORE_NAME + "-shm").unlink(missing_ok=True)
    os.replace(rebuilt, db.path)
    fsync(db.directory)
    db.open()
