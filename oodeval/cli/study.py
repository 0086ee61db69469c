"""`oodeval study`: run the worst+gap measure study, check on it, analyse it, estimate its cost."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval._extras import require_extra
from oodeval.cli._common import (
    FORMAT_OPT,
    OUTPUT_OPT,
    OutputFormat,
    check_folder_path,
    check_output_path,
    command_path,
    echo_output,
    render_lines,
    reports_errors,
    stops_on_ctrl_c,
)
from oodeval.errors import OodevalError
from oodeval.tables import frame_records, render_frame, text_table, to_json

app = typer.Typer(
    help="Run the worst+gap paper's measure study resumably and analyse it.",
    no_args_is_help=True,
)


def _config(
    config: Path | None,
    preset_name: str | None,
    precision: str | None = None,
    device: str | None = None,
    tf32: str | None = None,
):
    from oodeval._torch import TF32_MODES, device_problem
    from oodeval.study import load_config, preset
    from oodeval.study.config import PRECISIONS

    if (config is None) == (preset_name is None):
        raise OodevalError(
            "give exactly one of CONFIG.toml or --preset NAME (quick, paper-cpu, paper)"
        )
    chosen = preset(preset_name) if preset_name is not None else load_config(config)
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


_PRESET_HELP = (
    "Built-in study: quick (minutes), paper-cpu (the paper's grid shortened for a 2-core CPU: "
    "MLP, 14x14, 450 steps) or paper (the faithful DomainBed protocol: mnist_cnn, 28x28, 5001 "
    "steps). All three use the source auto: real MNIST, the bundled test set unless "
    "OODEVAL_MNIST names the full set."
)


def _resolved_device(chosen) -> str:
    """The config's device on this machine (one line and exit 2 when it is not here)."""
    from oodeval._torch import resolve_device

    return resolve_device(chosen.trainer.get("device", "cpu"))


#: `study estimate` on a study longer than this times steps (--n-sample-steps) by default.
LONG_STUDY_STEPS = 1000
DEFAULT_SAMPLE_STEPS = 3

_DEVICE_HELP = (
    "Device the units train on: cpu, cuda, cuda:N or auto (cuda when available, else cpu); "
    "overrides [trainer] device. With cuda every GPU runs a worker of its own."
)
_TF32_HELP = (
    "TF32 on GPUs: default (PyTorch's and DomainBed's: TF32 cuDNN convolutions, full float32 "
    "matrix products) or off (full float32 everywhere); sets [trainer] tf32."
)
_PRECISION_HELP = (
    "Arithmetic of the networks' products: fp32, or bf16 (mixed precision, 1.2-2.8x faster per "
    "unit on CPUs with AVX512-BF16/AMX, slightly different numbers); sets [trainer] precision."
)


