"""The Slurm executor: units as Slurm jobs (a job array) submitted with submitit."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from oodeval._files import refuse_links
from oodeval.errors import OodevalError
from oodeval.study.executors.base import (
    Executor,
    ExecutorOption,
    UnitStream,
    config_device,
    register_executor,
    worker_settings,
)

if TYPE_CHECKING:  # imported when units run (registering the class stays light)
    from oodeval.study.config import StudyConfig
    from oodeval.study.worker import UnitTask

#: submitit clusters: a real Slurm cluster, local processes, or in the driver process.
SLURM_CLUSTERS = ("slurm", "local", "debug")


@register_executor
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
    options: ClassVar[tuple[ExecutorOption, ...]] = (
        ExecutorOption("--slurm-partition", "partition", str, "Slurm partition."),
        ExecutorOption(
            "--slurm-time",
            "time_minutes",
            int,
            "Time limit per job in minutes (default 60).",
            min=1,
            max=525_600,  # a year
        ),
        ExecutorOption(
            "--slurm-cpus", "cpus_per_unit", int, "CPUs per job (default 1).", min=1, max=1024
        ),
        ExecutorOption("--slurm-mem", "mem_gb", float, "Memory per job in GB.", min=0.0, max=1e5),
        ExecutorOption(
            "--slurm-units-per-job",
            "units_per_job",
            int,
            "Units run one after another in each job (default 1).",
            min=1,
            max=1_000_000,
        ),
        ExecutorOption(
            "--slurm-cluster",
            "cluster",
            str,
            "slurm (default), local (processes) or debug (in-process).",
        ),
    )
    workers_field: ClassVar[str] = "max_parallel"
    workers_help: ClassVar[str | None] = "jobs running at once"
    extra: ClassVar[str | None] = "slurm"
    extra_module: ClassVar[str | None] = "submitit"

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

    def folders_in(self, directory: Path) -> tuple[Path, ...]:
        return (Path(directory) / self.log_folder,)

    def run(self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path) -> UnitStream:
        from oodeval.study.worker import failed_record, run_tasks

        if not tasks:
            return
        submitit = self._module()
        (folder,) = self.folders_in(directory)
        refuse_links(folder)  # submitit would write wherever a link points (`run_study` checks)
        executor = submitit.AutoExecutor(folder=folder, cluster=self.cluster)
        executor.update_parameters(**self.parameters(config))
        config_json = config.to_json()
        settings = worker_settings(self.cpus_per_unit, config)
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
                        records = job.result()
                    except submitit.core.utils.UncompletedJobError as exc:
                        if len(chunk) > 1:  # which unit ended the job? each one alone tells
                            queue.extendleft([task] for task in reversed(chunk))
                            continue
                        records = [failed_record(chunk[0], _job_reason(job, exc))]
                    yield from records
        finally:
            for job in inflight:  # the driver stops early: do not leave its jobs running
                try:
                    job.cancel(check=False)
                except Exception:  # already finished, or scancel is not reachable
                    pass

    def check(self) -> None:
        self._module()

    def _module(self) -> ModuleType:
        submitit = self.imported_extra()
        assert submitit is not None  # the class names its extra's module
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


def _job_reason(job: Any, exc: Exception) -> str:
    try:
        state = str(job.state)
    except Exception:  # the scheduler cannot be asked; the exception type still says a lot
        state = "unknown"
    return (
        f"job {job.job_id} ended without a result ({type(exc).__name__}, state {state}); "
        f"its log: {job.paths.stderr}; retry with --retry-failed"
    )
