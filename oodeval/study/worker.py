"""The one runner of units: set a process up for a config, train a `UnitTask`, report it.

A unit passes through three types: a `UnitTask` (what to train, sent to a worker), the backend's
`UnitResult` (what training returns, `oodeval.training.UnitResult` for the oodeval trainer) and
a `UnitRecord` (how one attempt ended, `oodeval.study.store`: the result's rows or a failure,
with timings and versions), which the driver writes to the store as it is.

Every executor (`oodeval.study.executors`) runs units through these functions in its own
processes: the local executor's pool workers call `setup_worker` once and `run_task` per unit; Ray
tasks and Slurm jobs call `run_tasks`, which sets their process up on its first call. A worker
returns a `UnitRecord` and writes nothing; the driver (`oodeval.study.runner`) stores each record
it receives. Outside a study, `run_units` trains tasks that carry their own scenario
(`UnitTask.for_scenario`) on a `worker_pool` and yields their results; both paths train a task
with `unit_result`, in processes of `oodeval.pool.WorkerPool`.

A unit that raises is a ``failed`` record with a one-line reason (`failure_reason`); a unit whose
process dies is recorded by the executor as ``failed`` with `WORKER_DIED` (or the cluster's own
reason, `failed_record`). Warnings a unit raises (say an algorithm's `UserWarning`) come back in
the record (`UnitRecord.warnings`, not stored), so
the driver can print each distinct one once per run instead of once per worker.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import pickle
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oodeval._digest import ReadFile
from oodeval._time import utc_timestamp as now
from oodeval._torch import deterministic_device
from oodeval.environments.base import Scenario
from oodeval.errors import OodevalError
from oodeval.pool import WorkerPool, set_threads
from oodeval.study.config import (
    DEFAULT_BACKEND,
    IMPORT_VERSION_PREFIX,
    StudyConfig,
    build,
    code_digest,
    config_from_dict,
    import_backend,
    is_path_import,
    study_weights,
)
from oodeval.study.store import UnitRecord
from oodeval.training.options import NOT_PRETRAINED, TF32_MODES

#: The failure reason of a unit whose worker process died under it.
WORKER_DIED = (
    "worker process died while this unit ran (out of memory or killed); retry with --retry-failed"
)


@dataclass(frozen=True)
class UnitTask:
    """One unit to train, sent to a worker: scenario, algorithm, seed, hyperparameters, steps.

    A study's task names its scenario by `scenario_index` among the scenarios of the config its
    worker was set up with (`setup_worker`), in plain picklable fields (`scenario` is its name,
    `family` and `params` describe it). A task made by `for_scenario` carries its scenario in
    `build` instead and its trainer options in `options` (`oodeval.training.TrainerOptions`); it
    runs on the default backend, the oodeval trainer.
    """

    scenario_index: int
    scenario: str
    family: str
    params: dict
    algorithm: str
    seed: int
    hparams: dict
    steps: int
    model: str
    #: keyword options of the backend's ``run_unit`` (tasks made by `for_scenario`)
    options: dict = field(default_factory=dict)
    #: a Scenario, or a picklable zero-argument callable building one in the worker
    build: Scenario | Callable[[], Scenario] | None = None

    @classmethod
    def for_scenario(
        cls,
        scenario: Scenario | Callable[[], Scenario],
        algorithm: str,
        seed: int,
        steps: int,
        options: Mapping[str, Any] | None = None,
    ) -> UnitTask:
        """The task ``run_unit(scenario, algorithm, seed=seed, steps=steps, **options)``.

        `scenario` is a Scenario, or a picklable zero-argument callable building one (e.g.
        ``functools.partial(build_scenario, "sr-cmnist", ratio="3:1")``), which each worker calls
        itself; use the callable for scenarios that cannot be pickled. `options` may hold
        ``hparams`` and ``model`` beside the trainer's options.

        >>> task = UnitTask.for_scenario(print, "ERM", 0, 5, {"model": "cnn", "batch_size": 8})
        >>> task.model, task.hparams, task.options
        ('cnn', {}, {'batch_size': 8})
        """
        options = dict(options or {})
        hparams = dict(options.pop("hparams", None) or {})
        model = options.pop("model", "mlp")
        name = scenario.name if isinstance(scenario, Scenario) else ""
        return cls(-1, name, "", {}, algorithm, seed, hparams, steps, model, options, scenario)


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


def failed_record(task: UnitTask, reason: str) -> UnitRecord:
    """A ``failed`` record of `task`, made where the unit could not run (e.g. its worker died)."""
    return _record(task, status="failed", failure=reason, finished=now())


def _record(task: UnitTask, **fields: Any) -> UnitRecord:
    """The record of `task` (its scenario, algorithm, seed, hyperparameters, steps and model)
    with `fields` (its status and what the attempt gave; ``hparams`` may replace the task's)."""
    unit = {
        "scenario": task.scenario,
        "family": task.family,
        "params": task.params,
        "algorithm": task.algorithm,
        "seed": task.seed,
        "hparams": task.hparams,
        "steps": task.steps,
        "model": task.model,
    }
    return UnitRecord(**{**unit, **fields})


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
        deterministic_device(trainer["device"])


def run_tasks(
    config_json: str, settings: WorkerSettings, tasks: Sequence[UnitTask]
) -> list[UnitRecord]:
    """Set this process up for the config (`setup_worker`), then run `tasks` one after another."""
    setup_worker(config_json, settings)
    return [run_task(task) for task in tasks]


def unit_result(task: UnitTask) -> Any:
    """The backend's `run_unit` result of `task`, trained in this process; errors propagate.

    A study's task runs the backend of the config this process was set up with (`setup_worker`),
    with the config's trainer options (this worker's device) and ``unit_options``; a task that
    carries its scenario (`UnitTask.for_scenario`) runs the default backend with its `options`.
    A study's ``[trainer] pretrained`` file must still be the one it was made with, before the
    unit trains and as the trainer loaded it (its result's ``pretrained``). It is read once
    (`study_weights`), and the backend gets the path carrying those bytes
    (`oodeval._digest.ReadFile`, a str), so the oodeval trainer loads what was checked without
    reading the file again.
    """
    if task.build is not None:
        backend = importlib.import_module(DEFAULT_BACKEND)
        build = task.build
        scenario = build if isinstance(build, Scenario) else build()
        trainer, extra = task.options, {}
    else:
        backend, scenario = _STATE["backend"], scenario_at(task.scenario_index)
        trainer, extra = _STATE["trainer"], _STATE["config"].unit_options
        weights = _read_weights(_STATE["config"])
        if weights is not None:
            trainer = {**trainer, "pretrained": weights}
    result = backend.run_unit(
        scenario,
        task.algorithm,
        seed=task.seed,
        steps=task.steps,
        hparams=dict(task.hparams),
        model=task.model,
        **trainer,
        **extra,
    )
    loaded = getattr(result, "pretrained", None)  # a backend may not report its weights
    if task.build is None and loaded is not None:
        _check_weights(_STATE["config"], str(loaded))
    return result


def _read_weights(config: StudyConfig) -> ReadFile | None:
    """The config's ``[trainer] pretrained`` file read for one unit (`study_weights`: its
    SHA-256 is checked again before every unit), None without one; the unit is refused when the
    file is not the one the study was made with."""
    path, sha256 = config.trainer.get("pretrained"), config.pretrained_sha256
    if path is None or sha256 is None:
        return None
    return study_weights(path, sha256)


def _check_weights(config: StudyConfig, loaded: str) -> None:
    """Refuse the unit when the trainer reports having `loaded` other weights than the study's
    (a backend that read the file again, after it changed)."""
    path, sha256 = config.trainer.get("pretrained"), config.pretrained_sha256
    if path is None or sha256 is None:
        return
    if loaded != sha256:
        what = "no weights" if loaded == NOT_PRETRAINED else f"SHA-256 {loaded[:16]}..."
        raise OodevalError(
            f"pretrained weights {path} changed since the study was made: the unit loaded "
            f"{what}, the study's are {sha256[:16]}...; put the study's file back, or start a "
            "new study"
        )


def run_task(task: UnitTask) -> UnitRecord:
    """Run one unit in a process set up by `setup_worker`; an exception fails this unit only."""
    started = now()
    t0 = time.perf_counter()
    settings = run_settings()
    with warnings.catch_warnings(record=True) as caught:
        try:
            result = unit_result(task)
            fields = _done(task, result, t0)
            settings["run:pretrained"] = str(
                getattr(result, "pretrained", None) or settings["run:pretrained"]
            )  # what the trainer loaded
        except Exception as exc:  # failure isolation: any error fails this unit only
            fields = {
                "status": "failed",
                "failure": failure_reason(exc),
                "timings": {"wall": time.perf_counter() - t0},
            }
    return _record(
        task,
        **fields,
        started=started,
        finished=now(),
        versions={**versions(), **_STATE.get("import_versions", {}), **settings},
        warnings=tuple(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught)),
    )


