"""Running studies: kill -9 and resume, determinism, failure isolation, config validation.

The units come from the synthetic backend (`oodeval.study.synthetic`): pure numpy, milliseconds per
unit, errors derived deterministically from the unit's seed, so the machinery is tested without
training anything.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import oodeval
from oodeval.environments.mnist import resolve_source
from oodeval.errors import OodevalError
from oodeval.study import (
    config_from_dict,
    load_config,
    load_study,
    run_study,
    synthetic,
    validate_config,
)
from tests.helpers.studies import assert_same_store, count_stored_units, synthetic_config
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def test_whole_study_is_deterministic_and_independent_of_worker_count(tmp_path):
    cfg = synthetic_config()
    one = run_study(cfg, tmp_path / "one", workers=1, progress=False)
    two = run_study(cfg, tmp_path / "two", workers=2, progress=False)
    assert one.done == two.done == 20 and one.failed == 0
    assert_same_store(tmp_path / "one", tmp_path / "two")
    results = load_study(tmp_path / "one").results
    # 4 given + 101 evaluation rows per unit on scale 1; 10 + 101 on ratio 4:1, scale 2.
    assert len(results) == 10 * (4 + 101) + 10 * (10 + 101)


def test_rerun_skips_finished_units(tmp_path):
    cfg = synthetic_config()
    run_study(cfg, tmp_path, workers=2, progress=False)
    again = run_study(cfg, tmp_path, workers=2, progress=False)
    assert (again.skipped, again.ran, again.done) == (20, 0, 0)
    assert len(load_study(tmp_path).units) == 20


def test_kill_minus_nine_mid_study_then_resume_equals_uninterrupted_run(tmp_path):
    """SIGKILL of the driver and its workers with 4 or more units stored and others running.

    The GroupDRO units wait for a gate file (tests/cluster_backend.py) that exists only after the
    kill, so the study cannot finish before it, however slowly this test is scheduled; the other
    units run 0.1 s each, so the kill also lands in running units."""
    cfg_path, gate = tmp_path / "study.toml", tmp_path / "gate"
    cfg_path.write_text(
        f"""
name = "kill-test"
backend = "tests.cluster_backend"
algorithms = ["ERM", "IRM", "GroupDRO", "CORAL"]
seeds = [0, 1]
steps = 10
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }},
             {{ family = "synthetic", ratio = "5:1", scale = 1 }}]
