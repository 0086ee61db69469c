"""The options a registry declares (an executor's, a family's parameters) are options as a
command function's own parameter declares them: a throw-away executor and family registered here
read in ``--help`` and are checked as the same options written out as parameters of a plain Typer
command (the reference), sit where they belong, and their values reach the executor and the
family builder as Typer passes a parameter's value (a repeated option: a list)."""

from __future__ import annotations

import json
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

import oodeval.cli.main
import oodeval.study
from oodeval.cli.envs import envs_app
from oodeval.cli.main import build_app
from oodeval.environments import FAMILIES
from oodeval.environments.colored import build_colored
from oodeval.environments.families import Family
from oodeval.errors import OodevalError
from oodeval.study.config import StudyConfig
from oodeval.study.executors import (
    EXECUTOR_CLASSES,
    Executor,
    ExecutorOption,
    UnitStream,
    register_executor,
)
from oodeval.study.worker import UnitTask

runner = CliRunner()
WIDTH = 100
LEVEL_HELP = "Levels of the toy executor."


@dataclass(frozen=True)
class ToyExecutor(Executor):
    """Never runs: the tests stop the study before it would."""

    workers: int | None = None
    level: int = 2
    rate: float | None = None
    label: str | None = None
    name: ClassVar[str] = "toy"
    options: ClassVar[tuple[ExecutorOption, ...]] = (
        ExecutorOption("--toy-level", "level", int, LEVEL_HELP, default=2, min=1, max=5),
        ExecutorOption("--toy-rate", "rate", float, "A rate.", min=0.0, max=1.0),
        ExecutorOption("--toy-label", "label", str, "A label."),
    )

    def run(self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path) -> UnitStream:
        raise AssertionError("the toy executor never runs")
        yield


@pytest.fixture
def toy_executor():
    """``toy`` registered for the test, removed after it."""
    saved = dict(EXECUTOR_CLASSES)
    register_executor(ToyExecutor)
    yield ToyExecutor
    EXECUTOR_CLASSES.remove("toy")
    assert dict(EXECUTOR_CLASSES) == saved


def executor_reference() -> typer.Typer:
    """The toy executor's options written out as a plain command's parameters."""
    app = typer.Typer(rich_markup_mode=None)

    @app.command()
    def run(
        toy_level: int | None = typer.Option(2, "--toy-level", min=1, max=5, help=LEVEL_HELP),
        toy_rate: float | None = typer.Option(None, "--toy-rate", min=0.0, max=1.0, help="A rate."),
        toy_label: str | None = typer.Option(None, "--toy-label", help="A label."),
    ) -> None:
        """The reference."""

    return app


def option_entries(help_text: str) -> dict[str, str]:
    """Each option of a ``--help`` text by its first flag: its lines joined, spaces collapsed
    (the column width depends on the longest option of the command)."""
    entries: dict[str, list[str]] = {}
    lines = help_text.split("Options:", 1)[1].splitlines()
    for line in lines:
        if line.startswith("  -"):
            flag = line.split()[0].rstrip(",")
            entries[flag] = [line]
        elif line.strip() and entries:
            entries[list(entries)[-1]].append(line)
    return {flag: " ".join(" ".join(parts).split()) for flag, parts in entries.items()}


