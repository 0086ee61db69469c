"""One writer per study folder: a second writer is refused naming the holder; a dead holder's lock
is taken over; readers never wait."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.study.lock import LOCK_NAME, StudyLock, StudyLockedError, read_holder
from oodeval.study.read_model import load_study
from oodeval.study.store import ResultStore

REPO = Path(__file__).resolve().parents[1]

HOLD = """
import sys, time
from oodeval.study.lock import study_lock
lock = study_lock(sys.argv[1])
print("locked", flush=True)
time.sleep(300)
"""


def hold_lock(directory: Path) -> subprocess.Popen:
    """A separate process that takes the folder's lock and keeps it until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)], cwd=REPO, stdout=subprocess.PIPE, text=True
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


def test_readers_do_not_wait_for_the_writer(tmp_path):
    with ResultStore(tmp_path, create=True) as writer:
        writer.bind_config({"name": "s", "algorithms": ["ERM"], "seeds": [0], "scenarios": [{}]})
        writer.execute("BEGIN IMMEDIATE")  # the writer is in the middle of a transaction
        started = time.monotonic()
        study = load_study(tmp_path)
        status = CliRunner().invoke(app, ["study", "status", str(tmp_path)])
        waited = time.monotonic() - started
        writer.execute("ROLLBACK")
    assert study.counts()["done"] == 0
    assert status.exit_code == 0 and "0 done, 0 failed, 1 pending (of 1)" in status.output
    assert waited < 25  # SQLite's busy timeout (30 s) was never waited out


def test_a_file_system_without_locks_is_one_clear_error(tmp_path, monkeypatch):
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(OodevalError, match="the file system does not support locks"):
        StudyLock(tmp_path).acquire()


CONFIG = """
name = "two-writers"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx"]
seeds = [0]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 },
             { family = "synthetic", ratio = "3:1", scale = 2 }]
[unit_options]
sleep = 1.5
"""


def study_run(config: Path, out: Path, **kwargs) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(config), "--out"]
    cmd += [str(out), "--workers", "1", "--no-progress", "--no-report"]
    return subprocess.Popen(cmd, cwd=REPO, text=True, **kwargs)


def test_two_study_runs_on_one_folder_the_second_refuses_at_once(tmp_path):
    config = tmp_path / "study.toml"
    config.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "out"
    first = study_run(config, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while (holder := read_holder(out)) is None or holder.pid != first.pid:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.05)
        second = study_run(config, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout, stderr = second.communicate(timeout=120)
        # the refusal came while the first still ran: it was the lock, not a finished study
        assert first.poll() is None, "the first run ended before the second was refused"
    finally:
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
