"""Tests of the leave-one-environment-out trainer on tiny scenarios."""

from __future__ import annotations

import functools
import math
import os
import pickle
from collections.abc import Iterator

import numpy as np
import pytest
import torch

import oodeval.algorithms as alg
from oodeval.algorithms.base import Algorithm
from oodeval.algorithms.erm import ERM
from oodeval.environments.base import Environment, Scenario
from oodeval.errors import OodevalError
from oodeval.study.worker import UnitTask, run_units
from oodeval.training import (
    FULL_FOLD,
    TrainingDiverged,
    predict_labels,
    run_unit,
    train_models,
)
from tests.helpers.training import SHAPE, TinyScenario, TwoGiven, synthetic_env

torch.set_num_threads(1)


class LabelledScenario(Scenario):
    """Given env k has labels k (75%) and 3 (25%); evaluation envs mix labels 3 and 0."""

    name = "labelled"
    num_classes = 4
    input_shape = SHAPE
    params: dict = {}

    given_names = ["a", "b", "c"]
    all_names = ["x", "y"]

    def given(self) -> list[Environment]:
        out = []
        for k, nm in enumerate(self.given_names):
            labels = np.array([k] * 30 + [3] * 10, dtype=np.int64)
            out.append(Environment(nm, np.zeros((40, *SHAPE), np.float32), labels))
        return out

    def evaluation(self) -> Iterator[Environment]:
        for i, nm in enumerate(self.all_names):
            labels = np.array([3] * (10 + i) + [0] * (10 - i), dtype=np.int64)
            yield Environment(nm, np.zeros((20, *SHAPE), np.float32), labels)


@alg.register_algorithm("UnseenLabel")
class UnseenLabel(Algorithm):
    """Predicts the smallest label it never saw in training (the last class if it saw all)."""

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
        return (
            torch.nn.functional.one_hot(first, self.num_classes)
            .float()[:, None]
            .expand(-1, len(x), -1)
        )


def test_each_model_is_tested_on_the_right_environments():
    """LOO model k never sees label k (only e_k has it), so it predicts k: error 0.25 on e_k
    (and 1.0 on any other given environment); the full model predicts 3 everywhere."""
    res = run_unit(LabelledScenario(), "UnseenLabel", seed=0, steps=10, batch_size=8)
    assert [(r.fold, r.environment, r.count) for r in res.rows] == [
        ("a", "a", 40), ("b", "b", 40), ("c", "c", 40), ("all", "x", 20), ("all", "y", 20)
    ]  # fmt: skip
    assert [r.error for r in res.rows] == [0.25, 0.25, 0.25, 0.5, 0.45]
    m = res.measures()
    assert m["average"] == pytest.approx(0.25) and m["worst_plus_gap"] == pytest.approx(0.25)
    assert m["ideal"] == 0.5
    assert res.scenario_name == "labelled" and res.steps == 10 and res.algorithm == "UnseenLabel"


def test_measures_match_a_hand_computation():
    res = run_unit(TinyScenario(), "ERM", seed=1, steps=5, batch_size=8, eval_every=2)
    loo = [r.error for r in res.rows if r.fold != FULL_FOLD]
    full = [r.error for r in res.rows if r.fold == FULL_FOLD]
    worst, best = max(loo), min(loo)
    m = res.measures()
    assert m["average"] == pytest.approx(sum(loo) / 3)
    assert m["worst"] == worst and m["gap"] == pytest.approx(worst - best)
    assert m["worst_plus_gap"] == pytest.approx(worst + (worst - best) / (3 - 2))  # Eq. 6
    assert m["ideal"] == max(full)
    assert list(res.all_errors()) == TinyScenario().all_names
    for r in res.rows:  # each error is a count of mistakes over the environment's rows
        assert r.error * r.count == pytest.approx(round(r.error * r.count))


