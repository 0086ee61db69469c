"""Domain-generalisation algorithms (the 14 DomainBed algorithms of the worst+gap study).

Each algorithm is a small class with ``update(x, y) -> dict of per-model losses`` and
``predict(x) -> logits`` (see `oodeval.algorithms.base`), declaring its hyperparameters with
defaults and random-search distributions next to its code; `register_algorithm` adds user classes.

>>> from oodeval.algorithms import available, default_hparams
>>> len(available()) >= 14
True
>>> default_hparams("GroupDRO")
{'lr': 0.001, 'weight_decay': 0.0, 'groupdro_eta': 0.01}
"""

from oodeval.algorithms import (  # noqa: F401  (importing a module registers its algorithms)
    adversarial,
    alignment,
    arm,
    erm,
    groupdro,
    invariance,
    mixup,
    mldg,
    mtl,
    rsc,
    sagnet,
)
from oodeval.algorithms.base import Algorithm, DomainBedDefectWarning
from oodeval.algorithms.hparams import HParam
from oodeval.algorithms.registry import (
    available,
    default_hparams,
    get_algorithm,
    register_algorithm,
    resolve_hparams,
    sample_hparams,
)
from oodeval.paper_grid import PAPER_ALGORITHMS

__all__ = [
    "PAPER_ALGORITHMS",
    "Algorithm",
    "DomainBedDefectWarning",
    "HParam",
    "available",
    "default_hparams",
    "get_algorithm",
    "register_algorithm",
    "resolve_hparams",
    "sample_hparams",
]