@app.command("run")
@reports_errors
def run_command(
    config: Path | None = typer.Argument(None, help="Study config (TOML); or use --preset."),
    preset_name: str | None = typer.Option(None, "--preset", help=_PRESET_HELP),
    out: Path = typer.Option(
        ..., "--out", metavar="DIR", help="Study folder (results.sqlite goes here)."
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Worker processes, default: all cores (ray: CPUs of a local instance; slurm: jobs "
        "running at once).",
    ),
    precision: str | None = typer.Option(None, "--precision", help=_PRECISION_HELP),
    tf32: str | None = typer.Option(None, "--tf32", help=_TF32_HELP),
    device: str | None = typer.Option(None, "--device", help=_DEVICE_HELP),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run failed units again."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar."),
    report: bool = typer.Option(
        True, "--report/--no-report", help="Write DIR/report.html at the end."
    ),
    executor: str = typer.Option(
        "local",
        "--executor",
        help="Where units run: local, ray or slurm (install the extra of that name).",
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        rich_help_panel="Ray",
        help="Ray cluster to join, e.g. auto (default: start a local one).",
    ),
    ray_unit_cpus: float | None = typer.Option(
        None,
        "--ray-unit-cpus",
        rich_help_panel="Ray",
        help="CPUs each unit reserves on Ray (default 1).",
    ),
    ray_max_retries: int | None = typer.Option(
        None,
        "--ray-max-retries",
        min=0,
        rich_help_panel="Ray",
        help="Times Ray re-runs a unit whose worker or node died, on any live node (default 0).",
    ),
    slurm_partition: str | None = typer.Option(
        None, "--slurm-partition", rich_help_panel="Slurm", help="Slurm partition."
    ),
    slurm_time: int | None = typer.Option(
        None,
        "--slurm-time",
        rich_help_panel="Slurm",
        help="Time limit per job in minutes (default 60).",
    ),
    slurm_cpus: int | None = typer.Option(
        None, "--slurm-cpus", rich_help_panel="Slurm", help="CPUs per job (default 1)."
    ),
    slurm_mem: float | None = typer.Option(
        None, "--slurm-mem", rich_help_panel="Slurm", help="Memory per job in GB."
    ),
    slurm_units_per_job: int | None = typer.Option(
        None,
        "--slurm-units-per-job",
        rich_help_panel="Slurm",
        help="Units run one after another in each job (default 1).",
    ),
    slurm_cluster: str | None = typer.Option(
        None,
        "--slurm-cluster",
        rich_help_panel="Slurm",
        help="slurm (default), local (processes) or debug (in-process).",
    ),
) -> None:
    """Run (or resume) a study; finished units are skipped, failed ones kept unless retried.

    A folder holding a study accepts a config that only adds (or removes) algorithms, seeds,
    scenarios or imports: the stored units are kept and only the new ones run. A change that
    would make stored units incomparable (steps, model, data, trainer options, hyperparameters
    of a stored algorithm) is refused, naming the keys.

    At the end the HTML report is written to DIR/report.html and its path printed. Units run in
    local worker processes, or with --executor ray / slurm on a Ray cluster or as Slurm jobs;
    this process alone writes the store, so resuming works the same everywhere.
    """
    from oodeval.study import run_study
    from oodeval.study.config import DEFAULT_BACKEND
    from oodeval.study.executors import make_executor

    check_folder_path(out)

    options = {
        "ray": {
            "--ray-address": ray_address,
            "--ray-unit-cpus": ray_unit_cpus,
            "--ray-max-retries": ray_max_retries,
        },
        "slurm": {
            "--slurm-partition": slurm_partition,
            "--slurm-time": slurm_time,
            "--slurm-cpus": slurm_cpus,
            "--slurm-mem": slurm_mem,
            "--slurm-units-per-job": slurm_units_per_job,
            "--slurm-cluster": slurm_cluster,
        },
    }
    for owner, given in options.items():
        for flag, value in given.items():
            if value is not None and executor != owner:
                raise OodevalError(
                    f"{flag} applies to --executor {owner} only (the executor is {executor})"
                )
    chosen = make_executor(
        executor,
        workers=workers,
        address=ray_address,
        cpus_per_unit=ray_unit_cpus if executor == "ray" else slurm_cpus,
        max_retries=ray_max_retries,
        partition=slurm_partition,
        time_minutes=slurm_time,
        mem_gb=slurm_mem,
        units_per_job=slurm_units_per_job,
        cluster=slurm_cluster,
    )
    study_config = _config(config, preset_name, precision, device, tf32)
    # Before the store is made: the missing extras that would stop the run now, or at its end.
    if study_config.backend == DEFAULT_BACKEND:
        require_extra("train", command_path())
    if report:
        require_extra("report", f"{command_path()}'s report (--no-report skips it)")
    device_spec = study_config.trainer.get("device", "cpu")
    if device_spec not in ("cpu", "auto") and not chosen.trains_elsewhere:
        typer.echo(f"device: {_resolved_device(study_config)}", err=True)
    # StudyInterrupted says how many units are stored; a Ctrl-C before that, the fallback line.
    with stops_on_ctrl_c("before the study started; the store is unchanged"):
        summary = run_study(
            study_config,
            out,
            retry_failed=retry_failed,
            progress=progress,
            executor=chosen,
        )
    if summary.changes is not None and summary.changes.describe():
        typer.echo(f"config: {summary.changes.describe()} (stored units are kept)")
    typer.echo(
        f"{summary.planned} units: {summary.skipped} already stored, {summary.ran} run "
        f"({summary.done} done, {summary.failed} failed) in {summary.wall_seconds:.1f} s; "
        f"store: {Path(out) / 'results.sqlite'}"
    )
    if summary.data_note:
        typer.echo(f"note: {summary.data_note}")
    if report:
        from oodeval.report.build import write_report

        with stops_on_ctrl_c(
            f"the study is stored; `oodeval report {out} --out {Path(out) / 'report.html'}` "
            "writes the report"
        ):
            path = write_report(out, Path(out) / "report.html")
        typer.echo(f"report: {path.resolve()}")


