"""`oodeval import ...`: score results produced by other tools (DomainBed sweeps) with oodeval.

`oodeval import domainbed` opens with the answer line (`oodeval.results.domainbed.sweep_answer`);
with ``--format csv`` or ``json`` that line goes to stderr as ``answer: ...`` instead, so stdout
stays the long form `oodeval measures` reads. Cells with fewer than three trials get one
``warning: ...`` line (`trials_warning`), a dataset with fewer than four environments another
(`oodeval.measures.meta.environment_warning`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import (
    IMPORTS_OPT,
    load_imports,
    measure_specs,
    measures_option,
    reports_errors,
)
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.errors import OodevalError, listing
from oodeval.measures import measure_label
from oodeval.measures.meta import environment_warning
from oodeval.results.domainbed import (
    domain_measures_table,
    environment_names,
    long_form,
    results_table,
    select,
    selection_requirement,
    sweep_answer,
    trials_warning,
)
from oodeval.results.selection import SELECTION_METHODS, selection_method
from oodeval.results.sweep import Sweep, read_sweep
from oodeval.tables import heading, render_frame, render_rows

app = typer.Typer(
    help="Import results from other tools and score them with oodeval's measures.",
    no_args_is_help=True,
)


def _number(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], fmt: str) -> str:
    """DomainBed's look: left-aligned text, or markdown with a compact ``|---|`` rule."""
    return render_rows(header, rows, fmt, compact_rule=True)


def _selection_tables(
    sweep: Sweep, dataset: str, table: pd.DataFrame, methods: list[str], fmt: str
) -> list[str]:
    n = sweep.n_envs(dataset)
    names = environment_names(dataset, n)
    parts = []
    for method in methods:
        title = f"Dataset: {dataset}, model selection method: {SELECTION_METHODS[method]}"
        cells = table[(table["dataset"] == dataset) & (table["selection"] == method)]
        if cells.empty:
            parts.append(
                heading(title, fmt)
                + f"\nno data: this selection method needs {selection_requirement(method)}"
            )
            continue
        rows = []
        for algorithm, grp in cells.groupby("algorithm", sort=True):
            by_env = {int(r.environment): r for r in grp.itertuples(index=False)}
            row = [algorithm]
            for e in range(n):
                r = by_env.get(e)
                row.append("X" if r is None else f"{r.mean:.1f} +/- {r.err:.1f}")
            avg = f"{sum(by_env[e].mean for e in range(n)) / n:.1f}" if len(by_env) == n else "X"
            rows.append([*row, avg])
        parts.append(heading(title, fmt) + "\n" + _table(["Algorithm", *names, "Avg"], rows, fmt))
    return parts


def _measures_section(
    dataset: str, measures: pd.DataFrame, fmt: str, extra: tuple[str, ...] = ()
) -> str:
    sub = measures[measures["dataset"] == dataset]
    order = {m: i for i, m in enumerate(SELECTION_METHODS)}
    sub = sub.assign(_order=sub["selection"].map(order)).sort_values(["_order", "algorithm"])
    rows = [
        [
            SELECTION_METHODS[r.selection],
            r.algorithm,
            _number(r.average),
            _number(r.worst),
            _number(r.gap),
            _number(r.worst_plus_gap),
            "-" if pd.isna(r.rank_average) else str(r.rank_average),
            "-" if pd.isna(r.rank_worst_plus_gap) else str(r.rank_worst_plus_gap),
            *(_number(record[m]) for m in extra),
        ]
        for r, record in zip(sub.itertuples(index=False), sub.to_dict("records"), strict=True)
    ]
    header = [
        "Selection",
        "Algorithm",
        "Average",
        "Worst",
        "Gap",
        "Worst+gap",
        "Rank (average)",
        "Rank (worst+gap)",
        *(measure_label(m) for m in extra),
    ]
    title = (
        f"Dataset: {dataset}, measures over test environments "
        "(error % = 100 - accuracy, lower is better)"
    )
    return heading(title, fmt) + "\n" + _table(header, rows, fmt)


