"""Merge study folders: ``oodeval study merge A B ... --out C`` combines studies run apart.

Studies merge when their configs are compatible in the sense of growing a study
(`oodeval.study.config.config_changes`): they may differ in algorithms, seeds, scenarios and
imports (and in ``name`` and ``measures``), never in what makes units comparable (steps, model,
data, trainer options, the hyperparameters of an algorithm both run, a scenario's parameters).
The merged config is the union of the inputs' axes, recorded in C's config history.

Every input must verify (SQLite's full integrity check, every unit's checksum): a damaged input
is refused, naming it; `oodeval study run` with its config repairs it first. Each unit is copied
into C exactly as stored (its rows, checksum, time stamps), in its own transaction, under C's
writer lock, so an interrupted merge resumes: running the same command again completes it.

Only the units of each input's current config are copied (units a grown study keeps outside
it are left out, and the summary says how many). A unit present in several inputs (or already in
C) is kept once when its results are identical
and refused, naming the unit and the inputs, when they differ. *Identical results* means the
same `result_identity`: a SHA-256 over the unit's status, family, scenario parameters, algorithm,
seed, hyperparameters, steps and model, and all its result rows and checkpoint rows, exactly.
Timings, versions, start and finish times and attempt counts differ between two runs of the same
unit and are not compared (the first input's are kept). A ``done`` unit wins over a ``failed``
one; of failed units only, the first is kept (``study run --retry-failed`` runs it again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodeval.errors import OodevalError, option
from oodeval.study.config import (
    DEFAULT_MEASURES,
    ConfigError,
    config_changes,
    config_from_dict,
    scenario_key,
    stored_meaning,
)
from oodeval.study.identity import distinct_stores, file_identity, same_store
from oodeval.study.runner import StudyInterrupted, progress_bar
from oodeval.study.store import (
    STORE_NAME,
    ResultStore,
    StoreContents,
    StoreDamagedError,
    StoredUnit,
    current_contents,
    printable,
    unit_checksum,
)

#: Keys that name a value of a growing axis: the merged config lists the union of the inputs'.
_UNION_KEYS = ("algorithms", "seeds", "measures")
#: A key a stored config leaves out has its default.
_DEFAULTS = {"measures": list(DEFAULT_MEASURES)}


@dataclass(frozen=True)
class MergeSummary:
    """What `merge_studies` did: units copied from each input, identical duplicates kept once,
    units C already held, failed units of C replaced by done ones, and the merged grid."""

    directory: Path
    copied: dict[str, int]
    duplicates: int
    already: int
    replaced_failed: int
    planned: int
    left_out: dict[str, int] = field(default_factory=dict)
    #: one per input left out as the same store as another (``drop_duplicates``)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The one-line summary `oodeval study merge` prints."""
        total = sum(self.copied.values())
        inputs = ", ".join(f"{n} from {name}" for name, n in self.copied.items())
        return (
            f"{total} units copied ({inputs}); {self.duplicates} identical duplicate(s) kept "
            f"once; {self.already} already in {self.directory}"
            + (
                f"; {self.replaced_failed} failed unit(s) replaced by done ones"
                if self.replaced_failed
                else ""
            )
            + "".join(
                f"; {n} unit(s) outside the current config of {name} not copied"
                for name, n in self.left_out.items()
            )
            + f"; {self.planned} units planned by the merged config; store: "
            f"{self.directory / STORE_NAME}"
        )


@dataclass
class _Input:
    """One study folder to merge, read and verified."""

    label: str
    contents: StoreContents

    @property
    def config(self) -> dict[str, Any]:
        assert self.contents.config is not None
        return self.contents.config

    @property
    def names(self) -> dict[str, str]:
        """Built scenario names of every spec the folder's configs ever had."""
        out: dict[str, str] = {}
        for record in self.contents.history:
            out.update(record.scenario_names)
        return out


