"""The worker pool (`oodeval.pool`): per-worker settings, Ctrl-C, abandoning, dying with the driver.

The functions run in workers are defined here, at module level, so spawned processes import them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool

import pytest

from oodeval.errors import OodevalError
from oodeval.pool import THREAD_VARS, WorkerPool, exit_with_parent

_ITEM: dict[str, object] = {}


def _remember(barrier, item) -> None:
    barrier.wait(timeout=120)  # both workers are up before either takes a task
    _ITEM["item"] = item


def _pid_and_item() -> tuple[int, object]:
    time.sleep(0.5)  # keeps this worker busy, so the other one takes the other task
    return os.getpid(), _ITEM["item"]


def _worker_state() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "parent": os.getppid(),
        "sigint": signal.getsignal(signal.SIGINT),
        "threads": {os.environ.get(var) for var in THREAD_VARS},
    }


def test_each_worker_gets_its_own_per_worker_item():
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    pool = WorkerPool(2, initializer=_remember, initargs=(barrier,), per_worker=["a", "b"])
    with pool:
        answers = [f.result(timeout=120) for f in [pool.submit(_pid_and_item) for _ in range(2)]]
    assert len({pid for pid, _ in answers}) == 2
    assert sorted(item for _, item in answers) == ["a", "b"]
    with pytest.raises(OodevalError, match=r"per_worker holds 1 item\(s\) for 2 worker\(s\)"):
        WorkerPool(2, per_worker=["a"])
    with pytest.raises(OodevalError, match="must be >= 1"):
        WorkerPool(0)


def test_workers_ignore_ctrl_c_know_their_driver_and_run_the_threads_asked():
    with WorkerPool(1, threads=2) as pool:
        state = pool.submit(_worker_state).result(timeout=120)
    assert state["pid"] != os.getpid() and state["parent"] == os.getpid()
    assert state["sigint"] == signal.SIG_IGN  # the driver alone handles Ctrl-C
    assert state["threads"] == {"2"}


def test_abandon_kills_the_workers_and_drops_their_units():
    with WorkerPool(1) as pool:
        pid = pool.submit(os.getpid).result(timeout=120)
        running = pool.submit(time.sleep, 60)
        queued = pool.submit(time.sleep, 60)
        time.sleep(0.5)
        pool.abandon()  # does not wait the 60 s: the unit is abandoned
    with pytest.raises((BrokenProcessPool, CancelledError)):
        running.result(timeout=0)
    with pytest.raises((BrokenProcessPool, CancelledError)):
        queued.result(timeout=0)
    assert not _alive(pid)


def test_leaving_the_pool_block_by_an_exception_abandons_the_units():
    with pytest.raises(KeyboardInterrupt), WorkerPool(1) as pool:
        pid = pool.submit(os.getpid).result(timeout=120)
        running = pool.submit(time.sleep, 60)
        raise KeyboardInterrupt
    assert running.done() and not _alive(pid)


def _exit_with(parent: int) -> None:
    exit_with_parent(parent)
    time.sleep(60)  # reached only while `parent` is this process's parent


def test_a_worker_whose_driver_is_already_gone_exits_at_once():
    """The start-up race: the driver died before the worker's set-up ran. The worker is handed
    the driver's PID, sees that its parent is another process, and leaves."""
    gone = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    gone.start()
    gone.join()
    worker = multiprocessing.get_context("spawn").Process(target=_exit_with, args=(gone.pid,))
    worker.start()
    worker.join(timeout=60)
    assert worker.exitcode == 1


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
    time.sleep(120)


def test_a_pool_outlives_the_driver_thread_that_started_its_workers():
    """Linux signals a worker when the *thread* that started it ends; a driver thread ending while
    the driver lives on must not end the pool's workers."""
    pool = WorkerPool(1)
    first: list[int] = []
    starter = threading.Thread(target=lambda: first.append(pool.submit(os.getpid).result(60)))
    starter.start()
    starter.join()
    time.sleep(0.5)  # the signal, if any, has been delivered and handled
    with pool:
        assert pool.submit(os.getpid).result(timeout=60) == first[0]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_until_gone(pid: int, *, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"process {pid} was still alive {seconds} s after its driver died")


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
