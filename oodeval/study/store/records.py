"""The record types of a study store: a unit to store, a unit read back, a config history row,
what one verified read found, and the errors and warnings a store raises.

`UnitRecord` is a unit as stored (what a run writes; `unit_values` is its ``units`` row);
`StoredUnit` is one read back with its rows and the verdict on them; `ConfigRecord` is one row of
the config history; `StoreContents` is everything one verified read (`ResultStore.read`) found,
with the frames readers build from it. No SQL here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from oodeval.errors import OodevalError
from oodeval.study.store._integrity import StoreHealth, unit_checksum
from oodeval.study.store.schema import (
    CHECKPOINT_COLUMNS,
    JSON_COLUMNS,
    RESULT_COLUMNS,
    UNIT_COLUMNS,
)


class StoreDamagedError(OodevalError):
    """The store (or units in it) failed SQLite's check or its checksums; the message says how."""


class StoreIntegrityWarning(UserWarning):
    """Numbers were computed from a store whose units are not all verified (damaged units left
    out on request, or units without checksums); the message is one of
    `oodeval.study.store.Study.integrity_notes`."""


def unit_key(scenario: str, algorithm: str, seed: int) -> str:
    """The primary key of a unit: ``"<scenario>|<algorithm>|seed=<seed>"``.

    >>> unit_key("sr-cmnist/ratio=3:1/scale=1", "ERM", 0)
    'sr-cmnist/ratio=3:1/scale=1|ERM|seed=0'
    """
    return f"{scenario}|{algorithm}|seed={int(seed)}"


@dataclass(frozen=True)
class UnitRecord:
    """One unit as a worker reports it and the store writes it (`ResultStore.record_unit`): its
    ``units`` row (JSON fields as Python objects), its result rows and its checkpoints.

    A worker returns one (`oodeval.study.worker.run_task`): ``done`` with its `rows`, or
    ``failed`` with the reason; the driver writes it as it is. `warnings` are the distinct
    warnings the unit raised (``"Category: message"``), which the driver prints once per run;
    they are not stored.
    """

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
    #: (fold, environment, error, count) of each evaluated environment: the ``results`` rows
    rows: Sequence[Sequence[Any]] = field(default=(), repr=False, compare=False)
    #: what the unit warned about, for the driver to print (not stored)
    warnings: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def key(self) -> str:
        return unit_key(self.scenario, self.algorithm, self.seed)


def unit_values(record: UnitRecord, attempts: int) -> tuple:
    """The ``units`` row of `record` (`UNIT_COLUMNS` order), each value of its column's type, so
    what SQLite returns equals what was hashed.

    >>> row = unit_values(UnitRecord("s", "f", {}, "ERM", 0, {"lr": 0.1}, 5, "mlp", "done"), 1)
    >>> row[0], row[6], row[-1]
    ('s|ERM|seed=0', '{"lr": 0.1}', 1)
    """
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


def _json(value: Any) -> str:
    return json.dumps(value if value is not None else {}, sort_keys=True, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


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


@dataclass
class StoreContents:
    """What one verified read of a store found: the config, every unit, the health verdict.

    `oodeval.study.store.current_contents` restricts it to the units of the current
    config.
    """

    config: dict[str, Any] | None
    units: list[StoredUnit]
    health: StoreHealth
    history: list[ConfigRecord] = field(default_factory=list)

    def fingerprint(self) -> frozenset[tuple[Any, str]]:
        """(unit key, checksum) of every unit read: two stores with units in common hold copies
        of the same runs (a checksum covers the unit's row, time stamps included, and all its
        rows); `oodeval.study.identity` refuses to count them twice. A unit without a stored
        checksum (schema 1) has the one its rows give (`oodeval.study.store.unit_checksum`).
        """
        return frozenset(
            (u.key, str(u.integrity[-1]) if u.integrity and u.integrity[-1] else _checksum(u))
            for u in self.units
        )

    @property
    def usable(self) -> list[StoredUnit]:
        """Units whose numbers may be used: verified, or unverified (schema 1) but readable."""
        return [u for u in self.units if u.damage is None]

    def units_frame(self) -> pd.DataFrame:
        """The usable units, JSON columns decoded, sorted by unit key."""
        frame = pd.DataFrame.from_records(
            [u.row[: len(UNIT_COLUMNS)] for u in self.usable], columns=list(UNIT_COLUMNS)
        )
        for column in JSON_COLUMNS:
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


def _checksum(unit: StoredUnit) -> str:
    return unit_checksum(unit.row[: len(UNIT_COLUMNS)], unit.results, unit.checkpoints)
