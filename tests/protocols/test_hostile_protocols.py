"""Bad values for the options `protocols` added for NICO++'s oracles and Std: one `error:` line
naming the accepted values, exit status 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app, run
from oodeval.protocols import AssignmentRow, write_assignment_csv

runner = CliRunner()


@pytest.fixture()
def tree(tmp_path) -> Path:
    root = tmp_path / "tree"
    for dom, n in (("grass", 5), ("sand", 2), ("dark", 12)):
        (root / dom / "cat").mkdir(parents=True)
        for i in range(n):
            (root / dom / "cat" / f"{i}.jpg").touch()
    return root


def _refused(res, *needles: str) -> str:
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.output
    for needle in needles:
        assert needle in res.stderr, res.stderr
    return res.stderr


def _written(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("value", ["star", "oracle*", "", "mixture,per-domain", "MIX"])
def test_an_unknown_oracle_variant_names_the_two(tree, tmp_path, value):
    out = tmp_path / "out"
    out.mkdir()
    res = runner.invoke(
        app,
        [
            "protocols",
            "classic",
            str(tree),
            "--test",
            "dark",
            "--out",
            str(out / "o.csv"),
            "--oracle",
            value,
        ],
    )
    _refused(res, "unknown --oracle", "mixture (oracle:", "per-domain (oracle*:")
    assert _written(out) == []


def test_val_fraction_does_not_apply_to_the_oracle(tree, tmp_path):
    out = tmp_path / "o.csv"
    args = ["protocols", "classic", str(tree), "--test", "dark", "--out", str(out)]
    res = runner.invoke(app, [*args, "--oracle", "mixture", "--val-fraction", "0.1"])
    _refused(res, "--val-fraction does not apply with --oracle", "7:1:2")
    assert not out.exists()


def test_a_folder_where_the_split_record_goes(tree, tmp_path):
    out = tmp_path / "o.csv"
    (tmp_path / "o.csv.json").mkdir()
    args = ["protocols", "classic", str(tree), "--test", "dark", "--out", str(out)]
    _refused(runner.invoke(app, [*args, "--oracle", "per-domain"]), "o.csv.json", "is a folder")
    assert not out.exists()


def test_a_link_where_the_split_record_goes_is_left_alone(tree, tmp_path):
    out, victim = tmp_path / "o.csv", tmp_path / "victim.txt"
    victim.write_text("keep\n", encoding="utf-8")
    (tmp_path / "o.csv.json").symlink_to(victim)
    args = ["protocols", "classic", str(tree), "--test", "dark", "--out", str(out)]
    _refused(runner.invoke(app, [*args, "--oracle", "mixture"]), "is a symbolic link")
    assert not out.exists() and victim.read_text(encoding="utf-8") == "keep\n"


def test_a_target_domain_too_small_for_the_per_domain_split(tree, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    args = ["protocols", "classic", str(tree), "--test", "sand,dark", "--out", str(out / "o.csv")]
    _refused(
        runner.invoke(app, [*args, "--oracle", "per-domain"]),
        "target domain(s) sand without a test image",
        "at least 3 images",
    )
    assert _written(out) == []


@pytest.mark.parametrize("value", ["2", "-1", "10", "one", "0.5", "", "1e20", "nan"])
def test_evaluate_ddof_is_0_or_1(tmp_path, value):
    split, preds, output = tmp_path / "s.csv", tmp_path / "p.csv", tmp_path / "r.txt"
    rows = [AssignmentRow("a/x/0", "x", "a", "test"), AssignmentRow("b/x/0", "x", "b", "test")]
    write_assignment_csv(rows, split)
    preds.write_text("path,prediction\na/x/0,x\nb/x/0,y\n", encoding="utf-8")
    argv = ["protocols", "evaluate", str(split), str(preds), "-o", str(output), "--ddof", value]
    with runner.isolation() as (out, err, _):  # as the console script runs it
        try:
            code = run(argv)
        except SystemExit as exc:
            code = exc.code
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    assert code == 2 and stdout == "", stdout
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    for needle in (f"--ddof must be 0 or 1, got {value!r}", "0 (population std", "1 (sample std"):
        assert needle in stderr, stderr
    assert not output.exists()
