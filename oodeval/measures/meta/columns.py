"""Column tables: the shape every meta-evaluation table takes, and the grouping helpers.

A *column table* (`Columns`) maps a column name to a 1-D array, all of one length: a dict of numpy
arrays or a pandas DataFrame on input (read column by column), a dict of numpy arrays on output
(``pandas.DataFrame(columns)`` makes a frame of it). This keeps `oodeval.measures` free of pandas.
Groups appear in the order their first row appears, so a caller decides the order of seeds and
algorithms by ordering its rows.

>>> [g.tolist() for g in row_groups(np.array(["b", "a", "b"]))]
[[0, 2], [1]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError

__all__ = [
    "SEED_MEAN",
    "UNIT_KEYS",
    "Columns",
    "column_array",
    "first_appearance_codes",
    "group_codes",
    "python_value",
    "records_to_columns",
    "row_count",
    "row_groups",
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
