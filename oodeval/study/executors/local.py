"""The default executor: worker processes on this machine, one per core or one per GPU."""

from __future__ import annotations

import concurrent.futures as cf
import os
from collections import deque
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from oodeval.errors import OodevalError
from oodeval.study.executors.base import (
    Executor,
    UnitStream,
    config_device,
    register_executor,
)

if TYPE_CHECKING:  # imported when units run (registering the class stays light)
    from oodeval.pool import WorkerPool
    from oodeval.study.config import StudyConfig
    from oodeval.study.store import UnitRecord
    from oodeval.study.worker import UnitTask


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


@register_executor
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
                yield self._run_alone(config_json, task, devices[0])
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
        from oodeval.study.worker import run_task

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
                    record = future.result()
                except BrokenProcessPool:
                    broken = True
                    suspects.append(task)
                    continue
                yield record

    @staticmethod
    def _run_alone(config_json: str, task: UnitTask, device: str | None) -> UnitRecord:
        from oodeval.study.worker import WORKER_DIED, failed_record, run_task

        with _pool(config_json, [device]) as pool:
            try:
                return pool.submit(run_task, task).result()
            except BrokenProcessPool:
                return failed_record(task, WORKER_DIED)


def _pool(config_json: str, devices: Sequence[str | None]) -> WorkerPool:
    """One process per entry of `devices` set up for the config, one thread each, worker i pinned
    to ``devices[i]`` (None: the config's device)."""
    from oodeval.pool import WorkerPool
    from oodeval.study.worker import WorkerSettings, setup_worker

    settings = [WorkerSettings(threads=1, device=device) for device in devices]
    return WorkerPool(
        len(settings),
        threads=1,
        initializer=setup_worker,
        initargs=(config_json,),
        per_worker=settings,
    )
