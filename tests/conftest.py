"""Fixtures for the shared data beside the checkout (skipped when absent, failed under CI=true)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.requires import DOMAINBED_SWEEP, MNIST_DIR, requires_path


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The real MNIST test set (IDX files) at ../shared/data/mnist."""
    requires_path(MNIST_DIR / "t10k-images-idx3-ubyte.gz", "the real MNIST test set")
    return MNIST_DIR


@pytest.fixture(scope="session")
def domainbed_sweep() -> Path:
    """DomainBed's VLCS sweep fixture at ../shared/fixtures/domainbed-vlcs-sweep."""
    return requires_path(DOMAINBED_SWEEP, "the DomainBed sweep fixture")
