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
  incomparable is refused. Readers (`load_study`) use the units of the
  current config only; units of removed values stay in the store and come back when the values
  are added again.
- ``units``: one row per finished unit (scenario, algorithm, seed) with its hyperparameters,
  steps, model, ``status`` (``done`` or ``failed``), failure reason, timings, library versions,
  start/finish times (UTC, ISO 8601), and its integrity record: ``n_results``,
  ``n_checkpoints`` and ``checksum`` (`unit_checksum` of the units row
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
(``ResultStore(DIR, create=True)``) holds the folder's lock (`StudyLock`) while open.
Readers open the file read-only and never wait for the writer; in a folder they may not write
they open it without SQLite's side files (`readonly`).

Every reader and the writer run SQLite's full integrity check on open (which also compares
every index with its table); every read counts and hashes each unit's rows again and counts
rows of no stored unit: one damage verdict for every command
(`StoreHealth.damage`). A reader refuses to hand out numbers from a
store with damaged units (`load_study`), unless told to leave them
out; a writer moves damaged units aside (`ResultStore.move_damaged_aside`) so they run again,
and rebuilds a store that fails SQLite's check from the units that verify, keeping the damaged
file beside it. An empty or unreadable file is refused, never started over.

Stores of schema 1 (no checksums) are read as *unverified* (every output says so); the first
writer to open one checks it with SQLite's full integrity check and then adds the checksums.
Stores of schema 1 and 2 (no ``configs`` table) are read as a history of their one config; the
first writer adds the table with that config as its first row. A store of a newer schema than
`SCHEMA_VERSION` (written by a newer oodeval) is refused on open, by readers and the writer
alike, naming both versions (`oodeval.study.store.database.check_schema`); nothing is read or
migrated.

Modules, one responsibility each:

- `schema`: the file name, schema version, tables and columns.
- `records`: the record types (`UnitRecord`, `StoredUnit`, `ConfigRecord`, `StoreContents`)
  and the errors.
- `database`: the SQLite file (`StoreFile`): opening, checks, transactions, error messages.
- `readonly`: opening it for reading, in a folder the reader may not write too.
- `history`: the config history and the rule that a config may only grow the study.
- `units`: the verified read of every unit, and writing one atomically.
- `migrations`: bringing a schema 1 or 2 store up to date.
- `repair`: quarantine and rebuilding a damaged file (`SetAside`).
- `result_store`: `ResultStore`, the class callers open.
- `verify`: `verify_store`, what ``oodeval study verify`` reports.
- `_integrity`: checksums and the damage verdict (`unit_checksum`, `StoreHealth`).
- `_lock`: the one-writer lock on ``DIR/study.lock`` (`StudyLock`).
- `_read_model`: the read model of a study (`Study`, `load_study`: the units of its current
  config, as frames).
- `_exported`: a study as one text file (`export_text`, `read_export`, `is_export`), which
  `load_study` reads as it reads a folder.
"""

from oodeval.study.store._exported import (
    EXPORT_MAGIC,
    ExportedStudy,
    export_text,
    is_export,
    read_export,
)
from oodeval.study.store._integrity import (
    StoreHealth,
    printable,
    text_checksum,
    unit_checksum,
)
from oodeval.study.store._lock import (
    LOCK_NAME,
    LockHolder,
    StudyLock,
    StudyLockedError,
    read_holder,
    study_lock,
)
from oodeval.study.store._read_model import (
    Study,
    UnitScope,
    current_checkpoints,
    current_contents,
    load_study,
)
from oodeval.study.store.records import (
    ConfigRecord,
    StoreContents,
    StoreDamagedError,
    StoredUnit,
    StoreIntegrityWarning,
    UnitRecord,
    unit_key,
    unit_values,
)
from oodeval.study.store.repair import SetAside
from oodeval.study.store.result_store import ResultStore
from oodeval.study.store.schema import (
    ALL_FOLD,
    CHECKPOINT_COLUMNS,
    CONFIG_COLUMNS,
    INTEGRITY_COLUMNS,
    RESULT_COLUMNS,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    STORE_NAME,
    UNIT_COLUMNS,
)
from oodeval.study.store.verify import StoreVerification, verify_store

__all__ = [
    "ALL_FOLD",
    "CHECKPOINT_COLUMNS",
    "CONFIG_COLUMNS",
    "EXPORT_MAGIC",
    "INTEGRITY_COLUMNS",
    "LOCK_NAME",
    "RESULT_COLUMNS",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "STORE_NAME",
    "UNIT_COLUMNS",
    "ConfigRecord",
    "ExportedStudy",
    "LockHolder",
    "ResultStore",
    "SetAside",
    "StoreContents",
    "StoreDamagedError",
    "StoreHealth",
    "StoreIntegrityWarning",
    "StoreVerification",
    "StoredUnit",
    "Study",
    "StudyLock",
    "StudyLockedError",
    "UnitRecord",
    "UnitScope",
    "current_checkpoints",
    "current_contents",
    "export_text",
    "is_export",
    "load_study",
    "printable",
    "read_export",
    "read_holder",
    "study_lock",
    "text_checksum",
    "unit_checksum",
    "unit_key",
    "unit_values",
    "verify_store",
]
