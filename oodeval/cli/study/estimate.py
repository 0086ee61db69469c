"""`oodeval study estimate`: the projected wall time of a study, from a timed sample of units."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from oodeval.cli._common import fraction_option, reports_errors, stops_on_ctrl_c
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.cli.study.options import DEVICE_OPT, PRECISION_OPT, PRESET_OPT, TF32_OPT, study_config
from oodeval.pool import MAX_WORKERS
from oodeval.study.config.keys import STEPS_LIMIT
from oodeval.tables import frame_records, render_frame, to_json

if TYPE_CHECKING:  # the study stack is imported when the command runs
    from oodeval.study import StudyConfig
    from oodeval.study.estimate import Estimate

#: `study estimate` on a study longer than this times steps (--n-sample-steps) by default.
LONG_STUDY_STEPS = 1000
DEFAULT_SAMPLE_STEPS = 3


def estimate_command(
    config: Path | None = typer.Argument(None, help="Study config (TOML); or use --preset."),
    preset_name: str | None = PRESET_OPT,
    workers: int | None = typer.Option(
        None, "--workers", min=1, max=MAX_WORKERS, help="Workers (default: cores)."
    ),
    algorithms: str | None = typer.Option(
        None,
        "--algorithms",
        help="Comma-separated algorithms to time at every sampled N (default ERM,MLDG,SagNet); "
        "the others are timed at the smallest N only.",
    ),
    steps_fraction: float = fraction_option(
        1.0, "--steps-fraction", "Run the sample with this fraction of the steps."
    ),
    precision: str | None = PRECISION_OPT,
    tf32: str | None = TF32_OPT,
    device: str | None = DEVICE_OPT,
    sample_steps: int | None = typer.Option(
        None,
        "--n-sample-steps",
        max=STEPS_LIMIT,
        min=1,
        help="Time this many training steps of each sampled unit (one checkpoint) and "
        "extrapolate to the configured steps; replaces --steps-fraction. Default: 3 for a "
        "study of more than 1,000 steps (the paper preset), else whole units.",
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Time a sample of the study's units and print the projected wall time of the whole study.

    The sample trains on the config's device (or --device); the projection holds for that
    device, which the first line names. --n-sample-steps projects a long protocol (the paper's
    5001 steps) from a few steps per unit.

    table: the summary; csv and markdown: the table per N_given; json: the projection and both
    tables (per N_given and the timed units).
    """
    from oodeval.study.estimate import estimate_study

    check_output_path(output)
    chosen = tuple(a.strip() for a in algorithms.split(",") if a.strip()) if algorithms else None
    # Ctrl-C: run_study's StudyInterrupted would say "run again to resume", but the sample lives
    # in a temporary folder that is removed, so the line says so instead.
    discarded = "the timing sample was discarded; run the same command again to re-estimate"
    outputs = [("--output", output)]
    config_ = study_config(config, preset_name, precision, device, tf32, outputs=outputs)
    if sample_steps is None and steps_fraction == 1.0 and chosen is None:
        sample_steps = _default_sample_steps(config_)
    with stops_on_ctrl_c(discarded, own_message=False):
        estimate = estimate_study(
            config_,
            workers=workers or os.cpu_count() or 1,
            algorithms=chosen,
            steps_fraction=steps_fraction,
            progress=True,
            sample_steps=sample_steps,
        )
    echo_output(_estimate_text(estimate, fmt), output)


def register(group: typer.Typer) -> None:
    """Add `estimate` to the `study` group."""
    group.command("estimate")(reports_errors(estimate_command))


def _default_sample_steps(config: StudyConfig) -> int | None:
    """The steps timed per unit when the command line says nothing: `DEFAULT_SAMPLE_STEPS` for a
    long study trained by torch (whole units would take hours to sample, a note says so on
    stderr), else None (whole units)."""
    from oodeval.study.config import DEFAULT_BACKEND

    if config.steps <= LONG_STUDY_STEPS or config.backend != DEFAULT_BACKEND:
        return None
    typer.echo(
        f"note: {config.steps} steps per unit; timing {DEFAULT_SAMPLE_STEPS} steps per "
        f"algorithm (--n-sample-steps {DEFAULT_SAMPLE_STEPS}); --steps-fraction F times whole "
        "units instead",
        err=True,
    )
    return DEFAULT_SAMPLE_STEPS


def _estimate_text(estimate: Estimate, fmt: OutputFormat) -> str:
    """table: the summary; json: the projection and both tables; csv, markdown: per N_given."""
    if fmt is OutputFormat.table:
        return estimate.summary()
    if fmt is OutputFormat.json:
        return to_json(
            {
                "projected_seconds": estimate.projected_seconds,
                "device": estimate.device,
                "sample_steps": estimate.sample_steps,
                "workers": estimate.workers,
                "steps_fraction": estimate.steps_fraction,
                "sample_wall_seconds": estimate.sample_wall_seconds,
                "failed": estimate.failed,
                "mix_factor": estimate.mix_factor,
                "per_n": frame_records(estimate.per_n),
                "samples": frame_records(estimate.samples),
            }
        )
    return render_frame(estimate.per_n, fmt.value)
