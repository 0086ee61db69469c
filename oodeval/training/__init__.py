"""The leave-one-environment-out training engine: `run_unit` trains and tests one unit.

A unit is (algorithm, seed, scenario): N leave-one-out models plus one model on all given
environments, selected by training-domain validation and tested on the held-out environment /
on every environment of E_all (see `oodeval.training.loo`). Typical use::

    from oodeval.environments import build_scenario
    from oodeval.algorithms import sample_hparams
    from oodeval.training import run_unit

    sc = build_scenario("sr-cmnist", source="mnist:/data/mnist", ratio="3:1", scale=1)
    res = run_unit(sc, "IRM", seed=0, steps=5000)            # DomainBed defaults
    res = run_unit(sc, "IRM", seed=0, steps=5000, hparams=sample_hparams("IRM", 7))  # random
    res.loo_errors(), res.all_errors(), res.measures()       # worst+gap, average, ideal, ...
    res = run_unit(sc, "IRM", seed=0, steps=5000, precision="bf16")  # mixed precision

The trainer's options (selection, eval_every, holdout_fraction, batch_size, precision) are the
fields of `TrainerOptions`. `run_units` runs many units in worker processes (one per core, one
torch thread each; `oodeval.pool.WorkerPool`).
"""

from oodeval.algorithms.networks import PRECISIONS, native_bf16
from oodeval.training.loo import (
    FULL_FOLD,
    SELECTIONS,
    CheckpointRow,
    ResultRow,
    TrainedUnit,
    TrainerOptions,
    TrainingDiverged,
    UnitResult,
    predict_labels,
    run_unit,
    train_models,
)
from oodeval.training.parallel import UnitSpec, run_units, worker_pool

__all__ = [
    "CheckpointRow",
    "FULL_FOLD",
    "PRECISIONS",
    "SELECTIONS",
    "ResultRow",
    "TrainedUnit",
    "TrainerOptions",
    "TrainingDiverged",
    "UnitResult",
    "UnitSpec",
    "native_bf16",
    "predict_labels",
    "run_unit",
    "run_units",
    "train_models",
    "worker_pool",
]
