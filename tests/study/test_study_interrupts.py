"""Stopping a study: Ctrl-C, SIGTERM, a driver killed during start-up, and warnings raised in units.

Drivers run ``oodeval study run`` on ``tests.interrupt_backend`` (units that announce their start
in a folder, and units that hang); every process of one study carries a token in its environment
(`tests.helpers.interrupts`). Each test stops the driver at a moment it *observes* (a file a unit
wrote, a process that appeared), never after a fixed delay.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import uuid
from pathlib import Path

import pytest

from oodeval.study import load_config, load_study, run_study
from tests.helpers.interrupts import (
    LEAK_WARNING,
    STOPS,
    Stop,
    assert_no_process_survives,
    start_driver,
    study_processes,
    write_config,
)
from tests.helpers.studies import assert_same_store, count_stored_units, synthetic_config
from tests.helpers.waiting import wait_until


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "group"),
    [(STOPS["ctrl-c"], True), (STOPS["sigterm"], True), (STOPS["sigterm"], False)],
    ids=["ctrl-c", "sigterm-to-the-group", "sigterm-to-the-driver"],
)
def test_ctrl_c_or_sigterm_abandons_the_units_in_flight_and_the_same_command_resumes(
    tmp_path, stop: Stop, group: bool
):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM (to the group, as
    Slurm sends it at a time limit; or to the driver alone, as ``kill PID``) while both workers
    run a ten-minute unit: the driver kills them instead of waiting, prints one line, exits 130
    or 143, leaks no semaphore; the store holds whole units only and the next run completes it."""
    started = tmp_path / "started"
    started.mkdir()
    config = write_config(tmp_path, options=f'started_dir = "{started}"')
    out, token = tmp_path / "out", uuid.uuid4().hex
    proc = start_driver(config, out, tmp_path / "driver.log", token, hang="GroupDRO")

    def both_workers_hang() -> bool:
        """Two GroupDRO units started: each worker is inside a ten-minute unit."""
        return len([f for f in started.iterdir() if "-GroupDRO-" in f.name]) == 2

    try:
        wait_until(both_workers_hang, "two GroupDRO units started", proc=proc)
        if group:  # as a terminal's Ctrl-C or Slurm's SIGTERM: the driver and its workers
            os.killpg(proc.pid, stop.signum)
        else:
            os.kill(proc.pid, stop.signum)
        returncode = proc.wait(timeout=60)  # not the ten minutes of the units in flight
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert_no_process_survives(token)
    # read to its end: the resource tracker, which outlives the driver, writes a leak there
    stderr = proc.stderr.read().decode()
    assert returncode == stop.status, stderr
    stored = count_stored_units(out)
    # besides the stored CORAL failures' lines: one line, no traceback, no leaked semaphore
    assert [line for line in stderr.splitlines() if not line.startswith("failed: ")] == [
        f"{stop.word}: {stored} of 16 units stored; run the same command again to resume"
    ]
    assert LEAK_WARNING not in stderr
    _assert_resumes_whole(config, out, stored, tmp_path / "reference")


