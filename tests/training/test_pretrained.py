"""The trainer's ``pretrained`` option: a torchvision state_dict file loaded into every ResNet of
a unit's models before training, identified by its SHA-256 in the unit's result."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

import oodeval.algorithms as alg
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.networks import ResNet, ResNet18
from oodeval.errors import OodevalError
from oodeval.paper_grid import PAPER_ALGORITHMS
from oodeval.training import (
    TrainerOptions,
    check_pretrained,
    pretrained_model_problem,
    run_unit,
    train_models,
)
from oodeval.training.data import TrainingRun
from oodeval.training.loop import _new_runs, load_pretrained
from oodeval.training.options import NOT_PRETRAINED
from tests.helpers.training import counted_file_reads

torch.set_num_threads(1)

#: 1-2 steps, batch 4, no validation: the cheapest unit of a ResNet
FAST = {"steps": 2, "batch_size": 4, "selection": "last", "holdout_fraction": 0.0}


def write_weights(path: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """A torchvision-named resnet18 state_dict (model 0 of a fresh single `ResNet18`), saved."""
    torch.manual_seed(seed)
    net = ResNet18(1, (3, 8, 8))
    state = {key: value[0].clone() for key, value in net.state_dict().items()}
    torch.save(state, path)
    return state


@pytest.fixture(scope="module")
def scenario():
    from oodeval.environments.colored import build_colored

    return build_colored(source="digits", n_per_given=40, n_eval=20, given=[0.1, 0.2])


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "resnet18.pth"
    return path, write_weights(path)


def test_weights_are_in_every_model_before_training_and_the_digest_is_the_files(scenario, weights):
    path, state = weights
    # lr 0: Adam leaves every parameter where loading put it; the BatchNorms are frozen
    trained = train_models(
        scenario, "ERM", seed=3, model="resnet18", hparams={"lr": 0.0}, pretrained=str(path),
        **FAST,
    )  # fmt: skip
    assert trained.pretrained == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(trained.models) == 3  # two leave-one-out models and the full one
    for model in trained.models:
        held = model.featurizer.state_dict()
        for key, value in state.items():
            assert torch.equal(held[key][0], value), key


def test_pretrained_changes_the_unit_and_is_recorded(scenario, weights):
    path, _ = weights
    plain = train_models(scenario, "ERM", seed=3, model="resnet18", **FAST)
    loaded = train_models(scenario, "ERM", seed=3, model="resnet18", pretrained=path, **FAST)
    x = torch.from_numpy(scenario.given()[0].images[:8])
    with torch.no_grad():
        assert not torch.allclose(plain.models[-1].predict(x), loaded.models[-1].predict(x))
    assert plain.pretrained == NOT_PRETRAINED
    result = run_unit(scenario, "ERM", seed=3, model="resnet18", pretrained=str(path), **FAST)
    assert result.pretrained == hashlib.sha256(path.read_bytes()).hexdigest()
    assert run_unit(scenario, "ERM", seed=3, model="resnet18", **FAST).pretrained == (
        "not pretrained"
    )


@pytest.mark.parametrize("name", PAPER_ALGORITHMS)  # the 14 built in (tests register others)
def test_every_algorithm_loads_the_weights_into_each_resnet_it_holds(name, weights):
    path, state = weights
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    hp = alg.resolve_hparams(name, None, model="resnet18")
    runs = _new_runs(alg.get_algorithm(name), hp, "resnet18", (3, 8, 8), 2, 2)
    assert load_pretrained(runs, str(path), name) == digest
    for run in runs:
        nets = [m for m in run.algorithm.modules() if isinstance(m, ResNet)]
        assert nets and all(net.pretrained == digest for net in nets)
        for net in nets:  # every stacked model; ARM's first conv has a context channel more
            held = net.state_dict()
            for key in ("layer1.0.conv1.weight", "layer4.1.bn2.running_var"):
                assert torch.equal(held[key], state[key].expand_as(held[key]))
            rgb = held["conv1.weight"][:, :, :3]
            assert torch.equal(rgb, state["conv1.weight"].expand_as(rgb))


def test_an_algorithm_without_a_resnet_is_refused(weights):
    path, _ = weights
    mask = torch.ones(1, 2, dtype=torch.bool)
    run = TrainingRun(ERM((3, 8, 8), 2, mask, alg.default_hparams("ERM")), mask, [0])
    with pytest.raises(OodevalError, match=r"^algorithm ERM holds no ResNet .*or drop pretrained$"):
        load_pretrained([run], str(path), "ERM")


def test_a_model_other_than_a_resnet_is_refused_before_data_is_prepared(monkeypatch, weights):
    import oodeval.training.loop as loop

    def never(*_args, **_kwargs):
        raise AssertionError("data prepared")

    monkeypatch.setattr(loop, "prepare_data", never)
    from tests.helpers.training import TinyScenario

    want = r"^pretrained weights are for model resnet18 or resnet50, not 'mlp'; .*drop pretrained$"
    with pytest.raises(OodevalError, match=want):
        run_unit(TinyScenario(), "ERM", seed=0, steps=1, pretrained=str(weights[0]))
    assert pretrained_model_problem("resnet50") is None
    with pytest.raises(OodevalError, match="pretrained must be the path of a weights file"):
        TrainerOptions(pretrained="")
    assert TrainerOptions(pretrained=weights[0]).pretrained == str(weights[0])  # a Path


def test_check_pretrained_refuses_files_the_model_does_not_load(tmp_path, weights):
    path, state = weights
    check_pretrained(str(path), "resnet18")
    with pytest.raises(
        OodevalError,
        match=r"for resnet50: key 'layer1\.0\.conv1\.weight' has shape \(64, 64, 3, 3\)",
    ):
        check_pretrained(str(path), "resnet50")
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(OodevalError, match=r"^pretrained weights .*bad\.pth: torch\.load"):
        check_pretrained(str(bad), "resnet18")
    with pytest.raises(OodevalError, match="no such file"):
        check_pretrained(str(tmp_path / "gone.pth"), "resnet18")
    with pytest.raises(OodevalError, match="not 'cnn'"):
        check_pretrained(str(path), "cnn")
    before = torch.random.get_rng_state()
    check_pretrained(str(path), "resnet18")
    assert torch.equal(before, torch.random.get_rng_state())  # nothing drawn


def test_a_unit_reads_the_weights_file_once_for_every_resnet(scenario, weights, monkeypatch):
    from oodeval import _digest

    path, state = weights
    reads = counted_file_reads(monkeypatch)
    # ARM's units hold 2 ResNets (the LOO stack's, the full model's); hash and parse: one read
    result = run_unit(scenario, "ARM", seed=0, model="resnet18", pretrained=str(path), **FAST)
    assert reads == [str(path)]
    assert result.pretrained == hashlib.sha256(path.read_bytes()).hexdigest()
    reads.clear()
    check_pretrained(str(path), "resnet18")  # the check before a study runs: one read too
    assert reads == [str(path)]
    reads.clear()
    read = _digest.read_file(path)  # a path that carries its bytes is never read again
    trained = train_models(scenario, "ERM", seed=0, model="resnet18", pretrained=read,
                           hparams={"lr": 0.0}, **FAST)  # fmt: skip
    assert reads == [str(path)] and trained.pretrained == read.sha256
    for model in trained.models:  # lr 0: the weights are where loading them put them
        held = model.featurizer.state_dict()
        assert all(torch.equal(held[key][0], value) for key, value in state.items())
