"""Fuzzing `oodeval measures` and `oodeval report` with results files, valid and broken.

The contract, for every generated file: a valid one gives exit 0 and the measures a test computes
itself with numpy from the generated errors; a broken one gives exit 0 with a parseable answer
(when the damage left a valid file) or exactly one ``error:`` line and exit 2, never a traceback,
and never an output file left behind (``-o``, ``report --out``). The strategies live in
`tests.helpers.fuzz`; each test's example count is in its `fuzz_settings` (bounded for CI).
"""

from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from oodeval._json import MAX_DEPTH
from oodeval._text import safe_text
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import (
    MUTATIONS,
    bom_and_newlines,
    csv_text,
    fuzz_settings,
    lookalikes,
    nested_json,
    reference_measures,
    repeated_key,
    results_files,
    results_tables,
)

#: Relative tolerance of a measure against the reference: both are float64 sums of at most five
#: values in [0, 1] in possibly different orders (a few ulps, ~1e-16 each); 1e-12 leaves room.
RTOL, ATOL = 1e-12, 1e-15


def _run(tmp: Path, name: str, data: bytes, *args: str) -> tuple[int, str, str, list[str]]:
    path = tmp / name
    path.write_bytes(data)
    argv = ["measures", str(path), *args]
    code, out, err = invoke(argv)
    return code, out, err, argv


def _check_answer(table, out: str, fmt: str) -> None:
    """The measures in `out` (json or csv) are the reference's, row by row."""
    expected = reference_measures(table.errors("loo"))
    if table.full is not None:  # the ideal measure (Eq. 4): the worst error over E_all
        expected["ideal"] = table.errors("all").max(axis=-1)
    seeds = [str(s) for s in table.seeds] if table.seeds else [""]  # the cubes' order
    got: dict[tuple[str, str, str], float] = {}
    if fmt == "json":
        for row in json.loads(out)["measures"]:
            for m in expected:
                got[(str(row.get("seed", "")), row["algorithm"], m)] = row[m]
    else:
        for row in csv.DictReader(io.StringIO(out)):
            if row["table"] == "measures" and row["measure"] in expected:
                got[(row["seed"], row["algorithm"], row["measure"])] = float(row["value"])
    assert len(got) == len(seeds) * len(table.algorithms) * len(expected), sorted(got)[:5]
    for s, seed in enumerate(seeds):
        for a, alg in enumerate(table.algorithms):
            for m, values in expected.items():
                assert got[(seed, alg, m)] == pytest.approx(values[s, a], rel=RTOL, abs=ATOL), (
                    seed,
                    alg,
                    m,
                )


@fuzz_settings(60)
@given(results_files(), st.sampled_from(["json", "csv", "table", "markdown"]), st.data())
def test_valid_results_give_the_reference_measures(generated, fmt: str, data) -> None:
    table, suffix, text = generated
    raw = bom_and_newlines(text, data)  # neither a BOM nor mixed line ends changes the answer
    with tempfile.TemporaryDirectory() as tmp:
        args = ["-f", fmt, *(["--percent"] if table.percent else [])]
        code, out, err, argv = _run(Path(tmp), f"r{suffix}", raw, *args)
    assert code == 0 and "Traceback" not in out + err, (argv, out[-500:], err[-2000:])
    assert not [line for line in err.splitlines() if line.startswith("error")], err
    if fmt in ("json", "csv"):
        _check_answer(table, out, fmt)
    elif fmt == "table":  # a table shows each name terminal-safe: a backslash doubled
        assert all(safe_text(alg) in out for alg in table.algorithms), out


