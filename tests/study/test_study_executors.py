"""Running studies on Ray and Slurm (submitit): the same store as locally, resume after a kill.

One local Ray instance (2 CPUs) serves the whole module; submitit runs its ``local`` cluster
(jobs as local processes) and ``debug`` cluster (jobs inside the driver). Units come from the
synthetic backend, so each takes milliseconds unless a test asks it to sleep.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.study import load_config, load_study, run_study
from oodeval.study.executors import (
    LocalExecutor,
    RayExecutor,
    SlurmExecutor,
    make_executor,
)
from tests.helpers.studies import assert_same_store, count_stored_units, synthetic_config
from tests.helpers.waiting import wait_until
from tests.requires import requires_module

REPO = Path(__file__).resolve().parents[2]


def tiny_config(**overrides):
    """16 units (4 algorithms x 2 seeds x 2 scenarios); IRM fails, as a unit raising does."""
    settings = {
        "name": "executors-test",
        "algorithms": ["ERM", "IRM", "GroupDRO", "VREx"],
        "unit_options": {"fail_algorithms": ["IRM"]},
    }
    settings.update(overrides)
    return synthetic_config(**settings)


@pytest.fixture(scope="module")
def ray_address():
    """One local Ray instance for the module: 2 CPUs, no dashboard; shut down at the end."""
    ray = requires_module("ray")
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as env:
        # Ray's workers inherit it: they import tests.cluster_backend (the kill test's gate)
        env.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        )
        context = ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield context.address_info["address"]
    ray.shutdown()


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """The tiny study run by the default (local) executor, for comparisons."""
    directory = tmp_path_factory.mktemp("local-reference")
    summary = run_study(tiny_config(), directory, workers=2, progress=False)
    assert (summary.done, summary.failed) == (12, 4)
    return directory


def test_ray_study_store_equals_the_local_executors(tmp_path, ray_address, local_reference):
    summary = run_study(tiny_config(), tmp_path, executor=RayExecutor(), progress=False)
    assert (summary.ran, summary.done, summary.failed) == (16, 12, 4)
    assert_same_store(tmp_path, local_reference)  # failure reasons included
    units = load_study(tmp_path).units
    failed = units[units["status"] == "failed"]
    assert failed["failure"].str.startswith("SyntheticFailure: synthetic failure of IRM").all()
    # a second run skips everything and does not even need Ray's workers
    again = run_study(tiny_config(), tmp_path, executor="ray", progress=False)
    assert (again.skipped, again.ran) == (16, 0)


def test_a_unit_killing_its_ray_worker_fails_alone(tmp_path, ray_address):
    cfg = tiny_config(
        algorithms=["ERM", "IRM", "GroupDRO"],
        seeds=[0],
        scenarios=[{"family": "synthetic", "ratio": "3:1", "scale": 1}],
        unit_options={"crash_algorithms": ["IRM"]},
    )
    summary = run_study(cfg, tmp_path, executor=RayExecutor(), progress=False)
    assert (summary.done, summary.failed) == (2, 1)
    units = load_study(tmp_path).units.set_index("algorithm")
    assert units.loc["IRM", "failure"].startswith("worker process died while this unit ran")
    assert units.loc[["ERM", "GroupDRO"], "status"].tolist() == ["done", "done"]


def test_killing_the_ray_driver_mid_study_then_resuming_equals_an_uninterrupted_run(
    tmp_path, ray_address
):
    cfg_path = tmp_path / "study.toml"
    # The CORAL units (last of each seed) wait for a gate file that exists only after the kill, so
    # the study cannot finish before it (tests/cluster_backend.py).
    gate = tmp_path / "gate"
    cfg_path.write_text(
        f"""
name = "ray-kill-test"
backend = "tests.cluster_backend"
algorithms = ["ERM", "IRM", "GroupDRO", "CORAL"]
seeds = [0, 1]
steps = 10
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }},
             {{ family = "synthetic", ratio = "5:1", scale = 1 }}]
