"""Column tables and per-unit measures: the tables every meta-evaluation reads and returns.

A *column table* (`Columns`) maps a column name to a 1-D array, all of one length: a dict of numpy
arrays or a pandas DataFrame on input (read column by column), a dict of numpy arrays on output
(``pandas.DataFrame(columns)`` makes a frame of it). This keeps `oodeval.measures` free of pandas.
Groups appear in the order their first row appears, so a caller decides the order of seeds and
algorithms by ordering its rows.

Per-unit measures: one row per unit (scenario, seed, algorithm) with every requested measure and,
when the errors have ``all`` rows, the ideal measure (Eq. 4 of the worst+gap paper).
`dense_unit_measures` computes them from a dense (units, N) matrix of errors; `unit_measures`
from long-form errors (described in `oodeval.measures.meta`), through it.

>>> [g.tolist() for g in row_groups(np.array(["b", "a", "b"]))]
[[0, 2], [1]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import as_float_array
from oodeval.measures.domain import REGISTRY, check_measures, domain_measures
from oodeval.measures.registry import measure_values

__all__ = [
    "SEED_MEAN",
    "UNIT_KEYS",
    "Columns",
    "column_array",
    "dense_unit_measures",
    "first_appearance_codes",
    "group_codes",
    "python_value",
    "records_to_columns",
    "row_count",
    "row_groups",
    "unit_measures",
]

Columns = dict[str, np.ndarray]
"""Column name -> 1-D array; every column has the same length."""

UNIT_KEYS = ("scenario", "seed", "algorithm")
"""The columns that name a unit: one algorithm trained with one seed in one scenario."""

SEED_MEAN = "mean"
"""The seed label of `seed_means` rows."""


def column_array(table: Mapping[str, Any], name: str) -> np.ndarray:
    """Column `name` of `table` as a 1-D array; OodevalError naming it when it is missing."""
    try:
        values = table[name]
    except KeyError:
        raise OodevalError(f"the table has no {name!r} column; it needs {name}") from None
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise OodevalError(f"column {name!r} must be 1-D, got shape {arr.shape}")
    return arr


def row_count(table: Mapping[str, Any]) -> int:
    """The number of rows of `table`; OodevalError when its columns differ in length."""
    lengths = {len(np.asarray(table[c])) for c in table}
    if len(lengths) > 1:
        raise OodevalError(f"the table's columns differ in length: {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def first_appearance_codes(values: np.ndarray) -> np.ndarray:
    """Integer codes of `values`, numbered in order of first appearance."""
    if values.dtype == object:  # any hashable labels; a dict keeps first-appearance order
        seen: dict[Any, int] = {}
        return np.fromiter(
            (seen.setdefault(v, len(seen)) for v in values.tolist()), np.int64, len(values)
        )
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.ravel()]


def group_codes(*columns: np.ndarray) -> np.ndarray:
    """One integer code per distinct tuple of `columns`, numbered in order of first appearance."""
    n = len(columns[0]) if columns else 0
    combined = np.zeros(n, dtype=np.int64)
    for col in columns:
        codes = first_appearance_codes(col)
        combined = combined * (int(codes.max()) + 1 if n else 1) + codes
        combined = first_appearance_codes(combined)  # renumber so the product never overflows
    return combined


def row_groups(*columns: np.ndarray) -> list[np.ndarray]:
    """Row indices of each distinct tuple of `columns`, groups and rows in order of appearance."""
    codes = group_codes(*columns)
    if codes.size == 0:
        return []
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, bounds)


def records_to_columns(records: list[dict[str, Any]], columns: Sequence[str]) -> Columns:
    """Column arrays of `records`: bool, int64 or float64 when every value is one, else object."""
    out: Columns = {}
    for name in columns:
        values = [r[name] for r in records]
        kinds = {type(v) for v in values}
        if kinds and kinds <= {bool, np.bool_}:
            out[name] = np.array(values, dtype=bool)
        elif kinds and kinds <= {int, np.int64}:
            out[name] = np.array(values, dtype=np.int64)
        elif kinds and kinds <= {float, np.float64}:
            out[name] = np.array(values, dtype=np.float64)
        else:  # labels, tuples of names, mixed values: kept as the Python objects
            column = np.empty(len(values), dtype=object)
            for k, v in enumerate(values):
                column[k] = v
            out[name] = column
    return out


def python_value(value: Any) -> Any:
    """A numpy scalar as the Python value (so labels print and compare as the caller gave them)."""
    return value.item() if isinstance(value, np.generic) else value


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
    units with the same number of environments are scored in one call of `dense_unit_measures`.
    Labels may be any hashable values; integer labels are grouped fastest.

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
        for name, value in dense_unit_measures(matrix, names).items():
            out[name][members] = value
    if not loo.all():
        for members, matrix in _dense_by_length(unit[~loo], error[~loo], n_units):
            for name, value in dense_unit_measures(matrix, split="all").items():
                out.setdefault(name, np.empty(n_units))[members] = value
    return out


def dense_unit_measures(
    errors: Any, measures: Sequence[str] | None = None, *, split: str = "loo"
) -> Columns:
    """Each unit's measures from its errors of one split, one unit per row of a dense matrix.

    The one place per-unit measures are computed: `unit_measures` calls it for the units of
    each number of environments, `oodeval.score` for all its units at once. Each measure is
    its registered function (`oodeval.measures.domain.domain_measures` for the LOO ones).

    Parameters
    ----------
    errors : array-like of shape (n_units, N)
        Row u: unit u's errors of `split`, its leave-one-out errors (``"loo"``) or the errors
        on E_all of its model trained on all given environments (``"all"``).
    measures : sequence of str, optional
        Names or specs of measures of `split` (default: every registered measure of `split`;
        for ``"all"`` that is the ideal measure, Eq. 4).
    split : {"loo", "all"}

    Returns
    -------
    Columns with one float64 array of length n_units per measure

    >>> errors = [[0.1, 0.2, 0.3], [0.2, 0.2, 0.2]]
    >>> units = dense_unit_measures(errors, ["worst", "worst_plus_gap"])
    >>> {name: values.round(12).tolist() for name, values in units.items()}
    {'worst': [0.3, 0.2], 'worst_plus_gap': [0.5, 0.2]}
    >>> dense_unit_measures([[0.5, 0.1]], split="all")["ideal"].tolist()
    [0.5]
    """
    matrix = as_float_array(errors, "errors", ndim=2, check_finite=False)
    if split == "loo":
        values = domain_measures(matrix, check_measures(measures))
    elif split == "all":
        names = measures or [n for n, spec in REGISTRY.items() if spec.split == "all"]
        values = {name: measure_values(name, matrix) for name in names}
    else:
        raise OodevalError(f"unknown split {split!r}; split must be 'loo' or 'all'")
    return {name: np.array(value, dtype=np.float64) for name, value in values.items()}


def _labels(values: np.ndarray) -> np.ndarray:
    """Fixed-width text arrays as object arrays of Python str; other arrays unchanged."""
    return values.astype(object) if values.dtype.kind == "U" else values