@fuzz_settings(100)
@given(results_files(), st.sampled_from(sorted(MUTATIONS)), st.data())
def test_broken_results_are_refused_in_one_line_or_answered(generated, mutation, data) -> None:
    table, suffix, text = generated
    mutate, always_refused = MUTATIONS[mutation]
    raw = mutate(text.encode("utf-8"), data)
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "out" / "measures.json"
        args = ["-f", "json", "-o", str(output), *(["--percent"] if table.percent else [])]
        code, out, err, argv = _run(Path(tmp), f"r{suffix}", raw, *args)
        if code == 0 and not always_refused:
            assert "Traceback" not in out + err, (argv, err[-2000:])
            assert json.loads(output.read_text(encoding="utf-8"))["measures"]
            return
        assert_refused(code, out, err, argv)
        assert not output.exists() and not output.parent.exists(), argv


#: Value cells no results file may hold (with fractions): not numbers, not finite, outside [0, 1].
BAD_VALUES = [
    "nan",
    "NaN",
    "-nan",
    "NA",
    "null",
    "inf",
    "-Infinity",
    "-0.5",
    "-1e-300",
    "1.5",
    "1e400",
    "1e308",
    "abc",
    "0x1p-2",
    "",
    " ",
    "1,5",
    "0.5.1",
    "١",
]


@fuzz_settings(60)
@given(results_tables(), st.sampled_from(BAD_VALUES), st.data())
def test_a_bad_value_is_refused(table, bad: str, data) -> None:
    k = data.draw(st.integers(0, len(table.rows()) - 1), label="row")
    rows = table.rows()
    rows[k] = {**rows[k], table.column: bad}
    with tempfile.TemporaryDirectory() as tmp:
        code, out, err, argv = _run(Path(tmp), "r.csv", csv_text(rows, list(rows[0])).encode())
    assert_refused(code, out, err, argv)


def _minimal_table():
    from tests.helpers.fuzz import Results

    loo = np.array([[[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]]])
    return Results(["A", "B"], ["e1", "e2", "e3"], [], [0], loo, None, "error", False, {})


@fuzz_settings(60)
@given(results_tables(), st.data())
def test_wrong_columns_are_refused(table, data) -> None:
    """A missing key column, both error and accuracy, a repeated column: refused."""
    rows = table.rows()
    columns = list(rows[0])
    how = data.draw(st.sampled_from(["missing", "both", "repeated"]), label="how")
    if how == "missing":
        gone = data.draw(st.sampled_from(["algorithm", "environment", "split", table.column]))
        text = csv_text(
            [{k: v for k, v in r.items() if k != gone} for r in rows],
            [c for c in columns if c != gone],
        )
    elif how == "both":
        other = "accuracy" if table.column == "error" else "error"
        text = csv_text([{**r, other: "0.5"} for r in rows], [*columns, other])
    else:  # the same column twice: which of the two holds the numbers?
        twice = data.draw(st.sampled_from(columns), label="twice")
        lines = csv_text(rows, columns).splitlines()
        cells = [next(csv.reader([line])) for line in lines]
        k = columns.index(twice)
        text = "".join(",".join(_quoted(c) for c in [*row, row[k]]) + "\n" for row in cells)
    with tempfile.TemporaryDirectory() as tmp:
        code, out, err, argv = _run(Path(tmp), "r.csv", text.encode("utf-8"))
    assert_refused(code, out, err, argv)


def _quoted(cell: str) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow([cell])
    return buffer.getvalue()


@fuzz_settings(40)
@given(results_tables(), st.data())
def test_a_duplicate_row_is_refused(table, data) -> None:
    """The same (algorithm, seed, split, environment) twice, whatever its value: refused."""
    rows = table.rows()
    k = data.draw(st.integers(0, len(rows) - 1), label="row")
    value = data.draw(st.sampled_from([rows[k][table.column], "0.5", "0"]), label="value")
    at = data.draw(st.integers(0, len(rows)), label="at")
    rows.insert(at, {**rows[k], table.column: value})
    with tempfile.TemporaryDirectory() as tmp:
        code, out, err, argv = _run(Path(tmp), "r.csv", csv_text(rows, list(rows[0])).encode())
    assert_refused(code, out, err, argv)


