"""Hostile inputs that hold something twice, spell one name two ways, or nest without end.

Every case is refused in one ``error:`` line (status 2, no traceback, nothing written) naming
the key, row, image or names at fault:

- a JSON object with a key twice, exactly or equal once stripped and case-folded (``error``
  and ``Error``), in a results file and a DomainBed sweep (DomainBed's own ``hparams`` keys are
  kept as written);
- an image listed twice in a domain assignment (a repeated test row counted twice), or in two
  roles (train and test); a checkpoint listed twice in per-checkpoint records;
- look-alike names: two algorithms, environments, domains, classes or datasets equal after
  NFKC normalisation once control and format characters (zero-width spaces...) are dropped;
- JSON, JSON lines, a sweep line or a TOML study config nesting deeper than `MAX_DEPTH`
  levels (a RecursionError traceback before).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oodeval._json import MAX_DEPTH, load_json
from oodeval.errors import OodevalError
from oodeval.study.store import LOCK_NAME, read_holder
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import fuzz_settings, lookalikes, names

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NFC, NFD = "Caf\u00e9", "Cafe\u0301"  # one name to a reader's eye, two strings
ZWSP = "\u200b"


def refused(argv: list[str], *needles: str) -> str:
    """Run `oodeval ARGV`: one error line holding every needle; return it."""
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def results_lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def loo_rows(algorithms=("ERM", "IRM"), environments=("e1", "e2", "e3")) -> list[dict]:
    return [
        {"algorithm": a, "environment": e, "split": "loo", "error": round(0.1 * (i + j + 1), 2)}
        for i, a in enumerate(algorithms)
        for j, e in enumerate(environments)
    ]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_json_lines_split_at_newlines_only(separator: str) -> None:
    """A JSON string may hold U+2028, U+2029 and U+0085 as they are (json.dumps with
    ensure_ascii=False writes them so); str.splitlines would cut the line there."""
    from oodeval.results.jsonrows import json_lines_frame

    rows = loo_rows(algorithms=(f"ERM{separator}v2", "IRM"))
    frame = json_lines_frame(results_lines(rows).replace("\n", "\r\n", 1), "r.jsonl")
    assert sorted(set(frame["algorithm"])) == sorted({f"ERM{separator}v2", "IRM"})
    assert len(frame) == len(rows)


# --- repeated keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "again"),
    [("error", "error"), ("error", "Error"), ("error", " ERROR "), ("algorithm", "Algorithm")],
)
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_repeated_key_in_a_results_object_is_refused(first, again, suffix, tmp_path) -> None:
    """Python's parser kept the last of the two values; the CSV reader refuses such a header."""
    rows = loo_rows()
    rows[2] = {**rows[2], "@again@": rows[2][first] if first == "algorithm" else 0.9}
    body = results_lines(rows) if suffix == ".jsonl" else json.dumps(rows)
    path = tmp_path / f"r{suffix}"
    path.write_text(body.replace('"@again@"', json.dumps(again)), encoding="utf-8")
    out = tmp_path / "m.json"
    err = refused(["measures", str(path), "-o", str(out)], repr(first))
    assert ("appears twice" if first == again else repr(again)) in err
    assert "line 3" in err if suffix == ".jsonl" else True
    assert not out.exists()


