"""Ready-made studies: ``paper`` (the paper's setup), ``paper-cpu`` (a shortened grid for a
2-core CPU) and ``quick`` (minutes, Scale-1 SR-CMNIST); ``paper-images``, ``nico`` and
``nico-resnet18``, the image experiments, on folders the user names.

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

The image presets follow DomainBed's image protocol, which the worst+gap paper uses for its image
datasets (Section 5) and NICO++ for its DG tables: an ImageNet-normalised ResNet-50 (``resnet50``;
``nico-resnet18``: ResNet-18) with frozen batch norms, DomainBed's image hyperparameters, its
training augmentation (``[trainer] augment``), 5001 steps, a checkpoint every 300 steps
(DomainBed's ``CHECKPOINT_FREQ`` for its image datasets), 32 images per environment and step (ARM:
8; the trainer's default for the ResNets, `oodeval.algorithms.hparams.default_batch_size`).

- ``paper-images``: the worst+gap paper's Tables 2-4. C-Cats&Dogs (family ``colored`` over a
  ``classfolder:DIR`` of cats and dogs) and L-CIFAR10 (``lined`` over ``cifar10:DIR``) at Ratio
  3:2, 4:1 and 5:0; PACS-corrupted and VLCS-corrupted (``corrupted`` over ``folder:DIR``, 224
  px, severity 3) with Envs 1-1-1-1 and 2-2-2-2, and PACS with 1-0-1-1 and 2-0-2-2 (Table 4).
  14 algorithms x 3 seeds.
- ``nico`` / ``nico-resnet18``: NICO++'s classic DG setting (Section 4.2, Tables 2 and 5): the
  family ``domains`` over the NICO++ common domains, for both of the paper's splits (train
  grass, water, rock, autumn, indoor, dim; and train sand, grass, water, rock, indoor,
  outdoor), 224 px, with the 8 DomainBed algorithms NICO++ reports (ERM is its Deepall) x 3
  seeds.

Each dataset's folder is named by an environment variable (`IMAGE_DATA`: ``OODEVAL_PACS``, ...)
or by ``preset(name, data={"PACS-corrupted": DIR})``; a preset whose folder is not given says in
one line which variable to set. ImageNet weights come from ``OODEVAL_RESNET50_WEIGHTS`` /
``OODEVAL_RESNET18_WEIGHTS`` (a torchvision ``state_dict`` file, ``[trainer] pretrained``);
without them the networks start from a seeded random init and every output says "not
pretrained".

Departures from the papers, named: C-Cats&Dogs and L-CIFAR10 keep their source's image size (a
class folder is read at 64 px, CIFAR-10 at its 32 px) instead of 224; the corruptions drawn for
E_given follow the study's ``data_seed`` (one draw per study), while the paper's seed drew them
too; NICO++'s own training schedule is replaced by DomainBed's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oodeval.environments.domains import NICO_TRAIN_DOMAINS
from oodeval.environments.mnist import resolve_source
from oodeval.errors import OodevalError
from oodeval.paper_grid import (
    CORRUPTED_PATTERNS,
    IMAGE_EVAL_EVERY,
    IMAGE_RATIOS,
    IMAGE_SIZE,
    NICO_ALGORITHMS,
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


@dataclass(frozen=True)
class ImageData:
    """Where an image preset finds one dataset: the environment variable naming its folder, the
    source kind that reads it and the layout it expects."""

    variable: str
    kind: str
    layout: str


#: The image presets' datasets (the ``dataset`` of their scenarios).
IMAGE_DATA: dict[str, ImageData] = {
    "C-Cats&Dogs": ImageData("OODEVAL_CATS_DOGS", "classfolder", "a CLASS/IMAGE folder (cat, dog)"),
    "L-CIFAR10": ImageData("OODEVAL_CIFAR10", "cifar10", "CIFAR-10's cifar-10-batches-py folder"),
    "PACS-corrupted": ImageData("OODEVAL_PACS", "folder", "PACS as a DOMAIN/CLASS/IMAGE folder"),
    "VLCS-corrupted": ImageData("OODEVAL_VLCS", "folder", "VLCS as a DOMAIN/CLASS/IMAGE folder"),
    "NICO++": ImageData("OODEVAL_NICO", "folder", "NICO++'s common domains, DOMAIN/CLASS/IMAGE"),
}
#: torchvision ImageNet weights of each ResNet, by environment variable (``[trainer] pretrained``)
WEIGHTS_VARIABLES = {"resnet50": "OODEVAL_RESNET50_WEIGHTS", "resnet18": "OODEVAL_RESNET18_WEIGHTS"}
#: NICO++'s two classic DG splits (Section 4.2, Tables 2 and 5): the training domains
NICO_SPLITS = (NICO_TRAIN_DOMAINS, ("sand", "grass", "water", "rock", "indoor", "outdoor"))


def _image_study(name: str, model: str, algorithms: tuple[str, ...], scenarios: list) -> dict:
    # no batch_size: the trainer's default for the ResNets is DomainBed's, 32 (ARM: 8)
    trainer: dict[str, Any] = {"eval_every": IMAGE_EVAL_EVERY, "augment": True}
    weights = os.environ.get(WEIGHTS_VARIABLES[model], "").strip()
    if weights:
        trainer["pretrained"] = weights
    return {
        "name": name,
        "algorithms": list(algorithms),
        "seeds": list(SEEDS),
        "steps": PAPER_STEPS,  # DomainBed's N_STEPS, for every dataset
        "model": model,
        "scenarios": scenarios,
        "trainer": trainer,
        "hparams": {},  # every algorithm's defaults: DomainBed's for its image datasets
    }


def _paper_images(source: Callable[[str], str]) -> dict[str, Any]:
    scenarios: list[dict[str, Any]] = [
        {"family": family, "ratio": r, "dataset": dataset, "source": source(dataset)}
        for dataset, family in (("C-Cats&Dogs", "colored"), ("L-CIFAR10", "lined"))
        for r in IMAGE_RATIOS
    ]
    scenarios += [
        {
            "family": "corrupted",
            "pattern": pattern,
            "image_size": IMAGE_SIZE,
            "dataset": dataset,
            "source": source(dataset),
        }
        for dataset, patterns in CORRUPTED_PATTERNS.items()
        for pattern in patterns
    ]
    return _image_study("paper-images", "resnet50", PAPER_ALGORITHMS, scenarios)


def _nico(model: str) -> Callable[[Callable[[str], str]], dict[str, Any]]:
    def study(source: Callable[[str], str]) -> dict[str, Any]:
        scenarios = [
            {
                "family": "domains",
                "given": list(split),
                "image_size": IMAGE_SIZE,
                "dataset": "NICO++",
                "source": source("NICO++"),
            }
            for split in NICO_SPLITS
        ]
        name = "nico" if model == "resnet50" else f"nico-{model}"
        return _image_study(name, model, NICO_ALGORITHMS, scenarios)

    return study


_PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "quick": _quick,
    "paper-cpu": _paper_cpu,
    "paper": _paper,
}
#: the presets whose data the user names (`IMAGE_DATA`)
_IMAGE_PRESETS: dict[str, Callable[[Callable[[str], str]], dict[str, Any]]] = {
    "paper-images": _paper_images,
    "nico": _nico("resnet50"),
    "nico-resnet18": _nico("resnet18"),
}


def preset_names() -> list[str]:
    """Names of the built-in presets: quick, paper-cpu and paper in order of cost, then the
    image presets (paper-images, nico, nico-resnet18)."""
    return [*_PRESETS, *_IMAGE_PRESETS]


def preset(name: str, *, data: Mapping[str, str] | None = None) -> StudyConfig:
    """The built-in study `name` (`preset_names`).

    ``paper`` resolves its MNIST when it is built (module docstring); ``quick`` and
    ``paper-cpu`` keep ``source = "auto"``. An image preset reads each dataset's folder from
    `data` (``{"PACS-corrupted": DIR, ...}``, the keys of `IMAGE_DATA`), else from its
    environment variable (``OODEVAL_PACS``, ...), and refuses in one line a dataset it cannot
    find.

    >>> preset("quick").name
    'quick'
    """
    if name in _PRESETS:
        if data:
            raise OodevalError(f"preset {name} reads MNIST, not image folders; drop data")
        return config_from_dict(_PRESETS[name]())
    if name not in _IMAGE_PRESETS:
        raise OodevalError(f"unknown preset {name!r}; choose one of {', '.join(preset_names())}")
    given = dict(data or {})
    unknown = sorted(set(given) - set(IMAGE_DATA))
    if unknown:
        raise OodevalError(
            f"no image dataset {unknown[0]!r}; the image presets read {', '.join(IMAGE_DATA)}"
        )

    def source(dataset: str) -> str:
        spec = IMAGE_DATA[dataset]
        folder = str(given.get(dataset) or os.environ.get(spec.variable, "")).strip()
        if not folder:
            raise OodevalError(
                f"preset {name} needs {dataset}: set {spec.variable} to {spec.layout} "
                "(docs/howto/image-experiments.md)"
            )
        return f"{spec.kind}:{folder}"

    return config_from_dict(_IMAGE_PRESETS[name](source))
