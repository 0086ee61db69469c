"""`oodeval study run`: run (or resume) a study, on the executor ``--executor`` names.

The executor options (``--ray-address``, ``--slurm-time``...) are not written here: they come
from the registered executor classes (`oodeval.study.executors.Executor.options`), so a new
executor's options appear without an edit of this file (`executor_command`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from oodeval._extras import require_extra
from oodeval._files import refuse_links
from oodeval._outputs import study_files
from oodeval._text import safe_text
from oodeval.cli._common import (
    check_folder_path,
    command_path,
    reports_errors,
    stops_on_ctrl_c,
)
from oodeval.cli._options import RegistryCommand, added_values, command_class, typer_option
from oodeval.cli.study.options import DEVICE_OPT, PRECISION_OPT, PRESET_OPT, TF32_OPT, study_config
from oodeval.errors import OodevalError
from oodeval.pool import MAX_WORKERS

if TYPE_CHECKING:  # the study stack is imported when the command runs
    from typer.core import TyperOption

    from oodeval.study import RunSummary, StudyConfig
    from oodeval.study.executors import Executor, ExecutorOption


ANALYZE_HELP = (
    "Then write DIR/analysis/ and print the verdict, as `oodeval study analyze DIR` does; the "
    "note on the data is then said once, in the verdict."
)


def run_command(
    ctx: typer.Context,
    config: Path | None = typer.Argument(None, help="Study config (TOML); or use --preset."),
    preset_name: str | None = PRESET_OPT,
    out: Path = typer.Option(
        ..., "--out", metavar="DIR", help="Study folder (results.sqlite goes here)."
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, max=MAX_WORKERS
    ),  # help: executor_command
    precision: str | None = PRECISION_OPT,
    tf32: str | None = TF32_OPT,
    device: str | None = DEVICE_OPT,
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run failed units again."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar."),
    report: bool = typer.Option(
        True, "--report/--no-report", help="Write DIR/report.html at the end."
    ),
    analyze: bool = typer.Option(False, "--analyze", help=ANALYZE_HELP),
    executor: str = typer.Option("local", "--executor"),  # help: executor_command
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

    check_folder_path(out)
    if report:  # refused now, not after the run (the store's own files: when it is opened)
        refuse_links(Path(out) / "report.html")
    written = [("the study store", p) for p in study_files(out)]
    if report:
        written.append(("the report", Path(out) / "report.html"))
    chosen = executor_from_options(executor, workers, added_values(ctx))
    outputs = [("--out", out), *written]
    config_ = study_config(config, preset_name, precision, device, tf32, outputs=outputs)
    _require_extras(config_, report)
    _print_device(config_, chosen)
    # StudyInterrupted says how many units are stored; a Ctrl-C before that, the fallback line.
    with stops_on_ctrl_c("before the study started; the store is unchanged"):
        summary = run_study(
            config_, out, retry_failed=retry_failed, progress=progress, executor=chosen
        )
    _print_summary(summary, out, note=not analyze)
    if analyze:
        from oodeval.cli.study.analyze import print_analysis

        print_analysis(Path(out))
    if report:
        _write_report(out)


def register(group: typer.Typer) -> None:
    """Add `run` to the `study` group, with every registered executor's options."""
    group.command("run", cls=executor_command())(reports_errors(run_command))


# -- the executor options ---------------------------------------------------------------------
def executor_command() -> type[RegistryCommand]:
    """The command class of `run_command`: after its own options, one option per option of
    every registered executor (shown under the executor's name), with the help of ``--workers``
    and ``--executor`` naming the registered executors."""
    from oodeval.study.executors import EXECUTOR_CLASSES

    classes = list(EXECUTOR_CLASSES.values())
    added = [executor_option(cls, option) for cls in classes for option in cls.options]
    helps = {"workers": _workers_help(classes), "executor": _executor_help(classes)}
    return command_class(added, helps=helps)


def executor_option(cls: type[Executor], option: ExecutorOption) -> TyperOption:
    """The ``oodeval study run`` option of `option`, an option of the executor `cls`."""
    info = typer.Option(
        option.default,
        option.flag,
        help=option.help,
        min=option.min,
        max=option.max,
        rich_help_panel=cls.name.capitalize(),
    )
    return typer_option(option.param_name, info, option.type | None)


def _workers_help(classes: list) -> str:
    """``--workers``: worker processes, and what it counts for the other executors."""
    others = "; ".join(f"{c.name}: {c.workers_help}" for c in classes if c.workers_help)
    return "Worker processes, default: all cores" + (f" ({others})." if others else ".")


def _executor_help(classes: list) -> str:
    names = [c.name for c in classes]
    listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
    return f"Where units run: {listed} (install the extra of that name)."


def executor_from_options(name: str, workers: int | None, values: dict[str, Any]) -> Executor:
    """The executor `name` built from ``--workers`` and the executor options given (`values`, by
    parameter name); an option of another executor is refused, naming both."""
    from oodeval.study.executors import EXECUTOR_CLASSES, make_executor

    fields: dict[str, Any] = {}
    for owner, cls in EXECUTOR_CLASSES.items():
        for option in cls.options:
            value = values.get(option.param_name, option.default)
            if value is None or value == option.default:
                continue
            if owner != name:
                raise OodevalError(
                    f"{option.flag} applies to --executor {owner} only (the executor is {name})"
                )
            fields[option.field] = value
    return make_executor(name, workers=workers, **fields)


# -- the steps of a run -----------------------------------------------------------------------
def _require_extras(config: StudyConfig, report: bool) -> None:
    """Before the store is made: the missing extras that would stop the run now, or at its end."""
    from oodeval.study.config import DEFAULT_BACKEND

    if config.backend == DEFAULT_BACKEND:
        require_extra("train", command_path())
    if report:
        require_extra("report", f"{command_path()}'s report (--no-report skips it)")


def _print_device(config: StudyConfig, executor: Executor) -> None:
    """Name the device on stderr when the config asks for a GPU and units train on this machine
    (one line and exit 2 when it is not here)."""
    from oodeval._torch import resolve_device

    device_spec = config.trainer.get("device", "cpu")
    if device_spec not in ("cpu", "auto") and not executor.trains_elsewhere:
        typer.echo(f"device: {resolve_device(device_spec)}", err=True)


def _print_summary(summary: RunSummary, out: Path, *, note: bool = True) -> None:
    """The config's changes, the units run and stored, and the data note (unless `note` is
    False: the verdict printed next says it)."""
    if summary.changes is not None and summary.changes.describe():
        typer.echo(safe_text(f"config: {summary.changes.describe()} (stored units are kept)"))
    typer.echo(
        safe_text(
            f"{summary.planned} units: {summary.skipped} already stored, {summary.ran} run "
            f"({summary.done} done, {summary.failed} failed) in {summary.wall_seconds:.1f} s; "
            f"store: {Path(out) / 'results.sqlite'}"
        )
    )
    if summary.data_note and note:
        typer.echo(safe_text(f"note: {summary.data_note}"))


def _write_report(out: Path) -> None:
    """Write DIR/report.html and print its path."""
    from oodeval.report.build import write_report

    with stops_on_ctrl_c(
        f"the study is stored; `oodeval report {out} --out {Path(out) / 'report.html'}` "
        "writes the report"
    ):
        path = write_report(out, Path(out) / "report.html")
    typer.echo(safe_text(f"report: {path.resolve()}"))