#: Seed labels a file may hold: any label is accepted (integers are sorted numerically).
ODD_SEEDS = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["1e400", "-0", "1.0", "0x10", "inf", "nan", "١٢", "seed 1"]),
)


@fuzz_settings(40)
@given(results_tables(), ODD_SEEDS, ODD_SEEDS)
@example(table=None, first="99999999999999999999", second="1").via("a seed past int64")
@example(table=None, first="99999999999999999999", second="99999999999999999998").via(
    "two seeds past 2**53 once read through a float collided"
)
def test_any_seed_label_is_accepted_or_refused_in_one_line(table, first: str, second: str):
    """Two seeds labelled `first` and `second`: the same label twice is refused (duplicate
    rows); two different integers are answered with their own labels, exactly; anything else
    gets an answer with a row per seed and algorithm, or one refusal line."""
    table = table or _minimal_table()
    keep = str((table.seeds or [""])[0])
    rows = [{**r, "seed": first} for r in table.rows() if r.get("seed", "") in ("", keep)]
    rows += [{**r, "seed": second} for r in rows]
    percent = ["--percent"] if table.percent else []
    with tempfile.TemporaryDirectory() as tmp:
        code, out, err, argv = _run(
            Path(tmp), "r.csv", csv_text(rows, list(rows[0])).encode(), "-f", "json", *percent
        )
    integers = {int(first), int(second)} if INTEGER.fullmatch(first + "," + second) else None
    same = first == second or (integers is not None and len(integers) == 1)
    if code != 0 or same:
        assert same or integers is None, (first, second, err)  # two integers are two seeds
        assert_refused(code, out, err, argv)
        return
    assert "Traceback" not in out + err
    measured = json.loads(out)["measures"]
    seeds = {row["seed"] for row in measured}
    assert len(seeds) == 2 and len(measured) == 2 * len(table.algorithms), (first, second, seeds)
    assert integers is None or seeds == {str(i) for i in integers}, (first, second, seeds)


#: Two integers written as seed labels, comma-separated.
INTEGER = re.compile(r"[+-]?[0-9]+,[+-]?[0-9]+")


@fuzz_settings(25)
@given(results_files(), st.sampled_from(sorted(MUTATIONS) + ["valid"]), st.data())
def test_report_on_results_writes_a_page_or_nothing(generated, mutation, data) -> None:
    table, suffix, text = generated
    raw = text.encode("utf-8")
    if mutation != "valid":
        raw = MUTATIONS[mutation][0](raw, data)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"r{suffix}"
        source.write_bytes(raw)
        page = Path(tmp) / "new" / "report.html"
        argv = [
            "report",
            str(source),
            "--out",
            str(page),
            *(["--percent"] if table.percent else []),
        ]
        code, out, err = invoke(argv)
        if code == 0:
            assert "Traceback" not in out + err
            assert page.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
            assert mutation != "valid" or all(
                a in page.read_text(encoding="utf-8") for a in table.algorithms if a.isalnum()
            )
            return
        assert mutation != "valid", (argv, err[-2000:])
        assert_refused(code, out, err, argv)
        assert not page.exists() and not page.parent.exists(), argv


