"""Stopping a study: Ctrl-C, a driver killed during start-up, and warnings raised in units.

Drivers run ``oodeval study run`` in a subprocess whose environment carries a token; every process
of that study (workers, multiprocessing's resource tracker) inherits it, so ``/proc/*/environ``
finds them all, re-parented or not.

This module doubles as a study backend (``backend = "tests.test_study_interrupts"``): the synthetic
backend, except that a unit writes a file when it starts and the algorithm named in the
environment variable ``OODEVAL_TEST_HANG`` sleeps ten minutes, a unit still in flight when the
driver is stopped.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from oodeval.study import load_config, load_study, run_study, synthetic
from tests.helpers.studies import assert_same_store, count_stored_units, synthetic_config

REPO = Path(__file__).resolve().parents[1]
MARK = "OODEVAL_TEST_STUDY"

available = synthetic.available
build_scenario = synthetic.build_scenario
default_hparams = synthetic.default_hparams
sample_hparams = synthetic.sample_hparams


def run_unit(scenario, algorithm, *, started_dir: str = "", **kwargs):
    if started_dir:
        Path(started_dir, f"{os.getpid()}-{algorithm}-{kwargs['seed']}").touch()
    if os.environ.get("OODEVAL_TEST_HANG") == algorithm:
        time.sleep(600)
    return synthetic.run_unit(scenario, algorithm, **kwargs)


STUDY_TOML = """
name = "interrupt-test"
backend = "{backend}"
algorithms = ["ERM", "IRM", "GroupDRO", "CORAL"]
seeds = [0, 1]
steps = 10
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }},
             {{ family = "synthetic", ratio = "5:1", scale = 1 }}]
[unit_options]
fail_algorithms = ["CORAL"]
{options}
"""


def write_config(directory: Path, *, backend: str = __name__, options: str = "") -> Path:
    path = directory / "study.toml"
    path.write_text(STUDY_TOML.format(backend=backend, options=options), encoding="utf-8")
    return path


def start_driver(
    config: Path, out: Path, log: Path, token: str, *, hang: str = ""
) -> subprocess.Popen:
    """``oodeval study run`` in its own session (a terminal's Ctrl-C reaches its whole group)."""
    env = {**os.environ, MARK: token, "OODEVAL_TEST_HANG": hang}
    cmd = [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(config)]
    cmd += ["--out", str(out), "--workers", "2", "--no-progress", "--no-report"]
    with log.open("wb") as sink:
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=sink, stderr=subprocess.PIPE, start_new_session=True
        )


