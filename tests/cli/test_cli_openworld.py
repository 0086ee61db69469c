"""`oodeval openworld PREDICTIONS`: the example file, every input form, and one-line errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openworld_predictions.csv"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["openworld", *args])


def pairs_fraction(base, new, base_ok, new_ok):
    """Pair loop of Prop. 4.2 with ties counting one half, exact."""
    total = Fraction(0)
    for sb, cb in zip(base, base_ok, strict=True):
        for sn, cn in zip(new, new_ok, strict=True):
            if cb and cn:
                total += 1 if sb > sn else Fraction(1, 2) if sb == sn else 0
    return float(total / (len(base) * len(new)))


def expected_for_example():
    """Recompute the example's suite from the CSV text with plain loops (base classes 0, 1, 2)."""
    base_classes, new_classes = [0, 1, 2], [3, 4]
    base, new, bok, nok, overall = [], [], [], [], []
    with open(EXAMPLE, newline="") as fh:
        for row in csv.DictReader(fh):
            y = int(row["label"])
            p = [float(row[f"prob_{j}"]) for j in range(5)]
            r = max(p[c] for c in base_classes)
            g = max(base_classes, key=lambda c: (p[c], -c))
            h = max(new_classes, key=lambda c: (p[c], -c))
            overall.append(max(range(5), key=lambda c: (p[c], -c)) == y)
            if y in base_classes:
                base.append(r)
                bok.append(g == y)
            else:
                new.append(r)
                nok.append(h == y)
    ba, na = sum(bok) / len(bok), sum(nok) / len(nok)
    return {
        "n_base": len(base),
        "n_new": len(new),
        "base_acc": ba,
        "new_acc": na,
        "hm": 2 * ba * na / (ba + na),
        "overall_acc": sum(overall) / len(overall),
        "auroc": pairs_fraction(base, new, [1] * len(base), [1] * len(new)),
        "openworld_auc": pairs_fraction(base, new, bok, nok),
    }


def assert_close(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key


# ---------------------------------------------------------------------------------------------
# the example file
# ---------------------------------------------------------------------------------------------


def test_example_json_matches_an_independent_computation():
    result = run(str(EXAMPLE), "--base-classes", "0-2", "--format", "json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    want = expected_for_example()
    assert_close(got, want)
    # the example has base/new score ties, so the tie convention matters
    assert 0 < got["openworld_auc"] < got["base_acc"] * got["new_acc"]


def test_explicit_score_subcommand_and_comma_list_give_the_same_result():
    a = run(str(EXAMPLE), "--base-classes", "0-2", "--format", "json")
    b = run("score", str(EXAMPLE), "--base-classes", "0,1,2", "--format", "json")
    assert a.exit_code == b.exit_code == 0
    assert json.loads(a.stdout) == json.loads(b.stdout)


def test_example_table_markdown_and_csv_formats():
    want = expected_for_example()
    table = run(str(EXAMPLE), "--base-classes", "0-2")
    assert table.exit_code == 0
    assert "openworld_auc" in table.stdout and f"{want['openworld_auc']:.6f}" in table.stdout
    md = run(str(EXAMPLE), "--base-classes", "0-2", "--format", "markdown")
    assert md.stdout.splitlines()[0] == "| metric | value |"
    assert f"| openworld_auc | {want['openworld_auc']:.6f} |" in md.stdout
    out = run(str(EXAMPLE), "--base-classes", "0-2", "--format", "csv")
    rows = list(csv.DictReader(out.stdout.splitlines()))
    assert len(rows) == 1
    assert_close({k: float(v) for k, v in rows[0].items()}, want)


def test_tie_option_changes_only_the_ranking_metrics():
    half = json.loads(run(str(EXAMPLE), "--base-classes", "0-2", "--format", "json").stdout)
    strict = json.loads(
        run(str(EXAMPLE), "--base-classes", "0-2", "--format", "json", "--tie", "0").stdout
    )
    assert strict["openworld_auc"] < half["openworld_auc"]
    assert strict["base_acc"] == half["base_acc"] and strict["hm"] == half["hm"]


def test_output_and_curve_files(tmp_path):
    out, curve = tmp_path / "suite.json", tmp_path / "curve.csv"
    result = run(
        str(EXAMPLE), "--base-classes", "0-2", "--format", "json",
        "--output", str(out), "--curve", str(curve),
    )  # fmt: skip
    assert result.exit_code == 0
    got = json.loads(out.read_text())
    with open(curve, newline="") as fh:
        rows = list(csv.DictReader(fh))
    miss = np.array([float(r["miss_rate_b"]) for r in rows])
    hit = np.array([float(r["hit_rate_n"]) for r in rows])
    assert rows[0]["threshold"] == "-inf"
    assert float(np.trapezoid(hit, miss)) == pytest.approx(got["openworld_auc"], abs=1e-12)


# ---------------------------------------------------------------------------------------------
# other input forms
# ---------------------------------------------------------------------------------------------


def _example_arrays():
    data = np.loadtxt(EXAMPLE, delimiter=",", skiprows=1)
    return data[:, 1:], data[:, 0].astype(np.int64)


def test_npz_probs_form_with_stored_base_classes(tmp_path):
    probs, labels = _example_arrays()
    path = tmp_path / "preds.npz"
    np.savez(path, probs=probs, labels=labels, base_classes=np.array([0, 1, 2]))
    result = run(str(path), "--format", "json")
    assert result.exit_code == 0, result.output
    assert_close(json.loads(result.stdout), expected_for_example())


def test_npz_logits_form_equals_probs_form(tmp_path):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 4)) * 2
    labels = rng.integers(0, 4, 50)
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.savez(tmp_path / "l.npz", logits=logits, labels=labels)
    np.savez(tmp_path / "p.npz", probs=probs, labels=labels)
    a = json.loads(run(str(tmp_path / "l.npz"), "--base-classes", "0,2", "--format", "json").stdout)
    b = json.loads(run(str(tmp_path / "p.npz"), "--base-classes", "0,2", "--format", "json").stdout)
    assert_close(a, b)


