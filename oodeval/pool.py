"""The process pool for independent units: ``spawn`` workers that die with their driver.

`WorkerPool` is the one place oodeval starts worker processes, and `oodeval.study.worker` the
one runner of units in them: a study's local executor (`oodeval.study.executors.LocalExecutor`),
`oodeval.study.worker.run_units` on a `worker_pool` and a step-timing estimate
(`oodeval.study.estimate.estimate_steps`) all train units through it. Every worker

- runs ``threads`` BLAS/OpenMP/torch threads (one by default), so one worker per core keeps every
  core busy without oversubscription (`set_threads`);
- dies with its driver at any moment, start-up included (`exit_with_parent`): the driver's PID is
  taken by the driver when it creates the pool, not read by the worker, whose parent may already
  be gone (and replaced by PID 1) when its set-up runs;
- ignores Ctrl-C and SIGTERM: a terminal sends SIGINT to the whole process group, Slurm sends
  SIGTERM to every process of a job at its time limit, and the driver alone decides what happens
  (`WorkerPool.abandon` kills the workers and drops the units they were running). Both signals
  are blocked while a worker is started, so neither can reach one before it ignores them.

A killed driver also leaves no multiprocessing resource tracker behind: the tracker ends when the
last process holding its pipe ends, i.e. with the driver's last worker.

This module imports neither torch nor study code, so any part of oodeval can use it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Literal

from oodeval.errors import OodevalError

#: Environment variables that fix the thread count of OpenMP, MKL and OpenBLAS (and of torch,
#: which reads ``OMP_NUM_THREADS`` when it is imported).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Most worker processes a command starts (``--workers``): more than any one machine's cores
#: by far, and few enough that a mistyped count is refused before anything is created.
MAX_WORKERS = 1024

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
#: What stops a command (Ctrl-C, ``kill``, a Slurm time limit): the driver handles them, workers
#: ignore them.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def set_threads(threads: int) -> None:
    """Run `threads` BLAS/OpenMP/torch threads in this process from now on.

    The environment variables reach libraries loaded later; torch, when already imported, is set
    directly.
    """
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def exit_with_parent(parent: int, *, poll_seconds: float = 1.0) -> None:
    """End this process as soon as process `parent` (the driver that started it) is gone.

    `parent` must be taken by the driver and handed over: a worker that read its parent's PID
    itself could read it after the driver died and then watch PID 1 forever. On Linux the kernel
    signals the worker when its parent ends (``PR_SET_PDEATHSIG``); elsewhere a daemon thread polls
    the parent every `poll_seconds`. Either way the worker leaves at once: the driver alone writes
    results, so a worker has nothing to save.
    """
    if not _ask_kernel_to_signal_parent_death(parent):
        _poll_parent(parent, poll_seconds)
    if os.getppid() != parent:  # gone before the watch started (e.g. during the imports)
        os._exit(1)


def _ask_kernel_to_signal_parent_death(parent: int) -> bool:
    """Have Linux send SIGUSR1 when the parent ends; True when the request was accepted.

    The kernel ties the signal to the parent *thread* that started this process: it also fires
    when that thread ends while the driver lives on, so the handler exits only when the parent
    process changed (the kernel re-parents before it signals).
    """
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not sys.platform.startswith("linux") or not in_main_thread:
        return False

    def on_signal(signum: int, frame: object) -> None:
        if os.getppid() != parent:
            os._exit(1)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        previous = signal.signal(signal.SIGUSR1, on_signal)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGUSR1), 0, 0, 0) == 0:
            return True
        signal.signal(signal.SIGUSR1, previous)
    except (OSError, AttributeError):  # no prctl in this libc
        pass
    return False


def _poll_parent(parent: int, poll_seconds: float) -> None:
    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="oodeval-parent-watch", daemon=True).start()


@contextlib.contextmanager
def interrupts_blocked() -> Iterator[None]:
    """Hold back SIGINT (Ctrl-C) and SIGTERM in this thread inside the block; they are delivered
    at its end.

    Processes started inside the block inherit the blocked signals (that is how a new worker is
    kept from a Ctrl-C or a SIGTERM until it ignores them). Without ``pthread_sigmask`` (Windows)
    it does nothing.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class WorkerPool(ProcessPoolExecutor):
    """A `ProcessPoolExecutor` of `workers` ``spawn`` processes (default: one per CPU core).

    Each worker, when it starts: ignores SIGINT and SIGTERM, exits with the driver
    (`exit_with_parent`), runs `threads` threads (`set_threads`), imports the modules named in
    `preload` (e.g. ``("torch",)`` so that importing happens at start-up, not in the first unit),
    then calls ``initializer(*initargs)``. With `per_worker` (one item per worker) worker i calls
    ``initializer(*initargs, per_worker[i])`` instead: settings that differ between workers, such
    as a device each.

    Used as a context manager, the pool waits for its work on a normal exit and `abandon`\\ s it
    when an exception (Ctrl-C and SIGTERM included) leaves the block or when the pool is broken
    (a worker died: its other units have failed already, and their workers ignore SIGTERM).

    >>> with WorkerPool(1) as pool:
    ...     pool.submit(pow, 2, 10).result()
    1024
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        threads: int = 1,
        preload: Sequence[str] = (),
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        per_worker: Sequence[Any] | None = None,
    ) -> None:
        workers = (os.cpu_count() or 1) if workers is None else workers
        if workers < 1 or threads < 1:
            raise OodevalError(
                f"workers and threads per worker must be >= 1, got {workers} and {threads}"
            )
        context = multiprocessing.get_context("spawn")
        slots = None
        if per_worker is not None:
            if len(per_worker) != workers:
                raise OodevalError(
                    f"per_worker holds {len(per_worker)} item(s) for {workers} worker(s); "
                    "give one per worker"
                )
            slots = context.SimpleQueue()
            for item in per_worker:
                slots.put(item)
        super().__init__(
            max_workers=workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(os.getpid(), threads, tuple(preload), slots, initializer, tuple(initargs)),
        )

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        with interrupts_blocked():  # the pool may start a worker here (see the class docstring)
            future = super().submit(fn, *args, **kwargs)
        # The pool wakes its manager thread *before* it starts a worker for the unit, so the
        # manager may not watch the new worker yet: were that worker to die while the others
        # run long units, nothing would be noticed until one of them ends. Wake it again.
        wakeup = getattr(self, "_executor_manager_thread_wakeup", None)
        if wakeup is not None:
            with contextlib.suppress(OSError, ValueError):  # the pool is shutting down
                wakeup.wakeup()
        return future

    def abandon(self) -> None:
        """Stop now: drop queued work and kill the workers, abandoning what they are running.

        Futures not finished fail with `BrokenProcessPool` or are cancelled.
        """
        with interrupts_blocked():
            # the pool keeps no public handle on its processes (Python 3.14 adds kill_workers())
            for process in list((self._processes or {}).values()):
                with contextlib.suppress(OSError, ValueError):  # already gone or closed
                    process.kill()
            # the pool sees its workers die, fails their futures and stops at once
            self.shutdown(wait=True, cancel_futures=True)

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> Literal[False]:
        # A broken pool (a worker died) has failed every unit in flight and is ending the other
        # workers with SIGTERM, which they ignore: waiting would wait for their units, whose
        # results are already dropped. So the pool kills them, as on an exception.
        if exc_type is None and not self._broken:
            self.shutdown(wait=True)
        else:
            self.abandon()
        return False


def _start_worker(
    parent: int,
    threads: int,
    preload: tuple[str, ...],
    slots: Any,
    initializer: Callable[..., object] | None,
    initargs: tuple[Any, ...],
) -> None:
    """A worker's set-up (see `WorkerPool`); runs in the worker before any task."""
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked by the driver while it started this process
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    exit_with_parent(parent)
    set_threads(threads)
    for name in preload:
        importlib.import_module(name)
    set_threads(threads)  # torch may have been imported just now
    if initializer is not None:
        initializer(*initargs, *(() if slots is None else (slots.get(),)))
