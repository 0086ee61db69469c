"""The house rules of the layout (CONTRIBUTING.md), checked on the source so that they stay true.

- no module of oodeval/ over 1,000 lines (a smell check: modules are cut by concept, not by
  length), and no function over 60 lines (its docstring aside) outside oodeval/cli, whose
  commands read best as one screen of options;
- no import circle between oodeval's modules, imports inside functions ("lazy" ones) included
  (those under ``if TYPE_CHECKING:`` never run and are left out);
- a private name (``_x``) is imported only inside its sub-package (``oodeval.measures.*``
  shares its private helpers, as scikit-learn's ``sklearn.metrics._base``), never across
  sub-packages;
- no function's ``__signature__`` is rewritten: a command taking options a registry declares
  gets them from its Typer command class (`oodeval.cli._options`), not from a made-up
  signature.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "oodeval"
MAX_MODULE_LINES = 1000
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    """`oodeval.x.y` for oodeval/x/y.py and for oodeval/x/y/__init__.py."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_that_run(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    """Every import statement of `tree` except those under ``if TYPE_CHECKING:``."""
    type_only = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for statement in branch.body
        for node in ast.walk(statement)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in type_only
    ]


def imported_modules(name: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The oodeval modules `node` (in module `name`) loads: the named ones and their packages
    outside `name`'s own."""
    if isinstance(node, ast.Import):
        targets = {a.name for a in node.names}
    elif node.module is None or not node.module.startswith("oodeval"):
        return set()
    else:
        targets = {
            f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
            for a in node.names
        }
    found = set()
    for target in targets:
        parts = target.split(".")
        for end in range(1, len(parts) + 1):
            package = ".".join(parts[:end])
            if package in MODULES and not (name == package or name.startswith(package + ".")):
                found.add(package)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the oodeval modules it imports (at module level or inside functions)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = set().union(*(imported_modules(name, n) for n in imports_that_run(tree)))
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_is_over_1000_lines() -> None:
    long = {
        n: lines
        for n, p in MODULES.items()
        if (lines := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"these modules may hold more than one concept; split them by concept: {long}"


def function_lengths(path: Path) -> dict[str, int]:
    """Each function of `path` by qualified line: its body's line count without the docstring."""
    lengths = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            first = body[0]
            if (
                len(body) > 1
                and isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                first = body[1]
            start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))])
            lengths[f"{path.name}:{node.lineno} {node.name}"] = node.end_lineno - start + 1
    return lengths


def test_no_function_outside_the_cli_is_over_60_lines() -> None:
    long = {
        where: n
        for name, path in MODULES.items()
        if not name.startswith("oodeval.cli")
        for where, n in function_lengths(path).items()
        if n > MAX_FUNCTION_LINES
    }
    assert not long, f"split these functions into named steps: {long}"


def test_the_function_length_counts_the_body(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('def f():\n    """Doc."""\n' + "    x = 1\n" * 61, encoding="utf-8")
    assert function_lengths(probe) == {"probe.py:1 f": 61}


def test_no_import_circle_lazy_ones_included() -> None:
    assert not circles(import_graph())


def test_a_circle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def sub_package(name: str) -> str:
    """The sub-package a module belongs to: ``oodeval.measures`` for oodeval.measures.meta._units,
    the module itself for a top-level module such as ``oodeval._text``."""
    return ".".join(name.split(".")[:2])


def private_crossings(name: str, tree: ast.Module) -> list[str]:
    """The private names (``_x``) module `name` imports from outside its sub-package."""
    return [
        f"{node.module}.{a.name}"
        for node in imports_that_run(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("oodeval")
        for a in node.names
        if a.name.startswith("_")
        and not a.name.startswith("__")
        and f"{node.module}.{a.name}" not in MODULES
        and sub_package(node.module or "") != sub_package(name)
    ]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_name_crosses_sub_packages(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    crossing = private_crossings(name, tree)
    assert not crossing, f"{name} imports private names of another sub-package: {crossing}"


def test_a_private_name_may_be_shared_only_inside_its_sub_package() -> None:
    source = (
        "from oodeval.measures.meta._units import _dense_by_length\n"
        "from oodeval.measures._validation import _number_array\n"
        "from oodeval.results.longform import _helper\n"
        "from oodeval.measures import __version__\n"
    )
    found = private_crossings("oodeval.measures.domain", ast.parse(source))
    assert found == ["oodeval.results.longform._helper"]
    assert private_crossings("oodeval._text", ast.parse("from oodeval._json import _x\n")) == [
        "oodeval._json._x"
    ]


def signature_assignments(tree: ast.Module) -> list[int]:
    """The lines of `tree` that set a ``__signature__``: an assignment to the attribute (plain,
    annotated, augmented, in a tuple) or a ``setattr(x, "__signature__", ...)`` call."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(
                isinstance(part, ast.Attribute) and part.attr == "__signature__"
                for target in targets
                for part in ast.walk(target)
            ):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "__signature__"
        ):
            lines.append(node.lineno)
    return lines


def test_no_module_rewrites_a_signature() -> None:
    found = {
        name: lines
        for name, path in MODULES.items()
        if (lines := signature_assignments(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert not found, f"declare these options with Typer (oodeval/cli/_options.py): {found}"


def test_a_signature_rewrite_is_found() -> None:
    source = (
        "f.__signature__ = sig\n"
        "g.__signature__: object = sig\n"
        "a, h.__signature__ = 1, sig\n"
        "setattr(k, '__signature__', sig)\n"
        "sig = inspect.signature(f)\n"
        "setattr(k, '__doc__', 'x')\n"
    )
    assert signature_assignments(ast.parse(source)) == [1, 2, 3, 4]
