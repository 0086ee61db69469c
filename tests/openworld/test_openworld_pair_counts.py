"""Exact pair counts of the ranking metrics, against an O(n^2) pair loop over Python numbers.

`pair_counts` buckets the scores by an order-preserving map, counts pairs across buckets from
cumulative counts, ties inside single-valued buckets, and sorts the other buckets; each path
(one-valued buckets, sorted buckets, a span that overflows float64, extremes that are one
float64) is checked here on drawn scores with heavy ties, and the sort path on its own.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from oodeval.measures.openworld import auroc, openworld_auc
from oodeval.measures.openworld.ranking import (
    _buckets,
    _cross_bucket_pairs,
    _sorted_pair_counts,
    comparable,
    pair_counts,
)

P53 = 2**53
TINY = 5e-324  # the smallest subnormal


def pair_loop(pos, neg):
    """(#pos > neg, #pos == neg) over every pair, compared as Python numbers (exact)."""
    pos = [v.item() for v in np.asarray(pos)]
    neg = [v.item() for v in np.asarray(neg)]
    return sum(p > n for p in pos for n in neg), sum(p == n for p in pos for n in neg)


def brute_openworld_auc(base, new, base_ok, new_ok, tie):
    pos = np.asarray(base)[np.asarray(base_ok, bool)]
    neg = np.asarray(new)[np.asarray(new_ok, bool)]
    greater, equal = pair_loop(pos, neg)
    return float((greater + Fraction(tie) * equal) / (len(base) * len(new)))


# Pools of few values, so that drawn scores tie often, across and within the sides.
FLOAT_POOLS = [
    [0.0, 0.25, 0.5, 0.75, 1.0],
    [-0.0, 0.0, TINY, 2 * TINY, -TINY],  # signed zeros are equal; subnormals are not
    [1.0, float(np.nextafter(1.0, 2.0)), float(np.nextafter(1.0, 0.0)), 1.5],  # one ulp apart
    [-1.7e308, -1e300, 0.0, 1e300, 1.7e308],  # a span that overflows float64
    [1e6, 0.001, 0.002, 0.003, 0.0015],  # an outlier: the rest share one bucket
    [round(0.001 * k, 3) for k in range(200)],  # more values than buckets
]
INT_POOLS = [
    [P53 - 1, P53, P53 + 1, P53 + 2, P53 + 3],  # one float64 for several integers
    [2**63 - 1, 2**63 - 2, 2**62, -(2**63), -1, 0],
    [-5, -3, 0, 2, 7, 11],
]
UINT_POOL = [2**64 - 1, 2**64 - 2, 2**64 - 2049, 2**63, 2**63 + 1, 0]


@st.composite
def scored_sides(draw):
    """Two score arrays of one kind (float64, int64 or uint64) drawn from one small pool."""
    kind = draw(st.sampled_from(["float", "int", "uint"]))
    if kind == "float":
        pool, dtype = draw(st.sampled_from(FLOAT_POOLS)), np.float64
    elif kind == "int":
        pool, dtype = draw(st.sampled_from(INT_POOLS)), np.int64
    else:
        pool, dtype = UINT_POOL, np.uint64
    values = st.lists(st.sampled_from(pool), min_size=1, max_size=60)
    return np.array(draw(values), dtype=dtype), np.array(draw(values), dtype=dtype)


@settings(max_examples=300, deadline=None)
@given(sides=scored_sides())
def test_pair_counts_match_the_pair_loop(sides):
    pos, neg = sides
    assert pair_counts(*comparable(pos, neg)) == pair_loop(pos, neg)


@settings(max_examples=200, deadline=None)
@given(sides=scored_sides())
def test_the_sort_path_alone_matches_the_pair_loop(sides):
    pos, neg = sides
    assert _sorted_pair_counts(*comparable(pos, neg)) == pair_loop(pos, neg)


@settings(max_examples=200, deadline=None)
@given(sides=scored_sides(), nbins=st.sampled_from([2, 3, 16, 1 << 16]))
def test_buckets_never_reverse_an_order_and_stay_in_range(sides, nbins):
    pos, neg = comparable(*sides)
    buckets = _buckets(pos, neg, nbins)
    if buckets is None:  # extremes one float64 apart at most (subnormals, integers > 2**53)
        assert np.ptp(np.concatenate([pos, neg]).astype(np.float64)) < 1e-300
        return
    scores = np.concatenate([pos, neg])
    ids = np.concatenate(buckets)
    assert ids.min() >= 0 and ids.max() < nbins
    for i in range(scores.size):
        for j in range(scores.size):
            if scores[i].item() < scores[j].item():
                assert ids[i] <= ids[j]
            elif scores[i].item() == scores[j].item():
                assert ids[i] == ids[j]


@settings(max_examples=200, deadline=None)
@given(
    sides=scored_sides(),
    data=st.data(),
    tie=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
)
@example(
    sides=(np.array([0.5, 0.5, 0.25]), np.array([0.5, 0.25, 0.25])),
    data=None,
    tie=0.5,
)
def test_openworld_auc_matches_the_pair_loop_with_heavy_ties(sides, data, tie):
    base, new = sides
    if data is None:
        base_ok, new_ok = [True] * base.size, [True] * new.size
    else:
        base_ok = data.draw(st.lists(st.booleans(), min_size=base.size, max_size=base.size))
        new_ok = data.draw(st.lists(st.booleans(), min_size=new.size, max_size=new.size))
    got = openworld_auc(base, new, base_ok, new_ok, tie=tie)
    assert got == brute_openworld_auc(base, new, base_ok, new_ok, tie)


def test_each_path_of_pair_counts_is_exact():
    # one-valued buckets only
    assert pair_counts(np.array([0.5, 0.5, 1.0]), np.array([0.5, 0.0])) == (4, 2)
    # an outlier puts every other score into bucket 0, which is then sorted
    pos, neg = np.array([1e6, 0.002, 0.001, 0.003]), np.array([0.002, 0.0015, 0.003])
    assert pair_counts(pos, neg) == pair_loop(pos, neg) == (6, 2)
    # the span overflows float64: scores are halved
    pos, neg = np.array([1.7e308, -1.7e308, 0.0]), np.array([-1.7e308, 0.0])
    assert pair_counts(pos, neg) == pair_loop(pos, neg) == (3, 2)
    # integers whose extremes are one float64: no buckets, the sort path
    pos = np.array([2**60 + 1, 2**60 + 3], np.int64)  # float64 steps are 256 there
    neg = np.array([2**60, 2**60 + 3], np.int64)
    assert _buckets(pos, neg, 4) is None
    assert pair_counts(pos, neg) == pair_loop(pos, neg) == (2, 1)
    # all scores equal
    assert pair_counts(np.full(3, 7.0), np.full(2, 7.0)) == (0, 6)
    assert pair_counts(np.array([], float), np.array([1.0])) == (0, 0)


def test_counts_beyond_2_to_the_53_are_exact_integers():
    # 3e9 positives above 3e9 + 19 negatives: 9.000000057e18 pairs, beyond float64's integers
    pos_at = np.array([0, 3_000_000_001], np.int64)
    neg_at = np.array([3_000_000_019, 0], np.int64)
    got = _cross_bucket_pairs(pos_at, neg_at)
    assert got == 3_000_000_001 * 3_000_000_019 and got > P53
    assert float(got) != got  # a float64 sum would have rounded it


@pytest.mark.parametrize(("decimals", "jittered"), [(2, 0), (3, 0), (3, 0.05), (5, 0), (None, 0)])
def test_large_inputs_agree_with_searchsorted_and_sklearn(decimals, jittered):
    # 60,000 scores, 65,536 buckets: one-valued when rounded, all sorted when spread out, and
    # a few buckets sorted when a fraction of the rounded scores is moved off the grid
    rng = np.random.default_rng(13)
    base, new = rng.normal(0.6, 0.15, 30_000), rng.normal(0.45, 0.15, 30_000)
    if decimals is not None:
        base, new = np.round(base, decimals), np.round(new, decimals)
    for side in (base, new):
        moved = rng.random(side.size) < jittered
        side[moved] += rng.normal(0, 1e-5, int(moved.sum()))
    neg_sorted = np.sort(new)
    below = np.searchsorted(neg_sorted, base, side="left").sum()
    at_or_below = np.searchsorted(neg_sorted, base, side="right").sum()
    assert pair_counts(base, new) == (int(below), int(at_or_below - below))
    y = np.r_[np.ones(base.size), np.zeros(new.size)]
    assert auroc(base, new) == pytest.approx(roc_auc_score(y, np.r_[base, new]), abs=1e-12)
