"""Long-form rows coded as integers while they are read, chunk by chunk.

A results file of millions of rows never exists as Python strings all at once: each label column
(algorithm, environment, split, seed) is kept as integer codes into its labels (stripped, in
order of first appearance; int8 while a column has at most 128 labels, int16 up to 32,768) and
the value column as float64, about 13 bytes a row. A chunk's strings
are dropped once it is coded. The first row at fault for each check (an empty label, an unknown
split, a value that is not a finite number) is remembered rather than raised, so that the caller
(`oodeval.results.longform`) reports problems in the same order whatever the chunk size.

>>> rows = CodedRows(("algorithm", "split"), "error")
>>> rows.add(pd.DataFrame({"algorithm": ["ERM", " IRM", "ERM"], "split": ["loo"] * 3,
...                        "error": ["0.2", "0.3", "x"]}))
>>> list(rows.labels["algorithm"].index), rows.bad_value
(['ERM', 'IRM'], BadValue(row=2, text='x', algorithm='ERM', environment=''))
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from oodeval._names import refuse_lookalikes

__all__ = ["CHUNK_ROWS", "BadValue", "CodedRows", "LabelColumn", "frame_chunks"]

#: Rows coded at a time: about 60 bytes a cell while a chunk is strings, so ~60 MB at most.
CHUNK_ROWS = 200_000


#: An integer as a value cell may hold it (pandas reads one of over ~20 digits as NaN, not inf).
_DIGITS = re.compile(r"[+-]?[0-9]+")


def _cell_texts(cells: pd.Series) -> pd.Series:
    """`cells` as text, a missing cell (None, NaN, NA) as "": ``astype(str)`` alone gives the
    text 'None' or 'nan' for it on pandas 2 (or with pandas 3's str dtype off). A nullable
    column (``Float64``, ``Int64``, ``boolean``, pyarrow's) holds no "" of its own type, so it
    is made an object column first; numpy and string columns are filled as they are.

    >>> _cell_texts(pd.Series(["a", None, float("nan")], dtype=object)).tolist()
    ['a', '', '']
    >>> _cell_texts(pd.Series([0.5, pd.NA], dtype="Float64")).tolist()
    ['0.5', '']
    """
    if not isinstance(cells.dtype, (np.dtype, pd.StringDtype)):
        cells = cells.astype(object)
    return cells.where(cells.notna(), "").astype(str)


class LabelColumn:
    """One label column as integer codes into `index` (stripped label -> code, first appearance).

    A missing cell (NaN in a DataFrame) counts as empty. `first_empty` is the row of the first
    empty cell, or None.
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.parts: list[np.ndarray] = []
        self.first_empty: int | None = None

    def add(self, cells: pd.Series, start: int) -> np.ndarray:
        """Code `cells` (rows `start`, `start` + 1, ...); return their codes."""
        local, uniques = pd.factorize(_cell_texts(cells), use_na_sentinel=False)
        lut = np.empty(len(uniques) + 1, dtype=np.int64)
        for k, label in enumerate(uniques):
            label = label.strip() if isinstance(label, str) else ""
            lut[k] = self.index.setdefault(label, len(self.index))
        codes = lut.astype(np.min_scalar_type(-len(self.index)))[local]  # int8 for few labels
        if self.first_empty is None and "" in self.index:
            empty = np.flatnonzero(codes == self.index[""])
            if empty.size:
                self.first_empty = start + int(empty[0])
        self.parts.append(codes)
        return codes

    def labels(self) -> list[str]:
        """The labels in code order."""
        return list(self.index)

    def names(self, what: str, where: str) -> list[str]:
        """The labels in code order, refused (`oodeval._names.refuse_lookalikes`) when two of
        them look alike: `what` is their kind ("algorithm"), `where` the file."""
        refuse_lookalikes(self.index, what, where)
        return list(self.index)

    def codes(self) -> np.ndarray:
        """Every row's code (the chunks joined, in the widest chunk's type; chunks released)."""
        codes = np.concatenate(self.parts) if self.parts else np.zeros(0, np.int8)
        self.parts = [codes]
        return codes


@dataclass(frozen=True)
class BadValue:
    """The first value cell that is not a finite number: its row, text and labels."""

    row: int
    text: str
    algorithm: str
    environment: str


class CodedRows:
    """Rows added chunk by chunk (`add`): label columns coded, the value column parsed.

    Parameters
    ----------
    label_columns : the label columns to code (e.g. algorithm, environment, split, seed)
    value_column : the column parsed as float64 (``pd.to_numeric`` of the stripped text)
    """

    def __init__(self, label_columns: Iterable[str], value_column: str) -> None:
        self.labels = {col: LabelColumn() for col in label_columns}
        self.value_column = value_column
        self.parts: list[np.ndarray] = []
        self.lines: list[np.ndarray] = []
        self.n_rows = 0
        self.bad_value: BadValue | None = None

    def add(self, chunk: pd.DataFrame) -> None:
        """Code the next rows; a ``_line`` column, if any, is kept as the rows' file lines."""
        start = self.n_rows
        for col, column in self.labels.items():
            column.add(chunk[col], start)
        cells = _cell_texts(chunk[self.value_column])
        raw = cells.str.strip()
        nums = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
        if self.bad_value is None:
            for k in np.flatnonzero(~np.isfinite(nums))[:1]:
                text = raw.iloc[k]
                if isinstance(text, str) and _DIGITS.fullmatch(text):  # pandas: NaN past int64
                    nums = nums.copy()
                    nums[k] = float(text)  # an integer too large for a float: infinite
                self.bad_value = BadValue(
                    row=start + int(k),
                    text=text if isinstance(text, str) else "",
                    algorithm=self._label(chunk, "algorithm", k),
                    environment=self._label(chunk, "environment", k),
                )
        self.parts.append(nums)
        if "_line" in chunk.columns:
            self.lines.append(chunk["_line"].to_numpy(dtype=np.int64))
        self.n_rows += len(chunk)

    @staticmethod
    def _label(chunk: pd.DataFrame, col: str, k: int) -> str:
        if col not in chunk.columns:
            return ""
        cell = _cell_texts(chunk[col].iloc[k : k + 1]).iloc[0]  # as `LabelColumn.add` reads it
        return cell.strip() if isinstance(cell, str) else ""

    def values(self) -> np.ndarray:
        """Every row's value (the chunks joined; the chunks are released)."""
        nums = np.concatenate(self.parts) if self.parts else np.zeros(0)
        self.parts = [nums]
        return nums

    def line_numbers(self) -> np.ndarray | None:
        """The ``_line`` column the chunks carried, or None."""
        return np.concatenate(self.lines) if self.lines else None


def frame_chunks(frame: pd.DataFrame, rows: int = CHUNK_ROWS) -> Iterable[pd.DataFrame]:
    """`frame` in slices of `rows` rows (views, not copies, where pandas allows).

    >>> [len(c) for c in frame_chunks(pd.DataFrame({"a": range(5)}), 2)]
    [2, 2, 1]
    """
    for start in range(0, len(frame), rows):
        yield frame.iloc[start : start + rows]
