"""Read users' long-form results (CSV or JSON lines) into validated per-seed error arrays.

One row per (algorithm, seed, split, environment):

=============  ==========================================================================
column         meaning
=============  ==========================================================================
algorithm      name of the DG algorithm
environment    name of the test environment
error          test error as a fraction in [0, 1] (or ``accuracy`` instead; with
               ``percent=True`` either may be given in [0, 100])
split          ``loo``: model trained without that given environment, tested on it;
               ``all``: model trained on all given environments, tested on an environment
               of E_all (used by the ideal measure, Eq. 4 of the worst+gap paper)
seed           optional; any label (integers are sorted numerically)
=============  ==========================================================================

Other columns are ignored. JSON lines files hold one object per line with the same fields.
Every problem is reported as one OodevalError line naming the file line and the fix; the file is
only ever parsed as text (never executed or unpickled).
"""

from __future__ import annotations

import codecs
import csv
import io
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from oodeval._names import refuse_lookalikes
from oodeval._text import first_character, input_name, read_text, reopener
from oodeval.errors import OodevalError, listing, option
from oodeval.results.jsonrows import json_lines_frame, json_records_frame

__all__ = ["SPLITS", "LongResults", "read_results", "results_from_frame"]

SPLITS = ("loo", "all")
_KEYS = ("algorithm", "seed", "split", "environment")
_JSON_SUFFIXES = {".jsonl", ".ndjson", ".json"}
_LABEL_COLUMNS = ("algorithm", "environment", "split", "seed")
_VALUE_COLUMNS = ("error", "accuracy")
_USED = {*_LABEL_COLUMNS, *_VALUE_COLUMNS}  # columns parsed
#: A seed written as an integer (read exactly, any length up to Python's int-parsing limit).
_INTEGER = re.compile(r"[+-]?[0-9]{1,4000}")
#: An integer as a value cell may hold it (pandas reads one of over ~20 digits as NaN, not inf).
_DIGITS = re.compile(r"[+-]?[0-9]+")
#: Rows a CSV is read at a time, and rows per slice of the validation's index arrays: a chunk
#: of text cells is ~30 MB while it is parsed.
CHUNK_ROWS = 1_000_000


@dataclass(frozen=True)
class LongResults:
    """Validated results: LOO errors and (optionally) all-environment errors as dense arrays.

    Attributes
    ----------
    algorithms : tuple of str, in order of first appearance
    seeds : tuple of str, sorted (numerically when every seed is an integer); ``("",)`` when the
        file has no seed column
    has_seed : bool, whether the file had a seed column
    given_environments : tuple of str (the N environments of the loo rows)
    all_environments : tuple of str (E_all of the all rows; empty when there are none)
    loo : ndarray of shape (n_seeds, n_algorithms, N), error fractions
    full : ndarray of shape (n_seeds, n_algorithms, len(all_environments)) or None
    value_column : "error" or "accuracy", as found in the file
    notes : tuple of str, remarks on the input for the user (e.g. an algorithm whose values look
        like fractions in a file read as percentages)
    """

    algorithms: tuple[str, ...]
    seeds: tuple[str, ...]
    has_seed: bool
    given_environments: tuple[str, ...]
    all_environments: tuple[str, ...]
    loo: np.ndarray
    full: np.ndarray | None
    value_column: str
    notes: tuple[str, ...] = ()

    def errors_table(self) -> dict[str, np.ndarray]:
        """The errors as the long-form table of `oodeval.measures.meta`, labels coded.

        Columns seed, algorithm, split, environment, error; seed, algorithm and environment hold
        integer positions in `seeds`, `algorithms` and the split's environments (integer labels
        group fastest). Rows seed by seed, algorithm by algorithm, the loo rows (given
        environments in order) before the all rows.
        """
        parts = [("loo", self.loo)]
        if self.full is not None:
            parts.append(("all", self.full))
        columns: dict[str, list[np.ndarray]] = {
            k: [] for k in ("seed", "algorithm", "split", "environment", "error")
        }
        for split, cube in parts:
            s, a, e = (i.ravel() for i in np.indices(cube.shape))
            columns["seed"].append(s)
            columns["algorithm"].append(a)
            columns["split"].append(np.full(cube.size, split))
            columns["environment"].append(e)
            columns["error"].append(cube.ravel())
        return {k: np.concatenate(v) for k, v in columns.items()}


def _csv_options(*, quoted: bool = True, **more: object) -> dict[str, object]:
    """`pandas.read_csv` options for a results CSV: every cell as written (no NA guessing).

    Spaces after a comma are skipped (``a, "b"`` is the cell ``b``) only in a file that has a
    quote (`quoted`): elsewhere a cell's leading spaces are stripped after reading (labels) or
    skipped by the number parser (values), the same cells at a third less parsing time.
    """
    more.setdefault("dtype", str)
    return dict(
        keep_default_na=False,
        skipinitialspace=quoted,
        index_col=False,
        encoding="utf-8-sig",
        engine="c",
        **more,
    )


