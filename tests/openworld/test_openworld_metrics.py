"""OpenworldAUC suite: checked against brute-force pair loops, sklearn and the paper's identity."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.special import softmax
from sklearn.metrics import roc_auc_score

from oodeval.errors import OodevalError
from oodeval.measures.openworld import (
    auroc,
    openworld_auc,
    openworld_curve,
    openworld_scored_samples,
    openworld_scores,
    openworld_summary,
)

# ---------------------------------------------------------------------------------------------
# independent references
# ---------------------------------------------------------------------------------------------


def python_number(v):
    """`v` as a Python int or float: Python compares those exactly, even an int with a float."""
    return v.item() if isinstance(v, np.generic) else v


def brute_openworld_auc(base, new, base_ok, new_ok, tie=0.5):
    """The O(N_b N_n) pair loop of Prop. 4.2, exact: rational sums, exact score comparisons."""
    total = Fraction(0)
    for sb, cb in zip(map(python_number, base), base_ok, strict=True):
        for sn, cn in zip(map(python_number, new), new_ok, strict=True):
            if cb and cn:
                if sb > sn:
                    total += 1
                elif sb == sn:
                    total += Fraction(tie)
    return float(total / (len(base) * len(new)))


def brute_scores(probs, labels, base_classes):
    """Per-sample loops over the definitions of Sec. 3 and Algorithm 1 (probabilities given)."""
    probs = np.asarray(probs, dtype=float)
    base_set = set(base_classes)
    new_classes = [c for c in range(probs.shape[1]) if c not in base_set]
    base_scores, new_scores, base_ok, new_ok, overall = [], [], [], [], []
    for row, y in zip(probs, labels, strict=True):
        r = max(row[c] for c in sorted(base_set))
        g = max(sorted(base_set), key=lambda c: (row[c], -c))
        h = max(new_classes, key=lambda c: (row[c], -c))
        overall.append(max(range(len(row)), key=lambda c: (row[c], -c)) == y)
        if y in base_set:
            base_scores.append(r)
            base_ok.append(g == y)
        else:
            new_scores.append(r)
            new_ok.append(h == y)
    ba, na = float(np.mean(base_ok)), float(np.mean(new_ok))
    return {
        "base_acc": ba,
        "new_acc": na,
        "hm": 0.0 if ba + na == 0 else 2 * ba * na / (ba + na),
        "overall_acc": float(np.mean(overall)),
        "auroc": brute_openworld_auc(
            base_scores, new_scores, [1] * len(base_ok), [1] * len(new_ok)
        ),
        "openworld_auc": brute_openworld_auc(base_scores, new_scores, base_ok, new_ok),
    }


def random_case(rng, *, n_levels=None):
    """Random scores with many forced ties (few distinct levels) and random correctness."""
    n_b, n_n = rng.integers(1, 25, size=2)
    levels = n_levels or int(rng.integers(1, 8))
    base = rng.integers(0, levels, n_b) * 0.25 - 0.5
    new = rng.integers(0, levels, n_n) * 0.25 - 0.75
    return base, new, rng.random(n_b) < 0.7, rng.random(n_n) < 0.6


def random_probs(rng, n, n_classes):
    return softmax(rng.normal(size=(n, n_classes)) * 2, axis=1)


# ---------------------------------------------------------------------------------------------
# openworld_auc and auroc against references
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tie", [0.0, 0.5, 1.0])
def test_openworld_auc_matches_brute_force_pair_loop_with_ties(tie):
    rng = np.random.default_rng(1)
    for _ in range(150):
        base, new, bok, nok = random_case(rng)
        got = openworld_auc(base, new, bok, nok, tie=tie)
        assert got == brute_openworld_auc(base, new, bok, nok, tie)


def test_openworld_auc_hand_worked_example():
    # correct base {0.9, 0.5}, correct new {0.5, 0.1}: pairs 0.9>0.5, 0.9>0.1, 0.5=0.5, 0.5>0.1
    base, new = [0.9, 0.5, 0.7], [0.5, 0.1, 0.95]
    bok, nok = [True, True, False], [True, True, False]
    assert openworld_auc(base, new, bok, nok) == 3.5 / 9
    assert openworld_auc(base, new, bok, nok, tie=0) == 3 / 9
    assert openworld_auc(base, new, bok, nok, tie=1) == 4 / 9


def test_auroc_matches_sklearn_roc_auc_score():
    rng = np.random.default_rng(2)
    for _ in range(100):
        base, new, _, _ = random_case(rng)
        y = np.r_[np.ones(len(base)), np.zeros(len(new))]
        if len(set(y)) < 2:
            continue
        expected = roc_auc_score(y, np.r_[base, new])
        assert auroc(base, new) == pytest.approx(expected, abs=1e-12)


def test_auroc_tie_option_matches_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(50):
        base, new, _, _ = random_case(rng)
        ones_b, ones_n = [True] * len(base), [True] * len(new)
        for tie in (0.0, 1.0):
            assert auroc(base, new, tie=tie) == brute_openworld_auc(base, new, ones_b, ones_n, tie)


def test_identity_owauc_is_base_acc_times_new_acc_times_auroc_of_correct_sets():
    rng = np.random.default_rng(4)
    checked = 0
    for _ in range(200):
        base, new, bok, nok = random_case(rng)
        owauc = openworld_auc(base, new, bok, nok)
        if not bok.any() or not nok.any():
            assert owauc == 0.0
            continue
        expected = bok.mean() * nok.mean() * auroc(base[bok], new[nok])
        assert owauc == pytest.approx(expected, rel=1e-12, abs=1e-15)
        checked += 1
    assert checked > 100


def test_zero_when_no_correct_base_or_no_correct_new():
    assert openworld_auc([1.0, 2.0], [0.0], [False, False], [True]) == 0.0
    assert openworld_auc([1.0, 2.0], [0.0], [True, True], [False]) == 0.0


# ---------------------------------------------------------------------------------------------
# exactness: large magnitudes, complete separation, low-precision input
# ---------------------------------------------------------------------------------------------


def test_large_magnitude_scores_are_exact():
    # the "misclassified base -> min(new) - 1e-5" trick would tie 5e299 with 5e299 and give 0.625
    base, bok = [2e300, 1e300], [True, False]
    new, nok = [1e300, 5e299], [True, True]
    assert openworld_auc(base, new, bok, nok) == 0.5
    assert openworld_auc([-1e300, 1e300], [-1e300], [True, True], [True]) == 0.75
    assert auroc([1e300], [-1e300]) == 1.0
    assert openworld_auc([-1e300], [1e300], [True], [True]) == 0.0


def test_fully_separated_sets_give_base_acc_times_new_acc_exactly():
    rng = np.random.default_rng(5)
    for _ in range(30):
        n_b, n_n = rng.integers(1, 40, size=2)
        base = rng.uniform(10, 11, n_b)
        new = rng.uniform(0, 1, n_n)
        bok, nok = rng.random(n_b) < 0.8, rng.random(n_n) < 0.5
        expected = float(Fraction(int(bok.sum()) * int(nok.sum()), int(n_b * n_n)))
        assert openworld_auc(base, new, bok, nok) == expected
        assert auroc(base, new) == 1.0
        assert openworld_auc(new, base, nok, bok) == 0.0


def test_float16_and_float32_scores_keep_their_ties_and_order():
    # adjacent float16 values: distinct as given, must not be merged or split
    base16 = np.array([1.0, 1.0009766, 1.0019531, 1.0], dtype=np.float16)
    new16 = np.array([1.0009766, 1.0, 0.9995117], dtype=np.float16)
    bok, nok = [True, True, True, False], [True, True, True]
    expected = brute_openworld_auc(base16.astype(np.float64), new16.astype(np.float64), bok, nok)
    assert openworld_auc(base16, new16, bok, nok) == expected
    assert openworld_auc(base16.astype(np.float32), new16.astype(np.float32), bok, nok) == expected
    rng = np.random.default_rng(6)
    for _ in range(30):
        base, new, bok, nok = random_case(rng)
        b16 = (base + rng.normal(0, 1e-3, len(base))).astype(np.float16)
        n16 = (new + rng.normal(0, 1e-3, len(new))).astype(np.float16)
        ref = brute_openworld_auc(b16.astype(float), n16.astype(float), bok, nok)
        assert openworld_auc(b16, n16, bok, nok) == ref


def test_integer_scores_and_zero_one_correctness_are_accepted():
    assert openworld_auc([3, 1], [2], [1, 1], [1]) == 0.5
    assert openworld_auc([3, 1], [2], np.array([1.0, 0.0]), [True]) == 0.5


# ---------------------------------------------------------------------------------------------
# integer scores beyond float64's 2**53: ranked exactly, never merged into ties
# ---------------------------------------------------------------------------------------------

P53 = 2**53


def test_integers_beyond_2_to_the_53_are_ranked_exactly():
    # float64(2**53 + 1) == float64(2**53): a float64 copy would tie them and give 0.5
    assert auroc([P53 + 1], [P53]) == 1.0
    assert auroc([P53], [P53 + 1]) == 0.0
    assert auroc([P53 + 1], [P53 + 1]) == 0.5
    assert openworld_auc([P53 + 1, P53 - 1], [P53], [True, True], [True]) == 0.5
    top = np.iinfo(np.int64).max  # float64 rounds it up to 2**63
    assert auroc(np.array([top]), np.array([top - 1])) == 1.0
    huge = np.array([2**64 - 1], np.uint64)  # float64 rounds it up to 2**64
    assert auroc(huge, huge - np.uint64(1)) == 1.0
    assert auroc(huge, np.array([-1])) == 1.0  # uint64 against negative int64


def near(rng, centre, n):
    """n integers within 4 of `centre`: many share one float64 value, some are equal."""
    return [centre + int(k) for k in rng.integers(-4, 5, n)]


@pytest.mark.parametrize(
    ("centre", "dtype"),
    [(P53, np.int64), (-P53, np.int64), (2**62, np.int64), (2**63 + 2**62, np.uint64)],
)
def test_openworld_auc_on_64_bit_integers_matches_the_exact_pair_loop(centre, dtype):
    rng = np.random.default_rng(11)
    for _ in range(60):
        n_b, n_n = rng.integers(1, 12, size=2)
        base = np.array(near(rng, centre, n_b), dtype=dtype)
        new = np.array(near(rng, centre, n_n), dtype=dtype)
        bok, nok = rng.random(n_b) < 0.8, rng.random(n_n) < 0.8
        for tie in (0.0, 0.5, 1.0):
            want = brute_openworld_auc(base, new, bok, nok, tie)
            assert openworld_auc(base, new, bok, nok, tie=tie) == want
        miss, hit = openworld_curve(base, new, bok, nok)
        assert np.trapezoid(hit, miss) == pytest.approx(
            brute_openworld_auc(base, new, bok, nok), abs=1e-12
        )


def test_integers_against_floats_compare_exactly():
    rng = np.random.default_rng(12)
    for _ in range(60):
        n_b, n_n = rng.integers(1, 12, size=2)
        base = np.array(near(rng, P53, n_b), dtype=np.int64)
        # floats of 2**53 +- 8: every other integer there, so ties with the integers too
        new = P53 + 2.0 * rng.integers(-4, 5, n_n)
        bok, nok = rng.random(n_b) < 0.8, rng.random(n_n) < 0.8
        assert openworld_auc(base, new, bok, nok) == brute_openworld_auc(base, new, bok, nok)
        assert openworld_auc(new, base, nok, bok) == brute_openworld_auc(new, base, nok, bok)
    assert auroc([P53 + 1], [float(P53)]) == 1.0 and auroc([P53 - 1], [float(P53)]) == 0.0
    # uint64 above int64's range, negative int64 and floats in one ranking (float64 steps are
    # 2**11 near 2**63 + 2**62: the integers sit between and on them)
    for _ in range(30):
        big = np.array(near(rng, 2**63 + 2**62, 6) + [2**63 + 2**62 + 2048], dtype=np.uint64)
        negative = np.array(near(rng, -(2**62), 3), dtype=np.int64)
        floats = float(2**63 + 2**62) + 2048.0 * rng.integers(-1, 2, 4)
        ok = [True] * 7, [True] * 3, [True] * 4
        for base, new, bok, nok in (
            (big, negative, ok[0], ok[1]),
            (big, floats, ok[0], ok[2]),
            (floats, big, ok[2], ok[0]),
        ):
            assert openworld_auc(base, new, bok, nok) == brute_openworld_auc(base, new, bok, nok)


def test_integer_detector_scores_from_separate_models_stay_exact():
    labels = [0, 1, 2, 2]  # base classes 0, 1
    got = openworld_scores(
        None,
        labels,
        [0, 1],
        detector_scores=np.array([P53 + 1, P53 + 3, P53, P53 + 2]),
        base_predictions=[0, 1, 0, 0],
        new_predictions=[2, 2, 2, 2],
    )
    assert got["auroc"] == 0.75 and got["openworld_auc"] == 0.75


def test_inputs_that_cannot_be_kept_exact_are_refused():
    with pytest.raises(OodevalError, match="beyond 2\\*\\*53 that reading the list would round"):
        auroc([P53 + 1, 0.5], [0.0])
    with pytest.raises(OodevalError, match="beyond 2\\*\\*53 that reading the list would round"):
        auroc([2**63, -1], [0])  # numpy reads this list as float64
    with pytest.raises(OodevalError, match="outside the 64-bit range"):
        auroc([2**64], [0])
    extended = np.array([np.longdouble(P53) + np.longdouble(1)])
    if extended[0] != np.longdouble(P53):  # a long double wider than float64 (x86)
        with pytest.raises(OodevalError, match="values that float64 would round"):
            auroc(extended, [0.0])
    else:  # long double is float64 here: nothing to round
        assert auroc(extended, [0.0]) == 1.0


# ---------------------------------------------------------------------------------------------
# invariances (hypothesis)
# ---------------------------------------------------------------------------------------------

small_scores = st.lists(st.integers(-20, 20), min_size=1, max_size=25)
TRANSFORMS = [
    lambda x: x**3 + 2.0 * x,
    lambda x: np.exp(x / 10.0),
    lambda x: 1000.0 * x - 7.0,
    lambda x: np.arctan(x / 4.0),
]


@settings(max_examples=60, deadline=None)
@given(
    base=small_scores,
    new=small_scores,
    seed=st.integers(0, 2**32 - 1),
    transform=st.sampled_from(range(len(TRANSFORMS))),
)
def test_owauc_invariant_to_strictly_increasing_transforms(base, new, seed, transform):
    rng = np.random.default_rng(seed)
    base, new = np.array(base, dtype=float), np.array(new, dtype=float)
    bok, nok = rng.random(len(base)) < 0.6, rng.random(len(new)) < 0.6
    f = TRANSFORMS[transform]
    assert openworld_auc(f(base), f(new), bok, nok) == openworld_auc(base, new, bok, nok)
    assert auroc(f(base), f(new)) == auroc(base, new)


@settings(max_examples=60, deadline=None)
@given(base=small_scores, new=small_scores, seed=st.integers(0, 2**32 - 1))
def test_owauc_invariant_to_permutations(base, new, seed):
    rng = np.random.default_rng(seed)
    base, new = np.array(base, dtype=float), np.array(new, dtype=float)
    bok, nok = rng.random(len(base)) < 0.6, rng.random(len(new)) < 0.6
    pb, pn = rng.permutation(len(base)), rng.permutation(len(new))
    assert openworld_auc(base[pb], new[pn], bok[pb], nok[pn]) == openworld_auc(base, new, bok, nok)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 5))
def test_duplicating_the_base_set_leaves_owauc_auroc_hm_unchanged_but_moves_overall_acc(seed, k):
    # Property P3 of the paper (Sec. 1, Fig. 2): insensitivity to the base/new ratio.
    rng = np.random.default_rng(seed)
    n, n_classes, base_classes = 20, 5, [0, 2]
    probs = random_probs(rng, n, n_classes)
    labels = rng.integers(0, n_classes, n)
    is_base = np.isin(labels, base_classes)
    assume(0 < is_base.sum() < n)
    overall_ok = probs.argmax(1) == labels
    assume(overall_ok[is_base].mean() != overall_ok[~is_base].mean())
    before = openworld_scores(probs, labels, base_classes)
    rows = np.r_[np.tile(np.flatnonzero(is_base), k), np.flatnonzero(~is_base)]
    after = openworld_scores(probs[rows], labels[rows], base_classes)
    for key in ("openworld_auc", "auroc", "hm", "base_acc", "new_acc"):
        assert after[key] == before[key]
    assert after["overall_acc"] != before["overall_acc"]


# ---------------------------------------------------------------------------------------------
# the MissRate_b / HitRate_n curve
# ---------------------------------------------------------------------------------------------


def test_curve_trapezoidal_area_equals_owauc_with_ties():
    rng = np.random.default_rng(7)
    for _ in range(150):
        base, new, bok, nok = random_case(rng)
        miss, hit = openworld_curve(base, new, bok, nok)
        area = float(np.trapezoid(hit, miss))
        assert area == pytest.approx(brute_openworld_auc(base, new, bok, nok, 0.5), abs=1e-12)
        # the left Riemann sum is the strict (tie=0) version
        left = float(np.sum(np.diff(miss) * hit[:-1]))
        assert left == pytest.approx(brute_openworld_auc(base, new, bok, nok, 0.0), abs=1e-12)


def test_curve_points_follow_the_papers_definitions():
    rng = np.random.default_rng(8)
    for _ in range(40):
        base, new, bok, nok = random_case(rng)
        miss, hit, thresholds = openworld_curve(base, new, bok, nok, return_thresholds=True)
        assert thresholds[0] == -np.inf and np.all(np.diff(thresholds) > 0)
        for t, m, h in zip(thresholds, miss, hit, strict=True):
            # MissRate_b(t) = E_b[1[r <= t] + 1[r > t, g wrong]]
            want_m = np.mean(
                [(s <= t) or (s > t and not ok) for s, ok in zip(base, bok, strict=True)]
            )
            # HitRate_n(t) = E_n[1[r <= t, h right]]
            want_h = np.mean([(s <= t) and ok for s, ok in zip(new, nok, strict=True)])
            assert m == pytest.approx(want_m, abs=1e-12) and h == pytest.approx(want_h, abs=1e-12)
        assert miss[0] == pytest.approx(1 - bok.mean()) and miss[-1] == 1.0
        assert hit[0] == 0.0 and hit[-1] == pytest.approx(nok.mean())


def test_curve_with_no_correct_samples_is_a_single_point():
    miss, hit = openworld_curve([1.0], [0.0], [False], [False])
    assert miss.tolist() == [1.0] and hit.tolist() == [0.0]


# ---------------------------------------------------------------------------------------------
# openworld_summary / openworld_scores
# ---------------------------------------------------------------------------------------------


def test_summary_matches_definitions():
    rng = np.random.default_rng(9)
    for _ in range(30):
        base, new, bok, nok = random_case(rng)
        s = openworld_summary(base, new, bok, nok)
        ba, na = bok.mean(), nok.mean()
        assert s["base_acc"] == ba and s["new_acc"] == na
        assert s["hm"] == pytest.approx(0.0 if ba + na == 0 else 2 * ba * na / (ba + na))
        assert s["auroc"] == auroc(base, new)
        assert s["openworld_auc"] == openworld_auc(base, new, bok, nok)


def test_scores_from_probabilities_match_per_sample_loops():
    rng = np.random.default_rng(10)
    for _ in range(25):
        n, n_classes = int(rng.integers(6, 40)), int(rng.integers(3, 7))
        # probabilities on the grid k/10 force ties between rows and between classes
        probs = rng.multinomial(10, np.full(n_classes, 1 / n_classes), size=n) / 10
        base_classes = sorted(rng.choice(n_classes, int(rng.integers(1, n_classes)), False))
        labels = rng.integers(0, n_classes, n)
        labels[0], labels[1] = (
            base_classes[0],
            next(c for c in range(n_classes) if c not in base_classes),
        )
        got = openworld_scores(probs, labels, base_classes)
        want = brute_scores(probs, labels, base_classes)
        assert list(got) == ["base_acc", "new_acc", "hm", "overall_acc", "auroc", "openworld_auc"]
        for key, value in want.items():
            assert got[key] == pytest.approx(value, abs=1e-12), key


def test_logits_use_softmax_over_all_classes():
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(60, 6)) * 3
    labels = rng.integers(0, 6, 60)
    got = openworld_scores(logits, labels, [1, 3, 4], logits=True)
    want = openworld_scores(softmax(logits, axis=1), labels, [1, 3, 4])
    for key in got:
        assert got[key] == pytest.approx(want[key], abs=1e-12), key
    # a softmax over the base classes only would give a different (wrong) detector score
    samples = openworld_scored_samples(logits, labels, [1, 3, 4], logits=True)
    base_rows = np.isin(labels, [1, 3, 4])
    expected_r = softmax(logits, axis=1)[:, [1, 3, 4]].max(1)[base_rows]
    np.testing.assert_allclose(np.exp(samples.base_scores), expected_r, rtol=1e-12)


def test_logits_keep_the_order_of_near_certain_samples():
    # probabilities 1 - 2e-44 (base) and 1 - 4e-22 (new) both round to 1.0 in a float64 softmax
    logits = np.array([[100.0, 0.0, 0.0], [50.0, 0.0, 0.0]])
    labels = [0, 1]
    naive = softmax(logits, axis=1)[:, 0]
    assert naive[0] == naive[1] == 1.0  # a probability-based detector would see a tie
    got = openworld_scores(logits, labels, [0], logits=True)
    assert got["auroc"] == 1.0


def test_argmax_ties_go_to_the_lowest_class_id():
    probs = [[0.4, 0.4, 0.1, 0.1], [0.1, 0.1, 0.4, 0.4]]
    s = openworld_scored_samples(probs, [1, 3], [0, 1])
    assert s.base_correct.tolist() == [False] and s.new_correct.tolist() == [False]
    s = openworld_scored_samples(probs, [0, 2], [0, 1])
    assert s.base_correct.tolist() == [True] and s.new_correct.tolist() == [True]


def test_separate_detector_and_classifiers():
    labels = np.array([0, 1, 2, 3, 0, 2])
    det = np.array([5.0, -1.0, 0.0, -3.0, 2.0, 2.0])
    base_pred = np.array([0, 0, 9, 9, 0, 9])  # only base rows are read
    new_pred = np.array([-5, -5, 2, 2, -5, 3])  # only new rows are read
    got = openworld_scores(
        None, labels, [0, 1], detector_scores=det, base_predictions=base_pred,
        new_predictions=new_pred,
    )  # fmt: skip
    bok, nok = [True, False, True], [True, False, False]
    assert got["base_acc"] == 2 / 3 and got["new_acc"] == 1 / 3
    assert np.isnan(got["overall_acc"])
    assert got["auroc"] == auroc([5.0, -1.0, 2.0], [0.0, -3.0, 2.0])
    assert got["openworld_auc"] == brute_openworld_auc([5, -1, 2], [0, -3, 2], bok, nok)


def test_separate_detector_overrides_output_scores():
    probs = np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5], [0.5, 0.2, 0.3]])
    labels = [0, 2, 1]
    got = openworld_scores(probs, labels, [0, 1], detector_scores=[0.0, 1.0, 0.5])
    assert got["auroc"] == 0.0  # the separate detector ranks the new sample highest
    assert got["base_acc"] == 0.5 and got["overall_acc"] == 2 / 3


# ---------------------------------------------------------------------------------------------
# bad input: one clear line each
# ---------------------------------------------------------------------------------------------

GOOD = dict(base_scores=[0.5, 0.4], new_scores=[0.1], base_correct=[True, False], new_correct=[1])


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"base_scores": [np.nan, 0.4]}, "NaN or infinite"),
        ({"new_scores": [np.inf]}, "NaN or infinite"),
        ({"base_scores": [0.5]}, "same length"),
        ({"new_correct": [True, True]}, "same length"),
        ({"base_scores": [], "base_correct": []}, "base_scores is empty"),
        ({"new_scores": [], "new_correct": []}, "new_scores is empty"),
        ({"base_correct": [2, 0]}, "boolean"),
        ({"base_correct": [0.5, 1.0]}, "boolean"),
        ({"new_correct": ["yes"]}, "boolean"),
        ({"base_scores": ["a", "b"]}, "numbers"),
        ({"base_scores": [[0.5, 0.4]]}, "1-D"),
        ({"tie": 2.0}, "tie"),
        ({"tie": "half"}, "tie"),
    ],
)
def test_bad_scored_inputs_raise_one_line(change, needle):
    kwargs = {**GOOD, **change}
    tie = kwargs.pop("tie", 0.5)
    with pytest.raises(OodevalError) as err:
        openworld_auc(**kwargs, tie=tie)
    assert needle in str(err.value) and "\n" not in str(err.value)


PROBS = np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5], [0.5, 0.2, 0.3]])


@pytest.mark.parametrize(
    ("args", "kwargs", "needle"),
    [
        ((PROBS, [0, 3, 1], [0, 1]), {}, "labels hold class 3"),
        ((PROBS, [0, -1, 1], [0, 1]), {}, ">= 0"),
        ((PROBS, [0.5, 2, 1], [0, 1]), {}, "integer class ids"),
        ((PROBS, [0, 2, 1], []), {}, "base_classes is empty"),
        ((PROBS, [0, 2, 1], [0, 1, 2]), {}, "at least one class must be new"),
        ((PROBS, [0, 2, 1], [0, 0, 1]), {}, "more than once"),
        ((PROBS, [0, 2, 1], [0, 5]), {}, "only 3 columns"),
        ((PROBS, [0, 2, 1], 3), {}, "iterable"),
        ((PROBS, [2, 2, 2], [0, 1]), {}, "no sample has a base-class label"),
        ((PROBS, [0, 1, 1], [0, 1]), {}, "new-class samples"),
        ((PROBS, [0, 2], [0, 1]), {}, "same length"),
        ((PROBS * 5, [0, 2, 1], [0, 1]), {}, "logits=True"),
        ((PROBS[:, :2], [0, 1, 1], [0]), {}, "sum to 1"),
        ((np.full((3, 3), np.nan), [0, 2, 1], [0, 1]), {}, "NaN"),
        ((None, [0, 2, 1], [0, 1]), {"detector_scores": [1, 2, 3]}, "base_predictions"),
        ((PROBS, [0, 2, 1], [0, 1]), {"new_predictions": [0, 7, 0]}, "only 3 columns"),
        ((PROBS, [0, 2, 1], [0, 1]), {"new_predictions": [0, -1, 0]}, ">= 0"),
        ((PROBS, [0, 2, 1], [0, 1]), {"base_predictions": [0, 0, 2]}, "global class ids"),
        ((PROBS, [0, 2, 1], [0, 1]), {"new_predictions": [0, 1, 0]}, "new-class ids"),
        ((PROBS, [0, 2, 1], [0, 1]), {"detector_scores": [1.0, 2.0]}, "same length"),
        ((PROBS, [0, 2, 1], [0, 1]), {"tie": -0.1}, "tie"),
    ],
)
def test_bad_model_outputs_raise_one_line(args, kwargs, needle):
    with pytest.raises(OodevalError) as err:
        openworld_scores(*args, **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)