_EXCLUDE_HELP = (
    "Compute without the units that fail verification (damaged store) instead of refusing; "
    "every output then names the units left out."
)


@app.command("status")
@reports_errors
def status_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print done/failed/damaged/pending unit counts of the current config, its coverage per
    scenario, algorithm and seed, the failure reasons and the damaged units.

    The store is verified as it is read (SQLite's quick check, each unit's row counts and
    checksum); `oodeval study verify DIR` gives the full report. csv gives the coverage table;
    json the counts, the coverage records and the notes.
    """
    from oodeval.study import load_study

    check_output_path(output)
    study = load_study(directory, exclude_damaged=True)
    counts = study.counts()
    damaged = f"{counts['damaged']} damaged, " if counts["damaged"] else ""
    title = (
        f"study {study.config.get('name')}: {counts['done']} done, {counts['failed']} failed, "
        f"{damaged}{counts['pending']} pending (of {counts['planned']})"
    )
    coverage = study.coverage()
    if not coverage["damaged"].any():
        coverage = coverage.drop(columns="damaged")
    notes = _status_notes(study, directory)
    if fmt is OutputFormat.csv:
        text = render_frame(coverage, "csv")
    elif fmt is OutputFormat.json:
        text = to_json(
            {
                "study": study.config.get("name"),
                "counts": counts,
                "coverage": frame_records(coverage),
                "notes": notes,
            }
        )
    elif fmt is OutputFormat.markdown:
        bullets = "\n".join(f"- {n}" for n in notes)
        text = "\n\n".join([title, render_frame(coverage, "markdown"), bullets])
    else:
        rows = [[str(v) for v in row] for row in coverage.itertuples(index=False)]
        text = "\n".join([title, text_table(list(coverage.columns), rows), *notes])
    echo_output(text, output)


def _status_notes(study, directory: Path) -> list[str]:
    """The lines `study status` prints under the coverage table: notes, failures, damage, store."""
    from oodeval.study.integrity import printable

    notes = [study.data_note(), study.outside_note(), *study.code_notes()]
    lines = [f"note: {n}" for n in filter(None, notes)]
    failed = study.units[study.units["status"] == "failed"]
    for unit in failed.itertuples(index=False):
        lines.append(f"failed: {printable(unit.unit_key)}: {printable(unit.failure)}")
    health = study.health
    lines += [f"damaged: {key}: {reason}" for key, reason in health.damaged.items()]
    for key, reason in health.history_damage.items():
        lines.append(f"damaged: config history {key}: {reason} (`study run` sets it aside)")
    if not health.sqlite_ok:
        lines.append(f"store: SQLite's quick check FAILED: {health.sqlite_problem()}")
    if not health.trusted:
        lines.append(
            "damaged store: analyze and report refuse it; `oodeval study run` with the same "
            "config moves the damaged units aside and runs them again; `oodeval study verify "
            f"{directory}` lists every problem"
        )
    elif health.unverified:
        lines.append(f"store: {health.notes()[-1]}")
    else:
        lines.append(f"store: verified ({health.verified} units match their checksums)")
    return lines


@app.command("analyze")
@reports_errors
def analyze_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    exclude_damaged: bool = typer.Option(False, "--exclude-damaged", help=_EXCLUDE_HELP),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print the verdict, then write it, Table 1/5/6 and the Figure 1/5/6/7 numbers as CSV +
    markdown to DIR/analysis/.

    table and markdown print the verdict section of analysis.md and the files written; csv and
    json the verdict table (one row per measure). A store that fails verification is refused,
    naming the damaged units, unless --exclude-damaged is given.
    """
    from oodeval.study import load_study
    from oodeval.study.analysis import analyze, verdict_markdown, write_analysis

    check_output_path(output)
    study = load_study(directory, exclude_damaged=exclude_damaged)
    results = analyze(study)
    written = write_analysis(study, results=results)
    if fmt.value in ("csv", "json"):
        text = render_frame(results["verdict"], fmt.value)
    else:
        paths = [f"{name}: {path}" for name, path in written.items()]
        text = "\n".join([verdict_markdown(study, results), *paths])
    echo_output(text, output)
    for note in [*study.integrity_notes(), *study.code_notes()]:
        typer.echo(f"warning: {note}", err=True)
    if study.outside_note():
        typer.echo(f"note: {study.outside_note()}", err=True)
    if study.data_note() and fmt.value in ("csv", "json"):  # the verdict block has it otherwise
        typer.echo(f"note: {study.data_note()}", err=True)


