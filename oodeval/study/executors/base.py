"""What every executor is, and the registry of executor classes.

An executor is a frozen dataclass subclass of `Executor`, registered with `register_executor`:
its fields are its options (`make_executor` builds it from keyword options), and its class
attributes say what the command line and the error messages need: its `~Executor.name`
(``--executor NAME``), the options ``oodeval study run`` shows for it (`ExecutorOption`), which
field ``--workers`` sets, and the extra it needs (the missing-extra line comes from
`Executor.imported_extra`).
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from oodeval._extras import MissingExtra, missing_extra_message
from oodeval._registry import Registry
from oodeval.errors import OodevalError, listing

if TYPE_CHECKING:  # executors import the study stack when they run, not when they register
    from oodeval.study.config import StudyConfig
    from oodeval.study.store import UnitRecord
    from oodeval.study.worker import UnitTask, WorkerSettings

#: What an executor yields: each finished unit's record, for the driver to store as it is (a
#: generator: the driver may close it).
UnitStream = Generator["UnitRecord", None, None]


@dataclass(frozen=True)
class ExecutorOption:
    """One command-line option of an executor: ``oodeval study run FLAG VALUE`` sets `field`.

    The option applies only with ``--executor`` naming its executor; left out (`default`), the
    field keeps the executor's own default, which `help` states.

    Parameters
    ----------
    flag : the option as typed, prefixed by the executor's name (``--ray-address``).
    field : the executor's field it sets (``address``).
    type : its Python type (str, int, float): the command line parses and checks it.
    help : one sentence for ``--help``.
    default : the value meaning "not given" (None: the executor's default).
    min, max : the smallest and largest values accepted, for numbers (a bound also refuses
        NaN; `max` infinity too).

    >>> ExecutorOption("--ray-unit-cpus", "cpus_per_unit", float, "CPUs.").param_name
    'ray_unit_cpus'
    """

    flag: str
    field: str
    type: type
    help: str
    default: Any = None
    min: float | None = None
    max: float | None = None

    @property
    def param_name(self) -> str:
        """The option's Python name on the command function (``--ray-address``: ray_address)."""
        return self.flag.lstrip("-").replace("-", "_")


class Executor(ABC):
    """Runs units somewhere and streams them back to the driver as they finish.

    Subclasses are frozen dataclasses registered with `register_executor`; they set the class
    attributes below.

    Attributes
    ----------
    name : what ``--executor`` (and `make_executor`) calls it.
    options : its command-line options beyond ``--workers`` (`ExecutorOption`).
    workers_field : the field ``--workers`` sets (local worker processes, the CPUs of a local
        Ray instance, the Slurm jobs running at once...).
    workers_help : what ``--workers`` means for it, for ``--help`` (None: worker processes).
    extra, extra_module : the optional extra it needs and the module that extra brings.
    """

    name: ClassVar[str]
    options: ClassVar[tuple[ExecutorOption, ...]] = ()
    workers_field: ClassVar[str] = "workers"
    workers_help: ClassVar[str | None] = None
    extra: ClassVar[str | None] = None
    extra_module: ClassVar[str | None] = None

    @abstractmethod
    def run(self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path) -> UnitStream:
        """Yield the `UnitRecord` of every task, in completion order.

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

    def folders_in(self, directory: Path) -> tuple[Path, ...]:
        """The folders inside the study folder `directory` this executor writes to (its logs).

        `run_study` refuses a symbolic link at any of them before it opens the store
        (`oodeval._files`). By default none.
        """
        return ()

    def check(self) -> None:
        """Raise OodevalError now if this executor cannot run here (a missing extra, no Slurm).

        `run_study` calls it before it opens the store, so a missing extra costs one error line.
        By default: the extra's module is importable (`imported_extra`).
        """
        self.imported_extra()

    def imported_extra(self) -> ModuleType | None:
        """The module of this executor's extra, imported (None when it needs no extra).

        Raises MissingExtra, one line naming the executor and the extra to install, when the
        module is not installed.
        """
        if self.extra_module is None:
            return None
        try:
            return importlib.import_module(self.extra_module)
        except ImportError:
            what = f"the {self.name} executor"
            message = missing_extra_message(what, self.extra_module, self.extra)
            raise MissingExtra(message) from None


E = TypeVar("E", bound=type[Executor])

#: The registered executor classes by name, in the order they were registered.
EXECUTOR_CLASSES: Registry[type[Executor]] = Registry("executor")


def register_executor(cls: E) -> E:
    """Class decorator: make `cls` known as ``--executor cls.name`` (and to `make_executor`).

    A name another class holds is refused in one line; the same class again (its module run
    again after an edit) replaces itself.
    """
    EXECUTOR_CLASSES.add(cls.name, cls)
    return cls


def make_executor(name: str | Executor | None = None, **options: Any) -> Executor:
    """The executor called `name` (``local`` by default) built with `options`.

    ``workers`` is understood by all of them and sets the class's `~Executor.workers_field`:
    local worker processes, the CPUs of a local Ray instance, or the number of Slurm jobs running
    at once. Options left at None take the executor's defaults; an `Executor` instance is
    returned as it is.

    >>> make_executor("ray", workers=2, cpus_per_unit=1)
    RayExecutor(address=None, num_cpus=2, cpus_per_unit=1, max_retries=0)
    >>> make_executor(None)
    LocalExecutor(workers=None)
    """
    if isinstance(name, Executor):
        return name
    name = name or "local"
    if name not in EXECUTOR_CLASSES:
        raise OodevalError(f"unknown executor {name!r}; use one of {', '.join(EXECUTOR_CLASSES)}")
    cls = EXECUTOR_CLASSES[name]
    options = {k: v for k, v in options.items() if v is not None}
    if "workers" in options:
        options[cls.workers_field] = options.pop("workers")
    fields = set(inspect.signature(cls).parameters)
    unknown = sorted(set(options) - fields)
    if unknown:
        raise OodevalError(
            f"the {name} executor has no option(s) {listing(unknown)}; it takes "
            f"{', '.join(sorted(fields))}"
        )
    return cls(**options)


def config_device(config: StudyConfig) -> str:
    """The config's ``[trainer] device`` (``"cpu"`` when absent)."""
    return str(config.trainer.get("device", "cpu"))


def worker_settings(cpus: float, config: StudyConfig) -> WorkerSettings:
    """A worker reserving `cpus` CPUs runs as many threads (their whole part, at least 1); on a
    GPU device it runs on ``"cuda"``, the one GPU its scheduler (Ray, Slurm) made visible.

    >>> from oodeval.study import preset
    >>> worker_settings(2.5, preset("quick"))
    WorkerSettings(threads=2, device=None)
    """
    from oodeval.study.worker import WorkerSettings

    device = None if config_device(config) == "cpu" else "cuda"
    return WorkerSettings(threads=max(1, int(cpus)), device=device)
