"""Input checks shared by the measures: validate first, then compute (scikit-learn style)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from oodeval.errors import OodevalError


def _number_array(x: Any, name: str, ndim: int | tuple[int, ...] | None) -> np.ndarray:
    """`x` as a real numeric (or bool) array of an allowed dimension, any dtype, or raise."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise OodevalError(f"{name} must be an array of numbers: {exc}") from None
    if (
        arr.dtype == object
        and arr.size
        and all(isinstance(v, int) and not isinstance(v, bool) for v in arr.flat)
    ):
        raise OodevalError(
            f"{name} holds integers outside the 64-bit range (int64 or uint64); rescale them"
        )
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise OodevalError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise OodevalError(f"{name} must be real, got complex values")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if arr.ndim not in allowed:
            want = " or ".join(f"{d}-D" for d in allowed)
            raise OodevalError(f"{name} must be {want}, got shape {arr.shape}")
    return arr


def _check_finite(arr: np.ndarray, name: str) -> None:
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise OodevalError(f"{name} contains {bad} NaN or infinite value(s); remove or fix them")


def as_float_array(
    x: Any, name: str, *, ndim: int | tuple[int, ...] | None = None, check_finite: bool = True
) -> np.ndarray:
    """Return `x` as a finite float64 array, or raise OodevalError naming `name`.

    `check_finite=False` skips the NaN/inf scan for callers that detect non-finite values in a
    reduction they compute anyway (NaN propagates through max/min); they must still reject them.
    """
    arr = _number_array(x, name, ndim).astype(np.float64, copy=False)
    if check_finite:
        _check_finite(arr, name)
    return arr


def as_real_array(x: Any, name: str, *, ndim: int | tuple[int, ...] | None = None) -> np.ndarray:
    """Return `x` as a finite array whose values are exactly those given, or raise.

    Integers stay integers (int64, or uint64 beyond int64's range) and floats become float64
    (exact for float16/32/64): unlike `as_float_array`, no two distinct values can become equal.
    Refused, as they cannot be kept exact: long doubles that float64 would round, and a list
    whose integers beyond 2**53 numpy would read as float64 (mixed with floats, or spanning
    both int64 and uint64).

    >>> as_real_array([2**53 + 1, 2**53], "scores")
    array([9007199254740993, 9007199254740992])
    """
    arr = _number_array(x, name, ndim)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64 if arr.dtype.itemsize == 8 else np.int64, copy=False)
    if arr.dtype.kind in "ib":
        return arr.astype(np.int64, copy=False)
    if isinstance(x, list | tuple) and any(
        isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) and abs(v) > 2**53
        for v in np.asarray(x, dtype=object).flat
    ):
        raise OodevalError(
            f"{name} has integers beyond 2**53 that reading the list would round to float64 "
            "(they are mixed with floats, or span both int64 and uint64); pass them as an "
            "integer array (int64 or uint64) to keep them exact"
        )
    out = arr.astype(np.float64, copy=False)
    if arr.dtype.itemsize > 8 and not np.array_equal(out.astype(arr.dtype), arr, equal_nan=True):
        raise OodevalError(
            f"{name} holds {arr.dtype} values that float64 would round; convert them yourself "
            "if ties at float64 precision are acceptable"
        )
    _check_finite(out, name)
    return out


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
    they are in [0, 100] and are divided by 100 first; values that are all <= 1 are then refused
    as fractions given as percentages.
    """
    what = "accuracies" if accuracy else "errors"
    if percent:
        if np.any(values < 0) or np.any(values > 100):
            raise OodevalError(f"{name}: {what} given as percentages must lie in [0, 100]")
        if values.size and np.all(values <= 1):
            raise OodevalError(
                f"{name}: every value is <= 1, so these {what} are fractions, not percentages; "
                "read them without percent=True"
            )
        values = values / 100.0
    else:
        if np.any(values < 0):
            raise OodevalError(f"{name}: {what} must be fractions in [0, 1], found negative values")
        if np.any(values > 1):
            # No command-line option is named: commands without --percent reach this too.
            raise OodevalError(
                f"{name}: {what} > 1 look like percentages; divide them by 100 (or declare "
                "percentages with percent=True)"
            )
    return 1.0 - values if accuracy else values


def as_class_ids(x: Any, name: str, *, check_nonnegative: bool = True) -> np.ndarray:
    """Return `x` as a 1-D int64 array of class ids (integers, or floats holding integers).

    Booleans, strings and non-integer or non-finite floats are refused; so are negative ids unless
    `check_nonnegative` is False (e.g. -1 for "not predicted").

    >>> as_class_ids([0, 2.0, 1], "labels")
    array([0, 2, 1])
    >>> as_class_ids([0, 1e19], "labels")
    Traceback (most recent call last):
    oodeval.errors.OodevalError: labels must hold class ids below 2**63, found 1e+19
    >>> as_class_ids([0, -1e19], "predictions", check_nonnegative=False)
    Traceback (most recent call last):
    oodeval.errors.OodevalError: predictions must hold class ids >= -2**63, found -1e+19
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
    # beyond int64 the cast below would wrap (1e19 -> a negative id)
    if arr.size and np.max(arr) >= 2.0**63:
        raise OodevalError(f"{name} must hold class ids below 2**63, found {np.max(arr):g}")
    if arr.size and np.min(arr) < -(2.0**63):  # the offending value, not the largest
        lowest = "0" if check_nonnegative else "-2**63"
        raise OodevalError(f"{name} must hold class ids >= {lowest}, found {np.min(arr):g}")
    ids = arr.astype(np.int64)
    if check_nonnegative and ids.size and ids.min() < 0:
        raise OodevalError(f"{name} must hold class ids >= 0, found {int(ids.min())}")
    return ids


