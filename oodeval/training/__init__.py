"""The leave-one-environment-out training engine: `run_unit` trains and tests one unit.

A unit is (algorithm, seed, scenario): N leave-one-out models plus one model on all given
environments, selected by training-domain validation and tested on the held-out environment /
on every environment of E_all (see `oodeval.training.loop`). Typical use::

    from oodeval.environments import build_scenario
    from oodeval.algorithms import sample_hparams
    from oodeval.training import run_unit

    sc = build_scenario("sr-cmnist", source="mnist:/data/mnist", ratio="3:1", scale=1)
    res = run_unit(sc, "IRM", seed=0, steps=5000)            # DomainBed defaults
    res = run_unit(sc, "IRM", seed=0, steps=5000, hparams=sample_hparams("IRM", 7))  # random
    res.loo_errors(), res.all_errors(), res.measures()       # worst+gap, average, ideal, ...
    res = run_unit(sc, "IRM", seed=0, steps=5000, precision="bf16")  # mixed precision

The modules, one concern each:

- `options`: `TrainerOptions` and the names they take (`CHECKPOINT_SELECTIONS`, `PRECISIONS`,
  `TF32_MODES`); torch-free, so a study's config reads them without importing torch;
- `results`: what a unit gives (`UnitResult`, `ResultRow`, `CheckpointRow`, `TrainingDiverged`);
- `data`: a unit's data as tensors on its device; `evaluation`: predicting and testing;
  `checkpoints`: checkpoint selection and the per-checkpoint records; `loop`: `train_models` and
  `run_unit`; `augment`: DomainBed's image training augmentation and ImageNet normalisation
  (`domainbed_augmented`, `imagenet_normalized`), in torch tensor ops, without torchvision.

The names below are read from their modules when first used, so that importing this package (and
`oodeval.training.options`, which `oodeval.algorithms.networks` and the study config read) does
not import torch. Many units run in worker processes through a study's worker and
`oodeval.pool.WorkerPool`: `oodeval.study.worker.run_units`.
"""

from __future__ import annotations

from oodeval._lazy import lazy_package

__all__, __getattr__, __dir__ = lazy_package(
    globals(),
    {
        ".options": ("CHECKPOINT_SELECTIONS", "PRECISIONS", "TF32_MODES", "TrainerOptions"),
        ".results": ("FULL_FOLD", "CheckpointRow", "ResultRow", "TrainingDiverged", "UnitResult"),
        ".evaluation": ("predict_labels",),
        ".loop": (
            "TrainedUnit",
            "run_unit",
            "train_models",
            "native_bf16",
            "check_pretrained",
            "pretrained_model_problem",
        ),
        ".augment": ("domainbed_augmented", "imagenet_normalized"),
    },
)
