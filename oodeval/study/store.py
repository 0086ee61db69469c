"""The SQLite results store of a study: one file, crash-safe, append-only per unit.

Layout (``DIR/results.sqlite``):

- ``study(key, value)``: the study config as canonical JSON (``key = 'config'``) and the schema
  version. A directory belongs to one config; resuming with another is refused.
- ``units``: one row per finished unit (scenario, algorithm, seed) with its hyperparameters,
  steps, model, ``status`` (``done`` or ``failed``), failure reason, timings, library versions and
  start/finish times (UTC, ISO 8601).
- ``results``: one row per (unit, fold, environment) with the error rate and the sample count.
  ``fold`` is the held-out given environment of a leave-one-out model, or ``all`` for the model
  trained on every given environment (evaluated on every environment of E_all).
- ``checkpoints``: one row per (unit, fold, step): every checkpoint of each leave-one-out model
  with its training-domain validation accuracy, its accuracy on the held-out environment's "in"
  part (``test_acc``) and "out" part (``oracle_val_acc``), as fractions (see
  `oodeval.training.CheckpointRow`). Empty for backends that do not record checkpoints; stores
  written before this table existed get it (empty) when next opened for writing.

A unit's rows, its checkpoints and its status are written in ONE transaction (WAL journal,
``synchronous=FULL``), so a process killed at any moment leaves either the whole unit or none of
it, and primary keys make a second copy of a row impossible. Only the parent process of a study
writes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from oodeval.errors import OodevalError
from oodeval.study.config import differing_keys

STORE_NAME = "results.sqlite"
SCHEMA_VERSION = "1"
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
    attempts INTEGER NOT NULL DEFAULT 1
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


class ResultStore:
    """Read/write access to ``DIR/results.sqlite``; the writer of a running study.

    Parameters
    ----------
    directory : the study folder (created when ``create=True``).
    create : create the folder and the tables when missing; otherwise a missing store is an error.
    """

    def __init__(self, directory: str | Path, *, create: bool = False) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STORE_NAME
        if not self.path.is_file():
            if not create:
                raise OodevalError(
                    f"no study in {self.directory} ({STORE_NAME} missing); "
                    "start one with `oodeval study run`"
                )
            self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            if create:
                self._conn.executescript(_SCHEMA)
            tables = {
                row[0]
                for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as exc:
            raise OodevalError(f"{self.path} is not a readable study store: {exc}") from None
        if not {"study", "units", "results"} <= tables:
            raise OodevalError(f"{self.path} is not an oodeval study store (tables missing)")

    # -- the config -----------------------------------------------------------------------
    def stored_config(self) -> dict[str, Any] | None:
        """The config the store was created with, or None for a fresh store."""
        row = self._conn.execute("SELECT value FROM study WHERE key='config'").fetchone()
        return None if row is None else json.loads(row[0])

    def bind_config(self, config: Mapping[str, Any]) -> None:
        """Record `config` in a fresh store, or check that it equals the stored one.

        Raises OodevalError naming the differing keys when the directory holds another study; the
        same data at another path is the same study (`oodeval.study.config.differing_keys`).
        """
        stored = self.stored_config()
        if stored is None:
            with self._transaction():
                self._conn.execute(
                    "INSERT INTO study(key, value) VALUES ('config', ?), ('schema', ?)",
                    (json.dumps(dict(config), sort_keys=True), SCHEMA_VERSION),
                )
            return
        # the source is compared by identity (kind, content digest), its path being a hint
        differing = differing_keys(stored, config)
        if differing:
            raise OodevalError(
                f"{self.directory} holds a study with a different config (keys differ: "
                f"{', '.join(differing)}); use a new --out folder or the original config"
            )

    # -- units --------------------------------------------------------------------------------
    def statuses(self) -> dict[str, str]:
        """{unit_key: status} of every recorded unit."""
        return dict(self._conn.execute("SELECT unit_key, status FROM units").fetchall())

    def record_unit(self, record: UnitRecord, rows: Iterable[Sequence[Any]] = ()) -> None:
        """Write a unit's status, its result rows (fold, environment, error, count) and its
        checkpoint records (``record.checkpoints``) atomically.

        A unit already ``done`` is never rewritten (its rows stay as they are); a ``failed`` unit
        is replaced, with its attempt count increased.
        """
        rows = [(str(f), str(e), float(err), int(c)) for f, e, err, c in rows]
        checkpoints = [
            (str(f), int(s), float(v), float(t), float(o)) for f, s, v, t, o in record.checkpoints
        ]
        key = record.key
        with self._transaction():
            prior = self._conn.execute(
                "SELECT status, attempts FROM units WHERE unit_key=?", (key,)
            ).fetchone()
            if prior is not None and prior[0] == "done":
                return
            attempts = 1 if prior is None else int(prior[1]) + 1
            self._conn.execute("DELETE FROM results WHERE unit_key=?", (key,))
            self._conn.execute("DELETE FROM checkpoints WHERE unit_key=?", (key,))
            self._conn.execute("DELETE FROM units WHERE unit_key=?", (key,))
            self._conn.execute(
                f"INSERT INTO units({', '.join(UNIT_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(UNIT_COLUMNS))})",
                (
                    key,
                    record.scenario,
                    record.family,
                    _json(record.params),
                    record.algorithm,
                    int(record.seed),
                    _json(record.hparams),
                    int(record.steps),
                    record.model,
                    record.status,
                    record.failure,
                    _json(record.timings or {}),
                    _json(record.versions or {}),
                    record.started,
                    record.finished,
                    attempts,
                ),
            )
            self._conn.executemany(
                "INSERT INTO results(unit_key, fold, environment, error, count) "
                "VALUES (?, ?, ?, ?, ?)",
                [(key, *row) for row in rows],
            )
            self._conn.executemany(
                "INSERT INTO checkpoints(unit_key, fold, step, train_val_acc, test_acc, "
                "oracle_val_acc) VALUES (?, ?, ?, ?, ?, ?)",
                [(key, *row) for row in checkpoints],
            )

    def units_frame(self) -> pd.DataFrame:
        """The ``units`` table, JSON columns decoded, sorted by unit key."""
        frame = pd.read_sql_query("SELECT * FROM units ORDER BY unit_key", self._conn)
        for column in ("params", "hparams", "timings", "versions"):
            frame[column] = frame[column].map(json.loads)
        return frame

    def results_frame(self) -> pd.DataFrame:
        """The ``results`` table sorted by (unit_key, fold, environment)."""
        return pd.read_sql_query(
            "SELECT * FROM results ORDER BY unit_key, fold, environment", self._conn
        )

    def checkpoints_frame(self) -> pd.DataFrame:
        """The ``checkpoints`` table of ``done`` units joined with their scenario, algorithm, seed
        and hparams (JSON text), sorted by (unit_key, fold, step); empty when the store has none
        (or predates the table)."""
        columns = ["scenario", "algorithm", "seed", "hparams", "unit_key", "fold", "step"]
        columns += ["train_val_acc", "test_acc", "oracle_val_acc"]
        if not self._has_table("checkpoints"):
            return pd.DataFrame(columns=columns)
        return pd.read_sql_query(
            "SELECT u.scenario, u.algorithm, u.seed, u.hparams, c.unit_key, c.fold, c.step, "
            "c.train_val_acc, c.test_acc, c.oracle_val_acc FROM checkpoints c "
            "JOIN units u ON u.unit_key = c.unit_key WHERE u.status = 'done' "
            "ORDER BY c.unit_key, c.fold, c.step",
            self._conn,
        )

    def _has_table(self, name: str) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?"
        return self._conn.execute(query, (name,)).fetchone() is not None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)


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
    """A stored study, loaded: its config, units and results as DataFrames.

    ``units`` has one row per recorded unit (see the ``units`` table; ``params``, ``hparams``,
    ``timings`` and ``versions`` decoded to dicts); ``results`` one row per (unit_key, fold,
    environment) with ``error`` and ``count``.
    """

    directory: Path
    config: dict[str, Any]
    units: pd.DataFrame
    results: pd.DataFrame

    @property
    def planned(self) -> int:
        """How many units the config asks for (scenarios x algorithms x seeds)."""
        c = self.config
        return len(c["scenarios"]) * len(c["algorithms"]) * len(c["seeds"])

    def counts(self) -> dict[str, int]:
        """{"done", "failed", "pending", "planned"} unit counts."""
        done = int((self.units["status"] == "done").sum())
        failed = int((self.units["status"] == "failed").sum())
        return {
            "done": done,
            "failed": failed,
            "pending": max(self.planned - done - failed, 0),
            "planned": self.planned,
        }


def load_study(directory: str | Path) -> Study:
    """Read a study folder written by `oodeval study run` (or `oodeval.study.run_study`)."""
    with ResultStore(directory) as store:
        config = store.stored_config()
        if config is None:
            raise OodevalError(f"{store.path} has no study config; was the run interrupted early?")
        return Study(Path(directory), config, store.units_frame(), store.results_frame())


def _json(value: Any) -> str:
    return json.dumps(value if value is not None else {}, sort_keys=True, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)
