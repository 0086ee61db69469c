"""Per-checkpoint records of the trainer, stored by a study and read by `oodeval variance DIR`.

The variance figures of a real study are checked against a brute-force recomputation from the
stored checkpoint rows, and the checkpoint rows against the stored LOO errors (the selected
checkpoint's in/out accuracies recombine into the error on all of the held-out environment).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import oodeval.algorithms as alg
from oodeval.algorithms.base import Algorithm
from oodeval.cli.main import app
from oodeval.environments.base import Environment, Scenario
from oodeval.errors import OodevalError
from oodeval.results.variance import read_checkpoints, study_checkpoints
from oodeval.study import config_from_dict, run_study
from oodeval.study.store import ResultStore, UnitRecord
from oodeval.training import run_unit

ROOT = Path(__file__).resolve().parents[2]


def _real_config() -> dict:
    return {
        "name": "ckpt-tiny",
        "source": "digits",
        "algorithms": ["ERM", "VREx"],
        "seeds": [0, 1],
        "steps": 8,
        "scenarios": [{"family": "sr-cmnist", "ratio": "3:1", "scale": 1}],
        "trainer": {"eval_every": 2, "batch_size": 16},
        "hparams": {"VREx": {"vrex_penalty_anneal_iters": 2}},
    }


@pytest.fixture(scope="module")
def real_study(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("study")
    summary = run_study(config_from_dict(_real_config()), directory, workers=2, progress=False)
    assert summary.done == 4 and summary.failed == 0
    return directory


def _stored(directory: Path) -> tuple[list[tuple], list[tuple], dict[str, str]]:
    with sqlite3.connect(directory / "results.sqlite") as conn:
        ckpts = conn.execute(
            "SELECT unit_key, fold, step, train_val_acc, test_acc, oracle_val_acc "
            "FROM checkpoints ORDER BY unit_key, fold, step"
        ).fetchall()
        results = conn.execute("SELECT unit_key, fold, environment, error, count FROM results")
        results = results.fetchall()
        units = dict(conn.execute("SELECT unit_key, algorithm FROM units").fetchall())
    return ckpts, results, units


def test_study_stores_every_checkpoint_of_every_loo_model(real_study):
    ckpts, results, units = _stored(real_study)
    folds = sorted({f for _, f, *_ in ckpts})
    assert len(folds) == 4 and "all" not in folds  # sr-cmnist 3:1 scale 1 has 4 given envs
    # 4 units x 4 LOO models x checkpoints at steps 2, 4, 6, 8
    assert len(ckpts) == 4 * 4 * 4
    assert {s for _, _, s, *_ in ckpts} == {2, 4, 6, 8}
    assert all(0 <= a <= 1 for row in ckpts for a in row[3:])
    # the checkpoint training-domain validation picks (earliest best) recombines, in and out
    # parts weighted by their sizes, into the stored LOO error on all of the held-out environment
    loo = {(k, f): (e, n) for k, f, env, e, n in results if f == env}
    for key in units:
        for fold in folds:
            run = [r for r in ckpts if r[0] == key and r[1] == fold]
            best = max(r[3] for r in run)
            chosen = next(r for r in run if r[3] == best)
            error, count = loo[(key, fold)]
            n_out = int(round(0.2 * count))
            acc = (chosen[4] * (count - n_out) + chosen[5] * n_out) / count
            assert acc == pytest.approx(1 - error, abs=1e-12)


def _brute_force(directory: Path) -> dict[tuple[str, str], dict[str, float]]:
    """seed_std, epoch_std (last 10 checkpoints), oracle_gap (best oracle checkpoint), by loops."""
    ckpts, _, units = _stored(directory)
    out = {}
    for algorithm in sorted(set(units.values())):
        keys = sorted(k for k, a in units.items() if a == algorithm)
        for fold in sorted({r[1] for r in ckpts}):
            picked, oracle, tails = [], [], []
            for key in keys:  # one hparams draw per seed: each unit is one trial's only run
                run = sorted((r for r in ckpts if r[0] == key and r[1] == fold), key=lambda r: r[2])
                by_val = run[int(np.argmax([r[3] for r in run]))]
                by_oracle = run[int(np.argmax([r[5] for r in run]))]
                picked.append(by_val[4])
                oracle.append(by_oracle[4])
                tails.append(np.std([r[4] for r in run[-10:]], ddof=1))
            out[(algorithm, fold)] = {
                "seed_std": 100 * np.std(picked, ddof=1),
                "epoch_std": 100 * np.mean(tails),
                "oracle_gap": 100 * np.mean(np.subtract(oracle, picked)),
            }
    return out


def test_variance_cli_on_a_study_matches_brute_force(real_study):
    result = CliRunner().invoke(app, ["variance", str(real_study), "--format", "json"])
    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)
    want = _brute_force(real_study)
    rows = [r for r in table if r["environment"] != "mean"]
    assert len(rows) == len(want) == 8
    for row in rows:
        expected = want[(row["algorithm"], row["environment"])]
        assert row["dataset"] == "sr-cmnist/ratio=3:1/scale=1"
        assert row["n_trials"] == 2 and row["epoch_checkpoints"] == 4
        for name, value in expected.items():
            assert row[name] == pytest.approx(value, abs=1e-9), name


def test_study_frame_names_scenario_fold_and_seed(real_study):
    frame = read_checkpoints(real_study)
    assert set(frame["dataset"]) == {"sr-cmnist/ratio=3:1/scale=1"}
    assert set(frame["trial"]) == {0, 1}
    assert frame.groupby(["algorithm", "trial"])["hparams"].nunique().eq(1).all()
    assert len(frame) == 64 and frame.equals(study_checkpoints(real_study))


def _synthetic_study(directory: Path) -> None:
    cfg = config_from_dict(
        {
            "name": "syn",
            "backend": "oodeval.study.synthetic",
            "algorithms": ["ERM"],
            "seeds": [0, 1],
            "steps": 5,
            "scenarios": [{"family": "synthetic", "ratio": "3:1", "scale": 1}],
        }
    )
    run_study(cfg, directory, workers=1, progress=False)


def test_a_study_without_checkpoint_records_is_one_clear_error(tmp_path):
    _synthetic_study(tmp_path)
    with pytest.raises(OodevalError, match="no per-checkpoint records.*re-run it"):
        read_checkpoints(tmp_path)
    # a store written before the checkpoints table existed: the same error, no crash
    with sqlite3.connect(tmp_path / "results.sqlite") as conn:
        conn.execute("DROP TABLE checkpoints")
    with pytest.raises(OodevalError, match="no per-checkpoint records"):
        read_checkpoints(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "variance", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "no per-checkpoint records" in proc.stderr and "Traceback" not in proc.stderr
    # reopening the old store for writing adds the table; its units stay as they were
    with ResultStore(tmp_path, create=True) as store:
        assert store.checkpoints_frame().empty
        assert set(store.statuses().values()) == {"done"}


def _record(seed: int, checkpoints, rows=()) -> UnitRecord:
    return UnitRecord(
        scenario="s",
        family="synthetic",
        params={},
        algorithm="ERM",
        seed=seed,
        hparams={"lr": 0.1},
        steps=4,
        model="mlp",
        status="done",
        checkpoints=checkpoints,
        rows=rows,
    )


def test_checkpoints_are_written_in_the_units_transaction(tmp_path):
    rows = [("a", "a", 0.25, 8), ("all", "a", 0.5, 8)]
    with ResultStore(tmp_path, create=True) as store:
        store.record_unit(_record(0, [("a", 2, 0.5, 0.75, 1.0), ("a", 4, 0.5, 0.5, 0.25)], rows))
        # a duplicate (fold, step) fails inside the transaction: nothing of unit 1 is kept
        with pytest.raises(OodevalError, match=r"two rows share the \(fold, step\)"):
            store.record_unit(_record(1, [("a", 2, 0.5, 0.5, 0.5), ("a", 2, 0.5, 0.5, 0.5)], rows))
        assert list(store.statuses()) == ["s|ERM|seed=0"]
        assert len(store.results_frame()) == 2
        frame = store.checkpoints_frame()
    assert frame[
        ["fold", "step", "train_val_acc", "test_acc", "oracle_val_acc"]
    ].values.tolist() == [
        ["a", 2, 0.5, 0.75, 1.0],
        ["a", 4, 0.5, 0.5, 0.25],
    ]
    assert set(frame["unit_key"]) == {"s|ERM|seed=0"} and set(frame["seed"]) == {0}


SHAPE = (1, 4, 4)


class LabelledScenario(Scenario):
    """Given env k holds labels k (75%) and 3 (25%); one evaluation env of label 3."""

    name = "labelled"
    num_classes = 4
    input_shape = SHAPE
    params: dict = {}
    given_names = ["a", "b", "c"]
    all_names = ["x"]

    def given(self) -> list[Environment]:
        rng = np.random.default_rng(0)
        out = []
        for k, name in enumerate(self.given_names):
            labels = rng.permutation(np.array([k] * 45 + [3] * 15, dtype=np.int64))
            out.append(Environment(name, rng.random((60, *SHAPE), dtype=np.float32), labels))
        return out

    def evaluation(self) -> Iterator[Environment]:
        yield Environment("x", np.zeros((10, *SHAPE), np.float32), np.full(10, 3, np.int64))


@alg.register_algorithm("SmallestUnseenLabel")
class SmallestUnseenLabel(Algorithm):
    """Predicts the smallest label its model has not seen in training (the last if it saw all)."""

    HPARAMS = {}

    def __init__(self, input_shape, num_classes, env_mask, hparams, *, model="mlp"):
        super().__init__(input_shape, num_classes, env_mask, hparams, model=model)
        self.register_buffer("seen", torch.zeros(self.num_models, num_classes))

    def update(self, x, y):
        labels = self.labels_per_model(y).reshape(self.num_models, -1)
        self.seen += torch.nn.functional.one_hot(labels, self.num_classes).sum(1)
        return {"loss": torch.zeros(self.num_models)}

    def predict(self, x):
        unseen = self.seen == 0
        first = torch.where(unseen.any(1), unseen.float().argmax(1), self.num_classes - 1)
        out = torch.nn.functional.one_hot(first, self.num_classes).float()
        return out[:, None].expand(-1, len(x), -1)


@alg.register_algorithm("SmallestUnseenLabelAlone")
class SmallestUnseenLabelAlone(SmallestUnseenLabel):
    """The same, trained one model per instance (the trainer's sequential fallback)."""

    supports_ensemble = False


@pytest.mark.parametrize("name", ["SmallestUnseenLabel", "SmallestUnseenLabelAlone"])
def test_checkpoint_accuracies_match_a_hand_computation(name):
    # LOO model k trains on the other envs: labels {j != k} and 3, so (once it has seen them all)
    # it predicts k: right on e_k's label-k rows, wrong on every row of its training envs
    scenario = LabelledScenario()
    res = run_unit(scenario, name, seed=4, steps=12, eval_every=6, batch_size=8)
    assert [(c.fold, c.step) for c in res.checkpoints] == [
        (e, s) for e in scenario.given_names for s in (6, 12)
    ]
    for k, env in enumerate(scenario.given()):
        inside, out = env.split(0.2, 4)
        last = [c for c in res.checkpoints if c.fold == env.name and c.step == 12][0]
        assert last.train_val_acc == 0.0
        assert last.test_acc == pytest.approx(float(np.mean(inside.labels == k)), abs=1e-15)
        assert last.oracle_val_acc == pytest.approx(float(np.mean(out.labels == k)), abs=1e-15)
        assert 1 - res.loo_errors()[env.name] == pytest.approx(float(np.mean(env.labels == k)))


def test_run_unit_checkpoints_are_deterministic_and_leave_errors_alone():
    kw = {"seed": 5, "steps": 6, "eval_every": 2, "batch_size": 8}
    a = run_unit(LabelledScenario(), "ERM", **kw)
    b = run_unit(LabelledScenario(), "ERM", **kw)
    assert a.checkpoints == b.checkpoints and a.rows == b.rows
    assert len(a.checkpoints) == 3 * 3
    assert run_unit(LabelledScenario(), "ERM", selection="last", **kw).checkpoints == []
