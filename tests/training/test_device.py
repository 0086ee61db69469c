"""Training on a device: the device spec, its checks, its place in configs and executors.

No GPU exists on the machines that run these tests, so the numbers are checked on the CPU (the
same code path) and the GPU parts by what they ask for: the errors for CUDA where there is none,
the per-worker pinning and the Ray/Slurm resource requests for a given GPU count, and the data
placement on PyTorch's ``meta`` device (a device other than the CPU that needs no hardware).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from oodeval._torch import (
    check_device_spec,
    device_kind,
    device_problem,
    resolve_device,
)
from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.study.config import (
    ConfigError,
    ScenarioSpec,
    StudyConfig,
    config_changes,
    config_from_dict,
    validate_config,
)
from oodeval.study.executors import (
    LocalExecutor,
    RayExecutor,
    SlurmExecutor,
    local_devices,
    worker_settings,
)
from oodeval.study.executors.local import _pool
from oodeval.training import run_unit, train_models
from oodeval.training.data import on_device, prepare_data
from oodeval.training.options import TrainerOptions
from tests.helpers.studies import synthetic_config
from tests.helpers.training import TinyScenario
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
HAS_CUDA = torch.cuda.is_available()
no_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without CUDA")
runner = CliRunner()


# -- the spec -----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["cpu", "cuda", "cuda:0", "cuda:12", "auto"])
def test_good_device_specs_pass(spec):
    assert device_problem(spec) is None
    assert check_device_spec(spec) == spec


@pytest.mark.parametrize(
    "spec", ["gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cpu:0", "cuda:\u0663", ""]
)
def test_bad_device_specs_are_named(spec):
    assert device_problem(spec) == f"unknown device {spec!r}; use cpu, cuda, cuda:N or auto"
    with pytest.raises(OodevalError, match="unknown device"):
        check_device_spec(spec)
    with pytest.raises(OodevalError, match="unknown device"):
        TrainerOptions(device=spec)


@pytest.mark.parametrize("spec", [0, None, ["cpu"]])
def test_a_device_must_be_a_string(spec):
    assert device_problem(spec).startswith("a device must be a string")


def test_device_kind():
    assert [device_kind(d) for d in ("cpu", "cuda", "cuda:0", "cuda:3")] == [
        "cpu",
        "cuda",
        "cuda",
        "cuda",
    ]
    assert device_kind("auto") == ("cuda" if HAS_CUDA else "cpu")


@no_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:1"])
def test_cuda_without_cuda_is_refused_naming_the_device(spec):
    with pytest.raises(OodevalError, match=f"device '{spec}' requested but CUDA is not available"):
        resolve_device(spec)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(OodevalError, match=f"device '{spec}' requested"):
        run_unit(TinyScenario(), "ERM", seed=0, steps=2, device=spec)
    with pytest.raises(OodevalError, match=f"device '{spec}' requested"):
        train_models(TinyScenario(), "ERM", seed=0, steps=2, device=spec)


# -- the trainer on the CPU ---------------------------------------------------------------------
def unit_numbers(result) -> tuple:
    return (
        [(r.fold, r.environment, r.error, r.count) for r in result.rows],
        [tuple(vars(c).values()) for c in result.checkpoints],
    )


@pytest.mark.parametrize("algorithm", ["ERM", "MTL"])  # MTL: random draws and batch-dependent
def test_device_cpu_and_auto_give_the_default_numbers_exactly(algorithm):
    options = {"seed": 1, "steps": 6, "eval_every": 3, "batch_size": 8}
    default = unit_numbers(run_unit(TinyScenario(), algorithm, **options))
    assert unit_numbers(run_unit(TinyScenario(), algorithm, device="cpu", **options)) == default
    if not HAS_CUDA:  # auto is the CPU here
        assert (
            unit_numbers(run_unit(TinyScenario(), algorithm, device="auto", **options)) == default
        )


def test_models_and_data_live_on_the_requested_device():
    trained = train_models(TinyScenario(), "SagNet", seed=0, steps=2, device="cpu")
    assert trained.device == "cpu"
    for model in trained.models:
        assert {p.device.type for p in model.parameters()} == {"cpu"}
        assert {b.device.type for b in model.buffers()} == {"cpu"}


def test_a_units_data_moves_to_the_device_once_and_minibatches_are_gathered_there():
    # "meta" stands for a GPU: a device other than the CPU, with tensors but no numbers
    scenario = TinyScenario()
    options = TrainerOptions()
    data = prepare_data(scenario, scenario.given(), 0, options, "meta")
    assert data.x.device.type == data.y.device.type == "meta"
    assert {x.device.type for x, _ in data.val} == {"meta"}
    assert {x.device.type for x, _ in data.held_in} == {"meta"}
    # labels stay where the predictions come back, and the minibatch draws on the CPU
    assert {y.device.type for _, y in data.val + data.held_in} == {"cpu"}
    assert data.sizes.device.type == data.offsets.device.type == "cpu"
    xb, yb = data.minibatches(torch.Generator().manual_seed(0), 4)
    assert xb.device.type == yb.device.type == "meta"
    assert tuple(xb.shape) == (3, 4, *scenario.input_shape)


def test_evaluation_images_are_kept_on_a_device_once_per_array():
    images = TinyScenario().given()[0].images
    assert on_device(images, "cpu").data_ptr() == images.ctypes.data  # the CPU: no copy
    first, again = on_device(images, "meta"), on_device(images, "meta")
    assert first is again and first.device.type == "meta"
    assert on_device(images.copy(), "meta") is not first


# -- the study config ---------------------------------------------------------------------------
def test_config_device_is_checked_and_cpu_is_never_stored():
    assert (
        config_from_dict(synthetic_config().to_dict() | {"trainer": {"device": "cpu"}}).trainer
        == {}
    )
    cuda = config_from_dict(synthetic_config().to_dict() | {"trainer": {"device": "cuda:1"}})
    assert cuda.trainer == {"device": "cuda:1"}
    with pytest.raises(ConfigError, match=r"\[trainer\] device must be cpu, cuda, cuda:N or auto"):
        config_from_dict(synthetic_config().to_dict() | {"trainer": {"device": "tpu"}})


@no_cuda
def test_config_asking_for_cuda_without_cuda_is_refused_naming_it():
    cuda = config_from_dict(synthetic_config().to_dict() | {"trainer": {"device": "cuda"}})
    with pytest.raises(ConfigError, match=r"\[trainer\] device 'cuda' requested but CUDA is not"):
        validate_config(cuda)


def test_configs_compare_by_device_kind():
    base = StudyConfig("s", (ScenarioSpec("a"),), ("ERM",), (0,), 5, trainer={"device": "cuda:0"})
    assert config_changes(base, {**base.to_dict(), "trainer": {"device": "cuda:1"}}).compatible
    assert config_changes(base, {**base.to_dict(), "trainer": {"device": "cuda"}}).compatible
    other = config_changes(base, {**base.to_dict(), "trainer": {}})
    assert other.incompatible == (("trainer.device", "cuda:0", "cpu"),)
    cpu = StudyConfig("s", (ScenarioSpec("a"),), ("ERM",), (0,), 5)
    assert config_changes(cpu, {**cpu.to_dict(), "trainer": {"device": "cpu"}}).compatible


# -- the CLI ------------------------------------------------------------------------------------
def one_line_error(result, *parts: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for part in parts:
        assert part in lines[0], result.output


@pytest.mark.parametrize("command", ["run", "estimate"])
def test_cli_bad_device_is_one_line_exit_2(tmp_path, command):
    out = ["--out", str(tmp_path / "s")] if command == "run" else []
    result = runner.invoke(app, ["study", command, "--preset", "quick", "--device", "gpu", *out])
    one_line_error(result, "--device: unknown device 'gpu'")
    assert not (tmp_path / "s").exists()


@no_cuda
@pytest.mark.parametrize("command", ["run", "estimate"])
def test_cli_cuda_without_cuda_is_one_line_exit_2(tmp_path, command):
    out = ["--out", str(tmp_path / "s")] if command == "run" else []
    result = runner.invoke(app, ["study", command, "--preset", "quick", "--device", "cuda:0", *out])
    one_line_error(result, "device 'cuda:0' requested but CUDA is not available")
    assert not (tmp_path / "s").exists()


def test_cli_train_gmop_checks_its_device(tmp_path):
    from oodeval.openworld.features import save_features, synthetic_features

    features = tmp_path / "train.npz"
    save_features(features, synthetic_features(n_classes=8, dim=6, n_per_class=3, seed=0))
    base = ["openworld", "train-gmop", str(features), "--n-steps", "2"]
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "a.npz"), "--device", "tpu"])
    one_line_error(result, "unknown device 'tpu'")
    if not HAS_CUDA:
        result = runner.invoke(app, [*base, "--out", str(tmp_path / "b.npz"), "--device", "cuda"])
        one_line_error(result, "device 'cuda' requested")
    cpu = runner.invoke(app, [*base, "--out", str(tmp_path / "c.npz"), "--device", "cpu"])
    default = runner.invoke(app, [*base, "--out", str(tmp_path / "d.npz")])
    assert cpu.exit_code == default.exit_code == 0, cpu.output + default.output
    assert (tmp_path / "c.npz").read_bytes() == (tmp_path / "d.npz").read_bytes()


# -- executors: what each asks for on GPUs ------------------------------------------------------
def test_local_executor_pins_one_worker_per_gpu():
    assert local_devices("cuda", None, 4) == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert local_devices("cuda", 6, 4) == [
        "cuda:0",
        "cuda:1",
        "cuda:2",
        "cuda:3",
        "cuda:0",
        "cuda:1",
    ]
    assert local_devices("cuda:2", None, 4) == ["cuda:2"]
    assert local_devices("cuda:2", 3, 4) == ["cuda:2"] * 3
    assert local_devices("cpu", 2, 0) == [None, None]
    assert local_devices("cpu", None, 0) == [None] * (os.cpu_count() or 1)
    with pytest.raises(OodevalError, match="CUDA is not available"):
        local_devices("cuda", None, 0)


def test_ray_asks_for_one_gpu_per_unit_on_cuda():
    cpu, cuda = synthetic_config(), synthetic_config(trainer={"device": "cuda:1"})
    ray = RayExecutor(cpus_per_unit=2)
    assert ray.task_options(cpu) == {"num_cpus": 2.0, "max_retries": 0}
    assert ray.task_options(cuda) == {"num_cpus": 2.0, "max_retries": 0, "num_gpus": 1}
    # Ray makes the GPU it grants the only visible one: the unit runs on "cuda"
    assert worker_settings(2, cuda).device == "cuda" and worker_settings(2, cuda).threads == 2
    assert worker_settings(1, cpu).device is None


def test_slurm_asks_for_one_gpu_per_job_on_cuda():
    cpu, cuda = synthetic_config(), synthetic_config(trainer={"device": "cuda"})
    slurm = SlurmExecutor(cpus_per_unit=4, partition="gpu")
    assert "gpus_per_node" not in slurm.parameters(cpu)
    params = slurm.parameters(cuda)
    assert params["gpus_per_node"] == 1 and params["cpus_per_task"] == 4
    assert params["slurm_partition"] == "gpu"


def _report_device(folder: str) -> str:
    """In a pool worker: its pinned device, after every worker of the pool has reported."""
    from oodeval.study import worker

    device = worker._STATE["trainer"]["device"]
    Path(folder, f"{os.getpid()}").write_text(device)
    # hold this worker until the other one reported, so the other task reaches the other worker
    wait_until(lambda: len(list(Path(folder).iterdir())) == 2, "report of the other worker")
    return device


def test_each_local_worker_runs_on_its_own_device(tmp_path):
    config_json = synthetic_config(trainer={"device": "cuda"}).to_json()
    with _pool(config_json, ["cuda:0", "cuda:1"]) as pool:
        futures = [pool.submit(_report_device, str(tmp_path)) for _ in range(2)]
        devices = sorted(f.result(timeout=120) for f in futures)
    assert devices == ["cuda:0", "cuda:1"]


def test_local_executor_without_gpus_keeps_the_configs_device(monkeypatch):
    assert LocalExecutor(workers=2).workers == 2
    assert local_devices("cpu", LocalExecutor(workers=2).workers, 0) == [None, None]


# -- benchmarks/device_check.py -----------------------------------------------------------------
def test_device_check_cpu_runs_and_agrees_exactly():  # ~13 s
    small = ["--steps", "3", "--n-per-given", "60", "--n-eval", "40", "--batch-size", "8"]
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "device_check.py"), "cpu", *small],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines[2:-1]]
    assert len(rows) >= 14 and all(row[-1] == "ok" for row in rows), done.stdout
    assert all(float(row[3]) == 0.0 and float(row[4]) == 0.0 for row in rows)
    assert lines[-1] == f"{len(rows)} of {len(rows)} algorithms agree"


def test_device_check_refuses_a_missing_device():
    bad = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "device_check.py"), "tpu"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown device 'tpu'")


# -- study estimate on a device -----------------------------------------------------------------
def small_trainer_config(**overrides) -> StudyConfig:
    """Two algorithms on one small digits SR-CMNIST scenario, 300 steps, a checkpoint every 50."""
    data = {
        "name": "estimate-device",
        "source": "digits",
        "algorithms": ["ERM", "MTL"],
        "seeds": [0, 1],
        "steps": 300,
        "model": "mlp",
        "trainer": {"eval_every": 50, "batch_size": 8},
        "scenarios": [
            {"family": "sr-cmnist", "ratio": "3:1", "scale": 1, "n_per_given": 60, "n_eval": 40}
        ],
    }
    data.update(overrides)
    return config_from_dict(data)


def build_small(scale: int = 1, n_per_given: int = 60, n_eval: int = 40):
    from oodeval.environments import build_scenario

    return build_scenario("sr-cmnist", source="digits", ratio="3:1", scale=scale,
                          n_per_given=n_per_given, n_eval=n_eval)  # fmt: skip


def predicted_rows(scenario) -> tuple[float, int, int]:
    """(checkpoint rows, final-test rows, test rows predicting E_all environment by environment):
    a checkpoint predicts the G given rows with the N LOO models and the validation rows (a
    fifth) with the full model; the test the given rows and E_all once per color."""
    sizes = scenario.sizes()
    given, n = sum(sizes["given"].values()), len(sizes["given"])
    every = sum(sizes["evaluation"].values())
    shared = scenario.shared_evaluation()
    return (n + 0.2) * given, given + 2 * len(shared.labels), given + every


def test_estimate_extrapolates_a_few_steps_per_algorithm():
    from oodeval.study.estimate import estimate_study, unit_checkpoints

    config = small_trainer_config()
    assert unit_checkpoints(config) == 6  # steps 50, 100, ..., 300
    assert unit_checkpoints(config.replace(steps=320)) == 7  # ... and the last step, 320
    assert unit_checkpoints(config.replace(trainer={"selection": "last"})) == 0
    estimate = estimate_study(config, workers=2, sample_steps=3)
    assert estimate.device == "cpu" and estimate.sample_steps == 3 and estimate.workers == 2
    timed = estimate.samples.set_index("algorithm")
    assert list(timed.index) == ["ERM", "MTL"]  # one scenario: one N, every algorithm once
    # ERM's evaluations are timed; the batch-dependent MTL's come from its seconds per predicted
    # row: a checkpoint costs ERM's times the ratio, the test every given and evaluation row
    erm, mtl = timed.loc["ERM"], timed.loc["MTL"]
    _, _, every_row = predicted_rows(build_small())
    mtl_checkpoint = erm["checkpoint_seconds"] * mtl["row_seconds"] / erm["row_seconds"]
    units = {
        "ERM": erm["step_seconds"] * 300 + erm["checkpoint_seconds"] * 6 + erm["test_seconds"],
        "MTL": mtl["step_seconds"] * 300 + mtl_checkpoint * 6 + mtl["row_seconds"] * every_row,
    }
    assert all(v > 0 for v in units.values())
    assert estimate.per_n["unit_seconds"].tolist() == pytest.approx([sum(units.values()) / 2])
    assert estimate.projected_seconds == pytest.approx(sum(units.values()) * 2 / 2, rel=1e-12)
    summary = estimate.summary()
    assert summary.splitlines()[0] == "measured on device cpu"
    assert "at 3 training step(s) each" in summary and "worker(s) on cpu" in summary


def test_estimate_scales_other_algorithms_and_n_like_erm():
    from oodeval.study.estimate import estimate_study

    scenarios = [
        {"family": "sr-cmnist", "ratio": "3:1", "scale": s, "n_per_given": 40, "n_eval": 30}
        for s in (1, 2)
    ]
    config = small_trainer_config(algorithms=["CORAL"], scenarios=scenarios)
    estimate = estimate_study(config, workers=1, sample_steps=2)
    timed = estimate.samples
    n_small, n_large = sorted(timed["n_given"].unique())
    erm = timed[timed["algorithm"] == "ERM"].set_index("n_given")
    coral = timed[timed["algorithm"] == "CORAL"].set_index("n_given")
    assert list(coral.index) == [n_small]  # timed at the smallest N only, without evaluations
    assert list(erm.index) == [n_small, n_large] and erm["test_seconds"].notna().sum() == 1
    small, large = (predicted_rows(build_small(s, 40, 30)) for s in (1, 2))

    def unit(n: int, rows: tuple) -> float:  # CORAL's step scaled like ERM's, ERM's evaluations
        step = coral.loc[n_small, "step_seconds"] * erm.loc[n, "step_seconds"]
        step /= erm.loc[n_small, "step_seconds"]
        checkpoint = erm.loc[n_small, "checkpoint_seconds"] * rows[0] / small[0]
        test = erm.loc[n_small, "test_seconds"] * rows[1] / small[1]
        return step * 300 + checkpoint * 6 + test

    per_n = estimate.per_n.set_index("n_given")["unit_seconds"]
    assert per_n[n_small] == pytest.approx(unit(n_small, small), rel=1e-9)
    assert per_n[n_large] == pytest.approx(unit(n_large, large), rel=1e-9)


def test_cli_estimate_names_the_device_it_measured_on(tmp_path):
    config = tmp_path / "study.toml"
    config.write_text(
        'name = "e"\nsource = "digits"\nalgorithms = ["ERM"]\nseeds = [0]\nsteps = 300\n'
        '[trainer]\nbatch_size = 8\n[[scenarios]]\nfamily = "sr-cmnist"\nratio = "3:1"\n'
        "scale = 1\nn_per_given = 60\nn_eval = 40\n"
    )
    args = ["study", "estimate", str(config), "--device", "cpu", "--n-sample-steps", "3"]
    result = runner.invoke(app, [*args, "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "measured on device cpu" in result.output
    assert "at 3 training step(s) each" in result.output
    assert "with 1 worker(s) on cpu" in result.output


def test_cli_estimate_of_a_long_study_times_steps_by_default(tmp_path):
    """More than 1,000 steps (the paper preset's 5001): whole units would take hours to sample,
    so the estimate times 3 steps per algorithm unless --steps-fraction asks for whole units."""
    config = tmp_path / "study.toml"
    config.write_text(
        'name = "e"\nsource = "digits"\nalgorithms = ["ERM"]\nseeds = [0]\nsteps = 5001\n'
        '[trainer]\nbatch_size = 8\n[[scenarios]]\nfamily = "sr-cmnist"\nratio = "3:1"\n'
        "scale = 1\nn_per_given = 60\nn_eval = 40\n"
    )
    result = runner.invoke(app, ["study", "estimate", str(config), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "note: 5001 steps per unit; timing 3 steps per algorithm" in result.output
    assert "at 3 training step(s) each" in result.output


@pytest.mark.skipif(HAS_CUDA, reason="auto is the CPU on a machine without CUDA")
def test_cli_auto_is_resolved_and_said_once(tmp_path):
    config = tmp_path / "study.toml"
    config.write_text(
        'name = "e"\nsource = "digits"\nalgorithms = ["ERM"]\nseeds = [0]\nsteps = 2\n'
        '[trainer]\nbatch_size = 8\ndevice = "auto"\n[[scenarios]]\nfamily = "sr-cmnist"\n'
        'ratio = "3:1"\nscale = 1\nn_per_given = 60\nn_eval = 40\n'
    )
    out = tmp_path / "s"
    args = ["study", "run", str(config), "--out", str(out), "--workers", "1", "--no-report"]
    result = runner.invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert result.output.count("device: auto -> cpu") == 1
    from oodeval.study import load_study

    assert "device" not in load_study(out).config.get("trainer", {})  # stored as the default cpu


# -- review fixes: remote executors, spelling torch accepts, bf16 warning, estimate options -------
def test_cuda_index_with_a_leading_zero_is_refused_as_torch_refuses_it():
    assert device_problem("cuda:01") is not None and device_problem("cuda:10") is None
    with pytest.raises(RuntimeError):
        torch.device("cuda:01")


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without CUDA")
def test_units_training_elsewhere_are_not_refused_for_this_machines_missing_gpu(tmp_path):
    from oodeval.study.config import validate_config
    from oodeval.study.executors import LocalExecutor
    from oodeval.study.runner import run_study

    config = synthetic_config(trainer={"device": "cuda"})
    with pytest.raises(OodevalError, match="CUDA"):
        validate_config(config)
    validate_config(config, device_here=False)  # Slurm nodes / a Ray cluster check it themselves

    class Elsewhere(LocalExecutor):
        @property
        def trains_elsewhere(self) -> bool:
            return True

    auto = synthetic_config(trainer={"device": "auto"})
    with pytest.raises(OodevalError, match="device auto would be resolved on this machine"):
        run_study(auto, tmp_path / "s", executor=Elsewhere(workers=1), progress=False)
    assert not (tmp_path / "s").exists()


def test_bf16_warning_is_for_cpus_only(monkeypatch):
    import warnings

    from oodeval.training import loop

    monkeypatch.setattr(loop, "native_bf16", lambda: False)
    with pytest.warns(RuntimeWarning, match="emulated"):
        loop._check_run(5, TrainerOptions(precision="bf16"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loop._check_run(5, TrainerOptions(precision="bf16", device="cuda"))


def test_estimate_refuses_algorithms_with_sample_steps():
    from oodeval.study.estimate import estimate_study

    with pytest.raises(OodevalError, match="give one of them"):
        estimate_study(synthetic_config(), algorithms=("ERM",), sample_steps=2)
