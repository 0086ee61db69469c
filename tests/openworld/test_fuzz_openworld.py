"""Fuzzing `oodeval openworld score` and `ratio-study` with predictions files, valid and broken.

Valid files (CSV or .npz, already-scored or outputs form) give exit 0 and the suite computed
here pair by pair (`tests.helpers.fuzz.reference_openworld`); broken ones give exit 0 with a
parseable answer (when the damage left a valid file) or one ``error:`` line and exit 2, never a
traceback, and neither ``-o`` nor ``--curve`` file left behind.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import (
    MUTATIONS,
    Outputs,
    Scored,
    bom_and_newlines,
    csv_text,
    fuzz_settings,
    model_predictions,
    reference_openworld,
    scored_predictions,
)

#: Tolerance against the reference: both are exact counts divided once (plus a tie of 0.5, a
#: binary fraction) in float64, so they agree to the last ulp or two.
RTOL = 1e-12

BOOL_WORDS = st.sampled_from([("1", "0"), ("true", "false"), ("True", "False"), ("TRUE", "0")])
TIES = st.sampled_from(["0", "0.5", "1", "0.25"])


def _scored_file(s: Scored, kind: str, words: tuple[str, str]) -> tuple[str, bytes]:
    if kind == "npz":
        buffer = io.BytesIO()
        np.savez(buffer, scores=s.scores, is_base=s.is_base, correct=s.correct)
        return ".npz", buffer.getvalue()
    columns = s.columns(words)
    rows = [dict(zip(columns, cells, strict=True)) for cells in zip(*columns.values(), strict=True)]
    return ".csv", csv_text(rows, list(columns)).encode("utf-8")


def _outputs_file(o: Outputs, kind: str, stored_base: bool) -> tuple[str, bytes]:
    if kind == "npz":
        buffer = io.BytesIO()
        extra = {"base_classes": np.array(o.base)} if stored_base else {}
        np.savez(buffer, probs=o.probs, labels=o.labels, **extra)
        return ".npz", buffer.getvalue()
    columns = ["label"] + [f"prob_{j}" for j in range(o.probs.shape[1])]
    rows = [
        dict(zip(columns, [str(int(label)), *map(repr, p.tolist())], strict=True))
        for label, p in zip(o.labels, o.probs, strict=True)
    ]
    return ".csv", csv_text(rows, columns).encode("utf-8")


def _score(tmp: Path, suffix: str, data: bytes, *args: str) -> tuple[int, str, str, list[str]]:
    path = tmp / f"p{suffix}"
    path.write_bytes(data)
    argv = ["openworld", "score", str(path), *args]
    code, out, err = invoke(argv)
    return code, out, err, argv


def _assert_suite(out: str, expected: dict[str, float]) -> None:
    got = json.loads(out)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=RTOL, abs=1e-15), (key, got, expected)


@fuzz_settings(60)
@given(scored_predictions(), st.sampled_from(["csv", "npz"]), BOOL_WORDS, TIES, st.data())
def test_scored_predictions_give_the_reference_suite(s, kind, words, tie, data) -> None:
    suffix, raw = _scored_file(s, kind, words)
    if kind == "csv":  # neither a BOM nor mixed line ends changes the answer
        raw = bom_and_newlines(raw.decode("utf-8"), data)
    with tempfile.TemporaryDirectory() as tmp:
        code, out, err, argv = _score(Path(tmp), suffix, raw, "--tie", tie, "-f", "json")
    assert code == 0 and "Traceback" not in out + err, (argv, err[-2000:])
    _assert_suite(out, reference_openworld(s, float(tie)))


@fuzz_settings(60)
@given(model_predictions(), st.sampled_from(["csv", "npz"]), st.booleans())
def test_model_outputs_give_the_reference_suite(o, kind, stored_base) -> None:
    stored_base = stored_base and kind == "npz"
    suffix, raw = _outputs_file(o, kind, stored_base)
    base = [] if stored_base else ["--base-classes", ",".join(map(str, o.base))]
    with tempfile.TemporaryDirectory() as tmp:
        code, out, err, argv = _score(Path(tmp), suffix, raw, *base, "-f", "json")
    assert code == 0 and "Traceback" not in out + err, (argv, err[-2000:])
    expected = reference_openworld(o.scored(), 0.5)
    expected["overall_acc"] = float((o.probs.argmax(axis=1) == o.labels).mean())
    _assert_suite(out, expected)


def _refused_or_answered(tmp: Path, suffix: str, raw: bytes, args: list[str], always: bool):
    """Run score with -o and --curve in `tmp`: an answer (both files written) or a refusal
    that leaves neither file."""
    outputs = tmp / "suite.json", tmp / "curve.csv"
    code, out, err, argv = _score(
        tmp, suffix, raw, *args, "-f", "json", "-o", str(outputs[0]), "--curve", str(outputs[1])
    )
    if code == 0 and not always:
        assert "Traceback" not in out + err, (argv, err[-2000:])
        assert set(json.loads(outputs[0].read_text(encoding="utf-8"))) >= {"auroc", "hm"}
        return
    assert_refused(code, out, err, argv)
    assert not outputs[0].exists() and not outputs[1].exists(), argv


def _csv_file(generated) -> tuple[str, bytes, list[str]]:
    """A generated predictions file as CSV: (suffix, bytes, the arguments it needs)."""
    if isinstance(generated, Scored):
        suffix, raw = _scored_file(generated, "csv", ("1", "0"))
        return suffix, raw, []
    suffix, raw = _outputs_file(generated, "csv", False)
    return suffix, raw, ["--base-classes", ",".join(map(str, generated.base))]


@fuzz_settings(80)
@given(scored_predictions() | model_predictions(), st.sampled_from(sorted(MUTATIONS)), st.data())
def test_broken_csv_predictions_are_refused_or_answered(generated, mutation, data) -> None:
    suffix, raw, args = _csv_file(generated)
    mutate, always = MUTATIONS[mutation]
    with tempfile.TemporaryDirectory() as tmp:
        _refused_or_answered(Path(tmp), suffix, mutate(raw, data), args, always)


#: Cells no predictions file may hold where a number (or a bool) is due.
BAD_CELLS = ["nan", "NaN", "", "abc", "0x10", "1,5", "inf", "-inf", "1e400", "-1", "2", "1.5",
             "True", "yes", "١"]


@fuzz_settings(60)
@given(scored_predictions() | model_predictions(), st.sampled_from(BAD_CELLS), st.data())
def test_a_bad_cell_is_refused_or_answered(generated, bad: str, data) -> None:
    """A bad cell anywhere: refused in one line, or (a score of inf, a label out of range...)
    answered; never a traceback."""
    suffix, raw, args = _csv_file(generated)
    lines = raw.decode("utf-8").splitlines()
    row = data.draw(st.integers(1, len(lines) - 1), label="row")
    cells = lines[row].split(",")
    col = data.draw(st.integers(0, len(cells) - 1), label="column")
    cells[col] = f'"{bad}"' if "," in bad else bad
    lines[row] = ",".join(cells)
    raw = ("\n".join(lines) + "\n").encode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        _refused_or_answered(Path(tmp), suffix, raw, args, False)


def _npz(**arrays: object) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


#: Array values no predictions archive may hold in place of a good one.
BAD_ARRAYS = st.sampled_from([
    np.array([np.nan, 0.5]),
    np.array([np.inf, -np.inf]),
    np.zeros((2, 2, 2)),
    np.array([], dtype=np.float64),
    np.array(["a", "b"]),
    np.array([1e308, -1e308]),
    np.array([-1, 5]),
    np.array([0.5, 1.5]),
    np.array([True]),
    np.zeros(0).reshape(0, 3),
    np.array(7.0),
    np.array([2**62, -(2**62)], dtype=np.int64),
    np.array([1 + 2j, 3j]),
    np.array(["2020-01-01"], dtype="datetime64[D]"),
])


@fuzz_settings(60)
@given(scored_predictions() | model_predictions(), BAD_ARRAYS, st.data())
def test_a_bad_npz_array_is_refused_or_answered(generated, bad: np.ndarray, data) -> None:
    if isinstance(generated, Scored):
        arrays = {"scores": generated.scores, "is_base": generated.is_base,
                  "correct": generated.correct}
    else:
        arrays = {"probs": generated.probs, "labels": generated.labels,
                  "base_classes": np.array(generated.base)}
    name = data.draw(st.sampled_from(sorted(arrays)), label="array")
    arrays[name] = bad
    raw = _npz(**arrays)
    if data.draw(st.booleans(), label="damaged"):
        raw = MUTATIONS[data.draw(st.sampled_from(["truncated", "binary junk"]))][0](raw, data)
    with tempfile.TemporaryDirectory() as tmp:
        _refused_or_answered(Path(tmp), ".npz", raw, [], False)


@fuzz_settings(30)
@given(model_predictions(), st.sampled_from(["csv", "npz"]), st.data())
def test_ratio_study_answers_or_refuses_in_one_line(o, kind, data) -> None:
    """ratio-study on valid and damaged outputs files: a row per ratio, or one refusal line."""
    suffix, raw = _outputs_file(o, kind, kind == "npz")
    damage = data.draw(st.sampled_from(["none", "truncated", "dropped line", "binary junk"]))
    if damage != "none":
        raw = MUTATIONS[damage][0](raw, data)
    ratios = data.draw(st.sampled_from(["1:1,2:1", "1:5", "3:1,1:3"]), label="ratios")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"p{suffix}"
        path.write_bytes(raw)
        base = [] if kind == "npz" else ["--base-classes", ",".join(map(str, o.base))]
        argv = ["openworld", "ratio-study", str(path), *base, "--ratios", ratios,
                "--n-repeats", "2", "-f", "csv"]
        code, out, err = invoke(argv)
    if code == 0:
        assert "Traceback" not in out + err, (argv, err[-2000:])
        assert len(out.strip().splitlines()) >= 1 + len(ratios.split(",")), out
        return
    assert_refused(code, out, err, argv)


@fuzz_settings(12)
@given(scored_predictions() | model_predictions(), st.sampled_from(["csv", "npz"]),
       st.sampled_from(["none", "truncated", "binary junk", "invalid UTF-8"]), st.data())
@example(Outputs(np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([0, 1]), [0]), "csv", "none",
         None).via("too few samples for the ratio sweep: the report was refused")
def test_report_on_predictions_writes_a_page_or_nothing(generated, kind, damage, data) -> None:
    if isinstance(generated, Scored):
        suffix, raw = _scored_file(generated, kind, ("true", "false"))
        base: list[str] = []
    else:
        suffix, raw = _outputs_file(generated, kind, False)
        base = ["--base-classes", ",".join(map(str, generated.base))]
    if damage != "none":
        raw = MUTATIONS[damage][0](raw, data)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"p{suffix}"
        source.write_bytes(raw)
        page = Path(tmp) / "new" / "report.html"
        argv = ["report", str(source), "--out", str(page), *base]
        code, out, err = invoke(argv)
        if code == 0:
            assert "Traceback" not in out + err
            assert page.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
            return
        assert damage != "none", (argv, err[-2000:])
        assert_refused(code, out, err, argv)
        assert not page.exists() and not page.parent.exists(), argv


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("1e19", "below 2**63, found 1e+19"),
        ("1e308", "below 2**63, found 1e+308"),
        ("-1e300", ">= 0, found -1e+300"),  # the offending value, not the largest label (1)
    ],
)
def test_a_class_id_past_int64_is_named(label: str, expected: str, tmp_path: Path) -> None:
    """Found by the fuzzer: a float label past int64 wrapped when cast (1e19 was reported as
    the class id -9223372036854775808)."""
    raw = f"label,score,base_prediction,new_prediction\n0,0.9,0,1\n{label},0.1,0,1\n".encode()
    code, out, err, argv = _score(tmp_path, ".csv", raw, "--base-classes", "0")
    assert_refused(code, out, err, argv)
    assert f"labels must hold class ids {expected}" in err, err


def test_a_class_id_below_int64_is_named_by_its_value(tmp_path: Path) -> None:
    """Below -2**63 (new_prediction may be -1, "not predicted") the message shows that value,
    not the column's maximum."""
    raw = b"label,score,base_prediction,new_prediction\n0,0.9,0,1\n1,0.1,0,-1e19\n"
    code, out, err, argv = _score(tmp_path, ".csv", raw, "--base-classes", "0")
    assert_refused(code, out, err, argv)
    assert "new_predictions must hold class ids >= -2**63, found -1e+19" in err, err
