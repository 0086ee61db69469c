"""The one table type and renderer: every command's output, the study's analysis.md and the
HTML reports' tables go through it.

A table is a header plus rows of cells; a titled one with a caption is a `Table`. `render_frame`
prints a pandas DataFrame in one of the four output formats every table-printing command accepts
(``--format table|csv|json|markdown``):

- ``table``: plain text, columns separated by two spaces, text left-aligned and numbers
  right-aligned (`text_table`);
- ``csv``: ``DataFrame.to_csv`` without the index; floats at full (round-trip) precision;
- ``json``: a list of records (one object per row, NaN as null), ``json.loads`` gives it back;
- ``markdown``: a GitHub-flavoured table (`markdown_table`), ``|`` in a cell escaped.

In the table and markdown formats every cell and header goes through `oodeval._text.safe_text`:
a newline, tab, control or bidi character in a name is shown as an escape (``\\n``, ``\\t``,
``\\u202e``) so one row stays one line, in order; csv and json keep every name exact.

>>> frame = pd.DataFrame({"algorithm": ["ERM", "IRM"], "error": [0.25, float("nan")]})
>>> print(render_frame(frame, "table"))
algorithm   error
ERM        0.2500
IRM           nan
>>> print(render_frame(frame, "markdown"))
| algorithm | error |
| --- | ---: |
| ERM | 0.2500 |
| IRM | nan |
>>> json.loads(render_frame(frame, "json"))
[{'algorithm': 'ERM', 'error': 0.25}, {'algorithm': 'IRM', 'error': None}]

This module imports only numpy, pandas and `oodeval._text`, so `results`, `study` and `cli` can
all use it.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from oodeval._text import safe_text

__all__ = [
    "FORMATS",
    "EMPTY",
    "Table",
    "csv_text",
    "format_cell",
    "frame_cells",
    "frame_records",
    "heading",
    "markdown_table",
    "numeric_columns",
    "plus_minus",
    "render_frame",
    "render_rows",
    "text_table",
    "to_json",
]

#: The output formats of every table-printing command, in the order --help lists them.
FORMATS = ("table", "csv", "json", "markdown")

#: What a table with no rows prints as (table and markdown formats).
EMPTY = "(no rows)"


@dataclass
class Table:
    """The one table type: a titled DataFrame (its index is dropped; make it a column if needed)
    with a caption, as the reports show it.

    Attributes
    ----------
    title, caption : str
        What the table shows, and how to read it.
    frame : pandas.DataFrame
        The rows.
    digits : int
        Decimals of the float cells.
    widths : dict of str to int
        Characters shown of a text cell per column, where the renderer shortens long text (the
        HTML report: `oodeval.report.names.NAME_WIDTH` by default, the full text in a tooltip).
    """

    title: str
    frame: pd.DataFrame
    caption: str = ""
    digits: int = 3
    widths: dict[str, int] = field(default_factory=dict)


def format_cell(value: object, digits: int = 4) -> str:
    """The text of one cell: floats with `digits` decimals, NaN as ``nan``, missing as ``""``.

    >>> [format_cell(v, 3) for v in (1.23456, float("nan"), None, 7, "a")]
    ['1.235', 'nan', '', '7', 'a']
    """
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, float | np.floating):
        return "nan" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def plus_minus(
    means: Iterable[float], stds: Iterable[float], *, digits: int = 3, missing: str | None = None
) -> list[str]:
    """Cells ``mean ± std`` with `digits` decimals; ``mean`` alone where the std is missing (one
    seed), and `missing` where the mean is (default: the mean as formatted, ``nan``).

    >>> plus_minus([0.5, 0.25, float("nan")], [0.125, float("nan"), float("nan")])
    ['0.500 ± 0.125', '0.250', 'nan']
    >>> plus_minus([float("nan")], [float("nan")], missing="–")
    ['–']
    """
    return [
        missing
        if missing is not None and pd.isna(m)
        else (f"{m:.{digits}f}" if pd.isna(s) else f"{m:.{digits}f} ± {s:.{digits}f}")
        for m, s in zip(means, stds, strict=True)
    ]


def numeric_columns(frame: pd.DataFrame) -> list[bool]:
    """Per column: True when it holds numbers (integers or floats, not booleans)."""
    return [frame[c].dtype.kind in "iuf" for c in frame.columns]


def frame_cells(frame: pd.DataFrame, digits: int = 4) -> tuple[list[str], list[list[str]]]:
    """The header and the cells of `frame` (no index) as strings, via `format_cell`."""
    header = [str(c) for c in frame.columns]
    rows = [[format_cell(v, digits) for v in row] for row in frame.itertuples(index=False)]
    return header, rows


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[bool] | None = None
) -> str:
    """An aligned plain-text table: columns two spaces apart, trailing spaces removed.

    Columns flagged in `right` are right-aligned (header included); the others left-aligned.
    Cells go through `safe_text`, so each row is one line whatever its names hold.

    >>> print(text_table(["role", "images"], [["train", "12"], ["test", "3"]], right=[False, True]))
    role   images
    train      12
    test        3
    """
    if not rows:
        return EMPTY
    right = list(right) if right is not None else [False] * len(header)
    cells = [[safe_text(c) for c in row] for row in [header, *rows]]
    widths = [max(len(c) for c in col) for col in zip(*cells, strict=True)]
    return "\n".join(
        "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
        ).rstrip()
        for row in cells
    )


def markdown_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[bool] | None = None,
    compact_rule: bool = False,
) -> str:
    """A GitHub-flavoured markdown table; ``|`` inside a cell is escaped as ``\\|``, after
    `safe_text` (a backslash doubled, control and bidi characters shown as escapes), so a cell
    never splits the row or ends it.

    The rule under the header is ``| --- | ---: |`` (``---:`` for the columns flagged in
    `right`), or ``|---|---:|`` with `compact_rule`, the form DomainBed-style tables print.

    >>> print(markdown_table(["a", "b"], [["1|2", "x"]], compact_rule=True))
    | a | b |
    |---|---|
    | 1\\|2 | x |
    """
    if not rows:
        return EMPTY
    right = list(right) if right is not None else [False] * len(header)
    marks = ["---:" if r else "---" for r in right]
    rule = "|" + "|".join(marks) + "|" if compact_rule else "| " + " | ".join(marks) + " |"

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(safe_text(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def csv_text(frame: pd.DataFrame, *, float_format: str | None = None) -> str:
    """`frame` (index dropped) as CSV text with ``\\n`` line ends, every name exact.

    Fields are quoted where needed (a comma, a quote, a newline); pandas leaves a carriage
    return unquoted, which a reader takes for a line end, so a frame holding one in a text cell
    or a column name has every text field quoted (``csv.QUOTE_NONNUMERIC``) instead.

    >>> print(csv_text(pd.DataFrame({"algorithm": ["ERM", "a,b"], "error": [0.5, 0.25]})), end="")
    algorithm,error
    ERM,0.5
    "a,b",0.25
    """
    texts = [frame[c] for c in frame.columns if frame[c].dtype.kind not in "iufcbmM"]
    carriage = any("\r" in str(c) for c in frame.columns) or any(
        col.astype(str).str.contains("\r", regex=False).any() for col in texts
    )
    return frame.to_csv(
        index=False,
        lineterminator="\n",
        float_format=float_format,
        quoting=csv.QUOTE_NONNUMERIC if carriage else csv.QUOTE_MINIMAL,
    )


def frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """`frame`'s rows as plain-Python records: numpy scalars unwrapped, NaN and NA as None."""
    records = []
    for row in frame.to_dict("records"):
        records.append({str(k): json_value(v) for k, v in row.items()})
    return records


