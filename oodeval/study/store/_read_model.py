"""The read model of a study: what its current config asks for, and its stored units as frames.

A store keeps every unit it ever ran (`oodeval.study.store`); a study is read through its
*current* config: `UnitScope` is the grid of units a config asks for (scenarios x algorithms x
seeds), `current_contents` restricts a verified read to it, and `load_study` gives the `Study`
every analysis, report and status works from (units and results as DataFrames, the config, the
health verdict, the history). `current_checkpoints` is the checkpoint frame of the same units.
Read only: nothing here writes to a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from oodeval._text import safe_text
from oodeval.errors import OodevalError, option
from oodeval.report.notebook import Displayed, HtmlParts
from oodeval.study.config import IMPORT_VERSION_PREFIX, scenario_key
from oodeval.study.store._exported import is_export, read_export
from oodeval.study.store._integrity import NAMED_IN_LINE, StoreHealth, printable
from oodeval.study.store.records import (
    ConfigRecord,
    StoreContents,
    StoreDamagedError,
    unit_key,
)
from oodeval.study.store.result_store import ResultStore
from oodeval.study.store.schema import UNIT_COLUMNS
from oodeval.tables import Table, render_frame, text_table


@dataclass(frozen=True)
class UnitScope:
    """The units a config asks for: its scenarios (by built name) x algorithms x seeds.

    ``scenarios`` is None when the built names of the config's scenarios are not all known (a
    store recorded before they were kept): then every stored scenario counts as the config's.

    >>> scope = UnitScope(("s",), ("ERM", "IRM"), (0,))
    >>> scope.why_outside("s", "VREx", 0), scope.why_outside("s", "IRM", 0)
    ('algorithm VREx', None)
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

    @classmethod
    def current(cls, config: Mapping[str, Any], history: list[ConfigRecord]) -> UnitScope:
        """The scope of the current `config`, with the scenario names its history row keeps
        (none when the last row is not this config)."""
        last = history[-1] if history else None
        names = last.scenario_names if last is not None and last.config == config else {}
        return cls.of(config, names)

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


def current_contents(contents: StoreContents) -> tuple[StoreContents, dict[str, str]]:
    """`contents` restricted to the units of its current config, and {unit key: the axis that
    leaves it out} of the usable units left out (kept in the store)."""
    scope = UnitScope.current(contents.config or {}, contents.history)
    at = {c: i for i, c in enumerate(UNIT_COLUMNS)}
    kept, outside = [], {}
    for unit in contents.units:
        row = unit.row
        try:
            why = scope.why_outside(row[at["scenario"]], row[at["algorithm"]], row[at["seed"]])
        except (TypeError, ValueError):
            why = None  # a damaged row: verification names it
        if why is None:
            kept.append(unit)
        elif unit.damage is None:
            outside[printable(unit.key)] = why
    current = StoreContents(contents.config, kept, contents.health, contents.history)
    return current, outside


def current_checkpoints(directory: str | Path) -> pd.DataFrame:
    """The checkpoint rows of the current config's ``done`` units of a study folder, verified
    (`oodeval.study.store.ResultStore.checkpoints_frame`'s columns)."""
    with ResultStore(directory) as store:
        contents = store.verified_contents()
    return current_contents(contents)[0].checkpoints_frame()


