"""Per-unit measures from long-form errors: one row per unit (scenario, seed, algorithm) with
every requested measure and, when the errors have ``all`` rows, the ideal measure (Eq. 4 of the
worst+gap paper). The long form is described in `oodeval.measures.meta`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import as_float_array
from oodeval.measures.domain import REGISTRY, check_measures, domain_measures
from oodeval.measures.meta.columns import (
    UNIT_KEYS,
    Columns,
    column_array,
    group_codes,
    python_value,
    row_count,
)
from oodeval.measures.registry import measure_values

__all__ = ["unit_measures"]


def _dense_by_length(
    unit: np.ndarray, values: np.ndarray, n_units: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(unit ids, matrix) per row count: each unit's values as one matrix row, in row order."""
    order = np.argsort(unit, kind="stable")
    unit_sorted, values_sorted = unit[order], values[order]
    counts = np.bincount(unit, minlength=n_units)
    starts = np.cumsum(counts) - counts
    position = np.arange(len(unit)) - starts[unit_sorted]
    out = []
    for n in np.unique(counts[counts > 0]):
        members = np.flatnonzero(counts == n)
        row_of = np.full(n_units, -1)
        row_of[members] = np.arange(len(members))
        take = counts[unit_sorted] == n
        matrix = np.empty((len(members), int(n)))
        matrix[row_of[unit_sorted[take]], position[take]] = values_sorted[take]
        out.append((members, matrix))
    return out


def _unit_name(keys: dict[str, np.ndarray], u: int) -> str:
    parts = [f"{k} {python_value(keys[k][u])}" for k in UNIT_KEYS if str(keys[k][u]) != ""]
    return ", ".join(parts)


def _check_unit_rows(
    keys: dict[str, np.ndarray], unit: np.ndarray, loo: np.ndarray, env: np.ndarray
) -> None:
    """Raise on a repeated (unit, split, environment) row or a unit without loo rows."""
    codes = group_codes(unit, loo.astype(np.int64), env)
    repeated = np.flatnonzero(np.bincount(codes) > 1)
    if repeated.size:
        row = int(np.flatnonzero(codes == repeated[0])[0])
        raise OodevalError(
            f"{_unit_name(keys, int(unit[row]))} has two {'loo' if loo[row] else 'all'} rows for "
            f"environment {python_value(env[row])}; keep one row per unit, split and environment"
        )
    n_units = len(keys["algorithm"])
    has_loo = np.bincount(unit[loo], minlength=n_units) > 0
    if not has_loo.all():
        u = int(np.flatnonzero(~has_loo)[0])
        raise OodevalError(
            f"{_unit_name(keys, u)} has no loo rows; every unit needs its leave-one-out errors"
        )
    has_all = np.bincount(unit[~loo], minlength=n_units) > 0
    if has_all.any() and not has_all.all():
        u = int(np.flatnonzero(~has_all)[0])
        raise OodevalError(
            f"{_unit_name(keys, u)} has no all rows while other units have them; the ideal "
            "measure needs the errors of the model trained on all given environments"
        )


def unit_measures(errors: Mapping[str, Any], measures: Sequence[str] | None = None) -> Columns:
    """Every requested measure per unit (scenario, seed, algorithm) from long-form errors.

    The LOO measures (`oodeval.measures.domain.MEASURES`) read a unit's ``loo`` errors in row
    order, the ``all``-split measures of `REGISTRY` (the ideal measure, Eq. 4) its ``all`` errors;
    units with the same number of environments are scored in one vectorised call. Labels may be
    any hashable values; integer labels are grouped fastest.

    Parameters
    ----------
    errors : table with columns algorithm, split, environment, error[, scenario, seed]
    measures : names of LOO measures (default: all)

    Returns
    -------
    Columns with one row per unit, in order of first appearance: scenario and seed (``""`` when
    the input has no such column), algorithm, n_given (number of loo rows), each measure, and
    ``ideal`` when the errors have ``all`` rows (then every unit needs them).
    """
    names = check_measures(measures)
    n_rows = row_count(errors)
    if n_rows == 0:
        raise OodevalError("the errors table has no rows; give one row per unit and environment")
    split = column_array(errors, "split")
    loo = split == "loo"
    unknown = ~loo & (split != "all")
    if unknown.any():
        unknown_split = python_value(split[np.argmax(unknown)])
        raise OodevalError(f"unknown split {unknown_split!r}; split must be 'loo' or 'all'")
    env = column_array(errors, "environment")
    # NaN, infinities and the range [0, 1] are checked by the measures themselves
    error = as_float_array(column_array(errors, "error"), "error", check_finite=False)
    key_columns = {k: column_array(errors, k) for k in UNIT_KEYS if k in errors or k == "algorithm"}
    unit = group_codes(*key_columns.values())
    n_units = int(unit.max()) + 1
    first = np.full(n_units, n_rows)
    np.minimum.at(first, unit, np.arange(n_rows))
    keys = {
        k: _labels(key_columns[k][first]) if k in key_columns else np.full(n_units, "", object)
        for k in UNIT_KEYS
    }
    _check_unit_rows(keys, unit, loo, env)
    out: Columns = dict(keys)
    out["n_given"] = np.bincount(unit[loo], minlength=n_units).astype(np.int64)
    for name in names:
        out[name] = np.empty(n_units)
    for members, matrix in _dense_by_length(unit[loo], error[loo], n_units):
        for name, value in domain_measures(matrix, names).items():
            out[name][members] = value
    if not loo.all():
        for name in (n for n, spec in REGISTRY.items() if spec.split == "all"):
            out[name] = np.empty(n_units)
            for members, matrix in _dense_by_length(unit[~loo], error[~loo], n_units):
                out[name][members] = measure_values(name, matrix)
    return out


def _labels(values: np.ndarray) -> np.ndarray:
    """Fixed-width text arrays as object arrays of Python str; other arrays unchanged."""
    return values.astype(object) if values.dtype.kind == "U" else values
