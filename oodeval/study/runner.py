"""Run a study: every (scenario, algorithm, seed) unit in worker processes, resumably.

The parent process plans the units, skips those the store already holds, hands the rest to a pool
of worker processes (``spawn`` start method, one torch thread each) and alone writes each finished
unit to the store in one transaction. A unit that raises — a NaN loss (``TrainingDiverged``) or
any other exception — is recorded as ``failed`` with its reason and the study goes on; failed
units are retried only when asked (``retry_failed=True``, ``--retry-failed``).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing
import os
import platform
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oodeval.study.config import (
    StudyConfig,
    build,
    config_from_dict,
    import_backend,
    resolve_source,
    validate_config,
)
from oodeval.study.store import ResultStore, UnitRecord, unit_key

if TYPE_CHECKING:
    from oodeval.study.executors import Executor

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


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
class RunSummary:
    """What `run_study` did: units planned, skipped (already stored), run, done and failed."""

    directory: Path
    planned: int
    skipped: int
    ran: int
    done: int
    failed: int
    wall_seconds: float


def plan_units(config: StudyConfig, validated: dict[str, Any] | None = None) -> list[UnitTask]:
    """All units of `config`, scenario-major (so workers reuse a built scenario), then seed.

    `validated` is `validate_config`'s answer; it is computed when not given.
    """
    validated = validate_config(config) if validated is None else validated
    tasks = []
    for index, (spec, name, _given, params) in enumerate(validated["scenarios"]):
        for seed in config.seeds:
            for algorithm in config.algorithms:
                tasks.append(
                    UnitTask(
                        scenario_index=index,
                        scenario=name,
                        family=spec.family,
                        params=dict(params),
                        algorithm=algorithm,
                        seed=seed,
                        hparams=validated["hparams"][(algorithm, seed)],
                        steps=config.steps,
                        model=config.model,
                    )
                )
    return tasks


def prepare_config(config: StudyConfig) -> StudyConfig:
    """Resolve ``source = "auto"`` so the stored config names the data actually used."""
    source = resolve_source(config.source)
    return config if source == config.source else config.replace(source=source)


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
    """
    from oodeval.study.executors import make_executor

    start = time.perf_counter()
    units_executor = make_executor(executor, workers=workers)
    units_executor.check()
    config = prepare_config(config)
    backend = import_backend(config)
    validated = validate_config(config, backend)
    tasks = plan_units(config, validated)
    with ResultStore(directory, create=True) as store:  # the writer: holds DIR/study.lock
        store.bind_config(config.to_dict())
        set_aside = store.move_damaged_aside()  # damaged units leave the store and run again
        if set_aside.summary():
            print(f"warning: {set_aside.summary()}", file=sys.stderr)
        statuses = store.statuses()
        todo = [
            t
            for t in tasks
            if statuses.get(_key(t)) is None or (retry_failed and statuses[_key(t)] == "failed")
        ]
        done = failed = 0
        bar = _progress_bar(len(todo), enabled=progress)
        try:
            for record, rows in units_executor.run(config, todo, Path(directory)):
                store.record_unit(record, rows)
                done += record.status == "done"
                failed += record.status == "failed"
                if record.status == "failed":
                    bar.write(
                        f"failed: {record.scenario} {record.algorithm} seed {record.seed}: "
                        f"{record.failure}",
                        file=sys.stderr,
                    )
                bar.set_postfix(done=done, failed=failed, refresh=False)
                bar.update(1)
                if on_unit is not None:
                    on_unit(record)
        finally:
            bar.close()
    return RunSummary(
        directory=Path(directory),
        planned=len(tasks),
        skipped=len(tasks) - len(todo),
        ran=len(todo),
        done=done,
        failed=failed,
        wall_seconds=time.perf_counter() - start,
    )


def _execute(config: StudyConfig, todo: list[UnitTask], workers: int):
    """Yield (UnitRecord, rows) for every task as workers finish them (completion order).

    When a worker process dies (the pool breaks), the units that were in flight are suspects:
    each is re-run alone in a fresh one-worker pool, so only a unit that kills its worker by
    itself is recorded as failed; the others complete normally.
    """
    pending = deque(todo)
    suspects: deque[UnitTask] = deque()
    config_json = config.to_json()
    while pending or suspects:
        if suspects:
            task = suspects.popleft()
            pool = _pool(config_json, 1)
            try:
                outcome = pool.submit(_run_task, task).result()
            except BrokenProcessPool:
                outcome = _failure(
                    task,
                    "worker process died while this unit ran (out of memory or killed); "
                    "retry with --retry-failed",
                )
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            yield _record(task, outcome), outcome.get("rows", [])
            continue
        pool = _pool(config_json, min(workers, len(pending)))
        inflight: dict[cf.Future, UnitTask] = {}
        broken = False
        try:
            while (pending and not broken) or inflight:
                while not broken and pending and len(inflight) < 2 * workers:
                    task = pending.popleft()
                    try:
                        inflight[pool.submit(_run_task, task)] = task
                    except BrokenProcessPool:
                        pending.appendleft(task)
                        broken = True
                if not inflight:
                    break
                finished, _ = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
                for future in finished:
                    task = inflight.pop(future)
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:
                        broken = True
                        suspects.append(task)
                        continue
                    yield _record(task, outcome), outcome.get("rows", [])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _pool(config_json: str, workers: int) -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(config_json,),
    )