def test_already_scored_csv_and_npz(tmp_path):
    rows = [(0.9, 1, 1), (0.5, 1, 1), (0.7, 1, 0), (0.5, 0, 1), (0.1, 0, 1), (0.95, 0, 0)]
    path = tmp_path / "scored.csv"
    path.write_text(
        "score,is_base,correct\n"
        + "".join(f"{s},{'true' if b else 'false'},{c}\n" for s, b, c in rows)
    )
    got = json.loads(run(str(path), "--format", "json").stdout)
    assert got == {
        "n_base": 3, "n_new": 3, "base_acc": 2 / 3, "new_acc": 2 / 3, "hm": 2 / 3,
        "auroc": pytest.approx(5.5 / 9), "openworld_auc": 3.5 / 9,
    }  # fmt: skip
    arr = np.array(rows)
    np.savez(tmp_path / "s.npz", scores=arr[:, 0], is_base=arr[:, 1] == 1, correct=arr[:, 2] == 1)
    assert json.loads(run(str(tmp_path / "s.npz"), "--format", "json").stdout) == got


def test_separate_models_csv_without_outputs(tmp_path):
    path = tmp_path / "sep.csv"
    path.write_text(
        "label,score,base_prediction,new_prediction\n"
        "0,5.0,0,-1\n1,-1.0,0,-1\n2,0.0,-1,2\n3,-3.0,-1,2\n0,2.0,0,-1\n2,2.0,-1,3\n"
    )
    got = json.loads(run(str(path), "--base-classes", "0,1", "--format", "json").stdout)
    assert "overall_acc" not in got
    assert got["base_acc"] == 2 / 3 and got["new_acc"] == 1 / 3
    bok, nok = [True, False, True], [True, False, False]
    assert got["openworld_auc"] == pytest.approx(
        pairs_fraction([5, -1, 2], [0, -3, 2], bok, nok), abs=1e-15
    )


# ---------------------------------------------------------------------------------------------
# bad input: exit 2, one line on stderr, no traceback
# ---------------------------------------------------------------------------------------------


