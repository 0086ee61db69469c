"""Fixtures for the shared data beside the checkout (skipped when absent, failed under CI=true)
and for the real MNIST test set (../shared, else the copy bundled with oodeval)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oodeval.environments.mnist import MNIST_ENV_VAR, bundled_mnist_dir
from tests.requires import DOMAINBED_SWEEP, MNIST_DIR, requires_path


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The real MNIST test set (IDX files): ../shared/data/mnist when present, else the copy
    bundled with oodeval (the same bytes: tests/environments/test_bundled_mnist.py)."""
    if (MNIST_DIR / "t10k-images-idx3-ubyte.gz").is_file():
        return MNIST_DIR
    return bundled_mnist_dir()


@pytest.fixture(scope="session")
def domainbed_sweep() -> Path:
    """DomainBed's VLCS sweep fixture at ../shared/fixtures/domainbed-vlcs-sweep."""
    return requires_path(DOMAINBED_SWEEP, "the DomainBed sweep fixture")


@pytest.fixture()
def bare_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory as on a bare install: no ../shared beside it, no OODEVAL_MNIST (so
    the source ``auto`` is the MNIST test set bundled with oodeval)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.delenv(MNIST_ENV_VAR, raising=False)
    monkeypatch.chdir(work)
    return work


@pytest.fixture(autouse=True)
def _measure_registry_restored() -> Iterator[None]:
    """Measures a test registers (directly, or by importing a user's measure file, as a docs page
    does) are removed after it: the registry is process-wide, and a leaked plain measure joins
    every later default set (the goldens' outputs included)."""
    from oodeval.measures.registry import FAMILIES, REGISTRY, unregister_measure

    before = set(REGISTRY) | set(FAMILIES)
    yield
    for name in (set(REGISTRY) | set(FAMILIES)) - before:
        unregister_measure(name)
