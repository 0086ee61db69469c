"""A study as one text file: `export_text` writes it, `read_export` reads it back.

A study store is a SQLite database, fit for running and resuming but not for shipping beside a
paper or in a repository. An export is a long-form results file with the study's provenance in
its head: one ``#`` line each for the format, the oodeval version, the data digest, the config
(JSON), the names of its scenarios (JSON) and every unit of the current config (JSON: its
algorithm, seed, hyperparameters, status, timings and versions), then a CSV table with one row
per (unit, fold, environment)::

    # oodeval study export 1
    # oodeval: 0.1.0 (source dccbf609974cf6a0)
    # data: mnist sha256:f109e0c0...
    # config: {"algorithms": ["ERM", ...], ...}
    # scenario_names: {...}
    # unit: {"unit_key": "sr-cmnist/ratio=3:1/scale=1|ERM|seed=0", ...}
    scenario,algorithm,seed,fold,environment,error,count
    sr-cmnist/ratio=3:1/scale=1,ERM,0,all,e=0.00,0.4655,2000

``fold`` is a held-out environment (a leave-one-out model) or ``all`` (the model trained on all
given environments); ``error`` is written with Python's shortest round-trip repr, so reading the
file gives the stored floats bit for bit. Paths do not travel: a ``source`` that names a folder
is written as its kind and digest (``mnist@sha256:...``), so an export neither leaks where the
data lay nor pretends it is there.

Every analysis of a study folder runs on an export (`oodeval.study.load_study` reads either):
``study analyze``, ``study measures``, ``study summary`` and ``report``. An export is a user's
file like any other: read within `oodeval.limits`' bounds, JSON through `oodeval._json`, every
problem one `OodevalError` line naming the file line.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodeval._json import load_json
from oodeval._text import read_text, safe_text
from oodeval.errors import OodevalError
from oodeval.limits import SEED_LIMIT
from oodeval.study.store._integrity import StoreHealth, unit_checksum
from oodeval.study.store.records import ConfigRecord, unit_key
from oodeval.study.store.schema import JSON_COLUMNS, RESULT_COLUMNS, UNIT_COLUMNS
from oodeval.tables import json_value

__all__ = [
    "EXPORT_MAGIC",
    "ROW_COLUMNS",
    "ExportedStudy",
    "export_text",
    "is_export",
    "read_export",
]

#: The first line of every export (the number is the format's version).
EXPORT_MAGIC = "# oodeval study export 1"
#: The columns of an export's table.
ROW_COLUMNS = ("scenario", "algorithm", "seed", "fold", "environment", "error", "count")
_JSON_KEYS = ("config", "scenario_names", "unit")


def _source_name(source: Any, identity: Mapping[str, Any] | None) -> Any:
    """A ``kind:path`` source written as ``kind@digest`` (the digest names the content)."""
    if not isinstance(source, str) or not identity or ":" not in source:
        return source
    return f"{identity.get('kind', source.split(':', 1)[0])}@{identity.get('digest', '')}"


def _portable(config: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(config)
    out["source"] = _source_name(out.get("source"), out.get("source_identity"))
    return out


def export_text(study: Any) -> str:
    """The export of `study` (a loaded `Study`): its head lines, then its table, as text.

    Units of the current config are written, done and failed alike (a failed unit has no
    rows); the rows are those of the done units, sorted by unit, fold and environment.
    """
    config = _portable(study.config)
    identity = config.get("source_identity") or {}
    versions = [v for v in study.units.get("versions", []) if isinstance(v, dict)]
    oodeval = sorted({str(v.get("oodeval", "")) for v in versions} - {""})
    sources = sorted({str(v.get("oodeval_source", "")) for v in versions} - {""})
    head = [
        EXPORT_MAGIC,
        f"# oodeval: {', '.join(oodeval) or 'unknown'} (source {', '.join(sources) or 'unknown'})",
        f"# data: {identity.get('kind', 'unknown')} {identity.get('digest', 'unknown')}",
        "# config: " + json.dumps(config, sort_keys=True, allow_nan=False),
        "# scenario_names: "
        + json.dumps(_scenario_names(study), sort_keys=True, ensure_ascii=False),
    ]
    units = study.units.sort_values("unit_key", kind="stable")
    checksums = dict(getattr(study, "fingerprint", ()) or ())
    for row in units.to_dict("records"):
        unit: dict[str, Any] = {c: json_value(row.get(c)) for c in UNIT_COLUMNS}
        unit["checksum"] = checksums.get(row["unit_key"])
        unit["params"] = dict(unit["params"] or {})
        if "source" in unit["params"]:
            unit["params"]["source"] = _source_name(unit["params"]["source"], identity)
        head.append("# unit: " + json.dumps(unit, sort_keys=True, allow_nan=False))
    out = io.StringIO()
    out.write("\n".join(head) + "\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ROW_COLUMNS)
    names = units.set_index("unit_key")[["scenario", "algorithm", "seed"]]
    results = study.results.sort_values(["unit_key", "fold", "environment"], kind="stable")
    for key, fold, environment, error, count in results[["unit_key", *RESULT_COLUMNS]].itertuples(
        index=False
    ):
        scenario, algorithm, seed = names.loc[key]
        writer.writerow(
            [scenario, algorithm, int(seed), fold, environment, repr(float(error)), int(count)]
        )
    return out.getvalue()


def _scenario_names(study: Any) -> dict[str, str]:
    history = getattr(study, "history", None) or []
    return dict(history[-1].scenario_names) if history else {}


def is_export(path: str | Path) -> bool:
    """Whether `path` is a file that starts like an export (its first line is `EXPORT_MAGIC`).

    >>> is_export("no/such/file.csv")
    False
    """
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with p.open("rb") as handle:
            first = handle.read(len(EXPORT_MAGIC) + 2)
    except OSError:
        return False
    return first.decode("utf-8", "replace").splitlines()[:1] == [EXPORT_MAGIC]


def _fail(path: Path, line: int, problem: str) -> OodevalError:
    return OodevalError(f"{safe_text(path)} line {line}: {problem}")


def _head(path: Path, lines: list[str]) -> tuple[dict[str, Any], int]:
    """The head's values ({"config": ..., "scenario_names": ..., "unit": [...]}) and the index
    of the table's first line."""
    found: dict[str, Any] = {"unit": []}
    for index, line in enumerate(lines[1:], start=1):
        if not line.startswith("#"):
            return found, index
        key, sep, value = line[1:].strip().partition(": ")
        if key not in _JSON_KEYS or not sep:
            continue  # a remark line (oodeval, data, or the user's own)
        where = f"{safe_text(path)} line {index + 1}"
        try:
            parsed = load_json(value, where=where, fold_case=False)
        except ValueError as exc:
            raise _fail(path, index + 1, f"{key} is not valid JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise _fail(path, index + 1, f"{key} must be a JSON object")
        if key == "unit":
            found["unit"].append((index + 1, parsed))
        elif key in found:
            raise _fail(path, index + 1, f"a second {key} line; an export has one")
        else:
            found[key] = parsed
    raise _fail(path, len(lines), "the table is missing (a header row of " + _columns() + ")")


def _columns() -> str:
    return ",".join(ROW_COLUMNS)


def _units(path: Path, entries: list[tuple[int, dict[str, Any]]]) -> pd.DataFrame:
    rows: list[list[Any]] = []
    seen: dict[str, int] = {}
    for line, unit in entries:
        missing = [c for c in UNIT_COLUMNS if c not in unit]
        if missing:
            raise _fail(path, line, f"the unit has no {missing[0]!r}")
        seed = unit["seed"]
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_LIMIT:
            raise _fail(
                path, line, f"the unit's seed must be an integer in [0, 2^32), got {seed!r}"
            )
        for column in ("scenario", "algorithm", "status"):
            if not isinstance(unit[column], str):
                raise _fail(path, line, f"the unit's {column} must be a string")
        key = unit_key(unit["scenario"], unit["algorithm"], seed)
        if unit["unit_key"] != key:
            raise _fail(path, line, f"the unit's key is not {safe_text(key)}")
        if key in seen:
            raise _fail(path, line, f"unit {safe_text(key)} again (first at line {seen[key]})")
        seen[key] = line
        for column in JSON_COLUMNS:
            if unit[column] is not None and not isinstance(unit[column], dict):
                raise _fail(path, line, f"the unit's {column} must be a JSON object")
            unit[column] = unit[column] or {}
        checksum = unit.get("checksum")
        if checksum is not None and not (isinstance(checksum, str) and len(checksum) <= 128):
            raise _fail(path, line, "the unit's checksum must be a hex string")
        rows.append([unit[c] for c in UNIT_COLUMNS] + [checksum])
    frame = pd.DataFrame.from_records(rows, columns=[*UNIT_COLUMNS, "checksum"])
    frame["seed"] = frame["seed"].astype("int64")
    return frame


def _table(path: Path, text: str, first_line: int) -> pd.DataFrame:
    try:
        table = pd.read_csv(
            io.StringIO(text),
            dtype={"scenario": str, "algorithm": str, "fold": str, "environment": str},
            keep_default_na=False,
        )
    except (ValueError, pd.errors.ParserError) as exc:
        raise _fail(path, first_line, f"the table does not parse as CSV ({exc})") from None
    if tuple(table.columns) != ROW_COLUMNS:
        raise _fail(path, first_line, f"the table's header must be {_columns()}")
    for column in ("seed", "count"):
        values = pd.to_numeric(table[column], errors="coerce")
        bad = values.isna() | (values != values.round()) | (values < 0)
        if bad.any():
            at = int(np.flatnonzero(bad.to_numpy())[0])
            raise _fail(path, first_line + 1 + at, f"{column} must be a whole number >= 0")
        table[column] = values.astype("int64")
    error = pd.to_numeric(table["error"], errors="coerce")
    bad = ~error.between(0.0, 1.0)  # NaN is outside too
    if bad.any():
        at = int(np.flatnonzero(bad.to_numpy())[0])
        raise _fail(path, first_line + 1 + at, "error must be a number in [0, 1]")
    table["error"] = error.astype("float64")
    return table


@dataclass(frozen=True)
class ExportedStudy:
    """What an export holds, in the shapes of `oodeval.study.Study`'s fields."""

    config: dict[str, Any]
    units: pd.DataFrame
    results: pd.DataFrame
    health: StoreHealth
    history: list[ConfigRecord]
    fingerprint: frozenset[tuple[Any, str]]


def _rows(frame: pd.DataFrame | None) -> list[tuple[Any, ...]]:
    return [] if frame is None else list(frame[list(RESULT_COLUMNS)].itertuples(index=False))


def read_export(path: str | Path) -> ExportedStudy:
    """Read an export (`export_text`'s format); `oodeval.study.load_study` makes it a `Study`.

    Every unit's rows are checked against its head line: a row of no unit, a unit listed twice,
    a row twice, or a done unit without rows is refused in one line. The study's health counts
    every unit as verified (the file has no checksums to check; its fingerprint is computed from
    the store checksum each unit line carries, so that an export, its copies and the store it
    came from are one study to `study measures`).
    """
    p = Path(path)
    text = read_text(p, what="study export", save_as="an export written by oodeval study export")
    lines = text.split("\n")
    head, first = _head(p, lines)
    for key in ("config", "scenario_names"):
        if key not in head:
            raise _fail(p, first, f"the head has no {key} line")
    units = _units(p, head["unit"])
    table = _table(p, "\n".join(lines[first:]), first + 1)
    table["unit_key"] = [
        unit_key(s, a, int(e))
        for s, a, e in zip(table["scenario"], table["algorithm"], table["seed"], strict=True)
    ]
    known = set(units["unit_key"])
    stray = ~table["unit_key"].isin(known)
    if stray.any():
        at = int(np.flatnonzero(stray.to_numpy())[0])
        raise _fail(p, first + 2 + at, "the row belongs to no unit of the head")
    twice = table.duplicated(["unit_key", "fold", "environment"])
    if twice.any():
        at = int(np.flatnonzero(twice.to_numpy())[0])
        raise _fail(p, first + 2 + at, "a second row for this unit, fold and environment")
    done = set(units.loc[units["status"] == "done", "unit_key"])
    empty = sorted(done - set(table["unit_key"]))
    if empty:
        raise OodevalError(f"{safe_text(p)}: unit {safe_text(empty[0])} is done but has no rows")
    results = table[["unit_key", *RESULT_COLUMNS]].sort_values(
        ["unit_key", "fold", "environment"], kind="stable", ignore_index=True
    )
    versions = sorted({str(v.get("oodeval", "")) for v in units["versions"]} - {""})
    record = ConfigRecord(
        1, head["config"], dict(head["scenario_names"]), "", ", ".join(versions), "export"
    )
    # a unit is known by its store's checksum, so that an export and the store it came from
    # are one study to `oodeval.study.identity`; a unit exported without one by its content
    by_unit = dict(tuple(results.groupby("unit_key", sort=False)))
    fingerprint = frozenset(
        (key, checksum or unit_checksum(row, _rows(by_unit.get(key)), []))
        for key, checksum, row in zip(
            units["unit_key"],
            units.pop("checksum"),
            units.itertuples(index=False),
            strict=True,
        )
    )
    health = StoreHealth(p, verified=len(units))
    return ExportedStudy(head["config"], units, results, health, [record], fingerprint)
