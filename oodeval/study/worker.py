"""The worker side of a study: set a process up for a config, run one unit into an outcome.

Every executor (`oodeval.study.executors`) runs units through these functions in its own
processes: the local executor's pool workers call `setup_worker` once and `run_task` per unit; Ray
tasks and Slurm jobs call `run_tasks`, which sets their process up on its first call. A worker
returns a `UnitOutcome` and writes nothing; the driver (`oodeval.study.runner`) turns outcomes into
store records.

A unit that raises is a ``failed`` outcome with a one-line reason (`failure_reason`); a unit whose
process dies is recorded by the executor as ``failed`` with `WORKER_DIED` (or the cluster's own
reason). Warnings a unit raises (say an algorithm's `UserWarning`) come back in the outcome, so
the driver can print each distinct one once per run instead of once per worker.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodeval._time import utc_timestamp as now
from oodeval._torch import TF32_MODES
from oodeval.pool import set_threads
from oodeval.study.config import (
    IMPORT_VERSION_PREFIX,
    StudyConfig,
    build,
    code_digest,
    config_from_dict,
    import_backend,
    is_path_import,
)

#: The failure reason of a unit whose worker process died under it.
WORKER_DIED = (
    "worker process died while this unit ran (out of memory or killed); retry with --retry-failed"
)


@dataclass(frozen=True)
class UnitTask:
    """One unit to run, in plain picklable fields."""

    scenario_index: int
    scenario: str
    family: str
    params: dict
    algorithm: str
    seed: int
    hparams: dict
    steps: int
    model: str


@dataclass(frozen=True)
class WorkerSettings:
    """How one worker process runs its units: `threads` BLAS/torch threads, on `device`.

    `device` (e.g. ``"cuda:1"``) overrides the config's ``[trainer] device`` in this worker: the
    local executor pins each worker to a GPU of its own; None runs the config's device. Settings
    that may differ between the workers of one pool belong here (see `oodeval.pool.WorkerPool`'s
    ``per_worker``).
    """

    threads: int = 1
    device: str | None = None


@dataclass(frozen=True)
class UnitOutcome:
    """What running a unit gave: ``done`` with its rows, or ``failed`` with the reason.

    `rows` are (fold, environment, error, count); `checkpoints` (fold, step, train_val_acc,
    test_acc, oracle_val_acc) for backends that record them; `warnings` the distinct warnings the
    unit raised, as ``"Category: message"``.
    """

    status: str
    hparams: dict
    rows: list[tuple[str, str, float, int]] = field(default_factory=list)
    checkpoints: list[tuple[str, int, float, float, float]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    started: str | None = None
    finished: str = field(default_factory=now)
    versions: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def failed_outcome(task: UnitTask, reason: str) -> UnitOutcome:
    """A ``failed`` outcome for `task`, made where the unit could not run (e.g. its worker died)."""
    return UnitOutcome(status="failed", hparams=task.hparams, failure=reason)


def failure_reason(exc: BaseException) -> str:
    """One line naming the exception, its first message line and where it was raised.

    >>> try:
    ...     raise ValueError("bad value\\nmore")
    ... except ValueError as exc:
    ...     failure_reason(exc).split(" [")[0]
    'ValueError: bad value'
    """
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" [{Path(frame.filename).name}:{frame.lineno}]" if frame else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"


# this process's set-up: the config (and its JSON), its backend, one built scenario
_STATE: dict[str, Any] = {}


def setup_worker(config_json: str, settings: WorkerSettings | None = None) -> None:
    """Set this process up to run units of the config `config_json` (`StudyConfig.to_json`).

    Runs ``settings.threads`` threads, imports the config's ``imports`` and backend, and digests
    the code of each import (`import_versions`). Calling it again with the same config only
    applies `settings`, so a process reused by several tasks (Ray, Slurm jobs) keeps its imports
    and its built scenario.
    """
    settings = WorkerSettings() if settings is None else settings
    set_threads(settings.threads)  # before the backend may import torch
    if _STATE.get("config_json") != config_json:
        config = config_from_dict(json.loads(config_json))
        _STATE.clear()
        backend = import_backend(config)
        _STATE.update(
            config_json=config_json,
            config=config,
            backend=backend,
            import_versions=import_versions(config),
        )
    set_threads(settings.threads)
    trainer = dict(_STATE["config"].trainer)
    if settings.device is not None:
        trainer["device"] = settings.device
    _STATE["trainer"] = trainer
    if trainer.get("device", "cpu") != "cpu":  # before the first product on the GPU
        from oodeval._torch import deterministic_device

        deterministic_device(trainer["device"])


def run_tasks(
    config_json: str, settings: WorkerSettings, tasks: Sequence[UnitTask]
) -> list[UnitOutcome]:
    """Set this process up for the config (`setup_worker`), then run `tasks` one after another."""
    setup_worker(config_json, settings)
    return [run_task(task) for task in tasks]


def run_task(task: UnitTask) -> UnitOutcome:
    """Run one unit in a process set up by `setup_worker`; an exception fails this unit only."""
    config: StudyConfig = _STATE["config"]
    started = now()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        try:
            result = _STATE["backend"].run_unit(
                _scenario(task),
                task.algorithm,
                seed=task.seed,
                steps=task.steps,
                hparams=dict(task.hparams),
                model=task.model,
                **_STATE["trainer"],
                **config.unit_options,
            )
            outcome = _done(task, result, t0)
        except Exception as exc:  # failure isolation: any error fails this unit only
            outcome = UnitOutcome(
                status="failed",
                hparams=task.hparams,
                failure=failure_reason(exc),
                timings={"wall": time.perf_counter() - t0},
            )
    return dataclasses.replace(
        outcome,
        started=started,
        finished=now(),
        versions={**versions(), **_STATE.get("import_versions", {}), **run_settings()},
        warnings=tuple(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught)),
    )


def _scenario(task: UnitTask) -> Any:
    """The task's scenario, built once per process while consecutive units share it."""
    if _STATE.get("scenario_index") != task.scenario_index:
        config: StudyConfig = _STATE["config"]
        _STATE.pop("scenario_index", None)
        _STATE["scenario"] = None  # one built scenario per worker at a time bounds memory
        _STATE["scenario"] = build(_STATE["backend"], config, config.scenarios[task.scenario_index])
        _STATE["scenario_index"] = task.scenario_index
    return _STATE["scenario"]


