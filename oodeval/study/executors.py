"""Where a study's units run: local worker processes, a Ray cluster, or Slurm jobs via submitit.

Every executor turns the units still to do into a stream of ``(UnitRecord, rows)`` pairs in the
order the units finish. The driver (`oodeval.study.run_study`) alone writes that stream to the
SQLite store, one transaction per unit, whichever executor computed it; units are independent,
so the store is the only shared state. Resume and crash-safety therefore hold exactly as locally:
a driver killed at any moment leaves whole units in the store, and running the study again
skips them.

- `LocalExecutor` (the default): a pool of ``spawn`` worker processes on this machine.
- `RayExecutor`: one Ray task per unit, reserving ``cpus_per_unit`` CPUs; connects to a running
  cluster (``address``) or starts a local instance. Needs ``pip install 'oodeval[ray]'``.
- `SlurmExecutor`: Slurm jobs (a job array) submitted with submitit; ``cluster="local"`` runs
  the same jobs as local processes and ``"debug"`` in the driver, for trying it without Slurm.
  Needs ``pip install 'oodeval[slurm]'``.

A unit that raises is a ``failed`` record with the reason, as locally; a unit whose process dies
(out of memory, a node lost, a Slurm time limit) is a ``failed`` record saying so. Failed units
are run again with ``retry_failed=True`` (``--retry-failed``).

GPUs (``[trainer] device`` cuda or cuda:N): the local executor runs one worker per GPU, each
pinned to its own (`local_devices`); a Ray unit asks for one GPU (``num_gpus=1``) and a Slurm job
for one (``gpus_per_node=1``), and runs on the GPU the scheduler made visible (``"cuda"``).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib
import logging
import os
import shutil
import socket
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from oodeval._extras import MissingExtra, missing_extra_message
from oodeval.errors import OodevalError, listing
from oodeval.pool import WorkerPool
from oodeval.study.config import StudyConfig
from oodeval.study.worker import (
    WORKER_DIED,
    UnitOutcome,
    UnitTask,
    WorkerSettings,
    failed_outcome,
    run_task,
    run_tasks,
    setup_worker,
)

#: Executor names accepted by `make_executor`, `run_study` and ``oodeval study run --executor``.
EXECUTORS = ("local", "ray", "slurm")
#: submitit clusters: a real Slurm cluster, local processes, or in the driver process.
SLURM_CLUSTERS = ("slurm", "local", "debug")

#: What an executor yields: each finished unit's task and outcome.
UnitStream = Iterator[tuple[UnitTask, UnitOutcome]]


class Executor(ABC):
    """Runs units somewhere and streams them back to the driver as they finish."""

    name: ClassVar[str]

    @abstractmethod
    def run(self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path) -> UnitStream:
        """Yield ``(task, outcome)`` for every task, in completion order.

        The driver may stop reading at any moment (Ctrl-C, an error while it stores a unit): it
        then closes the stream, and the executor stops what it started for the units still
        running, abandoning them.

        Parameters
        ----------
        config : the (prepared) study config; workers rebuild it from its JSON form.
        tasks : the units to run (those the store does not hold yet).
        directory : the study folder (executors may keep logs there).
        """

    @property
    def trains_elsewhere(self) -> bool:
        """True when units train on other machines (a given Ray cluster, Slurm nodes), whose
        devices this machine cannot check: the workers check them when they start."""
        return False

    def check(self) -> None:
        """Raise OodevalError now if this executor cannot run here (a missing extra, no Slurm).

        `run_study` calls it before it opens the store, so a missing extra costs one error line.
        The local executor can always run.
        """
        return None


def config_device(config: StudyConfig) -> str:
    """The config's ``[trainer] device`` (``"cpu"`` when absent)."""
    return str(config.trainer.get("device", "cpu"))