def _has_quote(source: Callable[[], Path | io.BytesIO]) -> bool:
    """Whether the input holds a ``"`` anywhere (read in 4 MiB blocks; ~0.05 s a 200 MB file)."""
    given = source()
    block = bytearray(1 << 22)
    with given.open("rb", buffering=0) if isinstance(given, Path) else given as stream:
        while count := stream.readinto(block):
            if block.find(b'"', 0, count) >= 0:
                return True
    return False


@contextmanager
def _readable_csv(name: str) -> Iterator[None]:
    """Turn the CSV parsers' errors into one OodevalError line naming `name`."""
    try:
        yield
    except (pd.errors.ParserError, csv.Error) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OodevalError(
            f"{name} is not a readable CSV ({first}); every row needs the header's columns"
        ) from None


def _header(source: Callable[[], Path | io.BytesIO], name: str) -> list[str]:
    """The header's cells as written. A column written twice is refused (pandas would rename
    the second, ``error.1``), and so is a first row longer than the header (pandas only warns
    there, and drops its extra fields); `_read_csv` refuses a later long row. Only the first
    two rows are read."""
    given = source()
    binary = given.open("rb") if isinstance(given, Path) else given
    with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader, [])
        lowered = [c.strip().lower() for c in header]
        repeated = sorted({c for c in lowered if lowered.count(c) > 1})
        if repeated:
            raise OodevalError(
                f"{name}: column {repeated[0]!r} appears more than once in the header; keep one"
            )
        first = next((row for row in reader if row), [])
        if len(first) > len(header):
            raise _too_many_fields(name, reader.line_num, len(first), len(header))
    return header


def _too_many_fields(
    name: str, line: int | str, fields: int | str, width: int | str
) -> OodevalError:
    return OodevalError(
        f"{name} is not a readable CSV (line {line} has {fields} fields, the header {width}); "
        "every row needs the header's columns"
    )


#: The C parser's words for a row longer than the header (with ``index_col=False``).
_TOO_MANY = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


#: A quote-free CSV of at least this many bytes is parsed in byte ranges on parallel threads
#: (one a CPU, at most `MOST_THREADS`); pandas' C tokenizer runs without the GIL.
PARALLEL_BYTES = 32 * 2**20
MOST_THREADS = 4


def _read_csv(source: Callable[[], Path | io.BytesIO], name: str, *, percent: bool) -> LongResults:
    """Read a results CSV (`source` gives it afresh, `oodeval._text.reopener`) with
    `pandas.read_csv`, `CHUNK_ROWS` rows at a time: every column but the value column as a
    categorical (integer codes into its distinct cells, never a Python string a row), the value
    column as pandas infers it (float64 when every cell is a number), then validate; row k
    (from 0) is on line k + 2.

    A big file without quotes is cut at line ends into `_spans` read side by side (no cell can
    hold a line end there); the chunks are joined in file order, so the result is the same.
    """
    with _readable_csv(name):
        _header(source, name)
        quoted = _has_quote(source)
        names = list(pd.read_csv(source(), nrows=0, **_csv_options(quoted=quoted)).columns)
        dtypes = {c: "category" for c in names if str(c).strip().lower() not in _VALUE_COLUMNS}
        options = _csv_options(quoted=quoted, dtype=dtypes, low_memory=False)
        spans = _spans(source, name, len(names), parallel=not quoted)
        lowered = {raw: str(raw).strip().lower() for raw in names}

        def chunks_of(span: _Span) -> list[_Chunk]:
            return _span_chunks(source, span, name, names, options, lowered)

        if len(spans) == 1:
            chunks = chunks_of(spans[0])
        else:
            with ThreadPoolExecutor(len(spans)) as threads:
                chunks = [chunk for part in threads.map(chunks_of, spans) for chunk in part]
        labels: dict[str, _Labels] = {}
        for raw, column in lowered.items():
            if column in _LABEL_COLUMNS and chunks:
                labels[column] = _joined_labels(chunks, column) or _labels(
                    pd.read_csv(source(), usecols=[raw], **_csv_options(quoted=quoted))[raw]
                )
        values = [chunk.values for chunk in chunks]
        frame = pd.concat(values, ignore_index=True) if values else pd.DataFrame()
        del chunks, values
    return _frame_results(
        frame,
        percent=percent,
        name=name,
        where="line",
        first_line=2,
        columns=list(lowered.values()),
        labels=labels,
    )


@dataclass(frozen=True)
class _Span:
    """Bytes `start` to `stop` of the input; `line` is the file line that `start` begins."""

    start: int
    stop: int
    line: int


