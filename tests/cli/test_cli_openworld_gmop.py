"""`oodeval openworld make-features | train-gmop | evaluate | ratio-study`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, ["openworld", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def _fails(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["openworld", *args])
    assert result.exit_code == 2, (result.output, result.exception)
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gmop")
    _ok(
        ["make-features", "--source", "synthetic", "--overlap", "0.5", "--n-shots", "8",
         "--train-out", str(d / "train.npz"), "--test-out", str(d / "test.npz")]
    )  # fmt: skip
    _ok(["train-gmop", str(d / "train.npz"), "--out", str(d / "model.npz"), "--n-steps", "30"])
    return d


def test_train_then_evaluate_prints_the_suite_and_writes_predictions(files):
    out = _ok(
        ["evaluate", str(files / "test.npz"), "--model", str(files / "model.npz"),
         "--predictions", str(files / "preds.npz"), "--format", "json"]
    )  # fmt: skip
    # "wrote preds.npz" follows the metrics: it is said once both outputs are written
    assert out.rstrip().endswith(f"wrote {files / 'preds.npz'}"), out
    metrics = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert set(metrics) == {"base_acc", "new_acc", "hm", "overall_acc", "auroc", "openworld_auc"}
    with np.load(files / "preds.npz", allow_pickle=False) as p:
        assert {"probs", "labels", "base_classes", "scores"} <= set(p.files)
    # The score command of the openworld group reads the predictions file to the same numbers.
    scored = json.loads(_ok([str(files / "preds.npz"), "--format", "json"]))
    for key, value in metrics.items():
        assert scored[key] == pytest.approx(value)


def test_evaluate_without_a_model_is_the_zero_shot_reference(files):
    from oodeval.openworld.features import load_features
    from oodeval.openworld.gmop import evaluate_model, zero_shot_model

    test = load_features(files / "test.npz")
    expected = evaluate_model(zero_shot_model(test), test)
    lines = _ok(["evaluate", str(files / "test.npz")]).split("\n")
    shown = dict(line.split() for line in lines if line.strip() and "wrote" not in line)
    for key, value in expected.items():
        assert float(shown[key]) == pytest.approx(value, abs=1e-6)


def test_single_context_method_and_same_seed_same_file(files):
    a, b = files / "sc_a.npz", files / "sc_b.npz"
    for path in (a, b):
        _ok(["train-gmop", str(files / "train.npz"), "--out", str(path), "--method",
             "single-context", "--n-steps", "10", "--batch-size", "8", "--seed", "3"])  # fmt: skip
    with np.load(a, allow_pickle=False) as pa, np.load(b, allow_pickle=False) as pb:
        assert str(pa["kind"]) == "single_context"
        for name in pa.files:
            np.testing.assert_array_equal(pa[name], pb[name])


def test_ratio_study_table_and_csv(files):
    _ok(["evaluate", str(files / "test.npz"), "--predictions", str(files / "zs.npz")])
    zs = str(files / "zs.npz")
    table = _ok(["ratio-study", zs, "--ratios", "Fwd,1:1,Bwd", "--n-repeats", "2"])
    lines = [line.split()[0] for line in table.splitlines() if line.strip()]
    # Fwd = base:new 5:1, Bwd = 1:5 (Table 3 of the OpenworldAUC paper)
    assert lines[:6] == ["base:new", "5:1", "1:1", "1:5", "mean", "variance"]
    out_csv = files / "ratio.csv"
    _ok(["ratio-study", str(files / "zs.npz"), "--ratios", "1:2,2:1", "--format", "csv",
         "--output", str(out_csv)])  # fmt: skip
    rows = out_csv.read_text().splitlines()
    assert rows[0].startswith("ratio,new_per_base,n_base,n_new,overall_acc") and len(rows) == 5
    assert [r.split(",")[0] for r in rows[3:]] == ["mean", "variance (ddof=1)"]


def test_bad_inputs_exit_2_with_one_line(files, tmp_path):
    _fails(
        ["train-gmop", str(files / "train.npz"), "--out", str(tmp_path / "m.npz"),
         "--n-partitions", "9"],
        "K=9 partitions need at least K base classes",
    )  # fmt: skip
    np.savez(tmp_path / "dim.npz", features=np.ones((4, 3)), labels=[0, 1, 2, 3],
             text_features=np.eye(4))  # fmt: skip
    _fails(["train-gmop", str(tmp_path / "dim.npz"), "--out", str(tmp_path / "m.npz")],
           "features have dimension 3 but text_features have dimension 4")  # fmt: skip
    np.savez(tmp_path / "gap.npz", features=np.eye(6), labels=[0, 0, 2, 3, 4, 5],
             text_features=np.eye(6))  # fmt: skip
    _fails(["train-gmop", str(tmp_path / "gap.npz"), "--out", str(tmp_path / "m.npz")],
           "base class(es) [1] have no training samples")  # fmt: skip
    _fails(["evaluate", str(files / "test.npz"), "--model", str(tmp_path / "nope.npz")],
           "file not found")  # fmt: skip
    _fails(["ratio-study", str(files / "zs.npz"), "--ratios", "1:0"], "ratio parts must be")


def test_subprocess_exit_code_2_and_no_traceback(files, tmp_path):
    np.savez(tmp_path / "dim.npz", features=np.ones((4, 3)), labels=[0, 1, 2, 3],
             text_features=np.eye(4))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "openworld", "train-gmop",
         str(tmp_path / "dim.npz"), "--out", str(tmp_path / "m.npz")],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "dimension" in proc.stderr


def test_ratio_study_on_a_feature_file_says_which_file_it_needs(files):
    # A feature file has labels but no model outputs: point to `evaluate --predictions`.
    _fails(["ratio-study", str(files / "test.npz")], "evaluate FEATURES --predictions")