def _bad_files(tmp: Path) -> dict[str, tuple[list[str], str]]:
    cases: dict[str, tuple[list[str], str]] = {}

    def write(name: str, text: str) -> str:
        (tmp / name).write_text(text)
        return str(tmp / name)

    example = str(EXAMPLE)
    cases["missing file"] = ([str(tmp / "nope.csv")], "file not found")
    cases["unsupported type"] = ([write("p.json", "{}")], "unsupported file type")
    cases["no base classes"] = ([example], "--base-classes")
    cases["bad base classes"] = ([example, "--base-classes", "a,b"], "class ids like")
    cases["backwards range"] = ([example, "--base-classes", "4-2"], "backwards")
    cases["all classes base"] = ([example, "--base-classes", "0-4"], "must be new")
    cases["empty csv"] = ([write("e.csv", "")], "is empty")
    cases["header only"] = ([write("h.csv", "score,is_base,correct\n")], "no rows")
    cases["no known columns"] = ([write("u.csv", "a,b\n1,2\n")], "none of the expected")
    cases["missing is_base"] = ([write("m.csv", "score,correct\n0.1,1\n")], "is_base")
    cases["text score"] = (
        [write("t.csv", "score,is_base,correct\n0.1,1,1\nhigh,0,1\n")],
        "row 3",
    )
    cases["nan score"] = ([write("n.csv", "score,is_base,correct\n0.1,1,1\n,0,1\n")], "row 3")
    cases["bad boolean"] = (
        [write("b.csv", "score,is_base,correct\n0.1,yes,1\n0.2,no,1\n")],
        "true/false",
    )
    cases["correct not 0/1"] = (
        [write("c.csv", "score,is_base,correct\n0.1,1,2\n0.2,0,1\n")],
        "boolean",
    )
    cases["only base rows"] = (
        [write("o.csv", "score,is_base,correct\n0.1,1,1\n0.2,1,1\n")],
        "no new samples",
    )
    cases["inf score"] = (
        [write("i.csv", "score,is_base,correct\n0.1,1,1\ninf,0,1\n")],
        "NaN or infinite",
    )
    cases["prob gap"] = (
        [write("g.csv", "label,prob_0,prob_2\n0,0.5,0.5\n"), "--base-classes", "0"],
        "missing prob_1",
    )
    cases["prob and logit"] = (
        [write("pl.csv", "label,prob_0,logit_0\n0,1,1\n"), "--base-classes", "0"],
        "both prob_<j> and logit_<j>",
    )
    cases["probs not normalised"] = (
        [write("pn.csv", "label,prob_0,prob_1\n0,0.5,0.1\n1,0.2,0.8\n"), "--base-classes", "0"],
        "sum to 1",
    )
    cases["mixed forms"] = (
        [write("mx.csv", "score,is_base,correct,prob_0\n0.1,1,1,1\n")],
        "one form",
    )
    cases["labels out of range"] = (
        [write("lr.csv", "label,prob_0,prob_1\n0,0.5,0.5\n7,0.2,0.8\n"), "--base-classes", "0"],
        "labels hold class 7",
    )
    cases["neither outputs nor separate"] = (
        [write("ns.csv", "label,score\n0,0.5\n1,0.2\n"), "--base-classes", "0"],
        "need model outputs",
    )
    cases["bad tie"] = ([example, "--base-classes", "0-2", "--tie", "3"], "tie")
    cases["duplicate column"] = (
        [write("d.csv", "score,score,is_base,correct\n1,1,1,1\n")],
        "more than once",
    )
    cases["row longer than header"] = (
        [write("r.csv", "score,is_base,correct\n1,1,1,5\n0,0,1\n")],
        "not a readable CSV",
    )
    np.save(tmp / "single.npy", np.eye(3))
    (tmp / "single.npz").write_bytes((tmp / "single.npy").read_bytes())
    cases["npy saved as npz"] = ([str(tmp / "single.npz")], "single array")
    np.savez(tmp / "fb.npz", probs=np.eye(3), labels=np.arange(3), base_classes=np.array([0.5]))
    cases["non-integer stored base classes"] = ([str(tmp / "fb.npz")], "integer class ids")
    np.savez(tmp / "obj.npz", labels=np.array([{"a": 1}, 2], dtype=object))
    cases["npz object array"] = ([str(tmp / "obj.npz"), "--base-classes", "0"], "object dtype")
    (tmp / "corrupt.npz").write_bytes(b"PK\x03\x04 not really a zip")
    cases["corrupt npz"] = ([str(tmp / "corrupt.npz")], "not a readable .npz")
    np.savez(tmp / "other.npz", x=np.zeros(3))
    cases["npz unknown names"] = ([str(tmp / "other.npz")], "found x")
    np.savez(tmp / "nb.npz", probs=np.eye(3), labels=np.arange(3), base_classes=np.array([0]))
    cases["conflicting base classes"] = ([str(tmp / "nb.npz"), "--base-classes", "1"], "differs")
    return cases


def test_bad_inputs_exit_2_with_one_line_and_no_traceback(tmp_path):
    for name, (args, needle) in _bad_files(tmp_path).items():
        result = run(*args)
        assert result.exit_code == 2, (name, result.output)
        err = result.stderr.strip()
        assert err.startswith("error:") and len(err.splitlines()) == 1, (name, err)
        assert needle in err, (name, err)
        assert "Traceback" not in result.output


def test_real_subprocess_reports_bad_input_without_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("score,is_base,correct\n0.1,1,1\nnan,0,1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "openworld", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
