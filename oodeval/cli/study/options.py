"""What several `oodeval study` subcommands share: the study config they are given (a TOML file
or a preset, with the trainer overrides of the command line) and those options."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval.errors import OodevalError

if TYPE_CHECKING:  # the study stack is imported when a command runs
    from oodeval.study.config import StudyConfig

PRESET_OPT: Any = typer.Option(
    None,
    "--preset",
    help="Built-in study: quick (minutes), paper-cpu (the paper's grid shortened for a 2-core CPU: "
    "MLP, 14x14, 450 steps) or paper (the faithful DomainBed protocol: mnist_cnn, 28x28, 5001 "
    "steps). These three use the source auto: real MNIST, the bundled test set unless "
    "OODEVAL_MNIST names the full set. The image experiments: paper-images (Tables 2-4, "
    "ResNet-50), nico and nico-resnet18 (NICO++ Tables 2 and 5), on the folders named by "
    "OODEVAL_CATS_DOGS, OODEVAL_CIFAR10, OODEVAL_PACS, OODEVAL_VLCS and OODEVAL_NICO.",
)
DEVICE_OPT: Any = typer.Option(
    None,
    "--device",
    help="Device the units train on: cpu, cuda, cuda:N or auto (cuda when available, else cpu); "
    "overrides [trainer] device. With cuda every GPU runs a worker of its own.",
)
TF32_OPT: Any = typer.Option(
    None,
    "--tf32",
    help="TF32 on GPUs: default (PyTorch's and DomainBed's: TF32 cuDNN convolutions, full float32 "
    "matrix products) or off (full float32 everywhere); sets [trainer] tf32.",
)
PRECISION_OPT: Any = typer.Option(
    None,
    "--precision",
    help="Arithmetic of the networks' products: fp32, or bf16 (mixed precision, 1.2-2.8x faster "
    "per unit on CPUs with AVX512-BF16/AMX, slightly different numbers); sets [trainer] "
    "precision.",
)


def study_config(
    config: Path | None,
    preset_name: str | None,
    precision: str | None = None,
    device: str | None = None,
    tf32: str | None = None,
    *,
    outputs: Sequence[tuple[str, str | Path | None]] = (),
) -> StudyConfig:
    """The study config a command was given: CONFIG.toml or --preset NAME (exactly one), with
    the command line's --precision, --device and --tf32 written into its ``[trainer]`` table.

    The command's `outputs` ((what, path) pairs) are refused in one line when one of them is
    a file the study reads: CONFIG, or the data of the study or of a scenario with a source of
    its own (the image presets' folders).
    """
    chosen = _overridden(config, preset_name, precision, device, tf32)
    read = Inputs().file("CONFIG", config).spec("the study's source", chosen.source)
    for spec in chosen.scenarios:
        read.spec(f"the source of scenario {spec.label()}", spec.source)
    refuse_aliases(outputs, read)
    return chosen


def _overridden(
    config: Path | None,
    preset_name: str | None,
    precision: str | None,
    device: str | None,
    tf32: str | None,
) -> StudyConfig:
    """CONFIG.toml or the preset, with the command line's trainer options written in."""
    from oodeval._torch import TF32_MODES, device_problem
    from oodeval.study import load_config, preset, preset_names
    from oodeval.study.config import PRECISIONS

    if (config is None) == (preset_name is None):
        raise OodevalError(
            f"give exactly one of CONFIG.toml or --preset NAME ({', '.join(preset_names())})"
        )
    # exactly one is given: without a preset name, the config path
    chosen = preset(preset_name) if preset_name is not None else load_config(cast(Path, config))
    trainer = dict(chosen.trainer)
    if precision is not None:
        if precision not in PRECISIONS:
            raise OodevalError(
                f"unknown --precision {precision!r}; choose one of {', '.join(PRECISIONS)}"
            )
        trainer["precision"] = precision
    if device is not None:
        problem = device_problem(device)
        if problem is not None:
            raise OodevalError(f"--device: {problem}")
        trainer["device"] = device  # overrides the config's [trainer] device
    if tf32 is not None:
        if tf32 not in TF32_MODES:
            raise OodevalError(f"unknown --tf32 {tf32!r}; choose one of {', '.join(TF32_MODES)}")
        trainer["tf32"] = tf32
    if trainer == chosen.trainer:
        return chosen
    # replace() re-validates, which leaves the defaults (fp32, cpu) out of the stored config
    return chosen.replace(trainer=trainer)