def local_devices(device: str, workers: int | None, gpus: int) -> list[str | None]:
    """The device each local worker is pinned to, one entry per worker (None: the config's).

    ``"cuda"`` on a machine with `gpus` GPUs: one worker per GPU (or `workers`, spread over the
    GPUs in turn), worker i on ``cuda:{i mod gpus}``; ``"cuda:N"``: every worker (default one) on
    it; the CPU: `workers` (default: one per core) unpinned workers.

    >>> local_devices("cuda", None, 2), local_devices("cuda:1", None, 2)
    (['cuda:0', 'cuda:1'], ['cuda:1'])
    >>> local_devices("cpu", 3, 0)
    [None, None, None]
    """
    if device == "cuda":
        if gpus < 1:
            raise OodevalError("device 'cuda' requested but CUDA is not available here")
        return [f"cuda:{i % gpus}" for i in range(int(workers or gpus))]
    if device.startswith("cuda:"):
        return [device] * int(workers or 1)
    return [None] * max(1, int(workers or os.cpu_count() or 1))


def gpu_count(device: str) -> int:
    """The GPUs this machine has for a study on `device` (0 for the CPU, torch not imported)."""
    if device == "cpu":
        return 0  # torch is not imported by the driver for a CPU study
    from oodeval._torch import cuda_count

    return cuda_count()


@dataclass(frozen=True)
class LocalExecutor(Executor):
    """Worker processes on this machine (``spawn``, one BLAS/torch thread each).

    Parameters
    ----------
    workers : number of worker processes (default: the number of CPU cores; on GPUs one per
        GPU, each pinned to its own, `local_devices`).
    """

    workers: int | None = None
    name: ClassVar[str] = "local"

    def run(self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path) -> UnitStream:
        """Run the tasks in a pool of worker processes (see `_stream`).

        When a worker process dies (the pool breaks), the units that were in flight are suspects:
        each is re-run alone in a fresh one-worker pool, so only a unit that kills its worker by
        itself is recorded as failed; the others complete normally.
        """
        device = config_device(config)
        devices = local_devices(device, self.workers, gpu_count(device))
        workers = len(devices)
        pending = deque(tasks)
        suspects: deque[UnitTask] = deque()
        config_json = config.to_json()
        while pending or suspects:
            if suspects:
                task = suspects.popleft()
                yield task, self._run_alone(config_json, task, devices[0])
                continue
            with _pool(config_json, devices[: min(workers, len(pending))]) as pool:
                yield from self._stream(pool, pending, suspects, window=2 * workers)

    @staticmethod
    def _stream(
        pool: WorkerPool, pending: deque[UnitTask], suspects: deque[UnitTask], *, window: int
    ) -> UnitStream:
        """Feed `pending` to `pool` (at most `window` in flight) and yield units as they finish.

        When the pool breaks, the units that were in flight go to `suspects` and the rest stay in
        `pending`.
        """
        inflight: dict[cf.Future, UnitTask] = {}
        broken = False
        while (pending and not broken) or inflight:
            while not broken and pending and len(inflight) < window:
                task = pending.popleft()
                try:
                    inflight[pool.submit(run_task, task)] = task
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
                yield task, outcome

    @staticmethod
    def _run_alone(config_json: str, task: UnitTask, device: str | None) -> UnitOutcome:
        with _pool(config_json, [device]) as pool:
            try:
                return pool.submit(run_task, task).result()
            except BrokenProcessPool:
                return failed_outcome(task, WORKER_DIED)


def _pool(config_json: str, devices: Sequence[str | None]) -> WorkerPool:
    """One process per entry of `devices` set up for the config, one thread each, worker i pinned
    to ``devices[i]`` (None: the config's device)."""
    settings = [WorkerSettings(threads=1, device=device) for device in devices]
    return WorkerPool(
        len(settings),
        threads=1,
        initializer=setup_worker,
        initargs=(config_json,),
        per_worker=settings,
    )