def _probe() -> torch.Tensor:
    return torch.as_tensor(synthetic_env("probe", 16, 77, 0.5).images)


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
def test_fold_k_never_sees_environment_k(name):
    """Replacing e_0 by noise with other labels leaves LOO model 0 bit-for-bit unchanged."""
    kwargs = dict(seed=3, steps=4, batch_size=6, eval_every=2, holdout_fraction=0.25)
    hp = {f"{name.lower()}_penalty_anneal_iters": 2} if name in ("IRM", "VREx") else {}
    clean = train_models(TinyScenario(n=24), name, hparams=hp, **kwargs)
    rng = np.random.default_rng(9)
    noise = Environment(
        "e=0.9", rng.random((24, *SHAPE), dtype=np.float32) * 5, rng.integers(0, 2, 24)
    )
    dirty = train_models(TinyScenario(n=24, replace={0: noise}), name, hparams=hp, **kwargs)
    probe = _probe()
    with torch.inference_mode():
        assert torch.equal(clean.models[0].predict(probe), dirty.models[0].predict(probe))
        # ...while the models that do train on e_0 change
        assert not torch.equal(clean.models[3].predict(probe), dirty.models[3].predict(probe))
    assert clean.folds == ["e=0.9", "e=0.8", "e=0.1", "all"]


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
def test_every_algorithm_runs_with_two_given_environments(name):
    """With N = 2 each LOO model has a single training environment (no pairs, no meta-test)."""
    res = run_unit(TwoGiven(n=24), name, seed=0, steps=3, batch_size=4, eval_every=2)
    assert [r.fold for r in res.rows] == ["e=0.9", "e=0.1"] + [FULL_FOLD] * 5
    assert all(0.0 <= r.error <= 1.0 for r in res.rows)
    assert "worst_plus_gap" not in res.measures()  # Eq. 6 needs N >= 3


def test_same_seed_gives_identical_errors_and_other_seeds_differ():
    a = run_unit(TinyScenario(), "IRM", seed=5, steps=6, batch_size=8, eval_every=3)
    b = run_unit(TinyScenario(), "IRM", seed=5, steps=6, batch_size=8, eval_every=3)
    c = run_unit(TinyScenario(), "IRM", seed=6, steps=6, batch_size=8, eval_every=3)
    assert a.rows == b.rows
    assert a.rows != c.rows
    state = torch.get_rng_state()
    run_unit(TinyScenario(), "Mixup", seed=5, steps=2, batch_size=8)
    assert torch.equal(state, torch.get_rng_state())  # the caller's global RNG is untouched


@alg.register_algorithm("Flicker")
class Flicker(Algorithm):
    """Predicts class 1 only when its update counter equals 3 (labels are 1 half the time)."""

    HPARAMS = {}

    def __init__(self, input_shape, num_classes, env_mask, hparams, *, model="mlp"):
        super().__init__(input_shape, num_classes, env_mask, hparams, model=model)
        self.register_buffer("count", torch.zeros(self.num_models))

    def update(self, x, y):
        self.count += 1
        return {"loss": torch.zeros(self.num_models)}

    def predict(self, x):
        cls = (self.count == 3).long()
        return torch.nn.functional.one_hot(cls, 2).float()[:, None].expand(-1, len(x), -1)


def test_training_domain_selection_restores_the_best_checkpoint():
    class AllOnes(LabelledScenario):
        num_classes = 2

        def given(self):
            return [
                Environment(nm, np.zeros((40, *SHAPE), np.float32), np.ones(40, np.int64))
                for nm in self.given_names
            ]

        def evaluation(self):
            yield Environment("x", np.zeros((10, *SHAPE), np.float32), np.ones(10, np.int64))

    best = train_models(AllOnes(), "Flicker", seed=0, steps=6, eval_every=1, batch_size=4)
    assert best.selected_step == [3, 3, 3, 3] and best.val_accuracy == [1.0] * 4
    res = run_unit(AllOnes(), "Flicker", seed=0, steps=6, eval_every=1, batch_size=4)
    assert all(r.error == 0.0 for r in res.rows)
    last = run_unit(AllOnes(), "Flicker", seed=0, steps=6, batch_size=4, selection="last")
    assert all(r.error == 1.0 for r in last.rows)


@alg.register_algorithm("NaNOnFold1")
class NaNOnFold1(ERM):
    """ERM whose model 1 reports a NaN loss at its third update."""

    def update(self, x, y):
        out = super().update(x, y)
        if self.update_count == 3:
            out["loss"] = out["loss"].clone()
            out["loss"][1] = float("nan")
        return out


def test_nan_loss_raises_training_diverged_naming_algorithm_fold_and_step():
    with pytest.raises(TrainingDiverged) as info:
        run_unit(TinyScenario(), "NaNOnFold1", seed=0, steps=10, batch_size=4)
    err = info.value
    assert (err.algorithm, err.fold, err.step) == ("NaNOnFold1", "e=0.8", 3)
    assert "NaNOnFold1" in str(err) and "'e=0.8'" in str(err) and "step 3" in str(err)
    assert isinstance(err, OodevalError)
    again = pickle.loads(pickle.dumps(err))  # crosses process boundaries intact
    assert (again.fold, again.step, str(again)) == (err.fold, err.step, str(err))


