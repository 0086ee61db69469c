"""Column names as the HTML report shows them: the analysis files keep their snake_case names
(``rho_worst_plus_gap``, ``paper_tau_average``, ``n_seeds``), the page shows words a reader
scans (``rho worst+gap``, ``seeds``), and a table beside the paper's values shows each value
and the paper's in one cell (``ours / paper``), so it fits the page's width.
"""

from __future__ import annotations

import math

import pandas as pd

from oodeval.measures.domain import measure_label

__all__ = ["PAPER_PREFIX", "beside_paper_view", "column_title", "human_columns"]

PAPER_PREFIX = "paper_"
"""The prefix of a column holding the paper's value of the column it names."""

_COUNTS = {"n_seeds": "seeds", "n_algorithms": "algorithms", "n_scenarios": "scenarios"}
_COUNTS |= {"n_given": "N given", "n_units": "units", "n_cells": "cells"}
_SAID_ELSEWHERE = ("family", "scale", "ratio", "paper_table")
"""Columns a table beside the paper drops: the scenario's name says them, the title the table."""


def _measure_names() -> list[str]:
    from oodeval.measures.registry import measure_names

    return sorted(measure_names(families=False), key=len, reverse=True)


def column_title(name: object) -> str:
    """`name` in words: a measure's name at its end as its label, a count ``n_x`` as ``x``,
    the other underscores as spaces; a name without an underscore as it is.

    >>> column_title("rho_worst_plus_gap"), column_title("n_seeds")
    ('rho worst+gap', 'seeds')
    >>> column_title("share_within_worst"), column_title("scenario")
    ('share within worst', 'scenario')
    """
    text = str(name)
    if "_" not in text:
        return text
    if text in _COUNTS:
        return _COUNTS[text]
    for measure in _measure_names():
        if text == measure or text.endswith(f"_{measure}"):
            head = text[: len(text) - len(measure)].rstrip("_")
            label = measure_label(measure)
            return f"{head.replace('_', ' ')} {label}".strip()
    return text.replace("_", " ")


def human_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every column renamed by `column_title`, and a ``measure`` column's names
    as their labels (``worst_plus_gap`` as ``worst+gap``; ``ideal`` as it is)."""
    if "measure" in frame.columns:
        frame = frame.assign(measure=[_label(m) for m in frame["measure"]])
    return frame.rename(columns=lambda c: column_title(c))


def _label(name: object) -> object:
    return measure_label(name) if isinstance(name, str) and name != "ideal" else name


def _pair(ours: object, paper: object) -> str:
    def text(v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    return f"{text(ours)} / {text(paper)}"


def beside_paper_view(frame: pd.DataFrame) -> pd.DataFrame:
    """A table of ours beside the paper's values (``x`` and ``paper_x`` columns) as the report
    shows it: one column ``x: ours / paper`` per pair, the columns the scenario's name or the
    title already say dropped, the other columns in words (`column_title`).

    >>> frame = pd.DataFrame({"scenario": ["s"], "scale": [1], "rho_average": [0.25],
    ...                       "paper_rho_average": [0.166]})
    >>> beside_paper_view(frame).to_dict("list")
    {'scenario': ['s'], 'rho average: ours / paper': ['0.250 / 0.166']}
    """
    columns = [c for c in frame.columns if c not in _SAID_ELSEWHERE]
    view: dict[str, list[object]] = {}
    for column in columns:
        if str(column).startswith(PAPER_PREFIX) and column[len(PAPER_PREFIX) :] in frame:
            continue
        paper = f"{PAPER_PREFIX}{column}"
        if paper in frame:
            pairs = zip(frame[column], frame[paper], strict=True)
            view[f"{column_title(column)}: ours / paper"] = [_pair(a, b) for a, b in pairs]
        else:
            view[column_title(column)] = list(frame[column])
    return pd.DataFrame(view, index=frame.index).reset_index(drop=True)
