"""Adding an executor or a command is one new module: a toy of each, added the way CONTRIBUTING.md
says, shows up in ``--help`` and runs.

- An executor: a frozen dataclass subclass of `Executor` decorated with `register_executor`
  (what a new module in oodeval/study/executors/ holds). `oodeval study run` takes its options,
  refuses them for another executor, and runs the study on it; the missing-extra line comes
  from the class.
- A command: a module with ``register(parent)``, listed in `oodeval.cli.main.COMMAND_MODULES`.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import typer
from typer.testing import CliRunner

from oodeval._extras import MissingExtra
from oodeval.cli.main import COMMAND_MODULES, app, build_app
from oodeval.errors import OodevalError
from oodeval.study import load_study
from oodeval.study.config import StudyConfig
from oodeval.study.executors import (
    EXECUTOR_CLASSES,
    Executor,
    ExecutorOption,
    LocalExecutor,
    UnitStream,
    make_executor,
    register_executor,
)
from oodeval.study.worker import UnitTask

runner = CliRunner()

# 8 units of the synthetic backend (milliseconds each); IRM's units fail, as a unit raising does.
STUDY_TOML = """
name = "toy-executor"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM"]
seeds = [0, 1]
steps = 10
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 },
             { family = "synthetic", ratio = "4:1", scale = 2 }]
[unit_options]
fail_algorithms = ["IRM"]
"""


@pytest.fixture
def executor_registry():
    """The registry as it was before the test: the toy classes a test registers are removed."""
    saved = dict(EXECUTOR_CLASSES)
    yield EXECUTOR_CLASSES
    for name in set(EXECUTOR_CLASSES) - set(saved):
        EXECUTOR_CLASSES.remove(name)
    assert dict(EXECUTOR_CLASSES) == saved


def _register_toy(calls: list) -> type[Executor]:
    """Register ``inline``: the local executor with one worker, recording each run's tag."""

    @register_executor
    @dataclass(frozen=True)
    class InlineExecutor(Executor):
        """One local worker process; records ``(tag, number of units)`` of every run."""

        workers: int | None = None
        tag: str = "untagged"
        name: ClassVar[str] = "inline"
        options: ClassVar[tuple[ExecutorOption, ...]] = (
            ExecutorOption("--inline-tag", "tag", str, "A label the toy executor records."),
        )
        workers_help: ClassVar[str | None] = "toy workers"

        def run(
            self, config: StudyConfig, tasks: Sequence[UnitTask], directory: Path
        ) -> UnitStream:
            calls.append((self.tag, len(tasks)))
            yield from LocalExecutor(workers=1).run(config, tasks, directory)

    return InlineExecutor


def test_a_registered_executor_adds_its_options_to_study_run(executor_registry):
    toy = _register_toy([])
    assert list(executor_registry)[-1] == "inline"
    assert make_executor("inline", workers=2, tag="x") == toy(workers=2, tag="x")
    shown = runner.invoke(build_app(), ["study", "run", "--help"], terminal_width=250)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "--inline-tag <str> A label the toy executor records." in text
    assert "Where units run: local, ray, slurm or inline (install the extra" in text
    assert "(ray: CPUs of a local instance; slurm: jobs running at once; inline: toy workers)" in (
        text
    )
    # the app built before the registration does not know it
    assert "--inline-tag" not in runner.invoke(app, ["study", "run", "--help"]).output


def test_a_registered_executor_runs_the_study(tmp_path, executor_registry):
    calls: list = []
    _register_toy(calls)
    config = tmp_path / "study.toml"
    config.write_text(STUDY_TOML, encoding="utf-8")
    cli = build_app()
    args = ["study", "run", str(config), "--no-report", "--no-progress"]

    refused = runner.invoke(cli, [*args, "--out", str(tmp_path / "a"), "--inline-tag", "t"])
    assert refused.exit_code == 2
    assert "error: --inline-tag applies to --executor inline only (the executor is local)" in (
        refused.output
    )
    assert calls == [] and not (tmp_path / "a").exists()

    out = tmp_path / "s"
    done = runner.invoke(
        cli, [*args, "--out", str(out), "--executor", "inline", "--inline-tag", "t"]
    )
    assert done.exit_code == 0, done.output
    assert calls == [("t", 8)]
    counts = load_study(out).counts()
    assert (counts["done"], counts["failed"], counts["pending"]) == (4, 4, 0)


def test_the_missing_extra_line_comes_from_the_executor_class(tmp_path, executor_registry):
    @register_executor
    @dataclass(frozen=True)
    class NeedyExecutor(Executor):
        name: ClassVar[str] = "needy"
        extra: ClassVar[str | None] = "needy"
        extra_module: ClassVar[str | None] = "oodeval_test_module_that_is_not_installed"

        def run(self, config, tasks, directory):  # pragma: no cover - check() refuses first
            yield from ()

    with pytest.raises(MissingExtra) as info:
        make_executor("needy").check()
    assert str(info.value) == (
        "the needy executor needs the 'needy' extra (oodeval_test_module_that_is_not_installed "
        "is not installed); install it with: pip install 'oodeval[needy]'"
    )
    with pytest.raises(OodevalError, match="an executor named 'needy' is already registered by "):
        register_executor(type("Other", (NeedyExecutor,), {}))


def test_a_command_module_is_its_register_function():
    toy = types.ModuleType("toy_command")

    def hello_command(who: str = typer.Argument(..., help="Whom to greet.")) -> None:
        """Greet WHO."""
        typer.echo(f"hello {who}")

    def register(parent: typer.Typer) -> None:
        parent.command("hello")(hello_command)

    toy.register = register  # type: ignore[attr-defined]
    cli = build_app((*COMMAND_MODULES, toy))
    assert runner.invoke(cli, ["hello", "you"]).output == "hello you\n"
    listed = runner.invoke(cli, ["--help"]).output
    assert "hello" in listed and "Greet WHO." in listed
    assert "hello" not in runner.invoke(app, ["--help"]).output.split()
