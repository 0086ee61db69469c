"""The worker pool (`oodeval.pool`): per-worker settings, Ctrl-C, abandoning, dying with the driver.

The functions run in workers are defined here, at module level, so spawned processes import them.
Workers and tests meet at barriers, files and signals, never after a fixed delay; `_block` stands
for a unit that outlasts the test (it runs until its process is killed).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import threading
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from oodeval.errors import OodevalError
from oodeval.pool import THREAD_VARS, WorkerPool, exit_with_parent
from tests.helpers.waiting import wait_until

_ITEM: dict[str, object] = {}


def _block() -> None:
    """Run until this process is killed (a signal handler that returns does not end it)."""
    while True:
        signal.pause()


def _announce_then_block(path: str) -> None:
    """Write the file `path` (the test's sign that this unit is running), then `_block`."""
    Path(path).touch()
    _block()


def _announce_pid_then_block(path: str) -> None:
    """Write this process's PID to the file `path` (made whole at once), then `_block`."""
    Path(path + ".part").write_text(str(os.getpid()), encoding="utf-8")
    os.replace(path + ".part", path)
    _block()


def _remember(up, together, item) -> None:
    up.wait(timeout=120)  # both workers are up before either takes a task
    _ITEM["item"], _ITEM["together"] = item, together


def _pid_and_item() -> tuple[int, object]:
    # Returns only once the other task is running too: a worker holding this one cannot take the
    # other, so each worker answers one (one worker taking both would break the barrier).
    _ITEM["together"].wait(timeout=120)
    return os.getpid(), _ITEM["item"]


def _worker_state() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "parent": os.getppid(),
        "sigint": signal.getsignal(signal.SIGINT),
        "sigterm": signal.getsignal(signal.SIGTERM),
        "threads": {os.environ.get(var) for var in THREAD_VARS},
    }


def test_each_worker_gets_its_own_per_worker_item():
    ctx = multiprocessing.get_context("spawn")
    barriers = (ctx.Barrier(2), ctx.Barrier(2))
    pool = WorkerPool(2, initializer=_remember, initargs=barriers, per_worker=["a", "b"])
    with pool:
        answers = [f.result(timeout=120) for f in [pool.submit(_pid_and_item) for _ in range(2)]]
    assert len({pid for pid, _ in answers}) == 2
    assert sorted(item for _, item in answers) == ["a", "b"]
    with pytest.raises(OodevalError, match=r"per_worker holds 1 item\(s\) for 2 worker\(s\)"):
        WorkerPool(2, per_worker=["a"])
    with pytest.raises(OodevalError, match="must be >= 1"):
        WorkerPool(0)


def test_workers_ignore_ctrl_c_and_sigterm_know_their_driver_and_run_the_threads_asked():
    with WorkerPool(1, threads=2) as pool:
        state = pool.submit(_worker_state).result(timeout=120)
    assert state["pid"] != os.getpid() and state["parent"] == os.getpid()
    assert state["sigint"] == signal.SIG_IGN  # the driver alone handles Ctrl-C
    assert state["sigterm"] == signal.SIG_IGN  # and SIGTERM (Slurm sends it to every process)
    assert state["threads"] == {"2"}


def test_abandon_kills_the_workers_and_drops_their_units(tmp_path):
    started = tmp_path / "started"
    with WorkerPool(1) as pool:
        pid = pool.submit(os.getpid).result(timeout=120)
        running = pool.submit(_announce_then_block, str(started))
        queued = pool.submit(_block)
        wait_until(started.exists, "start of the first unit")
        pool.abandon()  # does not wait for the unit, which never ends: it is abandoned
    with pytest.raises((BrokenProcessPool, CancelledError)):
        running.result(timeout=0)
    with pytest.raises((BrokenProcessPool, CancelledError)):
        queued.result(timeout=0)
    assert not _alive(pid)


def test_leaving_the_pool_block_by_an_exception_abandons_the_units():
    with pytest.raises(KeyboardInterrupt), WorkerPool(1) as pool:
        pid = pool.submit(os.getpid).result(timeout=120)
        running = pool.submit(_block)
        raise KeyboardInterrupt
    assert running.done() and not _alive(pid)


def test_a_pool_broken_by_a_dead_worker_does_not_wait_for_the_units_of_the_others(tmp_path):
    """One worker dies while another runs a unit that never ends: the pool fails both units at
    once and ends the other worker with SIGTERM, which workers ignore. Leaving the block must
    kill that worker, not wait for its unit (hours, in a study; here forever). The dying worker
    is started by the submit of its unit, after the pool's manager went to wait: the death is
    seen all the same, not when the other unit ends."""
    started = tmp_path / "started"
    pool = WorkerPool(2)
    try:
        running = pool.submit(_announce_pid_then_block, str(started))
        wait_until(started.exists, "start of the unit that never ends")
        survivor = int(started.read_text(encoding="utf-8"))
        with pytest.raises(BrokenProcessPool):  # the other worker takes it: the first is busy
            pool.submit(os._exit, 3).result(timeout=120)
        with pytest.raises(BrokenProcessPool):  # failed at once, its worker still running
            running.result(timeout=0)
        leaving = threading.Thread(target=pool.__exit__, args=(None, None, None), daemon=True)
        leaving.start()
        # before the fix the pool waited for `survivor`, which ignored the SIGTERM it was sent
        wait_until(lambda: not leaving.is_alive(), "exit from the pool block", seconds=60)
        assert not _alive(survivor)
    finally:  # the safety net: never leave a blocked worker (and a waiting thread) behind
        for process in list((pool._processes or {}).values()):
            process.kill()


