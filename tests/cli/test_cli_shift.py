"""`oodeval shift --train SPEC --test SPEC` (CliRunner and one real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.cli.shift import explanation
from oodeval.shift import shift_metrics
from oodeval.shift.specs import disjoint_pair, load_spec

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
# the 8x8 digits, asked for: small and fast (the default is `auto`, real MNIST)
FAST = ["--n-seeds", "2", "--n-steps", "30", "--max-samples", "400", "--source", "digits"]


def test_shift_prints_all_metrics_and_the_theorem_line():
    args = ["shift", "--train", "sr-cmnist:e=0.1", "--test", "sr-cmnist:e=0.9", *FAST]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    for name in ("m_cov", "m_cpt_min", "m_cpt_max", "cpt_minus_cov", "Theorem 3.3"):
        assert name in res.output
    assert "2 seed(s) [0, 1]" in res.output
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("metric"))
    assert header.split() == ["metric", "mean", "std", "description"]


def test_shift_json_matches_the_library_call():
    args = ["shift", "--train", "sr-cmnist:e=0.1", "--test", "sr-cmnist:e=0.15", *FAST]
    res = runner.invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    src = load_spec("sr-cmnist:e=0.1", max_samples=400)
    tgt = load_spec("sr-cmnist:e=0.15", max_samples=400)
    src, tgt = disjoint_pair(src, tgt)
    ref = shift_metrics(
        src.images, src.labels, tgt.images, tgt.labels, seeds=[0, 1], num_classes=2, steps=30
    )
    assert payload["per_seed"] == [dict(row) for row in ref.per_seed]
    assert payload["summary"]["m_cov"]["mean"] == pytest.approx(ref.mean("m_cov"))
    assert payload["n_train"] + payload["n_test"] == len(src) + len(tgt)
    assert payload["explanation"] == explanation(ref.mean("cpt_minus_cov"))


def test_same_spec_twice_is_an_iid_split_and_single_seed_has_no_std(tmp_path):
    out = tmp_path / "r.json"
    args = ["shift", "--train", "digits", "--test", "digits"]
    args += ["--n-seeds", "1", "--n-steps", "20"]
    res = runner.invoke(app, [*args, "--format", "json", "--output", str(out)])
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["n_train"] + payload["n_test"] == 1797  # every digit on one side only
    assert payload["summary"]["m_cov"]["std"] is None


def test_explanation_reads_the_sign_without_claiming_the_bound_as_fact():
    # M_cov is a supremum estimated by training, hence from below: a positive estimate of
    # M_cpt^max - M_cov does not prove Theorem 3.3's bound, and the line must say so.
    positive, negative = explanation(0.2), explanation(-0.1)
    assert positive.startswith("M_cpt^max - M_cov = 0.200 > 0 suggests")
    assert "not proof" in positive and "estimated from below" in positive
    assert "forces" not in positive
    assert negative.startswith("M_cpt^max - M_cov = -0.100 <= 0 suggests")
    assert "from below" in negative
    assert "\n" not in positive and "\n" not in negative


def test_fit_errors_are_printed_next_to_m_cpt():
    args = ["shift", "--train", "sr-cmnist:e=0.1", "--test", "sr-cmnist:e=0.9", *FAST]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    names = [ln.split()[0] for ln in res.stdout.splitlines() if ln[:1].isalpha()]
    i = names.index("m_cpt_max")
    assert names[i + 1 : i + 3] == ["source_fit_error", "target_fit_error"]
    assert "i.i.d. noise floor" in res.stdout
    payload = json.loads(runner.invoke(app, [*args, "--format", "json"]).stdout)
    for key in ("source_fit_error", "target_fit_error"):
        per_seed = [row[key] for row in payload["per_seed"]]
        assert payload["summary"][key]["mean"] == pytest.approx(sum(per_seed) / len(per_seed))


def test_given_role_in_a_spec_reaches_the_cli(tmp_path):
    out = tmp_path / "r.json"
    args = ["shift", "--train", "sr-cmnist:e=0.1:role=given", "--test", "sr-cmnist:e=0.1"]
    res = runner.invoke(app, [*args, *FAST, "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["n_train"] == payload["n_test"] == 359  # distinct digits, no split


def test_bad_output_path_fails_before_training(tmp_path):
    bad = str(tmp_path / "missing" / "r.json")
    res = runner.invoke(app, ["shift", "--train", "digits", "--test", "digits", "-o", bad])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: --output") and res.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("nosuch:e=0.1", "unknown SPEC kind"),
        ("sr-cmnist:e=0.123", "no environment e=0.123"),
        ("mnist:/no/such/dir", "not found"),
    ],
)
def test_shift_bad_spec_exits_2_with_one_line(source, message):
    res = runner.invoke(app, ["shift", "--train", source, "--test", "digits"])
    assert res.exit_code == 2
    assert message in res.output


def test_shift_subprocess_bad_input_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "shift", "--train", "sr-cmnist"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "oodeval.cli.main",
            "shift",
            "--train",
            "sr-cmnist:ratio=3:1",
            "--test",
            "digits",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "e=VALUE or env=NAME" in proc.stderr


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--n-seeds", "0", "--n-seeds must be at least 1, got 0"),
        ("--n-steps", "0", "--n-steps must be at least 1, got 0"),
        ("--batch-size", "-3", "--batch-size must be at least 1, got -3"),
        ("--max-samples", "1", "--max-samples must be at least 2, got 1"),
    ],
)
def test_out_of_range_options_are_one_error_line(option, value, message):
    res = runner.invoke(app, ["shift", "--train", "digits", "--test", "digits", option, value])
    assert res.exit_code == 2
    assert res.output == f"error: {message}\n"


def test_the_default_source_is_real_mnist(tmp_path):
    """No --source: `auto`. The role=given set of sr-cmnist on MNIST's 10,000 test images holds
    2,000 (more than the 400 kept), on the digits only 359."""
    out = tmp_path / "r.json"
    args = ["shift", "--train", "sr-cmnist:e=0.1:role=given", "--test", "sr-cmnist:e=0.1"]
    res = runner.invoke(app, [*args, *FAST[:-2], "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["n_train"] == payload["n_test"] == 400


def test_old_spellings_still_work_with_one_note_each(tmp_path):
    """--scenario / --target (before --train / --test) run the same command for one release,
    each with one `note:` line on stderr, and are hidden from the help."""
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    common = ["--n-seeds", "1", "--n-steps", "20", "--max-samples", "200", "--format", "json"]
    res = runner.invoke(
        app, ["shift", "--train", "digits", "--test", "digits", *common, "-o", str(new)]
    )
    assert res.exit_code == 0, res.output
    assert "note:" not in res.stderr
    args = ["shift", "--scenario", "digits", "--target", "digits", *common, "-o", str(old)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("note:")] == [
        "note: --scenario is deprecated, use --train",
        "note: --target is deprecated, use --test",
    ]
    assert json.loads(old.read_text()) == json.loads(new.read_text())
    help_text = runner.invoke(app, ["shift", "--help"]).stdout
    assert "--train" in help_text and "--test" in help_text
    assert "--scenario" not in help_text and "--target" not in help_text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--test", "digits"], "error: missing option --train SPEC"),
        (["--train", "digits"], "error: missing option --test SPEC"),
        (
            ["--train", "digits", "--scenario", "digits", "--test", "digits"],
            "error: --scenario is the deprecated spelling of --train; give only --train",
        ),
    ],
)
def test_missing_or_doubled_sets_are_one_error_line(args, message):
    res = runner.invoke(app, ["shift", *args])
    assert res.exit_code == 2
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1