@dataclass(repr=False)
class Study(Displayed):
    """A stored study, loaded: its current config, the units it asks for and their results.

    ``units`` has one row per recorded unit of the current config (its scenarios x algorithms x
    seeds) that verifies (see the ``units`` table; ``params``, ``hparams``, ``timings`` and
    ``versions`` decoded to dicts); ``results`` one row per (unit_key, fold, environment) of
    those units with ``error`` and ``count``. ``outside`` maps each stored unit the current
    config does not ask for (a removed algorithm, seed or scenario: kept in the store, used by
    no analysis) to the axis that leaves it out. ``health`` is what verifying the store found;
    when damaged units were excluded (``load_study(..., exclude_damaged=True)``) they are in
    ``health.damaged`` and in no frame. ``history`` is the store's config history.
    ``fingerprint`` holds the (unit key, checksum) of every stored unit
    (`oodeval.study.store.StoreContents.fingerprint`): what tells a copy of the store from
    another study (`oodeval.study.identity`).
    """

    directory: Path
    config: dict[str, Any]
    units: pd.DataFrame
    results: pd.DataFrame
    health: StoreHealth | None = None
    outside: dict[str, str] = field(default_factory=dict)
    history: list[ConfigRecord] = field(default_factory=list)
    fingerprint: frozenset[tuple[Any, str]] = frozenset()

    @property
    def planned(self) -> int:
        """How many units the config asks for (scenarios x algorithms x seeds)."""
        c = self.config
        return len(c["scenarios"]) * len(c["algorithms"]) * len(c["seeds"])

    @property
    def scope(self) -> UnitScope:
        """The units the current config asks for."""
        return UnitScope.current(self.config, self.history)

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
        damaged = [k.rsplit("|", 2) for k in self._damaged_in_config()]
        scenarios = scope.scenarios
        if scenarios is None:
            scenarios = tuple(dict.fromkeys(self.units["scenario"]))
        axes = {"scenario": scenarios, "algorithm": scope.algorithms, "seed": scope.seeds}
        sizes = {a: len(v) for a, v in axes.items()}
        sizes["scenario"] = len(self.config["scenarios"])
        rows = []
        for position, (axis, values) in enumerate(axes.items()):
            per_value = self.planned // max(sizes[axis], 1)
            for value in values:
                shown = f"seed={value}" if axis == "seed" else str(value)
                bad = sum(1 for parts in damaged if parts[position] == shown)
                rows.append((axis, str(value), *self._axis_counts(axis, value, per_value, bad)))
        columns = ["axis", "value", "planned", "done", "failed", "damaged", "pending"]
        return pd.DataFrame.from_records(rows, columns=columns)

    def _axis_counts(self, axis: str, value: Any, planned: int, damaged: int) -> tuple:
        """(planned, done, failed, damaged, pending) of the units with `value` on `axis`."""
        mine = self.units[self.units[axis] == value]
        done = int((mine["status"] == "done").sum())
        failed = int((mine["status"] == "failed").sum())
        return planned, done, failed, damaged, planned - done - failed - damaged

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
        """Warnings for finished units computed by different code: different digests of
        oodeval's code (``oodeval_source`` in ``versions``), or, per algorithm, different
        versions of an imported module (``versions`` of each unit,
        `oodeval.study.worker.import_versions`)."""
        notes = []
        versions = list(self.units["versions"]) if "versions" in self.units else []
        digests = {(v or {}).get("oodeval_source") for v in versions} - {None}
        if len(digests) > 1:
            notes.append(
                f"the units were computed by {len(digests)} different versions of the oodeval "
                "sources (see `versions` in the units table); results may not be comparable"
            )
        for name, by_algorithm in sorted(self._import_digests().items()):
            changed = sorted(a for a, d in by_algorithm.items() if len(d) > 1)
            if changed:
                count = max(len(by_algorithm[a]) for a in changed)
                notes.append(
                    f"the units of {', '.join(changed)} were computed with {count} different "
                    f"versions of the imported module {name} (its code changed between runs; "
                    "digests in `versions` of the units table); their numbers may not compare"
                )
        return notes

    def status_line(self) -> str:
        """The first line of `oodeval study status`: the study's name and its unit counts
        (`counts`), e.g. ``study s: 8 done, 0 failed, 4 pending (of 12)``."""
        counts = self.counts()
        damaged = f"{counts['damaged']} damaged, " if counts["damaged"] else ""
        return (
            f"study {self.config.get('name')}: {counts['done']} done, {counts['failed']} "
            f"failed, {damaged}{counts['pending']} pending (of {counts['planned']})"
        )

    def status_table(self) -> pd.DataFrame:
        """The table of `oodeval study status`: `coverage`, without its ``damaged`` column when
        no unit is damaged."""
        coverage = self.coverage()
        return coverage if coverage["damaged"].any() else coverage.drop(columns="damaged")

    def status_notes(self, directory: str | Path | None = None) -> list[str]:
        """The lines `oodeval study status` prints under its table: notes, failures, damage
        and the store's verification; `directory` is the folder as the user named it (default:
        `directory`), which the hint to ``oodeval study verify`` repeats."""
        notes = [self.data_note(), self.outside_note(), *self.code_notes()]
        lines = [f"note: {n}" for n in filter(None, notes)]
        failed = self.units[self.units["status"] == "failed"]
        for unit in failed.itertuples(index=False):
            lines.append(f"failed: {printable(unit.unit_key)}: {printable(unit.failure)}")
        if self.health is not None:
            lines += _health_lines(self.health, self.directory if directory is None else directory)
        return lines

    def render(self, fmt: str = "table", directory: str | Path | None = None) -> str:
        """What ``oodeval study status --format table|markdown`` prints: `status_line`, the
        `status_table` and the `status_notes` (a bullet list in markdown)."""
        title = safe_text(self.status_line())
        coverage, notes = self.status_table(), self.status_notes(directory)
        if fmt == "markdown":
            bullets = "\n".join(safe_text(f"- {n}") for n in notes)
            return "\n\n".join([title, render_frame(coverage, "markdown"), bullets])
        if fmt != "table":
            raise OodevalError(f"fmt is {fmt!r}; Study.render writes table or markdown")
        rows = [[str(v) for v in row] for row in coverage.itertuples(index=False)]
        return "\n".join([title, text_table(list(coverage.columns), rows), *map(safe_text, notes)])

    def __repr__(self) -> str:
        """One line: the folder and `status_line`."""
        return safe_text(f"<Study {self.directory}: {self.status_line()}>")

    def html_parts(self) -> HtmlParts:
        """`status_line`, the `status_notes`, then `status_table` (a notebook's display,
        `Displayed`)."""
        table = Table("Units per scenario, algorithm and seed", self.status_table())
        return HtmlParts(self.status_line(), [table], self.status_notes())

    def _import_digests(self) -> dict[str, dict[str, set[str]]]:
        """{imported module: {algorithm: the digests its done units recorded}}."""
        done = self.units[self.units["status"] == "done"] if len(self.units) else self.units
        seen: dict[str, dict[str, set[str]]] = {}
        for algorithm, v in zip(done.get("algorithm", []), done.get("versions", []), strict=True):
            for key, digest in (v or {}).items():
                if key.startswith(IMPORT_VERSION_PREFIX):
                    name = key[len(IMPORT_VERSION_PREFIX) :]
                    seen.setdefault(name, {}).setdefault(algorithm, set()).add(str(digest))
        return seen