def result_identity(unit: StoredUnit) -> str:
    """SHA-256 of what makes two runs of a unit the same result (see the module docstring).

    Two copies of a unit with the same identity hold bit-identical result and checkpoint rows,
    computed for the same scenario, algorithm, seed, hyperparameters, steps and model.
    """
    fields = [unit.key, unit.value("status")]
    for column in ("family", "params", "algorithm", "seed", "hparams", "steps", "model"):
        value = unit.value(column)
        if column in ("params", "hparams"):  # JSON: compared as data, not as text
            value = json.dumps(unit.decoded.get(column, value), sort_keys=True)
        fields.append(value)
    return unit_checksum(fields, unit.results, unit.checkpoints)


def merge_studies(
    inputs: Sequence[str | Path],
    directory: str | Path,
    *,
    progress: bool = False,
    drop_duplicates: bool = False,
) -> MergeSummary:
    """Merge the study folders `inputs` into `directory` (created, or resumed); see the module
    docstring for the rules. Raises OodevalError (one line) for an input that is missing,
    damaged or incompatible, the same store as another input (`oodeval.study.identity`: one
    file, or a copy holding the same units; left out with a note in ``MergeSummary.notes``
    when `drop_duplicates`), and for a unit whose copies differ; nothing is written then.

    Raises `oodeval.study.StudyInterrupted` on Ctrl-C once the unit being copied is committed
    or rolled back; running the merge again resumes it.
    """
    out = Path(directory)
    folders, notes = _checked_paths(inputs, out, drop_duplicates)
    read = [_read_input(folder) for folder in folders]
    kept, more = _distinct_inputs(read, folders, drop_duplicates)
    folders = [f for f, i in zip(folders, read, strict=True) if any(i is k for k in kept)]
    read, notes = kept, notes + more
    _check_compatible(read)
    if not (out / STORE_NAME).exists():
        _plan(read, None)  # refuse differing copies before creating anything
    with ResultStore(out, create=True) as store:  # the writer: holds C/study.lock
        plan: _Plan | None = None
        try:
            config, names, plan = _prepare(store, out, read)
            store.bind_config(
                config,
                scenario_names=names,
                origin="merge of " + ", ".join(str(f.resolve()) for f in folders),
            )
            copied = dict.fromkeys((i.label for i in read), 0)
            with progress_bar(len(plan.copy), enabled=progress, desc="merge") as bar:
                for label, unit in plan.copy:
                    if store.adopt_unit(unit):
                        copied[label] += 1
                    bar.update(1)
        except KeyboardInterrupt:  # the unit being copied was committed or rolled back
            keys = plan.keys if plan is not None else []
            stored = store.statuses()
            raise StudyInterrupted(sum(k in stored for k in keys), len(keys)) from None
    planned = len(config["scenarios"]) * len(config["algorithms"]) * len(config["seeds"])
    return MergeSummary(
        out, copied, plan.duplicates, plan.already, plan.replaced, planned, plan.left_out, notes
    )


def _prepare(
    store: ResultStore, out: Path, read: Sequence[_Input]
) -> tuple[dict[str, Any], dict[str, str], _Plan]:
    """The merged config (C's own study, if any, first), its scenario names, and the plan."""
    target = _target(store, out)
    everyone = ([target] if target is not None else []) + list(read)
    _check_compatible(everyone)
    config = _union_config([i.config for i in everyone])
    names: dict[str, str] = {}
    for item in everyone:
        names.update(item.names)
    keys = {scenario_key(_spec(s)) for s in config["scenarios"]}
    names = {k: v for k, v in names.items() if k in keys}
    return config, names, _plan(read, target)


