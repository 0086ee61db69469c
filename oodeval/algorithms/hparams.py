"""Hyperparameter declarations: a default and a random-search distribution, kept next to the code.

Every algorithm class lists its hyperparameters in a ``HPARAMS`` mapping of name -> `HParam`. The
defaults are DomainBed's defaults for small images; the distributions are DomainBed's random-search
space, written as samplers over a `numpy.random.Generator` so a seed fixes every draw. The
minibatch size is not among them: it is an argument of `oodeval.training.run_unit`, whose default
is `default_batch_size`.

The model is what tells small images from the others here, where DomainBed looks at the dataset
(``dataset in SMALL_IMAGES`` in its ``hparams_registry.py``). The registry, given the model
(``default_hparams("ERM", model="resnet18")``), joins to an algorithm's hyperparameters

- those of the featurizer itself (`FEATURIZER_HPARAMS`: the ResNets' ``resnet_dropout``), and
- DomainBed's values for its datasets of larger images in place of the algorithm's own
  (`MODEL_HPARAM_CHANGES`: `IMAGE_HPARAMS` for the ResNets, nothing for the small networks).

>>> import numpy as np
>>> draw = log_uniform(-4.5, -2.5)(np.random.default_rng(0))
>>> 10**-4.5 <= draw <= 10**-2.5
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from oodeval.paper_grid import IMAGE_BATCH_SIZE, PAPER_BATCH_SIZE

Sampler = Callable[[np.random.Generator], Any]


@dataclass(frozen=True)
class HParam:
    """One hyperparameter: its default value, its random-search sampler and a one-line meaning."""

    default: Any
    sample: Sampler
    doc: str = ""


def log_uniform(low: float, high: float) -> Sampler:
    """Sampler of ``10 ** U(low, high)`` (a float)."""
    return lambda rng: float(10.0 ** rng.uniform(low, high))


def log_uniform_int(low: float, high: float, *, base: float = 10.0) -> Sampler:
    """Sampler of ``int(base ** U(low, high))``."""
    return lambda rng: int(base ** rng.uniform(low, high))


def uniform(low: float, high: float) -> Sampler:
    """Sampler of ``U(low, high)`` (a float)."""
    return lambda rng: float(rng.uniform(low, high))


def choice(*options: Any) -> Sampler:
    """Sampler of one of `options`, each equally likely."""
    return lambda rng: options[int(rng.integers(len(options)))]


def fixed(value: Any) -> Sampler:
    """Sampler that always returns `value` (a hyperparameter that random search does not vary)."""
    return lambda rng: value


#: the models trained with DomainBed's protocol for its datasets of larger images (PACS, VLCS,
#: OfficeHome, TerraIncognita, DomainNet...): its ResNets; the others are small-image networks
IMAGE_MODELS = ("resnet18", "resnet50")
#: DomainBed's ``resnet_dropout``: dropout on the ResNet features, 0 by default, random search
#: over {0, 0.1, 0.5}
RESNET_DROPOUT = HParam(0.0, choice(0.0, 0.1, 0.5), "dropout on the ResNet features (DomainBed)")
#: model name -> the hyperparameters of that featurizer (none for the small networks)
FEATURIZER_HPARAMS: dict[str, dict[str, HParam]] = {
    model: {"resnet_dropout": RESNET_DROPOUT} for model in IMAGE_MODELS
}
#: DomainBed's values, for its datasets of larger images, of the hyperparameters whose default or
#: search space differ from the small images' (``hparams_registry.py``, the ``dataset not in
#: SMALL_IMAGES`` branches): ``lr`` 5e-5, 10**U(-5, -3.5) (small images: 1e-3, 10**U(-4.5,
#: -2.5)); ``weight_decay`` 0, 10**U(-6, -2) (small images: 0, never searched); the DANN / CDANN
#: discriminator's ``lr_d`` 5e-5, 10**U(-5, -3.5) (small images: 1e-3, 10**U(-4.5, -2.5)).
#: DomainBed's generator ``lr_g`` and ``weight_decay_g`` of DANN / CDANN take the same values as
#: ``lr`` and ``weight_decay``, which play them here (`oodeval.algorithms.adversarial`). Its other
#: such branch is ``batch_size``, not a hyperparameter here (`default_batch_size`).
IMAGE_HPARAMS: dict[str, HParam] = {
    "lr": HParam(5e-5, log_uniform(-5, -3.5), "Adam learning rate (DomainBed's, larger images)"),
    "weight_decay": HParam(
        0.0, log_uniform(-6, -2), "Adam L2 weight decay (DomainBed's, larger images)"
    ),
    "lr_d": HParam(
        5e-5, log_uniform(-5, -3.5), "discriminator learning rate (DomainBed's, larger images)"
    ),
}
#: model name -> the algorithm hyperparameters training on that model changes: each replaces the
#: algorithm's hyperparameter of that name where the algorithm declares one (`IMAGE_HPARAMS` for
#: the ResNets, none for the small networks)
MODEL_HPARAM_CHANGES: dict[str, dict[str, HParam]] = {
    model: IMAGE_HPARAMS for model in IMAGE_MODELS
}
#: DomainBed's default minibatch size (rows per environment and step) for its small images, the
#: trainer's for the small networks (`oodeval.paper_grid`)
SMALL_IMAGE_BATCH_SIZE = PAPER_BATCH_SIZE
#: DomainBed's default minibatch size for its larger images, the trainer's for the ResNets, is
#: `oodeval.paper_grid.IMAGE_BATCH_SIZE` (32), except for these algorithms (DomainBed fixes
#: ARM's at 8 there)
IMAGE_BATCH_SIZES = {"ARM": 8}


def featurizer_hparams(model: str | None) -> dict[str, HParam]:
    """The hyperparameters of featurizer `model` (empty for None and for the small networks).

    >>> sorted(featurizer_hparams("resnet50")), featurizer_hparams("mlp")
    (['resnet_dropout'], {})
    """
    return dict(FEATURIZER_HPARAMS.get(model or "", {}))


def model_hparam_changes(model: str | None) -> dict[str, HParam]:
    """The algorithm hyperparameters that training on `model` replaces (`MODEL_HPARAM_CHANGES`;
    empty for None and for the small networks).

    >>> sorted(model_hparam_changes("resnet18")), model_hparam_changes("mnist_cnn")
    (['lr', 'lr_d', 'weight_decay'], {})
    """
    return dict(MODEL_HPARAM_CHANGES.get(model or "", {}))


def default_batch_size(algorithm: str, model: str | None) -> int:
    """The minibatch size (rows per environment and step) a unit of `algorithm` on `model` trains
    with when none is given: DomainBed's default, 64 for the small networks (its small images),
    32 for the ResNets (its larger images), 8 for ARM on a ResNet.

    DomainBed also searches the batch size (``int(2**U(3, 9))`` for small images,
    ``int(2**U(3, 5.5))`` for larger ones, ARM's fixed); oodeval never does (a departure: it is a
    trainer option, ``[trainer] batch_size``, the same for every unit of a study).

    >>> default_batch_size("ERM", "mlp"), default_batch_size("ERM", "resnet50")
    (64, 32)
    >>> default_batch_size("ARM", "resnet18"), default_batch_size("ARM", "mnist_cnn")
    (8, 64)
    """
    if model not in IMAGE_MODELS:
        return SMALL_IMAGE_BATCH_SIZE
    return IMAGE_BATCH_SIZES.get(algorithm, IMAGE_BATCH_SIZE)
