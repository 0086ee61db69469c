"""What training a unit gives: its test errors (`UnitResult`), checkpoint records, divergence.

Torch-free records: `ResultRow` (a model's test error on one environment), `CheckpointRow` (one
checkpoint of a leave-one-out model) and `UnitResult` (a unit's rows, hyperparameters and
timings), plus `TrainingDiverged`, the error of a non-finite loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures.domain import MEASURES, domain_measures, ideal, undefined_measures
from oodeval.training.options import NOT_PRETRAINED

#: fold name of the model trained on all given environments
FULL_FOLD = "all"


class TrainingDiverged(OodevalError):
    """A training loss became NaN or infinite; names the algorithm, the fold and the step."""

    def __init__(self, algorithm: str, fold: str, step: int, value: float = math.nan) -> None:
        self.algorithm, self.fold, self.step, self.value = algorithm, fold, step, value
        super().__init__(
            f"{algorithm} diverged: loss {value} in fold {fold!r} at step {step}; "
            "lower the learning rate or the penalty weight"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.algorithm, self.fold, self.step, self.value))


@dataclass(frozen=True)
class ResultRow:
    """Test error of one model on one environment.

    `fold` is the held-out given environment for a LOO model (tested on that environment only) or
    ``"all"`` for the model trained on every given environment (tested on each of E_all).
    """

    fold: str
    environment: str
    error: float
    count: int


@dataclass(frozen=True)
class CheckpointRow:
    """One checkpoint of the LOO model held out from `fold` (accuracies as fractions in [0, 1]).

    `train_val_acc` is the mean validation accuracy over the model's training environments (what
    training-domain validation maximises); `test_acc` its accuracy on the "in" part of the
    held-out environment and `oracle_val_acc` on its "out" part (`holdout_fraction` of its rows,
    the same seeded split as `Environment.split(holdout_fraction, seed)`), the test-domain
    validation split of an oracle.
    """

    fold: str
    step: int
    train_val_acc: float
    test_acc: float
    oracle_val_acc: float


@dataclass
class UnitResult:
    """All test errors of one unit, with its hyperparameters, timings (seconds) and weights."""

    algorithm: str
    seed: int
    scenario_name: str
    rows: list[ResultRow]
    hparams: dict
    steps: int
    timings: dict[str, float] = field(default_factory=dict)
    #: every checkpoint of every LOO model (empty with ``selection="last"``), by fold then step
    checkpoints: list[CheckpointRow] = field(default_factory=list)
    #: the SHA-256 of the pretrained weights loaded into the models, or ``"not pretrained"``
    pretrained: str = NOT_PRETRAINED

    def loo_errors(self) -> dict[str, float]:
        """LOO test errors {e_n: R_{e_n}(f^{E_given \\ e_n})}, in given-environment order."""
        return {r.fold: r.error for r in self.rows if r.fold != FULL_FOLD}

    def all_errors(self) -> dict[str, float]:
        """Errors of the full model on every environment of E_all, in E_all order."""
        return {r.environment: r.error for r in self.rows if r.fold == FULL_FOLD}

    def measures(self) -> dict[str, float]:
        """The unit's domain measures from the LOO errors, plus ``"ideal"`` (Eq. 4) from E_all.

        Measures whose formula needs more environments than were given (worst+gap and gap-only
        need 3, Eq. 6) are left out, as the measure registry declares.

        >>> rows = [ResultRow("a", "a", 0.1, 10), ResultRow("b", "b", 0.3, 10),
        ...         ResultRow("c", "c", 0.2, 10), ResultRow("all", "x", 0.4, 10)]
        >>> m = UnitResult("ERM", 0, "s", rows, {}, 1).measures()
        >>> round(m["worst_plus_gap"], 6), m["ideal"]
        (0.5, 0.4)
        """
        loo = np.array(list(self.loo_errors().values()))
        undefined = undefined_measures(list(MEASURES), len(loo))
        names = [k for k in MEASURES if k not in undefined]
        out = {k: float(v) for k, v in domain_measures(loo, names).items()}
        out["ideal"] = float(ideal(np.array(list(self.all_errors().values()))))
        return out
