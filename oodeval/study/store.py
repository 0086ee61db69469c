"""The SQLite results store of a study: one file, one writer, crash-safe, verified on every read.

Layout (``DIR/results.sqlite``, schema version 3):

- ``study(key, value)``: the *current* study config as canonical JSON (``key = 'config'``), its
  SHA-256 (``config_sha256``) and the schema version; ``migrated`` / ``rebuilt`` record upgrades
  and repairs.
- ``configs``: the history of the configs the study was run (or merged) with, one row each:
  ``seq`` (1, 2, ...), the config JSON, the built scenario name of each of its scenario specs
  (``scenario_names``, {`oodeval.study.config.scenario_key`: name}), when and by which oodeval
  it was recorded, its ``origin`` (``run``, ``merge of ...``, ``migrated from schema N``) and a
  SHA-256 of the row. The last row is the current config (the ``study`` table's copy). A config
  may only grow the study (`oodeval.study.config.config_changes`): new algorithms, seeds,
  scenarios and imports run, stored units are kept; a change that makes stored units
  incomparable is refused. Readers (`load_study`) use the units of the current config only;
  units of removed values stay in the store and come back when the values are added again.
- ``units``: one row per finished unit (scenario, algorithm, seed) with its hyperparameters,
  steps, model, ``status`` (``done`` or ``failed``), failure reason, timings, library versions,
  start/finish times (UTC, ISO 8601), and its integrity record: ``n_results``,
  ``n_checkpoints`` and ``checksum`` (`oodeval.study.integrity.unit_checksum` of the units row
  and all its rows).
- ``results``: one row per (unit, fold, environment) with the error rate and the sample count.
  ``fold`` is the held-out given environment of a leave-one-out model, or ``all`` for the model
  trained on every given environment (evaluated on every environment of E_all).
- ``checkpoints``: one row per (unit, fold, step): every checkpoint of each leave-one-out model
  with its training-domain validation accuracy, its accuracy on the held-out environment's "in"
  part (``test_acc``) and "out" part (``oracle_val_acc``), as fractions (see
  `oodeval.training.CheckpointRow`). Empty for backends that do not record checkpoints.
- ``quarantine``: units (and stray rows) a writer moved aside because they failed verification,
  with the reason, the time, and everything that could be read of them as JSON.

A unit's rows, its checkpoints, its status and its checksum are written in ONE transaction (WAL
journal, ``synchronous=FULL``), so a process killed at any moment leaves either the whole unit or
none of it, and primary keys make a second copy of a row impossible. One process writes: a writer
(``ResultStore(DIR, create=True)``) holds the folder's lock (`oodeval.study.lock`) while open.
Readers open the file read-only and never wait for the writer.

Every reader runs SQLite's quick check on open, the writer its full integrity check (which also
compares every index with its table); every read counts and hashes each unit's rows again. A
reader refuses to hand out numbers from a store with damaged units (`load_study`), unless told to
leave them out; a writer moves damaged units aside (`ResultStore.move_damaged_aside`) so they run
again, and rebuilds a store that fails SQLite's check from the units that verify, keeping the
damaged file beside it. An empty or unreadable file is refused, never started over.

Stores of schema 1 (no checksums) are read as *unverified* (every output says so); the first
writer to open one checks it with SQLite's full integrity check and then adds the checksums.
Stores of schema 1 and 2 (no ``configs`` table) are read as a history of their one config; the
first writer adds the table with that config as its first row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sqlite3
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from oodeval.errors import OodevalError
from oodeval.study.config import (
    IMPORT_VERSION_PREFIX,
    ConfigChanges,
    config_changes,
    differing_keys,
    scenario_key,
)
from oodeval.study.integrity import (
    NAMED_IN_LINE,
    StoreHealth,
    named,
    printable,
    text_checksum,
    unit_checksum,
    unit_damage,
)
from oodeval.study.lock import StudyLock

STORE_NAME = "results.sqlite"
SCHEMA_VERSION = "3"
ALL_FOLD = "all"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS study (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS units (
    unit_key TEXT PRIMARY KEY,
    scenario TEXT NOT NULL,
    family TEXT NOT NULL,
    params TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    seed INTEGER NOT NULL,
    hparams TEXT NOT NULL,
    steps INTEGER NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    failure TEXT,
    timings TEXT NOT NULL,
    versions TEXT NOT NULL,
    started TEXT,
    finished TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    n_results INTEGER,
    n_checkpoints INTEGER,
    checksum TEXT
);
CREATE TABLE IF NOT EXISTS results (
    unit_key TEXT NOT NULL REFERENCES units(unit_key),
    fold TEXT NOT NULL,
    environment TEXT NOT NULL,
    error REAL NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (unit_key, fold, environment)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    unit_key TEXT NOT NULL REFERENCES units(unit_key),
    fold TEXT NOT NULL,
    step INTEGER NOT NULL,
    train_val_acc REAL NOT NULL,
    test_acc REAL NOT NULL,
    oracle_val_acc REAL NOT NULL,
    PRIMARY KEY (unit_key, fold, step)
);
CREATE TABLE IF NOT EXISTS quarantine (
    unit_key TEXT,
    moved TEXT NOT NULL,
    reason TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS configs (
    seq INTEGER PRIMARY KEY,
    config TEXT NOT NULL,
    scenario_names TEXT NOT NULL,
    recorded TEXT NOT NULL,
    oodeval TEXT NOT NULL,
    origin TEXT NOT NULL,
    checksum TEXT NOT NULL
)
"""

UNIT_COLUMNS = (
    "unit_key",
    "scenario",
    "family",
    "params",
    "algorithm",
    "seed",
    "hparams",
    "steps",
    "model",
    "status",
    "failure",
    "timings",
    "versions",
    "started",
    "finished",
    "attempts",
)
#: The integrity record of a unit (schema 2), after `UNIT_COLUMNS` in the ``units`` table.
INTEGRITY_COLUMNS = ("n_results", "n_checkpoints", "checksum")
RESULT_COLUMNS = ("fold", "environment", "error", "count")
CHECKPOINT_COLUMNS = ("fold", "step", "train_val_acc", "test_acc", "oracle_val_acc")
CONFIG_COLUMNS = ("seq", "config", "scenario_names", "recorded", "oodeval", "origin")
#: The tables a store of the current schema has (`ResultStore` adds missing ones on upgrade).
_TABLES = {"study", "units", "results", "checkpoints", "quarantine", "configs"}
_JSON_COLUMNS = ("params", "hparams", "timings", "versions")

_RESTORE = "restore it from a backup, or start the study in a new folder"


class StoreDamagedError(OodevalError):
    """The store (or units in it) failed SQLite's check or its checksums; the message says how."""


def unit_key(scenario: str, algorithm: str, seed: int) -> str:
    """The primary key of a unit: ``"<scenario>|<algorithm>|seed=<seed>"``.

    >>> unit_key("sr-cmnist/ratio=3:1/scale=1", "ERM", 0)
    'sr-cmnist/ratio=3:1/scale=1|ERM|seed=0'
    """
    return f"{scenario}|{algorithm}|seed={int(seed)}"


@dataclass(frozen=True)
class UnitRecord:
    """Everything the ``units`` table keeps about one unit (JSON fields as Python objects)."""

    scenario: str
    family: str
    params: Mapping[str, Any]
    algorithm: str
    seed: int
    hparams: Mapping[str, Any]
    steps: int
    model: str
    status: str
    failure: str | None = None
    timings: Mapping[str, float] | None = None
    versions: Mapping[str, str] | None = None
    started: str | None = None
    finished: str | None = None
    #: (fold, step, train_val_acc, test_acc, oracle_val_acc) per checkpoint of each LOO model;
    #: written to the ``checkpoints`` table with the unit, not a column of ``units``
    checkpoints: Sequence[Sequence[Any]] = field(default=(), repr=False, compare=False)

    @property
    def key(self) -> str:
        return unit_key(self.scenario, self.algorithm, self.seed)


