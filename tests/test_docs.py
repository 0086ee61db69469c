"""The documentation: every tutorial runs as a reader would run it, and the site builds strictly.

Each page of `RUN_PAGES` is read top to bottom and its fenced blocks are run in order, in a fresh
temporary folder holding a copy of the repository's ``examples/`` (so ``examples/results.csv``
reads as it does from a clone):

- a ```` ```console ```` block: every line starting ``$ `` is a shell command (a trailing ``\\``
  continues it), run with bash; ``oodeval`` is the checkout's command (the console script beside
  this Python, or ``python -m oodeval.cli.main``). It must exit 0. The lines after a command are
  its printed output, compared (doctest-style, ``...`` matches anything) only when the block is
  marked ``<!-- docs-test: output -->``;
- a ```` ```python ```` block runs in one namespace per page; marked ``output``, its printed
  output must match the ```` ```text ```` block right after it;
- a block with a title (```` ```toml title="quick-short.toml" ````) is a file: it is written to
  the folder under that name before the next blocks run;
- ``<!-- docs-test: skip -->`` before a block leaves it out (an install command, a run too long
  for CI); every other block runs.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.requires import REPO, requires_module

DOCS = REPO / "docs"
RUN_PAGES = [
    DOCS / "getting-started.md",
    *sorted((DOCS / "tutorials").glob("*.md")),
    DOCS / "concepts" / "glossary.md",
    DOCS / "concepts" / "openworld-properties.md",
    DOCS / "howto" / "own-measure.md",
    DOCS / "howto" / "torchmetrics.md",
]
#: The optional extra's module a page's code imports (skipped without it, failed under CI).
PAGE_NEEDS = {"howto/torchmetrics.md": "torchmetrics"}
MARK = re.compile(r"<!--\s*docs-test:\s*([\w-]+)\s*-->")
FENCE = re.compile(r"^```(\w+)?(.*)$")
TITLE = re.compile(r'title="([^"]+)"')
CHECKER = doctest.OutputChecker()
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass
class Block:
    """One fenced block of a page: its language, text, title and the marks above it."""

    lang: str
    text: str
    line: int
    title: str | None = None
    marks: set[str] = field(default_factory=set)


def page_blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, in order, each with the ``docs-test`` marks just above it."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    marks: set[str] = set()
    i = 0
    while i < len(lines):
        mark = MARK.search(lines[i])
        fence = FENCE.match(lines[i])
        if mark:
            marks.add(mark.group(1))
        elif fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            title = TITLE.search(fence.group(2) or "")
            blocks.append(
                Block(
                    lang=fence.group(1) or "",
                    text="\n".join(lines[i + 1 : end]) + "\n",
                    line=i + 1,
                    title=title.group(1) if title else None,
                    marks=marks,
                )
            )
            marks = set()
            i = end
        elif lines[i].strip():
            marks = set()
        i += 1
    return blocks


def console_commands(text: str) -> list[tuple[str, str]]:
    """(command, expected output) of each ``$ `` line of a console block."""
    out: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        out.append((command, "\n".join(expected).strip() + "\n" if any(expected) else ""))
    return out


def reader_env(folder: Path) -> dict[str, str]:
    """The environment of a reader in `folder`: this checkout's ``oodeval`` first on PATH, no
    OODEVAL_MNIST (a stranger has none), plain uncoloured output of a fixed width."""
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    script = Path(sys.executable).with_name("oodeval")
    shim = bin_dir / "oodeval"
    if script.is_file():
        shim.symlink_to(script)
    else:
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m oodeval.cli.main "$@"\n')
        shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("OODEVAL_MNIST", "PYTHONPATH")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        PYTHONPATH=str(REPO),  # the checkout under test, not another install
        COLUMNS="100",
        NO_COLOR="1",
        TERM="dumb",
    )
    return env


def matches(expected: str, got: str) -> bool:
    return CHECKER.check_output(expected, got, FLAGS)


def page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def run_page(page: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(REPO / "examples", folder / "examples")
    env = reader_env(folder)
    monkeypatch.chdir(folder)
    for key in ("OODEVAL_MNIST",):
        monkeypatch.delenv(key, raising=False)
    namespace: dict = {"__name__": "__docs__"}
    blocks = page_blocks(page)
    for index, block in enumerate(blocks):
        where = f"{page_id(page)}:{block.line}"
        if "skip" in block.marks:
            continue
        if block.title:
            target = folder / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
        elif block.lang == "console":
            for command, expected in console_commands(block.text):
                proc = subprocess.run(
                    ["bash", "-c", f"set -euo pipefail; {command}"],
                    cwd=folder,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=1200,
                )
                assert proc.returncode == 0, (
                    f"{where}: `{command}` exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
                )
                if "output" in block.marks:
                    assert matches(expected, proc.stdout), (
                        f"{where}: `{command}` printed\n{proc.stdout}\nthe page shows\n{expected}"
                    )
        elif block.lang == "python":
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(block.text, where, "exec"), namespace)
            if "output" in block.marks:
                shown = blocks[index + 1] if index + 1 < len(blocks) else None
                assert shown is not None and shown.lang == "text", (
                    f"{where}: a python block marked output needs a ```text block after it"
                )
                assert matches(shown.text, printed.getvalue()), (
                    f"{where}: printed\n{printed.getvalue()}\nthe page shows\n{shown.text}"
                )


@pytest.mark.parametrize("page", RUN_PAGES, ids=page_id)
def test_page_runs_as_written(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if page_id(page) in PAGE_NEEDS:
        requires_module(PAGE_NEEDS[page_id(page)])
    run_page(page, tmp_path, monkeypatch)


def test_every_tutorial_runs_something() -> None:
    """A tutorial without a runnable block would pass without testing anything."""
    for page in (DOCS / "tutorials").glob("*.md"):
        runnable = [
            b
            for b in page_blocks(page)
            if "skip" not in b.marks and not b.title and b.lang in ("console", "python")
        ]
        assert runnable, f"{page_id(page)} has no block the test runs"


def test_the_block_reader_sees_marks_commands_and_files(tmp_path: Path) -> None:
    page = """Intro.

