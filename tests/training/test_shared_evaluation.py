"""E_all as variants of shared images: the same environments, and the same errors, faster."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodeval.environments import build_scenario
from oodeval.environments.base import Scenario
from oodeval.training import FULL_FOLD, run_unit

torch.set_num_threads(1)

FAMILIES = {
    "sr-cmnist": {"ratio": "3:1", "scale": 1},
    "cmnist": {},
    "colored": {},
    "lined": {},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shared_evaluation_reproduces_every_evaluation_environment(family):
    sc = build_scenario(family, source="digits", **FAMILIES[family])
    shared = sc.shared_evaluation()
    assert shared is not None and list(shared.names) == list(sc.all_names)
    rendered = {v: shared.render(v) for v in shared.values()}
    rows = np.arange(len(shared.labels))
    for j, env in enumerate(sc.evaluation()):
        variant = shared.variants[j]
        images = np.stack([rendered[v] for v in shared.values()])
        rebuilt = images[np.searchsorted(shared.values(), variant), rows]
        assert env.name == shared.names[j]
        assert np.array_equal(rebuilt, env.images)
        assert np.array_equal(shared.labels, env.labels)
        assert np.array_equal(variant, env.meta["spurious"])


class OneByOne(Scenario):
    """The same scenario without its shared description: E_all is tested environment by
    environment, the reference for the shared path."""

    def __init__(self, inner: Scenario) -> None:
        self.inner = inner
        self.name, self.num_classes = inner.name, inner.num_classes
        self.input_shape, self.params = inner.input_shape, inner.params

    @property
    def given_names(self):
        return self.inner.given_names

    @property
    def all_names(self):
        return self.inner.all_names

    def given(self):
        return self.inner.given()

    def evaluation(self):
        return self.inner.evaluation()


@pytest.mark.parametrize(
    ("family", "algorithm", "precision"),
    [
        ("sr-cmnist", "ERM", "fp32"),
        ("sr-cmnist", "IRM", "bf16"),
        ("lined", "CORAL", "fp32"),  # ten line colors: ten variants
        ("sr-cmnist", "MTL", "fp32"),  # batch-dependent: tested one by one either way
    ],
)
def test_shared_and_one_by_one_testing_give_identical_errors(family, algorithm, precision):
    sc = build_scenario(family, source="digits", **FAMILIES[family])
    assert OneByOne(sc).shared_evaluation() is None
    kwargs = dict(seed=2, steps=20, batch_size=16, precision=precision)
    fast = run_unit(sc, algorithm, **kwargs)
    slow = run_unit(OneByOne(sc), algorithm, **kwargs)
    assert fast.rows == slow.rows
    full = [r for r in fast.rows if r.fold == FULL_FOLD]
    assert [r.environment for r in full] == list(sc.all_names)
    assert len({r.error for r in full}) > 1  # the environments really differ


def test_shared_errors_match_a_hand_count():
    """Each environment's error is the share of its rows whose image, in that environment's
    variant, is misclassified: counted here from per-variant predictions by a Python loop."""
    from oodeval.training import predict_labels, train_models

    sc = build_scenario("sr-cmnist", source="digits", ratio="3:1", scale=1)
    trained = train_models(sc, "ERM", seed=0, steps=10, batch_size=16)
    res = run_unit(sc, "ERM", seed=0, steps=10, batch_size=16)
    shared = sc.shared_evaluation()
    predicted = {
        v: predict_labels(trained.models[-1], shared.render(v), context=16)[0].tolist()
        for v in shared.values()
    }
    for name, variant in zip(shared.names, shared.variants, strict=True):
        pairs = enumerate(zip(variant, shared.labels, strict=True))
        wrong = sum(predicted[int(v)][i] != int(y) for i, (v, y) in pairs)
        assert res.all_errors()[name] == pytest.approx(wrong / len(variant), abs=1e-12)


def test_the_full_model_is_tested_once_per_variant_not_per_environment(monkeypatch):
    """The fast path really runs: no environment of E_all is built, two renders (two colors)."""
    sc = build_scenario("sr-cmnist", source="digits", ratio="3:1", scale=1)
    calls = {"evaluation": 0, "render": 0}
    render = sc._render_all

    def counting_render(value):
        calls["render"] += 1
        return render(value)

    def no_evaluation():
        calls["evaluation"] += 1
        return iter(())

    monkeypatch.setattr(sc, "_render_all", counting_render)
    monkeypatch.setattr(sc, "evaluation", no_evaluation)
    res = run_unit(sc, "ERM", seed=0, steps=2, batch_size=16)
    assert calls == {"evaluation": 0, "render": 2}
    assert len(res.all_errors()) == 101
    # batch-dependent algorithms go environment by environment
    calls.update(evaluation=0, render=0)
    run_unit(sc, "MTL", seed=0, steps=2, batch_size=16)
    assert calls == {"evaluation": 1, "render": 0}


@pytest.mark.parametrize(
    ("names", "variants", "match"),
    [
        ((), (), "one variant array per environment"),
        (("a", "b"), (np.zeros(3, np.int64),), "one variant array per environment"),
        (("a",), (np.zeros(2, np.int64),), "do not have one entry per image"),
    ],
)
def test_malformed_shared_evaluations_are_rejected(names, variants, match):
    from oodeval.environments.base import SharedEvaluation
    from oodeval.errors import OodevalError

    with pytest.raises(OodevalError, match=match):
        SharedEvaluation(names, np.zeros(3, np.int64), variants, lambda v: np.zeros((3, 1)))