@dataclass(frozen=True)
class RayExecutor(Executor):
    """One Ray task per unit, results streamed back with ``ray.wait`` as tasks finish.

    When the driver process is already connected to Ray (``ray.is_initialized()``) that
    connection is used. Otherwise it connects to ``address`` (``"auto"`` finds the cluster this
    node belongs to, ``"ray://host:10001"`` is a Ray client) or, without one, starts a local
    instance with ``num_cpus`` CPUs and shuts it down at the end. Every node needs oodeval (and
    the config's backend and imports) installed; each unit records its versions and source
    digest, so units computed by different code can be told apart.

    Parameters
    ----------
    address : a running cluster to connect to (default: start a local instance).
    num_cpus : CPUs of a local instance (default: the number of CPU cores).
    cpus_per_unit : CPUs each unit reserves; its torch/BLAS threads equal the whole part (at
        least 1). With 1 (the default) every unit's numbers equal the local executor's exactly.
    max_retries : times Ray re-runs a unit whose worker died before recording it as failed.
    """

    address: str | None = None
    num_cpus: int | None = None
    cpus_per_unit: float = 1.0
    max_retries: int = 0
    name: ClassVar[str] = "ray"

    def __post_init__(self) -> None:
        if not self.cpus_per_unit > 0:
            raise OodevalError(f"CPUs per unit must be > 0, got {self.cpus_per_unit!r}")
        if self.num_cpus is not None and self.num_cpus < self.cpus_per_unit:
            raise OodevalError(
                f"a local Ray instance with {self.num_cpus} CPU(s) cannot run units needing "
                f"{self.cpus_per_unit:g}; raise --workers or lower the CPUs per unit"
            )
        if self.max_retries < 0:
            raise OodevalError(f"max_retries must be >= 0, got {self.max_retries!r}")
        if self.address and self.num_cpus is not None:
            raise OodevalError(
                "the CPUs of a Ray cluster given by address are its own; drop --workers "
                "(num_cpus) or the address"
            )

    def run(self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path) -> UnitStream:
        if not tasks:
            return
        ray = self._module()
        started = self._connect(ray)
        refs: dict[Any, UnitTask] = {}
        try:
            remote = ray.remote(run_tasks).options(**self.task_options(config))
            config_ref = ray.put(config.to_json())
            settings = _settings(self.cpus_per_unit, config)
            refs = {remote.remote(config_ref, settings, [task]): task for task in tasks}
            waiting = list(refs)
            while waiting:
                ready, waiting = ray.wait(waiting, num_returns=1)
                for ref in ready:
                    task = refs.pop(ref)
                    try:
                        (outcome,) = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        outcome = failed_outcome(task, _ray_reason(ray, exc))
                    yield task, outcome
        finally:
            for ref in refs:  # the driver stops early: do not leave its units running
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already finished or the connection is gone
                    pass
            if started:
                ray.shutdown()

    def task_options(self, config: StudyConfig) -> dict[str, Any]:
        """The resources each unit's Ray task asks for: its CPUs, and one GPU on a GPU device.

        >>> from oodeval.study import preset
        >>> RayExecutor().task_options(preset("quick"))
        {'num_cpus': 1.0, 'max_retries': 0}
        """
        options: dict[str, Any] = {
            "num_cpus": float(self.cpus_per_unit),
            "max_retries": int(self.max_retries),
        }
        if config_device(config) != "cpu":
            options["num_gpus"] = 1
        return options

    def check(self) -> None:
        self._module()
        if self.address and self.address != "auto":
            _check_reachable(self.address)

    def _module(self) -> ModuleType:
        return _import_extra("ray", "ray")

    def _connect(self, ray: ModuleType) -> bool:
        """Connect to Ray unless connected already; True when this call started the connection."""
        if ray.is_initialized():
            return False
        options: dict[str, Any] = {"logging_level": logging.WARNING}
        if self.address:
            options["address"] = self.address
        else:
            cpus = int(self.num_cpus or os.cpu_count() or 1)
            options.update(num_cpus=cpus, include_dashboard=False)
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OodevalError(
                f"cannot start or reach {where} ({first}); check the address (`ray status` on "
                "the head node) or omit --ray-address to start a local instance"
            ) from None
        return True

    @property
    def trains_elsewhere(self) -> bool:  # a cluster given by address; else a local instance
        return self.address is not None


