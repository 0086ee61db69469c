"""Long-form results read a chunk at a time (issue 23, bounded memory): the chunk size changes
neither the tables nor the messages, memory stays within a few times the file, the measures
scored from the error arrays equal those of the long table, and the benchmark runs."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import oodeval.results.longform as longform
from oodeval.errors import OodevalError
from oodeval.measures.meta import unit_measures
from oodeval.results import read_results, results_from_frame, score_results

REPO = Path(__file__).resolve().parents[2]
HEADER = "algorithm,seed,split,environment,error\n"


def _rows(n_algorithms: int, seeds: list[str], n_loo: int, n_all: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    rows = [
        f"alg{a},{s},{split},e{e},{rng.randrange(10**6) / 10**6!r}"
        for a in range(n_algorithms)
        for s in seeds
        for split, n in (("loo", n_loo), ("all", n_all))
        for e in range(n)
    ]
    rng.shuffle(rows)
    return rows


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def _read(path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(longform, "CHUNK_ROWS", chunk)
    try:
        return read_results(path)
    except OodevalError as exc:
        return str(exc)


def test_chunk_size_changes_nothing(tmp_path, monkeypatch):
    # 150 algorithms: their codes outgrow int8 in a later chunk; seeds "1.0" and "2" normalise
    path = _write(tmp_path / "r.csv", _rows(150, ["1.0", "2", "10"], 3, 2))
    small, whole = _read(path, 7, monkeypatch), _read(path, 10**6, monkeypatch)
    assert small.algorithms == whole.algorithms and small.algorithms[0].startswith("alg")
    assert small.seeds == whole.seeds == ("1", "2", "10")
    assert small.given_environments == whole.given_environments
    assert small.all_environments == whole.all_environments
    np.testing.assert_array_equal(small.loo, whole.loo)
    np.testing.assert_array_equal(small.full, whole.full)
    # every cell equals the file's value (an independent pivot with pandas)
    frame = pd.read_csv(path, dtype={"seed": str})
    row = frame.iloc[123]
    s = small.seeds.index(str(int(float(row["seed"]))))
    a = small.algorithms.index(row["algorithm"])
    envs = small.given_environments if row["split"] == "loo" else small.all_environments
    cube = small.loo if row["split"] == "loo" else small.full
    assert cube[s, a, envs.index(row["environment"])] == row["error"]


def test_problems_in_later_chunks_keep_their_order(tmp_path, monkeypatch):
    rows = _rows(4, ["0"], 50, 0, seed=1)
    rows[20] = rows[20].rsplit(",", 1)[0] + ",abc"  # line 22: not a number
    alg, seed, split, _, error = rows[150].split(",")
    rows[150] = f"{alg},{seed},{split},,{error}"  # line 152: empty environment
    path = _write(tmp_path / "r.csv", rows)
    want = "r.csv line 152: environment is empty or missing; fill it in or drop the row"
    # the label columns are checked before the values, whatever chunk each problem is in
    assert _read(path, 5, monkeypatch) == _read(path, 10**6, monkeypatch) == want

    rows = _rows(3, ["0"], 40, 0, seed=2)
    rows.append(rows[10])  # a duplicate of line 12 on line 122, in another chunk
    alg, seed, split, env, _ = rows[10].split(",")
    path = _write(tmp_path / "d.csv", rows)
    want = (
        f"d.csv has duplicate rows for algorithm {alg}, seed {seed}, split {split}, environment "
        f"{env} (lines 12 and 122); keep one row per algorithm, seed, split and environment"
    )
    assert _read(path, 4, monkeypatch) == _read(path, 10**6, monkeypatch) == want


def test_frames_are_read_in_chunks_too(monkeypatch):
    frame = pd.DataFrame(
        {
            "algorithm": ["A", "B"] * 6,
            "environment": [f"e{i // 2}" for i in range(12)],
            "split": ["loo"] * 12,
            "error": np.linspace(0.1, 0.6, 12),
        }
    )
    monkeypatch.setattr(longform, "CHUNK_ROWS", 5)
    small = results_from_frame(frame)
    monkeypatch.setattr(longform, "CHUNK_ROWS", 100)
    np.testing.assert_array_equal(small.loo, results_from_frame(frame).loo)
    assert small.loo[0, 1, 2] == frame["error"][5]
    frame.loc[7, "algorithm"] = None  # a missing label is reported as missing, not as "nan"
    with pytest.raises(OodevalError, match=r"^results row 8: algorithm is empty or missing"):
        results_from_frame(frame)


@contextlib.contextmanager
def _string_inference(on: bool):
    """pandas 3's str dtype (``future.infer_string``) on or off: off, ``astype(str)`` turns None
    and NaN into the text 'None' and 'nan', as on pandas 2 (which pyproject allows)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas 3 deprecates turning it off
        try:
            pd.get_option("future.infer_string")
        except (KeyError, pd.errors.OptionError):  # pandas 2.0 (always off), 4 (always on)
            if on != (int(pd.__version__.split(".")[0]) >= 3):
                pytest.skip(f"pandas {pd.__version__} cannot switch its str dtype")
            yield
            return
        with pd.option_context("future.infer_string", on):
            yield


