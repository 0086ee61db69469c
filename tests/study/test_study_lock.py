"""One writer per study folder: a second writer is refused naming the holder; a dead holder's lock
is taken over; readers never wait.

Orderings are made, not timed: a holder keeps the lock until the test closes its stdin, a study's
units wait for a gate file the test creates, and readers run with SQLite's busy timeout at 0, so
waiting for the writer would be an error instead of a delay.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.study.store import (
    LOCK_NAME,
    ResultStore,
    StudyLock,
    StudyLockedError,
    load_study,
    read_holder,
)
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]

HOLD = """
import sys
from oodeval.study.store import study_lock
lock = study_lock(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


def hold_lock(directory: Path) -> subprocess.Popen:
    """A separate process that takes the folder's lock and keeps it until killed (or until its
    stdin is closed)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_writer_is_refused_naming_host_and_pid(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(StudyLockedError) as caught:
            ResultStore(tmp_path, create=True)
        message = str(caught.value)
        assert f"host {socket.gethostname()}, PID {holder.pid}, since " in message
        assert "being written by another oodeval study run" in message
        # the refused writer created nothing: the folder still has no store
        assert not (tmp_path / "results.sqlite").exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_holder_is_taken_over(tmp_path):
    holder = hold_lock(tmp_path)
    assert read_holder(tmp_path).pid == holder.pid
    os.kill(holder.pid, signal.SIGKILL)  # no chance to release anything
    holder.wait()
    with StudyLock(tmp_path) as lock:
        assert lock.held
        assert read_holder(tmp_path).pid == os.getpid()
    # released: the file stays (deleting it would let two writers lock two files), empty
    assert (tmp_path / LOCK_NAME).exists() and read_holder(tmp_path) is None


def test_a_stale_lock_file_from_another_host_is_taken_over(tmp_path):
    # a holder that died on another machine left its record; no process holds the flock
    record = {"host": "node-that-died", "pid": 4242, "started": "2025-01-01T00:00:00+00:00"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(record))
    with ResultStore(tmp_path, create=True):
        assert read_holder(tmp_path).host == socket.gethostname()


def test_two_writers_in_one_process_are_refused_too(tmp_path):
    with ResultStore(tmp_path, create=True):
        with pytest.raises(StudyLockedError, match=f"PID {os.getpid()}"):
            ResultStore(tmp_path, create=True)
    with ResultStore(tmp_path, create=True):  # free again once the first closed
        pass


def test_readers_do_not_wait_for_the_writer(tmp_path, monkeypatch):
    """Readers open the store while a writer is inside a write transaction. Every connection
    opened meanwhile has SQLite's busy timeout at 0: one that had to wait for the writer's lock
    would fail at once with "database is locked" (as the check below shows), so readers that
    succeed never waited."""
    with ResultStore(tmp_path, create=True) as writer:
        writer.bind_config({"name": "s", "algorithms": ["ERM"], "seeds": [0], "scenarios": [{}]})
        store = tmp_path / "results.sqlite"
        busy = sqlite3.connect(store, isolation_level=None)
        busy.execute("BEGIN IMMEDIATE")  # a writer in the middle of a transaction
        connect, opened = sqlite3.connect, []

        def without_waiting(*args, **kwargs):
            opened.append(args[0])
            return connect(*args, **{**kwargs, "timeout": 0})

        monkeypatch.setattr(sqlite3, "connect", without_waiting)
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            sqlite3.connect(store, isolation_level=None).execute("BEGIN IMMEDIATE")
        del opened[:]
        study = load_study(tmp_path)
        status = CliRunner().invoke(app, ["study", "status", str(tmp_path)])
        assert len(opened) >= 2  # both readers opened the store through the patched connect
        busy.execute("ROLLBACK")
        busy.close()
    assert study.counts()["done"] == 0
    assert status.exit_code == 0 and "0 done, 0 failed, 1 pending (of 1)" in status.output


def test_a_file_system_without_locks_is_one_clear_error(tmp_path, monkeypatch):
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(OodevalError, match="the file system does not support locks"):
        StudyLock(tmp_path).acquire()


# Every unit waits for the file `gate` (tests/cluster_backend.py): the first run cannot finish
# before the test creates it.
CONFIG = """
name = "two-writers"
backend = "tests.cluster_backend"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx"]
seeds = [0]
steps = 5
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }},
             {{ family = "synthetic", ratio = "3:1", scale = 2 }}]
[unit_options]
gate = "{gate}"
gated_algorithms = ["ERM", "IRM", "GroupDRO", "VREx"]
"""


def study_run(config: Path, out: Path, **kwargs) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(config), "--out"]
    cmd += [str(out), "--workers", "1", "--no-progress", "--no-report"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the workers import tests.cluster_backend
    return subprocess.Popen(cmd, cwd=REPO, env=env, text=True, **kwargs)


def test_two_study_runs_on_one_folder_the_second_refuses_at_once(tmp_path):
    config, gate = tmp_path / "study.toml", tmp_path / "gate"
    config.write_text(CONFIG.format(gate=gate), encoding="utf-8")
    out = tmp_path / "out"
    first = study_run(config, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: getattr(read_holder(out), "pid", None) == first.pid,
            "lock taken by the first run",
            proc=first,
        )
        holder = read_holder(out)
        second = study_run(config, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout, stderr = second.communicate(timeout=120)
        # the first cannot have finished (its units wait for the gate): it was the lock
        assert first.poll() is None, "the first run ended before the second was refused"
    finally:
        gate.touch()  # the first run's units go on
        first_out, first_err = first.communicate(timeout=300)
    assert second.returncode == 2 and stdout == ""
    assert stderr.splitlines() == [
        f"error: {out} is being written by another oodeval study run (host "
        f"{socket.gethostname()}, PID {first.pid}, since {holder.started}); wait for it to "
        "finish or stop it, then run again (status, analyze and report work meanwhile)"
    ]
    assert first.returncode == 0, first_err
    assert "8 units: 0 already stored, 8 run (8 done, 0 failed)" in first_out
    units = load_study(out).units
    assert len(units) == units["unit_key"].nunique() == 8
    assert units["attempts"].tolist() == [1] * 8  # every unit stored exactly once
    assert read_holder(out) is None  # the lock was released at the end
