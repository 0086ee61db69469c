"""Verifying a study store without changing it: what ``oodeval study verify`` checks and prints.

`verify_store` reads the store as every command does (`oodeval.study.store.ResultStore.read`:
SQLite's full integrity check, the config against its checksum, every unit's rows against its
integrity record, rows of no stored unit), so its verdict is theirs (`StoreHealth.damage`); it
adds the units set aside earlier and the store's migrations and rebuilds. `StoreVerification`
holds the findings, its verdict and the report's lines. Nothing is written.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodeval.study.store._integrity import StoreHealth, printable
from oodeval.study.store.database import or_default
from oodeval.study.store.records import StoreDamagedError
from oodeval.study.store.repair import count_quarantined, rebuilt_records
from oodeval.study.store.result_store import ResultStore
from oodeval.study.store.schema import RESTORE_HINT, STORE_NAME


@dataclass
class StoreVerification:
    """`verify_store`'s findings: health, plus what only a full check looks at."""

    path: Path
    health: StoreHealth | None = None
    unreadable: str | None = None
    schema: str | None = None
    quarantined: int = 0
    history: list[str] = field(default_factory=list)
    damaged_copies: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Everything verified: no damage (`StoreHealth.damage`: SQLite's full check passes,
        every unit's checksum matches, no row belongs to no unit, the config history is
        intact) and no unit lacks a checksum."""
        h = self.health
        return h is not None and not h.damage() and not h.unverified

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
        out.append(
            f"units: {h.total} stored: {h.verified} verified, {len(h.damaged)} damaged, "
            f"{len(h.unverified)} without checksum"
        )
        out += [f"damaged: {k}: {v}" for k, v in h.damaged.items()]
        out += [f"damaged: config history {k}: {v}" for k, v in h.history_damage.items()]
        if h.stray_rows is None:
            out.append("stray rows: cannot be counted (the tables cannot be read in full)")
        elif h.stray_rows:
            out.append(f"stray rows: {h.stray_rows} result/checkpoint rows of no stored unit")
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
            return f"DAMAGED; {RESTORE_HINT}"
        if h.damage():
            return (
                "DAMAGED; `oodeval study run` with the same config moves the damaged units "
                "aside (rebuilding the file when SQLite's check fails) and runs them again"
            )
        return (
            "UNVERIFIED: units without checksums (stored by an older oodeval); `oodeval "
            "study run` with the same config checks the file and adds them"
        )


def verify_store(directory: str | Path) -> StoreVerification:
    """Verify a study store without writing to it (in a folder this user may not write too):
    SQLite's full integrity check, the config's checksum, every unit's row counts and checksum,
    stray rows. A missing store, or one that cannot be read for a reason other than damage, is
    an OodevalError; an unreadable one is a finding (``unreadable``)."""
    path = Path(directory) / STORE_NAME
    report = StoreVerification(path)
    report.damaged_copies = sorted(
        p.name
        for p in Path(directory).glob(f"{STORE_NAME}.damaged-*")
        if not p.name.endswith(("-wal", "-shm"))
    )
    try:
        store = ResultStore(directory)
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
        study = or_default(store.study_rows, {})
        report.schema = study.get("schema", "1")
        report.history = _repairs(study) + [r.line() for r in contents.history if r.recorded]
        report.quarantined = or_default(lambda: count_quarantined(store), 0)
    return report


def _repairs(study: Mapping[str, Any]) -> list[str]:
    """One line per migration and rebuild recorded in the ``study`` table."""
    lines = []
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        if "migrated" in study:
            m = json.loads(study["migrated"])
            lines.append(
                f"checksums added on {m['at']} to {m['units']} unit(s) of a schema "
                f"{m['from_schema']} store (they guard against damage since then)"
            )
    for r in rebuilt_records(study):
        with contextlib.suppress(TypeError, KeyError):
            lines.append(
                f"rebuilt on {r['at']} after SQLite's check failed: {r['kept']} unit(s) "
                f"kept, {r['damaged']} moved aside; damaged file: {r['damaged_copy']}"
            )
    return lines