@pytest.mark.parametrize("missing", [None, np.nan], ids=["None", "NaN"])
@pytest.mark.parametrize("infer_string", [False, True], ids=["pandas-2-strings", "str-dtype"])
def test_a_missing_cell_of_an_object_column_reads_as_empty(missing, infer_string):
    """A missing label or value in an object column is reported as empty or missing, never read
    as a label or value 'None' or 'nan', whichever string type pandas gives `astype(str)`."""
    with _string_inference(infer_string):
        frame = pd.DataFrame(
            {
                "algorithm": pd.Series(["A", "B", "A", "B"], dtype=object),
                "environment": pd.Series(["e1", "e1", "e2", missing], dtype=object),
                "split": ["loo"] * 4,
                "error": pd.Series([0.1, 0.2, 0.3, 0.4], dtype=object),
            }
        )
        with pytest.raises(OodevalError) as caught:
            results_from_frame(frame)
        assert str(caught.value).startswith(
            "results row 4: environment is empty or missing; fill it in"
        ), caught.value
        frame.loc[3, "environment"] = "e2"
        frame.loc[2, "error"] = missing
        with pytest.raises(OodevalError) as caught:
            results_from_frame(frame)
        assert str(caught.value).startswith(
            "results row 3: error is empty or missing (algorithm A, environment e2)"
        ), caught.value


