"""`oodeval study summary`: one line per study on what it shows about worst+gap against average."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval._text import safe_text
from oodeval.cli._common import reports_errors, seed_option
from oodeval.limits import MAX_RESAMPLES
from oodeval.measures.meta import BOOTSTRAP_RESAMPLES


def summary_command(
    inputs: list[Path] = typer.Argument(
        ..., metavar="STUDY...", help="Study folders or study exports (oodeval study export)."
    ),
    bootstrap: int = typer.Option(
        BOOTSTRAP_RESAMPLES,
        "--bootstrap",
        min=1,
        max=MAX_RESAMPLES,
        help="Bootstrap draws of every interval.",
    ),
    seed: int = seed_option("Seed of the bootstrap draws."),
) -> None:
    """Print one line per study: worst+gap against average on correlation with the ideal
    measure (rho per scenario, the paired 95% interval of the difference) and on selection
    (mean degradation over (scenario, seed) cells, the 95% bootstrap interval of the
    difference, and the ideal measure's most frequent choice), with "too small to separate the
    measures" first for a study of fewer than 6 (scenario, seed) cells or where no interval
    excludes 0. Nothing is trained or written; the lines are
    sentences, for a terminal or a log (`study analyze` writes the tables)."""
    from oodeval.study import load_study
    from oodeval.study.analysis.summary import study_summary

    lines = [
        safe_text(f"{path}: {study_summary(load_study(path), n_resamples=bootstrap, seed=seed)}")
        for path in inputs
    ]
    typer.echo("\n".join(lines))


def register(group: typer.Typer) -> None:
    """Add `summary` to the `study` group."""
    group.command("summary")(reports_errors(summary_command))