def test_huge_learning_rate_diverges():
    with pytest.raises(TrainingDiverged, match=r"ERM diverged: loss (nan|inf) in fold 'e=0.9'"):
        run_unit(TinyScenario(), "ERM", seed=0, steps=20, batch_size=8, hparams={"lr": 1e30})


@alg.register_algorithm("SequentialLabelCounter")
class SequentialLabelCounter(ERM):
    """One-model-only algorithm recording the labels it is given."""

    supports_ensemble = False

    def __init__(self, input_shape, num_classes, env_mask, hparams, *, model="mlp"):
        super().__init__(input_shape, num_classes, env_mask, hparams, model=model)
        self.register_buffer("label_counts", torch.zeros(1, num_classes))

    def update(self, x, y):
        assert self.num_models == 1 and x.shape[0] == self.num_envs
        self.label_counts += torch.bincount(y.reshape(-1), minlength=self.num_classes)
        return super().update(x, y)


def test_sequential_fallback_trains_each_model_on_its_own_environments_only():
    trained = train_models(
        LabelledScenario(),
        "SequentialLabelCounter",
        seed=0,
        steps=5,
        batch_size=8,
        selection="last",
    )
    counts = [m.label_counts[0] for m in trained.models]
    seen = [set(torch.nonzero(c).flatten().tolist()) for c in counts]
    # env a holds labels {0, 3}, b {1, 3}, c {2, 3}: each fold sees the union of its own envs
    assert seen == [{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2, 3}]
    counts = [c.tolist() for c in counts]
    assert sum(counts[3]) == 3 * 8 * 5  # the full model saw every environment's minibatches
    assert all(sum(c) == 2 * 8 * 5 for c in counts[:3])
    res = run_unit(TinyScenario(), "SequentialLabelCounter", seed=0, steps=3, batch_size=8)
    assert [r.fold for r in res.rows][:3] == TinyScenario().given_names