def study_processes(token: str) -> dict[int, str]:
    """{pid: command line} of the live processes carrying the study's token."""
    needle = f"{MARK}={token}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue  # a zombie's environment reads empty: it is dead
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def assert_no_process_survives(token: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while (left := study_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {seconds} s after the driver ended: {left}"



def wait_for(condition, proc: subprocess.Popen, what: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the driver ended before {what}: {proc.stderr.read().decode()!r}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} within {seconds} s")
        time.sleep(0.005)


@pytest.mark.slow
def test_ctrl_c_abandons_the_units_in_flight_and_the_same_command_resumes(tmp_path):
    """Ctrl-C while both workers run a ten-minute unit: the driver kills them instead of waiting,
    prints one line, exits 130; the store holds whole units only and the next run completes it."""
    config = write_config(tmp_path)
    out, token = tmp_path / "out", uuid.uuid4().hex
    proc = start_driver(config, out, tmp_path / "driver.log", token, hang="GroupDRO")
    try:
        # units run scenario by scenario, seed by seed: ERM, IRM, GroupDRO (hangs), CORAL, then
        # seed 1's ERM and IRM, and its GroupDRO hangs the second worker
        wait_for(lambda: count_stored_units(out) >= 5, proc, "five stored units")
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the driver and its workers
        returncode = proc.wait(timeout=60)  # not the ten minutes of the units in flight
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stderr = proc.stderr.read().decode()
    assert returncode == 130, stderr
    stored = count_stored_units(out)
    # besides the stored CORAL failures' lines: one line, no traceback
    assert [line for line in stderr.splitlines() if not line.startswith("failed: ")] == [
        f"interrupted: {stored} of 16 units stored; run the same command again to resume"
    ]
    assert_no_process_survives(token)
    with sqlite3.connect(out / "results.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        keys = [k for (k,) in conn.execute("SELECT unit_key FROM units")]
    assert not any("|GroupDRO|" in k for k in keys)  # the abandoned units were not stored

    resumed = run_study(load_config(config), out, workers=2, progress=False)
    assert (resumed.skipped, resumed.ran) == (stored, 16 - stored)
    units = load_study(out).units
    assert len(units) == units["unit_key"].nunique() == 16
    assert units["attempts"].tolist() == [1] * 16  # no unit was recorded twice
    reference = tmp_path / "reference"
    run_study(load_config(config), reference, workers=2, progress=False)
    assert_same_store(out, reference)


def _has_child(token: str, driver: int) -> bool:
    """Whether a process of the driver exists: the resource tracker or a starting worker."""
    return bool(set(study_processes(token)) - {driver})


def _loads_torch(token: str, driver: int) -> bool:
    """Whether a worker has mapped libtorch (importing torch, which takes seconds)."""
    for pid in set(study_processes(token)) - {driver}:
        try:
            if "libtorch" in Path(f"/proc/{pid}/maps").read_text():
                return True
        except OSError:
            continue
    return False


def kill_driver_then_check(config: Path, tmp_path: Path, moment, delay: float) -> None:
    """Start a driver, SIGKILL it (alone) `delay` s after ``moment(token, pid)`` holds, and check
    that every process of its study ends."""
    token = uuid.uuid4().hex
    proc = start_driver(config, tmp_path / "out", tmp_path / "driver.log", token)
    try:
        wait_for(lambda: moment(token, proc.pid), proc, moment.__doc__)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert_no_process_survives(token)


@pytest.mark.parametrize(
    ("moment", "delay"),
    [
        ("start", 0.0),  # processes are being spawned
        ("start", 0.5),  # workers import (the old worker then read its parent's PID too late)
        ("unit", 0.0),  # a unit is running
    ],
)
def test_killing_the_driver_during_start_up_leaves_no_process(tmp_path, moment, delay):
    started = tmp_path / "started"
    started.mkdir()
    config = write_config(tmp_path, options=f'started_dir = "{started}"\nsleep = 5.0')

    def unit_started(token: str, driver: int) -> bool:
        """a unit started"""
        return any(started.iterdir())

    kill_driver_then_check(
        config, tmp_path, _has_child if moment == "start" else unit_started, delay
    )


@pytest.mark.slow
@pytest.mark.parametrize(("moment", "delay"), [(_has_child, 0.5), (_loads_torch, 0.0)])
def test_killing_a_real_trainer_driver_during_start_up_leaves_no_process(tmp_path, moment, delay):
    """Where the orphaned ~500 MB worker was seen: the real trainer's workers, loading torch."""
    config = tmp_path / "study.toml"
    config.write_text(
        'name = "real-kill"\nsource = "digits"\nalgorithms = ["ERM", "IRM"]\nseeds = [0]\n'
        'steps = 2000\nscenarios = [{ family = "sr-cmnist", ratio = "3:1", scale = 1 }]\n',
        encoding="utf-8",
    )
    kill_driver_then_check(config, tmp_path, moment, delay)


def test_each_distinct_warning_of_the_units_is_printed_once(tmp_path, capfd):
    """IRM and VREx warn in each of their 4 units, from 2 workers: 2 lines, not 8."""
    cfg = synthetic_config(unit_options={"warn_algorithms": ["IRM", "VREx"]})
    summary = run_study(cfg, tmp_path, workers=2, progress=False)
    assert (summary.done, summary.failed) == (20, 0)
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert sorted(line.split(" (first raised by ")[0] for line in lines) == [
        "warning: UserWarning: synthetic warning of IRM (warn_algorithms)",
        "warning: UserWarning: synthetic warning of VREx (warn_algorithms)",
    ]
    assert all(" seed " in line for line in lines)