def test_reading_stays_within_a_few_times_the_file(tmp_path, monkeypatch):
    # 200,000 rows of ~27 bytes (5.4 MB). What the reader holds (tracemalloc: Python objects and
    # numpy arrays): the label codes and values, 13 bytes a row (0.5x the file); the chunks
    # pandas parsed, held until their categoricals are joined (codes and float64 values again,
    # 0.5x); the validation's per-slice index arrays (< 0.2x): under 2x in all. 4x leaves room
    # for other pandas versions; the reader that held every cell as a Python string peaked at
    # 16.5x.
    path = _write(tmp_path / "big.csv", _rows(20, [str(s) for s in range(5)], 400, 1600))
    monkeypatch.setattr(longform, "CHUNK_ROWS", 20_000)
    tracemalloc.start()
    try:
        read_results(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * path.stat().st_size


@pytest.mark.parametrize("full", [True, False])
def test_measures_from_the_arrays_equal_those_of_the_long_table(tmp_path, full):
    rows = _rows(6, ["0", "1", "2"], 5, 7 if full else 0, seed=3)
    data = read_results(_write(tmp_path / "r.csv", rows))
    names = ["average", "worst", "gap", "worst_plus_gap"]
    got = score_results(data, measures=names).measures
    units = pd.DataFrame(unit_measures(data.errors_table(), names))  # the row-by-row route
    assert list(got["algorithm"]) == [data.algorithms[a] for a in units["algorithm"]]
    assert list(got["seed"]) == [data.seeds[s] for s in units["seed"]]
    columns = names + (["ideal"] if full else [])
    assert ("ideal" in got) == full
    for column in columns:
        np.testing.assert_array_equal(got[column].to_numpy(), units[column].to_numpy())


def test_the_benchmark_runs_small(tmp_path):
    done = subprocess.run(
        [sys.executable, "benchmarks/results_memory.py", "--rows", "3000", "--repeat", "1"]
        + ["--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("file: ") and " rows, " in lines[0]
    assert "oodeval measures FILE:" in lines[1] and "rows/s, peak RSS" in lines[1]
    assert lines[-2].startswith("ratio wall oodeval / pandas.read_csv(FILE): ")
    assert lines[-1].startswith("ratio peak RSS oodeval / pandas.read_csv(FILE): ")
    assert list(tmp_path.iterdir()) == []  # the synthetic file is removed


def _read_in_spans(path: Path, threads: int, monkeypatch: pytest.MonkeyPatch):
    """`read_results(path)` with the file cut into `threads` spans (1: read whole)."""
    monkeypatch.setattr(longform, "PARALLEL_BYTES", 1 if threads > 1 else 2**62)
    monkeypatch.setattr(longform.os, "cpu_count", lambda: threads)
    monkeypatch.setattr(longform, "MOST_THREADS", threads)
    return _read(path, 50, monkeypatch)


def _spans_of(path: Path, threads: int, monkeypatch: pytest.MonkeyPatch) -> list:
    monkeypatch.setattr(longform, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(longform.os, "cpu_count", lambda: threads)
    monkeypatch.setattr(longform, "MOST_THREADS", threads)
    return longform._spans(lambda: path, path.name, 5, parallel=True)


def _same_results(one, other) -> None:
    if isinstance(one, str) or isinstance(other, str):
        assert one == other
        return
    assert (one.algorithms, one.seeds) == (other.algorithms, other.seeds)
    assert one.given_environments == other.given_environments
    assert one.all_environments == other.all_environments
    np.testing.assert_array_equal(one.loo, other.loo)
    np.testing.assert_array_equal(one.full, other.full)


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_spans_read_side_by_side_change_nothing(tmp_path, monkeypatch, threads):
    # blank lines (also where a cut may fall) and CRLF line ends: the spans start at a row
    lines = [
        r + ("\r\n" if k % 3 else "\n") + ("\n" if k % 7 == 0 else "")
        for k, r in enumerate(_rows(30, ["1", "2"], 6, 4, seed=4))
    ]
    path = tmp_path / "r.csv"
    path.write_text(HEADER + "".join(lines), encoding="utf-8")
    spans = _spans_of(path, threads, monkeypatch)
    assert len(spans) == threads and spans[0].start == 0 and spans[-1].stop == path.stat().st_size
    data = path.read_bytes()
    for before, after in zip(spans, spans[1:], strict=False):
        assert before.stop == after.start and data[after.start - 1 : after.start] == b"\n"
        assert after.line == data[: after.start].count(b"\n") + 1  # the file line it begins
        assert data[after.start : after.start + 1] not in (b"\n", b"\r")  # not a blank line
    _same_results(_read_in_spans(path, threads, monkeypatch), _read_in_spans(path, 1, monkeypatch))


def test_a_long_row_in_a_later_span_is_named_by_its_file_line(tmp_path, monkeypatch):
    rows = _rows(20, ["0"], 10, 0, seed=5)
    path = _write(tmp_path / "r.csv", rows)
    start = _spans_of(path, 2, monkeypatch)[1]
    first = start.line - 2  # the row that begins the second span
    for k, line in [(first, start.line), (first + 7, start.line + 7), (first - 3, start.line - 3)]:
        changed = list(rows)
        changed[k] += ",x"
        _write(path, changed)
        if k != first:  # (the first row of a span is checked as the spans are cut)
            assert _spans_of(path, 2, monkeypatch)[1].line == start.line  # the cut has not moved
        want = (
            f"r.csv is not a readable CSV (line {line} has 6 fields, the header 5); every row "
            "needs the header's columns"
        )
        assert _read_in_spans(path, 2, monkeypatch) == want
        assert _read_in_spans(path, 1, monkeypatch) == want


def test_a_byte_order_mark_begins_only_the_file(tmp_path, monkeypatch):
    # U+FEFF at the start of the row that would begin a later span is a cell's character, as it
    # is when the file is read whole (here: a second algorithm that looks like another): that
    # row stays with the span before, since the parser drops a U+FEFF beginning its input
    rows = _rows(20, ["0"], 10, 0, seed=6)
    path = _write(tmp_path / "r.csv", rows)
    k = _spans_of(path, 2, monkeypatch)[1].line - 2
    rows[k] = "\ufeff" + rows[k]
    path.write_text("\ufeff" + HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    assert _spans_of(path, 2, monkeypatch)[1].line - 2 == k + 1
    whole = _read_in_spans(path, 1, monkeypatch)
    assert isinstance(whole, str) and "differ only by" in whole
    assert _read_in_spans(path, 2, monkeypatch) == whole


def test_spaces_after_a_comma_are_skipped_with_and_without_quotes(tmp_path, monkeypatch):
    plain = "algorithm, split, environment, error\nA, loo, e1,  0.25\nA, loo,e2 , 0.5\n"
    quoted = 'algorithm, split, environment, error\n"A", loo, "e1",  0.25\nA, "loo",e2 , "0.5"\n'
    for text in (plain, quoted):
        path = tmp_path / "r.csv"
        path.write_text(text, encoding="utf-8")
        got = read_results(path)
        assert got.algorithms == ("A",) and got.given_environments == ("e1", "e2")
        np.testing.assert_array_equal(got.loo, [[[0.25, 0.5]]])


def test_a_line_too_long_to_cut_at_keeps_the_rest_in_one_span(tmp_path, monkeypatch):
    # finding a cut reads at most LINE_MOST bytes of a line: a longer row (here a long label)
    # where a cut would fall ends the cutting, and the file reads as it does whole
    rows = _rows(20, ["0"], 10, 0, seed=7)
    path = _write(tmp_path / "r.csv", rows)
    k = _spans_of(path, 2, monkeypatch)[1].line - 3  # the row that holds the cut byte
    alg, rest = rows[k].split(",", 1)
    rows[k] = f"{alg}{'x' * 400},{rest}"
    _write(path, rows)
    monkeypatch.setattr(longform, "LINE_MOST", 64)
    assert len(_spans_of(path, 2, monkeypatch)) == 1
    monkeypatch.setattr(longform, "LINE_MOST", 1 << 20)
    assert len(_spans_of(path, 2, monkeypatch)) == 2
    _same_results(_read_in_spans(path, 2, monkeypatch), _read_in_spans(path, 1, monkeypatch))
