"""Every command's --help, as a user reads it: text printed as written, paragraphs reflowed to
the terminal, files and folders shown as such.

The app prints plain help (``rich_markup_mode=None``, oodeval/cli/main.py): Rich markup ate
"[trainer]" (a TOML table) and kept the docstrings' line breaks, so a paragraph broke
mid-sentence at every source line. The commands are found by walking the Typer app, so a new
command is checked without editing this file.
"""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from oodeval.cli.main import app

runner = CliRunner()
WIDE = 250  # columns: wide enough that every short paragraph fits on one line

#: Options that name a file or folder even where their Python type is str.
PATH_OPTIONS = {
    "--output",
    "--out",
    "--curve",
    "--cache-dir",
    "--train-out",
    "--test-out",
    "--model",
    "--predictions",
}


def _walk(command, path: tuple[str, ...] = ()):
    yield " ".join(path), command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _walk(sub, (*path, name))


COMMANDS = dict(_walk(typer.main.get_command(app)))


def _help(name: str, width: int = 100) -> str:
    args = [*name.split(), "--help"] if name else ["--help"]
    result = runner.invoke(app, args, terminal_width=width, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _source_texts(command) -> list[str]:
    """The command's own help text and its parameters' help, as written in the source."""
    texts = [inspect.cleandoc(command.help or "")]
    texts += [p.help for p in command.params if getattr(p, "help", None)]
    return texts


def test_the_walk_finds_the_commands():
    assert {"measures", "study run", "study estimate", "import domainbed", "report"} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_brackets_print_literally(name):
    shown = _squeezed(_help(name))
    bracketed = [
        token for text in _source_texts(COMMANDS[name]) for token in re.findall(r"\[[^\]]+\]", text)
    ]
    for token in bracketed:
        assert _squeezed(token) in shown, f"{name}: {token!r} is not in the help"


def test_the_trainer_table_is_named_in_study_help():
    # the case the issue reported: "overrides [trainer] device" printed as "overrides device"
    for name in ("study run", "study estimate"):
        text = " ".join(_help(name).split())
        assert "overrides [trainer] device" in text, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_paragraphs_reflow(name):
    # On a wide terminal each short paragraph of the docstring is one line: the source's line
    # breaks are not kept (they broke sentences in the middle on any other width).
    lines = [" ".join(line.split()) for line in _help(name, WIDE).splitlines()]
    for paragraph in inspect.cleandoc(COMMANDS[name].help or "").split("\n\n"):
        flat = " ".join(paragraph.split())
        if "\b" in paragraph or len(flat) > WIDE - 20:
            continue
        assert flat in lines, f"{name}: paragraph not on one line: {flat[:60]}..."


def _is_path(param) -> bool:
    annotation = param.type_descriptor.annotation
    kinds = {annotation, *typing.get_args(annotation)}
    kinds |= {a for k in list(kinds) for a in typing.get_args(k)}  # list[Path]
    return Path in kinds or any(opt in PATH_OPTIONS for opt in getattr(param, "opts", []))


@pytest.mark.parametrize("name", sorted(n for n, c in COMMANDS.items() if c.params))
def test_files_and_folders_show_as_paths(name):
    command = COMMANDS[name]
    ctx = command.make_context(name or "oodeval", [], resilient_parsing=True)
    for param in command.params:
        if getattr(param, "hidden", False) or not _is_path(param):
            continue
        shown = param.get_help_record(ctx)[0]
        assert "<str>" not in shown and "TEXT" not in shown, f"{name}: {shown}"
        # FILE, DIR, PATH (our metavars) or typer's <path>, <list[Path]>...
        assert re.search(r"path|file|dir", shown.split()[-1], re.IGNORECASE), f"{name}: {shown}"