def _sweep(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the example DomainBed sweep and the results.jsonl of its first run."""
    sweep = tmp_path / "sweep"
    shutil.copytree(EXAMPLES / "domainbed-sweep", sweep)
    return sweep, sorted(sweep.glob("*/results.jsonl"))[0]


def _rewrite_first_line(results: Path, change) -> None:
    lines = results.read_text(encoding="utf-8").splitlines()
    lines[0] = change(lines[0])
    results.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "change",
    [
        lambda line: line.replace('"step":', '"step": 999999, "step":', 1),
        lambda line: line.replace('"algorithm":', '"algorithm": "IRM", "algorithm":', 1),
        lambda line: line.replace('"env0_in_acc":', '"ENV0_in_acc": 0.5, "env0_in_acc":', 1),
    ],
    ids=["step twice", "args.algorithm twice", "case-folded accuracy"],
)
def test_a_repeated_key_in_a_sweep_record_is_refused(change, tmp_path: Path) -> None:
    sweep, results = _sweep(tmp_path)
    _rewrite_first_line(results, change)
    refused(["import", "domainbed", str(sweep)], f"{results} line 1")


def test_domainbed_hparams_keep_their_case(tmp_path: Path) -> None:
    """An algorithm's own hyperparameter names are not folded (a fork may use ``K`` and ``k``):
    the sweep is read; an exact repeat among them is still refused."""
    sweep, results = _sweep(tmp_path)
    _rewrite_first_line(
        results, lambda line: line.replace('"hparams": {', '"hparams": {"K": 1, "k": 2, ', 1)
    )
    code, out, err = invoke(["import", "domainbed", str(sweep)])
    assert code == 0 and "Traceback" not in err, err[-2000:]
    _rewrite_first_line(results, lambda line: line.replace('"K": 1', '"k": 1', 1))
    refused(["import", "domainbed", str(sweep)], "'k' appears twice")


# --- repeated rows, images in two roles, repeated checkpoints ---------------------------------


def _assignment(tmp_path: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    path = tmp_path / "assignment.csv"
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([("path", "class", "domain", "role"), *rows])
    path.write_text(text.getvalue(), encoding="utf-8")
    return path


def _predictions(tmp_path: Path, predicted: dict[str, str]) -> Path:
    path = tmp_path / "predictions.csv"
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([("path", "prediction"), *predicted.items()])
    path.write_text(text.getvalue(), encoding="utf-8")
    return path


TEST_ROWS = [(f"sand/dog/{k}.png", "dog", "sand", "test") for k in range(5)]


def test_a_repeated_test_row_is_refused(tmp_path: Path) -> None:
    """Four copies of the one right row turned accuracy 0.20 into 0.50 (counted again)."""
    rows = [*TEST_ROWS, *[TEST_ROWS[0]] * 3]
    predicted = {r[0]: "dog" if k == 0 else "cat" for k, r in enumerate(TEST_ROWS)}
    argv = [
        "protocols",
        "evaluate",
        str(_assignment(tmp_path, rows)),
        str(_predictions(tmp_path, predicted)),
        "-o",
        str(tmp_path / "out.txt"),
    ]
    refused(argv, "line 7 repeats the test image 'sand/dog/0.png' of line 2")
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (TEST_ROWS[0], "rows[5] repeats the test image 'sand/dog/0.png' of rows[0]"),
        (
            (TEST_ROWS[1][0], "dog", "sand", "train"),
            "'sand/dog/1.png' is listed as test (rows[1]) and as train (rows[5])",
        ),
    ],
)
def test_the_python_api_refuses_a_repeated_image_too(extra, expected) -> None:
    """`evaluate_assignment` on rows built in Python checks what the CSV reader checks."""
    from oodeval.protocols import AssignmentRow, evaluate_assignment

    rows = [AssignmentRow(*r) for r in [*TEST_ROWS, extra]]
    with pytest.raises(OodevalError) as caught:
        evaluate_assignment(rows, {r[0]: "dog" for r in TEST_ROWS})
    assert expected in str(caught.value)


def test_an_image_in_train_and_test_is_refused(tmp_path: Path) -> None:
    rows = [("grass/dog/0.png", "dog", "grass", "train"), *TEST_ROWS]
    rows.append(("grass/dog/0.png", "dog", "grass", "test"))
    predicted = {r[0]: "dog" for r in rows}
    argv = [
        "protocols",
        "evaluate",
        str(_assignment(tmp_path, rows)),
        str(_predictions(tmp_path, predicted)),
    ]
    refused(argv, "'grass/dog/0.png' is listed as train (line 2) and as test (line 8)")


CHECKPOINT_HEADER = (
    "dataset,algorithm,environment,trial,hparams,step,test_acc,train_val_acc,oracle_val_acc"
)


def _checkpoints(tmp_path: Path, rows: list[str], header: str = CHECKPOINT_HEADER) -> Path:
    path = tmp_path / "checkpoints.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def _checkpoint_rows(algorithm: str = "ERM", environment: str = "e0") -> list[str]:
    return [
        f"D,{algorithm},{environment},{t},0,{s},0.{5 + s},0.{4 + s},0.{3 + s}"
        for t in range(2)
        for s in range(3)
    ]


def test_a_checkpoint_listed_twice_is_refused(tmp_path: Path) -> None:
    """The same run and step twice with other accuracies: both were counted."""
    rows = _checkpoint_rows()
    rows.append("D,ERM,e0,1,0,2,0.99,0.1,0.1")
    path = _checkpoints(tmp_path, rows)
    refused(["variance", str(path)], "one checkpoint twice (lines 7 and 8", "step 2")


def test_a_repeated_checkpoint_column_is_refused(tmp_path: Path) -> None:
    path = _checkpoints(
        tmp_path, [r + ",0.9" for r in _checkpoint_rows()], header=CHECKPOINT_HEADER + ",test_acc"
    )
    refused(["variance", str(path)], "column 'test_acc' appears more than once")


# --- look-alike names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "first", "second"),
    [
        ("algorithm", NFC, NFD),
        ("algorithm", "ERM", "ERM" + ZWSP),
        ("environment", "e1", "e\u00ad1"),
        ("algorithm", "\uff25RM", "ERM"),
        ("environment", "e1", "e1\x01"),
    ],
)
def test_lookalike_names_in_results_are_refused(column, first, second, tmp_path: Path) -> None:
    """Before: "worst+gap picks Café; average picks Café (they disagree)"."""
    if column == "algorithm":
        rows = loo_rows(algorithms=(first, second, "IRM"))
    else:
        rows = loo_rows(environments=(first, second, "e3"))
    for suffix in (".csv", ".jsonl"):
        path = tmp_path / f"r{suffix}"
        if suffix == ".csv":
            path.write_text(
                "algorithm,environment,split,error\n"
                + "".join(
                    f'"{r["algorithm"]}","{r["environment"]}",loo,{r["error"]}\n' for r in rows
                ),
                encoding="utf-8",
            )
        else:
            path.write_text(results_lines(rows), encoding="utf-8")
        err = refused(["measures", str(path)], f"{column} names", "differ only by Unicode")
        coded = "".join(
            c if c.isascii() and c.isprintable() else f"<U+{ord(c):04X}>" for c in second
        )
        assert coded in err or coded in err.replace("\\", ""), err


def test_lookalike_names_in_the_python_api_are_refused() -> None:
    import pandas as pd

    import oodeval

    frame = pd.DataFrame(loo_rows(algorithms=(NFC, NFD)))
    with pytest.raises(OodevalError, match="differ only by Unicode"):
        oodeval.score(frame)


def test_lookalike_algorithms_in_a_sweep_are_refused(tmp_path: Path) -> None:
    sweep, _ = _sweep(tmp_path)
    for results in sorted(sweep.glob("*/results.jsonl")):
        text = results.read_text(encoding="utf-8")
        if '"algorithm": "IRM"' in text:
            results.write_text(
                text.replace('"algorithm": "IRM"', '"algorithm": "I\\u200bRM"'), encoding="utf-8"
            )
            break
    refused(["import", "domainbed", str(sweep)], "algorithm names", "'IRM'", "I<U+200B>RM")


def test_lookalike_domains_in_an_assignment_are_refused(tmp_path: Path) -> None:
    rows = [
        *TEST_ROWS,
        (f"{NFD}/dog/1.png", "dog", NFD, "test"),
        (f"{NFC}/dog/1.png", "dog", NFC, "test"),
    ]
    predicted = {r[0]: "dog" for r in rows}
    argv = [
        "protocols",
        "evaluate",
        str(_assignment(tmp_path, rows)),
        str(_predictions(tmp_path, predicted)),
    ]
    refused(argv, "domain names", "Cafe<U+0301>")


def test_lookalike_domain_folders_of_a_tree_are_refused(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for domain in (NFC, NFD, "sand"):
        for cls in ("dog", "cat"):
            (tree / domain / cls).mkdir(parents=True)
            (tree / domain / cls / "0.png").write_bytes(b"not read")
    out = tmp_path / "a.csv"
    refused(
        ["protocols", "classic", str(tree), "--out", str(out), "--test", "sand"], "domain names"
    )
    assert not out.exists()


def test_lookalike_names_in_checkpoint_records_are_refused(tmp_path: Path) -> None:
    path = _checkpoints(tmp_path, _checkpoint_rows("ERM") + _checkpoint_rows("ERM" + ZWSP))
    refused(["variance", str(path)], "algorithm names 'ERM' and", "ERM<U+200B>")


def test_lookalike_algorithms_in_a_study_config_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "study.toml"
    config.write_text(
        'backend = "oodeval.study.synthetic"\nalgorithms = ["ERM", "\\uff25RM"]\nseeds = [0]\n'
        'steps = 10\nscenarios = [{ family = "synthetic", ratio = "3:1" }]\n',
        encoding="utf-8",
    )
    out = tmp_path / "new"
    refused(
        ["study", "run", str(config), "--out", str(out), "--no-progress", "--no-report"],
        "algorithm names 'ERM' and",
        "<U+FF25>RM",
    )
    assert not out.exists()


# --- nesting depth -----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
@pytest.mark.parametrize("depth", [100_000, 2_000])
def test_deep_json_results_are_refused(suffix: str, depth: int, tmp_path: Path) -> None:
    """A RecursionError traceback before."""
    rows = loo_rows()
    rows[0] = {**rows[0], "notes": "@deep@"}
    body = results_lines(rows) if suffix == ".jsonl" else json.dumps(rows)
    path = tmp_path / f"r{suffix}"
    path.write_text(body.replace('"@deep@"', "[" * depth + "]" * depth), encoding="utf-8")
    refused(["measures", str(path)], "levels deep", f"at most {MAX_DEPTH}")


def test_a_deep_sweep_line_is_refused(tmp_path: Path) -> None:
    sweep, results = _sweep(tmp_path)
    deep = '{"a": ' * 50_000 + "1" + "}" * 50_000
    _rewrite_first_line(
        results, lambda line: line.replace('"hparams": {', f'"deep": {deep}, "hparams": {{', 1)
    )
    refused(["import", "domainbed", str(sweep)], f"{results} line 1", "levels deep")


@pytest.mark.parametrize(
    "nesting",
    [
        "x = " + "[" * 5000 + "]" * 5000,
        "x = " + "{ a = " * 5000 + "1" + " }" * 5000,
        "[unit_options]\n" + "a." * 5000 + "a = 1",
        "[unit_options." + ".".join("a" * 1 for _ in range(5000)) + "]\nb = 1",
    ],
    ids=["inline arrays", "inline tables", "dotted keys", "table header"],
)
def test_a_deep_study_config_is_refused(nesting: str, tmp_path: Path) -> None:
    config = tmp_path / "study.toml"
    config.write_text(
        'backend = "oodeval.study.synthetic"\nalgorithms = ["ERM"]\nseeds = [0]\nsteps = 10\n'
        f'scenarios = [{{ family = "synthetic", ratio = "3:1" }}]\n{nesting}\n',
        encoding="utf-8",
    )
    out = tmp_path / "new"
    refused(
        ["study", "run", str(config), "--out", str(out), "--no-progress", "--no-report"],
        "TOML arrays and tables nest",
        "levels deep",
    )
    assert not out.exists()


def test_the_bound_is_exact() -> None:
    """`MAX_DEPTH` levels are read, one more is refused; brackets in strings do not count."""
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, where="x") is not None
    assert load_json(json.dumps(["[" * 1000]), where="x") == ["[" * 1000]
    with pytest.raises(OodevalError, match=f"nest {MAX_DEPTH + 1} levels deep"):
        load_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), where="x")


def test_a_deep_lock_file_is_unreadable_not_a_traceback(tmp_path: Path) -> None:
    """The lock's holder line is only a record: a hostile one reads as unknown."""
    (tmp_path / LOCK_NAME).write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert read_holder(tmp_path) is None
    (tmp_path / LOCK_NAME).write_text('{"host": "a", "pid": 1, "started": "t", "pid": 2}')
    assert read_holder(tmp_path) is None


# --- property tests: any repeated row, image in two roles, checkpoint, look-alike -------------


@fuzz_settings(40)
@given(st.integers(2, 6), st.data())
def test_any_repeated_or_two_role_image_is_refused(n: int, data) -> None:
    rows = [
        (
            f"d{k % 2}/c/{k}.png",
            "c",
            f"d{k % 2}",
            data.draw(st.sampled_from(["train", "val", "test"])),
        )
        for k in range(n)
    ]
    rows[0] = (*rows[0][:3], "test")
    k = data.draw(st.integers(0, n - 1), label="repeated")
    role = data.draw(st.sampled_from(["train", "val", "test"]), label="role")
    at = data.draw(st.integers(0, n), label="at")
    rows.insert(at, (*rows[k][:3], role))
    with tempfile.TemporaryDirectory() as tmp:
        path = _assignment(Path(tmp), rows)
        predicted = _predictions(Path(tmp), {r[0]: "c" for r in rows})
        refused(["protocols", "evaluate", str(path), str(predicted)], rows[at][0])


@fuzz_settings(40)
@given(st.data())
def test_any_repeated_checkpoint_is_refused(data) -> None:
    rows = _checkpoint_rows()
    k = data.draw(st.integers(0, len(rows) - 1), label="row")
    cells = rows[k].split(",")
    cells[6:] = [data.draw(st.sampled_from(["0.1", "0.9", cells[6]]), label="acc")] * 3
    rows.insert(data.draw(st.integers(0, len(rows)), label="at"), ",".join(cells))
    with tempfile.TemporaryDirectory() as tmp:
        refused(["variance", str(_checkpoints(Path(tmp), rows))], "one checkpoint twice")


@fuzz_settings(40)
@given(names(), st.data())
def test_any_lookalike_domain_in_an_assignment_is_refused(name: str, data) -> None:
    twin = data.draw(lookalikes(name), label="twin")
    rows = [(f"{d}/c/{k}.png", "c", d, "test") for k, d in enumerate([name, twin, "other"])]
    with tempfile.TemporaryDirectory() as tmp:
        path = _assignment(Path(tmp), rows)
        predicted = _predictions(Path(tmp), {r[0]: "c" for r in rows})
        err = refused(["protocols", "evaluate", str(path), str(predicted)], "domain names")
    assert "differ only by Unicode" in err
