"""`ResultStore`: a study's results store opened by a reader or by its one writer.

The class every caller uses: open a study folder's store (the writer takes the folder's lock
and upgrades an older store), record the config (`ResultStore.bind_config`), write units
(`ResultStore.record_unit`, `ResultStore.adopt_unit`), read them verified
(`ResultStore.read` and the frames), and repair damage (`ResultStore.move_damaged_aside`).
The work is done by the modules beside it: `history` (configs), `units` (unit rows),
`migrations` (older schemas) and `repair` (quarantine and rebuild), over the SQLite plumbing of
`oodeval.study.store.database.StoreFile`, which `ResultStore` extends.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from oodeval._files import make_folder, refuse_links
from oodeval.errors import OodevalError
from oodeval.study.config import ConfigChanges
from oodeval.study.store._lock import LOCK_NAME, StudyLock
from oodeval.study.store.database import StoreFile, create_store, writer_files
from oodeval.study.store.history import (
    append_config,
    config_differs,
    current_config,
    growth_changes,
    read_history,
    record_first_config,
    rewrite_names,
    set_current,
)
from oodeval.study.store.migrations import upgrade
from oodeval.study.store.records import (
    ConfigRecord,
    StoreContents,
    StoreDamagedError,
    StoredUnit,
    StoreIntegrityWarning,
    UnitRecord,
)
from oodeval.study.store.repair import SetAside, rebuild, set_damaged_aside, set_history_aside
from oodeval.study.store.schema import STORE_NAME
from oodeval.study.store.units import copy_unit, read_contents, write_unit


class ResultStore(StoreFile):
    """Access to ``DIR/results.sqlite``: a read-only reader, or the one writer of a study.

    Parameters
    ----------
    directory : the study folder (created when ``create=True``).
    create : open as the writer: take the folder's lock (`oodeval.study.lock`; another writer
        is refused at once), create the folder and the store when missing, and bring a schema 1
        store up to date. Otherwise the store is opened read-only (writing nothing, in a
        folder this user may not write too) and a missing one is an error. Readers and the
        writer alike run SQLite's full integrity check on open.
    """

    def __init__(self, directory: str | Path, *, create: bool = False) -> None:
        super().__init__(directory, writer=create)
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
        if create:  # SQLite follows links itself: none may stand where the writer writes
            refuse_links(self.directory / LOCK_NAME, *writer_files(self.path))
        try:
            if create:
                make_folder(self.directory, what="study folder", named_by_user=True)
                self._lock = StudyLock(self.directory).acquire()
                if not self.path.exists():
                    create_store(self.path)
            self.open()
            if create:
                upgrade(self)
        except BaseException:
            self.close()
            raise

    # -- the config -----------------------------------------------------------------------
    def stored_config(self) -> dict[str, Any] | None:
        """The config the store was created with (checked against its checksum), or None for a
        fresh store. Raises StoreDamagedError when it is damaged or missing beside units."""
        return current_config(self)

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
            record_first_config(self, text, names, origin)
            return None
        with self.guard("reading the config history"):
            history, bad_rows = read_history(self)
        changes = growth_changes(stored, config, history, names, self.directory)
        differs = config_differs(stored, config)
        with self.guard("recording the config"):
            if "configs" not in self.tables:  # an old store failing SQLite's check: its rebuild
                if differs:  # adds the history (`move_damaged_aside`)
                    with self.transaction():
                        set_current(self, text)
            elif differs or bad_rows or (names and names != history[-1].scenario_names):
                with self.transaction():
                    # damaged rows leave first: they must never pass for earlier configs
                    set_history_aside(self, bad_rows, history, stored)
                    self.history_set_aside += len(bad_rows)
                    if differs:
                        set_current(self, text)
                        append_config(self, text, names, origin)
                    else:  # the names of a migrated store's config, once known
                        rewrite_names(self, read_history(self)[0][-1], names)
        return changes

    def config_history(self) -> list[ConfigRecord]:
        """The configs the study was run with, oldest first; the last is the current one unless
        its row was damaged. Rows that fail their checksum are left out (`read` names them in
        ``health.history_damage``; a writer sets them aside). A store of schema 1 or 2 that no
        writer upgraded yet reads as the one config it holds, its scenario names unknown.
        """
        with self.guard("reading the config history"):
            return read_history(self)[0]

    # -- units --------------------------------------------------------------------------------
    def statuses(self) -> dict[str, str]:
        """{unit_key: status} of every recorded unit (as stored; see `read` for verification)."""
        with self.guard("reading unit statuses"):
            return dict(self.execute("SELECT unit_key, status FROM units").fetchall())

    def record_unit(self, record: UnitRecord, rows: Iterable[Sequence[Any]] | None = None) -> None:
        """Write a unit as it is: its status, its result rows (``record.rows``: fold,
        environment, error, count), its checkpoint records (``record.checkpoints``) and its
        checksum, atomically. Passing the rows apart (`rows`) is deprecated (FutureWarning).

        A unit already ``done`` is never rewritten (its rows stay as they are); a ``failed`` unit
        is replaced, with its attempt count increased. Two rows with the same (fold, environment)
        or (fold, step) are refused (OodevalError) and nothing of the unit is written.
        """
        self.require_writable()
        if rows is not None:
            warnings.warn(
                "record_unit(record, rows) is deprecated; put the rows in the record: "
                "UnitRecord(..., rows=rows)",
                FutureWarning,
                stacklevel=2,
            )
            record = dataclasses.replace(record, rows=list(rows))
        write_unit(self, record)

    def adopt_unit(self, unit: StoredUnit) -> bool:
        """Copy a verified unit read from another store, its rows exactly as stored (checksum,
        attempts and time stamps included), in one transaction. A ``failed`` unit of the same key
        is replaced; a ``done`` one never is: then nothing is written and False is returned."""
        self.require_writable()
        return copy_unit(self, unit)

    # -- verified reads ---------------------------------------------------------------------
    def read(self) -> StoreContents:
        """Read every unit and verify it: counts and checksum of its rows (see the package doc).

        Raises StoreDamagedError only when nothing can be salvaged (the units or study table
        cannot be read); damaged units and a failed SQLite check are reported in ``health``.
        A reader that opened the file immutable refuses (OodevalError) when it changed meanwhile.
        """
        try:
            contents = read_contents(self)
        except StoreDamagedError:
            self.check_unchanged()  # a file changing under the read is not damage
            raise
        self.check_unchanged()
        return contents

    def verified_contents(self) -> StoreContents:
        """`read`, refused (StoreDamagedError) unless every unit may be used; the notes of a
        store not fully verified (units without checksums) are issued as
        `StoreIntegrityWarning`s."""
        contents = self.read()
        if not contents.health.trusted:
            raise StoreDamagedError(contents.health.refusal(option=None))
        for note in contents.health.notes():
            warnings.warn(note, StoreIntegrityWarning, stacklevel=3)
        return contents

    def units_frame(self) -> pd.DataFrame:
        """The ``units`` table (verified), JSON columns decoded, sorted by unit key.

        Raises StoreDamagedError when the store or a unit in it fails verification.
        """
        return self.verified_contents().units_frame()

    def results_frame(self) -> pd.DataFrame:
        """The ``results`` table (verified) sorted by (unit_key, fold, environment)."""
        return self.verified_contents().results_frame()

    def checkpoints_frame(self) -> pd.DataFrame:
        """The ``checkpoints`` table of ``done`` units (verified) joined with their scenario,
        algorithm, seed and hparams (JSON text), sorted by (unit_key, fold, step); empty when
        the store has none (or predates the table). Of the current config's units only:
        `oodeval.study.store.current_checkpoints`."""
        return self.verified_contents().checkpoints_frame()

    # -- repairs (writer) -------------------------------------------------------------------
    def move_damaged_aside(self) -> SetAside:
        """Move every unit that fails verification (and rows of no stored unit) to the
        ``quarantine`` table, so a run stores them again; rebuild a store that fails SQLite's
        integrity check from its verified units first. Returns what was done."""
        self.require_writer()
        if not self.sqlite_check:
            return set_damaged_aside(self, self.history_set_aside)
        try:
            with self.guard("rebuilding the store"):
                return rebuild(self, self.history_set_aside)
        except OSError as exc:
            raise OodevalError(
                f"cannot rebuild {self.path} ({exc.strerror or exc}); free disk space or "
                "fix the folder's permissions, then run again"
            ) from None

    # -- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the file and release the writer's lock."""
        self.disconnect()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
