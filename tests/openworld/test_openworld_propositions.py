"""Propositions 3.1, 4.1 and 4.3 of the OpenworldAUC paper, as its proofs (App. A) build them.

Each counterexample of docs/concepts/openworld-properties.md is a test here, with the same
hand-made outputs (classes 0, 1 base; 2, 3 new), and each proof's construction is also run on
random models (Hypothesis): HM misses detection (P1), AUROC and any linear combination of AUROC,
BaseAcc and NewAcc miss classification (P2), OverallAcc moves with the base/new ratio (P3), and
OpenworldAUC keeps all three and bounds HitRate_n at every threshold.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from oodeval.measures.openworld import (
    auroc,
    openworld_auc,
    openworld_curve,
    openworld_scored_samples,
    openworld_scores,
)
from tests.requires import REPO

BASE = [0, 1]
LABELS = np.array([0, 1, 2, 3])
PAGE = REPO / "docs" / "concepts" / "openworld-properties.md"


def scores(probs, labels=LABELS) -> dict[str, float]:
    return openworld_scores(np.asarray(probs, dtype=np.float64), labels, BASE)


# --------------------------------------------------------------------------------------------
# Proposition 3.1: HM ignores detection (P1)
# --------------------------------------------------------------------------------------------

PROP_3_1_BEFORE = [
    [0.70, 0.10, 0.10, 0.10],
    [0.10, 0.60, 0.20, 0.10],
    [0.10, 0.10, 0.70, 0.10],
    [0.20, 0.10, 0.10, 0.60],
]
PROP_3_1_AFTER = [[0.15, 0.05, 0.70, 0.10], *PROP_3_1_BEFORE[1:]]


def test_prop_3_1_the_same_hm_for_a_model_that_sends_a_base_sample_to_h():
    before, after = scores(PROP_3_1_BEFORE), scores(PROP_3_1_AFTER)
    # g is still right on the changed sample, but its largest output is a new class (App. A.1)
    assert np.argmax(PROP_3_1_AFTER[0][:2]) == 0 and np.argmax(PROP_3_1_AFTER[0]) == 2
    assert after["hm"] == before["hm"] == 1.0
    # one of the 4 (base, new) pairs is now ranked the wrong way round
    assert before["openworld_auc"] == 1.0 and after["openworld_auc"] == 0.75
    assert after["overall_acc"] == 0.75


def _probs(draw_values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Rows of positive probabilities from raw draws (one row per label)."""
    p = np.abs(draw_values) + 0.01
    return p / p.sum(axis=1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(
    raw=arrays(np.float64, (8, 4), elements=st.floats(0.0, 1.0)),
    labels=st.lists(st.integers(0, 3), min_size=8, max_size=8).filter(
        lambda y: {0, 1} & set(y) and {2, 3} & set(y)
    ),
    eps=st.floats(1e-6, 1e-3),
)
def test_prop_3_1_construction_keeps_hm_and_never_raises_openworld_auc(raw, labels, eps):
    y = np.array(labels)
    probs = _probs(raw, y)
    right = [i for i in range(8) if y[i] < 2 and np.argmax(probs[i, :2]) == y[i]]
    if not right:
        return
    i = right[0]
    # App. A.1: g stays right on x_b (its base outputs keep their order), but the largest output
    # is now a new class, and r(x_b) falls below every new sample's r.
    changed = probs.copy()
    changed[i, :2] *= eps
    changed[i, 2] += probs[i, :2].sum() * (1 - eps)
    before, after = scores(probs, y), scores(changed, y)
    assert after["hm"] == before["hm"]
    assert after["base_acc"] == before["base_acc"] and after["new_acc"] == before["new_acc"]
    assert after["openworld_auc"] <= before["openworld_auc"]
    new_right = [j for j in range(8) if y[j] >= 2 and np.argmax(probs[j, 2:]) == y[j] - 2]
    if any(probs[i, :2].max() > probs[j, :2].max() for j in new_right):
        assert after["openworld_auc"] < before["openworld_auc"]  # a counted pair is lost


# --------------------------------------------------------------------------------------------
# Proposition 4.1: AUROC, BaseAcc and NewAcc (and any linear combination) miss P2
# --------------------------------------------------------------------------------------------

PROP_4_1_MODEL = [
    [0.70, 0.10, 0.10, 0.10],  # x_b1: r = 0.7, g right
    [0.30, 0.10, 0.30, 0.30],  # x_b2: r = 0.3, g wrong
    [0.50, 0.10, 0.10, 0.30],  # x_n1: r = 0.5, h wrong
    [0.10, 0.05, 0.25, 0.60],  # x_n2: r = 0.1, h right
]
PROP_4_1_SWAPPED = [PROP_4_1_MODEL[i] for i in (1, 0, 3, 2)]


def test_auroc_alone_ignores_classification():
    base, new = [0.9, 0.8], [0.2, 0.1]
    assert auroc(base, new) == 1.0
    assert openworld_auc(base, new, [True, True], [True, True]) == 1.0
    assert openworld_auc(base, new, [False, False], [True, True]) == 0.0


def test_prop_4_1_the_same_auroc_base_acc_and_new_acc_for_a_worse_model():
    a, b = scores(PROP_4_1_MODEL), scores(PROP_4_1_SWAPPED)
    samples = openworld_scored_samples(np.array(PROP_4_1_MODEL), LABELS, BASE)
    # r(x_b1) > r(x_n1) > r(x_b2) > r(x_n2), g right on x_b1 only, h right on x_n2 only
    assert samples.base_scores.tolist() == [0.7, 0.3] and samples.new_scores.tolist() == [0.5, 0.1]
    assert samples.base_correct.tolist() == [True, False]
    assert samples.new_correct.tolist() == [False, True]
    swapped = openworld_scored_samples(np.array(PROP_4_1_SWAPPED), LABELS, BASE)
    assert swapped.base_scores.tolist() == [0.3, 0.7] and swapped.new_scores.tolist() == [0.1, 0.5]
    assert swapped.base_correct.tolist() == [True, False]
    assert swapped.new_correct.tolist() == [False, True]
    for key in ("auroc", "base_acc", "new_acc", "hm"):
        assert a[key] == b[key], key
    assert (a["auroc"], a["base_acc"], a["new_acc"]) == (0.75, 0.5, 0.5)
    rng = np.random.default_rng(0)
    for w in rng.normal(size=(20, 3)):  # any linear combination of the three
        lin = w @ [a["auroc"], a["base_acc"], a["new_acc"]]
        assert lin == w @ [b["auroc"], b["base_acc"], b["new_acc"]]
    # Prop. 4.3, second half: OpenworldAUC sees that (r~, g~, h~) is worse
    assert (a["openworld_auc"], b["openworld_auc"]) == (0.25, 0.0)


@settings(max_examples=60, deadline=None)
@given(
    base=st.lists(st.floats(-5, 5), min_size=1, max_size=8),
    new=st.lists(st.floats(-5, 5), min_size=1, max_size=8),
    data=st.data(),
)
def test_auroc_is_blind_to_the_classifiers_and_openworld_auc_is_not(base, new, data):
    ok_b = data.draw(st.lists(st.booleans(), min_size=len(base), max_size=len(base)))
    ok_n = data.draw(st.lists(st.booleans(), min_size=len(new), max_size=len(new)))
    ours = openworld_auc(base, new, ok_b, ok_n)
    # Independent reference: the mean over pairs of 1[g right] 1[h right] (1[r_b > r_n] + 1/2 tie)
    pairs = [
        (gb and hn) * (1.0 if sb > sn else 0.5 if sb == sn else 0.0)
        for sb, gb in zip(base, ok_b, strict=True)
        for sn, hn in zip(new, ok_n, strict=True)
    ]
    assert ours == pytest.approx(np.mean(pairs), abs=1e-12)
    assert ours <= auroc(base, new) + 1e-12
    all_right = openworld_auc(base, new, [True] * len(base), [True] * len(new))
    assert all_right == pytest.approx(auroc(base, new), abs=1e-12)


# --------------------------------------------------------------------------------------------
# Proposition 4.3: OverallAcc moves with the ratio (P3); OpenworldAUC bounds HitRate_n
# --------------------------------------------------------------------------------------------

PROP_4_3_PROBS = np.array(
    [
        [0.80, 0.10, 0.05, 0.05],
        [0.10, 0.80, 0.05, 0.05],
        [0.10, 0.10, 0.70, 0.10],
        [0.30, 0.10, 0.50, 0.10],
    ]
)


@pytest.mark.parametrize(
    ("copies", "overall"),
    [([1, 1, 5, 5], 7 / 12), ([1, 1, 1, 1], 3 / 4), ([5, 5, 1, 1], 11 / 12)],
    ids=["Bwd-1:5", "1:1", "Fwd-5:1"],
)
def test_prop_4_3_overall_acc_follows_the_ratio_and_openworld_auc_does_not(copies, overall):
    rows = np.repeat(np.arange(4), copies)
    s = scores(PROP_4_3_PROBS[rows], LABELS[rows])
    assert s["overall_acc"] == pytest.approx(overall, rel=1e-15)
    assert (s["openworld_auc"], s["hm"], s["auroc"]) == pytest.approx((0.5, 2 / 3, 1.0), rel=1e-15)


def test_prop_4_3_a_high_overall_acc_with_no_new_sample_right():
    blind = PROP_4_3_PROBS.copy()
    blind[2] = [0.10, 0.10, 0.10, 0.70]
    rows = np.repeat(np.arange(4), [10, 10, 1, 1])
    s = scores(blind[rows], LABELS[rows])
    assert s["overall_acc"] == pytest.approx(20 / 22, rel=1e-15)
    assert s["new_acc"] == 0.0 and s["openworld_auc"] == 0.0


@settings(max_examples=60, deadline=None)
@given(
    raw=arrays(np.float64, (6, 4), elements=st.floats(0.0, 1.0)),
    k_base=st.integers(1, 6),
    k_new=st.integers(1, 6),
)
def test_copies_change_overall_acc_as_its_formula_says_and_nothing_else(raw, k_base, k_new):
    y = np.array([0, 1, 0, 2, 3, 2])
    probs = _probs(raw, y)
    rows = np.concatenate([np.repeat([0, 1, 2], k_base), np.repeat([3, 4, 5], k_new)])
    one, many = scores(probs, y), scores(probs[rows], y[rows])
    for key in ("base_acc", "new_acc", "hm", "auroc", "openworld_auc"):
        assert many[key] == pytest.approx(one[key], rel=1e-12, abs=1e-15), key
    # OverallAcc = P_b TPR_b + P_n TPR_n (Sec. 3.2), TPR_* the accuracy of argmax over all classes
    right = np.argmax(probs, axis=1) == y
    p_b = 3 * k_base / (3 * k_base + 3 * k_new)
    formula = p_b * right[:3].mean() + (1 - p_b) * right[3:].mean()
    assert many["overall_acc"] == pytest.approx(formula, rel=1e-12, abs=1e-15)


def test_prop_4_3_bound_on_the_page_model():
    samples = openworld_scored_samples(PROP_4_3_PROBS, LABELS, BASE)
    u = openworld_auc(*samples)
    miss, hit = openworld_curve(*samples)
    assert u == 0.5
    assert np.all(1 - u >= miss * (1 - hit))


@settings(max_examples=100, deadline=None)
@given(
    base=st.lists(st.integers(0, 6), min_size=1, max_size=10),
    new=st.lists(st.integers(0, 6), min_size=1, max_size=10),
    data=st.data(),
)
def test_prop_4_3_openworld_auc_bounds_hit_rate_at_every_threshold(base, new, data):
    """1 - u >= MissRate_b(t) (1 - HitRate_n(t)) for every t (App. A.4), ties included."""
    ok_b = data.draw(st.lists(st.booleans(), min_size=len(base), max_size=len(base)))
    ok_n = data.draw(st.lists(st.booleans(), min_size=len(new), max_size=len(new)))
    u = openworld_auc(base, new, ok_b, ok_n)
    b, n = np.array(base), np.array(new)
    # Independent reference: the rates at every integer threshold (Sec. 4.2 definitions)
    for t in range(-1, 8):
        miss = np.mean(~np.array(ok_b) | (b <= t))
        hit = np.mean(np.array(ok_n) & (n <= t))
        assert 1 - u >= miss * (1 - hit) - 1e-12, t
    miss, hit = openworld_curve(base, new, ok_b, ok_n)
    assert np.all(1 - u >= miss * (1 - hit) - 1e-12)


# --------------------------------------------------------------------------------------------
# The page that runs them
# --------------------------------------------------------------------------------------------


def test_the_docs_page_runs_these_counterexamples_and_is_in_the_site():
    text = PAGE.read_text(encoding="utf-8")
    for name in ("Proposition 3.1", "Proposition 4.1", "Proposition 4.3"):
        assert f"## {name}" in text
    for rows in (PROP_3_1_AFTER[0], PROP_4_1_MODEL[1], PROP_4_3_PROBS[3].tolist()):
        assert "[" + ", ".join(f"{v:.2f}" for v in rows) + "]" in text
    assert "concepts/openworld-properties.md" in (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    test_docs = (REPO / "tests" / "test_docs.py").read_text(encoding="utf-8")
    assert '"openworld-properties.md"' in test_docs