@dataclass
class StoredUnit:
    """One unit as read back: its ``units`` row, its rows, and the verdict on them.

    ``damage`` is the reason the unit fails verification (None when it verifies or has no
    checksum to verify); ``verified`` is True when its rows match its checksum.
    """

    row: tuple
    rowid: int | None = None
    integrity: tuple = ()
    results: list[tuple] = field(default_factory=list)
    checkpoints: list[tuple] = field(default_factory=list)
    damage: str | None = None
    verified: bool = False
    decoded: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Any:
        return self.row[0]

    def value(self, column: str) -> Any:
        """The stored value of one of `UNIT_COLUMNS` (JSON text for the JSON columns)."""
        return self.row[UNIT_COLUMNS.index(column)]

    def as_json(self, columns: Sequence[str]) -> str:
        """Everything read of the unit, for the quarantine table."""
        return json.dumps(
            {
                "unit": dict(zip(columns, self.row + self.integrity, strict=False)),
                "results": [list(r) for r in self.results],
                "checkpoints": [list(r) for r in self.checkpoints],
            },
            default=repr,
        )


@dataclass(frozen=True)
class ConfigRecord:
    """One row of a store's config history (the ``configs`` table), JSON fields decoded.

    ``scenario_names`` maps `oodeval.study.config.scenario_key` of each scenario spec of
    ``config`` to the name its built scenario has (empty for a config recorded before names
    were kept: a store migrated from schema 1 or 2).
    """

    seq: int
    config: dict[str, Any]
    scenario_names: dict[str, str]
    recorded: str
    oodeval: str
    origin: str

    def line(self) -> str:
        """'config 2 (run, 2025-01-01T00:00:00+00:00, oodeval 0.1): 3 algorithms x ...'"""
        c = self.config
        grid = " x ".join(
            f"{len(c.get(k) or [])} {k if len(c.get(k) or []) != 1 else k[:-1]}"
            for k in ("scenarios", "algorithms", "seeds")
        )
        return f"config {self.seq} ({self.origin}, {self.recorded}, oodeval {self.oodeval}): {grid}"


@dataclass(frozen=True)
class UnitScope:
    """The units a config asks for: its scenarios (by built name) x algorithms x seeds.

    ``scenarios`` is None when the built names of the config's scenarios are not all known (a
    store recorded before they were kept): then every stored scenario counts as the config's.
    """

    scenarios: tuple[str, ...] | None
    algorithms: tuple[str, ...]
    seeds: tuple[int, ...]

    @classmethod
    def of(cls, config: Mapping[str, Any], names: Mapping[str, str]) -> UnitScope:
        """The scope of a stored `config` whose specs built the scenarios `names`."""
        keys = [scenario_key(_spec(s)) for s in config.get("scenarios") or ()]
        known = all(k in names for k in keys)
        return cls(
            tuple(names[k] for k in keys) if known else None,
            tuple(str(a) for a in config.get("algorithms") or ()),
            tuple(int(x) for x in config.get("seeds") or ()),
        )

    def why_outside(self, scenario: str, algorithm: str, seed: int) -> str | None:
        """Which axis leaves the unit out ('algorithm IRM'), or None when the config has it."""
        if algorithm not in self.algorithms:
            return f"algorithm {algorithm}"
        if int(seed) not in self.seeds:
            return f"seed {int(seed)}"
        if self.scenarios is not None and scenario not in self.scenarios:
            return f"scenario {scenario}"
        return None

    def planned_keys(self) -> set[str] | None:
        """Every unit key of the grid, or None when the scenario names are not known."""
        if self.scenarios is None:
            return None
        return {
            unit_key(s, a, seed)
            for s in self.scenarios
            for a in self.algorithms
            for seed in self.seeds
        }


def _spec(spec: Any) -> dict[str, Any]:
    return {"family": spec} if isinstance(spec, str) else dict(spec)


@dataclass
class StoreContents:
    """What one verified read of a store found: the config, every unit, the health verdict."""

    config: dict[str, Any] | None
    units: list[StoredUnit]
    health: StoreHealth
    history: list[ConfigRecord] = field(default_factory=list)

    @property
    def usable(self) -> list[StoredUnit]:
        """Units whose numbers may be used: verified, or unverified (schema 1) but readable."""
        return [u for u in self.units if u.damage is None]

    @property
    def scenario_names(self) -> dict[str, str]:
        """The built scenario names of the current config's specs (empty when not recorded)."""
        last = self.history[-1] if self.history else None
        return dict(last.scenario_names) if last is not None and last.config == self.config else {}

    def scope(self) -> UnitScope:
        """The units the current config asks for."""
        return UnitScope.of(self.config or {}, self.scenario_names)

    def in_config(self) -> tuple[StoreContents, dict[str, str]]:
        """These contents restricted to the units of the current config, and {unit key: the
        axis that leaves it out} of the usable units left out (kept in the store)."""
        scope = self.scope()
        at = {c: i for i, c in enumerate(UNIT_COLUMNS)}
        kept, outside = [], {}
        for unit in self.units:
            row = unit.row
            try:
                why = scope.why_outside(row[at["scenario"]], row[at["algorithm"]], row[at["seed"]])
            except (TypeError, ValueError):
                why = None  # a damaged row: verification names it
            if why is None:
                kept.append(unit)
            elif unit.damage is None:
                outside[printable(unit.key)] = why
        return StoreContents(self.config, kept, self.health, self.history), outside

    def units_frame(self) -> pd.DataFrame:
        """The usable units, JSON columns decoded, sorted by unit key."""
        frame = pd.DataFrame.from_records(
            [u.row[: len(UNIT_COLUMNS)] for u in self.usable], columns=list(UNIT_COLUMNS)
        )
        for column in _JSON_COLUMNS:
            frame[column] = [u.decoded[column] for u in self.usable]
        return frame

    def results_frame(self) -> pd.DataFrame:
        """The usable units' result rows sorted by (unit_key, fold, environment)."""
        rows = [(u.key, *r) for u in self.usable for r in u.results]
        return pd.DataFrame.from_records(rows, columns=["unit_key", *RESULT_COLUMNS])

    def checkpoints_frame(self) -> pd.DataFrame:
        """The checkpoint rows of usable ``done`` units with their scenario, algorithm, seed and
        hparams (JSON text), sorted by (unit_key, fold, step)."""
        at = {c: i for i, c in enumerate(UNIT_COLUMNS)}
        rows = [
            (
                u.row[at["scenario"]],
                u.row[at["algorithm"]],
                u.row[at["seed"]],
                u.row[at["hparams"]],
                u.key,
                *c,
            )
            for u in self.usable
            if u.row[at["status"]] == "done"
            for c in u.checkpoints
        ]
        columns = ["scenario", "algorithm", "seed", "hparams", "unit_key", *CHECKPOINT_COLUMNS]
        return pd.DataFrame.from_records(rows, columns=columns)


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


