"""Hyperparameter declarations: a default and a random-search distribution, kept next to the code.

Every algorithm class lists its hyperparameters in a ``HPARAMS`` mapping of name -> `HParam`. The
defaults are DomainBed's defaults for small images; the distributions are DomainBed's random-search
space, written as samplers over a `numpy.random.Generator` so a seed fixes every draw. The
minibatch size is not among them: it is an argument of `oodeval.training.run_unit`.

A featurizer with hyperparameters of its own (the ResNets' dropout) declares them in
`FEATURIZER_HPARAMS`; the registry joins them to an algorithm's when it is given the model
(``default_hparams("ERM", model="resnet18")``).

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


#: DomainBed's ``resnet_dropout``: dropout on the ResNet features, 0 by default, random search
#: over {0, 0.1, 0.5}
RESNET_DROPOUT = HParam(0.0, choice(0.0, 0.1, 0.5), "dropout on the ResNet features (DomainBed)")
#: model name -> the hyperparameters of that featurizer (none for the small networks)
FEATURIZER_HPARAMS: dict[str, dict[str, HParam]] = {
    "resnet18": {"resnet_dropout": RESNET_DROPOUT},
    "resnet50": {"resnet_dropout": RESNET_DROPOUT},
}


def featurizer_hparams(model: str | None) -> dict[str, HParam]:
    """The hyperparameters of featurizer `model` (empty for None and for the small networks).

    >>> sorted(featurizer_hparams("resnet50")), featurizer_hparams("mlp")
    (['resnet_dropout'], {})
    """
    return dict(FEATURIZER_HPARAMS.get(model or "", {}))