def _progress_bar(total: int, *, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc="study",
        unit="unit",
        file=sys.stderr,
        disable=not enabled,
        dynamic_ncols=True,
        smoothing=0.1,
    )


def _key(task: UnitTask) -> str:
    return unit_key(task.scenario, task.algorithm, task.seed)


def _record(task: UnitTask, outcome: dict[str, Any]) -> UnitRecord:
    return UnitRecord(
        scenario=task.scenario,
        family=task.family,
        params=task.params,
        algorithm=task.algorithm,
        seed=task.seed,
        hparams=outcome.get("hparams", task.hparams),
        steps=task.steps,
        model=task.model,
        status=outcome["status"],
        failure=outcome.get("failure"),
        timings=outcome.get("timings", {}),
        versions=outcome.get("versions", {}),
        started=outcome.get("started"),
        finished=outcome.get("finished", _now()),
        checkpoints=tuple(tuple(c) for c in outcome.get("checkpoints", ())),
    )


def _failure(task: UnitTask, reason: str) -> dict[str, Any]:
    return {"status": "failed", "failure": reason, "hparams": task.hparams, "finished": _now()}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- worker side ------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _exit_with_parent(poll_seconds: float = 2.0) -> None:
    """End this worker when the driver dies (e.g. SIGKILL), instead of lingering idle.

    A daemon thread polls the parent pid; the driver alone writes the store, so a worker has
    nothing to save and can leave at once.
    """
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="oodeval-parent-watch", daemon=True).start()


def _init_worker(config_json: str) -> None:
    """Per-worker set-up: one BLAS/torch thread, the config's imports and backend."""
    import json

    for var in _THREAD_VARS:
        os.environ[var] = "1"
    _exit_with_parent()
    config = config_from_dict(json.loads(config_json))
    _WORKER["config"] = config
    _WORKER["backend"] = import_backend(config)
    _WORKER["scenarios"] = {}
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _scenario(task: UnitTask) -> Any:
    cache: dict[int, Any] = _WORKER["scenarios"]
    if task.scenario_index not in cache:
        config: StudyConfig = _WORKER["config"]
        cache.clear()  # one built scenario per worker at a time bounds memory
        cache[task.scenario_index] = build(
            _WORKER["backend"], config, config.scenarios[task.scenario_index]
        )
    return cache[task.scenario_index]


def _run_task(task: UnitTask) -> dict[str, Any]:
    """Run one unit in a worker; exceptions come back as a ``failed`` outcome with the reason."""
    config: StudyConfig = _WORKER["config"]
    backend = _WORKER["backend"]
    started = _now()
    t0 = time.perf_counter()
    try:
        scenario = _scenario(task)
        result = backend.run_unit(
            scenario,
            task.algorithm,
            seed=task.seed,
            steps=task.steps,
            hparams=dict(task.hparams),
            model=task.model,
            **config.trainer,
            **config.unit_options,
        )
        rows = [(r.fold, r.environment, float(r.error), int(r.count)) for r in result.rows]
        # per-checkpoint records of the LOO models; backends without them (synthetic) give none
        checkpoints = [
            (
                str(c.fold),
                int(c.step),
                float(c.train_val_acc),
                float(c.test_acc),
                float(c.oracle_val_acc),
            )
            for c in getattr(result, "checkpoints", None) or ()
        ]
        timings = {k: float(v) for k, v in dict(getattr(result, "timings", {}) or {}).items()}
        timings["wall"] = time.perf_counter() - t0
        hparams = dict(getattr(result, "hparams", None) or task.hparams)
        outcome = {
            "status": "done",
            "rows": rows,
            "checkpoints": checkpoints,
            "hparams": hparams,
            "timings": timings,
        }
    except Exception as exc:  # failure isolation: any error fails this unit only
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" [{Path(frame.filename).name}:{frame.lineno}]" if frame else ""
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"
        outcome = {
            "status": "failed",
            "failure": reason,
            "hparams": task.hparams,
            "timings": {"wall": time.perf_counter() - t0},
        }
    outcome.update(started=started, finished=_now(), versions=_versions())
    return outcome


def _versions() -> dict[str, str]:
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


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 (first 16 hex digits) of the oodeval package's Python sources.

    Stored with every unit, so units computed by different code (an edited checkout with the same
    version number) can be told apart.
    """
    import hashlib

    import oodeval

    root = Path(oodeval.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
