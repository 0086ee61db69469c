"""Ready-made studies: ``paper`` (the paper's setup), ``paper-cpu`` (a shortened grid for a
2-core CPU) and ``quick`` (minutes, Scale-1 SR-CMNIST).

All three cover the worst+gap paper's SR-CMNIST grid (Section 5.1) or part of it: the 14 DomainBed
algorithms x 12 scenarios (Ratio 3:1, 4:1, 5:1 x Scale 1-4) x 3 seeds.

``paper`` is the paper's setup, which follows DomainBed: DomainBed's MNIST_CNN (``mnist_cnn``)
on 2x28x28 images of the real MNIST (``size = 28``), 5001 steps (DomainBed's ``N_STEPS`` for its
MNIST datasets), a checkpoint every 100 steps (its ``CHECKPOINT_FREQ``), 64 rows per environment
and step, Adam with lr 1e-3 and every algorithm's DomainBed default hyperparameters, including
the IRM/VREx penalty anneal of 500 steps. It is meant for GPUs or a cluster. Its source is
resolved when it is built, as ``source = "auto"`` resolves it (`resolve_source`:
``OODEVAL_MNIST``, then ``../shared/data/mnist``, then the MNIST test set bundled with oodeval).
DomainBed's ColoredMNIST draws from all 70,000 MNIST images (train + test); on the test set
alone (10,000 images) every output of the study says so
(`oodeval.study.config.schema.data_note`), and ``OODEVAL_MNIST`` naming a folder with the four
IDX files gives it all 70,000.

``paper-cpu`` is the same grid shortened to fit about 12 hours on a 2-core CPU
(benchmarks/RESULTS.md): the IRM-style MLP on 2x14x14 images, 450 steps, the IRM and VREx
penalties switched on after 100 steps instead of 500. ``quick`` keeps 8 algorithms, the three
Scale-1 scenarios and one seed; its steps, data sizes and shortened IRM/VREx anneal are plain
config values, chosen so it finishes within 10 minutes on a 2-core machine. Both keep
``source = "auto"``, resolved when the study runs: real MNIST, the bundled test set when no
other is found. scikit-learn's 8x8 digits are used only by a config that says
``source = "digits"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oodeval.environments.mnist import resolve_source
from oodeval.errors import OodevalError
from oodeval.paper_grid import (
    PAPER_ALGORITHMS,
    PAPER_BATCH_SIZE,
    PAPER_EVAL_EVERY,
    PAPER_SIZE,
    PAPER_STEPS,
    RATIOS,
    SCALES,
    SEEDS,
)
from oodeval.study.config.schema import StudyConfig, config_from_dict

QUICK_ALGORITHMS = ("ERM", "IRM", "GroupDRO", "VREx", "CORAL", "MMD", "Mixup", "MLDG")

# paper-cpu and quick train far fewer steps than DomainBed's 5000 (paper-cpu must fit in about
# 12 hours on 2 CPU cores; see benchmarks/RESULTS.md), so the IRM and VREx penalties switch on
# after 100 steps instead of 500 and act for most of the shortened training.
_SHORT_ANNEAL = {
    "IRM": {"irm_penalty_anneal_iters": 100},
    "VREx": {"vrex_penalty_anneal_iters": 100},
}


def _quick() -> dict[str, Any]:
    return {
        "name": "quick",
        "source": "auto",
        "algorithms": list(QUICK_ALGORITHMS),
        "seeds": [0],
        "steps": 500,
        "model": "mlp",
        "scenarios": [
            {"family": "sr-cmnist", "ratio": r, "scale": 1, "n_per_given": 1000, "n_eval": 1000}
            for r in RATIOS
        ],
        "trainer": {"eval_every": 100},
        "hparams": dict(_SHORT_ANNEAL),
    }


def _paper_cpu() -> dict[str, Any]:
    return {
        "name": "paper-cpu",
        "source": "auto",
        "algorithms": list(PAPER_ALGORITHMS),
        "seeds": list(SEEDS),
        "steps": 450,
        "model": "mlp",
        "scenarios": [
            {"family": "sr-cmnist", "ratio": r, "scale": s} for s in SCALES for r in RATIOS
        ],
        "trainer": {"eval_every": 100},
        "hparams": dict(_SHORT_ANNEAL),
    }


def _paper() -> dict[str, Any]:
    return {
        "name": "paper",
        "source": resolve_source("auto"),
        "algorithms": list(PAPER_ALGORITHMS),
        "seeds": list(SEEDS),
        "steps": PAPER_STEPS,
        "model": "mnist_cnn",
        "scenarios": [
            {"family": "sr-cmnist", "ratio": r, "scale": s, "size": PAPER_SIZE}
            for s in SCALES
            for r in RATIOS
        ],
        "trainer": {"eval_every": PAPER_EVAL_EVERY, "batch_size": PAPER_BATCH_SIZE},
        "hparams": {},  # every algorithm's defaults, which are DomainBed's (hparams.py)
    }


_PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "quick": _quick,
    "paper-cpu": _paper_cpu,
    "paper": _paper,
}


def preset_names() -> list[str]:
    """Names of the built-in presets, in order of cost: quick, paper-cpu, paper."""
    return list(_PRESETS)


def preset(name: str) -> StudyConfig:
    """The built-in study `name` (``quick``, ``paper-cpu`` or ``paper``).

    ``paper`` resolves its MNIST when it is built (module docstring); the other two keep
    ``source = "auto"``.
    """
    if name not in _PRESETS:
        raise OodevalError(f"unknown preset {name!r}; choose one of {', '.join(preset_names())}")
    return config_from_dict(_PRESETS[name]())