def test_cnn_model_and_progress_callback():
    calls = []
    res = run_unit(
        TinyScenario(n=24),
        "ERM",
        seed=0,
        steps=3,
        batch_size=4,
        model="cnn",
        progress=lambda s, t: calls.append((s, t)),
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert len(res.rows) == 3 + 5 and all(0 <= r.error <= 1 for r in res.rows)
    assert {"train", "steps", "selection_eval", "test_eval", "total"} <= set(res.timings)
    assert 0 < res.timings["steps"] <= res.timings["train"]  # the loop alone, inside training


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"steps": 0}, "steps must be a positive integer"),
        ({"selection": "oracle"}, "unknown selection"),
        ({"holdout_fraction": 0.0}, "holdout_fraction"),
        ({"model": "resnet"}, "unknown model"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_options_raise_one_line_errors(kwargs, match):
    options = {"seed": 0, "steps": 2, **kwargs}
    with pytest.raises(OodevalError, match=match):
        run_unit(TinyScenario(), "ERM", **options)


def test_too_few_given_environments_is_an_error():
    class One(TinyScenario):
        def given(self):
            return super().given()[:1]

    with pytest.raises(OodevalError, match=">= 2 given environments"):
        run_unit(One(), "ERM", seed=0, steps=2)


def test_batch_dependent_predictions_use_training_batch_chunks():
    trained = train_models(TinyScenario(n=24), "MTL", seed=0, steps=2, batch_size=5)
    x = torch.as_tensor(synthetic_env("p", 12, 1, 0.5).images)
    model = trained.models[-1]
    got = predict_labels(model, x, context=5)
    with torch.inference_mode():
        want = torch.cat([model.predict(x[i : i + 5]).argmax(-1) for i in range(0, 12, 5)], 1)
    assert torch.equal(got, want)


def test_run_units_in_worker_processes_matches_in_process_runs():
    specs = [
        UnitTask.for_scenario(TinyScenario(n=24), "ERM", s, 3, {"batch_size": 4}) for s in (0, 1)
    ]
    local = list(run_units(specs, workers=1))
    remote = list(run_units(specs, workers=2))
    assert [r.rows for r in local] == [r.rows for r in remote]
    with pytest.raises(OodevalError, match="workers"):
        list(run_units(specs, workers=0))


def test_a_worker_pool_serves_several_run_units_calls(monkeypatch):
    import oodeval.study.worker as worker
    from oodeval.study.worker import worker_pool

    specs = [
        UnitTask.for_scenario(TinyScenario(n=24), "ERM", s, 3, {"batch_size": 4}) for s in (0, 1)
    ]
    local = [r.rows for r in run_units(specs, workers=1)]
    with worker_pool(2) as pool:
        with pytest.raises(OodevalError, match="either pool= or workers="):
            list(run_units(specs, pool=pool, workers=2))

        def no_new_pool(*args, **kwargs):
            raise AssertionError("run_units(pool=...) started a pool of its own")

        monkeypatch.setattr(worker, "worker_pool", no_new_pool)
        first = [r.rows for r in run_units(specs, pool=pool)]
        pids = {f.result() for f in [pool.submit(os.getpid) for _ in range(4)]}
        second = [r.rows for r in run_units(specs[::-1], pool=pool)]
        pids |= {f.result() for f in [pool.submit(os.getpid) for _ in range(4)]}
    assert first == local and second == local[::-1]
    assert os.getpid() not in pids and len(pids) <= 2  # the same two processes throughout
    with pytest.raises(OodevalError, match="workers"):
        worker_pool(0)


def test_run_units_builds_scenarios_in_workers_and_rejects_unpicklable_ones():
    class Unpicklable(TinyScenario):
        def __init__(self):
            super().__init__(n=24)
            self.hook = lambda: None

    specs = [UnitTask.for_scenario(Unpicklable(), "ERM", s, 2, {"batch_size": 4}) for s in (0, 1)]
    with pytest.raises(OodevalError, match="functools.partial"):
        list(run_units(specs, workers=2))
    build = functools.partial(TinyScenario, n=24)
    local = list(
        run_units([UnitTask.for_scenario(build, "ERM", 0, 2, {"batch_size": 4})], workers=1)
    )
    assert local[0].rows == run_unit(TinyScenario(n=24), "ERM", seed=0, steps=2, batch_size=4).rows


def test_run_units_refuses_a_study_task_without_its_scenario():
    # a study's task names its scenario by index into a config that only a study's worker holds
    task = UnitTask(0, "s", "sr-cmnist", {}, "ERM", 0, {}, 2, "mlp")
    with pytest.raises(OodevalError, match="UnitTask.for_scenario"):
        list(run_units([task], workers=1))


def test_the_trainer_options_and_records_import_without_torch():
    import subprocess
    import sys

    code = (
        "import sys, oodeval.training, oodeval.training.options, oodeval.training.results;"
        "print('torch' in sys.modules)"
    )
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert answer.stdout.strip() == "False", answer.stderr


def test_precision_names_have_one_home_and_a_torch_dtype_each():
    from oodeval.algorithms.networks import PRECISION_DTYPES, compute_dtype
    from oodeval.training.options import PRECISIONS

    assert tuple(PRECISION_DTYPES) == PRECISIONS == ("fp32", "bf16")
    assert [compute_dtype(p) for p in PRECISIONS] == [torch.float32, torch.bfloat16]
    with pytest.raises(OodevalError, match="unknown precision 'fp16'; choose one of fp32, bf16"):
        compute_dtype("fp16")


def test_real_sr_cmnist_unit():
    from oodeval.environments import build_scenario

    sc = build_scenario("sr-cmnist", source="digits", ratio="3:1", scale=1)
    res = run_unit(sc, "ERM", seed=0, steps=5, batch_size=16)
    given = list(sc.given_names)
    assert [r.fold for r in res.rows[: len(given)]] == given
    assert [r.environment for r in res.rows[len(given) :]] == list(sc.all_names)
    assert [r.count for r in res.rows[: len(given)]] == [len(e) for e in sc.given()]
    assert [r.count for r in res.rows[len(given) :]] == [len(e) for e in sc.evaluation()]
    assert all(0.0 <= r.error <= 1.0 and not math.isnan(r.error) for r in res.rows)
    assert res.scenario_name == sc.name


def test_trainer_options_are_the_study_configs_trainer_keys_and_checked_once():
    from dataclasses import fields

    from oodeval.study.config import PRECISIONS, TRAINER_KEYS
    from oodeval.training import TrainerOptions

    assert tuple(f.name for f in fields(TrainerOptions)) == TRAINER_KEYS
    assert TrainerOptions().precision == PRECISIONS[0]
    with pytest.raises(OodevalError, match=r"trainer option\(s\) batchsize; the trainer takes"):
        run_unit(TinyScenario(n=24), "ERM", seed=0, steps=1, batchsize=4)
    with pytest.raises(OodevalError, match="batch_size must be >= 1"):
        train_models(TinyScenario(n=24), "ERM", seed=0, steps=1, batch_size=0)
    with pytest.raises(OodevalError, match="unknown selection 'best'"):
        TrainerOptions(selection="best")
