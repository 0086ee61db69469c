"""Base/new splits, few-shot sets, base:new resampling and the ratio study (property P3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oodeval.errors import OodevalError
from oodeval.measures.openworld import openworld_scores
from oodeval.openworld.base_new import (
    BaseNewClasses,
    base_new_classes,
    few_shot_indices,
    parse_ratio,
    ratio_sweep,
    resample_to_ratio,
)
from oodeval.openworld.ratio_study import (
    MAX_REPEATS,
    format_ratio_table,
    ratio_spread,
    ratio_study,
)


def test_default_split_takes_the_sorted_first_half_rounding_up_like_coop():
    assert base_new_classes(range(10)) == BaseNewClasses((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))
    assert base_new_classes([6, 2, 4, 0, 2, 9, 7]) == BaseNewClasses((0, 2, 4), (6, 7, 9))
    assert base_new_classes(range(7)) == BaseNewClasses((0, 1, 2, 3), (4, 5, 6))
    assert base_new_classes(range(4), n_base=1) == BaseNewClasses((0,), (1, 2, 3))


def test_seeded_split_is_reproducible_disjoint_and_complete():
    a = base_new_classes(range(20), seed=3)
    assert a == base_new_classes(range(20), seed=3)
    assert a != base_new_classes(range(20), seed=4)
    assert set(a.base) | set(a.new) == set(range(20)) and not set(a.base) & set(a.new)
    assert len(a.base) == 10 and list(a.base) == sorted(a.base)


@pytest.mark.parametrize(
    "classes, kwargs", [([1], {}), ([0, 1, 2], {"n_base": 3}), ([0, 1], {"n_base": 0})]
)
def test_split_rejects_degenerate_requests(classes, kwargs):
    with pytest.raises(OodevalError):
        base_new_classes(classes, **kwargs)


def test_few_shot_draws_exactly_k_per_class_reproducibly():
    labels = np.repeat(np.arange(6), [5, 9, 7, 3, 8, 4])
    idx = few_shot_indices(labels, [0, 1, 2], 3, seed=1)
    assert np.bincount(labels[idx], minlength=6).tolist() == [3, 3, 3, 0, 0, 0]
    assert np.array_equal(idx, few_shot_indices(labels, [0, 1, 2], 3, seed=1))
    assert np.unique(idx).size == idx.size


def test_few_shot_names_the_class_that_is_too_small_or_empty():
    labels = np.array([0, 0, 0, 1, 2, 2, 2])
    with pytest.raises(OodevalError, match="class 1 has 1 sample"):
        few_shot_indices(labels, [0, 1, 2], 2)
    with pytest.raises(OodevalError, match="class 5 has 0 sample"):
        few_shot_indices(labels, [0, 5], 1)


def test_resample_counts_match_the_ratio_and_class_proportions():
    # base classes 0,1,2 with 30/10/20 samples; new classes 3,4 with 60 each.
    labels = np.repeat(np.arange(5), [30, 10, 20, 60, 60])
    bwd = labels[resample_to_ratio(labels, [0, 1, 2], "Bwd", seed=0)]
    # Bwd = base:new 1:5: s = min(60 / 1, 120 / 5) = 24 -> 24 base (12/4/8) and 120 new.
    assert np.bincount(bwd, minlength=5).tolist() == [12, 4, 8, 60, 60]
    fwd = labels[resample_to_ratio(labels, [0, 1, 2], "Fwd", seed=0)]
    assert np.bincount(fwd, minlength=5).tolist() == [30, 10, 20, 6, 6]
    small = labels[resample_to_ratio(labels, [0, 1, 2], "1:1", seed=0, n_total=40)]
    assert np.bincount(small, minlength=5).tolist() == [10, 3, 7, 10, 10]


def test_resample_is_seeded_and_without_replacement():
    labels = np.repeat(np.arange(4), 50)
    a = resample_to_ratio(labels, [0, 1], "1:2", seed=5)
    assert np.array_equal(a, resample_to_ratio(labels, [0, 1], "1:2", seed=5))
    assert not np.array_equal(a, resample_to_ratio(labels, [0, 1], "1:2", seed=6))
    assert np.unique(a).size == a.size and np.all(np.diff(a) > 0)


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 40), min_size=3, max_size=7),
    a=st.integers(1, 6),
    b=st.integers(1, 6),
    seed=st.integers(0, 1000),
)
def test_resample_counts_property(counts, a, b, seed):
    n_base = len(counts) // 2
    labels = np.repeat(np.arange(len(counts)), counts)
    base = list(range(n_base))
    avail_b, avail_n = sum(counts[:n_base]), sum(counts[n_base:])
    scale = min(avail_b / a, avail_n / b)
    want_b, want_n = math.floor(a * scale + 1e-9), math.floor(b * scale + 1e-9)
    if want_b == 0 or want_n == 0:
        with pytest.raises(OodevalError):
            resample_to_ratio(labels, base, (a, b), seed=seed)
        return
    got = np.bincount(labels[resample_to_ratio(labels, base, (a, b), seed=seed)], minlength=7)
    assert got[:n_base].sum() == want_b and got[n_base : len(counts)].sum() == want_n
    # Each class gets its proportional share up to the rounding of one sample.
    for lo, hi, quota, avail in (
        (0, n_base, want_b, avail_b),
        (n_base, len(counts), want_n, avail_n),
    ):
        for c in range(lo, hi):
            assert abs(got[c] - counts[c] * quota / avail) < 1.0 + 1e-9


@pytest.mark.parametrize("bad", ["1-5", "a:b", "0:1", "1:-2", "1:2:3", (1,), (1, float("nan"))])
def test_parse_ratio_rejects_malformed_ratios(bad):
    with pytest.raises(OodevalError):
        parse_ratio(bad)


def test_resample_needs_both_domains_and_a_feasible_ratio():
    with pytest.raises(OodevalError, match="both base and new"):
        resample_to_ratio([0, 0, 1], [0, 1], "1:1")
    with pytest.raises(OodevalError, match="less extreme"):
        resample_to_ratio([0] * 3 + [1] * 3, [0], "1:10")


def test_ratio_sweep_names_each_ratio():
    labels = np.repeat([0, 1], 30)
    names = [n for n, _ in ratio_sweep(labels, [0], ["bwd", "1:1", (5, 1)])]
    assert names == ["1:5", "1:1", "5:1"]


def _fixed_accuracy_predictions(seed: int = 0):
    """Probabilities where base samples are right 90% of the time and new ones 50%."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(6), 500)
    n = labels.size
    logits = rng.normal(size=(n, 6))
    base = labels < 3
    right = np.where(base, rng.random(n) < 0.9, rng.random(n) < 0.5)
    logits[np.arange(n), labels] += np.where(right, 6.0, -6.0)
    # New samples carry less base-class mass: the detector separates the domains imperfectly.
    logits[~base, :3] -= 1.5
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return probs, labels