def json_value(value: object) -> object:
    """A frame cell as a JSON value: numpy scalars as Python ones; None, NA, NaT, NaN and
    infinities as None.

    >>> json_value(np.float32(0.5)), json_value(float("inf")), json_value(pd.NaT)
    (0.5, None, None)
    """
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(payload: object) -> str:
    """Indented JSON with NaN/inf written as null (strict JSON that every parser reads)."""
    return json.dumps(_strict(payload), indent=2, allow_nan=False)


def _strict(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return json_value(value)


def render_frame(
    frame: pd.DataFrame,
    fmt: str,
    *,
    digits: int = 4,
    right: Sequence[bool] | None = None,
    compact_rule: bool = False,
) -> str:
    """`frame` (index dropped) in output format `fmt`, one of `FORMATS`.

    `digits` rounds floats in the table and markdown formats only; csv and json keep every
    digit. `right` overrides which columns are right-aligned (default: the numeric ones).
    """
    if fmt == "csv":
        return csv_text(frame)
    if fmt == "json":
        return to_json(frame_records(frame))
    header, rows = frame_cells(frame, digits)
    flags = numeric_columns(frame) if right is None else list(right)
    if fmt == "markdown":
        return markdown_table(header, rows, right=flags, compact_rule=compact_rule)
    if fmt == "table":
        return text_table(header, rows, right=flags)
    raise ValueError(f"unknown table format {fmt!r}; use one of {', '.join(FORMATS)}")


def render_rows(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    fmt: str,
    *,
    right: Sequence[bool] | None = None,
    compact_rule: bool = False,
) -> str:
    """Already formatted string cells as a ``table`` (`text_table`) or ``markdown`` table."""
    if fmt == "markdown":
        return markdown_table(header, rows, right=right, compact_rule=compact_rule)
    if fmt == "table":
        return text_table(header, rows, right=right)
    raise ValueError(f"string cells render as table or markdown, not {fmt!r}")


def heading(text: str, fmt: str) -> str:
    """A section title: a markdown level-3 heading, or DomainBed's ``-------- text``; `text`
    through `safe_text`."""
    return f"### {safe_text(text)}" if fmt == "markdown" else f"-------- {safe_text(text)}"