def domainbed_report(
    sweep: Sweep, methods: list[str], fmt: str, extra: tuple[str, ...] = ()
) -> tuple[str, list[str], str]:
    """The text `oodeval import domainbed` prints, the warnings for stderr ('no data', too few
    trials) and the answer line for stderr ("" for table and markdown, which open with it)."""
    selected = pd.concat([select(sweep, m) for m in methods], ignore_index=True)
    notes = []
    for dataset in sweep.datasets:
        for m in methods:
            mask = (selected["dataset"] == dataset) & (selected["selection"] == m)
            if not mask.any():
                notes.append(
                    f"{SELECTION_METHODS[m]} has no data for {dataset}: it needs "
                    f"{selection_requirement(m)}"
                )
    if selected.empty:
        raise OodevalError(notes[0] if len(notes) == 1 else listing(notes, sep="; "))
    table = results_table(selected, sweep)
    measures = domain_measures_table(table, sweep, extra)
    answer = sweep_answer(table, measures, SELECTION_METHODS)
    few_trials = trials_warning(table)
    if few_trials:
        notes.append(few_trials)
    for dataset in sweep.datasets:
        few_envs = environment_warning(sweep.n_envs(dataset))
        if few_envs:
            notes.append(f"{dataset}: {few_envs}")
    if fmt in ("csv", "json"):
        combos = selected[["dataset", "selection"]].drop_duplicates()
        if len(combos) > 1:
            notes.append(
                f"the export holds {len(combos)} (dataset, selection) combinations; "
                "`oodeval measures` needs one: pass a single --selection and one dataset's rows"
            )
        return render_frame(long_form(selected, sweep), fmt), notes, answer
    parts = [
        safe_text(answer),
        safe_text(
            f"Sweep {sweep.path}: {sweep.n_runs} finished runs, {len(sweep.records)} records"
            f" ({sweep.unfinished_runs} unfinished runs skipped)."
        ),
    ]
    for dataset in sweep.datasets:
        parts += _selection_tables(sweep, dataset, table, methods, fmt)
        parts.append(_measures_section(dataset, measures, fmt, extra))
    parts.append(
        "Each test-environment accuracy is a leave-one-environment-out accuracy (mean +/- "
        "std/sqrt(trials), population std, as DomainBed prints). Worst = largest error, gap = "
        "largest - smallest error, worst+gap = worst + gap/(N-2) (Eq. 6 of the worst+gap paper)."
    )
    return "\n\n".join(parts), notes, ""


@app.command("domainbed")
@reports_errors
def domainbed(
    sweep_dir: Path = typer.Argument(..., help="DomainBed output folder: one sub-folder per run."),
    selection: list[str] = typer.Option(
        None,
        "--selection",
        "-s",
        metavar="METHOD",
        help="Model selection: training_domain, leave_one_domain_out (lodo) or test_domain "
        "(oracle). Repeat for several; default: all three.",
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
    measures: str | None = measures_option(
        "to add as columns of the measures tables (table and markdown formats); your own "
        "with --imports."
    ),
    imports: list[str] = IMPORTS_OPT,
) -> None:
    """Score a DomainBed sweep: DomainBed's tables plus worst, gap and worst+gap.

    csv gives the long form `oodeval measures` reads (dataset, selection, algorithm,
    environment, seed = trial_seed, split = loo, accuracy in [0, 1]); json the same rows as one
    list of records.
    """
    check_output_path(output)
    refuse_aliases([("--output", output)], Inputs().source("SWEEP", sweep_dir).imports(imports))
    load_imports(imports)
    extra = tuple(measure_specs(measures) or ())
    methods = list(dict.fromkeys(selection_method(s) for s in selection or SELECTION_METHODS))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        sweep = read_sweep(sweep_dir)
    notes = list(sweep.warnings)
    if sweep.unfinished_runs:
        notes.append(
            f"skipped {sweep.unfinished_runs} unfinished run(s) without a `done` file",
        )
    # Warnings are printed only once the report exists, so bad input gives one error line.
    text, report_notes, answer = domainbed_report(sweep, methods, fmt.value, extra)
    # written first: a failed write is the only line (no answer before it)
    echo_output(text, output, say_wrote=False)
    if answer:
        typer.echo(safe_text(f"answer: {answer}"), err=True)
    for note in [*notes, *report_notes]:
        typer.echo(safe_text(f"warning: {note}"), err=True)
    if output is not None:
        typer.echo(safe_text(f"wrote {output}"), err=True)


def register(parent: typer.Typer) -> None:
    """Add the `import` group to `parent` (the `oodeval` app)."""
    parent.add_typer(app, name="import")
