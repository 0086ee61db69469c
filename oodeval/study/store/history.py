"""The config history of a study store: the current config, every config the study was run (or
merged) with, and the rule that a new config may only grow the study.

The ``study`` table holds the current config and its checksum; the ``configs`` table one row
per config recorded (`ConfigRecord`), each with a SHA-256 of the row (`history_checksum`), the
last being the current config. A new config is compared with the current one and with every
earlier one (`growth_changes`, after `oodeval.study.config.config_changes`): one that makes
stored units incomparable is refused. Everything here works on a
`oodeval.study.store.database.StoreFile`; the writer's entry point is
`oodeval.study.store.result_store.ResultStore.bind_config`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from oodeval._time import utc_timestamp
from oodeval.errors import OodevalError
from oodeval.study.config import ConfigChanges, config_changes, differing_keys
from oodeval.study.store._integrity import text_checksum
from oodeval.study.store.database import StoreFile
from oodeval.study.store.records import ConfigRecord, StoreDamagedError
from oodeval.study.store.schema import CONFIG_COLUMNS, RESTORE_HINT, SCHEMA_VERSION


def read_config(db: StoreFile) -> tuple[dict[str, Any] | None, str | None]:
    """The current config (None for a fresh store) and what is wrong with it (None when it
    matches its checksum and is a readable table)."""
    study = db.study_rows()
    text = study.get("config")
    if text is None:
        return None, None
    expected = study.get("config_sha256")
    if (expected is None and db.has_checksums) or (
        expected is not None and expected != text_checksum(text)
    ):
        return None, "its study config does not match its checksum (damaged)"
    try:
        config = json.loads(text)
    except ValueError:
        return None, "its study config is not readable JSON (damaged)"
    if not isinstance(config, dict):
        return None, "its study config is not a table (damaged)"
    return config, None


def current_config(db: StoreFile) -> dict[str, Any] | None:
    """The current config (checked against its checksum), or None for a fresh store.

    Raises StoreDamagedError when it is damaged or missing beside units.
    """
    with db.guard("reading the study config"):
        config, problem = read_config(db)
    if problem:
        raise StoreDamagedError(f"{db.path}: {problem}; {RESTORE_HINT}")
    return config


def read_history(db: StoreFile) -> tuple[list[ConfigRecord], dict[int, str]]:
    """The rows of the config history that verify, and {seq: what is wrong} of the others.

    A store of schema 1 or 2 (no ``configs`` rows) reads as the one config it holds.
    """
    config, problem = read_config(db)
    if problem or config is None:
        return [], {}
    rows = []
    if "configs" in db.tables:
        rows = db.execute(
            f"SELECT {', '.join(CONFIG_COLUMNS)}, checksum FROM configs ORDER BY seq"
        ).fetchall()
    if not rows:
        legacy = f"schema {db.study_rows().get('schema', '1')}"
        return [ConfigRecord(1, config, {}, "", "", f"recorded by a store of {legacy}")], {}
    records, damaged = [], {}
    for row in rows:
        if history_checksum(row[:-1]) != row[-1]:
            damaged[row[0]] = "fails its checksum"
            continue
        try:
            seq, text, names, recorded, version, origin = row[:-1]
            record = ConfigRecord(
                int(seq), json.loads(text), dict(json.loads(names)), recorded, version, origin
            )
        except (TypeError, ValueError):
            damaged[row[0]] = "is not readable"
            continue
        records.append(record)
    if records and row[0] == records[-1].seq and records[-1].config != config:
        damaged[row[0]] = "is not the current config"
        records.pop()
    return records, damaged


def history_missing(db: StoreFile) -> bool:
    """True when the store has a config but no config history (written by an oodeval before
    schema 3); a damaged config is left for the readers to report."""
    config, problem = read_config(db)
    if config is None or problem:
        return False
    if "configs" not in db.tables:
        return True
    return db.execute("SELECT 1 FROM configs LIMIT 1").fetchone() is None


def history_checksum(row: Sequence[Any]) -> str:
    """SHA-256 of a ``configs`` row (`CONFIG_COLUMNS` order): the canonical JSON of its values.

    >>> len(history_checksum((1, "{}", "{}", "", "0.1", "run")))
    64
    """
    return text_checksum(json.dumps(list(row), ensure_ascii=False))


def config_row(seq: int, text: str, names: str, origin: str) -> tuple:
    """A new ``configs`` row (`CONFIG_COLUMNS` order, then its checksum), recorded now."""
    from oodeval import __version__

    row = (seq, text, names, utc_timestamp(), __version__, origin)
    return (*row, history_checksum(row))


def set_current(db: StoreFile, text: str) -> None:
    """Make `text` the current config (inside the caller's transaction)."""
    db.set_study("config", text)
    db.set_study("config_sha256", text_checksum(text))


def append_config(db: StoreFile, text: str, names: Mapping[str, str], origin: str) -> None:
    """Add `text` as the next row of the config history (inside the caller's transaction)."""
    (last,) = db.execute("SELECT COALESCE(MAX(seq), 0) FROM configs").fetchone()
    row = config_row(int(last) + 1, text, json.dumps(dict(names), sort_keys=True), origin)
    db.execute(
        f"INSERT INTO configs({', '.join(CONFIG_COLUMNS)}, checksum) VALUES (?, ?, ?, ?, ?, ?, ?)",
        row,
    )


def rewrite_names(db: StoreFile, record: ConfigRecord, names: Mapping[str, str]) -> None:
    """Record the scenario names of `record`'s config (a migrated store's, once known)."""
    (text,) = db.execute("SELECT config FROM configs WHERE seq=?", (record.seq,)).fetchone()
    row = (
        record.seq,
        text,
        json.dumps(dict(names), sort_keys=True),
        record.recorded,
        record.oodeval,
        record.origin,
    )
    db.execute(
        "UPDATE configs SET scenario_names=?, checksum=? WHERE seq=?",
        (row[2], history_checksum(row), record.seq),
    )


def record_first_config(db: StoreFile, text: str, names: Mapping[str, str], origin: str) -> None:
    """Record the config of a fresh store; refused when the store holds units (damaged)."""
    with db.guard("reading the units"):
        has_units = db.execute("SELECT 1 FROM units LIMIT 1").fetchone() is not None
    if has_units:
        raise StoreDamagedError(
            f"{db.path} holds units but no study config (damaged), so its study "
            f"cannot be told; {RESTORE_HINT}"
        )
    with db.guard("recording the config"), db.transaction():
        set_current(db, text)
        append_config(db, text, names, origin)
        db.set_study("schema", SCHEMA_VERSION)


def growth_changes(
    stored: Mapping[str, Any],
    config: Mapping[str, Any],
    history: Sequence[ConfigRecord],
    names: Mapping[str, str],
    directory: Path,
) -> ConfigChanges:
    """How `config` changes the `stored` one; OodevalError (the refusal) when it would make
    stored units incomparable, with the current config or with an earlier one of `history`.

    `names` ({scenario_key: built name}) names `config`'s scenarios; with the names kept for
    earlier configs it tells a re-parametrised scenario from a new one.
    """
    known: dict[str, str] = {}
    for record in history:
        known.update(record.scenario_names)
    known.update(names)
    changes = config_changes(stored, config, scenario_names=known)
    # earlier configs too: the units of a removed algorithm (scenario) stay in the store and
    # come back when it is added again, so its hyperparameters (parameters) must not change.
    # Every other key equals the current config's in every earlier config (each bind checked
    # it), so only these can differ from an earlier config and not from the current one.
    incompatible = {key: (key, old, new) for key, old, new in changes.incompatible}
    for record in reversed(history[:-1]):
        for key, old, new in config_changes(
            record.config, config, scenario_names=known
        ).incompatible:
            if key.startswith(("hparams", "scenarios[")):
                incompatible.setdefault(key, (key, old, new))
    if incompatible:
        refused = dataclasses.replace(changes, incompatible=tuple(incompatible.values()))
        raise OodevalError(refused.refusal(directory))
    return changes


def config_differs(stored: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """True when `config` must become a new row of the history: it differs from `stored`
    (`oodeval.study.config.differing_keys`: the same data or import at another path is no
    difference), or records the identity of its data where `stored` (older) has none."""
    identified = not stored.get("source_identity") and bool(config.get("source_identity"))
    return bool(differing_keys(stored, config)) or identified
