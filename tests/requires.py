"""One rule for tests that need something from outside the repository: skip here, fail in CI.

A test needing an optional extra (``pip install 'oodeval[ray]'``...) or the shared data beside the
checkout (``../shared``: real MNIST, the DomainBed sweep fixture) calls `requires_module` or
`requires_path` (tests/conftest.py wraps the shared data in fixtures). When the thing is missing
the test is skipped with a reason naming it, unless the environment variable ``CI`` is set (to
anything but ``""``/``0``/``false``/``no``): CI installs every extra and provides ``../shared``, so
there a missing one is a failure, never a silent skip. Our own modules are imported plainly: a
broken import of ``oodeval`` code must fail, not skip.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from oodeval._extras import EXTRAS as PACKAGE_EXTRAS

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
MNIST_DIR = SHARED / "data" / "mnist"
DOMAINBED_SWEEP = SHARED / "fixtures" / "domainbed-vlcs-sweep"

#: The optional extras of pyproject.toml's [project.optional-dependencies], by the top-level module
#: each provides (what a test or a module imports): the package's own map, plus the test and docs
#: extras.
EXTRAS: dict[str, str] = {
    **PACKAGE_EXTRAS,
    "selenium": "test",
    "mkdocs": "docs",
    "mkdocstrings": "docs",
    "material": "docs",
}


def in_ci() -> bool:
    """Whether the suite runs as CI (``CI`` set, as `.ci/run` and most CI systems do)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test (or module) for `reason`; fail instead when running as CI."""
    if in_ci():
        pytest.fail(f"{reason}; CI=true, so this test must run, not skip", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The optional extra whose absence raised `exc`, or None when it is not an extra's module."""
    top = (exc.name or "").split(".")[0]
    return EXTRAS.get(top)


def requires_module(name: str) -> ModuleType:
    """Import and return third-party module `name` of an optional extra (see `EXTRAS`).

    Missing: skipped with the extra's name, or failed under CI. A module found but broken raises.
    """
    top = name.split(".")[0]
    if top not in EXTRAS:
        raise ValueError(f"{name} is not the module of an optional extra; import it plainly")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != top:
            raise
        absent = exc.name
    unavailable(
        f"the optional extra '{EXTRAS[top]}' is not installed (no module {absent!r}; "
        f"pip install 'oodeval[{EXTRAS[top]}]')"
    )


def requires_path(path: Path, what: str) -> Path:
    """Return `path` when it exists; else skip (fail under CI) naming `what` and where it was."""
    if not path.exists():
        unavailable(f"{what} not found at {path} (../shared beside the checkout)")
    return path