[unit_options]
sleep = 0.1
fail_algorithms = ["CORAL"]
gate = "{gate}"
gated_algorithms = ["GroupDRO"]
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
        "--workers",
        "2",
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # the workers import tests.cluster_backend
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: count_stored_units(killed) >= 4, "4 stored units", proc=proc)
        os.killpg(proc.pid, signal.SIGKILL)  # the parent and its workers, mid-study
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    gate.touch()  # from now on the GroupDRO units run
    interrupted = count_stored_units(killed)
    assert 4 <= interrupted < 16
    with sqlite3.connect(killed / "results.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # every stored unit is complete: done units have all their rows, failed ones none
        per_unit = dict(
            conn.execute(
                "SELECT u.unit_key, COUNT(r.unit_key) FROM units u "
                "LEFT JOIN results r ON r.unit_key = u.unit_key GROUP BY u.unit_key"
            ).fetchall()
        )
        statuses = dict(conn.execute("SELECT unit_key, status FROM units").fetchall())
    for key, n in per_unit.items():
        expected = 0 if statuses[key] == "failed" else (4 if "3:1" in key else 6) + 101
        assert n == expected, key

    resumed = run_study(load_config(cfg_path), killed, workers=2, progress=False)
    assert resumed.skipped == interrupted and resumed.skipped + resumed.ran == 16
    reference = tmp_path / "reference"
    run_study(load_config(cfg_path), reference, workers=2, progress=False)
    assert_same_store(killed, reference)


def test_failing_unit_is_isolated_and_its_reason_stored(tmp_path):
    cfg = synthetic_config(unit_options={"fail_algorithms": ["IRM"]})
    summary = run_study(cfg, tmp_path, workers=2, progress=False)
    assert (summary.done, summary.failed) == (16, 4)
    units = load_study(tmp_path).units
    failed = units[units["status"] == "failed"]
    assert set(failed["algorithm"]) == {"IRM"}
    assert failed["failure"].str.contains("SyntheticFailure: synthetic failure of IRM").all()
    results = load_study(tmp_path).results
    assert not results["unit_key"].str.contains(r"\|IRM\|").any()
    # failed units are kept unless retried; a retry runs them again (and counts the attempt)
    assert run_study(cfg, tmp_path, workers=1, progress=False).ran == 0
    retry = run_study(cfg, tmp_path, workers=1, progress=False, retry_failed=True)
    assert (retry.ran, retry.failed) == (4, 4)
    units = load_study(tmp_path).units
    assert units.loc[units["status"] == "failed", "attempts"].tolist() == [2, 2, 2, 2]


# This test module doubles as a study backend (``backend = __name__``): the synthetic
# backend, except that IRM's loss "diverges" the way the real trainer reports it.
available = synthetic.available
build_scenario = synthetic.build_scenario
default_hparams = synthetic.default_hparams
sample_hparams = synthetic.sample_hparams


def run_unit(scenario, algorithm, **kwargs):
    if algorithm == "IRM":
        from oodeval.training import TrainingDiverged

        raise TrainingDiverged("IRM", "e=0.850", 7)
    return synthetic.run_unit(scenario, algorithm, **kwargs)


def test_a_diverged_training_fails_only_its_unit(tmp_path):
    cfg = synthetic_config(
        backend=__name__,
        seeds=[0],
        scenarios=[{"family": "synthetic", "ratio": "3:1", "scale": 1}],
    )
    summary = run_study(cfg, tmp_path, workers=2, progress=False)
    assert (summary.done, summary.failed) == (4, 1)
    units = load_study(tmp_path).units.set_index("algorithm")
    assert units.loc["IRM", "failure"].startswith(
        "TrainingDiverged: IRM diverged: loss nan in fold 'e=0.850' at step 7"
    )


def test_a_crashed_worker_fails_its_unit_and_the_study_goes_on(tmp_path):
    cfg = synthetic_config(
        algorithms=["ERM", "IRM", "GroupDRO"],
        seeds=[0],
        scenarios=[{"family": "synthetic", "ratio": "3:1", "scale": 1}],
        unit_options={"crash_algorithms": ["IRM"]},
    )
    summary = run_study(cfg, tmp_path, workers=2, progress=False)
    units = load_study(tmp_path).units.set_index("algorithm")
    assert units.loc["IRM", "status"] == "failed"
    assert "worker process died" in units.loc["IRM", "failure"]
    # the units in flight with the crash are re-run alone and complete
    assert units.loc[["ERM", "GroupDRO"], "status"].tolist() == ["done", "done"]
    assert (summary.ran, summary.done, summary.failed) == (3, 2, 1)


def test_resuming_with_another_config_is_refused(tmp_path):
    run_study(synthetic_config(), tmp_path, workers=1, progress=False)
    with pytest.raises(
        OodevalError, match=r"would not compare with this config's: steps \(10 -> 11\)"
    ):
        run_study(synthetic_config(seeds=[0, 1, 2], steps=11), tmp_path, progress=False)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algorithms": ["ERM", "Nope"]}, r"unknown algorithm\(s\) Nope; available: ARM, CDANN, "),
        ({"hparams": {"ERM": {"lr": "fast"}}}, r"hparams.ERM.lr must be float"),
        ({"hparams": {"ERM": {"lr": True}}}, r"hparams.ERM.lr must be float"),
        ({"hparams": {"ERM": {"momentum": 0.9}}}, r"ERM has no hyperparameter 'momentum'"),
        ({"hparams": {"DANN": {"lr": 0.1}}}, r"\[hparams.DANN\] names an algorithm"),
        (
            {"scenarios": [{"family": "synthetic", "given": [0.1, 0.9]}]},
            r"has 2 given environments but worst_plus_gap, gap_only need at least 3",
        ),
        ({"scenarios": [{"family": "nope"}]}, r"unknown scenario family 'nope'"),
        ({"measures": ["average", "medain"]}, r"unknown measure\(s\) 'medain'; choose from"),
        ({"seeds": [0, 0]}, r"'seeds' lists a value twice"),
        ({"steps": 0}, r"steps must be >= 1"),
        ({"steps": 1.5}, r"steps must be an integer"),
        ({"backend": "no.such.module"}, r"cannot import module 'no.such.module'"),
        ({"imports": ["my_missing_algorithms"]}, r"imports: cannot import module 'my_missing"),
    ],
)
def test_bad_config_gets_one_clear_error(tmp_path, overrides, message):
    with pytest.raises(OodevalError, match=message) as info:
        run_study(synthetic_config(**overrides), tmp_path / "s", progress=False)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "s" / "results.sqlite").exists()


