"""The API reference documents the public API, and only it, by its public paths.

The rule, over every ``::: IDENTIFIER`` block of the reference: the hand-written pages
(``docs/**/*.md``) and the page the build generates (``reference/api.md``, from
``docs/hooks/gen_reference.py``):

1. no identifier names a private module or name: no dotted part starts with ``_``
   (``oodeval.measures.meta._choice.Choice`` is refused; ``oodeval.measures.Choice`` is its path);
2. every identifier is ``MODULE.NAME`` with MODULE one of the documented packages
   (``API_MODULES`` of the hook: ``oodeval``, ``oodeval.measures``, ``oodeval.results``,
   ``oodeval.study``) and NAME in that package's ``__all__``: what a user imports, never where it
   happens to be defined;
3. every public name (not ``_``-prefixed) of each documented package's ``__all__`` is covered:
   ``MODULE.NAME`` itself, or the same object under an earlier package (``oodeval.score`` covers
   ``oodeval.results.score``);
4. no object is documented twice.

Only the documented packages are held to rule 3: a package missing from ``API_MODULES`` has no
section to cover, and rule 2 keeps any page from documenting it by a path of its own.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterable
from types import ModuleType

import pytest

from tests.requires import REPO, requires_module

DOCS = REPO / "docs"
IDENTIFIER = re.compile(r"^:::\s+(\S+)", re.MULTILINE)


def load_hook() -> ModuleType:
    requires_module("mkdocs")  # the hook imports mkdocs' File
    spec = importlib.util.spec_from_file_location(
        "gen_reference", DOCS / "hooks" / "gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def reference_pages(hook: ModuleType) -> dict[str, str]:
    """{page: markdown} of every page that can hold a ``:::`` block."""
    pages = {
        str(p.relative_to(DOCS)): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))
    }
    pages["reference/api.md"] = hook.api_page()
    return pages


def reference_problems(pages: dict[str, str], modules: Iterable[str]) -> list[str]:
    """Every break of the module docstring's four rules, one line each (empty: none)."""
    packages = {name: importlib.import_module(name) for name in modules}
    problems: list[str] = []
    documented: dict[int, str] = {}
    for page, text in pages.items():
        for ident in IDENTIFIER.findall(text):
            if any(part.startswith("_") for part in ident.split(".")):
                problems.append(f"{page}: {ident} names a private module or name")
                continue
            modname, _, name = ident.rpartition(".")
            package = packages.get(modname)
            if package is None or name not in getattr(package, "__all__", ()):
                problems.append(f"{page}: {ident} is not NAME of a documented package's __all__")
                continue
            obj = getattr(package, name)
            if id(obj) in documented:
                problems.append(f"{page}: {ident} is documented again (as {documented[id(obj)]})")
            documented[id(obj)] = ident
    for modname, package in packages.items():
        for name in package.__all__:
            if not name.startswith("_") and id(getattr(package, name)) not in documented:
                problems.append(f"{modname}.{name} is in __all__ but not in the reference")
    return problems


def test_the_reference_documents_exactly_the_public_exports() -> None:
    hook = load_hook()
    modules = [name for name, _ in hook.API_MODULES]
    assert modules[0] == "oodeval" and all(
        not part.startswith("_") for name in modules for part in name.split(".")
    )
    pages = reference_pages(hook)
    assert IDENTIFIER.findall(pages["reference/api.md"])  # the generated page has blocks
    assert reference_problems(pages, modules) == []


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ("::: oodeval.measures.meta._choice.Choice", "names a private module or name"),
        ("::: oodeval.measures.domain.worst", "is not NAME of a documented package's __all__"),
        ("::: oodeval.measures.worst_gap", "is not NAME of a documented package's __all__"),
        ("::: oodeval.measures.score", "is not NAME of a documented package's __all__"),
        ("::: oodeval.results.score", "is documented again (as oodeval.score)"),
    ],
)
def test_a_page_breaking_the_rule_is_caught(block: str, problem: str) -> None:
    hook = load_hook()
    modules = [name for name, _ in hook.API_MODULES]
    pages = reference_pages(hook)
    pages["extra.md"] = f"# Extra\n\n{block}\n"
    assert any(problem in p for p in reference_problems(pages, modules)), block


def test_a_name_left_out_is_caught() -> None:
    hook = load_hook()
    modules = [name for name, _ in hook.API_MODULES]
    pages = reference_pages(hook)
    pages["reference/api.md"] = pages["reference/api.md"].replace(
        "::: oodeval.measures.worst_plus_gap\n", ""
    )
    assert reference_problems(pages, modules) == [
        "oodeval.measures.worst_plus_gap is in __all__ but not in the reference"
    ]


def test_the_generated_page_follows_the_exports() -> None:
    """A name added to a package's ``__all__`` appears in the generated page by its public path."""
    hook = load_hook()
    paths = [p for _, entries in hook.api_entries() for p in entries]
    assert "oodeval.score" in paths and "oodeval.results.score" not in paths
    assert "oodeval.measures.Choice" in paths  # defined in oodeval.measures.meta._choice
    assert "oodeval.load_study" in paths  # defined in oodeval.study.store._read_model
    assert len(paths) == len(set(paths))