[unit_options]
sleep = 0.25
fail_algorithms = ["CORAL"]
gate = "{gate}"
gated_algorithms = ["CORAL"]
""",
        encoding="utf-8",
    )
    killed = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "oodeval.cli.main",
        "study",
        "run",
        str(cfg_path),
        "--out",
        str(killed),
        "--executor",
        "ray",
        "--ray-address",
        ray_address,
        "--no-progress",
        "--no-report",
    ]
    log = tmp_path / "driver.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until(
            lambda: count_stored_units(killed) >= 4,
            lambda: f"4 stored units (driver's log: {log.read_text()!r})",
            proc=proc,
        )
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, while Ray's workers run its units
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    gate.touch()  # from now on the CORAL units run
    interrupted = count_stored_units(killed)
    assert 4 <= interrupted < 16
    with sqlite3.connect(killed / "results.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    resumed = run_study(load_config(cfg_path), killed, executor="ray", progress=False)
    assert resumed.skipped == interrupted and resumed.skipped + resumed.ran == 16
    units = load_study(killed).units
    assert len(units) == units["unit_key"].nunique() == 16
    assert units["attempts"].tolist() == [1] * 16  # no unit was recorded twice
    reference = tmp_path / "reference"
    run_study(load_config(cfg_path), reference, workers=2, progress=False)
    assert_same_store(killed, reference)


def test_submitit_local_jobs_give_the_local_executors_store(tmp_path, local_reference):
    requires_module("submitit")
    executor = SlurmExecutor(cluster="local", units_per_job=4, max_parallel=2, poll_seconds=0.1)
    summary = run_study(tiny_config(), tmp_path, executor=executor, progress=False)
    assert (summary.ran, summary.done, summary.failed) == (16, 12, 4)
    assert_same_store(tmp_path, local_reference)
    # submitit's files and the 4 jobs' logs stay inside the study folder
    assert len(list((tmp_path / "slurm").glob("*_0_log.out"))) == 4


def test_submitit_job_ending_without_result_fails_only_the_unit_at_fault(tmp_path, monkeypatch):
    requires_module("submitit")
    from submitit.core.core import Job

    # how long submitit waits for the result file of a finished job (15 s by default)
    monkeypatch.setattr(Job, "_results_timeout_s", 0.5)
    cfg = tiny_config(
        algorithms=["ERM", "IRM", "GroupDRO"],
        seeds=[0],
        scenarios=[{"family": "synthetic", "ratio": "3:1", "scale": 1}],
        unit_options={"crash_algorithms": ["IRM"]},
    )
    executor = SlurmExecutor(cluster="local", units_per_job=3, max_parallel=2, poll_seconds=0.1)
    summary = run_study(cfg, tmp_path, executor=executor, progress=False)
    assert (summary.ran, summary.done, summary.failed) == (3, 2, 1)
    units = load_study(tmp_path).units.set_index("algorithm")
    assert units.loc[["ERM", "GroupDRO"], "status"].tolist() == ["done", "done"]
    failure = units.loc["IRM", "failure"]
    assert "ended without a result (UncompletedJobError" in failure
    assert str(tmp_path / "slurm") in failure and "\n" not in failure


def test_cli_runs_the_study_on_submitits_debug_cluster(tmp_path, local_reference):
    requires_module("submitit")
    cfg_path = tiny_toml(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["study", "run", str(cfg_path), "--out", str(out), "--no-progress", "--no-report"]
        + ["--executor", "slurm", "--slurm-cluster", "debug", "--slurm-time", "5"]
        + ["--slurm-cpus", "1", "--slurm-mem", "1", "--slurm-partition", "cpu"],
    )
    assert result.exit_code == 0, result.output
    assert "16 units: 0 already stored, 16 run (12 done, 4 failed)" in result.output
    assert_same_store(out, local_reference)


TINY_TOML = """
name = "executors-test"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx"]
seeds = [0, 1]
steps = 10
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 },
             { family = "synthetic", ratio = "4:1", scale = 2 }]