def _exit_with(parent: int) -> None:
    exit_with_parent(parent)
    _block()  # reached only while `parent` is this process's parent


def test_a_worker_whose_driver_is_already_gone_exits_at_once():
    """The start-up race: the driver died before the worker's set-up ran. The worker is handed
    the driver's PID, sees that its parent is another process, and leaves."""
    gone = multiprocessing.get_context("spawn").Process(target=os.getpid)  # ends at once
    gone.start()
    gone.join()
    worker = multiprocessing.get_context("spawn").Process(target=_exit_with, args=(gone.pid,))
    worker.start()
    try:
        worker.join(timeout=60)  # a guard: the worker exits at once, or blocks until killed
        assert worker.exitcode == 1
    finally:
        worker.kill()


def test_workers_end_themselves_when_the_driver_dies():
    """A worker whose driver is SIGKILLed exits instead of idling forever."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    driver = ctx.Process(target=_driver_with_one_worker, args=(ready,))
    driver.start()
    worker_pid = ready.get(timeout=120)
    os.kill(driver.pid, signal.SIGKILL)
    driver.join(timeout=10)
    _wait_until_gone(worker_pid, seconds=20)


def _driver_with_one_worker(ready) -> None:
    ctx = multiprocessing.get_context("spawn")
    worker = ctx.Process(target=_orphan_worker, args=(ready, os.getpid()))
    worker.start()
    worker.join()


def _orphan_worker(ready, parent: int) -> None:
    exit_with_parent(parent, poll_seconds=0.2)
    ready.put(os.getpid())
    _block()


def _report_parent_death_signal(path: str) -> int:
    """In a worker: from now on a SIGUSR1 (the kernel's parent-death signal) goes to the pool's
    handler, then, if that handler let the worker live, appends a line to the file `path`."""
    pool_handler = signal.getsignal(signal.SIGUSR1)

    def handler(signum, frame) -> None:
        if callable(pool_handler):
            pool_handler(signum, frame)
        with open(path, "a", encoding="utf-8") as f:
            f.write("handled\n")

    signal.signal(signal.SIGUSR1, handler)
    return os.getpid()


def test_a_pool_outlives_the_driver_thread_that_started_its_workers(tmp_path):
    """Linux signals a worker when the *thread* that started it ends; a driver thread ending while
    the driver lives on must not end the pool's workers."""
    handled = tmp_path / "handled"
    first: list[int] = []
    with WorkerPool(1) as pool:
        submit = functools.partial(pool.submit, _report_parent_death_signal, str(handled))
        starter = threading.Thread(target=lambda: first.append(submit().result(60)))
        starter.start()  # the thread's submit starts the worker
        starter.join()
        # the worker got the signal of its starter's end, and lived through the pool's handler
        wait_until(handled.exists, "SIGUSR1 handled by the worker after its starter thread ended")
        assert pool.submit(os.getpid).result(timeout=60) == first[0]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_until_gone(pid: int, *, seconds: float) -> None:
    try:
        wait_until(
            lambda: not _alive(pid), f"end of process {pid} after its driver died", seconds=seconds
        )
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _oodeval_imports(path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every ``from oodeval... import`` / ``import oodeval...`` in
    the file at `path`, function-level imports included."""
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("oodeval"):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("oodeval")]
    return out


def test_unit_execution_imports_point_one_way_and_share_no_private_names():
    """pool <- training; pool <- study.worker <- study.executors <- study.runner; never back."""
    import subprocess
    import sys
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "oodeval"
    forbidden = {
        "pool.py": ("oodeval.study", "oodeval.training"),
        "study/worker.py": ("oodeval.study.executors", "oodeval.study.runner"),
        "study/executors": ("oodeval.study.runner",),
    }
    files = [package / "pool.py", *sorted((package / "training").glob("*.py"))]
    files += [package / "study" / n for n in ("worker.py", "runner.py")]
    files += sorted((package / "study" / "executors").glob("*.py"))
    for path in files:
        name = path.relative_to(package).as_posix()
        for module, names in _oodeval_imports(path):
            key = "study/executors" if name.startswith("study/executors/") else name
            banned = forbidden.get(key, ("oodeval.study",) if name.startswith("training") else ())
            assert not module.startswith(banned), f"{name} imports {module}"
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{name} imports private {private} from {module}"
    # the study side (and the pool) load without torch
    code = (
        "import sys, oodeval.pool, oodeval.study.runner, oodeval.study.executors;"
        "print('torch' in sys.modules)"
    )
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert answer.stdout.strip() == "False", answer.stderr