def _spans(
    source: Callable[[], Path | io.BytesIO], name: str, width: int, *, parallel: bool
) -> list[_Span]:
    """The input cut at line ends into one span a thread (one span unless `parallel` and the
    input has `PARALLEL_BYTES`). A span past the first starts at a non-blank line, which is
    refused if it has more than `width` fields (pandas takes a long first row for an index)
    and never begins with U+FEFF (which the parser drops at the start of its input)."""
    given = source()
    with given.open("rb") if isinstance(given, Path) else given as stream:
        size = stream.seek(0, io.SEEK_END)
        threads = min(os.cpu_count() or 1, MOST_THREADS) if parallel else 1
        if size < PARALLEL_BYTES or threads < 2:
            return [_Span(0, size, 1)]
        spans = [_Span(0, size, 1)]
        for k in range(1, threads):
            stream.seek(max(size * k // threads, spans[-1].start) - 1)
            if _bounded_line(stream) is None:  # to the end of the line holding that byte
                break
            start = stream.tell()
            while (row := _bounded_line(stream)) and (
                row.strip(b"\r\n") == b"" or row.startswith(codecs.BOM_UTF8)
            ):  # blank lines stay with the span before, and so does a row that begins with
                start = stream.tell()  # U+FEFF (the parser would drop it as a byte-order mark)
            if not row or start <= spans[-1].start:
                break
            stream.seek(spans[-1].start)
            line = spans[-1].line + _newlines(stream, start - spans[-1].start)
            if row.count(b",") + 1 > width:
                raise _too_many_fields(name, line, row.count(b",") + 1, width)
            spans[-1] = _Span(spans[-1].start, start, spans[-1].line)
            spans.append(_Span(start, size, line))
    return spans


#: The longest line `_spans` reads to find a cut: a longer one ends the cutting there (the rest
#: of the input stays in one span), so finding the cuts never holds more than this.
LINE_MOST = 1 << 20


def _bounded_line(stream: BinaryIO) -> bytes | None:
    """The rest of the line at `stream`'s position (b"" at the end), or None past `LINE_MOST`."""
    line = stream.readline(LINE_MOST)
    return None if len(line) == LINE_MOST and not line.endswith(b"\n") else line


def _newlines(stream: BinaryIO, count: int) -> int:
    """The line ends in the next `count` bytes of `stream`."""
    ends = 0
    while count > 0 and (block := stream.read(min(count, 1 << 22))):
        ends += block.count(b"\n")
        count -= len(block)
    return ends


class _SpanReader(io.RawIOBase):
    """A readable stream of one `_Span` of the input."""

    def __init__(self, source: Callable[[], Path | io.BytesIO], span: _Span) -> None:
        super().__init__()
        given = source()
        self._stream: BinaryIO = given.open("rb") if isinstance(given, Path) else given
        self._stream.seek(span.start)
        self._left = span.stop - span.start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")[: max(self._left, 0)]
        count = self._stream.readinto(view) if len(view) else 0  # type: ignore[attr-defined]
        self._left -= count
        return count

    def close(self) -> None:
        self._stream.close()
        super().close()


def _span_chunks(
    source: Callable[[], Path | io.BytesIO],
    span: _Span,
    name: str,
    names: list[str],
    options: dict[str, object],
    lowered: dict[str, str],
) -> list[_Chunk]:
    """The chunks of `span` as `pandas.read_csv` gives them, each coded (`_chunk`) as it is
    read; a span past the first has no header, and the parser's line numbers are turned into
    the file's."""
    more: dict[str, object] = {}
    if span.start:
        more = dict(header=None, names=names)
    with io.BufferedReader(_SpanReader(source, span), 1 << 20) as stream:
        try:
            reader = pd.read_csv(stream, chunksize=CHUNK_ROWS, **{**options, **more})
            return [_chunk(cells, lowered) for cells in reader]
        except pd.errors.ParserError as exc:
            many = _TOO_MANY.search(str(exc))
            if many is None:
                raise
            width, line, fields = many.groups()
            raise _too_many_fields(name, int(line) + span.line - 1, fields, width) from None


def _categories_as_written(cells: pd.Series, column: str) -> bool:
    """Whether a categorical column read from a CSV still holds its cells' text.

    `pandas.read_csv` turns categories that all look like numbers or booleans into numbers or
    booleans, merging ``1``, ``01`` and ``1.0``; such a column is read again as text. Integer
    seeds are the exception: the seed labels are normalised to integers anyway (`_seed_labels`).
    """
    dtype = cells.cat.categories.dtype
    if column == "seed" and pd.api.types.is_integer_dtype(dtype):
        return True
    return pd.api.types.is_string_dtype(dtype) and not pd.api.types.is_object_dtype(dtype)


@dataclass(frozen=True)
class _Chunk:
    """One chunk of a CSV as read, in the long form's lower-case column names: each label
    column coded (`_Labels`; None where its categories lost their text) with the kind of its
    categories, and the value column(s) as read."""

    labels: dict[str, _Labels | None]
    kinds: dict[str, str]
    values: pd.DataFrame


def _chunk(cells: pd.DataFrame, lowered: dict[str, str]) -> _Chunk:
    """`cells` (one chunk, columns named as in the header) coded as a `_Chunk`."""
    labels: dict[str, _Labels | None] = {}
    kinds: dict[str, str] = {}
    for raw, column in lowered.items():
        if column in _LABEL_COLUMNS:
            label = cells[raw]
            if isinstance(label.dtype, pd.CategoricalDtype):
                kinds[column] = str(label.cat.categories.dtype)
                as_written = _categories_as_written(label, column)
            else:
                kinds[column], as_written = str(label.dtype), True
            labels[column] = _labels(label) if as_written else None
    keep = [raw for raw, column in lowered.items() if column in _VALUE_COLUMNS]
    values = cells[keep].set_axis([lowered[raw] for raw in keep], axis=1)
    return _Chunk(labels, kinds, values.set_axis(pd.RangeIndex(len(cells)), axis=0))


def _joined_labels(chunks: list[_Chunk], column: str) -> _Labels | None:
    """The chunks' codes of label column `column` as one `_Labels` (names in order of first
    appearance over the file, as `_labels` gives them for the whole column), or None when a
    chunk's categories lost their text or the chunks' kinds differ (the column is read again)."""
    parts = [chunk.labels[column] for chunk in chunks]
    if any(part is None for part in parts) or len({c.kinds[column] for c in chunks}) > 1:
        return None
    index: dict[str, int] = {}
    luts = [
        np.array([index.setdefault(n, len(index)) for n in part.names], dtype=np.int64)
        for part in parts
        if part is not None
    ]
    codes = np.empty(sum(len(c.values) for c in chunks), dtype=np.min_scalar_type(-len(index)))
    start, first_empty = 0, None
    for part, lut in zip(parts, luts, strict=True):
        assert part is not None
        codes[start : start + len(part.codes)] = lut.astype(codes.dtype)[part.codes]
        if first_empty is None and part.first_empty is not None:
            first_empty = start + part.first_empty
        start += len(part.codes)
    return _Labels(codes, list(index), first_empty)


def read_results(path: str | Path, *, percent: bool = False) -> LongResults:
    """Read a long-form results CSV or JSON lines file (format sniffed) and validate it.

    A CSV is read by one `pandas.read_csv` with its label columns as categoricals and its values
    as float64, about 13 bytes a row (``benchmarks/results_memory.py``).

    Parameters
    ----------
    path : str or Path
        A file whose first character is ``[`` is read as a JSON list of row objects (what
        ``--format json`` prints, e.g. ``oodeval import domainbed -f json``); ``.jsonl``,
        ``.ndjson`` and ``.json`` files, and files whose first character is ``{``, as JSON lines;
        anything else as CSV. ``-``, standard input and pipes are read once, parsed in memory.
    percent : bool
        Values are percentages in [0, 100] (divided by 100).

    Returns
    -------
    LongResults
    """
    path = Path(path)
    name = input_name(path)
    what, save_as = "results file", "a UTF-8 CSV or JSON lines file"
    first = first_character(path, what=what, save_as=save_as)
    if first == "[":
        frame = json_records_frame(read_text(path, what=what, save_as=save_as), name)
    elif path.suffix.lower() in _JSON_SUFFIXES or first == "{":
        frame = json_lines_frame(read_text(path, what=what, save_as=save_as), name)
    elif not first:
        raise OodevalError(
            f"{name} is empty; expected a CSV header with columns algorithm, environment, "
            "error|accuracy, split[, seed]"
        )
    else:
        return _read_csv(reopener(path, what=what, save_as=save_as), name, percent=percent)
    return results_from_frame(frame, percent=percent, name=name)


def _seed_labels(raw: pd.Series) -> pd.Series:
    """Normalise integer-like seeds ("1", "+1", "1.0", "1e3") to "1", "1", "1", "1000" when every
    seed is one; keep other labels as written.

    Integers are read exactly, however long (never through a float or int64: seeds past 2**63
    would wrap, past 2**53 collide); a decimal is normalised only while exact (below 2**53).

    >>> _seed_labels(pd.Series(["1.0", "99999999999999999999", "-0"])).tolist()
    ['1', '99999999999999999999', '0']
    >>> _seed_labels(pd.Series(["1", "a"])).tolist()
    ['1', 'a']
    """
    normal: dict[str, str] = {}
    for label in pd.unique(raw):
        text = str(label)
        if _INTEGER.fullmatch(text):
            normal[label] = str(int(text))
            continue
        try:
            value = float(text) if "_" not in text else math.nan
        except ValueError:
            return raw
        if not (math.isfinite(value) and value.is_integer() and abs(value) < 2**53):
            return raw
        normal[label] = str(int(value))
    return raw.map(normal)


def _sorted_seeds(labels: list[str]) -> tuple[str, ...]:
    try:
        return tuple(sorted(labels, key=int))
    except ValueError:
        return tuple(sorted(labels))


def results_from_frame(
    frame: pd.DataFrame, *, percent: bool = False, name: str = "results"
) -> LongResults:
    """Validate a long-form DataFrame (text, categorical or numeric cells) and build the error
    arrays.

    The frame is used as it is: each label column is coded by its distinct cells
    (`pandas.factorize`, or a categorical's own codes) and a numeric value column is taken as
    float64; only a value column of text is parsed (`pandas.to_numeric`). `frame` may carry a
    ``_line`` column with the file line of each row (used in messages); otherwise rows are
    called "row 1", "row 2", ... Raises OodevalError, one line, on: missing columns, both error
    and accuracy columns, empty cells, non-numeric / NaN / infinite values, values outside
    [0, 1] (or [0, 100] with ``percent=True``), unknown splits, duplicate rows, no loo rows, and
    algorithms (or seeds) missing an environment that others have. `frame` is read, never
    changed.
    """
    where = "line" if "_line" in [str(c).strip().lower() for c in frame.columns] else "row"
    return _frame_results(frame, percent=percent, name=name, where=where, first_line=1)


def _frame_results(
    frame: pd.DataFrame,
    *,
    percent: bool,
    name: str,
    where: str,
    first_line: int,
    columns: list[str] | None = None,
    labels: dict[str, _Labels] | None = None,
) -> LongResults:
    """`results_from_frame`, the rows called `where` ("line" or "row") from `first_line`.

    A CSV's reader passes its header's lower-case `columns` and its label columns already
    coded (`labels`); `frame` then holds the value column(s) only.
    """
    if columns is None:
        columns = [str(c).strip().lower() for c in frame.columns]
        frame = frame.set_axis(columns, axis=1)  # a lazy copy (copy-on-write): no data copied
    rows = _coded(columns, frame, name, labels)
    return _validated(rows, percent=percent, name=name, where=where, first_line=first_line)


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


@dataclass(frozen=True)
class _Labels:
    """One label column coded: `codes` index `names` (stripped cells, first appearance first;
    a missing cell is ""); `first_empty` is the row of the first empty cell, or None."""

    codes: np.ndarray
    names: list[str]
    first_empty: int | None

    def checked(self, what: str, where: str) -> list[str]:
        """`names`, refused (`oodeval._names.refuse_lookalikes`) when two look alike."""
        refuse_lookalikes(dict.fromkeys(self.names), what, where)
        return self.names


def _labels(cells: pd.Series) -> _Labels:
    """Code a label column by its distinct cells, in order of first appearance.

    >>> _labels(pd.Series(["b", " a", "b", None, "a"], dtype=object))
    _Labels(codes=array([0, 1, 0, 2, 1], dtype=int8), names=['b', 'a', ''], first_empty=3)
    """
    if isinstance(cells.dtype, pd.CategoricalDtype):  # categories sorted: renumber them
        categories = cells.cat.categories
        raw = cells.cat.codes.to_numpy().astype(np.min_scalar_type(len(categories)))
        raw[cells.isna().to_numpy()] = len(categories)  # a missing cell: one slot past the end
        seen = pd.unique(raw)  # in order of first appearance
        order = np.empty(len(categories) + 1, dtype=np.min_scalar_type(len(seen)))
        order[seen] = np.arange(len(seen))
        local = order[raw]
        found = pd.Series(categories.take(seen[seen < len(categories)]), dtype=object)
        texts = list(_cell_texts(found))
        if (seen == len(categories)).any():
            texts.insert(int(np.flatnonzero(seen == len(categories))[0]), "")
    else:
        local, found = pd.factorize(cells, use_na_sentinel=False)
        texts = list(_cell_texts(pd.Series(found, dtype=object)))
    index: dict[str, int] = {}
    lut = np.array([index.setdefault(t.strip(), len(index)) for t in texts], dtype=np.int64)
    codes = lut.astype(np.min_scalar_type(-len(index)))[local]  # int8 for few labels
    empty = index.get("")
    first_empty = None
    if empty is not None:
        hits = np.flatnonzero(codes == empty)
        first_empty = int(hits[0]) if hits.size else None
    return _Labels(codes, list(index), first_empty)


@dataclass(frozen=True)
class _BadValue:
    """The first value cell that is not a finite number: its row, text and labels."""

    row: int
    text: str
    algorithm: str
    environment: str


@dataclass(frozen=True)
class _Rows:
    """The long form coded: label columns as `_Labels`, the value column as float64."""

    labels: dict[str, _Labels]
    value_column: str
    values: np.ndarray
    bad_value: _BadValue | None
    lines: np.ndarray | None

    @property
    def n_rows(self) -> int:
        return len(self.values)


def _numbers(cells: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The value column as float64, and the text of each cell as read (only where the column
    is not numeric; "" for a missing cell)."""
    dtype = cells.dtype
    if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
        nums = cells.to_numpy(dtype=np.float64, na_value=np.nan)  # read, never written
        return nums, np.empty(0, dtype=object)
    raw = _cell_texts(cells).str.strip()
    nums = np.array(pd.to_numeric(raw, errors="coerce"), dtype=np.float64)  # a writable copy
    return nums, raw.to_numpy(dtype=object)


def _coded(
    columns: list[str], frame: pd.DataFrame, name: str, coded: dict[str, _Labels] | None
) -> _Rows:
    """The rows of `frame` coded (`_Rows`), after the checks on `columns` (the header); label
    columns in `coded` are taken as they are."""
    if len(frame) == 0:
        raise OodevalError(
            f"{name} has a header but no rows; add one row per algorithm, environment and split"
        )
    value_col = _value_column(columns, name)
    twice = sorted({c for c in columns if c in _USED and columns.count(c) > 1})
    if twice:
        raise OodevalError(
            f"{name}: column {twice[0]!r} appears more than once (names are read "
            "case-insensitively); keep one"
        )
    cols = ["algorithm", "environment", "split"] + (["seed"] if "seed" in columns else [])
    coded = coded or {}
    labels = {col: coded[col] if col in coded else _labels(frame[col]) for col in cols}
    nums, texts = _numbers(frame[value_col])
    bad = None
    for k in np.flatnonzero(~np.isfinite(nums))[:1]:
        text = str(texts[k]) if texts.size else ("" if math.isnan(nums[k]) else str(nums[k]))
        if _DIGITS.fullmatch(text):  # pandas: NaN past int64
            nums[k] = float(text)  # an integer too large for a float: infinite
        bad = _BadValue(
            row=int(k),
            text=text,
            algorithm=labels["algorithm"].names[labels["algorithm"].codes[k]],
            environment=labels["environment"].names[labels["environment"].codes[k]],
        )
    lines = frame["_line"].to_numpy(dtype=np.int64) if "_line" in frame.columns else None
    return _Rows(labels, value_col, nums, bad, lines)


def _validated(
    rows: _Rows, *, percent: bool, name: str, where: str, first_line: int
) -> LongResults:
    """Check the coded rows in the long form's order of checks and build the error arrays."""
    lines = rows.lines

    def line(k: int) -> int:
        return int(lines[k]) if lines is not None else int(k) + first_line

    def at(k: int) -> str:
        return f"{name} {where} {line(k)}"

    for col, column in rows.labels.items():
        if column.first_empty is not None:
            raise OodevalError(
                f"{at(column.first_empty)}: {col} is empty or missing; fill it in or drop the row"
            )
    split = _split_codes(rows.labels["split"], at)
    seed_labels, seed = _seed_codes(rows.labels.get("seed"), rows.n_rows)
    algorithm = rows.labels["algorithm"].codes
    algorithms = tuple(rows.labels["algorithm"].checked("algorithm", name))
    value_col = rows.value_column
    errors, notes = _parse_values(rows, algorithm, algorithms, percent=percent, at=at, name=name)
    if value_col == "accuracy":
        errors = 1.0 - errors
    environment = rows.labels["environment"].codes
    environments = rows.labels["environment"].checked("environment", name)
    keys = {"algorithm": algorithm, "seed": seed, "split": split, "environment": environment}
    names = {"algorithm": algorithms, "seed": seed_labels, "split": SPLITS}
    names["environment"] = environments
    _check_duplicates(keys, names, "seed" in rows.labels, name, line, where)

    seeds = _sorted_seeds(seed_labels)
    position = {s: i for i, s in enumerate(seeds)}
    keys["seed"] = np.array([position[s] for s in seed_labels], dtype=seed.dtype)[seed]
    cubes: dict[str, tuple[tuple[str, ...], np.ndarray | None]] = {"all": ((), None)}
    for code, split_name in enumerate(SPLITS):
        order = _split_environments(split, environment, code)
        if not order:
            if split_name == "loo":
                raise OodevalError(
                    f"{name} has no loo rows; the measures need leave-one-environment-out errors "
                    "(split=loo), one per algorithm and given environment"
                )
            continue
        envs = tuple(environments[c] for c in order)
        cube = np.full((len(seeds), len(algorithms), len(envs)), np.nan)
        _fill(cube, keys, errors, code, order)
        _check_holes(cube, split_name, algorithms, seeds, envs, name)
        cubes[split_name] = (envs, cube)
    return LongResults(
        algorithms=algorithms,
        seeds=seeds,
        has_seed="seed" in rows.labels,
        given_environments=cubes["loo"][0],
        all_environments=cubes["all"][0],
        loo=cubes["loo"][1],  # type: ignore[arg-type]  # set: no loo rows is refused above
        full=cubes["all"][1],
        value_column=value_col,
        notes=tuple(notes),
    )


def _value_column(columns: list[str], name: str) -> str:
    """``error`` or ``accuracy``, after checking the long form's columns are there."""
    has_error, has_acc = "error" in columns, "accuracy" in columns
    if has_error and has_acc:
        raise OodevalError(
            f"{name} has both an error and an accuracy column; keep exactly one of them"
        )
    missing = [c for c in ("algorithm", "environment", "split") if c not in columns]
    if not (has_error or has_acc):
        missing.append("error (or accuracy)")
    if missing:
        found = listing(c for c in columns if c != "_line") or "none"
        raise OodevalError(
            f"{name} is missing column(s) {', '.join(missing)} (found: {found}); the long form "
            "needs algorithm, environment, error|accuracy, split[, seed]"
        )
    return "accuracy" if has_acc else "error"


def _split_codes(column: _Labels, at: Callable[[int], str]) -> np.ndarray:
    """Each row's position in `SPLITS` (split names are case-insensitive); refuse others."""
    lowered = [label.lower() for label in column.names]
    lut = np.array([SPLITS.index(s) if s in SPLITS else -1 for s in lowered], dtype=np.int8)
    codes = lut[column.codes]
    bad = np.flatnonzero(codes < 0)
    if bad.size:
        k = bad[0]
        raise OodevalError(
            f"{at(k)}: unknown split {lowered[column.codes[k]]!r}; split must be 'loo' "
            "(trained without that environment) or 'all' (trained on all given environments)"
        )
    return codes


def _seed_codes(column: _Labels | None, n_rows: int) -> tuple[list[str], np.ndarray]:
    """The seed labels (integer-like ones normalised, `_seed_labels`) and each row's code."""
    if column is None:
        return [""], np.zeros(n_rows, dtype=np.int8)
    normalised = list(_seed_labels(pd.Series(column.names, dtype=str)))
    merged = {label: i for i, label in enumerate(dict.fromkeys(normalised))}
    lut = np.array([merged[label] for label in normalised], dtype=column.codes.dtype)
    return list(merged), lut[column.codes]


def _row_slices(n: int) -> Iterator[slice]:
    """Rows 0..n-1 in slices of `CHUNK_ROWS`, so temporary index arrays stay small."""
    for start in range(0, n, CHUNK_ROWS):
        yield slice(start, min(start + CHUNK_ROWS, n))


def _cell_keys(keys: dict[str, np.ndarray], sizes: dict[str, int], rows: slice) -> np.ndarray:
    """One int64 per row of `rows`: its (seed, algorithm, split, environment) combination."""
    key = np.zeros(rows.stop - rows.start, dtype=np.int64)
    for col in _KEYS:
        key *= sizes[col]
        key += keys[col][rows]
    return key


def _first_duplicate(keys: dict[str, np.ndarray], sizes: dict[str, int]) -> np.ndarray | None:
    """The rows (first two) of the earliest row whose key recurs, or None if no key does.

    One bit per possible key finds that there is none; a valid file has at most 2 keys per row
    (every seed x algorithm x split x environment is a row), more means holes anyway.
    """
    cells = int(np.prod([max(sizes[col], 1) for col in _KEYS], dtype=np.float64))
    n = len(keys["algorithm"])
    if cells <= 2 * n + 65536:
        seen = np.zeros(cells, dtype=bool)
        for rows in _row_slices(n):
            seen[_cell_keys(keys, sizes, rows)] = True
        if np.count_nonzero(seen) == n:  # n distinct keys: no key recurs
            return None
    table = pd.DataFrame({col: keys[col] for col in _KEYS})  # a duplicate exists: find it
    hit = np.flatnonzero(table.duplicated(keep=False).to_numpy())
    if not hit.size:
        return None
    same = np.ones(n, dtype=bool)
    for col in _KEYS:
        same &= keys[col] == keys[col][hit[0]]
    return np.flatnonzero(same)[:2]


def _split_environments(split: np.ndarray, environment: np.ndarray, code: int) -> list[int]:
    """The environment codes of split `code`'s rows, in order of first appearance."""
    seen: dict[int, None] = {}
    for rows in _row_slices(len(split)):
        seen.update(dict.fromkeys(pd.unique(environment[rows][split[rows] == code]).tolist()))
    return list(seen)


def _fill(
    cube: np.ndarray, keys: dict[str, np.ndarray], errors: np.ndarray, code: int, order: list[int]
) -> None:
    """Put split `code`'s errors in `cube` (seed position, algorithm, place in `order`)."""
    local = np.full(max(order) + 1, -1, dtype=np.intp)
    local[order] = np.arange(len(order))
    n_algorithms, n_envs = cube.shape[1:]
    flat = cube.reshape(-1)
    for rows in _row_slices(len(errors)):
        mine = keys["split"][rows] == code
        at = keys["seed"][rows][mine].astype(np.intp) * n_algorithms + keys["algorithm"][rows][mine]
        at = at * n_envs + local[keys["environment"][rows][mine]]  # codes are narrow: intp first
        flat[at] = errors[rows][mine]


def _check_duplicates(
    keys: dict[str, np.ndarray],
    names: dict[str, Sequence[str]],
    has_seed: bool,
    name: str,
    line: Callable[[int], int],
    where: str,
) -> None:
    both = _first_duplicate(keys, {col: max(len(names[col]), 1) for col in _KEYS})
    if both is None:
        return
    first = {col: names[col][keys[col][both[0]]] for col in _KEYS}
    lines = " and ".join(str(line(k)) for k in both)
    seed = f", seed {first['seed']}" if has_seed else ""
    raise OodevalError(
        f"{name} has duplicate rows for algorithm {first['algorithm']}{seed}, split "
        f"{first['split']}, environment {first['environment']} ({where}s {lines}); keep one "
        "row per algorithm, seed, split and environment"
    )


def _parse_values(
    rows: _Rows,
    algorithm: np.ndarray,
    algorithms: tuple[str, ...],
    *,
    percent: bool,
    at: Callable[[int], str],
    name: str,
) -> tuple[np.ndarray, list[str]]:
    """The value column as fractions (after the first unusable cell is reported), and notes.

    With ``percent=True`` the scale is checked too (`_percent_scale`).
    """
    col = rows.value_column
    nums = rows.values
    bad = rows.bad_value
    if bad is not None:
        k, v, text = bad.row, nums[bad.row], bad.text
        ident = f"(algorithm {bad.algorithm}, environment {bad.environment})"
        if text == "":
            raise OodevalError(
                f"{at(k)}: {col} is empty or missing {ident}; fill it in or drop the row"
            )
        if text.lower() in {"nan", "na", "n/a", "null", "none"} or (
            math.isnan(v) and text.lower().lstrip("+-") == "nan"
        ):
            raise OodevalError(
                f"{at(k)}: {col} is NaN {ident}; a failed or missing run must be rerun or "
                "dropped for every algorithm"
            )
        if math.isinf(v):
            raise OodevalError(f"{at(k)}: {col} is infinite {ident}; fix the value")
        raise OodevalError(
            f"{at(k)}: {col} {text!r} is not a number {ident}; write a plain decimal such as 0.25"
        )
    scale = 100.0 if percent else 1.0
    low = np.flatnonzero(nums < 0)
    if low.size:
        k = low[0]
        raise OodevalError(f"{at(k)}: {col} {nums[k]:g} is negative; values must lie in [0, 1]")
    high = np.flatnonzero(nums > scale)
    if high.size:
        k = high[0]
        if percent:
            raise OodevalError(
                f"{at(k)}: {col} {nums[k]:g} > 100 is not a percentage; check the value"
            )
        raise OodevalError(
            f"{at(k)}: {col} {nums[k]:g} > 1 looks like percentages; pass "
            f"{option('percent', True)} or divide by 100"
        )
    notes = _percent_scale(algorithm, algorithms, nums, col, name) if percent else []
    if percent:
        nums = nums / scale
    return nums, notes


def _percent_scale(
    algorithm: np.ndarray, algorithms: Sequence[str], nums: np.ndarray, col: str, name: str
) -> list[str]:
    """Check that values read as percentages are; return a note on mixed scales.

    `algorithm` holds each value's position in `algorithms`. Every value <= 1 means the file
    holds fractions: read as percentages they would all be near-perfect, so the file is refused.
    An algorithm whose values are all <= 1 while another's exceed 1 was probably written as
    fractions among percentages; it would then "win", so the returned note names it (the values
    are still read as percentages).

    >>> codes, nums = np.array([0, 0, 1, 1]), np.array([20.0, 30.0, 0.2, 0.3])
    >>> _percent_scale(codes, ["A", "B"], nums, "error", "r.csv")[0][:55]
    'percent=True: B has every error <= 1 while other algori'
    """
    if nums.size and float(nums.max()) <= 1.0:
        raise OodevalError(
            f"{name}: every {col} is <= 1, so these are fractions, not percentages; drop "
            f"{option('percent', True)}"
        )
    top = pd.Series(nums).groupby(algorithm).max()
    low = [str(algorithms[a]) for a, v in top.items() if v <= 1.0]
    if not low:
        return []
    shown = listing(low)
    verb = "has" if len(low) == 1 else "have"
    return [
        f"{option('percent', True)}: {shown} {verb} every {col} <= 1 while other algorithms "
        f"exceed 1; if {shown} {'was' if len(low) == 1 else 'were'} written as fractions, multiply "
        f"{'its' if len(low) == 1 else 'their'} values by 100"
    ]


def _check_holes(
    out: np.ndarray,
    split: str,
    algorithms: tuple[str, ...],
    seeds: tuple[str, ...],
    envs: tuple[str, ...],
    name: str,
) -> None:
    """Refuse a (seeds, algorithms, envs) array with a cell no row filled, naming it precisely."""
    has_seed = seeds != ("",)
    holes = np.argwhere(np.isnan(out))
    if holes.size:
        s, a, e = holes[0]
        present = np.flatnonzero(~np.isnan(out[s, :, e]))
        seed_txt = f" (seed {seeds[s]})" if has_seed else ""
        if present.size:
            other = algorithms[present[0]]
            raise OodevalError(
                f"{name}: algorithm {algorithms[a]}{seed_txt} has no {split} row for environment "
                f"{envs[e]}, which algorithm {other} has; add the row or remove environment "
                f"{envs[e]} for every algorithm"
            )
        other_seed = np.flatnonzero(~np.isnan(out[:, a, e]))
        if other_seed.size:
            raise OodevalError(
                f"{name}: algorithm {algorithms[a]} has no {split} row for environment "
                f"{envs[e]} in seed {seeds[s]}, but has one in seed {seeds[other_seed[0]]}; "
                "give every seed the same environments"
            )
        raise OodevalError(  # environment present only for another seed and another algorithm
            f"{name}: no algorithm has a {split} row for environment {envs[e]} in seed "
            f"{seeds[s]}; give every seed the same environments"
        )
