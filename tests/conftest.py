"""Fixtures for the shared data beside the checkout (skipped when absent, failed under CI=true)
and for the real MNIST test set (../shared, else the copy bundled with oodeval)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oodeval.environments.mnist import bundled_mnist_dir
from tests.requires import DOMAINBED_SWEEP, MNIST_DIR, requires_path


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The real MNIST test set (IDX files): ../shared/data/mnist when present, else the copy
    bundled with oodeval (the same bytes: tests/test_bundled_mnist.py)."""
    if (MNIST_DIR / "t10k-images-idx3-ubyte.gz").is_file():
        return MNIST_DIR
    return bundled_mnist_dir()


@pytest.fixture(scope="session")
def domainbed_sweep() -> Path:
    """DomainBed's VLCS sweep fixture at ../shared/fixtures/domainbed-vlcs-sweep."""
    return requires_path(DOMAINBED_SWEEP, "the DomainBed sweep fixture")
