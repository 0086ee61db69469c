"""Input checks and the seeded held-out halves shared by the shift estimators (numpy only)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import as_float_array, check_same_length

MIN_PER_SET = 8


def as_inputs(x: Any, name: str) -> np.ndarray:
    """Return inputs as a float32 array of shape (n, ...) with at least MIN_PER_SET rows."""
    arr = as_float_array(x, name)
    if arr.ndim < 2:
        raise OodevalError(f"{name} must have shape (n_samples, ...), got shape {arr.shape}")
    if arr.shape[0] < MIN_PER_SET:
        raise OodevalError(
            f"{name} has {arr.shape[0]} samples; the held-out halves need at least {MIN_PER_SET}"
        )
    return arr.astype(np.float32)


def as_labels(y: Any, name: str, n: int) -> np.ndarray:
    """Return labels as int64 class ids 0..K-1 of length n."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise OodevalError(f"{name} must be 1-D, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)):
            if np.all(arr == np.round(arr)):
                arr = arr.astype(np.int64)
        if not np.issubdtype(arr.dtype, np.integer):
            raise OodevalError(f"{name} must hold integer class ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    check_same_length(**{name: arr, "inputs": np.empty(n)})
    if arr.size and arr.min() < 0:
        raise OodevalError(f"{name} must be class ids >= 0, found {int(arr.min())}")
    return arr


def check_same_input_shape(source: np.ndarray, target: np.ndarray) -> None:
    """Raise unless source and target samples have the same shape (one hypothesis sees both)."""
    if source.shape[1:] != target.shape[1:]:
        raise OodevalError(
            f"source and target samples differ in shape: {source.shape[1:]} vs {target.shape[1:]}; "
            "resize them to one shape first"
        )


def halves(n: int, seed: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """Split range(n) into a training half and a held-out half (sorted indices), seeded.

    `stream` separates the source split from the target split under one seed.

    >>> train, held = halves(5, seed=0, stream=0)
    >>> sorted(np.concatenate([train, held]).tolist())
    [0, 1, 2, 3, 4]
    """
    order = np.random.default_rng([seed, stream]).permutation(n)
    n_train = n // 2
    return np.sort(order[:n_train]), np.sort(order[n_train:])


def minibatches(
    n: int, batch_size: int, steps: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Yield `steps` index batches drawn by passes over fresh permutations of range(n)."""
    size = min(batch_size, n)
    order = rng.permutation(n)
    pos = 0
    for _ in range(steps):
        if pos + size > n:
            order, pos = rng.permutation(n), 0
        yield order[pos : pos + size]
        pos += size


@dataclass(frozen=True)
class FitOptions:
    """How an estimator trains its networks: the hypothesis class, Adam's steps, minibatch size
    and learning rate (checked by `fit_options`)."""

    hypothesis: str
    steps: int
    batch_size: int
    lr: float


def fit_options(hypothesis: str, steps: int, batch_size: int, lr: float) -> FitOptions:
    """The `FitOptions` given; raise for non-positive steps, batch size or learning rate."""
    if int(steps) < 1:
        raise OodevalError(f"steps must be at least 1, got {steps}")
    if int(batch_size) < 1:
        raise OodevalError(f"batch_size must be at least 1, got {batch_size}")
    if not float(lr) > 0:
        raise OodevalError(f"learning rate must be positive, got {lr}")
    return FitOptions(hypothesis, steps, batch_size, lr)