[unit_options]
fail_algorithms = ["IRM"]
"""


def tiny_toml(directory: Path) -> Path:
    """`tiny_config` as a TOML file, for the CLI."""
    path = directory / "study.toml"
    path.write_text(TINY_TOML, encoding="utf-8")
    assert load_config(path) == tiny_config()
    return path


@pytest.mark.parametrize(
    ("name", "module", "extra"), [("ray", "ray", "ray"), ("slurm", "submitit", "slurm")]
)
def test_a_missing_extra_is_one_clear_error_before_the_store_is_made(
    tmp_path, monkeypatch, name, module, extra
):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    executor = make_executor(name, cluster="local") if name == "slurm" else make_executor(name)
    with pytest.raises(OodevalError) as info:
        run_study(tiny_config(), tmp_path / "s", executor=executor, progress=False)
    message = str(info.value)
    assert message == (
        f"the {extra} executor needs the '{extra}' extra ({module} is not installed); "
        f"install it with: pip install 'oodeval[{extra}]'"
    )
    assert not (tmp_path / "s" / "results.sqlite").exists()
    # the CLI prints that one line and exits with status 2
    result = CliRunner().invoke(
        app,
        ["study", "run", str(tiny_toml(tmp_path)), "--out", str(tmp_path / "c")]
        + ["--executor", name, "--no-report"]
        + (["--slurm-cluster", "local"] if name == "slurm" else []),
    )
    assert result.exit_code == 2
    assert f"pip install 'oodeval[{extra}]'" in result.output


def test_make_executor_maps_names_and_options():
    assert make_executor(None) == LocalExecutor()
    assert make_executor("local", workers=3) == LocalExecutor(workers=3)
    assert make_executor("ray", workers=2, address=None) == RayExecutor(num_cpus=2)
    assert make_executor("slurm", workers=4, partition="gpu", time_minutes=30) == SlurmExecutor(
        partition="gpu", time_minutes=30, max_parallel=4
    )
    given = SlurmExecutor(cluster="debug")
    assert make_executor(given, workers=9) is given
    with pytest.raises(OodevalError, match=r"unknown executor 'dask'; use one of local, ray"):
        make_executor("dask")
    with pytest.raises(OodevalError, match=r"no option\(s\) address; it takes workers$"):
        make_executor("local", address="auto")
    with pytest.raises(OodevalError, match=r"unknown submitit cluster 'pbs'"):
        SlurmExecutor(cluster="pbs")
    with pytest.raises(OodevalError, match=r"time limit \(minutes\) must be an integer >= 1"):
        SlurmExecutor(time_minutes=0)
    with pytest.raises(OodevalError, match=r"with 2 CPU\(s\) cannot run units needing 4"):
        RayExecutor(num_cpus=2, cpus_per_unit=4)
    with pytest.raises(OodevalError, match=r"cluster given by address are its own; drop --workers"):
        make_executor("ray", workers=2, address="auto")


def test_a_worker_uses_as_many_threads_as_its_unit_reserves(monkeypatch):
    torch = requires_module("torch")
    from oodeval.pool import THREAD_VARS
    from oodeval.study import worker

    for var in THREAD_VARS:
        monkeypatch.setenv(var, "1")
    monkeypatch.setattr(worker, "_STATE", {})
    config_json = tiny_config().to_json()
    threads = torch.get_num_threads()
    try:
        worker.setup_worker(config_json, worker.WorkerSettings(threads=3))
        assert {os.environ[var] for var in THREAD_VARS} == {"3"}
        assert torch.get_num_threads() == 3
        backend = worker._STATE["backend"]
        # same process, another executor's setting: the set-up is kept, the threads change
        worker.setup_worker(config_json, worker.WorkerSettings(threads=1))
        assert {os.environ[var] for var in THREAD_VARS} == {"1"}
        assert torch.get_num_threads() == 1
        assert worker._STATE["backend"] is backend
    finally:
        torch.set_num_threads(threads)


def test_slurm_cluster_without_sbatch_is_one_clear_error(tmp_path, monkeypatch):
    requires_module("submitit")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch on the PATH
    with pytest.raises(OodevalError, match=r"^sbatch not found: run on a Slurm login node"):
        run_study(tiny_config(), tmp_path / "s", executor="slurm", progress=False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--ray-address", "auto"],
            "--ray-address applies to --executor ray only (the executor is local)",
        ),
        (
            ["--executor", "ray", "--ray-address", "127.0.0.1:1"],
            "nothing answers at Ray address 127.0.0.1:1",
        ),
        (["--executor", "dask"], "unknown executor 'dask'; use one of local, ray, slurm"),
    ],
)
def test_cli_bad_executor_options_are_one_line_and_exit_2(tmp_path, options, message):
    result = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(tiny_toml(tmp_path))]
        + ["--out", str(tmp_path / "s"), *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {message}")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "s").exists()