class ResultStore:
    """Access to ``DIR/results.sqlite``: a read-only reader, or the one writer of a study.

    Parameters
    ----------
    directory : the study folder (created when ``create=True``).
    create : open as the writer: take the folder's lock (`oodeval.study.lock`; another writer
        is refused at once), create the folder and the store when missing, and bring a schema 1
        store up to date. Otherwise the store is opened read-only and a missing one is an error.
    full_check : run SQLite's full ``integrity_check`` instead of its ``quick_check`` on open
        (a writer always does).
    """

    def __init__(
        self, directory: str | Path, *, create: bool = False, full_check: bool = False
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STORE_NAME
        self.writer = create
        self.sqlite_check: list[str] = []
        self.check_kind = "integrity check" if full_check or create else "quick check"
        self._conn: sqlite3.Connection | None = None
        self._lock: StudyLock | None = None
        #: rows of the config history `bind_config` moved aside (damaged), for `SetAside`
        self.history_set_aside = 0
        if self.path.exists() and not self.path.is_file():
            raise OodevalError(f"{self.path} is not a file; the study store must be one")
        if not self.path.exists() and not create:
            raise OodevalError(
                f"no study in {self.directory} ({STORE_NAME} missing); "
                "start one with `oodeval study run`"
            )
        try:
            if create:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._lock = StudyLock(self.directory).acquire()
                if not self.path.exists():
                    _create_store(self.path)
            self._open()
            if create:
                self._upgrade()
        except BaseException:
            self.close()
            raise

    # -- opening ----------------------------------------------------------------------------
    def _open(self) -> None:
        if self.path.stat().st_size == 0:
            raise StoreDamagedError(
                f"{self.path} is empty (0 bytes): it holds no study and is never started over "
                f"silently; restore it from a backup, or delete it to run the study again in "
                f"{self.directory}"
            )
        mode = "rw" if self.writer else "ro"
        try:
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode={mode}",
                uri=True,
                isolation_level=None,
                timeout=30.0,
            )
        except sqlite3.Error as exc:
            raise _unopenable(self.path, exc) from None
        conn.text_factory = _decode_text
        self._conn = conn
        try:
            if self.writer:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("PRAGMA foreign_keys=ON")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            self._columns = [r[1] for r in conn.execute("PRAGMA table_info(units)")]
        except sqlite3.DatabaseError as exc:
            raise _unopenable(self.path, exc) from None
        missing = {"study", "units", "results"} - tables
        if missing:
            raise StoreDamagedError(
                f"{self.path} is not an oodeval study store (tables missing: "
                f"{', '.join(sorted(missing))}); {_RESTORE}"
            )
        self._tables = tables
        pragma = "integrity_check" if self.check_kind == "integrity check" else "quick_check"
        self.sqlite_check = _sqlite_check(conn, pragma)

    @property
    def has_checksums(self) -> bool:
        """False for a schema 1 store (written before units carried checksums)."""
        return "checksum" in self._columns

    def _upgrade(self) -> None:
        """Writer only: bring an older store to this schema: add missing tables, checksums to a
        schema 1 store that passes SQLite's full integrity check, and the config history (its one
        config as the first row) to a schema 1 or 2 store. A damaged store is left alone until
        it is rebuilt."""
        if self.sqlite_check:
            if not self.has_checksums:
                raise StoreDamagedError(
                    f"{self.path} fails SQLite's integrity check ({self.sqlite_check[0]}) and was "
                    "written by an oodeval without checksums, so none of its units can be "
                    f"verified or salvaged; {_RESTORE}"
                )
            return
        with self._guard("upgrading"):
            if self.has_checksums and _TABLES <= self._tables and not self._history_missing():
                return
            with self._transaction():
                for statement in _SCHEMA.split(";"):
                    self._execute(statement)
                self._tables = self._tables | _TABLES
                if not self.has_checksums:
                    self._migrate()
                self._columns = [r[1] for r in self._execute("PRAGMA table_info(units)")]
                study = self._study_rows()
                if self._history_missing():
                    schema = study.get("schema", "1")
                    self._append_config(study["config"], {}, f"migrated from schema {schema}")
                self._set_study("schema", SCHEMA_VERSION)

    def _history_missing(self) -> bool:
        """True when the store has a config but no config history (written by an oodeval before
        schema 3); a damaged config is left for the readers to report."""
        config, problem = self._config()
        if config is None or problem:
            return False
        if "configs" not in self._tables:
            return True
        return self._execute("SELECT 1 FROM configs LIMIT 1").fetchone() is None

    def _migrate(self) -> None:
        """Add the integrity record to every unit of a schema 1 store; `_upgrade` calls it only
        after SQLite's full integrity check passed (the writer runs it on open)."""
        units = self._read_units(legacy=True)
        for column in INTEGRITY_COLUMNS:
            kind = "TEXT" if column == "checksum" else "INTEGER"
            self._execute(f"ALTER TABLE units ADD COLUMN {column} {kind}")
        for unit in units:
            if unit.damage is None:  # unreadable JSON keeps no checksum: damaged from now on
                self._execute(
                    "UPDATE units SET n_results=?, n_checkpoints=?, checksum=? WHERE unit_key=?",
                    (
                        len(unit.results),
                        len(unit.checkpoints),
                        unit_checksum(unit.row, unit.results, unit.checkpoints),
                        unit.key,
                    ),
                )
        study = self._study_rows()
        if "config" in study:
            self._set_study("config_sha256", text_checksum(study["config"]))
        self._set_study(
            "migrated",
            json.dumps(
                {"at": _now(), "from_schema": study.get("schema", "1"), "units": len(units)}
            ),
        )

    # -- the config -----------------------------------------------------------------------
    def stored_config(self) -> dict[str, Any] | None:
        """The config the store was created with (checked against its checksum), or None for a
        fresh store. Raises StoreDamagedError when it is damaged or missing beside units."""
        with self._guard("reading the study config"):
            config, problem = self._config()
        if problem:
            raise StoreDamagedError(f"{self.path}: {problem}; {_RESTORE}")
        return config

    def _config(self) -> tuple[dict[str, Any] | None, str | None]:
        study = self._study_rows()
        text = study.get("config")
        if text is None:
            return None, None
        expected = study.get("config_sha256")
        if (expected is None and self.has_checksums) or (
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

    def bind_config(
        self,
        config: Mapping[str, Any],
        *,
        scenario_names: Mapping[str, str] | None = None,
        origin: str = "run",
    ) -> ConfigChanges | None:
        """Record `config` in a fresh store, or make it the current config of a stored study it
        only grows (`oodeval.study.config.config_changes`); return the changes (None for a fresh
        store).

        `scenario_names` ({scenario_key: built name}) names the scenarios of `config`'s specs;
        it is kept with the config, and with the names kept for earlier configs it tells a
        re-parametrised scenario from a new one. A config that makes stored units incomparable
        is refused (OodevalError naming the keys and the way out) and nothing is written. A
        config that differs from the current one (`oodeval.study.config.differing_keys`: the
        same data or import at another path is no difference) becomes a new row of the history.
        """
        names = {str(k): str(v) for k, v in (scenario_names or {}).items()}
        text = json.dumps(dict(config), sort_keys=True)
        stored = self.stored_config()
        if stored is None:
            with self._guard("reading the units"):
                has_units = self._execute("SELECT 1 FROM units LIMIT 1").fetchone() is not None
            if has_units:
                raise StoreDamagedError(
                    f"{self.path} holds units but no study config (damaged), so its study "
                    f"cannot be told; {_RESTORE}"
                )
            with self._guard("recording the config"), self._transaction():
                self._set_current(text)
                self._append_config(text, names, origin)
                self._set_study("schema", SCHEMA_VERSION)
            return None
        with self._guard("reading the config history"):
            history, bad_rows = self._read_history()
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
            raise OodevalError(refused.refusal(self.directory))
        # a store written before identities existed gets the identity of its data recorded
        identified = not stored.get("source_identity") and bool(config.get("source_identity"))
        differs = bool(differing_keys(stored, config)) or identified
        with self._guard("recording the config"):
            if "configs" not in self._tables:  # an old store failing SQLite's check: its rebuild
                if differs:  # adds the history (`move_damaged_aside`)
                    with self._transaction():
                        self._set_current(text)
            elif differs or bad_rows or (names and names != history[-1].scenario_names):
                with self._transaction():
                    # damaged rows leave first: they must never pass for earlier configs
                    self._set_history_aside(bad_rows, history, stored)
                    self.history_set_aside += len(bad_rows)
                    if differs:
                        self._set_current(text)
                        self._append_config(text, names, origin)
                    else:  # the names of a migrated store's config, once known
                        self._rewrite_names(self._read_history()[0][-1], names)
        return changes

    def config_history(self) -> list[ConfigRecord]:
        """The configs the study was run with, oldest first; the last is the current one unless
        its row was damaged. Rows that fail their checksum are left out (`read` names them in
        ``health.history_damage``; a writer sets them aside). A store of schema 1 or 2 that no
        writer upgraded yet reads as the one config it holds, its scenario names unknown.
        """
        with self._guard("reading the config history"):
            return self._read_history()[0]

    def _read_history(self) -> tuple[list[ConfigRecord], dict[int, str]]:
        """The rows of the config history that verify, and {seq: what is wrong} of the others."""
        config, problem = self._config()
        if problem or config is None:
            return [], {}
        rows = []
        if "configs" in self._tables:
            rows = self._execute(
                f"SELECT {', '.join(CONFIG_COLUMNS)}, checksum FROM configs ORDER BY seq"
            ).fetchall()
        if not rows:
            study = self._study_rows()
            legacy = f"schema {study.get('schema', '1')}"
            return [ConfigRecord(1, config, {}, "", "", f"recorded by a store of {legacy}")], {}
        records, damaged = [], {}
        for row in rows:
            if _history_checksum(row[:-1]) != row[-1]:
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

    def _set_current(self, text: str) -> None:
        self._set_study("config", text)
        self._set_study("config_sha256", text_checksum(text))

    def _append_config(self, text: str, names: Mapping[str, str], origin: str) -> None:
        """Add `text` as the next row of the config history (inside the caller's transaction)."""
        from oodeval import __version__

        (last,) = self._execute("SELECT COALESCE(MAX(seq), 0) FROM configs").fetchone()
        row = (
            int(last) + 1,
            text,
            json.dumps(dict(names), sort_keys=True),
            _now(),
            __version__,
            origin,
        )
        self._execute(
            f"INSERT INTO configs({', '.join(CONFIG_COLUMNS)}, checksum) VALUES "
            "(?, ?, ?, ?, ?, ?, ?)",
            (*row, _history_checksum(row)),
        )

    def _rewrite_names(self, record: ConfigRecord, names: Mapping[str, str]) -> None:
        (text,) = self._execute("SELECT config FROM configs WHERE seq=?", (record.seq,)).fetchone()
        row = (
            record.seq,
            text,
            json.dumps(dict(names), sort_keys=True),
            record.recorded,
            record.oodeval,
            record.origin,
        )
        self._execute(
            "UPDATE configs SET scenario_names=?, checksum=? WHERE seq=?",
            (row[2], _history_checksum(row), record.seq),
        )

    # -- units --------------------------------------------------------------------------------
    def statuses(self) -> dict[str, str]:
        """{unit_key: status} of every recorded unit (as stored; see `read` for verification)."""
        with self._guard("reading unit statuses"):
            return dict(self._execute("SELECT unit_key, status FROM units").fetchall())

    def record_unit(self, record: UnitRecord, rows: Iterable[Sequence[Any]] = ()) -> None:
        """Write a unit's status, its result rows (fold, environment, error, count), its
        checkpoint records (``record.checkpoints``) and its checksum atomically.

        A unit already ``done`` is never rewritten (its rows stay as they are); a ``failed`` unit
        is replaced, with its attempt count increased. Two rows with the same (fold, environment)
        or (fold, step) are refused (OodevalError) and nothing of the unit is written.
        """
        self._require_writable()
        # +0.0 stores -0.0 as 0.0, which is what SQLite returns for it (the checksum is exact)
        rows = [(str(f), str(e), float(err) + 0.0, int(c)) for f, e, err, c in rows]
        checkpoints = [
            (str(f), int(s), float(v) + 0.0, float(t) + 0.0, float(o) + 0.0)
            for f, s, v, t, o in record.checkpoints
        ]
        _refuse_duplicates(record.key, [r[:2] for r in rows], "(fold, environment)")
        _refuse_duplicates(record.key, [c[:2] for c in checkpoints], "(fold, step)")
        key = record.key
        with self._guard(f"recording unit {key}"), self._transaction():
            prior = self._execute(
                "SELECT status, attempts FROM units WHERE unit_key=?", (key,)
            ).fetchone()
            if prior is not None and prior[0] == "done":
                return
            attempts = 1 if prior is None else int(prior[1]) + 1
            self._delete_unit(key)
            values = _unit_values(record, attempts)
            columns = UNIT_COLUMNS + INTEGRITY_COLUMNS
            self._execute(
                f"INSERT INTO units({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                (*values, len(rows), len(checkpoints), unit_checksum(values, rows, checkpoints)),
            )
            self._insert_rows(key, rows, checkpoints)

    def adopt_unit(self, unit: StoredUnit) -> bool:
        """Copy a verified unit read from another store, its rows exactly as stored (checksum,
        attempts and time stamps included), in one transaction. A ``failed`` unit of the same key
        is replaced; a ``done`` one never is: then nothing is written and False is returned."""
        self._require_writable()
        if unit.damage is not None or not unit.verified:
            raise OodevalError(f"unit {printable(unit.key)} is not verified; it cannot be copied")
        key = unit.key
        columns = UNIT_COLUMNS + INTEGRITY_COLUMNS
        with self._guard(f"copying unit {printable(key)}"), self._transaction():
            prior = self._execute("SELECT status FROM units WHERE unit_key=?", (key,)).fetchone()
            if prior is not None and prior[0] == "done":
                return False
            self._delete_unit(key)
            self._execute(
                f"INSERT INTO units({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                unit.row + unit.integrity,
            )
            self._insert_rows(key, unit.results, unit.checkpoints)
        return True

    def _insert_rows(self, key: Any, rows: Sequence[Sequence], checkpoints: Sequence[Sequence]):
        self._conn.executemany(
            f"INSERT INTO results(unit_key, {', '.join(RESULT_COLUMNS)}) VALUES (?, ?, ?, ?, ?)",
            [(key, *row) for row in rows],
        )
        self._conn.executemany(
            f"INSERT INTO checkpoints(unit_key, {', '.join(CHECKPOINT_COLUMNS)}) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(key, *row) for row in checkpoints],
        )

    def _delete_unit(self, key: Any, rowid: int | None = None) -> None:
        """Delete a unit's rows; its ``units`` row by `rowid` when given (its key may be
        damaged beyond matching), else by key."""
        where, param = _key_match(key)
        self._execute(f"DELETE FROM results WHERE {where}", (param,))
        if "checkpoints" in self._tables:
            self._execute(f"DELETE FROM checkpoints WHERE {where}", (param,))
        if rowid is None:
            self._execute(f"DELETE FROM units WHERE {where}", (param,))
        else:
            self._execute("DELETE FROM units WHERE rowid=?", (rowid,))

    # -- verified reads ---------------------------------------------------------------------
    def read(self) -> StoreContents:
        """Read every unit and verify it: counts and checksum of its rows (see the module doc).

        Raises StoreDamagedError only when nothing can be salvaged (the units or study table
        cannot be read); damaged units and a failed SQLite check are reported in ``health``.
        """
        health = StoreHealth(
            self.path, sqlite_check=list(self.sqlite_check), check_kind=self.check_kind
        )
        with self._guard("reading the study config"):
            config, problem = self._config()
        if problem:
            health.problems.append(problem)
        try:
            history, damaged = self._read_history()
        except sqlite3.DatabaseError as exc:
            history, damaged = [], {0: f"cannot be read ({exc})"}
        health.history_damage = {
            (f"row {printable(k)}" if k else "the table"): v for k, v in damaged.items()
        }
        units = self._read_units(legacy=not self.has_checksums)
        for unit in units:
            if unit.damage is not None:
                health.damaged[printable(unit.key)] = unit.damage
            elif unit.verified:
                health.verified += 1
            else:
                health.unverified.append(printable(unit.key))
        return StoreContents(config, units, health, history)

    def _read_units(self, *, legacy: bool) -> list[StoredUnit]:
        columns = UNIT_COLUMNS if legacy else UNIT_COLUMNS + INTEGRITY_COLUMNS
        try:
            rows = self._execute(
                f"SELECT rowid, {', '.join(columns)} FROM units ORDER BY unit_key"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreDamagedError(
                f"{self.path}: the units table cannot be read ({exc}), so no unit can be "
                f"salvaged; {_RESTORE}"
            ) from None
        return [self._read_unit(tuple(row), legacy=legacy) for row in rows]

    def _read_unit(self, row: tuple, *, legacy: bool) -> StoredUnit:
        rowid, row = row[0], row[1:]
        unit = StoredUnit(row[: len(UNIT_COLUMNS)], rowid, row[len(UNIT_COLUMNS) :])
        where, key = _key_match(unit.key)
        # the rows are decoded strictly (fast); text that is not UTF-8 makes them unreadable
        self._conn.text_factory = str
        try:
            unit.results = self._execute(
                f"SELECT {', '.join(RESULT_COLUMNS)} FROM results WHERE {where} "
                "ORDER BY fold, environment",
                (key,),
            ).fetchall()
            if "checkpoints" in self._tables:
                unit.checkpoints = self._execute(
                    f"SELECT {', '.join(CHECKPOINT_COLUMNS)} FROM checkpoints WHERE {where} "
                    "ORDER BY fold, step",
                    (key,),
                ).fetchall()
        except sqlite3.DatabaseError as exc:
            unit.damage = f"its rows cannot be read: {exc}"
            return unit
        finally:
            self._conn.text_factory = _decode_text
        if not legacy:
            unit.damage = unit_damage(unit.row, unit.integrity, unit.results, unit.checkpoints)
            unit.verified = unit.damage is None
        if unit.damage is None:
            at = {c: i for i, c in enumerate(UNIT_COLUMNS)}
            try:
                unit.decoded = {c: json.loads(unit.row[at[c]]) for c in _JSON_COLUMNS}
            except (TypeError, ValueError):
                unit.damage, unit.verified = "its metadata is not readable JSON", False
        return unit

    def _trusted(self, current_only: bool = False) -> StoreContents:
        contents = self.read()
        if not contents.health.trusted:
            raise StoreDamagedError(contents.health.refusal(option=None))
        for note in contents.health.notes():
            warnings.warn(note, StoreIntegrityWarning, stacklevel=3)
        return contents.in_config()[0] if current_only else contents

    def units_frame(self) -> pd.DataFrame:
        """The ``units`` table (verified), JSON columns decoded, sorted by unit key.

        Raises StoreDamagedError when the store or a unit in it fails verification.
        """
        return self._trusted().units_frame()

    def results_frame(self) -> pd.DataFrame:
        """The ``results`` table (verified) sorted by (unit_key, fold, environment)."""
        return self._trusted().results_frame()

    def checkpoints_frame(self, *, current_only: bool = False) -> pd.DataFrame:
        """The ``checkpoints`` table of ``done`` units (verified) joined with their scenario,
        algorithm, seed and hparams (JSON text), sorted by (unit_key, fold, step); empty when
        the store has none (or predates the table). ``current_only``: of the units of the
        current config only (`StoreContents.in_config`)."""
        return self._trusted(current_only).checkpoints_frame()

    # -- repairs (writer) -------------------------------------------------------------------
    def move_damaged_aside(self) -> SetAside:
        """Move every unit that fails verification (and rows of no stored unit) to the
        ``quarantine`` table, so a run stores them again; rebuild a store that fails SQLite's
        integrity check from its verified units first. Returns what was done."""
        self._require_writer()
        if self.sqlite_check:
            try:
                with self._guard("rebuilding the store"):
                    return self._rebuild()
            except OSError as exc:
                raise OodevalError(
                    f"cannot rebuild {self.path} ({exc.strerror or exc}); free disk space or "
                    "fix the folder's permissions, then run again"
                ) from None
        contents = self.read()
        if contents.health.problems:
            raise StoreDamagedError(f"{self.path}: {contents.health.problems[0]}; {_RESTORE}")
        damaged = [u for u in contents.units if u.damage is not None]
        with self._guard("moving damaged units aside"):
            history, bad_rows = self._read_history()
            stray = self._stray_rows({u.key for u in contents.units})
            earlier = self.history_set_aside
            if not damaged and not stray and not bad_rows:
                return SetAside(history_rows=earlier)
            with self._transaction():
                for unit in damaged:
                    self._quarantine(unit.key, unit.damage, unit.as_json(self._unit_columns()))
                    self._delete_unit(unit.key, unit.rowid)
                for key, data in stray.items():
                    self._quarantine(key, "rows of no stored unit", data)
                    self._delete_unit(key)
                self._set_history_aside(bad_rows, history, contents.config)
        units = {printable(u.key): u.damage for u in damaged}
        return SetAside(units, len(stray), history_rows=earlier + len(bad_rows))

    def _set_history_aside(
        self, bad_rows: Mapping[int, str], history: Sequence[ConfigRecord], config: Any
    ) -> None:
        """Move damaged rows of the config history to the quarantine table; record the current
        config again when its own row was among them (inside the caller's transaction)."""
        if bad_rows and (not history or history[-1].config != config):
            names = history[-1].scenario_names if history else {}
            text = self._study_rows()["config"]
            self._append_config(text, names, "recorded again (history row damaged)")
        for seq, reason in bad_rows.items():
            row = self._execute("SELECT * FROM configs WHERE seq=?", (seq,)).fetchone()
            data = json.dumps(list(row), default=repr)
            self._quarantine(f"config history row {seq}", f"config history row {reason}", data)
            self._execute("DELETE FROM configs WHERE seq=?", (seq,))

    def _stray_rows(self, known: set) -> dict[Any, str]:
        stray: dict[Any, dict[str, list]] = {}
        for table in ("results", "checkpoints"):
            if table not in self._tables:
                continue
            columns = RESULT_COLUMNS if table == "results" else CHECKPOINT_COLUMNS
            query = (
                f"SELECT unit_key, {', '.join(columns)} FROM {table} WHERE unit_key NOT IN "
                "(SELECT unit_key FROM units)"
            )
            for key, *row in self._execute(query):
                if key not in known:
                    stray.setdefault(key, {"results": [], "checkpoints": []})[table].append(row)
        return {k: json.dumps({"unit": None, **v}, default=repr) for k, v in stray.items()}

    def _quarantine(self, key: Any, reason: str, data: str) -> None:
        self._execute(
            "INSERT INTO quarantine(unit_key, moved, reason, data) VALUES (?, ?, ?, ?)",
            (printable(key), _now(), reason, data),
        )

    def _rebuild(self) -> SetAside:
        """A store failing SQLite's integrity check is rebuilt: its config and the units that verify
        are copied into a new file, which then replaces it; the damaged file is kept beside it
        as ``results.sqlite.damaged-<time>``."""
        config = self.stored_config()
        if config is None:
            raise StoreDamagedError(
                f"{self.path} fails SQLite's integrity check and holds no study config; {_RESTORE}"
            )
        contents = self.read()
        if contents.health.problems:
            raise StoreDamagedError(f"{self.path}: {contents.health.problems[0]}; {_RESTORE}")
        study = self._study_rows()
        kept_quarantine = _quiet(lambda: self._execute("SELECT * FROM quarantine").fetchall(), [])
        aside = _unused(self.directory / f"{STORE_NAME}.damaged-{_stamp()}")
        record = {
            "at": _now(),
            "damaged_copy": aside.name,
            "sqlite": self.sqlite_check[:5],
            "kept": len(contents.usable),
            "damaged": len(contents.health.damaged),
        }
        history = _json_list(study.get("rebuilt")) + [record]
        old_schema = study.get("schema", "1")
        tmp = self.directory / f"{STORE_NAME}.rebuild"
        tmp.unlink(missing_ok=True)
        new = sqlite3.connect(tmp, isolation_level=None)
        try:
            new.executescript(_SCHEMA)
            new.execute("BEGIN IMMEDIATE")
            study.update(rebuilt=json.dumps(history), schema=SCHEMA_VERSION)
            new.executemany("INSERT INTO study(key, value) VALUES (?, ?)", list(study.items()))
            new.executemany("INSERT INTO quarantine VALUES (?, ?, ?, ?)", kept_quarantine)
            configs = self._history_to_keep(contents, study["config"], old_schema)
            new.executemany("INSERT INTO configs VALUES (?, ?, ?, ?, ?, ?, ?)", configs)
            columns = self._unit_columns()
            for unit in contents.units:
                if unit.damage is not None:
                    new.execute(
                        "INSERT INTO quarantine VALUES (?, ?, ?, ?)",
                        (printable(unit.key), _now(), unit.damage, unit.as_json(columns)),
                    )
                    continue
                new.execute(
                    f"INSERT INTO units({', '.join(columns)}) VALUES "
                    f"({', '.join('?' * len(columns))})",
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
            new.execute("COMMIT")
        finally:
            new.close()
        self._swap_in(tmp, aside)
        lost = self.history_set_aside + len(contents.health.history_damage)
        return SetAside(dict(contents.health.damaged), 0, aside, history_rows=lost)

    def _history_to_keep(self, contents: StoreContents, current: str, schema: str) -> list[tuple]:
        """The ``configs`` rows a rebuilt store keeps: those that verify, then the current config
        again when its own row is not among them (or the store had no history yet)."""
        configs, last = [], 0
        if "configs" in self._tables:
            good = {r.seq for r in contents.history if r.recorded}
            columns = ", ".join((*CONFIG_COLUMNS, "checksum"))
            rows = _quiet(
                lambda: self._execute(f"SELECT {columns} FROM configs ORDER BY seq").fetchall(), []
            )
            configs = [r for r in rows if r[0] in good]
            last = max((r[0] for r in rows if isinstance(r[0], int)), default=0)
        if not configs or json.loads(configs[-1][1]) != contents.config:
            from oodeval import __version__

            origin = (
                "recorded again (history row damaged)"
                if "configs" in self._tables
                else f"migrated from schema {schema}"
            )
            names = configs[-1][2] if configs else "{}"
            row = (last + 1, current, names, _now(), __version__, origin)
            configs.append((*row, _history_checksum(row)))
        return configs

    def _swap_in(self, rebuilt: Path, aside: Path) -> None:
        """Replace the damaged store by `rebuilt`, keeping the damaged file (and its WAL) as
        `aside`. The store path is never missing: a crash leaves either file in place."""
        _fsync(rebuilt)
        self._conn.close()
        self._conn = None
        _link_or_copy(self.path, aside)
        wal = self.path.with_name(STORE_NAME + "-wal")
        if wal.exists():
            _link_or_copy(wal, aside.with_name(aside.name + "-wal"))
            wal.unlink()  # a WAL of the damaged file must never be replayed onto the new one
        self.path.with_name(STORE_NAME + "-shm").unlink(missing_ok=True)
        os.replace(rebuilt, self.path)
        _fsync(self.directory)
        self._open()

    # -- plumbing ---------------------------------------------------------------------------
    def _unit_columns(self) -> tuple[str, ...]:
        return UNIT_COLUMNS + (INTEGRITY_COLUMNS if self.has_checksums else ())

    def _study_rows(self) -> dict[str, Any]:
        try:
            return dict(self._execute("SELECT key, value FROM study").fetchall())
        except sqlite3.DatabaseError as exc:
            raise StoreDamagedError(
                f"{self.path}: the study table cannot be read ({exc}); {_RESTORE}"
            ) from None

    def _set_study(self, key: str, value: str) -> None:
        self._execute("INSERT OR REPLACE INTO study(key, value) VALUES (?, ?)", (key, value))

    def _require_writer(self) -> None:
        if not self.writer:
            raise OodevalError(f"{self.path} is open read-only; open it with create=True to write")

    def _require_writable(self) -> None:
        self._require_writer()
        if self.sqlite_check:
            raise StoreDamagedError(
                f"{self.path} fails SQLite's integrity check; call move_damaged_aside() (as "
                "`oodeval study run` does) before writing to it"
            )

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        if self._conn is None:
            raise OodevalError(f"{self.path} is closed")
        return self._conn.execute(sql, params)

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Turn a SQLite exception into one clear OodevalError line."""
        try:
            yield
        except sqlite3.Error as exc:
            raise _translate(exc, self.path, doing) from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)


class StoreIntegrityWarning(UserWarning):
    """Numbers were computed from a store whose units are not all verified (damaged units left
    out on request, or units without checksums); the message is one of `Study.integrity_notes`."""


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")


@dataclass
class Study:
    """A stored study, loaded: its current config, the units it asks for and their results.

    ``units`` has one row per recorded unit of the current config (its scenarios x algorithms x
    seeds) that verifies (see the ``units`` table; ``params``, ``hparams``, ``timings`` and
    ``versions`` decoded to dicts); ``results`` one row per (unit_key, fold, environment) of
    those units with ``error`` and ``count``. ``outside`` maps each stored unit the current
    config does not ask for (a removed algorithm, seed or scenario: kept in the store, used by
    no analysis) to the axis that leaves it out. ``health`` is what verifying the store found;
    when damaged units were excluded (``load_study(..., exclude_damaged=True)``) they are in
    ``health.damaged`` and in no frame. ``history`` is the store's config history.
    """

    directory: Path
    config: dict[str, Any]
    units: pd.DataFrame
    results: pd.DataFrame
    health: StoreHealth | None = None
    outside: dict[str, str] = field(default_factory=dict)
    history: list[ConfigRecord] = field(default_factory=list)

    @property
    def planned(self) -> int:
        """How many units the config asks for (scenarios x algorithms x seeds)."""
        c = self.config
        return len(c["scenarios"]) * len(c["algorithms"]) * len(c["seeds"])

    @property
    def scope(self) -> UnitScope:
        """The units the current config asks for."""
        last = self.history[-1] if self.history else None
        names = last.scenario_names if last is not None and last.config == self.config else {}
        return UnitScope.of(self.config, names)

    def _damaged_in_config(self) -> list[str]:
        if self.health is None:
            return []
        planned = self.scope.planned_keys()
        return [k for k in self.health.damaged if planned is None or k in planned]

    def counts(self) -> dict[str, int]:
        """{"done", "failed", "damaged", "pending", "planned"} unit counts of the current config."""
        done = int((self.units["status"] == "done").sum())
        failed = int((self.units["status"] == "failed").sum())
        damaged = len(self._damaged_in_config())
        return {
            "done": done,
            "failed": failed,
            "damaged": damaged,
            "pending": max(self.planned - done - failed - damaged, 0),
            "planned": self.planned,
        }

    def coverage(self) -> pd.DataFrame:
        """Per value of each axis (scenario, algorithm, seed): planned, done, failed, damaged and
        pending units of the current config. Scenarios whose built names were never recorded
        (a store of schema 1 or 2 not run since) are those of the stored units."""
        scope = self.scope
        at_key = {"scenario": 0, "algorithm": 1, "seed": 2}
        damaged = [k.rsplit("|", 2) for k in self._damaged_in_config()]
        units = self.units
        scenarios = scope.scenarios
        if scenarios is None:
            scenarios = tuple(dict.fromkeys(units["scenario"]))
        axes = {"scenario": scenarios, "algorithm": scope.algorithms, "seed": scope.seeds}
        sizes = {a: len(v) for a, v in axes.items()}
        sizes["scenario"] = len(self.config["scenarios"])
        rows = []
        for axis, values in axes.items():
            per_value = self.planned // max(sizes[axis], 1)
            for value in values:
                mine = units[units[axis] == value]
                shown = f"seed={value}" if axis == "seed" else str(value)
                bad = sum(1 for parts in damaged if parts[at_key[axis]] == shown)
                done = int((mine["status"] == "done").sum())
                failed = int((mine["status"] == "failed").sum())
                rows.append(
                    (
                        axis,
                        str(value),
                        per_value,
                        done,
                        failed,
                        bad,
                        per_value - done - failed - bad,
                    )
                )
        columns = ["axis", "value", "planned", "done", "failed", "damaged", "pending"]
        return pd.DataFrame.from_records(rows, columns=columns)

    def integrity_notes(self) -> list[str]:
        """What every output computed from this study must say about the store's integrity
        (damaged units left out, units without checksums); empty for a verified store."""
        return self.health.notes() if self.health is not None else []

    def data_note(self) -> str | None:
        """One sentence on the study's data that every output of its numbers repeats, or None
        (`oodeval.study.config.data_note`: MNIST's test set alone is 1/7 of DomainBed's pool)."""
        from oodeval.study.config import data_note

        return data_note(self.config)

    def outside_note(self) -> str | None:
        """One sentence on the stored units the current config does not ask for, or None."""
        if not self.outside:
            return None
        by_axis: dict[str, list[str]] = {}
        for why in dict.fromkeys(sorted(self.outside.values())):
            axis, _, value = why.partition(" ")
            by_axis.setdefault(axis, []).append(value)
        shown = "; ".join(
            f"{axis}{'s' if len(values) > 1 else ''} {', '.join(values[:NAMED_IN_LINE])}"
            + (f" and {len(values) - NAMED_IN_LINE} more" if len(values) > NAMED_IN_LINE else "")
            for axis, values in by_axis.items()
        )
        return (
            f"{len(self.outside)} stored unit(s) are outside the current config (removed "
            f"{shown}); they are kept in the store and not analysed"
        )

    def code_notes(self) -> list[str]:
        """Warnings for finished units computed by different code: different oodeval sources,
        or, per algorithm, different versions of an imported module (``versions`` of each unit,
        `oodeval.study.worker.import_versions`)."""
        notes = []
        versions = list(self.units["versions"]) if "versions" in self.units else []
        digests = {(v or {}).get("oodeval_source") for v in versions} - {None}
        if len(digests) > 1:
            notes.append(
                f"the units were computed by {len(digests)} different versions of the oodeval "
                "sources (see `versions` in the units table); results may not be comparable"
            )
        done = self.units[self.units["status"] == "done"] if len(self.units) else self.units
        seen: dict[str, dict[str, set[str]]] = {}
        for algorithm, v in zip(done.get("algorithm", []), done.get("versions", []), strict=True):
            for key, digest in (v or {}).items():
                if key.startswith(IMPORT_VERSION_PREFIX):
                    name = key[len(IMPORT_VERSION_PREFIX) :]
                    seen.setdefault(name, {}).setdefault(algorithm, set()).add(str(digest))
        for name, by_algorithm in sorted(seen.items()):
            changed = sorted(a for a, d in by_algorithm.items() if len(d) > 1)
            if changed:
                count = max(len(by_algorithm[a]) for a in changed)
                notes.append(
                    f"the units of {', '.join(changed)} were computed with {count} different "
                    f"versions of the imported module {name} (its code changed between runs; "
                    "digests in `versions` of the units table); their numbers may not compare"
                )
        return notes


def load_study(directory: str | Path, *, exclude_damaged: bool = False) -> Study:
    """Read and verify a study folder written by `oodeval study run` (or `run_study`).

    The study holds the units of the current config (`Study.outside` names the others). Raises
    StoreDamagedError (naming the damaged units) when the store fails SQLite's quick check
    or a unit fails verification; with ``exclude_damaged=True`` the damaged units are left out
    instead and `Study.integrity_notes` says so. A damaged config is always refused.
    """
    with ResultStore(directory) as store:
        contents = store.read()
    health = contents.health
    if health.problems or (not health.trusted and not exclude_damaged):
        raise StoreDamagedError(health.refusal(None if health.problems else "--exclude-damaged"))
    if contents.config is None:
        raise OodevalError(f"{store.path} has no study config; was the run interrupted early?")
    health.excluded = exclude_damaged
    current, outside = contents.in_config()
    return Study(
        Path(directory),
        contents.config,
        current.units_frame(),
        current.results_frame(),
        health,
        outside,
        contents.history,
    )


@dataclass
class StoreVerification:
    """`verify_store`'s findings: health, plus what only a full check looks at."""

    path: Path
    health: StoreHealth | None = None
    unreadable: str | None = None
    schema: str | None = None
    stray_rows: int | None = 0
    quarantined: int = 0
    history: list[str] = field(default_factory=list)
    damaged_copies: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Everything verified: SQLite's full check passes and every unit has a checksum that
        matches, no row belongs to no unit."""
        h = self.health
        return (
            h is not None
            and h.trusted
            and not h.unverified
            and not h.history_damage
            and self.stray_rows == 0
        )

    def lines(self) -> list[str]:
        """The report `oodeval study verify` prints."""
        out = [f"store: {self.path}" + (f" (schema {self.schema})" if self.schema else "")]
        if self.health is None:
            return [*out, f"unreadable: {self.unreadable}", "verdict: DAMAGED (unreadable)"]
        h = self.health
        out.append(f"SQLite {h.check_kind}: {'ok' if h.sqlite_ok else 'FAILED'}")
        out += [f"  {printable(m)}" for m in h.sqlite_check[:10]]
        if len(h.sqlite_check) > 10:
            out.append(f"  ... and {len(h.sqlite_check) - 10} more messages")
        out.append("config: " + ("; ".join(h.problems) if h.problems else "ok"))
        total = h.verified + len(h.damaged) + len(h.unverified)
        out.append(
            f"units: {total} stored: {h.verified} verified, {len(h.damaged)} damaged, "
            f"{len(h.unverified)} without checksum"
        )
        out += [f"damaged: {k}: {v}" for k, v in h.damaged.items()]
        out += [f"damaged: config history {k}: {v}" for k, v in h.history_damage.items()]
        if self.stray_rows is None:
            out.append("stray rows: cannot be counted (the tables cannot be read in full)")
        elif self.stray_rows:
            out.append(f"stray rows: {self.stray_rows} result/checkpoint rows of no stored unit")
        if self.quarantined:
            out.append(f"quarantine: {self.quarantined} unit(s) set aside earlier")
        out += [f"history: {line}" for line in self.history]
        out += [f"damaged copy kept: {name}" for name in self.damaged_copies]
        out.append(f"verdict: {self._verdict()}")
        return out

    def _verdict(self) -> str:
        h = self.health
        assert h is not None
        if self.clean:
            return "clean"
        if h.problems:
            return f"DAMAGED; {_RESTORE}"
        if not h.trusted or self.stray_rows or h.history_damage:
            return (
                "DAMAGED; `oodeval study run` with the same config moves the damaged units "
                "aside (rebuilding the file when SQLite's check fails) and runs them again"
            )
        return (
            "UNVERIFIED: units without checksums (stored by an older oodeval); `oodeval "
            "study run` with the same config checks the file and adds them"
        )


def verify_store(directory: str | Path) -> StoreVerification:
    """Verify a study store without writing to it: SQLite's full integrity check, the config's
    checksum, every unit's row counts and checksum, stray rows. A missing store is an
    OodevalError; an unreadable one is a finding (``unreadable``)."""
    path = Path(directory) / STORE_NAME
    report = StoreVerification(path)
    report.damaged_copies = sorted(
        p.name
        for p in Path(directory).glob(f"{STORE_NAME}.damaged-*")
        if not p.name.endswith(("-wal", "-shm"))
    )
    try:
        store = ResultStore(directory, full_check=True)
    except StoreDamagedError as exc:
        report.unreadable = str(exc)
        return report
    with store:
        try:
            contents = store.read()
        except StoreDamagedError as exc:
            report.unreadable = str(exc)
            return report
        report.health = contents.health
        study = _quiet(store._study_rows, {})
        report.schema = study.get("schema", "1")
        report.history = _history(study) + [r.line() for r in contents.history if r.recorded]
        report.stray_rows = _quiet(lambda: _count_stray(store), None)
        if "quarantine" in store._tables:
            report.quarantined = _quiet(
                lambda: store._execute("SELECT COUNT(*) FROM quarantine").fetchone()[0], 0
            )
    return report


def _count_stray(store: ResultStore) -> int:
    total = 0
    for table in ("results", "checkpoints"):
        if table in store._tables:
            total += store._execute(
                f"SELECT COUNT(*) FROM {table} WHERE unit_key NOT IN (SELECT unit_key FROM units)"
            ).fetchone()[0]
    return int(total)


def _history(study: Mapping[str, Any]) -> list[str]:
    lines = []
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        if "migrated" in study:
            m = json.loads(study["migrated"])
            lines.append(
                f"checksums added on {m['at']} to {m['units']} unit(s) of a schema "
                f"{m['from_schema']} store (they guard against damage since then)"
            )
    for r in _json_list(study.get("rebuilt")):
        with contextlib.suppress(TypeError, KeyError):
            lines.append(
                f"rebuilt on {r['at']} after SQLite's check failed: {r['kept']} unit(s) "
                f"kept, {r['damaged']} moved aside; damaged file: {r['damaged_copy']}"
            )
    return lines


def _quiet(fn: Any, default: Any) -> Any:
    try:
        return fn()
    except (sqlite3.DatabaseError, OodevalError):
        return default


def _json_list(text: Any) -> list:
    try:
        value = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _unit_values(record: UnitRecord, attempts: int) -> tuple:
    """The ``units`` row of `record` (UNIT_COLUMNS order), each value of its column's type, so
    what SQLite returns equals what was hashed."""
    return (
        record.key,
        str(record.scenario),
        str(record.family),
        _json(record.params),
        str(record.algorithm),
        int(record.seed),
        _json(record.hparams),
        int(record.steps),
        str(record.model),
        str(record.status),
        None if record.failure is None else str(record.failure),
        _json(record.timings or {}),
        _json(record.versions or {}),
        None if record.started is None else str(record.started),
        None if record.finished is None else str(record.finished),
        int(attempts),
    )


def _history_checksum(row: Sequence[Any]) -> str:
    """SHA-256 of a ``configs`` row (`CONFIG_COLUMNS` order): the canonical JSON of its values."""
    return text_checksum(json.dumps(list(row), ensure_ascii=False))


def _refuse_duplicates(key: str, pairs: Sequence[tuple], what: str) -> None:
    seen: set[tuple] = set()
    for pair in pairs:
        if pair in seen:
            raise OodevalError(
                f"unit {key}: two rows share the {what} {pair}; the backend must return each once"
            )
        seen.add(pair)


def _create_store(path: Path) -> None:
    """Create an empty store with its tables under a temporary name and move it into place, so
    `path` never exists without its schema (a 0-byte store is always damage)."""
    tmp = path.with_name(path.name + ".new")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.executescript(_SCHEMA)
        conn.execute("INSERT INTO study(key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
    finally:
        conn.close()
    _fsync(tmp)
    os.replace(tmp, path)
    _fsync(path.parent)


def _sqlite_check(conn: sqlite3.Connection, pragma: str) -> list[str]:
    """SQLite's ``quick_check`` / ``integrity_check`` messages; empty when it says ok."""
    try:
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    if rows == ["ok"]:
        return []
    # one row may hold several messages, one a line; '*** in database main ***' is a heading
    lines = [line.strip() for row in rows for line in row.splitlines()]
    return [line for line in lines if line and not line.startswith("***")]


def _translate(exc: sqlite3.Error, path: Path, doing: str) -> OodevalError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return OodevalError(
            f"{path} stayed locked by another program for 30 s while {doing} ({text}); close "
            "other programs that have it open (an sqlite3 shell, a viewer) and run again"
        )
    if "full" in text or "I/O" in text or "readonly" in text:
        return OodevalError(
            f"cannot write {path} while {doing} ({text}); free disk space or fix the folder's "
            "permissions, then run again (finished units are kept)"
        )
    return StoreDamagedError(
        f"{path} failed while {doing} ({text}); run `oodeval study verify "
        f"{path.parent}` to see the damage"
    )


def _unopenable(path: Path, exc: sqlite3.Error) -> OodevalError:
    if "unable to open" in str(exc):  # permissions, not damage
        return OodevalError(
            f"cannot open {path} ({exc}); the folder must be readable, and writable for SQLite's "
            f"{STORE_NAME}-shm file beside it: fix its permissions or copy the study elsewhere"
        )
    return StoreDamagedError(f"{path} is not a readable study store ({exc}); {_RESTORE}")


def _key_match(key: Any) -> tuple[str, Any]:
    """The SQL condition and parameter finding rows stored under `key` exactly as it was read
    (text that is not UTF-8 was decoded with surrogates; it is matched byte for byte)."""
    if isinstance(key, str):
        raw = key.encode("utf-8", "surrogateescape")
        if raw.decode("utf-8", "replace") != key:
            return "unit_key = CAST(? AS TEXT)", raw
    return "unit_key = ?", key


def _decode_text(data: bytes) -> str:
    # damaged text must stay data: undecodable bytes are kept as surrogates, and the checksum
    # (not a decoding error) tells the unit is damaged
    return data.decode("utf-8", "surrogateescape")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _unused(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _json(value: Any) -> str:
    return json.dumps(value if value is not None else {}, sort_keys=True, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)
