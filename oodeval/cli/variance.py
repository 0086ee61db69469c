"""`oodeval variance SOURCE`: test variance over seeds and checkpoints, and the oracle gap."""

from __future__ import annotations

import numbers
import warnings
from pathlib import Path

import pandas as pd
import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import reports_errors
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.errors import OodevalError
from oodeval.results.domainbed import ENVIRONMENT_NAMES
from oodeval.results.selection import ORACLE_CHECKPOINTS
from oodeval.results.variance import average_over_environments, read_checkpoints, variance_table
from oodeval.tables import heading, render_frame, render_rows


def _environment_label(dataset: str, env: object) -> str:
    names = ENVIRONMENT_NAMES.get(dataset)
    if names is not None and isinstance(env, numbers.Integral) and 0 <= int(env) < len(names):
        return names[int(env)]
    return str(env)


def _fmt(x: float) -> str:
    return "n/a" if pd.isna(x) else f"{x:.2f}"


def variance_report(
    table: pd.DataFrame, *, last: int, ddof: int, oracle: str = "best", fmt: str = "table"
) -> str:
    """Per-dataset tables of `variance_table` rows followed by their mean over environments."""
    means = average_over_environments(table)
    header = [
        "Algorithm",
        "Test env",
        "Trials",
        "Train-dom. val acc",
        "Oracle acc",
        "Oracle gap",
        "Seed std",
        "Epoch std",
        "Checkpoints",
    ]
    parts = []
    for dataset in sorted(table["dataset"].unique()):
        rows = []
        sub = pd.concat(
            [table[table["dataset"] == dataset], means[means["dataset"] == dataset]],
            ignore_index=True,
        )
        for r in sub.itertuples(index=False):
            rows.append(
                [
                    str(r.algorithm),
                    _environment_label(dataset, r.environment),
                    str(r.n_trials),
                    _fmt(r.training_domain_acc),
                    _fmt(r.oracle_acc),
                    _fmt(r.oracle_gap),
                    _fmt(r.seed_std),
                    _fmt(r.epoch_std),
                    str(r.epoch_checkpoints),
                ]
            )
        rows.sort(key=lambda row: (row[0], row[1] == "mean"))
        title = f"Dataset: {dataset}, test variance and oracle gap (accuracy points)"
        parts.append(heading(title, fmt) + "\n" + render_rows(header, rows, fmt, compact_rule=True))
    parts.append(
        f"Seed std: std (ddof={ddof}) over trials of the accuracy chosen by training-domain "
        f"validation. Epoch std: std (ddof={ddof}) over the last {last} checkpoints of each chosen "
        "run, mean over trials. Oracle gap: test-domain validation (oracle) minus training-domain "
        "validation accuracy, mean over trials (NICO++ Section 4.4, Table 4); "
        f"--oracle {oracle}: per run the oracle takes {ORACLE_CHECKPOINTS[oracle]}, then per "
        "trial the best hyperparameter draw."
    )
    return "\n\n".join(parts)


@reports_errors
def variance(
    source: Path = typer.Argument(
        ...,
        help="A study folder (`oodeval study run --out`), a DomainBed-style sweep folder, or a "
        "CSV of per-checkpoint records.",
    ),
    last: int = typer.Option(
        10, "--last", min=1, max=1_000_000, help="Checkpoints per run for the epoch std."
    ),
    ddof: int = typer.Option(
        1, "--ddof", min=0, max=1_000_000, help="Delta degrees of freedom of the stds."
    ),
    oracle: str = typer.Option(
        "best",
        "--oracle",
        help="Checkpoint the oracle may pick per run: best (highest test-domain validation "
        "accuracy, the best-epoch leak of NICO++ Sec. 4.4) or last (DomainBed's test-domain "
        "validation).",
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Std across seeds, std across the last checkpoints, and the oracle-vs-training-domain gap.

    A CSV source needs the columns dataset, algorithm, environment, trial, hparams, step,
    test_acc, train_val_acc, oracle_val_acc (one row per checkpoint, accuracies in [0, 1]).

    The oracle gap follows NICO++ (--oracle best: the oracle picks each run's checkpoint by the
    test domain's validation split); --oracle last gives DomainBed's last-checkpoint oracle.

    csv and json carry a std_ddof column, the --ddof that seed_std and epoch_std used; table and
    markdown say it below the tables.
    """
    oracle = oracle.strip().lower()
    if oracle not in ORACLE_CHECKPOINTS:
        raise OodevalError(
            f"unknown --oracle {oracle!r}; use one of {', '.join(ORACLE_CHECKPOINTS)}"
        )
    check_output_path(output)
    refuse_aliases([("--output", output)], Inputs().source("SOURCE", source))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpoints = read_checkpoints(source)
        table = variance_table(checkpoints, last=last, ddof=ddof, oracle=oracle)
    # Printed after the table is computed, so bad input gives only the error line.
    for w in caught:
        typer.echo(safe_text(f"warning: {w.message}"), err=True)
    if fmt.value in ("csv", "json"):
        full = pd.concat([table, average_over_environments(table)], ignore_index=True)
        full["std_ddof"] = ddof  # says which std seed_std and epoch_std are
        text = render_frame(full, fmt.value)
    else:
        text = variance_report(table, last=last, ddof=ddof, oracle=oracle, fmt=fmt.value)
    echo_output(text, output)


def register(app: typer.Typer) -> None:
    """Add `variance` as a top-level command of `app`."""
    app.command("variance")(variance)