<!-- docs-test: skip -->
```console
$ pip install oodeval
```

```toml title="a.toml"
steps = 1
```

<!-- docs-test: output -->
```console
$ oodeval measures x \\
    --percent
out 1
$ echo hi
hi
```
"""
    page_file = tmp_path / "page.md"
    page_file.write_text(page, encoding="utf-8")
    blocks = page_blocks(page_file)
    assert [(b.lang, b.title, b.marks) for b in blocks] == [
        ("console", None, {"skip"}),
        ("toml", "a.toml", set()),
        ("console", None, {"output"}),
    ]
    assert console_commands(blocks[2].text) == [
        ("oodeval measures x  --percent", "out 1\n"),
        ("echo hi", "hi\n"),
    ]
    assert matches("a ... c\n", "a b b c\n") and not matches("a c\n", "a b c\n")


def test_the_measure_study_tutorial_is_the_quick_preset_shortened() -> None:
    """The tutorial's config differs from `--preset quick` only in its name and length, so the
    page keeps teaching the preset as it is."""
    from oodeval.study import config_from_dict, preset
    from oodeval.study.config.parsing import tomllib  # tomli before Python 3.11

    page = DOCS / "tutorials" / "measure-study.md"
    (toml,) = [b for b in page_blocks(page) if b.title == "quick-short.toml"]
    ours = config_from_dict(tomllib.loads(toml.text)).to_dict()
    quick = preset("quick").to_dict()
    changed = {k for k in quick if ours[k] != quick[k]}
    assert changed == {"name", "steps", "trainer", "hparams"}, changed
    assert ours["steps"] < quick["steps"]
    assert set(ours["trainer"]) == set(quick["trainer"]) == {"eval_every"}
    assert set(ours["hparams"]) == set(quick["hparams"])


def test_the_config_reference_defaults_are_the_parsers() -> None:
    """docs/reference/config.md shows `StudyConfig`'s field defaults: they must be what
    `config_from_dict` fills in for a key left out."""
    import dataclasses

    from oodeval.study import config_from_dict
    from oodeval.study.config import StudyConfig

    minimal = {"scenarios": ["sr-cmnist"], "algorithms": ["ERM"], "seeds": [0], "steps": 1}
    parsed = config_from_dict(minimal)
    for f in dataclasses.fields(StudyConfig):
        if f.name in minimal or f.name in ("source_identity", "name"):
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert getattr(parsed, f.name) == default, f.name


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: every page, the generated reference, no warning (a broken link,
    a docstring griffe cannot parse, a missing page)."""
    requires_module("mkdocs")
    requires_module("mkdocstrings")
    requires_module("material")
    requires_module("torchmetrics")  # the API reference documents oodeval.torchmetrics
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for page in ("reference/api", "reference/cli", "reference/config", "tutorials/openworld"):
        assert (tmp_path / "s" / page / "index.html").is_file(), page
    cli = (tmp_path / "s" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for path in command_paths():
        assert f"<code>{path}</code>" in cli, f"{path} is not in the CLI reference"
    api = (tmp_path / "s" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    import oodeval
    import oodeval.measures

    for module in (oodeval, oodeval.measures):
        for name in module.__all__:
            if not name.startswith("_"):
                assert f">{name}<" in api, f"{module.__name__}.{name} is not in the API reference"


def command_paths() -> list[str]:
    """``oodeval ...`` of every command of the app, groups included."""
    import typer.main

    from oodeval.cli.main import app

    def walk(command, path):
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not sub.hidden:
                yield from walk(sub, f"{path} {name}")

    return list(walk(typer.main.get_command(app), "oodeval"))


# --- the README: a landing page ---------------------------------------------------------------
README = REPO / "README.md"


def test_the_readme_is_a_landing_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    (commands,) = [b for b in _readme_blocks() if "scripts/demo.sh" in b.text]
    assert [line.split("#")[0].strip() for line in commands.text.splitlines()] == [
        "bash scripts/demo.sh",
        "bash scripts/test.sh",
    ]
    assert (REPO / "scripts" / "demo.sh").is_file() and (REPO / "scripts" / "test.sh").is_file()
    for page in (README, DOCS / "getting-started.md", DOCS / "index.md"):
        assert "oodeval.score(" in page.read_text(encoding="utf-8"), page


def test_the_readme_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert "docs/getting-started.md" in targets and "CONTRIBUTING.md" in targets
    for needed in ("LICENSE", "NOTICE", "CITATION.cff", "docs/howto/data.md"):
        assert needed in targets, f"README does not link to {needed}"
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_the_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's ten lines, run from a folder holding examples/ (as from a clone)."""
    (block,) = [b for b in _readme_blocks() if b.lang == "python"]
    assert len(block.text.strip().splitlines()) <= 10
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.text, "README.md", "exec"), {"__name__": "__readme__"})
    assert "worst+gap" in printed.getvalue()


def _readme_blocks() -> list[Block]:
    return page_blocks(README)
