"""Run a study: every (scenario, algorithm, seed) unit on an executor, resumably.

The driver plans the units, skips those the store already holds, hands the rest to an executor
(`oodeval.study.executors`: local worker processes by default, Ray or Slurm) and alone writes each
finished unit to the store in one transaction. A unit that raises — a NaN loss
(``TrainingDiverged``) or any other exception — is recorded as ``failed`` with its reason and the
study goes on; failed units are retried only when asked (``retry_failed=True``,
``--retry-failed``). Warnings raised in units are printed once per run each.

Ctrl-C (or any exception) stops the executor at once, abandoning the units in flight: the store
keeps every unit finished before, and running the study again resumes it
(`StudyInterrupted` says how many units are stored).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oodeval._files import refuse_links
from oodeval._text import safe_text
from oodeval.environments.mnist import resolve_source
from oodeval.errors import OodevalError
from oodeval.study.config import (
    ConfigChanges,
    ScenarioSpec,
    StudyConfig,
    ValidatedConfig,
    build,
    data_note,
    import_backend,
    scenario_key,
    validate_config,
)
from oodeval.study.executors import Executor, make_executor
from oodeval.study.store import ResultStore, UnitRecord, unit_key
from oodeval.study.worker import UnitTask


@dataclass(frozen=True)
class RunSummary:
    """What `run_study` did: units planned, skipped (already stored), run, done and failed;
    `changes` says how the config grew (or shrank) a stored study (None for a new study);
    `data_note` what the outputs say about the data (`oodeval.study.config.data_note`)."""

    directory: Path
    planned: int
    skipped: int
    ran: int
    done: int
    failed: int
    wall_seconds: float
    changes: ConfigChanges | None = None
    data_note: str | None = None


def plan_units(config: StudyConfig, validated: ValidatedConfig | None = None) -> list[UnitTask]:
    """All units of `config`, scenario-major (so workers reuse a built scenario), then seed.

    `validated` is `validate_config`'s answer; it is computed when not given.
    """
    validated = validate_config(config) if validated is None else validated
    tasks = []
    for index, built in enumerate(validated.scenarios):
        for seed in config.seeds:
            for algorithm in config.algorithms:
                tasks.append(
                    UnitTask(
                        scenario_index=index,
                        scenario=built.name,
                        family=built.spec.family,
                        params=dict(built.params),
                        algorithm=algorithm,
                        seed=seed,
                        hparams=validated.hparams[(algorithm, seed)],
                        steps=config.steps,
                        model=config.model,
                    )
                )
    return tasks


def prepare_config(config: StudyConfig) -> StudyConfig:
    """Resolve ``source = "auto"`` and ``[trainer] device = "auto"`` so the stored config names
    the data and the device kind actually used (the resolved device is printed on stderr)."""
    source = resolve_source(config.source) if config.reads_source() else config.source
    if source != config.source:
        config = config.replace(source=source)
    if config.trainer.get("device") == "auto":
        from oodeval._torch import resolve_device

        device = resolve_device("auto")
        print(f"device: auto -> {device}", file=sys.stderr)
        # replace() re-validates, which leaves the default cpu out of the stored config
        config = config.replace(trainer={**config.trainer, "device": device})
    return config


def run_study(
    config: StudyConfig,
    directory: str | Path,
    *,
    workers: int | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    on_unit: Callable[[UnitRecord], None] | None = None,
    executor: str | Executor | None = None,
) -> RunSummary:
    """Run (or resume) `config` into ``directory/results.sqlite``; return what was done.

    Parameters
    ----------
    config : the study; ``source = "auto"`` is resolved first (`prepare_config`).
    directory : the study folder; a folder holding another config is refused.
    workers : worker processes (default: the number of CPU cores); with ``executor="ray"`` the
        CPUs of a local Ray instance, with ``"slurm"`` the number of jobs running at once.
    retry_failed : run units stored as ``failed`` again.
    progress : show a progress bar with ETA on stderr.
    on_unit : called in the parent with each unit's record right after it is stored.
    executor : where units run: ``"local"`` (default), ``"ray"``, ``"slurm"``, or an
        `oodeval.study.executors.Executor`; units stream back to this process, which alone
        writes the store, so resuming works the same on every executor.

    Raises
    ------
    StudyInterrupted
        On Ctrl-C (it is a `KeyboardInterrupt`), once the units in flight are abandoned and the
        store is closed.
    """
    start = time.perf_counter()
    units_executor = make_executor(executor, workers=workers)
    units_executor.check()
    elsewhere = units_executor.trains_elsewhere
    if elsewhere and config.trainer.get("device") == "auto":
        raise OodevalError(
            f"device auto would be resolved on this machine, not where the {units_executor.name} "
            "executor's units train; name their device (cuda, cuda:N or cpu)"
        )
    config = prepare_config(config)
    backend = import_backend(config)
    validated = validate_config(config, backend, device_here=not elsewhere)
    tasks = plan_units(config, validated)
    names = {scenario_key(built.spec): built.name for built in validated.scenarios}
    refuse_links(*units_executor.folders_in(Path(directory)))  # the store checks its own files
    with ResultStore(directory, create=True) as store:  # the writer: holds DIR/study.lock
        names.update(_stored_scenario_names(store, config, backend, names))
        changes = store.bind_config(config.to_dict(), scenario_names=names)
        set_aside = store.move_damaged_aside()  # damaged units leave the store and run again
        if set_aside.summary():
            print(safe_text(f"warning: {set_aside.summary()}"), file=sys.stderr)
        statuses = store.statuses()
        todo = [
            t
            for t in tasks
            if statuses.get(_key(t)) is None or (retry_failed and statuses[_key(t)] == "failed")
        ]
        stream = units_executor.run(config, todo, Path(directory))
        try:
            done, failed = _store_units(store, stream, len(todo), progress, on_unit)
        except KeyboardInterrupt:
            stored = store.statuses()
            raise StudyInterrupted(sum(_key(t) in stored for t in tasks), len(tasks)) from None
    return RunSummary(
        directory=Path(directory),
        planned=len(tasks),
        skipped=len(tasks) - len(todo),
        ran=len(todo),
        done=done,
        failed=failed,
        wall_seconds=time.perf_counter() - start,
        changes=changes,
        data_note=data_note(config),
    )


def _stored_scenario_names(
    store: ResultStore, config: StudyConfig, backend: Any, names: dict[str, str]
) -> dict[str, str]:
    """Built names of the stored config's scenarios that neither `config` nor the store's config
    history names (a store of schema 1 or 2 losing a scenario): built here with `config`'s
    source and data seed, so that a re-parametrised scenario is told from a new one. A scenario
    that no longer builds is left out (the store then compares it by its parameters only)."""
    stored = store.stored_config()
    if stored is None:
        return {}
    known = dict(names)
    for record in store.config_history():
        known.update(record.scenario_names)
    out = {}
    for data in stored.get("scenarios") or ():
        spec = {"family": data} if isinstance(data, str) else dict(data)
        if scenario_key(spec) in known:
            continue
        try:
            out[scenario_key(spec)] = build(backend, config, ScenarioSpec.from_dict(spec)).name
        except OodevalError:
            continue
    return out


class StudyInterrupted(KeyboardInterrupt):
    """`run_study` was interrupted (Ctrl-C): `stored` of the `planned` units are in the store.

    The units in flight were abandoned; running the study again resumes it.
    """

    def __init__(self, stored: int, planned: int) -> None:
        self.stored, self.planned = stored, planned
        super().__init__(
            f"interrupted: {stored} of {planned} units stored; run the same command again to resume"
        )


def _store_units(
    store: ResultStore,
    stream: Generator[UnitRecord, None, None],
    total: int,
    progress: bool,
    on_unit: Callable[[UnitRecord], None] | None,
) -> tuple[int, int]:
    """Write every unit of `stream` to `store` as it arrives; return the (done, failed) counts.

    Prints failures, and each distinct warning once, above the progress bar. The stream is
    closed on the way out, so an interrupted executor stops its work at once.
    """
    done = failed = 0
    warned: set[str] = set()
    with progress_bar(total, enabled=progress) as bar, contextlib.closing(stream):
        for record in stream:
            store.record_unit(record)
            done += record.status == "done"
            failed += record.status == "failed"
            unit = f"{record.scenario} {record.algorithm} seed {record.seed}"
            if record.status == "failed":
                bar.write(safe_text(f"failed: {unit}: {record.failure}"), file=sys.stderr)
            for message in record.warnings:
                if message not in warned:
                    warned.add(message)
                    bar.write(
                        safe_text(f"warning: {message} (first raised by {unit})"), file=sys.stderr
                    )
            bar.set_postfix(done=done, failed=failed, refresh=False)
            bar.update(1)
            if on_unit is not None:
                on_unit(record)
    return done, failed


def progress_bar(total: int, *, enabled: bool, desc: str = "study") -> Any:
    """A tqdm bar on stderr counting units (disabled: prints nothing)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=safe_text(desc),
        unit="unit",
        file=sys.stderr,
        disable=not enabled,
        dynamic_ncols=True,
        smoothing=0.1,
    )


def _key(task: UnitTask) -> str:
    return unit_key(task.scenario, task.algorithm, task.seed)