@pytest.mark.parametrize("twice", ["error", "algorithm", "Split "])
def test_a_repeated_column_is_refused_naming_it(twice: str, tmp_path: Path) -> None:
    """Found by the fuzzer: pandas renamed the second column ("error.1") and the file was
    scored from the first one alone."""
    header = ["algorithm", "environment", "split", "error", twice]
    rows = [f"A,e{k},loo,0.{k},{'0.9' if twice == 'error' else 'x'}" for k in range(1, 4)]
    path = tmp_path / "r.csv"
    path.write_text("\n".join([",".join(header), *rows]) + "\n", encoding="utf-8")
    code, out, err = invoke(["measures", str(path)])
    assert_refused(code, out, err, ["measures", str(path)])
    assert f"column {twice.strip().lower()!r} appears more than once" in err


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json"])
@pytest.mark.parametrize("column", ["_line", " _LINE"])
def test_a_column_named_like_the_readers_line_numbers_is_ignored(
    suffix: str, column: str, tmp_path: Path
) -> None:
    """Found by the fuzzer: a user column ``_line`` (an extra column, so ignored) collided
    with the readers' own line numbers: a traceback, or its text read as a line number."""
    table = _minimal_table()
    table.extra = {column: "x"}
    rows = table.rows()
    if suffix == ".csv":
        text = csv_text(rows, list(rows[0]))
    elif suffix == ".jsonl":
        text = "".join(json.dumps(r) + "\n" for r in rows)
    else:
        text = json.dumps(rows)
    code, out, err, argv = _run(tmp_path, f"r{suffix}", text.encode("utf-8"), "-f", "json")
    assert code == 0 and "Traceback" not in err, (argv, err[-2000:])
    _check_answer(table, out, "json")
    rows.append(rows[0])  # a duplicate row: its message names file lines (or rows)
    if suffix == ".csv":
        text = csv_text(rows, list(rows[0]))
    elif suffix == ".jsonl":
        text = "".join(json.dumps(r) + "\n" for r in rows)
    else:
        text = json.dumps(rows)
    code, out, err, argv = _run(tmp_path, f"r{suffix}", text.encode("utf-8"))
    assert_refused(code, out, err, argv)
    assert {".csv": "(lines 2 and 8)", ".jsonl": "(lines 1 and 7)", ".json": "(rows 1 and 7)"}[
        suffix
    ] in err, err


#: JSON values no results file may hold as an error: not numbers, not finite, outside [0, 1].
BAD_JSON_VALUES = [
    True,
    False,
    None,
    {},
    [],
    [0.1],
    {"v": 0.1},
    "",
    "nan",
    10**400,
    -(10**400),
    1e308,
    -0.0001,
    2,
    "0.1 0.2",
]
#: Raw JSON number texts Python's parser turns into inf or NaN, or refuses with a ValueError that
#: is not a JSONDecodeError (an integer longer than int()'s 4,300 digits).
BAD_JSON_NUMBERS = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1" + "0" * 5000]


@fuzz_settings(40)
@given(
    results_tables(),
    st.sampled_from(BAD_JSON_VALUES + BAD_JSON_NUMBERS),
    st.sampled_from([".jsonl", ".json"]),
    st.data(),
)
def test_a_bad_json_value_is_refused(table, bad, suffix: str, data) -> None:
    rows = table.rows()
    k = data.draw(st.integers(0, len(rows) - 1), label="row")
    marker = "@@bad@@"
    rows[k] = {**rows[k], table.column: marker if bad in BAD_JSON_NUMBERS else bad}
    if suffix == ".jsonl":
        text = "".join(json.dumps(r) + "\n" for r in rows)
    else:
        text = json.dumps(rows)
    if bad in BAD_JSON_NUMBERS:
        text = text.replace(json.dumps(marker), bad)
    with tempfile.TemporaryDirectory() as tmp:
        percent = ["--percent"] if table.percent else []
        code, out, err, argv = _run(Path(tmp), f"r{suffix}", text.encode("utf-8"), *percent)
    if table.percent and bad == 2:  # 2 is a percentage
        return
    assert_refused(code, out, err, argv)


def _refused_writing_nothing(tmp: Path, name: str, text: str, *args: str) -> str:
    """`measures FILE -o OUT` on `text`: refused in one line, OUT never made; the error line."""
    output = tmp / "measures.json"
    code, out, err, argv = _run(tmp, name, text.encode("utf-8"), "-o", str(output), *args)
    assert_refused(code, out, err, argv)
    assert not output.exists(), argv
    return err


def _json_text(rows: list[dict], suffix: str) -> str:
    if suffix == ".jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return json.dumps(rows, ensure_ascii=False)


