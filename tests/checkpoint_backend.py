"""A study backend for the store tests: the synthetic backend plus per-checkpoint records.

Each leave-one-out model gets three checkpoints (steps 1-3) whose accuracies derive from the
unit's simulated LOO error, so the store's ``checkpoints`` table has rows to damage and
`oodeval variance DIR` has something to compute. Deterministic, like the synthetic backend.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from oodeval.study.synthetic import (  # noqa: F401  (the backend interface, re-exported)
    available,
    build_scenario,
    default_hparams,
    sample_hparams,
)
from oodeval.study.synthetic import run_unit as synthetic_unit


class Checkpoint(NamedTuple):
    fold: str
    step: int
    train_val_acc: float
    test_acc: float
    oracle_val_acc: float


def run_unit(scenario: Any, algorithm: str, **options: Any) -> Any:
    """The synthetic unit, with ``checkpoints`` (3 per LOO fold) attached."""
    result = synthetic_unit(scenario, algorithm, **options)
    checkpoints = []
    for row in result.rows:
        if row.fold == "all":
            continue
        accuracy = 1.0 - row.error
        for step in (1, 2, 3):
            checkpoints.append(
                Checkpoint(row.fold, step, 0.5 + step / 10, accuracy, accuracy - 0.01 * step)
            )
    result.checkpoints = checkpoints
    return result
