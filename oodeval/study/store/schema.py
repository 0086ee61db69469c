"""The layout of a study store: its file name, schema version, tables and their columns.

Constants only, read by every other module of `oodeval.study.store`; the tables are described
in the package's documentation (`oodeval.study.store`). Creating a store is
`oodeval.study.store.database.create_store`; bringing an older one up to this layout is
`oodeval.study.store.migrations`.
"""

from __future__ import annotations

#: The store's file name inside a study folder.
STORE_NAME = "results.sqlite"
#: The files SQLite keeps beside the store while it writes (``results.sqlite-wal`` ...).
SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
#: The schema this oodeval writes: 1 had no checksums, 2 no config history.
SCHEMA_VERSION = "3"
#: The fold of the model trained on every given environment (a leave-one-out model's fold is the
#: environment it leaves out); ``fold`` in the ``results`` and ``checkpoints`` tables. The
#: coarser *split* of the long-form results follows from it: fold ``all`` is split ``all``,
#: any other fold split ``loo``.
ALL_FOLD = "all"

#: The tables of a store of this schema (``CREATE TABLE IF NOT EXISTS``: also adds missing ones).
SCHEMA_SQL = """
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

#: The columns of the ``units`` table a unit's checksum covers, in order.
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
#: The columns of the ``configs`` table its rows' checksum covers (the checksum follows).
CONFIG_COLUMNS = ("seq", "config", "scenario_names", "recorded", "oodeval", "origin")
#: The tables a store of the current schema has (a writer adds missing ones on upgrade).
TABLES = frozenset({"study", "units", "results", "checkpoints", "quarantine", "configs"})
#: The columns of ``units`` holding JSON text (decoded when read).
JSON_COLUMNS = ("params", "hparams", "timings", "versions")

#: The way out every refusal of an unsalvageable store ends with.
RESTORE_HINT = "restore it from a backup, or start the study in a new folder"
