"""NICO++'s oracle baselines (App. D) as domain assignments: `oracle_assignment`, `--oracle`.

*oracle* (``mixture``): the target domains' images pooled and split 7:1:2 into train, val and
test; *oracle\\** (``per-domain``): every target domain split 7:1:2 on its own. The counts of a
pool of n images follow the largest-remainder rule (`split_counts`), checked here against hand
counts and against an independent apportionment written with integers only.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.protocols import (
    NICO_TEST_DOMAINS,
    ORACLE_VARIANTS,
    classic_domains,
    evaluate_assignment,
    oracle_assignment,
    read_assignment_csv,
    scan_tree,
    split_counts,
)

runner = CliRunner()
DOMAINS = ("grass", "water", "rock", "autumn", "indoor", "dim", "sand", "winter", "outdoor", "dark")
CLASSES = ("cat", "dog", "owl")


def size(cls: str, dom: str) -> int:
    """Images of the (class, domain) cell: 7 to 29, varying by cell."""
    return 7 + (sum(map(ord, cls + dom)) % 23)


@pytest.fixture(scope="module")
def tree_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("oracle")
    for dom in DOMAINS:
        for cls in CLASSES:
            folder = root / dom / cls
            folder.mkdir(parents=True)
            for i in range(size(cls, dom)):
                (folder / f"{i:02d}.jpg").touch()
    return root


def reference_counts(n: int) -> tuple[int, int, int]:
    """Largest remainders for 7:1:2 in tenths: floor(r*n/10) each, then the leftover images one
    each to the largest remainders (r*n mod 10), ties to the earlier part."""
    ratio = (7, 1, 2)
    base = [r * n // 10 for r in ratio]
    rema = [r * n % 10 for r in ratio]
    for _ in range(n - sum(base)):
        best = max(range(3), key=lambda i: (rema[i], -i))
        base[best] += 1
        rema[best] = -1
    return tuple(base)


@pytest.mark.parametrize(
    ("n", "counts"),
    [
        (0, (0, 0, 0)),
        (1, (1, 0, 0)),
        (2, (2, 0, 0)),  # 1.4, 0.2, 0.4: the tie of 0.4 goes to train
        (3, (2, 0, 1)),  # 2.1, 0.3, 0.6
        (5, (4, 0, 1)),  # 3.5, 0.5, 1.0: the tie of 0.5 goes to train
        (7, (5, 1, 1)),  # 4.9, 0.7, 1.4
        (10, (7, 1, 2)),
        (15, (11, 1, 3)),  # 10.5, 1.5, 3.0
        (146, (102, 15, 29)),  # 102.2, 14.6, 29.2
        (1000, (700, 100, 200)),
    ],
)
def test_split_counts_by_hand(n, counts):
    assert split_counts(n) == counts == reference_counts(n)


@given(st.integers(min_value=0, max_value=100_000))
def test_split_counts_are_the_largest_remainders(n):
    counts = split_counts(n)
    assert counts == reference_counts(n)
    assert sum(counts) == n
    for count, r in zip(counts, (7, 1, 2), strict=True):
        assert abs(10 * count - r * n) < 10  # within one image of the exact share


def test_split_counts_refuse_a_negative_size():
    with pytest.raises(OodevalError, match="cannot split -1 images"):
        split_counts(-1)


def _images(tree, domains):
    return {p for c in tree.classes for d in domains for p in tree.images(c, d)}


def test_mixture_pools_the_target_domains_and_splits_them_7_1_2(tree_root):
    tree = scan_tree(tree_root)
    rows = oracle_assignment(tree, NICO_TEST_DOMAINS, variant="mixture", seed=5)
    paths = [r.path for r in rows]
    assert len(paths) == len(set(paths))  # train, val and test are disjoint
    assert set(paths) == _images(tree, NICO_TEST_DOMAINS)  # every target image, no source one
    n = len(paths)
    roles = Counter(r.role for r in rows)
    assert (roles["train"], roles["val"], roles["test"]) == split_counts(n) == reference_counts(n)
    assert {r.domain for r in rows if r.role == "test"} == set(NICO_TEST_DOMAINS)
    for r in rows:
        assert r.path.startswith(f"{r.domain}/{r.cls}/")


def test_per_domain_splits_every_target_domain_7_1_2(tree_root):
    tree = scan_tree(tree_root)
    rows = oracle_assignment(tree, NICO_TEST_DOMAINS, variant="per-domain", seed=5)
    assert len({r.path for r in rows}) == len(rows) == len(_images(tree, NICO_TEST_DOMAINS))
    for dom in NICO_TEST_DOMAINS:
        mine = [r for r in rows if r.domain == dom]
        n = sum(size(c, dom) for c in CLASSES)
        roles = Counter(r.role for r in mine)
        assert len(mine) == n
        assert (roles["train"], roles["val"], roles["test"]) == reference_counts(n), dom


@pytest.mark.parametrize("variant", list(ORACLE_VARIANTS))
def test_the_split_is_deterministic_for_a_seed(tree_root, variant):
    tree = scan_tree(tree_root)
    first = oracle_assignment(tree, NICO_TEST_DOMAINS, variant=variant, seed=11)
    assert oracle_assignment(scan_tree(tree_root), NICO_TEST_DOMAINS, variant=variant, seed=11) == (
        first
    )
    other = oracle_assignment(tree, NICO_TEST_DOMAINS, variant=variant, seed=12)
    assert [r.path for r in other] == [r.path for r in first]  # the same images, in tree order
    assert [r.role for r in other] != [r.role for r in first]  # drawn differently
    assert Counter(r.role for r in other) == Counter(r.role for r in first)


def test_per_domain_split_of_a_domain_ignores_the_other_targets(tree_root):
    tree = scan_tree(tree_root)
    alone = oracle_assignment(tree, ["sand"], variant="per-domain", seed=2)
    among = oracle_assignment(tree, NICO_TEST_DOMAINS, variant="per-domain", seed=2)
    assert alone == [r for r in among if r.domain == "sand"]


def test_evaluate_scores_the_oracle_test_rows_only(tree_root):
    tree = scan_tree(tree_root)
    rows = oracle_assignment(tree, NICO_TEST_DOMAINS, variant="per-domain", seed=1)
    # right on every test image of class cat, wrong elsewhere; train and val rows get none
    preds = {r.path: "cat" for r in rows if r.role == "test"}
    out = evaluate_assignment(rows, preds, ddof=0)
    for dom in NICO_TEST_DOMAINS:
        test = [r for r in rows if r.domain == dom and r.role == "test"]
        n = sum(size(c, dom) for c in CLASSES)
        assert out[f"count_{dom}"] == len(test) == reference_counts(n)[2]
        assert out[f"acc_{dom}"] == sum(r.cls == "cat" for r in test) / len(test)
    test = [r for r in rows if r.role == "test"]
    assert out["acc_overall"] == pytest.approx(sum(r.cls == "cat" for r in test) / len(test))


def test_a_domain_too_small_for_a_test_image_is_named(tmp_path):
    for dom, n in (("sand", 2), ("dark", 30)):
        (tmp_path / dom / "cat").mkdir(parents=True)
        for i in range(n):
            (tmp_path / dom / "cat" / f"{i}.jpg").touch()
    tree = scan_tree(tmp_path)
    with pytest.raises(OodevalError, match=r"target domain\(s\) sand without a test image"):
        oracle_assignment(tree, ["sand", "dark"], variant="per-domain")
    with pytest.raises(OodevalError, match="unknown oracle variant 'star'"):
        oracle_assignment(tree, ["sand"], variant="star")
    with pytest.raises(OodevalError, match=r"target domain\(s\) moon not in the tree"):
        oracle_assignment(tree, ["moon"])


@pytest.mark.parametrize("variant", list(ORACLE_VARIANTS))
def test_cli_writes_the_assignment_and_records_the_seed(tree_root, tmp_path, variant):
    out = tmp_path / "oracle.csv"
    args = ["protocols", "classic", str(tree_root), "--out", str(out), "--oracle", variant]
    res = runner.invoke(app, [*args, "--seed", "7"])
    assert res.exit_code == 0, res.output
    tree = scan_tree(tree_root)
    want = oracle_assignment(tree, NICO_TEST_DOMAINS, variant=variant, seed=7)
    assert read_assignment_csv(out) == want
    assert "7:1:2 split, seed 7" in res.stdout
    record = json.loads((tmp_path / "oracle.csv.json").read_text(encoding="utf-8"))
    roles = Counter(r.role for r in want)
    assert record == {
        "protocol": "NICO++ oracle baseline (App. D)",
        "variant": variant,
        "trains": ORACLE_VARIANTS[variant],
        "test_domains": list(NICO_TEST_DOMAINS),
        "ratio": "7:1:2",
        "rounding": "largest remainder, ties to train, then val",
        "seed": 7,
        "assignment": "oracle.csv",
        "images": {"train": roles["train"], "val": roles["val"], "test": roles["test"]},
    }


def test_cli_oracle_takes_the_classic_test_domains(tree_root, tmp_path):
    out = tmp_path / "o.csv"
    args = ["protocols", "classic", str(tree_root), "--out", str(out), "--oracle", "mixture"]
    res = runner.invoke(app, [*args, "--train", "grass,water,rock,autumn,indoor,dim,sand"])
    assert res.exit_code == 0, res.output
    _, test = classic_domains(
        scan_tree(tree_root),
        train_domains=["grass", "water", "rock", "autumn", "indoor", "dim", "sand"],
    )
    assert (
        {r.domain for r in read_assignment_csv(out)} == set(test) == {"winter", "outdoor", "dark"}
    )


def test_cli_evaluate_on_an_oracle_assignment(tree_root, tmp_path):
    out, preds = tmp_path / "o.csv", tmp_path / "p.csv"
    args = ["protocols", "classic", str(tree_root), "--out", str(out), "--oracle", "mixture"]
    assert runner.invoke(app, args).exit_code == 0
    rows = read_assignment_csv(out)
    with preds.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["path", "prediction"])
        writer.writerows([r.path, r.cls] for r in rows if r.role == "test")
    res = runner.invoke(app, ["protocols", "evaluate", str(out), str(preds), "--ddof", "0"])
    assert res.exit_code == 0, res.output
    assert "Average 1.0000  Overall 1.0000  Std 0.0000" in res.stdout
    assert "over 4 test domain(s); Std with ddof=0" in res.stdout
