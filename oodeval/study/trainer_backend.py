"""The default study backend: real scenarios, the registered algorithms and the oodeval trainer.

It defines the functions of `oodeval.study.config.backend.TrainerBackend` (``build_scenario``,
``available``, ``default_hparams``, ``sample_hparams``, ``run_unit``), ``available_models``
and ``check_pretrained``.
Every study config names its backend by dotted path, and this module's,
``oodeval.study.trainer_backend`` (`oodeval.study.config.keys.DEFAULT_BACKEND`), is stored with
every study that uses it, so the module keeps its name and place. It forwards to
`oodeval.environments`, `oodeval.algorithms` and `oodeval.training`, importing them (and torch)
only when first used, so a config is checked without torch, and keeps each image source loaded
once per process.

>>> from oodeval.study.config.backend import BACKEND_FUNCTIONS
>>> import oodeval.study.trainer_backend as backend
>>> all(callable(getattr(backend, name)) for name in BACKEND_FUNCTIONS)
True
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=4)
def _source(spec: str) -> Any:
    from oodeval.environments import load_source

    return load_source(spec)


def build_scenario(family: str, *, source: str, seed: int = 0, **params: Any) -> Any:
    """`oodeval.environments.build_scenario` with the image source loaded once per process."""
    from oodeval.environments import build_scenario as _build

    return _build(family, source=_source(source), seed=seed, **params)


def available() -> list[str]:
    """Names of the registered algorithms (`oodeval.algorithms.available`)."""
    from oodeval.algorithms import available as _available

    return list(_available())


def available_models() -> list[str]:
    """Names of the networks `run_unit` trains (`oodeval.algorithms.networks.MODELS`)."""
    from oodeval.algorithms.networks import MODELS

    return list(MODELS)


def check_pretrained(path: str, model: str) -> None:
    """Refuse weights file `path` unless `model` loads it (`oodeval.training.check_pretrained`)."""
    from oodeval.training import check_pretrained as _check

    _check(path, model)


def default_hparams(name: str, *, model: str | None = None) -> dict:
    """`oodeval.algorithms.default_hparams` for the config's `model` (the ResNets train with
    DomainBed's larger-image values)."""
    from oodeval.algorithms import default_hparams as _default

    return dict(_default(name, model=model))


def sample_hparams(name: str, seed: int, *, model: str | None = None) -> dict:
    """`oodeval.algorithms.sample_hparams` for the config's `model`."""
    from oodeval.algorithms import sample_hparams as _sample

    return dict(_sample(name, seed, model=model))


def run_unit(scenario: Any, algorithm: str, **kwargs: Any) -> Any:
    """The backend's entry point (`TrainerBackend.run_unit`): one unit trained by
    `oodeval.training.run_unit` (N leave-one-out models plus the model on all of E_given)."""
    from oodeval.training import run_unit as _run

    return _run(scenario, algorithm, **kwargs)