def scenario_at(index: int) -> Any:
    """Scenario `index` of this process's config (`setup_worker`), built once per process while
    consecutive units share it."""
    if _STATE.get("scenario_index") != index:
        config: StudyConfig = _STATE["config"]
        _STATE.pop("scenario_index", None)
        _STATE["scenario"] = None  # one built scenario per worker at a time bounds memory
        _STATE["scenario"] = build(_STATE["backend"], config, config.scenarios[index])
        _STATE["scenario_index"] = index
    return _STATE["scenario"]


def worker_config() -> StudyConfig:
    """The config this process was set up with (`setup_worker`)."""
    return _STATE["config"]


def trainer_options() -> dict[str, Any]:
    """The trainer options this process runs its config's units with (`setup_worker`): the
    config's ``[trainer]`` table, with this worker's device."""
    return dict(_STATE["trainer"])


def _done(task: UnitTask, result: Any, t0: float) -> dict[str, Any]:
    """The fields of the ``done`` record of a backend's `run_unit` result."""
    rows = [(r.fold, r.environment, float(r.error), int(r.count)) for r in result.rows]
    # per-checkpoint records of the LOO models; backends without them (synthetic) give none
    checkpoints = [
        (str(c.fold), int(c.step), float(c.train_val_acc), float(c.test_acc),
         float(c.oracle_val_acc))
        for c in getattr(result, "checkpoints", None) or ()
    ]  # fmt: skip
    timings = {k: float(v) for k, v in dict(getattr(result, "timings", {}) or {}).items()}
    timings["wall"] = time.perf_counter() - t0
    return {
        "status": "done",
        "hparams": dict(getattr(result, "hparams", None) or task.hparams),
        "rows": rows,
        "checkpoints": checkpoints,
        "timings": timings,
    }


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
    """``{"run:device", "run:tf32", "run:pretrained"}``: where this process trains its units,
    under which TF32 policy (`oodeval._torch.tf32_mode`) and from which weights (the SHA-256 of
    the config's ``[trainer] pretrained`` file, or ``"not pretrained"``; `run_task` replaces it
    by the digest the trainer reports having loaded), stored with each unit beside its
    versions."""
    trainer = _STATE.get("trainer", {})
    config = _STATE.get("config")
    weights = getattr(config, "pretrained_sha256", None) if "pretrained" in trainer else None
    return {
        "run:device": str(trainer.get("device", "cpu")),
        "run:tf32": str(trainer.get("tf32", TF32_MODES[0])),
        "run:pretrained": str(weights or NOT_PRETRAINED),
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
    of a user's module are flagged by the analyses (`oodeval.study.store.Study.code_notes`).
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


def worker_pool(workers: int | None = None, *, threads_per_worker: int = 1) -> WorkerPool:
    """A pool of `workers` spawned processes (default: one per core), each on
    `threads_per_worker` torch threads, to pass to several `run_units` calls (close it after, e.g.
    ``with worker_pool() as pool:``); starting processes and importing torch happens once."""
    workers = (os.cpu_count() or 1) if workers is None else workers
    _check_counts(workers, threads_per_worker)
    return WorkerPool(workers, threads=threads_per_worker, preload=("torch",))


def run_units(
    tasks: Iterable[UnitTask],
    *,
    workers: int | None = None,
    threads_per_worker: int = 1,
    pool: WorkerPool | None = None,
) -> Iterator[Any]:
    """Yield the result (`oodeval.training.UnitResult`) of every task, in order, trained by
    `unit_result` in `workers` processes (default: one per core).

    The tasks carry their scenarios (`UnitTask.for_scenario`). ``workers=1`` runs in this process
    (no pickling, the caller's thread setting); a failing unit (e.g. `TrainingDiverged`) raises
    when its result is reached. With `pool` (`worker_pool`) the units run in its processes, which
    stay up for the next call (give no `workers` then).
    """
    tasks = list(tasks)
    for task in tasks:
        if task.build is None:
            raise OodevalError(
                f"unit ({task.algorithm}, seed {task.seed}) names a study scenario; make "
                "tasks for run_units with UnitTask.for_scenario, or run a study (run_study)"
            )
    if pool is not None:
        if workers is not None or threads_per_worker != 1:
            raise OodevalError(
                "pass either pool= or workers=/threads_per_worker=, not both: the pool's "
                "processes and threads are fixed by worker_pool()"
            )
        _check_picklable(tasks)
        yield from pool.map(unit_result, tasks)
        return
    workers = (os.cpu_count() or 1) if workers is None else workers
    _check_counts(workers, threads_per_worker)
    if workers == 1 or len(tasks) <= 1:
        for task in tasks:
            yield unit_result(task)
        return
    _check_picklable(tasks)
    with worker_pool(min(workers, len(tasks)), threads_per_worker=threads_per_worker) as own:
        yield from own.map(unit_result, tasks)


def _check_picklable(tasks: list[UnitTask]) -> None:
    for task in tasks:
        try:
            pickle.dumps(task)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise OodevalError(
                f"cannot send unit ({task.algorithm}, seed {task.seed}) to a worker process "
                f"({exc}); pass a picklable callable that builds the scenario, e.g. "
                "functools.partial(build_scenario, family, **params)"
            ) from None


def _check_counts(workers: int, threads_per_worker: int) -> None:
    if workers < 1 or threads_per_worker < 1:
        raise OodevalError(
            f"workers and threads_per_worker must be >= 1, got {workers} and {threads_per_worker}"
        )