def test_two_environment_scenario_is_fine_without_worst_plus_gap():
    cfg = synthetic_config(
        scenarios=[{"family": "synthetic", "given": [0.1, 0.9]}], measures=["average"]
    )
    validated = validate_config(cfg)
    assert validated.scenarios[0].given == ("e=0.100", "e=0.900")


def test_real_backend_rejects_a_two_environment_scenario():
    cfg = config_from_dict(
        {
            "algorithms": ["ERM"],
            "seeds": [0],
            "steps": 5,
            "scenarios": [{"family": "sr-cmnist", "given": [0.1, 0.9]}],
        }
    )
    with pytest.raises(OodevalError, match="has 2 given environments"):
        validate_config(cfg)


def test_bad_toml_and_unknown_keys(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("algorithms = [", encoding="utf-8")
    with pytest.raises(OodevalError, match="not valid TOML"):
        load_config(bad)
    bad.write_text('algorithm = ["ERM"]\n', encoding="utf-8")
    with pytest.raises(OodevalError, match=r"config key\(s\) 'algorithm'; allowed keys"):
        load_config(bad)


def test_auto_source_finds_mnist_beside_the_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("OODEVAL_MNIST", raising=False)
    bundled = (Path(oodeval.__file__).parent / "data" / "mnist").resolve()
    assert resolve_source("auto", cwd=tmp_path / "work") == f"mnist:{bundled}"
    mnist = tmp_path / "shared" / "data" / "mnist"
    mnist.mkdir(parents=True)
    (mnist / "t10k-images-idx3-ubyte.gz").write_bytes(b"")
    (tmp_path / "work").mkdir()
    assert resolve_source("auto", cwd=tmp_path / "work") == f"mnist:{mnist.resolve()}"
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "t10k-images-idx3-ubyte").write_bytes(b"")
    monkeypatch.setenv("OODEVAL_MNIST", str(other))
    assert resolve_source("auto", cwd=tmp_path / "work") == f"mnist:{other.resolve()}"
    assert resolve_source("mnist:/x") == "mnist:/x"


def test_real_trainer_study_is_deterministic(tmp_path):
    cfg = config_from_dict(
        {
            "name": "real-tiny",
            "source": "digits",
            "algorithms": ["ERM", "VREx"],
            "seeds": [3],
            "steps": 12,
            "scenarios": [{"family": "sr-cmnist", "ratio": "3:1", "scale": 1}],
            "trainer": {"eval_every": 6, "batch_size": 16},
            "hparams": {"VREx": {"vrex_penalty_anneal_iters": 4}},
        }
    )
    summary = run_study(cfg, tmp_path, workers=1, progress=False)
    assert summary.done == 2
    study = load_study(tmp_path)
    # 4 leave-one-out rows and 101 E_all rows per unit
    assert study.results.groupby("unit_key").size().tolist() == [105, 105]
    vrex = study.units.set_index("algorithm").loc["VREx"]
    assert vrex["hparams"]["vrex_penalty_anneal_iters"] == 4
    assert "torch" in vrex["versions"] and len(vrex["versions"]["oodeval_source"]) == 16
    # where and how each unit trained: the device and the TF32 policy (issue 20 §3)
    assert (vrex["versions"]["run:device"], vrex["versions"]["run:tf32"]) == ("cpu", "default")
    # the worker's numbers are exactly those of a direct, single-threaded run_unit call
    import torch

    from oodeval.study import trainer_backend

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        scenario = trainer_backend.build_scenario(
            "sr-cmnist", source="digits", seed=0, ratio="3:1", scale=1
        )
        direct = trainer_backend.run_unit(
            scenario,
            "VREx",
            seed=3,
            steps=12,
            hparams=dict(vrex["hparams"]),
            model="mlp",
            eval_every=6,
            batch_size=16,
        )
    finally:
        torch.set_num_threads(threads)
    stored = study.results[study.results["unit_key"] == vrex["unit_key"]]
    got = sorted(
        stored[["fold", "environment", "error", "count"]].itertuples(index=False, name=None)
    )
    want = sorted((r.fold, r.environment, float(r.error), int(r.count)) for r in direct.rows)
    assert got == want


