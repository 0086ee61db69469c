"""DomainBed's protocol for its image datasets, on the ResNets: ImageNet normalisation of every
input after the augmentation (``imagenet_normalize``), and the default batch size of the model."""

from __future__ import annotations

import pytest
import torch

import oodeval.algorithms as alg
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.networks import ResNet, build_featurizer
from oodeval.errors import OodevalError
from oodeval.training import TrainerOptions, run_unit, train_models
from oodeval.training.loop import _new_runs
from tests.helpers.training import TinyScenario

torch.set_num_threads(1)

#: one step, no validation: the cheapest unit of a ResNet
FAST = {"steps": 1, "selection": "last", "holdout_fraction": 0.0}


@pytest.fixture(scope="module")
def scenario():
    from oodeval.environments.colored import build_colored

    return build_colored(source="digits", n_per_given=40, n_eval=20, given=[0.1, 0.2])


def test_imagenet_normalize_is_a_checked_boolean_on_by_default():
    assert TrainerOptions().imagenet_normalize is True
    with pytest.raises(OodevalError, match="^imagenet_normalize must be true or false, got 'no'$"):
        TrainerOptions(imagenet_normalize="no")
    with pytest.raises(OodevalError, match="imagenet_normalize must be true or false, got 1"):
        TrainerOptions.from_keywords({"imagenet_normalize": 1})


def test_the_option_reaches_every_resnet_and_changes_the_unit(scenario):
    # lr 0: both units keep the weights their seed drew, so that only the normalisation differs
    common = {"seed": 1, "model": "resnet18", "batch_size": 4, "hparams": {"lr": 0.0}, **FAST}
    on = train_models(scenario, "ERM", **common)
    off = train_models(scenario, "ERM", imagenet_normalize=False, **common)
    for trained, flag in ((on, True), (off, False)):
        assert all(m.featurizer.normalize is flag for m in trained.models)  # selected copies too
    x = torch.from_numpy(scenario.given()[0].images[:8])
    with torch.no_grad():
        assert not torch.allclose(on.models[-1].predict(x), off.models[-1].predict(x))
        plain = off.models[-1].featurizer
        torch.testing.assert_close(
            on.models[-1].featurizer(x), plain(on.models[-1].featurizer.normalized(x)),
            rtol=0, atol=0,
        )  # fmt: skip


def test_augmentation_comes_first_and_every_path_is_normalised(scenario, monkeypatch):
    import oodeval.training.loop as loop

    augmented, seen = [], []
    real_augment, real_normalized = loop.domainbed_augmented, ResNet.normalized

    def augment(images, generator, size):
        out = real_augment(images, generator, size)
        augmented.append(out)
        return out

    def normalized(self, x):
        seen.append((x.clone(), self.training))
        return real_normalized(self, x)

    monkeypatch.setattr(loop, "domainbed_augmented", augment)
    monkeypatch.setattr(ResNet, "normalized", normalized)
    run_unit(scenario, "ERM", seed=2, model="resnet18", batch_size=4, augment=True, **FAST)
    (step,) = augmented  # one step: the N = 2 environments' minibatches of 4, augmented
    trained_on = [x for x, training in seen if training]
    # the full model trains on the step's shared minibatches: the augmented images themselves
    assert any(x.shape == step.shape and torch.equal(x, step) for x in trained_on)
    assert all(float(x.min()) >= 0 and float(x.max()) <= 1 for x, _ in seen)  # never twice
    assert any(not training for _, training in seen)  # testing goes through it too


def test_an_algorithm_whose_resnet_ignores_the_option_is_refused():
    class Stubborn(ERM):
        def build_parts(self) -> None:
            super().build_parts()
            self.featurizer = build_featurizer(
                self.model, self.num_models, self.input_shape, normalize=True
            )

    hp = alg.resolve_hparams("ERM", None, model="resnet18")
    with pytest.raises(OodevalError, match="holds a ResNet with normalize=True, the trainer's "
                                           "imagenet_normalize is False"):  # fmt: skip
        _new_runs(Stubborn, hp, "resnet18", (3, 8, 8), 2, 2, imagenet_normalize=False)
    assert _new_runs(Stubborn, hp, "resnet18", (3, 8, 8), 2, 2)  # it agrees with the default
    runs = _new_runs(ERM, hp, "resnet18", (3, 8, 8), 2, 2, imagenet_normalize=False)
    assert [run.algorithm.featurizer.normalize for run in runs] == [False, False]


@pytest.mark.parametrize(("algorithm", "model", "want"), [
    ("ERM", "resnet18", 32), ("ARM", "resnet18", 8), ("IRM", "resnet50", 32), ("ERM", "mlp", 64),
    ("ARM", "cnn", 64),
])  # fmt: skip
def test_the_default_batch_size_is_domainbeds_for_the_model(algorithm, model, want, monkeypatch):
    import oodeval.training.loop as loop

    sizes = []
    real = loop.UnitData.minibatches

    def minibatches(self, generator, batch_size):
        sizes.append(batch_size)
        return real(self, generator, batch_size)

    monkeypatch.setattr(loop.UnitData, "minibatches", minibatches)
    if model.startswith("resnet"):
        from oodeval.environments.colored import build_colored

        data = build_colored(source="digits", n_per_given=40, n_eval=20, given=[0.1, 0.2])
        steps = 1
    else:
        data, steps = TinyScenario(), 2
    trained = train_models(data, algorithm, seed=0, model=model, **{**FAST, "steps": steps})
    assert trained.batch_size == want and sizes == [want] * steps
    assert trained.hparams["lr"] == (5e-5 if model.startswith("resnet") else 1e-3)
    given = train_models(data, algorithm, seed=0, model=model, batch_size=3, **FAST)
    assert given.batch_size == 3  # a batch size given is the one used
