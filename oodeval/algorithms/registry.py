"""The algorithm registry: names -> classes, filled by the `register_algorithm` decorator (an
`oodeval._registry.Registry`: a name another class holds is refused, the same class defined again
replaces itself).

>>> import oodeval.algorithms as alg
>>> "ERM" in alg.available()
True
>>> alg.default_hparams("IRM")["irm_lambda"]
100.0
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np

from oodeval._registry import Registry
from oodeval.algorithms.hparams import HParam, featurizer_hparams, model_hparam_changes
from oodeval.errors import OodevalError, listing

if TYPE_CHECKING:
    from oodeval.algorithms.base import Algorithm

_REGISTRY: Registry[type[Algorithm]] = Registry("algorithm")
#: what seeds, with the seed and the algorithm's name, the random search of the hyperparameters a
#: model changes (`sample_hparams`)
MODEL_STREAM = b"model hyperparameters"

T = TypeVar("T", bound=type)


@overload
def register_algorithm(cls_or_name: T, /) -> T: ...
@overload
def register_algorithm(cls_or_name: str | None = None, /) -> Callable[[T], T]: ...
def register_algorithm(cls_or_name: Any = None, /) -> Any:
    """Class decorator adding an algorithm to the registry under its class name (or a given name).

    Use ``@register_algorithm`` or ``@register_algorithm("MyName")`` on a subclass of
    `oodeval.algorithms.Algorithm`. A name another class holds is refused in one line; the same
    class again (its module run again after an edit, a notebook cell run again) replaces itself.

    >>> from oodeval.algorithms.erm import ERM
    >>> @register_algorithm
    ... class DocERM(ERM): ...
    >>> @register_algorithm("DocERM2")
    ... class DocERMNamed(ERM): ...
    >>> get_algorithm("DocERM") is DocERM, DocERMNamed.name
    (True, 'DocERM2')
    >>> _REGISTRY.remove("DocERM"), _REGISTRY.remove("DocERM2")
    (None, None)
    """

    def add(cls: T, name: str | None = None) -> T:
        from oodeval.algorithms.base import Algorithm

        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise OodevalError(
                f"register_algorithm expects a subclass of oodeval.algorithms.Algorithm, "
                f"got {cls!r}"
            )
        key = name or cls.__name__
        _REGISTRY.add(key, cls)
        cls.name = key
        return cls

    if isinstance(cls_or_name, str):
        return lambda cls: add(cls, cls_or_name)
    if cls_or_name is None:
        return add
    return add(cls_or_name)


def available() -> list[str]:
    """Names of the registered algorithms, in registration order."""
    return list(_REGISTRY)


def get_algorithm(name: str) -> type[Algorithm]:
    """The registered class called `name`; OodevalError listing the choices when unknown."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OodevalError(
            f"unknown algorithm {name!r}; choose one of {', '.join(_REGISTRY)} "
            "or register your own with @register_algorithm"
        ) from None


def hparam_space(name: str, model: str | None = None) -> dict[str, HParam]:
    """Algorithm `name`'s hyperparameters for `model` (when given): those the model changes
    replaced (`oodeval.algorithms.hparams.model_hparam_changes`: DomainBed's larger-image values
    for the ResNets), then the featurizer's own (``resnet_dropout``).

    >>> list(hparam_space("ERM", model="resnet18"))
    ['lr', 'weight_decay', 'resnet_dropout']
    >>> hparam_space("ERM", model="resnet18")["lr"].default, hparam_space("ERM")["lr"].default
    (5e-05, 0.001)
    """
    space = get_algorithm(name).hparam_space()
    space.update({k: hp for k, hp in model_hparam_changes(model).items() if k in space})
    for key, hp in featurizer_hparams(model).items():
        space.setdefault(key, hp)
    return space


def default_hparams(name: str, *, model: str | None = None) -> dict[str, Any]:
    """The default hyperparameters of algorithm `name` (DomainBed's small-image defaults), for
    `model` when given: its featurizer's own (``resnet_dropout`` for the ResNets) added, and for
    the ResNets DomainBed's larger-image defaults of ``lr`` (5e-5), ``weight_decay`` (0) and
    DANN / CDANN's ``lr_d`` (5e-5) (`oodeval.algorithms.hparams.IMAGE_HPARAMS`).

    >>> default_hparams("DANN", model="resnet50")["lr_d"], default_hparams("DANN")["lr_d"]
    (5e-05, 0.001)
    """
    return {key: hp.default for key, hp in hparam_space(name, model).items()}


def sample_hparams(name: str, seed: int, *, model: str | None = None) -> dict[str, Any]:
    """One draw from algorithm `name`'s random-search distributions; same seed -> same draw.

    The algorithm's own hyperparameters are drawn in sorted order from one stream, seeded by
    `seed` and the name; with `model`, that featurizer's hyperparameters are drawn after them from
    the same stream, and those the model changes (DomainBed's larger-image ``lr`` 10**U(-5,
    -3.5), ``weight_decay`` 10**U(-6, -2), ``lr_d`` 10**U(-5, -3.5) for the ResNets) are drawn
    from a stream of their own, seeded by `seed`, the name and `MODEL_STREAM`, in place of the
    small-image draws. So a model changes no draw but those of the hyperparameters it replaces:
    the others are the same with or without a model. (DomainBed draws each hyperparameter from a
    generator of its own, seeded by the seed and its name; the values here differ from its.)

    >>> a, b = sample_hparams("IRM", 3, model="resnet18"), sample_hparams("IRM", 3)
    >>> a["irm_lambda"] == b["irm_lambda"], 10**-5 <= a["lr"] <= 10**-3.5
    (True, True)
    """
    # crc32, not hash(): Python salts str hashes per process
    rng = np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))])
    space = get_algorithm(name).hparam_space()
    draws = {key: space[key].sample(rng) for key in sorted(space)}
    extra = featurizer_hparams(model)
    draws.update({key: extra[key].sample(rng) for key in sorted(extra) if key not in draws})
    changed = {k: hp for k, hp in model_hparam_changes(model).items() if k in space}
    if changed:
        stream = [int(seed), zlib.crc32(name.encode("utf-8")), zlib.crc32(MODEL_STREAM)]
        own = np.random.default_rng(stream)
        draws.update({key: changed[key].sample(own) for key in sorted(changed)})
    return draws


def resolve_hparams(
    name: str, overrides: dict[str, Any] | None, *, model: str | None = None
) -> dict[str, Any]:
    """Defaults of `name` (and of featurizer `model`) updated with `overrides`; unknown keys
    raise OodevalError."""
    hparams = default_hparams(name, model=model)
    unknown = sorted(set(overrides or {}) - set(hparams))
    if unknown:
        raise OodevalError(
            f"unknown hyperparameter(s) {listing(unknown)} for {name}; "
            f"known: {', '.join(sorted(hparams))}"
        )
    hparams.update(overrides or {})
    return hparams