def test_estimate_projects_the_grid_from_min_middle_max_n():
    from oodeval.study.estimate import estimate_study

    cfg = synthetic_config(
        algorithms=["ERM", "IRM", "GroupDRO", "VREx"],
        seeds=[0, 1],
        scenarios=[
            {"family": "synthetic", "ratio": r, "scale": s}
            for r, s in (("3:1", 1), ("4:1", 1), ("5:1", 1), ("3:1", 2))
        ],
        unit_options={"sleep": 0.1},
    )
    estimate = estimate_study(cfg, workers=2, algorithms=("ERM", "IRM"))
    per_n = estimate.per_n.set_index("n_given")
    assert per_n["measured"].to_dict() == {4: True, 5: False, 6: True, 8: True}
    # 2 algorithms x 3 scenarios, and the other 2 algorithms on the smallest-N scenario
    roles = estimate.samples.groupby("role")["algorithm"].apply(sorted).to_dict()
    assert roles == {
        "mix": ["GroupDRO", "VREx"],
        "sample": ["ERM", "ERM", "ERM", "IRM", "IRM", "IRM"],
    }
    assert set(estimate.samples.loc[estimate.samples["role"] == "mix", "n_given"]) == {4}
    assert estimate.failed == 0
    assert per_n["units_in_study"].sum() == 32
    assert_projection_combines_the_measured_times(estimate, workers=2)
    assert "projected wall time" in estimate.summary()


def assert_projection_combines_the_measured_times(estimate, *, workers, slow=None):
    """Unit times are measured, so only how they are combined is pinned (speed: benchmarks/).

    The one bound on a time is a floor: a synthetic unit sleeping s seconds (0.1 plus its
    algorithm's `slow` extra) cannot take less than s, however fast or loaded the machine.
    """
    samples = estimate.samples
    floors = samples["algorithm"].map(lambda a: 0.1 + (slow or {}).get(a, 0.0))
    assert (samples["wall_seconds"] >= floors).all()
    at_min = samples[samples["n_given"] == samples["n_given"].min()]
    per_algorithm = at_min.groupby("algorithm")["full_steps_seconds"].mean()
    sampled = at_min.loc[at_min["role"] == "sample", "algorithm"].unique()
    mix = per_algorithm.mean() / per_algorithm[sampled].mean()
    assert estimate.mix_factor == pytest.approx(mix, rel=1e-12)
    main = samples[samples["role"] == "sample"].groupby("n_given")["full_steps_seconds"].mean()
    per_n = estimate.per_n.set_index("n_given")
    for n, seconds in main.items():
        assert per_n.loc[n, "unit_seconds"] == pytest.approx(seconds * mix, rel=1e-12)
    total = (per_n["unit_seconds"] * per_n["units_in_study"]).sum() / workers
    assert estimate.projected_seconds == pytest.approx(total, rel=1e-12)


def test_estimate_accounts_for_algorithms_that_were_not_sampled():
    """GroupDRO costs 4x the others (0.4 s vs 0.1 s a unit): timed once at the smallest N, its
    share scales every N's projected unit time (about 1.75x the sampled ERM/IRM's, not asserted:
    measured times depend on the machine's load)."""
    from oodeval.study.estimate import estimate_study

    cfg = synthetic_config(
        algorithms=["ERM", "IRM", "GroupDRO", "VREx"],
        seeds=[0, 1],
        scenarios=[
            {"family": "synthetic", "ratio": r, "scale": s}
            for r, s in (("3:1", 1), ("4:1", 1), ("5:1", 1), ("3:1", 2))
        ],
        unit_options={"sleep": 0.1, "slow_algorithms": {"GroupDRO": 0.3}},
    )
    estimate = estimate_study(cfg, workers=2, algorithms=("ERM", "IRM"))
    assert_projection_combines_the_measured_times(estimate, workers=2, slow={"GroupDRO": 0.3})
    assert f"their mean unit costs {estimate.mix_factor:.2f}x the sampled (ERM, IRM)" in (
        estimate.summary()
    )
    alone = estimate_study(cfg, workers=2, algorithms=("ERM", "IRM", "GroupDRO", "VREx"))
    assert alone.mix_factor == 1.0 and set(alone.samples["role"]) == {"sample"}
    assert_projection_combines_the_measured_times(alone, workers=2, slow={"GroupDRO": 0.3})
