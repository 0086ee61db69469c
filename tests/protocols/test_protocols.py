"""NICO++ protocols (oodeval.protocols) and `oodeval protocols` on a synthetic image tree."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.protocols import (
    NICO_COMMON_DOMAINS,
    NICO_TEST_DOMAINS,
    NICO_TRAIN_DOMAINS,
    AssignmentRow,
    classic_assignment,
    evaluate_assignment,
    flexible_compositional_assignment,
    flexible_random_assignment,
    read_assignment_csv,
    role_counts,
    scan_tree,
    write_assignment_csv,
)

CLASSES = ("cat", "dog", "owl")
REPO = Path(__file__).resolve().parents[2]


def cell_size(cls: str, dom: str) -> int:
    """Images per (class, domain) cell of the synthetic tree: 55 to 79, varying by cell."""
    return 55 + (sum(map(ord, cls + dom)) % 25)


def make_tree(root: Path, common=NICO_COMMON_DOMAINS, n_unique: int = 10, small=()) -> Path:
    """A NICO++-shaped tree: the common domains for every class plus per-class unique domains.

    Files are empty: the protocols only list paths. `small` holds (class, domain, count) cells.
    """
    sizes = {}
    for cls in CLASSES:
        for dom in list(common) + [f"{cls}_u{k}" for k in range(n_unique)]:
            sizes[(cls, dom)] = cell_size(cls, dom)
    for cls, dom, count in small:
        sizes[(cls, dom)] = count
    for (cls, dom), count in sizes.items():
        d = root / dom / cls
        d.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (d / f"{i:03d}.jpg").touch()
    first = root / list(common)[0] / CLASSES[0]
    (first / "notes.txt").touch()  # not an image: ignored
    return root


@pytest.fixture(scope="module")
def tree_root(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("nico"))


def by(rows, *keys):
    out = defaultdict(list)
    for r in rows:
        out[tuple(getattr(r, k) for k in keys)].append(r)
    return out


def test_scan_tree_lists_cells(tree_root):
    tree = scan_tree(tree_root)
    assert tree.classes == CLASSES
    assert len(tree.domains) == 10 + 3 * 10
    assert len(tree.images("cat", "grass")) == cell_size("cat", "grass")
    assert set(tree.common_domains()) == set(NICO_COMMON_DOMAINS)
    with pytest.raises(OodevalError, match="not found"):
        scan_tree(tree_root / "missing")


def test_classic_defaults_to_the_nico_domains_with_seeded_validation(tree_root):
    tree = scan_tree(tree_root)
    rows = classic_assignment(tree, val_fraction=0.2, seed=0)
    cells = by(rows, "cls", "domain")
    for cls in CLASSES:
        for dom in NICO_TRAIN_DOMAINS:
            roles = Counter(r.role for r in cells[(cls, dom)])
            n = cell_size(cls, dom)
            assert roles == {"val": round(0.2 * n), "train": n - round(0.2 * n)}
        for dom in NICO_TEST_DOMAINS:
            assert Counter(r.role for r in cells[(cls, dom)]) == {"test": cell_size(cls, dom)}
        assert (cls, f"{cls}_u0") not in cells  # unique domains are not used
    assert len({r.path for r in rows}) == len(rows)  # every image at most once
    assert rows == classic_assignment(tree, val_fraction=0.2, seed=0)
    assert rows != classic_assignment(tree, val_fraction=0.2, seed=1)


def test_classic_named_domains_and_errors(tmp_path):
    tree = scan_tree(make_tree(tmp_path, common=("a", "b", "c"), n_unique=0))
    rows = classic_assignment(tree, train_domains=["a"], val_fraction=0.0)
    assert {r.domain for r in rows if r.role == "train"} == {"a"}
    assert {r.domain for r in rows if r.role == "test"} == {"b", "c"}
    with pytest.raises(OodevalError, match="lacks the NICO\\+\\+ default domains"):
        classic_assignment(tree)
    with pytest.raises(OodevalError, match="both training and test"):
        classic_assignment(tree, train_domains=["a", "b"], test_domains=["b"])
    with pytest.raises(OodevalError, match="zz not in the tree"):
        classic_assignment(tree, train_domains=["zz"])
    with pytest.raises(OodevalError, match="val_fraction"):
        classic_assignment(tree, train_domains=["a"], val_fraction=1.0)


@pytest.mark.parametrize("side", ["train_domains", "test_domains"])
def test_classic_with_one_side_named_gives_every_class_the_same_domains(tree_root, side):
    """The other side is the common domains not named; unique (per-class) domains are unused."""
    tree = scan_tree(tree_root)
    named = ["sand", "winter"]
    rows = classic_assignment(tree, **{side: named}, val_fraction=0.0)
    other = sorted(set(NICO_COMMON_DOMAINS) - set(named))
    train, test = (named, other) if side == "train_domains" else (other, named)
    cells = by(rows, "cls", "role")
    for cls in CLASSES:
        assert sorted({r.domain for r in cells[(cls, "train")]}) == sorted(train)
        assert sorted({r.domain for r in cells[(cls, "test")]}) == sorted(test)
        assert len(cells[(cls, "test")]) == sum(cell_size(cls, d) for d in test)
    assert not {r.domain for r in rows} & {f"{c}_u{k}" for c in CLASSES for k in range(10)}


def test_classic_with_one_side_needs_a_common_domain_left(tmp_path):
    tree = scan_tree(make_tree(tmp_path, common=("a", "b"), n_unique=2))
    with pytest.raises(OodevalError, match="no domain common to every class is left for training"):
        classic_assignment(tree, test_domains=["a", "b"])
    with pytest.raises(OodevalError, match="no domain common to every class is left for test"):
        classic_assignment(tree, train_domains=["a", "b"])


def test_flexible_random_counts_and_disjointness(tree_root):
    tree = scan_tree(tree_root)
    rows = flexible_random_assignment(tree, seed=3)
    for cls in CLASSES:
        mine = [r for r in rows if r.cls == cls]
        per_domain = Counter((r.domain, r.role) for r in mine)
        train_doms = {d for d, role in per_domain if role == "train"}
        test_doms = {d for d, role in per_domain if role == "test"}
        assert len(train_doms) == 14 and len(test_doms) == 6 and not train_doms & test_doms
        full = {d for d in train_doms if per_domain[(d, "train")] == cell_size(cls, d)}
        dominant = {d for d in full if d in NICO_COMMON_DOMAINS and cell_size(cls, d) != 50}
        assert len(dominant) == 2  # all images of the 2 dominant (common) domains
        for d in train_doms - dominant:
            assert per_domain[(d, "train")] == 50
        for d in test_doms:
            assert per_domain[(d, "test")] == 50
    assert len({r.path for r in rows}) == len(rows)
    assert rows == flexible_random_assignment(tree, seed=3)
    assert rows != flexible_random_assignment(tree, seed=4)


def test_flexible_random_varies_domains_per_class(tree_root):
    tree = scan_tree(tree_root)
    rows = flexible_random_assignment(tree, seed=0)
    dominant = {
        cls: frozenset(
            d
            for (c, d), members in by(rows, "cls", "domain").items()
            if c == cls and len(members) == cell_size(cls, d) and members[0].role == "train"
        )
        for cls in CLASSES
    }
    assert len(set(dominant.values())) > 1  # drawn per class, not once


def test_flexible_compositional_keeps_exclusive_domains_out_of_test(tree_root):
    tree = scan_tree(tree_root)
    exclusive = ["grass", "water", "rock", "autumn"]
    rows = flexible_compositional_assignment(tree, exclusive_domains=exclusive, seed=1)
    for cls in CLASSES:
        mine = [r for r in rows if r.cls == cls]
        counts = Counter((r.domain, r.role) for r in mine)
        train = {d for d, role in counts if role == "train"}
        test = {d for d, role in counts if role == "test"}
        majority = train & set(exclusive)
        assert len(majority) == 2
        assert all(counts[(d, "train")] == cell_size(cls, d) for d in majority)
        assert len(train - majority) == 12 and len(test) == 4
        assert all(counts[(d, "train")] == 50 for d in train - majority)
        assert all(counts[(d, "test")] == 50 for d in test)
        assert not test & set(exclusive) and not test & train
    drawn = flexible_compositional_assignment(tree, seed=1)
    excl_drawn = {r.domain for r in drawn if r.role == "train"} - {
        r.domain for r in drawn if r.role == "test"
    }
    assert drawn == flexible_compositional_assignment(tree, seed=1)
    assert excl_drawn  # some training-only domains


def test_flexible_counts_are_parameters_for_smaller_datasets(tmp_path):
    tree = scan_tree(make_tree(tmp_path, common=("a", "b", "c", "d", "e", "f"), n_unique=0))
    rows = flexible_random_assignment(
        tree, n_dominant=1, n_minor=3, n_test=2, per_minor=5, per_test=7, val_fraction=0.2
    )
    for cls in CLASSES:
        counts = Counter((r.domain, r.role) for r in rows if r.cls == cls)
        tests = [d for d, role in counts if role == "test"]
        assert len(tests) == 2 and all(counts[(d, "test")] == 7 for d in tests)
        minors = [d for (d, role), n in counts.items() if role in ("train", "val")]
        assert len(set(minors)) == 4
    assert {r.role for r in rows} == {"train", "val", "test"}
    with pytest.raises(OodevalError, match="non-dominant domain"):
        flexible_random_assignment(tree, n_minor=5, n_test=2)


def test_too_small_cell_error_names_the_cell(tmp_path):
    tree = scan_tree(make_tree(tmp_path, small=[("dog", "dog_u3", 12)]))
    with pytest.raises(OodevalError) as info:
        for seed in range(20):  # some seed picks dog_u3 as a minor or test domain
            flexible_random_assignment(tree, seed=seed)
    assert "(class=dog, domain=dog_u3) has 12 image(s)" in str(info.value)
    assert "needs 50" in str(info.value)


def test_csv_round_trip_and_summary(tree_root, tmp_path):
    rows = classic_assignment(scan_tree(tree_root), seed=0)
    out = tmp_path / "assignment.csv"
    assert write_assignment_csv(rows, out) == len(rows)
    with open(out, newline="") as fh:
        assert next(csv.reader(fh)) == ["path", "class", "domain", "role"]
    assert read_assignment_csv(out) == rows
    summary = {r["role"]: r for r in role_counts(rows)}
    assert summary["total"]["images"] == len(rows)
    assert summary["test"]["domains"] == 4 and summary["test"]["cells"] == 12
    assert sum(summary[k]["images"] for k in ("train", "val", "test")) == len(rows)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(OodevalError, match="expected the header"):
        read_assignment_csv(bad)
    bad.write_text("path,class,domain,role\nx,y,z,holdout\n")
    with pytest.raises(OodevalError, match="role 'holdout'"):
        read_assignment_csv(bad)


def test_evaluate_assignment_matches_hand_computed_eq5():
    rows = [AssignmentRow(f"a/x/{i}", "x", "a", "test") for i in range(4)]
    rows += [AssignmentRow(f"b/y/{i}", "y", "b", "test") for i in range(2)]
    rows.append(AssignmentRow("c/x/0", "x", "c", "train"))
    preds = {"a/x/0": "x", "a/x/1": "x", "a/x/2": "x", "a/x/3": "y", "b/y/0": "x", "b/y/1": "y"}
    out = evaluate_assignment(rows, preds)
    # acc_a = 3/4, acc_b = 1/2: Average 0.625, Overall 4/6, Std sqrt(2 * 0.125^2 / 1)
    assert out["acc_a"] == 0.75 and out["acc_b"] == 0.5
    assert out["acc_avg"] == pytest.approx(0.625)
    assert out["acc_overall"] == pytest.approx(4 / 6)
    assert out["acc_std"] == pytest.approx(np.sqrt(2 * 0.125**2))
    del preds["b/y/1"]
    with pytest.raises(OodevalError, match="no prediction, e.g. b/y/1"):
        evaluate_assignment(rows, preds)


runner = CliRunner()


def test_cli_classic_with_only_test_names_the_unused_class_specific_domains(tree_root, tmp_path):
    out = tmp_path / "classic.csv"
    args = ["protocols", "classic", str(tree_root), "--out", str(out), "--test", "sand,winter"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    train = ",".join(sorted(set(NICO_COMMON_DOMAINS) - {"sand", "winter"}))
    lines = res.output.splitlines()
    n_rows = len(read_assignment_csv(out))
    assert lines[0] == f"classic: train {train}; test sand,winter; wrote {n_rows} rows to {out}"
    assert lines[1] == (
        "not used: 30 class-specific domain(s) (missing for some classes): cat_u0, cat_u1, "
        "cat_u2, cat_u3, cat_u4, cat_u5, cat_u6, cat_u7 and 22 more"
    )
    assert lines[2].startswith("role")
    assert read_assignment_csv(out) == classic_assignment(
        scan_tree(tree_root), test_domains=["sand", "winter"]
    )


def test_cli_protocols_classic_and_flexible_write_csv_and_summary(tree_root, tmp_path):
    out = tmp_path / "classic.csv"
    res = runner.invoke(app, ["protocols", "classic", str(tree_root), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "test" in res.output and "total" in res.output
    assert read_assignment_csv(out) == classic_assignment(scan_tree(tree_root), seed=0)
    out2 = tmp_path / "flex.csv"
    res = runner.invoke(
        app, ["protocols", "flexible-random", str(tree_root), "--out", str(out2), "--seed", "3"]
    )
    assert res.exit_code == 0, res.output
    assert read_assignment_csv(out2) == flexible_random_assignment(scan_tree(tree_root), seed=3)
    out3 = tmp_path / "comp.csv"
    args = ["protocols", "flexible-compositional", str(tree_root), "--out", str(out3)]
    res = runner.invoke(app, [*args, "--exclusive", "grass,water,rock,autumn"])
    assert res.exit_code == 0, res.output
    assert not {r.domain for r in read_assignment_csv(out3) if r.role == "test"} & {
        "grass",
        "water",
        "rock",
        "autumn",
    }


def test_cli_protocols_evaluate_prints_eq5(tmp_path):
    split = tmp_path / "s.csv"
    rows = [AssignmentRow("a/x/0", "x", "a", "test"), AssignmentRow("b/x/0", "x", "b", "test")]
    rows.append(AssignmentRow("b/x/1", "x", "b", "test"))
    write_assignment_csv(rows, split)
    preds = tmp_path / "p.csv"
    preds.write_text("path,prediction\na/x/0,x\nb/x/0,x\nb/x/1,y\n")
    res = runner.invoke(app, ["protocols", "evaluate", str(split), str(preds)])
    assert res.exit_code == 0, res.output
    assert "Average 0.7500  Overall 0.6667  Std 0.3536" in res.output
    res = runner.invoke(app, ["protocols", "evaluate", str(split), str(preds), "--format", "json"])
    assert '"acc_overall": 0.6666' in res.stdout


def test_cli_protocols_bad_input_exits_2_without_traceback(tmp_path):
    root = make_tree(tmp_path / "t", small=[("dog", "dog_u3", 12)])
    out = tmp_path / "x.csv"
    cmd = [sys.executable, "-m", "oodeval.cli.main", "protocols", "flexible-random", str(root)]
    failures = []
    for seed in range(20):
        proc = subprocess.run(
            [*cmd, "--out", str(out), "--seed", str(seed)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        if proc.returncode != 0:
            failures.append(proc)
            break
    assert failures, "no seed drew the small cell"
    proc = failures[0]
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "(class=dog, domain=dog_u3)" in proc.stderr
    res = runner.invoke(app, ["protocols", "classic", str(tmp_path / "nope"), "--out", str(out)])
    assert res.exit_code == 2


@pytest.mark.parametrize("option", ["--per-minor", "--per-test"])
@pytest.mark.parametrize("command", ["flexible-random", "flexible-compositional"])
def test_cli_protocols_zero_per_domain_count_is_one_error_line(
    tree_root, tmp_path, command, option
):
    out = tmp_path / "x.csv"
    res = runner.invoke(app, ["protocols", command, str(tree_root), "--out", str(out), option, "0"])
    assert res.exit_code == 2
    name = option.lstrip("-").replace("-", "_")
    assert res.output == f"error: {name} must be at least 1, got 0\n"
    assert not out.exists()


def test_the_old_group_name_splits_still_works_with_one_note(tree_root, tmp_path):
    """`oodeval splits ...` (the group's name before `protocols`) runs the same commands for one
    release, with one `note:` line on stderr, and is hidden from the help."""
    new, old = tmp_path / "new.csv", tmp_path / "old.csv"
    res_new = runner.invoke(app, ["protocols", "classic", str(tree_root), "--out", str(new)])
    assert res_new.exit_code == 0 and res_new.stderr == "", res_new.output
    res_old = runner.invoke(app, ["splits", "classic", str(tree_root), "--out", str(old)])
    assert res_old.exit_code == 0, res_old.output
    assert res_old.stderr == "note: oodeval splits is deprecated, use oodeval protocols\n"
    assert old.read_bytes() == new.read_bytes()
    assert res_old.stdout == res_new.stdout.replace(str(new), str(old))
    root_help = runner.invoke(app, ["--help"]).stdout
    assert "protocols" in root_help and "splits" not in root_help
