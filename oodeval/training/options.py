"""The trainer's options and the names they take: torch-free, importable by a study's config.

`TrainerOptions` are the keyword options of `oodeval.training.run_unit` and the keys of a study
config's ``[trainer]`` table; `CHECKPOINT_SELECTIONS` (how a unit's reported checkpoint is chosen),
`PRECISIONS` (the arithmetic of the networks' products, whose torch dtypes are
`oodeval.algorithms.networks.PRECISION_DTYPES`) and `TF32_MODES` are the values they take.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from oodeval._torch import TF32_MODES, check_device_spec
from oodeval.errors import OodevalError, listing

#: checkpoint selections: DomainBed's training-domain validation, or the last step
CHECKPOINT_SELECTIONS = ("training_domain", "last")
#: arithmetic of the networks' matrix products (the first is the default)
PRECISIONS = ("fp32", "bf16")
#: DomainBed's checkpoint frequency for the MNIST datasets
DEFAULT_EVAL_EVERY = 100
#: what a unit records for its weights when it loads none (else their SHA-256)
NOT_PRETRAINED = "not pretrained"

__all__ = [
    "CHECKPOINT_SELECTIONS",
    "DEFAULT_EVAL_EVERY",
    "NOT_PRETRAINED",
    "PRECISIONS",
    "TF32_MODES",
    "TrainerOptions",
    "check_precision",
]


def check_precision(precision: str) -> str:
    """`precision` when it is one of `PRECISIONS`, else an OodevalError naming the choices.

    >>> check_precision("bf16")
    'bf16'
    """
    if precision not in PRECISIONS:
        raise OodevalError(
            f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}"
        )
    return precision


@dataclass(frozen=True)
class TrainerOptions:
    """How the trainer trains and selects a unit's models; checked when made.

    These are the keyword options of `run_unit` and `train_models` and the keys of a study
    config's ``[trainer]`` table (`oodeval.study.config.TRAINER_KEYS`).

    Attributes
    ----------
    selection : the checkpoint selection: ``"training_domain"`` (DomainBed's training-domain
        validation) or ``"last"``.
    eval_every : validation period for checkpoint selection (default 100, DomainBed's MNIST
        checkpoint period); the last step is always a checkpoint.
    holdout_fraction : fraction of each given environment held out for validation (not trained on).
    batch_size : minibatch size per environment; also the prediction chunk of batch-dependent
        algorithms. None (default): DomainBed's default for the unit's model and algorithm
        (`oodeval.algorithms.hparams.default_batch_size`): 64 for the small networks, 32 for the
        ResNets, 8 for ARM on a ResNet.
    precision : ``"fp32"`` or ``"bf16"``: arithmetic of the networks' matrix products, in training
        and testing (module docstring).
    device : ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (module docstring); the spelling is
        checked here, CUDA's presence when the unit runs.
    tf32 : ``"default"`` (PyTorch's TF32 defaults, DomainBed's: TF32 cuDNN convolutions, full
        float32 cuBLAS products) or ``"off"`` (full float32 everywhere), for training and testing
        (`oodeval._torch.tf32_mode`); no effect on the CPU. A study stores it in its config's
        ``[trainer]`` table, with precision and device, when it is not the default.
    augment : DomainBed's image training augmentation (`oodeval.training.domainbed_augmented`:
        random resized crop, flip, colour jitter, grayscale) of every training minibatch, drawn
        from the unit's seeded generator after the minibatch itself; the images keep their size.
        Images of 1 or 3 channels only; checkpoint validation and testing see them unaugmented,
        as in DomainBed. Off by default.
    imagenet_normalize : DomainBed's ImageNet normalisation of the images of its image datasets
        (``(x - mean) / std`` per channel, mean 0.485, 0.456, 0.406, std 0.229, 0.224, 0.225;
        channel i of other than 3 takes RGB channel ``i % 3``'s), done by the ResNets on every
        input, after the augmentation, in training and testing
        (`oodeval.algorithms.networks.ResNet.normalized`). On by default; false is a departure
        from DomainBed (the images go in as they are, in [0, 1]). No effect on the small
        networks, which DomainBed trains on unnormalised small images.
    pretrained : the path of a torchvision ``state_dict`` file (``.pth``, ``.pt`` or
        ``.safetensors``) loaded into every ResNet the unit's models hold
        (`oodeval.algorithms.networks.ResNet.load_pretrained`), right after they are built and
        before any step; models ``resnet18`` and ``resnet50`` only. The unit records the file's
        SHA-256 (`UnitResult.pretrained`), else `NOT_PRETRAINED`. None (default): the seeded
        random initialisation.
    """

    selection: str = "training_domain"
    eval_every: int | None = None
    holdout_fraction: float = 0.2
    batch_size: int | None = None
    precision: str = PRECISIONS[0]
    device: str = "cpu"
    tf32: str = TF32_MODES[0]
    augment: bool = False
    imagenet_normalize: bool = True
    pretrained: str | None = None

    def __post_init__(self) -> None:
        if self.selection not in CHECKPOINT_SELECTIONS:
            choices = ", ".join(CHECKPOINT_SELECTIONS)
            raise OodevalError(f"unknown selection {self.selection!r}; choose one of {choices}")
        fraction = self.holdout_fraction
        allowed = 0 <= fraction < 1 if self.selection == "last" else 0 < fraction < 1
        if not allowed:
            raise OodevalError(
                f"holdout_fraction must be in (0, 1) for training-domain validation (in [0, 1) "
                f"for selection='last'), got {fraction}"
            )
        if self.batch_size is not None and self.batch_size < 1:
            raise OodevalError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.eval_every is not None and self.eval_every < 1:
            raise OodevalError(f"eval_every must be >= 1, got {self.eval_every}")
        check_precision(self.precision)  # unknown names fail here, before any data is prepared
        check_device_spec(self.device)
        if not isinstance(self.augment, bool):
            raise OodevalError(f"augment must be true or false, got {self.augment!r}")
        if not isinstance(self.imagenet_normalize, bool):
            raise OodevalError(
                f"imagenet_normalize must be true or false, got {self.imagenet_normalize!r}"
            )
        if isinstance(self.pretrained, os.PathLike):  # a pathlib.Path is a path too
            object.__setattr__(self, "pretrained", os.fspath(self.pretrained))
        if self.pretrained is not None and not (
            isinstance(self.pretrained, str) and self.pretrained.strip()
        ):
            raise OodevalError(
                f"pretrained must be the path of a weights file, got {self.pretrained!r}"
            )
        if self.tf32 not in TF32_MODES:
            raise OodevalError(
                f"unknown tf32 mode {self.tf32!r}; choose one of {', '.join(TF32_MODES)}"
            )

    @classmethod
    def from_keywords(cls, options: Mapping[str, Any]) -> TrainerOptions:
        """The options named in `options` (the others at their defaults); unknown names fail.

        >>> TrainerOptions.from_keywords({"batch_size": 16}).batch_size
        16
        """
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise OodevalError(
                f"unknown trainer option(s) {listing(unknown)}; the trainer takes "
                f"{', '.join(names)}"
            )
        return cls(**options)
