"""Where a study's units run: local worker processes, a Ray cluster, or Slurm jobs via submitit.

Every executor turns the units still to do into a stream of `UnitRecord` objects in the order
the units finish. The driver (`oodeval.study.run_study`) alone writes that stream to
the SQLite store, one transaction per unit, whichever executor computed it; units are
independent, so the store is the only shared state. Resume and crash-safety therefore hold
exactly as locally: a driver killed at any moment leaves whole units in the store, and running
the study again skips them.

- `LocalExecutor` (``local``, the default): a pool of ``spawn`` worker processes on this machine.
- `RayExecutor` (``ray``): one Ray task per unit, reserving ``cpus_per_unit`` CPUs; connects to a
  running cluster (``address``) or starts a local instance. Needs ``pip install 'oodeval[ray]'``.
- `SlurmExecutor` (``slurm``): Slurm jobs (a job array) submitted with submitit;
  ``cluster="local"`` runs the same jobs as local processes and ``"debug"`` in the driver, for
  trying it without Slurm. Needs ``pip install 'oodeval[slurm]'``.

A unit that raises is a ``failed`` record with the reason, as locally; a unit whose process dies
(out of memory, a node lost, a Slurm time limit) is a ``failed`` record saying so. Failed units
are run again with ``retry_failed=True`` (``--retry-failed``).

GPUs (``[trainer] device`` cuda or cuda:N): the local executor runs one worker per GPU, each
pinned to its own (`local_devices`); a Ray unit asks for one GPU (``num_gpus=1``) and a Slurm job
for one (``gpus_per_node=1``), and runs on the GPU the scheduler made visible (``"cuda"``).

Adding an executor is one new module in this package: a frozen dataclass subclass of `Executor`
decorated with `register_executor`, declaring its ``--executor`` name, its command-line options
(`ExecutorOption`) and its extra (see `oodeval.study.executors.base`). Every module here is
imported with the package, so ``oodeval study run`` shows its options without another edit.
"""

import importlib
import pkgutil

from oodeval.study.executors.base import (
    EXECUTOR_CLASSES,
    Executor,
    ExecutorOption,
    UnitStream,
    config_device,
    make_executor,
    register_executor,
    worker_settings,
)
from oodeval.study.executors.local import LocalExecutor, gpu_count, local_devices
from oodeval.study.executors.ray import RayExecutor
from oodeval.study.executors.slurm import SLURM_CLUSTERS, SlurmExecutor

# every executor module registers its class on import: a new module needs no edit here
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "EXECUTOR_CLASSES",
    "SLURM_CLUSTERS",
    "Executor",
    "ExecutorOption",
    "LocalExecutor",
    "RayExecutor",
    "SlurmExecutor",
    "UnitStream",
    "config_device",
    "gpu_count",
    "local_devices",
    "make_executor",
    "register_executor",
    "worker_settings",
]
