"""Rules of the test suite itself, read from the source with `ast` (nothing is imported):

- no test module imports another test module (shared code lives in ``tests/helpers/``, fixtures
  in ``conftest.py``): a test module is collected on its own, and importing one drags in its
  tests, its module-level set-up and, for pytest, a second copy of them;
- no test module sleeps (``time.sleep``): a test waits for an event (a file, a pipe, a barrier, a
  signal), through `tests.helpers.waiting.wait_until` where it must poll;
- no test module reads a clock (``time.time``, ``time.monotonic``, ``time.perf_counter``...): no
  test may depend on speed, and a deadline that guards against a hang belongs to ``wait_until``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TEST_MODULES = sorted(TESTS.rglob("test_*.py"))  # tests/ and its sub-package folders
HELPERS = sorted((TESTS / "helpers").rglob("*.py"))

CLOCKS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
CLOCKS |= {"process_time", "process_time_ns", "sleep"}

#: (file relative to tests/, function) -> why it may call one of `CLOCKS`. The one entry is the
#: polling loop every test uses: its clock is the deadline that turns a hang into a failure, and
#: its sleep the pause between two looks; neither decides what the test asserts.
ALLOWED = {
    ("helpers/waiting.py", "wait_until"): "the one polling loop (deadline and poll interval)",
}


def _imported_test_modules(tree: ast.Module) -> list[str]:
    """Test modules that `tree` imports: ``tests.test_x``, ``tests.study.test_x``, ``.test_x``,
    ``from tests import test_x``, ``from tests.study import test_x``, function-level imports
    included."""

    def is_test_module(dotted: str) -> bool:
        return dotted.rsplit(".", 1)[-1].startswith("test_")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                a.name for a in node.names if a.name.startswith("tests.") and is_test_module(a.name)
            ]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            inside = module.startswith("tests.") or bool(node.level)
            if inside and is_test_module(module):
                found.append("." * node.level + module)
            elif module == "tests" or module.startswith("tests.") or node.level:
                found += [a.name for a in node.names if a.name.startswith("test_")]
    return found


def _clock_calls(tree: ast.Module) -> list[tuple[str, int, str]]:
    """(enclosing function, line, call) of each call of a `CLOCKS` function of `time`, whether
    reached as ``time.f`` (or an alias of the module) or imported by name."""
    modules = {"time"}
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            names |= {a.asname or a.name: a.name for a in node.names if a.name in CLOCKS}
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef) else function
            if isinstance(child, ast.Call):
                func = child.func
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr in CLOCKS
                    and isinstance(func.value, ast.Name)
                    and func.value.id in modules
                ):
                    found.append((function, child.lineno, f"{func.value.id}.{func.attr}"))
                elif isinstance(func, ast.Name) and func.id in names:
                    found.append((function, child.lineno, func.id))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@pytest.mark.parametrize("path", TEST_MODULES, ids=lambda p: p.relative_to(TESTS).as_posix())
def test_no_test_module_imports_another(path):
    imported = _imported_test_modules(_parse(path))
    assert not imported, (
        f"{path.name} imports test module(s) {imported}; move what they share to tests/helpers/"
    )


@pytest.mark.parametrize(
    "path", TEST_MODULES + HELPERS, ids=lambda p: p.relative_to(TESTS).as_posix()
)
def test_no_sleep_and_no_clock_outside_the_allow_list(path):
    name = path.relative_to(TESTS).as_posix()
    calls = [c for c in _clock_calls(_parse(path)) if (name, c[0]) not in ALLOWED]
    assert not calls, (
        f"{name} calls {[f'{call} (line {line}, in {fn})' for fn, line, call in calls]}: wait for "
        "an event (file, pipe, barrier, signal) or poll with tests.helpers.waiting.wait_until"
    )


def test_the_checks_catch_what_they_forbid():
    """Each rule fires on a tiny module breaking it, in every spelling it looks for."""
    imports = ast.parse(
        "import tests.test_a\nfrom tests.test_b import x\nfrom tests import test_c\n"
        "from .test_d import y\nfrom . import test_e\ndef f():\n    from tests.test_f import z\n"
        "from tests.helpers.studies import w\nimport tests.requires\n"
        "import tests.study.test_g\nfrom tests.study import test_h\n"
    )
    assert _imported_test_modules(imports) == [
        "tests.test_a",
        "tests.test_b",
        "test_c",
        ".test_d",
        "test_e",
        "tests.study.test_g",
        "test_h",
        "tests.test_f",  # ast.walk is breadth-first: the function's import comes last
    ]
    clocks = ast.parse(
        "import time\nimport time as t\nfrom time import sleep, monotonic as now\n"
        "time.sleep(1)\ndef f():\n    t.time()\n    sleep(0.5)\n    now()\n"
        "time.strftime('%Y')\nx = time.sleep\n"
    )
    assert _clock_calls(clocks) == [
        ("<module>", 4, "time.sleep"),
        ("f", 6, "t.time"),
        ("f", 7, "sleep"),
        ("f", 8, "now"),
    ]


def test_every_allowed_entry_still_exists():
    """An allow-list entry whose function is gone (or no longer reads a clock) is removed."""
    for (name, function), why in ALLOWED.items():
        calls = _clock_calls(_parse(TESTS / name))
        assert any(fn == function for fn, _, _ in calls), f"{name}::{function} ({why})"