@app.command("merge")
@reports_errors
def merge_command(
    inputs: list[Path] = typer.Argument(..., metavar="DIR", help="Study folders to merge."),
    out: Path = typer.Option(
        ..., "--out", metavar="DIR", help="Study folder to merge into (created, or resumed)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar."),
) -> None:
    """Merge study folders run apart (other machines, other algorithms or seeds) into one.

    The inputs' configs must be compatible: they may differ in algorithms, seeds, scenarios and
    imports, never in steps, model, data, trainer options or the hyperparameters of an algorithm
    two of them run. A unit found in several inputs is kept once when its results (result and
    checkpoint rows, hyperparameters) are identical, and refused when they differ; a done unit
    wins over a failed one. Damaged inputs are refused. Each unit is copied in its own
    transaction: an interrupted merge resumes when run again.
    """
    from oodeval.study.merge import merge_studies

    check_folder_path(out)

    # StudyInterrupted: the unit being copied was rolled back, its message says what is merged.
    with stops_on_ctrl_c("while reading the inputs; nothing was written"):
        summary = merge_studies(inputs, out, progress=progress)
    typer.echo(summary.line())


@app.command("verify")
@reports_errors
def verify_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Check a study store without changing it; exit 0 when clean, 1 when damage is found.

    Runs SQLite's full integrity check, checks the config's checksum and every unit's row counts
    and checksum, and counts rows that belong to no unit. Exit 1 also when units carry no
    checksum (a store of an older oodeval), 2 when DIR holds no study. Formats other than table
    give the report as (item, detail) rows.
    """
    from oodeval.study.store import verify_store

    check_output_path(output)
    report = verify_store(directory)
    echo_output(render_lines(report.lines(), fmt), output)
    raise typer.Exit(code=0 if report.clean else 1)


@app.command("estimate")
@reports_errors
def estimate_command(
    config: Path | None = typer.Argument(None, help="Study config (TOML); or use --preset."),
    preset_name: str | None = typer.Option(None, "--preset", help=_PRESET_HELP),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Workers (default: cores)."),
    algorithms: str | None = typer.Option(
        None,
        "--algorithms",
        help="Comma-separated algorithms to time at every sampled N (default ERM,MLDG,SagNet); "
        "the others are timed at the smallest N only.",
    ),
    steps_fraction: float = typer.Option(
        1.0, "--steps-fraction", help="Run the sample with this fraction of the steps."
    ),
    precision: str | None = typer.Option(None, "--precision", help=_PRECISION_HELP),
    tf32: str | None = typer.Option(None, "--tf32", help=_TF32_HELP),
    device: str | None = typer.Option(None, "--device", help=_DEVICE_HELP),
    sample_steps: int | None = typer.Option(
        None,
        "--n-sample-steps",
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
    import os

    from oodeval.study.estimate import estimate_study

    check_output_path(output)
    chosen = tuple(a.strip() for a in algorithms.split(",") if a.strip()) if algorithms else None
    # Ctrl-C: run_study's StudyInterrupted would say "run again to resume", but the sample lives
    # in a temporary folder that is removed, so the line says so instead.
    discarded = "the timing sample was discarded; run the same command again to re-estimate"
    study_config = _config(config, preset_name, precision, device, tf32)
    long_study = study_config.steps > LONG_STUDY_STEPS
    if sample_steps is None and steps_fraction == 1.0 and chosen is None and long_study:
        from oodeval.study.config import DEFAULT_BACKEND

        if study_config.backend == DEFAULT_BACKEND:  # whole units would take hours to sample
            sample_steps = DEFAULT_SAMPLE_STEPS
            typer.echo(
                f"note: {study_config.steps} steps per unit; timing {sample_steps} steps per "
                f"algorithm (--n-sample-steps {sample_steps}); --steps-fraction F times whole "
                "units instead",
                err=True,
            )
    with stops_on_ctrl_c(discarded, own_message=False):
        estimate = estimate_study(
            study_config,
            workers=workers or os.cpu_count() or 1,
            algorithms=chosen,
            steps_fraction=steps_fraction,
            progress=True,
            sample_steps=sample_steps,
        )
    if fmt is OutputFormat.table:
        text = estimate.summary()
    elif fmt is OutputFormat.json:
        text = to_json(
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
    else:
        text = render_frame(estimate.per_n, fmt.value)
    echo_output(text, output)
