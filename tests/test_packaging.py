"""The package's metadata: one version, the extras the code names, the files a release carries.

scripts/check_wheel.sh builds and installs the wheel for real (CI runs it); these are the quick
checks of what it relies on.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

import oodeval
from oodeval._extras import EXTRAS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]


def requirement_name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (PEP 503)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_version_is_written_once():
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "oodeval.__version__"
    source = (REPO / "oodeval" / "__init__.py").read_text(encoding="utf-8")
    # a literal, so setuptools reads it without importing the package
    assert re.search(rf'^__version__ = "{re.escape(oodeval.__version__)}"$', source, re.M)
    others = [
        path.relative_to(REPO)
        for path in (REPO / "oodeval").rglob("*.py")
        if path.name != "__init__.py" or path.parent != REPO / "oodeval"
        if re.search(r"^__version__\s*=", path.read_text(encoding="utf-8"), re.M)
    ]
    assert others == []


def test_the_license_is_an_spdx_expression_with_its_files():
    assert PROJECT["license"] == "MIT"
    assert "LICENSE" in PROJECT["license-files"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "the oodeval contributors" in text
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])  # PEP 639
    build = PYPROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in build)


def test_scoring_needs_no_plotting_training_or_templating_dependency():
    core = {requirement_name(r) for r in PROJECT["dependencies"]}
    assert core >= {"numpy", "scipy", "pandas", "typer"}
    assert not core & {"matplotlib", "jinja2", "pillow", "scikit-learn", "torch"}


def test_every_extra_module_comes_with_its_extra():
    extras = {
        name: {requirement_name(r) for r in reqs}
        for name, reqs in PROJECT["optional-dependencies"].items()
    }
    provided = importlib.metadata.packages_distributions()
    checked = 0
    for module, extra in EXTRAS.items():
        assert extra in extras, f"{module}: no extra named {extra!r} in pyproject.toml"
        dists = {requirement_name(d) for d in provided.get(module, [])}
        if not dists:  # not installed here: its distribution cannot be looked up
            continue
        assert dists & extras[extra], f"{module} ({dists}) is not in the {extra!r} extra"
        checked += 1
    assert checked >= 4  # torch, matplotlib, jinja2, PIL, sklearn are installed for the tests
    everything = " ".join(PROJECT["optional-dependencies"]["all"])
    for extra in ("report", "train", "corruptions", "ray", "slurm", "clip"):
        assert extra in everything, f"'all' lacks {extra}"


def test_package_data_and_typing_marker():
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["oodeval"]
    assert {"report/templates/*", "py.typed", "data/mnist/*"} <= set(data)
    assert (REPO / "oodeval" / "py.typed").is_file()
    assert list((REPO / "oodeval" / "report" / "templates").glob("*.j2"))
    assert "Typing :: Typed" in PROJECT["classifiers"]


def test_project_urls_and_citation():
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Changelog", "Issues"}
    citation = (REPO / "CITATION.cff").read_text(encoding="utf-8")
    assert re.search(r"^cff-version: 1\.2\.0$", citation, re.M)
    assert re.search(rf"^version: {re.escape(oodeval.__version__)}$", citation, re.M)
    for title in (
        "Towards a Better Evaluation of Out-of-Domain Generalization",
        "OpenworldAUC: Towards Unified Evaluation and Optimization for Open-world Prompt Tuning",
        "NICO++: Towards Better Benchmarking for Domain Generalization",
    ):
        assert title in citation


@pytest.mark.parametrize("path", ["tests", "examples", "scripts", "docs", "benchmarks"])
def test_the_sdist_manifest_grafts_the_folders_the_tests_need(path):
    manifest = (REPO / "MANIFEST.in").read_text(encoding="utf-8").split()
    assert path in manifest