def scalar_or_array(x: float | np.ndarray) -> float | np.ndarray:
    """A Python float for a 0-d result, the array otherwise (what every measure returns).

    >>> scalar_or_array(np.array(0.5)), scalar_or_array(np.array([0.5]))
    (0.5, array([0.5]))
    """
    return float(x) if np.ndim(x) == 0 else x


class ErrorFractions(NamedTuple):
    """Validated error fractions with their per-row extremes (computed once, reused)."""

    values: np.ndarray  # (..., n_envs)
    worst: np.ndarray  # (...,) max over environments
    best: np.ndarray  # (...,) min over environments


def error_fractions(
    errors: Any, *, accuracy: bool = False, percent: bool = False, name: str = "errors"
) -> ErrorFractions:
    """Validate `errors` (..., n_envs) and return error fractions with row max and min.

    Validation rides on the max/min reductions every measure needs: NaN propagates through them
    and +-inf shows up in them, so the input is scanned twice instead of five times.

    Fractions already validated (an `ErrorFractions`) are returned as they are, so that the
    measures `oodeval.measures.domain.domain_measures` asks for share one validation.

    >>> error_fractions([[0.2, 0.5]]).worst
    array([0.5])
    """
    if isinstance(errors, ErrorFractions):
        return errors
    arr = as_float_array(errors, name, check_finite=False)
    if arr.ndim == 0:
        raise OodevalError(
            f"{name} must have environments on the last axis, got a scalar; pass a list of "
            "per-environment values"
        )
    if arr.shape[-1] == 0:
        raise OodevalError(f"{name} has no environments (last axis is empty, shape {arr.shape})")
    hi = arr.max(axis=-1)
    lo = arr.min(axis=-1)
    if not (np.isfinite(hi).all() and np.isfinite(lo).all()):
        as_float_array(arr, name)  # raises the shared NaN/inf message with the count
    # range checks and their messages on the two extreme values only (none with 0 algorithms)
    if hi.size:
        to_errors(np.array([lo.min(), hi.max()]), accuracy=accuracy, percent=percent, name=name)
    if percent:
        arr, hi, lo = arr / 100.0, hi / 100.0, lo / 100.0
    if accuracy:
        arr, hi, lo = 1.0 - arr, 1.0 - lo, 1.0 - hi
    return ErrorFractions(arr, hi, lo)


def reduced_errors(
    errors: Any,
    formula: Callable[[ErrorFractions], np.ndarray],
    *,
    accuracy: bool = False,
    percent: bool = False,
    name: str = "errors",
) -> float | np.ndarray:
    """`formula` of `errors` validated as error fractions (`error_fractions`), a float for one
    row: the validation and the return every measure of LOO errors shares.

    >>> reduced_errors([[0.1, 0.4], [0.3, 0.2]], lambda e: e.worst - e.best)
    array([0.3, 0.1])
    >>> reduced_errors([60, 90], lambda e: e.worst, accuracy=True, percent=True)
    0.4
    """
    e = error_fractions(errors, accuracy=accuracy, percent=percent, name=name)
    return scalar_or_array(formula(e))
