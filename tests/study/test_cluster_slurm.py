"""Studies on a real Slurm cluster: slurmctld schedules the units' jobs, slurmd runs them.

The cluster is `scripts/slurm_cluster.sh`'s one-node cluster on this machine (``scripts/test.sh
--system``, and CI, start it before the suite), or any cluster Slurm's commands already reach.
When none runs and the suite runs as CI, the session fixture starts the script's cluster if
Slurm's packages are installed (it never installs them itself) and stops it at the end; outside
CI it starts no daemon. Where no cluster answers, the tests are skipped with the reason; with
``OODEVAL_REQUIRE_SLURM=1`` (set by ``scripts/test.sh`` once its cluster is up) they fail
instead, so a cluster that should run is never a silent skip.

Drivers run as ``oodeval study run --executor slurm`` subprocesses, as a user would run them;
units come from `tests.cluster_backend` (the synthetic backend plus a gate hook).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest

from oodeval.study import load_config, load_study, run_study
from tests.helpers.interrupts import (
    LEAK_WARNING,
    MARK,
    STOPS,
    assert_no_process_survives,
    write_config,
)
from tests.helpers.studies import assert_same_store, count_stored_units, stored_rows
from tests.helpers.waiting import wait_until
from tests.requires import in_ci, unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm_cluster.sh"


def _slurm_answers(env: dict[str, str]) -> bool:
    """True when sinfo reaches a controller and shows a node ready for jobs."""
    if shutil.which("sinfo", path=env.get("PATH")) is None:
        return False
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    states = out.stdout.split()
    return out.returncode == 0 and any(s in ("idle", "mix", "alloc") for s in states)


def _unavailable(reason: str, *, ci_fails: bool = False) -> None:
    """Fail when a cluster was promised (OODEVAL_REQUIRE_SLURM=1), else skip; with `ci_fails`
    fail as CI too. A machine whose kernel or container cannot run the daemons is skipped even
    as CI (test.sh says so in capitals before the suite): that is the machine, not the code."""
    if os.environ.get("OODEVAL_REQUIRE_SLURM") == "1":
        pytest.fail(f"OODEVAL_REQUIRE_SLURM=1 but {reason}")
    if ci_fails:
        unavailable(reason)  # skipped, or failed as CI
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_env():
    """The environment (SLURM_CONF included) in which Slurm's commands reach a live cluster."""
    pytest.importorskip("submitit", reason="the slurm extra is not installed")
    env = dict(os.environ)
    started = False
    if not _slurm_answers(env):
        script_conf = (
            subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=True)
            .stdout.strip()
            .removeprefix("export SLURM_CONF=")
        )
        env["SLURM_CONF"] = script_conf
        if not _slurm_answers(env):
            if not in_ci():  # starting daemons changes the machine: only when told
                _unavailable(
                    "no Slurm cluster answers; `bash scripts/test.sh --system` installs and "
                    "starts one",
                    ci_fails=True,
                )
            if os.geteuid() != 0:
                _unavailable("no Slurm cluster answers and starting one needs root")
            result = subprocess.run(
                ["bash", str(SCRIPT), "start"],
                env={**env, "OODEVAL_SLURM_NO_INSTALL": "1"},
                capture_output=True,
                text=True,
                timeout=300,
            )
            if result.returncode != 0:
                lines = [line for line in result.stderr.splitlines() if "error:" in line]
                _unavailable(
                    "the Slurm daemons cannot start here: "
                    + (lines[-1] if lines else result.stderr.strip()[-300:])
                )
            started = True
    yield env
    if started:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def _driver_env(slurm_env: dict[str, str]) -> dict[str, str]:
    # jobs import tests.cluster_backend: they inherit the driver's environment (sbatch --export)
    return {**slurm_env, "PYTHONPATH": str(REPO)}


def _cli(config: Path, out: Path, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "oodeval.cli.main",
        "study",
        "run",
        str(config),
        "--out",
        str(out),
        "--executor",
        "slurm",
        "--slurm-time",
        "10",
        "--no-progress",
        "--no-report",
        *options,
    ]


