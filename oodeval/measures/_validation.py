"""Input checks shared by the measures: validate first, then compute (scikit-learn style)."""

from __future__ import annotations

from typing import Any

import numpy as np

from oodeval.errors import OodevalError


def as_float_array(
    x: Any, name: str, *, ndim: int | tuple[int, ...] | None = None, check_finite: bool = True
) -> np.ndarray:
    """Return `x` as a finite float64 array, or raise OodevalError naming `name`.

    `check_finite=False` skips the NaN/inf scan for callers that detect non-finite values in a
    reduction they compute anyway (NaN propagates through max/min); they must still reject them.
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise OodevalError(f"{name} must be an array of numbers: {exc}") from None
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise OodevalError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise OodevalError(f"{name} must be real, got complex values")
    arr = arr.astype(np.float64, copy=False)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if arr.ndim not in allowed:
            want = " or ".join(f"{d}-D" for d in allowed)
            raise OodevalError(f"{name} must be {want}, got shape {arr.shape}")
    if check_finite and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise OodevalError(f"{name} contains {bad} NaN or infinite value(s); remove or fix them")
    return arr


def as_bool_array(x: Any, name: str) -> np.ndarray:
    """Return `x` as a 1-D bool array; accepts bools or 0/1 integers, rejects anything else."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise OodevalError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr
    if np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating):
        if arr.size and not np.all(np.isin(arr, (0, 1))):
            raise OodevalError(
                f"{name} must be boolean (True/False or 0/1), got other values such as "
                f"{arr[~np.isin(arr, (0, 1))][0]!r}"
            )
        return arr.astype(bool)
    raise OodevalError(f"{name} must be boolean (True/False or 0/1), got dtype {arr.dtype}")


def check_same_length(**arrays: np.ndarray) -> int:
    """Raise unless every array has the same first dimension; return that length."""
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise OodevalError(f"inputs must have the same length, got {desc}")
    return next(iter(lengths.values()), 0)


def to_errors(values: np.ndarray, *, accuracy: bool, percent: bool, name: str) -> np.ndarray:
    """Convert accuracies/percentages to error fractions in [0, 1], with clear complaints.

    `accuracy=True` means the values are accuracies (error = 1 - accuracy); `percent=True` means
    they are in [0, 100] and are divided by 100 first.
    """
    what = "accuracies" if accuracy else "errors"
    if percent:
        if np.any(values < 0) or np.any(values > 100):
            raise OodevalError(f"{name}: {what} given as percentages must lie in [0, 100]")
        values = values / 100.0
    else:
        if np.any(values < 0):
            raise OodevalError(f"{name}: {what} must be fractions in [0, 1], found negative values")
        if np.any(values > 1):
            raise OodevalError(
                f"{name}: {what} > 1 look like percentages; pass --percent (percent=True) "
                "or divide by 100"
            )
    return 1.0 - values if accuracy else values


def as_class_ids(x: Any, name: str, *, check_nonnegative: bool = True) -> np.ndarray:
    """Return `x` as a 1-D int64 array of class ids (integers, or floats holding integers).

    Booleans, strings and non-integer or non-finite floats are refused; so are negative ids unless
    `check_nonnegative` is False (e.g. -1 for "not predicted").

    >>> as_class_ids([0, 2.0, 1], "labels")
    array([0, 2, 1])
    """
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise OodevalError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise OodevalError(f"{name} must hold integer class ids, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise OodevalError(f"{name} must hold integer class ids, found non-integer values")
    ids = arr.astype(np.int64)
    if check_nonnegative and ids.size and ids.min() < 0:
        raise OodevalError(f"{name} must hold class ids >= 0, found {int(ids.min())}")
    return ids