def _checked_paths(
    inputs: Sequence[str | Path], out: Path, drop: bool
) -> tuple[list[Path], list[str]]:
    """The input folders once each by identity (a repeat refused, or left out with a note when
    `drop`), after refusing an --out that is one of them."""
    if not inputs:
        raise OodevalError("give at least one study folder to merge")
    folders = [Path(i) for i in inputs]
    found = [file_identity(folder) for folder in folders]
    target = file_identity(out)
    if any(same_store(f, target) for f in found) or out.resolve() in {f.resolve() for f in folders}:
        raise OodevalError(
            f"{option('directory', str(out))} is one of the inputs; merge into another folder "
            f"(it may hold a study to merge into, given only as {option('directory')})"
        )
    kept, notes = distinct_stores(found, drop=drop, allow_shared=True, harm=_HARM)
    index = {id(k) for k in kept}
    return [f for f, i in zip(folders, found, strict=True) if id(i) in index], notes


def _distinct_inputs(
    read: Sequence[_Input], folders: Sequence[Path], drop: bool
) -> tuple[list[_Input], list[str]]:
    """The inputs without a copy of an earlier one (the same stored units): refused, or left
    out with a note when `drop`. Inputs that share some units merge (a shared unit once)."""
    found = [
        file_identity(folder, item.label).with_units(item.contents.fingerprint())
        for item, folder in zip(read, folders, strict=True)
    ]
    kept, notes = distinct_stores(found, drop=drop, allow_shared=True, harm=_HARM)
    index = {id(k) for k in kept}
    return [i for i, f in zip(read, found, strict=True) if id(f) in index], notes


#: What a repeated input would do, for the refusal.
_HARM = "it adds nothing to the merge but its units a second time"


def _read_input(folder: Path) -> _Input:
    """Read and verify one input: SQLite's full integrity check and every unit's checksum."""
    if not (folder / STORE_NAME).is_file():
        raise OodevalError(f"no study in {folder} ({STORE_NAME} missing); check the path")
    with ResultStore(folder) as store:
        contents = store.read()
    _refuse_unverified(contents, str(folder), "then merge")
    return _Input(str(folder), contents)


def _target(store: ResultStore, out: Path) -> _Input | None:
    """C's study, when it already holds one (an earlier merge, or a study to merge into)."""
    contents = store.read()
    if contents.config is None and not contents.units:
        return None
    label = option("directory", str(out))
    _refuse_unverified(contents, label, "then merge into it")
    return _Input(label, contents)


def _refuse_unverified(contents: StoreContents, label: str, then: str) -> None:
    health = contents.health
    run = f"run `oodeval study run` with its config on it first ({then})"
    if health.problems:
        raise StoreDamagedError(
            f"{label} is damaged: {health.problems[0]}; restore it from a backup"
        )
    if health.damage():
        raise StoreDamagedError(
            f"{label} is damaged: {'; '.join(health.damage())}; {run}: it moves the damaged "
            "units (and rows) aside and runs them again"
        )
    if health.unverified:
        raise OodevalError(
            f"{label} holds {len(health.unverified)} unit(s) without checksums (stored by an older "
            f"oodeval), so they cannot be verified; {run}: it checks the file and adds them"
        )
    if contents.config is None:
        raise OodevalError(f"{label} holds no study config; was its run interrupted early?")


def _check_compatible(items: Sequence[_Input]) -> None:
    """Refuse, naming the keys and the two folders, the first pair of incompatible configs."""
    for i, first in enumerate(items):
        for second in items[i + 1 :]:
            names = {**first.names, **second.names}
            changes = config_changes(first.config, second.config, scenario_names=names)
            keys = [key for key, _old, _new in changes.incompatible]
            if _mode(first.config) != _mode(second.config):
                keys.append("hparams_mode")  # one merged config cannot hold two modes
            if keys:
                keys = list(dict.fromkeys(keys))
                raise OodevalError(
                    f"{first.label} and {second.label} cannot be merged: their units would not "
                    f"compare (they differ in {', '.join(keys)}); only studies that differ in "
                    "algorithms, seeds, scenarios or imports merge"
                )


def _mode(config: Mapping[str, Any]) -> Any:
    return config.get("hparams_mode", "default")


def _spec(spec: Any) -> dict[str, Any]:
    return {"family": spec} if isinstance(spec, str) else dict(spec)