@dataclass(frozen=True)
class SlurmExecutor(Executor):
    """Slurm jobs submitted with submitit, streamed back as they finish.

    Units go out as one job array of ``ceil(n_units / units_per_job)`` jobs (logs and submitit's
    files in ``DIR/<log_folder>/``); each job runs its units one after another in one process.
    A job that ends without a result (killed, out of time or memory) fails its unit; when it held
    several units, each is submitted again as a job of its own, so only the unit at fault fails.
    The study folder must be on a file system the nodes share: submitit exchanges each job's
    function, arguments and result through it as pickles (the driver reads back only the result
    files its own jobs wrote). Jobs of a driver killed mid-study keep running, but their results
    are not stored: cancel them with ``scancel --name oodeval-<study name>`` and run the study
    again (it skips the units stored before the kill).

    Parameters
    ----------
    partition : Slurm partition (default: the cluster's default partition).
    time_minutes : time limit of each job, in minutes.
    cpus_per_unit : CPUs per job (``--cpus-per-task``); units use that many torch/BLAS threads.
    mem_gb : memory per job in GB (default: the partition's default).
    cluster : ``"slurm"``, ``"local"`` (local processes, as many at a time as ``max_parallel``)
        or ``"debug"`` (one job after another inside the driver).
    units_per_job : units per job; larger values amortise scheduling for short units.
    max_parallel : jobs running at once (Slurm: ``--array=...%N``; local: default cores/CPUs).
    poll_seconds : pause between checks of unfinished jobs.
    log_folder : folder inside the study folder for submitit's files and the job logs.
    """

    partition: str | None = None
    time_minutes: int = 60
    cpus_per_unit: int = 1
    mem_gb: float | None = None
    cluster: str = "slurm"
    units_per_job: int = 1
    max_parallel: int | None = None
    poll_seconds: float = 1.0
    log_folder: str = "slurm"
    name: ClassVar[str] = "slurm"

    def __post_init__(self) -> None:
        if self.cluster not in SLURM_CLUSTERS:
            raise OodevalError(
                f"unknown submitit cluster {self.cluster!r}; use one of {', '.join(SLURM_CLUSTERS)}"
            )
        for label, value in (
            ("time limit (minutes)", self.time_minutes),
            ("CPUs per unit", self.cpus_per_unit),
            ("units per job", self.units_per_job),
            ("max parallel jobs", 1 if self.max_parallel is None else self.max_parallel),
        ):
            if int(value) != value or value < 1:
                raise OodevalError(f"Slurm {label} must be an integer >= 1, got {value!r}")
        if self.mem_gb is not None and not self.mem_gb > 0:
            raise OodevalError(f"Slurm memory must be > 0 GB, got {self.mem_gb!r}")

    def run(self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path) -> UnitStream:
        if not tasks:
            return
        submitit = self._module()
        executor = submitit.AutoExecutor(
            folder=Path(directory) / self.log_folder, cluster=self.cluster
        )
        executor.update_parameters(**self.parameters(config))
        config_json = config.to_json()
        settings = _settings(self.cpus_per_unit, config)
        size = int(self.units_per_job)
        queue = deque(list(tasks[i : i + size]) for i in range(0, len(tasks), size))
        window = len(queue) if self.cluster == "slurm" else self._local_window()
        inflight: dict[Any, list[UnitTask]] = {}
        try:
            while queue or inflight:
                chunks = [queue.popleft() for _ in range(min(len(queue), window - len(inflight)))]
                if chunks:
                    with executor.batch() if len(chunks) > 1 else contextlib.nullcontext():
                        jobs = [
                            executor.submit(run_tasks, config_json, settings, chunk)
                            for chunk in chunks
                        ]
                    inflight.update(zip(jobs, chunks, strict=True))
                finished = [job for job in inflight if job.done()]
                if not finished:
                    time.sleep(self.poll_seconds)
                    continue
                for job in finished:
                    chunk = inflight.pop(job)
                    try:
                        outcomes = job.result()
                    except submitit.core.utils.UncompletedJobError as exc:
                        if len(chunk) > 1:  # which unit ended the job? each one alone tells
                            queue.extendleft([task] for task in reversed(chunk))
                            continue
                        outcomes = [failed_outcome(chunk[0], _job_reason(job, exc))]
                    yield from zip(chunk, outcomes, strict=True)
        finally:
            for job in inflight:  # the driver stops early: do not leave its jobs running
                try:
                    job.cancel(check=False)
                except Exception:  # already finished, or scancel is not reachable
                    pass

    def check(self) -> None:
        self._module()

    def _module(self) -> ModuleType:
        submitit = _import_extra("submitit", "slurm")
        if self.cluster == "slurm" and shutil.which("sbatch") is None:
            raise OodevalError(
                "sbatch not found: run on a Slurm login node, or pass --slurm-cluster local to "
                "run the jobs as local processes"
            )
        return submitit

    def parameters(self, config: StudyConfig) -> dict[str, Any]:
        """submitit's job parameters: name, time, CPUs, memory, partition, array parallelism and,
        on a GPU device, one GPU per job (``gpus_per_node=1``, Slurm's ``--gpus-per-node``)."""
        params: dict[str, Any] = {
            "name": f"oodeval-{config.name}",
            "timeout_min": int(self.time_minutes),
            "cpus_per_task": int(self.cpus_per_unit),
        }
        if self.mem_gb is not None:
            params["mem_gb"] = float(self.mem_gb)
        if self.partition:
            params["slurm_partition"] = self.partition
        if self.max_parallel is not None:
            params["slurm_array_parallelism"] = int(self.max_parallel)
        if config_device(config) != "cpu":
            params["gpus_per_node"] = 1
        return params

    def _local_window(self) -> int:
        if self.max_parallel is not None:
            return int(self.max_parallel)
        return max(1, (os.cpu_count() or 1) // int(self.cpus_per_unit))

    @property
    def trains_elsewhere(self) -> bool:  # Slurm nodes; submitit's local modes train here
        return self.cluster == "slurm"


def make_executor(name: str | Executor | None = None, **options: Any) -> Executor:
    """The executor called `name` (``local``, ``ray``, ``slurm``) built with `options`.

    ``workers`` is understood by all three: local worker processes, the CPUs of a local Ray
    instance, or the number of Slurm jobs running at once. Options left at None take the
    executor's defaults; an `Executor` instance is returned as it is.

    >>> make_executor("ray", workers=2, cpus_per_unit=1)
    RayExecutor(address=None, num_cpus=2, cpus_per_unit=1, max_retries=0)
    >>> make_executor(None)
    LocalExecutor(workers=None)
    """
    if isinstance(name, Executor):
        return name
    name = name or "local"
    classes: dict[str, type[Executor]] = {
        "local": LocalExecutor,
        "ray": RayExecutor,
        "slurm": SlurmExecutor,
    }
    if name not in classes:
        raise OodevalError(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}")
    renamed = {"ray": "num_cpus", "slurm": "max_parallel"}
    options = {k: v for k, v in options.items() if v is not None}
    if "workers" in options and name in renamed:
        options[renamed[name]] = options.pop("workers")
    fields = set(classes[name].__dataclass_fields__)
    unknown = sorted(set(options) - fields)
    if unknown:
        raise OodevalError(
            f"the {name} executor has no option(s) {listing(unknown)}; it takes "
            f"{', '.join(sorted(fields))}"
        )
    return classes[name](**options)


# -- helpers ----------------------------------------------------------------------------------
def _import_extra(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(missing_extra_message(f"the {extra} executor", module, extra)) from None


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Raise OodevalError when nothing accepts connections at ``[ray://]host:port``.

    Ray itself retries an unreachable address for minutes; this answers in seconds.
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise OodevalError(
            f"Ray address {address!r} is not host:port (or ray://host:port, or auto); "
            "use the address `ray start --head` printed"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise OodevalError(
            f"nothing answers at Ray address {address} ({exc.strerror or exc}); start the "
            "cluster (`ray start --head`) or omit --ray-address to start a local instance"
        ) from None


def _settings(cpus: float, config: StudyConfig) -> WorkerSettings:
    """A worker reserving `cpus` CPUs runs as many threads (their whole part, at least 1); on a
    GPU device it runs on ``"cuda"``, the one GPU its scheduler (Ray, Slurm) made visible."""
    device = None if config_device(config) == "cpu" else "cuda"
    return WorkerSettings(threads=max(1, int(cpus)), device=device)


def _ray_reason(ray: ModuleType, exc: Exception) -> str:
    if isinstance(exc, ray.exceptions.WorkerCrashedError | ray.exceptions.NodeDiedError):
        return WORKER_DIED
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"Ray could not run this unit ({type(exc).__name__}: {first}); retry with --retry-failed"


def _job_reason(job: Any, exc: Exception) -> str:
    try:
        state = str(job.state)
    except Exception:  # the scheduler cannot be asked; the exception type still says a lot
        state = "unknown"
    return (
        f"job {job.job_id} ended without a result ({type(exc).__name__}, state {state}); "
        f"its log: {job.paths.stderr}; retry with --retry-failed"
    )
