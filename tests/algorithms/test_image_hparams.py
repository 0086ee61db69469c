"""DomainBed's hyperparameters for its larger images, tied to the ResNets.

DomainBed's ``hparams_registry.py`` chooses by dataset (``dataset in SMALL_IMAGES``) where oodeval
chooses by model: on ``resnet18`` / ``resnet50`` every algorithm gets the values of DomainBed's
other branch. The tables below are written by hand from that file; nothing else may change, and
the small networks keep their hyperparameters exactly.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import oodeval.algorithms as alg
from oodeval.algorithms.hparams import default_batch_size
from oodeval.algorithms.registry import MODEL_STREAM
from oodeval.study.config import StudyConfig, import_backend, resolved_hparams, validate_config
from oodeval.study.config.keys import ScenarioSpec

RESNETS = ("resnet18", "resnet50")
SMALL = (None, "mlp", "cnn", "mnist_cnn")
#: (default, log10 low, log10 high) of DomainBed's branch for larger images, by hyperparameter:
#: ``lr`` 5e-5 with 10**U(-5, -3.5); ``weight_decay`` 0 with 10**U(-6, -2); DANN / CDANN's
#: ``lr_d`` 5e-5 with 10**U(-5, -3.5) (their ``lr_g`` and ``weight_decay_g`` are oodeval's ``lr``
#: and ``weight_decay``, the same values)
IMAGE = {"lr": (5e-5, -5.0, -3.5), "weight_decay": (0.0, -6.0, -2.0), "lr_d": (5e-5, -5.0, -3.5)}
#: the hyperparameters whose DomainBed values differ for larger images, by algorithm
DIFFERING = {
    name: ("lr", "weight_decay", "lr_d") if name in ("DANN", "CDANN") else ("lr", "weight_decay")
    for name in alg.PAPER_ALGORITHMS
}
#: the same branches for small images: lr 1e-3 with 10**U(-4.5, -2.5), weight_decay 0 never drawn
SMALL_VALUES = {"lr": 1e-3, "weight_decay": 0.0, "lr_d": 1e-3}
SEEDS = range(200)


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
@pytest.mark.parametrize("model", RESNETS)
def test_resnet_defaults_are_domainbeds_larger_image_defaults(name, model):
    small = alg.default_hparams(name)
    got = alg.default_hparams(name, model=model)
    want = {**small, **{key: IMAGE[key][0] for key in DIFFERING[name]}, "resnet_dropout": 0.0}
    assert got == want
    assert list(got) == list(small) + ["resnet_dropout"]  # the algorithm's order, then the net's
    assert {key: small[key] for key in DIFFERING[name]} == {
        key: SMALL_VALUES[key] for key in DIFFERING[name]
    }  # these are the small-image values the ResNets replace
    assert alg.resolve_hparams(name, {"lr": 1e-4}, model=model) == {**want, "lr": 1e-4}


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
def test_resnet_draws_cover_domainbeds_larger_image_ranges(name):
    draws = [alg.sample_hparams(name, seed, model="resnet50") for seed in SEEDS]
    for key in DIFFERING[name]:
        _, low, high = IMAGE[key]
        logs = np.log10([d[key] for d in draws])
        assert low <= logs.min() and logs.max() <= high, key
        # log-uniform on [low, high]: mean (low + high) / 2, sd (high - low) / sqrt(12); the mean of
        # 200 draws is within 5 standard errors, and the draws reach both ends of the range
        se = (high - low) / np.sqrt(12) / np.sqrt(len(draws))
        assert abs(logs.mean() - (low + high) / 2) < 5 * se, key
        assert logs.min() < low + 0.05 * (high - low) and logs.max() > high - 0.05 * (high - low)
    small = [alg.sample_hparams(name, seed) for seed in SEEDS]
    for with_model, alone in zip(draws, small, strict=True):
        assert with_model.pop("resnet_dropout") in (0.0, 0.1, 0.5)
        for key in DIFFERING[name]:
            del with_model[key], alone[key]
        assert with_model == alone  # a model changes only the draws of what it replaces


def test_resnet_draws_are_reproducible_from_their_own_stream():
    for seed in (0, 1, 7):
        rng = np.random.default_rng([seed, zlib.crc32(b"DANN"), zlib.crc32(MODEL_STREAM)])
        want = {  # the replaced hyperparameters in sorted order: lr, lr_d, weight_decay
            "lr": 10 ** rng.uniform(-5, -3.5),
            "lr_d": 10 ** rng.uniform(-5, -3.5),
            "weight_decay": 10 ** rng.uniform(-6, -2),
        }
        for model in RESNETS:  # both ResNets: one protocol, the same draws
            got = alg.sample_hparams("DANN", seed, model=model)
            assert {key: got[key] for key in want} == want
            assert alg.sample_hparams("DANN", seed, model=model) == got
        assert alg.sample_hparams("DANN", seed + 1, model="resnet18")["lr"] != want["lr"]


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
def test_small_networks_keep_their_hyperparameters_exactly(name):
    for model in SMALL:
        assert alg.default_hparams(name, model=model) == alg.default_hparams(name)
        for seed in range(5):
            assert alg.sample_hparams(name, seed, model=model) == alg.sample_hparams(name, seed)
    hp = alg.sample_hparams(name, 0)
    assert 10**-4.5 <= hp["lr"] <= 10**-2.5 and hp["weight_decay"] == 0.0


def test_small_network_draws_are_the_ones_before_the_resnet_branch():
    # values drawn before the larger-image hyperparameters existed: they must never move
    assert alg.sample_hparams("DANN", 0) == {
        "beta1": 0.0,
        "d_steps_per_g_step": 5,
        "grad_penalty": 0.010583849488995514,
        "lambda": 0.28013335652195387,
        "lr": 0.0006753080408082613,
        "lr_d": 0.00021923794241068088,
        "mlp_depth": 3,
        "mlp_dropout": 0.5,
        "mlp_width": 174,
        "weight_decay": 0.0,
        "weight_decay_d": 0.0029790955547504758,
    }


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
def test_the_default_batch_size_is_domainbeds_for_the_model(name):
    for model in RESNETS:  # DomainBed: 32 for larger images, ARM's fixed at 8
        assert default_batch_size(name, model) == (8 if name == "ARM" else 32)
    for model in SMALL:
        assert default_batch_size(name, model) == 64


def resnet_study(**changes) -> StudyConfig:
    base = {
        "name": "images",
        "scenarios": (ScenarioSpec("colored", {"given": [0.1, 0.2]}),),
        "algorithms": ("ERM", "DANN"),
        "seeds": (0, 1),
        "steps": 1,
        "model": "resnet18",
        "source": "digits",
        "measures": ("average",),
    }
    return StudyConfig(**{**base, **changes})


def test_a_study_of_resnets_resolves_the_larger_image_hyperparameters():
    config = resnet_study()
    backend = import_backend(config)
    got = resolved_hparams(config, backend, "DANN", 0)
    assert got == alg.default_hparams("DANN", model="resnet18")
    assert (got["lr"], got["lr_d"], got["resnet_dropout"]) == (5e-5, 5e-5, 0.0)
    drawn = resolved_hparams(config.replace(hparams_mode="random"), backend, "DANN", 1)
    assert drawn == alg.sample_hparams("DANN", 1, model="resnet18")
    # the featurizer's own hyperparameters are the study's to override, too
    tuned = config.replace(hparams={"ERM": {"resnet_dropout": 0.1}})
    validated = validate_config(tuned)
    assert validated.hparams[("ERM", 0)] == {**alg.default_hparams("ERM", model="resnet18"),
                                             "resnet_dropout": 0.1}  # fmt: skip
    small = resnet_study(model="mnist_cnn")
    assert resolved_hparams(small, backend, "DANN", 0) == alg.default_hparams("DANN")


def test_a_backend_whose_hyperparameters_ignore_the_model_is_asked_without_it():
    config = resnet_study(backend="oodeval.study.synthetic", model="cnn", algorithms=("ERM",))
    backend = import_backend(config)
    assert resolved_hparams(config, backend, "ERM", 0) == backend.default_hparams("ERM")