def _done(task: UnitTask, result: Any, t0: float) -> UnitOutcome:
    """The ``done`` outcome of a backend's `run_unit` result."""
    rows = [(r.fold, r.environment, float(r.error), int(r.count)) for r in result.rows]
    # per-checkpoint records of the LOO models; backends without them (synthetic) give none
    checkpoints = [
        (str(c.fold), int(c.step), float(c.train_val_acc), float(c.test_acc),
         float(c.oracle_val_acc))
        for c in getattr(result, "checkpoints", None) or ()
    ]  # fmt: skip
    timings = {k: float(v) for k, v in dict(getattr(result, "timings", {}) or {}).items()}
    timings["wall"] = time.perf_counter() - t0
    return UnitOutcome(
        status="done",
        hparams=dict(getattr(result, "hparams", None) or task.hparams),
        rows=rows,
        checkpoints=checkpoints,
        timings=timings,
    )


def versions() -> dict[str, str]:
    """The versions a unit ran with: oodeval (and `source_digest`), Python, numpy, torch if used."""
    import numpy

    from oodeval import __version__

    out = {
        "oodeval": __version__,
        "oodeval_source": source_digest(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
    }
    if "torch" in sys.modules:
        out["torch"] = str(sys.modules["torch"].__version__)
    return out


def run_settings() -> dict[str, str]:
    """``{"run:device", "run:tf32"}``: where this process trains its units and under which TF32
    policy (`oodeval._torch.tf32_mode`), stored with each unit beside its versions."""
    trainer = _STATE.get("trainer", {})
    return {
        "run:device": str(trainer.get("device", "cpu")),
        "run:tf32": str(trainer.get("tf32", TF32_MODES[0])),
    }


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 (first 16 hex digits) of the oodeval package's Python sources (`code_digest`).

    Stored with every unit, so units computed by different code (an edited checkout with the same
    version number) can be told apart.
    """
    import oodeval

    return code_digest(Path(oodeval.__file__).resolve().parent)


def import_versions(config: StudyConfig) -> dict[str, str]:
    """``{"import:<name>": code_digest}`` of each of the config's ``imports`` as this process
    imported it: a ``.py`` file (name: its stem), or a module's file (a package: its folder).

    Stored in every unit's ``versions``, so units of one algorithm computed with different code
    of a user's module are flagged by the analyses (`oodeval.study.read_model.Study.code_notes`).
    """
    out = {}
    for entry in config.imports:
        if is_path_import(entry):
            name, where = Path(entry).stem, Path(entry)
        else:
            module = sys.modules.get(entry)
            file = getattr(module, "__file__", None)
            if file is None:
                continue  # a namespace package: no file of its own
            name, where = entry, Path(file)
            if getattr(module, "__path__", None) is not None:
                where = where.parent
        out[f"{IMPORT_VERSION_PREFIX}{name}"] = code_digest(where)
    return out
