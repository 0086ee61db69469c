"""Bringing a store written by an older oodeval up to this schema (`SCHEMA_VERSION`).

- Schema 1 had no checksums: once SQLite's full integrity check passes, every unit gets its
  integrity record (`add_checksums`); ``study.migrated`` records when, from which schema, for
  how many units. A schema 1 store failing SQLite's check is refused: nothing in it can be
  verified or salvaged.
- Schemas 1 and 2 had no config history: the one config becomes its first row.
- Missing tables are added.

Only the writer upgrades (`upgrade`, called when `oodeval.study.store.result_store.ResultStore`
opens with ``create=True``); readers read an older store as it is.
"""

from __future__ import annotations

import json

from oodeval._time import utc_timestamp
from oodeval.study.store._integrity import text_checksum, unit_checksum
from oodeval.study.store.database import StoreFile
from oodeval.study.store.history import append_config, history_missing
from oodeval.study.store.records import StoreDamagedError
from oodeval.study.store.schema import (
    INTEGRITY_COLUMNS,
    RESTORE_HINT,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    TABLES,
)
from oodeval.study.store.units import read_units


def upgrade(db: StoreFile) -> None:
    """Writer only: bring an older store to this schema: add missing tables, checksums to a
    schema 1 store that passes SQLite's full integrity check, and the config history (its one
    config as the first row) to a schema 1 or 2 store. A damaged store is left alone until
    it is rebuilt."""
    if db.sqlite_check:
        if not db.has_checksums:
            raise StoreDamagedError(
                f"{db.path} fails SQLite's integrity check ({db.sqlite_check[0]}) and was "
                "written by an oodeval without checksums, so none of its units can be "
                f"verified or salvaged; {RESTORE_HINT}"
            )
        return
    with db.guard("upgrading"):
        if db.has_checksums and TABLES <= db.tables and not history_missing(db):
            return
        with db.transaction():
            for statement in SCHEMA_SQL.split(";"):
                db.execute(statement)
            db.refresh_layout()
            if not db.has_checksums:
                add_checksums(db)
                db.refresh_layout()
            study = db.study_rows()
            if history_missing(db):
                schema = study.get("schema", "1")
                append_config(db, study["config"], {}, f"migrated from schema {schema}")
            db.set_study("schema", SCHEMA_VERSION)


def add_checksums(db: StoreFile) -> None:
    """Add the integrity record to every unit of a schema 1 store; `upgrade` calls it only
    after SQLite's full integrity check passed (the writer runs it on open)."""
    units = read_units(db, legacy=True)
    for column in INTEGRITY_COLUMNS:
        kind = "TEXT" if column == "checksum" else "INTEGER"
        db.execute(f"ALTER TABLE units ADD COLUMN {column} {kind}")
    for unit in units:
        if unit.damage is None:  # unreadable JSON keeps no checksum: damaged from now on
            db.execute(
                "UPDATE units SET n_results=?, n_checkpoints=?, checksum=? WHERE unit_key=?",
                (
                    len(unit.results),
                    len(unit.checkpoints),
                    unit_checksum(unit.row, unit.results, unit.checkpoints),
                    unit.key,
                ),
            )
    study = db.study_rows()
    if "config" in study:
        db.set_study("config_sha256", text_checksum(study["config"]))
    db.set_study(
        "migrated",
        json.dumps(
            {"at": utc_timestamp(), "from_schema": study.get("schema", "1"), "units": len(units)}
        ),
    )