@pytest.mark.slow
def test_sigterm_stops_a_ray_study_with_one_line_and_the_same_command_resumes(tmp_path):
    """ray.init makes SIGTERM end the driver by sys.exit (Ray's core then printed a stack dump
    and aborted, status -6): the driver keeps its own handler, cancels the Ray tasks in flight,
    shuts its local Ray instance down and ends as with local workers."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    started = tmp_path / "started"
    started.mkdir()
    config = write_config(tmp_path, options=f'started_dir = "{started}"')
    out, token = tmp_path / "out", uuid.uuid4().hex
    proc = start_driver(
        config, out, tmp_path / "driver.log", token, hang="GroupDRO", options=("--executor", "ray")
    )
    try:
        wait_until(
            lambda: len([f for f in started.iterdir() if "-GroupDRO-" in f.name]) == 2,
            "two GroupDRO units started",
            proc=proc,
            seconds=300,
        )
        os.kill(proc.pid, signal.SIGTERM)
        returncode = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert_no_process_survives(token, seconds=60)  # Ray's own processes included
    stderr = proc.stderr.read().decode()
    assert returncode == 143, stderr
    stored = count_stored_units(out)
    assert [line for line in stderr.splitlines() if line.startswith("terminated")] == [
        f"terminated: {stored} of 16 units stored; run the same command again to resume"
    ], stderr
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr, stderr
    _assert_resumes_whole(config, out, stored, tmp_path / "reference")


def test_a_dead_worker_does_not_leave_the_study_waiting_for_the_units_of_the_others(tmp_path):
    """The first unit hangs (ten minutes, SIGTERM ignored, as every worker does) and the second
    kills its worker: the run stops the hanging worker instead of waiting for it, runs both
    units again, each alone (they pass then), and finishes the study with one ordinary run."""
    started = tmp_path / "started"
    started.mkdir()
    options = f'started_dir = "{started}"\nhang_then_crash = true'
    config = write_config(tmp_path, options=options)
    out, token = tmp_path / "out", uuid.uuid4().hex
    proc = start_driver(config, out, tmp_path / "driver.log", token)
    try:  # the bound is a guard: the run ends once its units do, the hanging one excepted
        wait_until(lambda: proc.poll() is not None, "end of the study after a worker died")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert_no_process_survives(token)
    assert (started / "hanging").exists() and (started / "crashed").exists()
    stderr = proc.stderr.read().decode()
    assert proc.returncode == 0, stderr
    units = load_study(out).units
    assert (units["status"] == "done").sum() == 12, units  # the 4 CORAL units fail by design


def _assert_resumes_whole(config: Path, out: Path, stored: int, reference: Path) -> None:
    """The stopped study's store is intact and holds whole units only (none of the abandoned
    GroupDRO ones); running it again completes it, equal to an uninterrupted run."""
    with sqlite3.connect(out / "results.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        keys = [k for (k,) in conn.execute("SELECT unit_key FROM units")]
    assert not any("|GroupDRO|" in k for k in keys)  # the abandoned units were not stored

    resumed = run_study(load_config(config), out, workers=2, progress=False)
    assert (resumed.skipped, resumed.ran) == (stored, 16 - stored)
    units = load_study(out).units
    assert len(units) == units["unit_key"].nunique() == 16
    assert units["attempts"].tolist() == [1] * 16  # no unit was recorded twice
    run_study(load_config(config), reference, workers=2, progress=False)
    assert_same_store(out, reference)


def _has_child(token: str, driver: int) -> bool:
    """a process of the driver (the resource tracker or a starting worker)"""
    return bool(set(study_processes(token)) - {driver})


def _worker_spawned(token: str, driver: int) -> bool:
    """a spawned worker (importing: the old worker then read its parent's PID too late)"""
    return any("spawn_main" in cmd for pid, cmd in study_processes(token).items() if pid != driver)


def _loads_torch(token: str, driver: int) -> bool:
    """a worker that mapped libtorch (importing torch, which takes seconds)"""
    for pid in set(study_processes(token)) - {driver}:
        try:
            if "libtorch" in Path(f"/proc/{pid}/maps").read_text():
                return True
        except OSError:
            continue
    return False


def kill_driver_then_check(config: Path, tmp_path: Path, moment) -> None:
    """Start a driver, SIGKILL it (alone) as soon as ``moment(token, pid)`` holds, and check that
    every process of its study ends."""
    token = uuid.uuid4().hex
    proc = start_driver(config, tmp_path / "out", tmp_path / "driver.log", token)
    try:
        wait_until(lambda: moment(token, proc.pid), moment.__doc__, proc=proc)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert_no_process_survives(token)


@pytest.mark.parametrize(
    "moment",
    [
        "start",  # processes are being spawned
        "import",  # a worker imports
        "unit",  # a unit is running
    ],
)
def test_killing_the_driver_during_start_up_leaves_no_process(tmp_path, moment):
    started = tmp_path / "started"
    started.mkdir()
    config = write_config(tmp_path, options=f'started_dir = "{started}"\nsleep = 5.0')

    def unit_started(token: str, driver: int) -> bool:
        """a unit started"""
        return any(started.iterdir())

    moments = {"start": _has_child, "import": _worker_spawned, "unit": unit_started}
    kill_driver_then_check(config, tmp_path, moments[moment])


@pytest.mark.slow
@pytest.mark.parametrize("moment", [_worker_spawned, _loads_torch])
def test_killing_a_real_trainer_driver_during_start_up_leaves_no_process(tmp_path, moment):
    """Where the orphaned ~500 MB worker was seen: the real trainer's workers, loading torch."""
    config = tmp_path / "study.toml"
    config.write_text(
        'name = "real-kill"\nsource = "digits"\nalgorithms = ["ERM", "IRM"]\nseeds = [0]\n'
        'steps = 2000\nscenarios = [{ family = "sr-cmnist", ratio = "3:1", scale = 1 }]\n',
        encoding="utf-8",
    )
    kill_driver_then_check(config, tmp_path, moment)


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
