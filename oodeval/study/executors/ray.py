"""The Ray executor: one Ray task per unit, on a running cluster or a local instance."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

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


@register_executor
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
    options: ClassVar[tuple[ExecutorOption, ...]] = (
        ExecutorOption(
            "--ray-address",
            "address",
            str,
            "Ray cluster to join, e.g. auto (default: start a local one).",
        ),
        ExecutorOption(
            "--ray-unit-cpus",
            "cpus_per_unit",
            float,
            "CPUs each unit reserves on Ray (default 1).",
            min=0.0,
            max=1024.0,
        ),
        ExecutorOption(
            "--ray-max-retries",
            "max_retries",
            int,
            "Times Ray re-runs a unit whose worker or node died, on any live node (default 0).",
            min=0,
            max=100,
        ),
    )
    workers_field: ClassVar[str] = "num_cpus"
    workers_help: ClassVar[str | None] = "CPUs of a local instance"
    extra: ClassVar[str | None] = "ray"
    extra_module: ClassVar[str | None] = "ray"

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
        from oodeval.study.worker import failed_record, run_tasks

        if not tasks:
            return
        ray = self._module()
        started = self._connect(ray)
        refs: dict[Any, UnitTask] = {}
        try:
            remote = ray.remote(run_tasks).options(**self.task_options(config))
            config_ref = ray.put(config.to_json())
            settings = worker_settings(self.cpus_per_unit, config)
            refs = {remote.remote(config_ref, settings, [task]): task for task in tasks}
            waiting = list(refs)
            while waiting:
                ready, waiting = ray.wait(waiting, num_returns=1)
                for ref in ready:
                    task = refs.pop(ref)
                    try:
                        (record,) = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        record = failed_record(task, _ray_reason(ray, exc))
                    yield record
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
        ray = self.imported_extra()
        assert ray is not None  # the class names its extra's module
        return ray

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
        sigterm = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OodevalError(
                f"cannot start or reach {where} ({first}); check the address (`ray status` on "
                "the head node) or omit --ray-address to start a local instance"
            ) from None
        finally:
            # ray.init replaces SIGTERM's handler by sys.exit: keep the caller's (the command
            # line's stops like Ctrl-C, cancelling the units in flight; see oodeval.cli._common)
            if sigterm is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, sigterm)
        return True

    @property
    def trains_elsewhere(self) -> bool:  # a cluster given by address; else a local instance
        return self.address is not None


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


def _ray_reason(ray: ModuleType, exc: Exception) -> str:
    from oodeval.study.worker import WORKER_DIED

    if isinstance(exc, ray.exceptions.WorkerCrashedError | ray.exceptions.NodeDiedError):
        return WORKER_DIED
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"Ray could not run this unit ({type(exc).__name__}: {first}); retry with --retry-failed"