def _union_config(configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The first config with every other's algorithms, seeds, measures, scenarios, imports and
    per-algorithm hyperparameters added (in order of appearance), checked by `config_from_dict`
    without running the studies' code (their ``imports``)."""
    merged = json.loads(json.dumps(stored_meaning(configs[0])))
    merged.setdefault("import_digests", {})
    for other in configs[1:]:
        for key in _UNION_KEYS:
            merged[key] = list(merged.get(key, _DEFAULTS.get(key, [])))
            merged[key] += [
                v for v in other.get(key, _DEFAULTS.get(key, [])) if v not in merged[key]
            ]
        have = {scenario_key(_spec(s)) for s in merged["scenarios"]}
        merged["scenarios"] = list(merged["scenarios"]) + [
            s for s in other.get("scenarios") or [] if scenario_key(_spec(s)) not in have
        ]
        digests = dict(other.get("import_digests") or {})
        present = {_import_identity(i, merged["import_digests"]) for i in merged.get("imports", [])}
        for entry in other.get("imports") or []:
            if _import_identity(entry, digests) not in present:
                merged["imports"] = [*merged.get("imports", []), entry]
                if entry in digests:
                    merged["import_digests"][entry] = digests[entry]
        hparams = dict(merged.get("hparams") or {})
        for algorithm, table in (other.get("hparams") or {}).items():
            hparams.setdefault(algorithm, table)
        merged["hparams"] = hparams
    try:
        return config_from_dict(merged, run_user_code=False).to_dict()  # runs no imports
    except ConfigError as exc:
        raise OodevalError(f"the merged config is not valid: {exc}") from None


def _import_identity(entry: str, digests: Mapping[str, str]) -> str:
    return f"{Path(entry).name}@{digests[entry]}" if entry in digests else entry


@dataclass
class _Plan:
    """What a merge copies ((input label, unit) in order) and what it finds along the way."""

    copy: list[tuple[str, StoredUnit]]
    keys: list[Any]
    left_out: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    already: int = 0
    replaced: int = 0


def _plan(read: Sequence[_Input], target: _Input | None) -> _Plan:
    """Choose one copy of every unit (a done one first), refusing differing done copies."""
    candidates: dict[Any, list[tuple[str, StoredUnit]]] = {}
    left_out = {}
    for item in read:
        current, outside = current_contents(item.contents)
        left_out[item.label] = len(outside)
        for unit in current.usable:
            candidates.setdefault(unit.key, []).append((item.label, unit))
    held = {u.key: u for u in target.contents.usable} if target is not None else {}
    plan = _Plan([], list(candidates), left_out={k: v for k, v in left_out.items() if v})
    conflicts: list[str] = []
    for key, copies in candidates.items():
        done = [(label, u) for label, u in copies if u.value("status") == "done"]
        label, chosen = done[0] if done else copies[0]
        plan.duplicates += max(len(done) - 1, 0)
        for other_label, other in done[1:]:
            if result_identity(other) != result_identity(chosen):
                conflicts.append(f"unit {printable(key)} differs between {label} and {other_label}")
        existing = held.get(key)
        if existing is None or target is None:  # nothing held without a target
            plan.copy.append((label, chosen))
        elif existing.value("status") == "done":
            if chosen.value("status") == "done":
                if result_identity(existing) != result_identity(chosen):
                    conflicts.append(
                        f"unit {printable(key)} differs between {target.label} and {label}"
                    )
                else:
                    plan.already += 1
        elif chosen.value("status") == "done":
            plan.copy.append((label, chosen))
            plan.replaced += 1
        else:
            plan.already += 1
    if conflicts:
        more = len(conflicts) - 1
        raise OodevalError(
            f"{conflicts[0]} (its result or checkpoint rows, or its hyperparameters, are not "
            "identical)"
            + (f", and {more} more unit(s)" if more else "")
            + "; a merge keeps a unit "
            "found twice only when both runs gave the same numbers: merge studies computed the "
            "same way (code, precision, hardware), or leave one of the two inputs out"
        )
    return plan
