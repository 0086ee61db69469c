"""DomainBed's protocol for its image datasets, on the ResNets: the default batch size of the
model."""

from __future__ import annotations

import pytest
import torch

from oodeval.training import train_models
from tests.helpers.training import TinyScenario

torch.set_num_threads(1)

#: one step, no validation: the cheapest unit of a ResNet
FAST = {"steps": 1, "selection": "last", "holdout_fraction": 0.0}


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