def _health_lines(health: StoreHealth, directory: str | Path) -> list[str]:
    """The lines of `Study.status_notes` on the store: damaged units and history, SQLite's
    check, stray rows, and what verification found."""
    lines = [f"damaged: {key}: {reason}" for key, reason in health.damaged.items()]
    for key, reason in health.history_damage.items():
        lines.append(f"damaged: config history {key}: {reason} (`study run` sets it aside)")
    if not health.sqlite_ok:
        lines.append(f"store: SQLite's {health.check_kind} FAILED: {health.sqlite_problem()}")
    if health.stray_problem():
        lines.append(f"damaged: {health.stray_problem()}")
    verify = f"`oodeval study verify {directory}` lists every problem"
    if not health.trusted:
        lines.append(
            "damaged store: analyze, report and variance refuse it; `oodeval study run` with the "
            f"same config moves the damage aside and runs the damaged units again; {verify}"
        )
    elif health.history_damage:
        lines.append(
            f"damaged store: its config history (the numbers do not depend on it: "
            f"{health.verified} units verified); {verify}"
        )
    elif health.unverified:
        lines.append(f"store: {health.notes()[-1]}")
    else:
        lines.append(f"store: verified ({health.verified} units match their checksums)")
    return lines


def load_study(directory: str | Path, *, exclude_damaged: bool = False) -> Study:
    """Read and verify a study folder written by `oodeval study run` (or `run_study`).

    The study holds the units of the current config (`Study.outside` names the others). Raises
    StoreDamagedError (naming the damage) when the store fails SQLite's integrity check, a
    unit fails verification or rows belong to no unit (`StoreHealth.damage`); with
    ``exclude_damaged=True`` the damaged units are left out instead and
    `Study.integrity_notes` says so. A damaged config is always refused. `directory` may also
    be a study exported to one file (`export_text`, by ``oodeval study export``).
    """
    if is_export(directory):
        e = read_export(directory)
        return Study(
            Path(directory), e.config, e.units, e.results, e.health, {}, e.history, e.fingerprint
        )
    with ResultStore(directory) as store:
        contents = store.read()
    health = contents.health
    if health.problems or (not health.trusted and not exclude_damaged):
        raise StoreDamagedError(
            health.refusal(None if health.problems else option("exclude_damaged", True))
        )
    if contents.config is None:
        raise OodevalError(f"{store.path} has no study config; was the run interrupted early?")
    health.excluded = exclude_damaged
    current, outside = current_contents(contents)
    return Study(
        Path(directory),
        contents.config,
        current.units_frame(),
        current.results_frame(),
        health,
        outside,
        contents.history,
        contents.fingerprint(),
    )