@fuzz_settings(60)
@given(results_tables(), st.sampled_from([".jsonl", ".json"]), st.data())
def test_a_repeated_json_key_is_refused_naming_it(table, suffix: str, data) -> None:
    """One row object holds a key twice, exactly or equal once stripped and case-folded
    (``error`` and ``Error``): Python's parser kept the last value without a word."""
    rows = table.rows()
    k = data.draw(st.integers(0, len(rows) - 1), label="row")
    key, again = data.draw(repeated_key(list(rows[k])), label="repeated")
    value = data.draw(st.sampled_from([rows[k][key], "0.5", "x"]), label="value")
    marker = "@@again@@"
    rows[k] = {**rows[k], marker: value}
    text = _json_text(rows, suffix).replace(
        json.dumps(marker), json.dumps(again, ensure_ascii=False)
    )
    percent = ["--percent"] if table.percent else []
    with tempfile.TemporaryDirectory() as tmp:
        err = _refused_writing_nothing(Path(tmp), f"r{suffix}", text, *percent)
    assert "appears twice" in err or "name the same field" in err, err
    assert key.strip() in err or repr(key)[1:-1] in err, (key, err)


@fuzz_settings(60)
@given(results_files(), st.sampled_from(["algorithm", "environment"]), st.data())
def test_a_lookalike_name_is_refused_naming_both(generated, column: str, data) -> None:
    """A second algorithm (or environment) spelt like one in the file but for an invisible
    character or its Unicode normal form, with complete rows: two names to the reader that
    print as one ("worst+gap picks Café; average picks Café")."""
    table, suffix, _text = generated
    rows = table.rows()
    names = table.algorithms if column == "algorithm" else table.environments
    name = data.draw(st.sampled_from(names), label="name")
    twin = data.draw(lookalikes(name), label="twin")
    if column == "algorithm":
        rows += [{**r, "algorithm": twin} for r in rows if r["algorithm"] == name]
    else:  # one more given environment, for every algorithm and seed
        rows += [{**r, "environment": twin} for r in rows if r["environment"] == name]
    if suffix == ".csv":
        text = csv_text(rows, list(rows[0]))
    else:
        text = _json_text(rows, suffix)
    percent = ["--percent"] if table.percent else []
    with tempfile.TemporaryDirectory() as tmp:
        err = _refused_writing_nothing(Path(tmp), f"r{suffix}", text, *percent)
    assert "differ only by Unicode normalisation or invisible characters" in err, err


@fuzz_settings(50)
@given(
    results_tables(),
    st.sampled_from([".jsonl", ".json"]),
    st.one_of(st.integers(1, 2 * MAX_DEPTH), st.sampled_from([10_000, 200_000])),
    st.data(),
)
def test_deep_json_is_refused_in_one_line_or_read(table, suffix: str, depth: int, data) -> None:
    """An ignored extra field nesting `depth` levels: read as usual while the whole text nests
    at most `MAX_DEPTH` levels, refused in one line beyond (never a RecursionError)."""
    rows = table.rows()
    k = data.draw(st.integers(0, len(rows) - 1), label="row")
    marker = "@@deep@@"
    rows[k] = {**rows[k], "nested": marker}
    text = _json_text(rows, suffix).replace(json.dumps(marker), data.draw(nested_json(depth)))
    total = depth + (1 if suffix == ".jsonl" else 2)  # the row object, and the list around it
    percent = ["--percent"] if table.percent else []
    with tempfile.TemporaryDirectory() as tmp:
        if total > MAX_DEPTH:
            err = _refused_writing_nothing(Path(tmp), f"r{suffix}", text, *percent)
            assert f"nest {total:,} levels deep" in err, err
            return
        code, out, err, argv = _run(Path(tmp), f"r{suffix}", text.encode(), "-f", "json", *percent)
    assert code == 0 and "Traceback" not in err, (argv, err[-2000:])
    _check_answer(table, out, "json")
