"""Asymptotics (Section 6.3 / Figure 7 of the worst+gap paper): how far each measure stays from
the ideal measure as the number of environments grows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.measures.meta.columns import (
    Columns,
    column_array,
    python_value,
    records_to_columns,
    row_groups,
)

__all__ = ["distance_to_ideal"]


def distance_to_ideal(
    units: Mapping[str, Any],
    measures: Sequence[str],
    *,
    size: str,
    group: Sequence[str] = (),
) -> Columns:
    """Mean |R^IDEAL - R^measure| as `size` grows, normalised to the smallest size of its group.

    Section 6.3 / Figure 7 of the worst+gap paper: within each `group` (scenarios that differ
    only in `size`, e.g. family and Ratio with size = Scale), per size the mean over algorithms
    and seeds (``algorithm = "(all)"``) and per algorithm the mean over seeds of |ideal -
    measure|; ``normalized`` divides by the same quantity at the group's smallest size
    (NaN when that is 0 or missing).

    Parameters
    ----------
    units : table with ``ideal``, ``n_given``, ``algorithm``, `size` (integers), the `group`
        columns and the measures; rows without a size must be left out by the caller
    measures : measure columns
    size : the column that orders the sizes (e.g. ``scale``, or ``n_given``)
    group : columns whose values define the groups (none: one group)

    Returns
    -------
    Columns: the group columns, `size`, n_given (of the first unit at that size), measure,
    algorithm, abs_diff, normalized, ``reference_<size>``; per group and measure the ``(all)``
    rows, then one algorithm after another, sizes ascending
    """
    needed = dict.fromkeys([*group, size, "n_given", "algorithm", "ideal", *measures])
    cols = {k: column_array(units, k) for k in needed}
    ideal = cols["ideal"].astype(np.float64)
    groups = row_groups(*(cols[g] for g in group)) if group else [np.arange(len(ideal))]
    records = []
    for rows in groups:
        sizes = cols[size][rows].astype(np.int64)
        reference = int(sizes.min())
        first = {int(s): int(cols["n_given"][rows[sizes == s][0]]) for s in np.unique(sizes)}
        lead = {g: python_value(cols[g][rows[0]]) for g in group}
        for measure in measures:
            diff = np.abs(ideal[rows] - cols[measure][rows].astype(np.float64))
            parts = [("(all)", np.arange(len(rows)))]
            parts += [
                (python_value(cols["algorithm"][rows[i[0]]]), i)
                for i in row_groups(cols["algorithm"][rows])
            ]
            for algorithm, idx in parts:
                at_reference = diff[idx][sizes[idx] == reference]
                base = float(at_reference.mean()) if at_reference.size else np.nan
                for s in np.unique(sizes[idx]):
                    value = float(diff[idx][sizes[idx] == s].mean())
                    records.append(
                        {
                            **lead,
                            size: int(s),
                            "n_given": first[int(s)],
                            "measure": measure,
                            "algorithm": algorithm,
                            "abs_diff": value,
                            "normalized": value / base if base and not np.isnan(base) else np.nan,
                            f"reference_{size}": reference,
                        }
                    )
    columns = [*group, size, "n_given", "measure", "algorithm", "abs_diff", "normalized"]
    return records_to_columns(records, [*columns, f"reference_{size}"])