def usage_error(app: typer.Typer, args: list[str]) -> str:
    """The "Invalid value ..." line click prints for `args`."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    return next(line for line in result.output.splitlines() if "Invalid value" in line)


def test_an_executor_option_reads_and_checks_as_a_declared_option(toy_executor):
    cli = build_app()
    shown = runner.invoke(cli, ["study", "run", "--help"], terminal_width=WIDTH).output
    reference = runner.invoke(executor_reference(), ["--help"], terminal_width=WIDTH).output
    ours, theirs = option_entries(shown), option_entries(reference)
    flags = ["--toy-level", "--toy-rate", "--toy-label"]
    assert [ours[f] for f in flags] == [theirs[f] for f in flags]
    assert theirs["--toy-level"].startswith("--toy-level <int range> Levels of the toy executor.")
    # after the options of the executors registered before it, the help option last
    assert list(ours)[-5:] == ["--slurm-cluster", *flags, "--help"]
    assert "Where units run: local, ray, slurm or toy (install" in " ".join(shown.split())
    for args in (["--toy-level", "9"], ["--toy-rate", "-0.5"], ["--toy-level", "x"]):
        run_args = ["study", "run", "--preset", "quick", "--out", "unused", *args]
        assert usage_error(cli, run_args) == usage_error(executor_reference(), args)


def test_a_bad_executor_option_is_one_error_line(toy_executor, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(oodeval.cli.main, "app", build_app())
    out = tmp_path / "s"
    args = ["study", "run", "--preset", "quick", "--out", str(out), "--toy-level", "6"]
    assert oodeval.cli.main.run(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: Invalid value for '--toy-level': Input should be less than or equal to 5; "
        "see 'oodeval study run --help'\n"
    )
    assert not out.exists()


def test_executor_option_values_reach_the_executor(toy_executor, monkeypatch, tmp_path):
    seen: list[Executor] = []

    def stop(config: Any, out: Any, *, executor: Executor, **_: Any) -> None:
        seen.append(executor)
        raise OodevalError("stopped before the store")

    monkeypatch.setattr(oodeval.study, "run_study", stop)
    cli = build_app()
    base = ["study", "run", "--preset", "quick", "--out", str(tmp_path / "s"), "--no-report"]
    given = ["--executor", "toy", "--workers", "3", "--toy-level", "4", "--toy-rate", "0.25"]
    for args in ([*given, "--toy-label", "x"], ["--executor", "toy"]):
        result = runner.invoke(cli, [*base, *args])
        assert result.exit_code == 2 and "error: stopped before the store" in result.output
    assert seen == [ToyExecutor(workers=3, level=4, rate=0.25, label="x"), ToyExecutor()]
    refused = runner.invoke(cli, [*base, "--toy-label", "x"])
    assert "error: --toy-label applies to --executor toy only (the executor is local)" in (
        refused.output
    )
    assert len(seen) == 2


def test_an_executor_option_named_like_a_command_option_is_refused():
    @dataclass(frozen=True)
    class Clashing(ToyExecutor):
        name: ClassVar[str] = "clashing"
        options: ClassVar[tuple[ExecutorOption, ...]] = (
            ExecutorOption("--out", "label", str, "Hides the study folder."),
        )

    saved = dict(EXECUTOR_CLASSES)
    register_executor(Clashing)
    try:
        cli = build_app()  # the command is built when the app runs
        with pytest.raises(TypeError, match="^option --out clashes with --out: both take 'out'$"):
            runner.invoke(cli, ["study", "run", "--help"])
    finally:
        EXECUTOR_CLASSES.remove("clashing")
    assert dict(EXECUTOR_CLASSES) == saved


RECORDED: list[dict[str, Any]] = []


def build_recording(
    *,
    source: str = "digits",
    seed: int = 0,
    level: int = 2,
    tags: Sequence[str] = ("plain",),
    loud: bool = False,
):
    """Colored digits; records the keywords it is called with.

    Parameters
    ----------
    source : spec
        The images.
    seed : int
        The seed.
    level : int
        Level of the toy.
    tags : sequence of str
        Tags of the toy.
    loud : bool
        A switch of the toy.
    """
    RECORDED.append({"source": source, "seed": seed, "level": level, "tags": tags, "loud": loud})
    return build_colored(source=source, seed=seed)


@pytest.fixture
def recording_family(monkeypatch):
    """The family ``rec`` registered for the test (the registry restored after it)."""
    monkeypatch.setitem(FAMILIES, "rec", Family("rec", build_recording, "records its call"))
    RECORDED.clear()
    yield RECORDED
    RECORDED.clear()


def family_reference() -> typer.Typer:
    """The family ``rec``'s options as `oodeval envs` documents family parameters (described
    from the builder's docstring, the families taking each in parentheses, a repeated option
    saying so), written out as a plain command's parameters."""
    app = typer.Typer(rich_markup_mode=None)

    @app.command()
    def show(
        level: int | None = typer.Option(
            None, "--level", help="Level of the toy. (rec)", show_default=False
        ),
        tags: typing.Optional[list[str]] = typer.Option(  # noqa: UP045 (as Typer reads it)
            None,
            "--tags",
            metavar="<str>",
            help="Tags of the toy. Repeat the option for several values. (rec)",
            show_default=False,
        ),
        loud: bool | None = typer.Option(
            None, "--loud/--no-loud", help="A switch of the toy. (rec)", show_default=False
        ),
    ) -> None:
        """The reference."""

    return app


def test_a_family_parameter_reads_and_checks_as_a_declared_option(recording_family):
    shown = runner.invoke(envs_app(), ["show", "--help"], terminal_width=WIDTH).output
    reference = runner.invoke(family_reference(), ["--help"], terminal_width=WIDTH).output
    ours, theirs = option_entries(shown), option_entries(reference)
    flags = ["--level", "--tags", "--loud"]
    assert [ours[f] for f in flags] == [theirs[f] for f in flags]
    assert theirs["--tags"].startswith("--tags <str> Tags of the toy. Repeat the option")
    # the family parameters come right after --seed, in their families' order
    order = list(ours)
    assert order.index("--seed") < order.index("--ratio") < order.index("--level")
    assert order.index("--loud") < order.index("-f")
    families = "sr-cmnist, cmnist, colored, lined, corrupted, domains, rec"
    assert f"family <str> Family: {families}." in " ".join(shown.split())
    bad = ["--level", "many"]
    assert usage_error(envs_app(), ["show", "rec", *bad]) == usage_error(family_reference(), bad)
    assert RECORDED == []


def test_family_parameter_values_reach_the_builder(recording_family):
    given = ["--level", "3", "--tags", "a", "--tags", "b", "--loud", "-f", "json"]
    for args in (given, ["-f", "json"], ["--no-loud", "--seed", "4", "-f", "json"]):
        result = runner.invoke(envs_app(), ["show", "rec", "--source", "digits", *args])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["given"]
    assert RECORDED == [
        {"source": "digits", "seed": 0, "level": 3, "tags": ["a", "b"], "loud": True},
        {"source": "digits", "seed": 0, "level": 2, "tags": ("plain",), "loud": False},
        {"source": "digits", "seed": 4, "level": 2, "tags": ("plain",), "loud": False},
    ]
    assert type(RECORDED[0]["tags"]) is list  # as Typer passes a repeated option