def test_ratio_study_rows_equal_direct_scoring_of_each_resample():
    probs, labels = _fixed_accuracy_predictions()
    rows = ratio_study(probs, labels, [0, 1, 2], ["1:3", "4:1"], repeats=1, seed=7)
    for row, ratio in zip(rows, ["1:3", "4:1"], strict=True):
        idx = resample_to_ratio(labels, [0, 1, 2], ratio, seed=7)
        direct = openworld_scores(probs[idx], labels[idx], [0, 1, 2])
        for key, value in direct.items():
            assert row[key] == pytest.approx(value, abs=1e-12)
            assert row[f"{key}_std"] == 0.0  # one draw per ratio
        assert row["n_base"] == int((labels[idx] < 3).sum())


def test_ratio_study_shows_overall_acc_moves_and_the_rest_do_not():
    """Property P3 / Figure 2 of the OpenworldAUC paper."""
    probs, labels = _fixed_accuracy_predictions()
    rows = ratio_study(probs, labels, [0, 1, 2], ["1:10", "1:5", "1:1", "5:1", "10:1"], repeats=5)
    spread = ratio_spread(rows)
    assert spread["overall_acc"] > 0.25
    for metric in ("hm", "auroc", "openworld_auc", "base_acc", "new_acc"):
        assert spread[metric] < 0.07, (metric, spread)  # subsampling noise only
    # OverallAcc goes from the new-domain accuracy to the base-domain one as base samples grow.
    accs = [r["overall_acc"] for r in rows]
    assert accs == sorted(accs)
    table = format_ratio_table(rows).splitlines()
    assert table[0].split()[:4] == ["base:new", "new/base", "n_base", "n_new"]
    assert [line.split()[0] for line in table[-4:]] == ["mean", "variance", "mean,", "base:new"]


def test_ratio_study_with_separate_models_and_bad_input():
    probs, labels = _fixed_accuracy_predictions()
    scores = probs[:, :3].max(axis=1)
    g = probs[:, :3].argmax(axis=1)
    h = 3 + probs[:, 3:].argmax(axis=1)
    rows = ratio_study(
        None,
        labels,
        [0, 1, 2],
        ["1:1"],
        detector_scores=scores,
        base_predictions=g,
        new_predictions=h,
        repeats=2,
    )
    with_outputs = ratio_study(probs, labels, [0, 1, 2], ["1:1"], repeats=2)
    assert rows[0]["openworld_auc"] == pytest.approx(with_outputs[0]["openworld_auc"])
    assert math.isnan(rows[0]["overall_acc"])
    with pytest.raises(OodevalError):
        ratio_study(probs, labels, [0, 1, 2], [], repeats=1)
    with pytest.raises(OodevalError):
        ratio_study(probs, labels, [0, 1, 2], ["1:1"], repeats=0)
    with pytest.raises(OodevalError, match=r"repeats must lie in \[1, 1,000\], got 1,001"):
        ratio_study(probs, labels, [0, 1, 2], ["1:1"], repeats=MAX_REPEATS + 1)
