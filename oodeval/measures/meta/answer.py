"""The one-line answer every output opens with: which algorithm each measure picks, and whether
the measures disagree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures.meta.choice import tie_text
from oodeval.measures.meta.columns import (
    UNIT_KEYS,
    Columns,
    column_array,
    group_codes,
    python_value,
    row_count,
    row_groups,
)
from oodeval.measures.meta.paper_tables import choices, seed_means
from oodeval.measures.registry import measure_columns, measure_label, measure_names

__all__ = ["ANSWER_MEASURES", "answer_line", "answer_parts"]

ANSWER_MEASURES = ("worst_plus_gap", "average")
"""The measures the answer line compares by default: the worst+gap paper's and the usual one."""


def answer_line(
    units: Mapping[str, Any], measures: Sequence[str] | None = None, *, how: str | None = None
) -> str:
    """The one-line answer: which algorithm each measure picks, and whether they disagree.

    Every output that scores algorithms opens with it (`oodeval measures`, `oodeval import
    domainbed`, both HTML reports, `oodeval.Scores.answer`). Per scenario:

    - each measure picks the algorithm with the lowest value (`choices`); an algorithm tied
      at the minimum is named with the others, joined by `TIE_SEPARATOR` (``|``), and marked
      ``(tied)``;
    - with several seeds, each algorithm's measure is first averaged over the seeds
      (`seed_means`: only algorithms with every seed of their scenario take part), so the pick
      is Table 6's "mean" pick, and the line says ``on each measure's mean over k seeds``;
    - with an ``ideal`` column, the ideal measure's pick follows, and the line says which
      measures pick the ideal's choice;
    - the measures *agree* when their (tied) picks are the same.

    Format: ``<m1> picks A; <m2> picks B[; the ideal measure picks C] (they disagree|agree[;
    <who> pick(s) the ideal's choice][; on each measure's mean over k seeds])``. With several
    scenarios (or a non-empty scenario label), each part is prefixed ``<scenario>: `` and the
    parts are joined by ``. ``.

    Parameters
    ----------
    units : table with algorithm, the measure columns[, ideal, scenario, seed] (as
        `unit_measures` returns it, or `oodeval.Scores.measures`)
    measures : the measures to name (default: `ANSWER_MEASURES` when `units` has both, else
        every LOO measure it has: `oodeval.measures.registry.measure_columns`)
    how : how the values were aggregated, when the caller did it (replaces the seed wording)

    Returns
    -------
    str, one line without a final full stop

    >>> units = {"algorithm": ["ERM", "IRM", "Mixup"], "average": [0.20, 0.22, 0.18],
    ...          "worst_plus_gap": [0.40, 0.31, 0.45]}
    >>> answer_line(units)
    'worst+gap picks IRM; average picks Mixup (they disagree)'
    >>> answer_line({**units, "seed": [0, 0, 0], "ideal": [0.5, 0.3, 0.4]})
    "worst+gap picks IRM; average picks Mixup; the ideal measure picks IRM (they disagree; \
worst+gap picks the ideal's choice)"
    """
    parts = answer_parts(units, measures, how=how)
    return ". ".join(f"{scenario}: {text}" if scenario else text for scenario, text in parts)


def answer_parts(
    units: Mapping[str, Any], measures: Sequence[str] | None = None, *, how: str | None = None
) -> list[tuple[str, str]]:
    """`answer_line` cut into its scenarios: one ``(scenario, answer)`` pair per scenario, the
    scenario's label left out of the answer (``""`` for a table without scenarios).

    The reports show one line per scenario from these pairs; `answer_line` joins them, so both
    say the same words. Parameters as `answer_line`'s.

    >>> units = {"scenario": ["s1"] * 2 + ["s2"] * 2, "algorithm": ["ERM", "IRM"] * 2,
    ...          "average": [0.2, 0.3, 0.3, 0.2], "worst_plus_gap": [0.4, 0.5, 0.6, 0.5]}
    >>> answer_parts(units)
    [('s1', 'worst+gap picks ERM; average picks ERM (they agree)'), \
('s2', 'worst+gap picks IRM; average picks IRM (they agree)')]
    """
    n_rows = row_count(units)
    if n_rows == 0:
        raise OodevalError("the table has no rows; the answer needs one row per algorithm")
    names = list(measures) if measures is not None else [m for m in ANSWER_MEASURES if m in units]
    if measures is None and len(names) < len(ANSWER_MEASURES):  # a subset chosen by the user
        names = measure_columns(list(units))
    if not names:
        raise OodevalError(
            f"the table has no measure column; give one of {', '.join(measure_names())}"
        )
    has_ideal = "ideal" in units
    values = list(dict.fromkeys([*names, *(["ideal"] if has_ideal else [])]))
    table = {
        k: column_array(units, k) if k in units else np.full(n_rows, "", object) for k in UNIT_KEYS
    }
    table.update({k: column_array(units, k) for k in values})
    means = seed_means(table, names)
    picked = choices(means, values)
    parts: list[tuple[str, str]] = []
    for rows in row_groups(table["scenario"]):
        scenario = python_value(table["scenario"][rows[0]])
        n_seeds = len(np.unique(group_codes(table["seed"][rows])))
        mine = (
            np.flatnonzero(picked["scenario"] == scenario)
            if len(picked["scenario"])
            else np.empty(0, dtype=np.intp)
        )
        label = str(scenario)
        algorithms = list(dict.fromkeys(str(a) for a in table["algorithm"][rows]))
        if len(algorithms) == 1:
            parts.append((label, f"only one algorithm ({algorithms[0]}), so nothing to choose"))
        elif len(mine) == 0:
            parts.append((label, "no algorithm has every seed, so there is no pick"))
        else:
            seeds = how or (f"on each measure's mean over {n_seeds} seeds" if n_seeds > 1 else "")
            parts.append((label, _picks_text(picked, mine, names, has_ideal, seeds)))
    return parts


def _picks_text(
    picked: Columns, rows: np.ndarray, names: Sequence[str], has_ideal: bool, how: str
) -> str:
    """``m1 picks A; m2 picks B[; the ideal measure picks C] (...)`` for one scenario."""
    tied = {str(picked["measure"][k]): tuple(picked["tied"][k]) for k in rows}
    chosen = {str(picked["measure"][k]): str(picked["selected"][k]) for k in rows}

    def pick(name: str) -> str:
        return tie_text(tied[name]) + (" (tied)" if len(tied[name]) > 1 else "")

    said = [f"{measure_label(m)} picks {pick(m)}" for m in names]
    if has_ideal:
        said.append(f"the ideal measure picks {pick('ideal')}")
    notes = []
    if len(names) > 1:
        notes.append("they agree" if len({tied[m] for m in names}) == 1 else "they disagree")
    if has_ideal:
        right = [measure_label(m) for m in names if chosen[m] == chosen["ideal"]]
        if not right:
            notes.append(
                "neither picks the ideal's choice"
                if len(names) == 2
                else "none picks the ideal's choice"
                if len(names) > 2
                else "it misses the ideal's choice"
            )
        elif len(right) == len(names) and len(names) == 2:
            notes.append("both pick the ideal's choice")
        else:
            notes.append(
                f"{', '.join(right)} pick{'s' if len(right) == 1 else ''} the ideal's choice"
            )
    if how:
        notes.append(how)
    return "; ".join(said) + (f" ({'; '.join(notes)})" if notes else "")