def _run_cli(cmd: list[str], env: dict[str, str], timeout: float = 300) -> str:
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _sacct(
    env: dict[str, str], *options: str, expect: int = 0, timeout: float = 60.0
) -> list[list[str]]:
    """sacct rows (allocations only, no steps) as lists of fields.

    slurmctld hands finished jobs to slurmdbd asynchronously, so a job can reach the accounting
    database a few seconds after its array completed: with `expect`, sacct is asked again until it
    lists that many jobs, none of them still pending or running (the test fails with the last
    answer when `timeout` seconds pass first).
    """
    rows: list[list[str]] = []

    def settled() -> bool:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", *options],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows[:] = [line.split("|") for line in out.splitlines() if line]
        running = any(field in ("PENDING", "RUNNING") for row in rows for field in row)
        return len(rows) >= expect and not running

    what = lambda: f"{expect} finished jobs in sacct (last answer: {rows})"  # noqa: E731
    wait_until(settled, what, seconds=timeout, every=1.0)
    return rows


def _squeue(env: dict[str, str], name: str) -> list[tuple[str, str]]:
    """(job id, state) of the queued and running jobs called `name`."""
    out = subprocess.run(
        ["squeue", "-h", "--name", name, "-o", "%i|%T"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [tuple(line.split("|")) for line in out.splitlines() if line]


def _write_config(path: Path, name: str, algorithms: list[str], seeds: list[int], options: str):
    path.write_text(
        f"""
name = "{name}"
backend = "tests.cluster_backend"
algorithms = {algorithms!r}
seeds = {seeds!r}
steps = 10
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }},
             {{ family = "synthetic", ratio = "4:1", scale = 2 }}]
[unit_options]
{options}
""".replace("'", '"'),
        encoding="utf-8",
    )
    return path


def _wait(condition, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    wait_until(condition, what, seconds=timeout, proc=proc, every=0.2)


def test_slurm_study_completes_and_its_store_equals_the_local_executors(tmp_path, slurm_env):
    config = _write_config(
        tmp_path / "study.toml",
        "slurm-cli",
        ["ERM", "IRM", "GroupDRO", "VREx"],
        [0, 1],
        'fail_algorithms = ["IRM"]',
    )
    out = tmp_path / "slurm"
    stdout = _run_cli(_cli(config, out, "--slurm-units-per-job", "2"), _driver_env(slurm_env))
    assert "16 units: 0 already stored, 16 run (12 done, 4 failed)" in stdout
    reference = tmp_path / "local"
    run_study(load_config(config), reference, workers=2, progress=False)
    assert_same_store(out, reference)  # failure reasons included
    # slurmctld scheduled them: one array of 8 jobs (2 units each), all completed on this node
    (array,) = {p.name.split("_")[0] for p in (out / "slurm").glob("*_0_log.out")}
    jobs = _sacct(slurm_env, "-j", array, "-o", "JobID,JobName,State,NodeList", expect=8)
    assert sorted(job[0] for job in jobs) == sorted(f"{array}_{i}" for i in range(8)), jobs
    assert {tuple(job[1:3]) for job in jobs} == {("oodeval-slurm-cli", "COMPLETED")}
    print("sacct:", *("|".join(job) for job in jobs), sep="\n")


def test_driver_killed_mid_study_resumes_without_duplicate_or_loss(tmp_path, slurm_env):
    # the VREx units wait for a gate file created after the kill: the study cannot end before it
    gate = tmp_path / "gate"
    config = _write_config(
        tmp_path / "study.toml",
        "slurm-kill",
        ["ERM", "IRM", "GroupDRO", "VREx"],
        [0],
        f'sleep = 1.0\ngate = "{gate}"\ngated_algorithms = ["VREx"]',
    )
    out = tmp_path / "killed"
    env = _driver_env(slurm_env)
    log = tmp_path / "driver.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            _cli(config, out),
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def midway() -> bool:
            states = [state for _, state in _squeue(slurm_env, "oodeval-slurm-kill")]
            return count_stored_units(out) >= 2 and "RUNNING" in states

        _wait(midway, 240, "2 stored units and a running job", proc)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, while Slurm runs its jobs
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    interrupted = count_stored_units(out)
    assert 2 <= interrupted < 8, log.read_text()
    with sqlite3.connect(out / "results.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # the killed driver's jobs outlive it; the documented clean-up cancels them
    subprocess.run(["scancel", "--name", "oodeval-slurm-kill"], env=slurm_env, check=True)
    _wait(lambda: not _squeue(slurm_env, "oodeval-slurm-kill"), 60, "the old jobs to end")
    gate.touch()

    stdout = _run_cli(_cli(config, out), env)
    assert f"8 units: {interrupted} already stored, {8 - interrupted} run" in stdout
    units = load_study(out).units
    assert len(units) == units["unit_key"].nunique() == 8
    assert (units["status"] == "done").all()
    assert units["attempts"].tolist() == [1] * 8  # no unit was recorded twice
    reference = tmp_path / "reference"
    run_study(load_config(config), reference, workers=2, progress=False)
    assert_same_store(out, reference)


def test_scancelled_job_is_failed_with_slurms_reason_and_retry_failed_reruns_it(
    tmp_path, slurm_env
):
    gate, trace = tmp_path / "gate", tmp_path / "trace"
    trace.mkdir()
    config = _write_config(
        tmp_path / "study.toml",
        "slurm-cancel",
        ["ERM", "GroupDRO"],
        [0],
        f'gate = "{gate}"\ngated_algorithms = ["GroupDRO"]\ntrace = "{trace}"',
    )
    out = tmp_path / "study"
    env = _driver_env(slurm_env)
    proc = subprocess.Popen(
        _cli(config, out),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # ERM's jobs finish; GroupDRO's wait at the gate: 2 stored units, 2 RUNNING jobs
        # whose units have started (each leaves a trace file as it starts)
        def both_waiting() -> bool:
            states = [state for _, state in _squeue(slurm_env, "oodeval-slurm-cancel")]
            started = len(list(trace.glob("GroupDRO.*")))
            stored = count_stored_units(out)
            return stored == 2 and states == ["RUNNING", "RUNNING"] and started == 2

        _wait(both_waiting, 240, "the ERM units stored and both GroupDRO jobs running", proc)
        victim = _squeue(slurm_env, "oodeval-slurm-cancel")[0][0]
        subprocess.run(["scancel", victim], env=slurm_env, check=True)
        _wait(lambda: count_stored_units(out) >= 3, 120, "the cancelled unit's record", proc)
        gate.touch()  # the other GroupDRO job completes
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "4 units: 0 already stored, 4 run (3 done, 1 failed)" in stdout
    units = load_study(out).units
    failed = units[units["status"] == "failed"]
    assert len(failed) == 1 and failed["algorithm"].tolist() == ["GroupDRO"]
    reason = failed["failure"].iloc[0]
    print(f"stored failure of the cancelled unit: {reason}")
    # Slurm's account of the job, as sacct gives it: its id and its state
    assert reason.startswith(f"job {victim} ended without a result (UncompletedJobError"), reason
    assert "state CANCELLED" in reason and "retry with --retry-failed" in reason, reason
    assert "\n" not in reason
    (state,) = [
        s
        for job_id, s in _sacct(
            slurm_env, "-j", victim.split("_")[0], "-o", "JobID,State", expect=1
        )
        if job_id == victim
    ]
    assert state.startswith("CANCELLED"), state

    stdout = _run_cli(_cli(config, out, "--retry-failed"), env)
    assert "4 units: 3 already stored, 1 run (1 done, 0 failed)" in stdout
    units = load_study(out).units.set_index("unit_key")
    assert (units["status"] == "done").all()
    key = failed["unit_key"].iloc[0]
    assert units.loc[key, "attempts"] == 2
    reference = tmp_path / "reference"
    run_study(load_config(config), reference, workers=2, progress=False)  # the gate is open
    (units_out, results_out), (units_ref, results_ref) = stored_rows(out), stored_rows(reference)
    pd.testing.assert_frame_equal(
        units_out.drop(columns="attempts"), units_ref.drop(columns="attempts")
    )
    pd.testing.assert_frame_equal(results_out, results_ref, check_exact=True)


def test_a_real_trainer_unit_on_slurm_equals_the_local_executors(tmp_path, slurm_env):
    pytest.importorskip("oodeval.training")
    config = tmp_path / "study.toml"
    config.write_text(
        """
name = "slurm-trainer"
source = "digits"
algorithms = ["ERM", "VREx"]
seeds = [3]
steps = 12
scenarios = [{ family = "sr-cmnist", ratio = "3:1", scale = 1 }]
[trainer]
eval_every = 6
batch_size = 16
[hparams.VREx]
vrex_penalty_anneal_iters = 4
""",
        encoding="utf-8",
    )
    out = tmp_path / "slurm"
    stdout = _run_cli(_cli(config, out), _driver_env(slurm_env))
    assert "2 units: 0 already stored, 2 run (2 done, 0 failed)" in stdout
    # one CPU per job, so one torch thread: the numbers of the local executor exactly
    reference = tmp_path / "local"
    run_study(load_config(config), reference, workers=1, progress=False)
    assert_same_store(out, reference)
    assert {"torch"} <= set(load_study(out).units["versions"].iloc[0])


def test_a_driver_job_at_its_time_limit_keeps_its_units_and_says_so(tmp_path, slurm_env):
    """`study run` (local workers) as a batch job of one minute whose GroupDRO units run ten:
    at the time limit Slurm sends SIGTERM to every process of the job, the driver stops its
    workers and writes its one line to the job's log (exit 143), and the same command resumes
    the stored units without losing or duplicating one."""
    started = tmp_path / "started"
    started.mkdir()
    config = write_config(tmp_path, options=f'started_dir = "{started}"')
    out, log, token = tmp_path / "out", tmp_path / "job.log", uuid.uuid4().hex
    driver = [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(config)]
    driver += ["--out", str(out), "--workers", "2", "--no-progress", "--no-report"]
    env = {**_driver_env(slurm_env), MARK: token, "OODEVAL_TEST_HANG": "GroupDRO"}
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--time=1", "--job-name=oodeval-time-limit", f"--output={log}",
         f"--chdir={REPO}", "--wrap", shlex.join(driver)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job = submitted.stdout.strip().split(";")[0]
    # a minute of time limit, then up to slurmctld's 30 s check, then KillWait
    (row,) = _sacct(slurm_env, "-j", job, "-o", "JobID,State", expect=1, timeout=300)
    assert row[1] == "TIMEOUT", (row, log.read_text())
    assert_no_process_survives(token)
    text = log.read_text()
    stored = count_stored_units(out)
    assert 0 < stored < 16, text
    assert "Traceback" not in text and LEAK_WARNING not in text, text
    assert len([f for f in started.iterdir() if "-GroupDRO-" in f.name]) == 2, text  # in flight
    ours = [ln for ln in text.splitlines() if not ln.startswith(("failed: ", "slurmstepd"))]
    assert ours == [
        f"{STOPS['sigterm'].word}: {stored} of 16 units stored; run the same command again to "
        "resume"
    ], text
    with sqlite3.connect(out / "results.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    resumed = run_study(load_config(config), out, workers=2, progress=False)  # nothing hangs now
    assert (resumed.skipped, resumed.ran) == (stored, 16 - stored)
    units = load_study(out).units
    assert len(units) == units["unit_key"].nunique() == 16
    assert units["attempts"].tolist() == [1] * 16  # no unit was recorded twice
    reference = tmp_path / "reference"
    run_study(load_config(config), reference, workers=2, progress=False)
    assert_same_store(out, reference)
