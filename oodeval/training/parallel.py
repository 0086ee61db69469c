"""Run many units in parallel worker processes, one torch thread each.

Units are independent, so a pool of ``workers`` processes (default: the number of CPU cores) each
training one unit at a time with ``torch.set_num_threads(threads_per_worker)`` keeps every core
busy without thread oversubscription. Results come back in the order of the specs. The pool is
`oodeval.pool.WorkerPool`: its workers die with the driver, and Ctrl-C stops them at once.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from oodeval.environments.base import Scenario
from oodeval.errors import OodevalError
from oodeval.pool import WorkerPool
from oodeval.training.loo import UnitResult, run_unit


@dataclass(frozen=True)
class UnitSpec:
    """One unit to run: `run_unit(scenario, algorithm, seed=seed, steps=steps, **options)`.

    `scenario` is a Scenario, or a picklable zero-argument callable building one (e.g.
    ``functools.partial(build_scenario, "sr-cmnist", ratio="3:1")``), which each worker calls
    itself; use the callable for scenarios that cannot be pickled.
    """

    scenario: Scenario | Callable[[], Scenario]
    algorithm: str
    seed: int
    steps: int
    options: dict[str, Any] = field(default_factory=dict)


def _run(spec: UnitSpec) -> UnitResult:
    scenario = spec.scenario if isinstance(spec.scenario, Scenario) else spec.scenario()
    return run_unit(scenario, spec.algorithm, seed=spec.seed, steps=spec.steps, **spec.options)


def _check_picklable(specs: list[UnitSpec]) -> None:
    for spec in specs:
        try:
            pickle.dumps(spec)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise OodevalError(
                f"cannot send unit ({spec.algorithm}, seed {spec.seed}) to a worker process "
                f"({exc}); pass a picklable callable that builds the scenario, e.g. "
                "functools.partial(build_scenario, family, **params)"
            ) from None


def _check_counts(workers: int, threads_per_worker: int) -> None:
    if workers < 1 or threads_per_worker < 1:
        raise OodevalError(
            f"workers and threads_per_worker must be >= 1, got {workers} and {threads_per_worker}"
        )


def worker_pool(workers: int | None = None, *, threads_per_worker: int = 1) -> WorkerPool:
    """A pool of `workers` spawned processes (default: one per core), each on
    `threads_per_worker` torch threads, to pass to several `run_units` calls (close it after, e.g.
    ``with worker_pool() as pool:``); starting processes and importing torch happens once."""
    workers = (os.cpu_count() or 1) if workers is None else workers
    _check_counts(workers, threads_per_worker)
    return WorkerPool(workers, threads=threads_per_worker, preload=("torch",))


def run_units(
    specs: Iterable[UnitSpec],
    *,
    workers: int | None = None,
    threads_per_worker: int = 1,
    pool: WorkerPool | None = None,
) -> Iterator[UnitResult]:
    """Yield the `UnitResult` of every spec, in order, computed by `workers` processes.

    ``workers=1`` runs in this process (no pickling, the caller's thread setting); a failing unit
    (e.g. `TrainingDiverged`) raises when its result is reached. With `pool` (`worker_pool`) the
    units run in its processes, which stay up for the next call (give no `workers` then).
    """
    specs = list(specs)
    if pool is not None:
        if workers is not None or threads_per_worker != 1:
            raise OodevalError(
                "pass either pool= or workers=/threads_per_worker=, not both: the pool's "
                "processes and threads are fixed by worker_pool()"
            )
        _check_picklable(specs)
        yield from pool.map(_run, specs)
        return
    workers = (os.cpu_count() or 1) if workers is None else workers
    _check_counts(workers, threads_per_worker)
    if workers == 1 or len(specs) <= 1:
        for spec in specs:
            yield _run(spec)
        return
    _check_picklable(specs)
    with worker_pool(min(workers, len(specs)), threads_per_worker=threads_per_worker) as own:
        yield from own.map(_run, specs)
