"""Exact ranking of detector scores: comparison keys, pair counts and pair fractions.

The ranking metrics of the OpenworldAUC suite (`oodeval.measures.openworld.metrics`) count
(base, new) pairs by sorting, never by a double loop. Scores may lie in any real range and are
compared exactly as given, so no tie is created or broken: floats as float64 (float16/float32
convert exactly), integers as integers (int64, uint64: float64 would merge neighbours beyond
2**53), and integers against floats by exact keys (`comparable`). `pair_counts` counts the pairs
in int64 with histograms of order-preserving buckets, sorting only buckets that mix values
(O(n) for heavily tied scores, O(n log n) at worst), and `pair_fraction` turns the counts into a
rate with a tie credit (`checked_tie`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from oodeval.errors import OodevalError

__all__ = ["checked_tie", "comparable", "pair_counts", "pair_fraction"]

_INT64_MAX = np.iinfo(np.int64).max
_MAX_BINS = 1 << 16  # buckets of `pair_counts`: two int64 counts each, cache-sized


def checked_tie(tie: Any) -> float:
    """Return the credit of a tied (base, new) pair as a float in [0, 1], or raise.

    0.5 is the AUROC convention, 0 the paper's strict inequality.

    >>> checked_tie(0.5)
    0.5
    """
    try:
        value = float(tie)
    except (TypeError, ValueError):
        raise OodevalError(f"tie must be a number in [0, 1], got {tie!r}") from None
    if not (0.0 <= value <= 1.0):
        raise OodevalError(f"tie must be a number in [0, 1] (0.5 = AUROC convention), got {tie!r}")
    return value


def comparable(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Return the arrays (float64, int64 or uint64) in one dtype that orders and ties them exactly.

    Floats stay float64; integers become int64, or uint64 when none is negative; integers of at
    most 2**53 in magnitude join floats as float64 (exact). Otherwise (integers beyond 2**53
    against floats, or negative integers against integers above int64's range) every value
    gets its rank among all of them, from exact keys (see `_exact_ranks`).

    >>> big = np.array([2**53 + 1], dtype=np.int64)  # float64 would round it to 2**53
    >>> [a.tolist() for a in comparable(big, np.array([2.0**53]))]
    [[1], [0]]
    """
    kinds = {a.dtype.kind for a in arrays}
    if kinds == {"f"}:
        return arrays
    sized = [a for a in arrays if a.size]
    if kinds <= {"i", "u"}:
        if all(a.dtype.kind == "i" or a.max() <= _INT64_MAX for a in sized):
            return tuple(a.astype(np.int64, copy=False) for a in arrays)
        if all(a.dtype.kind == "u" or a.min() >= 0 for a in sized):
            return tuple(a.astype(np.uint64, copy=False) for a in arrays)
    elif all(a.dtype.kind == "f" or -(2**53) <= a.min() and a.max() <= 2**53 for a in sized):
        return tuple(a.astype(np.float64, copy=False) for a in arrays)
    return _exact_ranks(arrays)


def _exact_ranks(arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Dense int64 ranks of the values of all `arrays` together, compared exactly.

    Each value v gets the key (f, v - f) with f = float64(v) (v itself for a float). Rounding to
    the nearest float64 never reverses an order, so v < w exactly iff f_v < f_w, or f_v == f_w
    and v - f_v < w - f_w; the residual v - f is an integer below 2**11 in magnitude, computed
    exactly modulo 2**64 (see `_residual`).
    """
    nearest = [a.astype(np.float64) for a in arrays]
    residual = [
        _residual(a, f) if a.dtype.kind in "iu" else np.zeros(a.size, np.int64)
        for a, f in zip(arrays, nearest, strict=True)
    ]
    f, r = np.concatenate(nearest), np.concatenate(residual)
    order = np.lexsort((r, f))
    f, r = f[order], r[order]
    new_key = np.concatenate([[False], (f[1:] != f[:-1]) | (r[1:] != r[:-1])])
    ranks = np.empty(order.size, np.int64)
    ranks[order] = np.cumsum(new_key)
    return tuple(np.split(ranks, np.cumsum([a.size for a in arrays])[:-1]))


def _residual(values: np.ndarray, nearest: np.ndarray) -> np.ndarray:
    """``values - nearest`` exactly, for 64-bit integers and their nearest float64s.

    Both are taken modulo 2**64 as uint64 (`nearest` is an integer in [-2**63, 2**64]); the
    wrapped difference is the true one, which is far inside int64 (|residual| <= 2**10).
    """
    wrapped = np.where(nearest >= 2.0**64, 0.0, nearest)  # 2**64 = 0 modulo 2**64
    high = wrapped >= 2.0**63
    low = np.where(high, wrapped - 2.0**63, wrapped).astype(np.int64).view(np.uint64)
    as_uint = low + np.where(high, np.uint64(2**63), np.uint64(0))
    return (values.view(np.uint64) - as_uint).view(np.int64)


def pair_counts(pos: np.ndarray, neg: np.ndarray) -> tuple[int, int]:
    """Return (#pairs with pos > neg, #pairs with pos == neg), O(n log n) at worst, O(n) memory.

    ``greater = sum_{p, n} 1[p > n]`` and ``equal = sum_{p, n} 1[p == n]``, in int64 (exact up
    to 2**63 pairs). The scores first go into ``nbins`` buckets by an order-preserving map
    (`_buckets`: a value never lands below a smaller one), counted with bincount: a pair in two
    buckets is ordered by its buckets, which cumulative counts give at once, and a pair in a
    bucket whose scores are all equal is a tie. Only the buckets holding both sides and more
    than one value are sorted (`_sorted_pair_counts`). Scores with few distinct values (rounded
    scores, heavy ties) are counted in O(n); spread-out scores, where most buckets of both
    sides hold several values (`_mostly_many_valued`, asked when over a quarter of the buckets
    are used), are all sorted at once. Give arrays from `comparable`.

    >>> pair_counts(np.array([3.0, 1.0]), np.array([1.0, 0.0]))
    (3, 1)
    """
    if pos.size == 0 or neg.size == 0:
        return 0, 0
    nbins = min(_MAX_BINS, 1 << int(pos.size + neg.size).bit_length())
    buckets = _buckets(pos, neg, nbins)
    if buckets is None:
        return _sorted_pair_counts(pos, neg)
    pos_bin, neg_bin = buckets
    pos_at = np.bincount(pos_bin, minlength=nbins)
    neg_at = np.bincount(neg_bin, minlength=nbins)
    both = (pos_at > 0) & (neg_at > 0)
    count = pos_at + neg_at
    if 4 * np.count_nonzero(count) > nbins and _mostly_many_valued(
        pos, neg, pos_bin, neg_bin, both, count
    ):
        return _sorted_pair_counts(pos, neg)
    greater = _cross_bucket_pairs(pos_at, neg_at)
    mixed = both & _many_valued(pos, neg, pos_bin, neg_bin, nbins)  # sort these
    one_value = both & ~mixed
    equal = int(np.dot(pos_at[one_value], neg_at[one_value]))
    if mixed.any():
        more, tied = _sorted_pair_counts(
            np.compress(mixed[pos_bin], pos), np.compress(mixed[neg_bin], neg)
        )
        # sorted together, the mixed buckets also counted their pairs across buckets: drop them
        pos_at[~mixed] = 0
        neg_at[~mixed] = 0
        greater += more - _cross_bucket_pairs(pos_at, neg_at)
        equal += tied  # equal scores share a bucket
    return greater, equal


def _many_valued(
    pos: np.ndarray, neg: np.ndarray, pos_bin: np.ndarray, neg_bin: np.ndarray, nbins: int
) -> np.ndarray:
    """Which of the `nbins` buckets hold more than one distinct score (of either side).

    One score per bucket is kept (the last positive written there, 0 where none), and every
    score is compared with its bucket's; a bucket without positives may be marked wrongly,
    which `pair_counts` never asks about (it needs both sides).
    """
    first = np.zeros(nbins, pos.dtype)
    first[pos_bin] = pos
    many = np.zeros(nbins, bool)
    many[pos_bin[pos != first[pos_bin]]] = True
    many[neg_bin[neg != first[neg_bin]]] = True
    return many


def _mostly_many_valued(
    pos: np.ndarray,
    neg: np.ndarray,
    pos_bin: np.ndarray,
    neg_bin: np.ndarray,
    both: np.ndarray,
    count: np.ndarray,
) -> bool:
    """Whether most scores in buckets of both sides are in buckets of several values.

    Judged on about 1024 evenly spaced buckets (all of them when there are fewer): if so,
    sorting all scores costs about what sorting those buckets would, and the exact check of
    every bucket is skipped. A speed choice only: both ways give the exact counts.
    """
    sampled = np.zeros(both.size, bool)
    step = max(1, both.size // 1024)
    sampled[::step] = both[::step]
    in_pos, in_neg = sampled[pos_bin], sampled[neg_bin]
    many = _many_valued(
        np.compress(in_pos, pos),
        np.compress(in_neg, neg),
        np.compress(in_pos, pos_bin),
        np.compress(in_neg, neg_bin),
        both.size,
    )
    return 2 * int(count[sampled & many].sum()) > int(count[sampled].sum())


def _cross_bucket_pairs(pos_at: np.ndarray, neg_at: np.ndarray) -> int:
    """``sum_{i > j} pos_at[i] * neg_at[j]``: the pairs whose positive is in a higher bucket."""
    neg_below = np.cumsum(neg_at)
    neg_below -= neg_at
    return int(np.dot(pos_at, neg_below))


def _buckets(pos: np.ndarray, neg: np.ndarray, nbins: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Bucket numbers in [0, nbins) of the scores, never decreasing with the score; or None.

    ``floor((f(x) - f(lo)) * (nbins - 1) / (f(hi) - f(lo)))`` with f = float64 and lo, hi the
    extreme scores (all halved first when the span would overflow). Every step (rounding to
    float64, halving, subtracting, scaling by a positive number, flooring) is monotone, so
    x < y gives bucket(x) <= bucket(y), equal scores share a bucket and no order is reversed.
    ``f(x) - f(lo)`` lies in [0, span] (span is the same subtraction at hi), so the scaled value
    is below ``(nbins - 1) * (1 + 2**-52) < nbins``; integers are clipped to [0, nbins - 1] as
    well, in case numpy rounds an array element and a scalar differently. None when the
    extremes are one float64 (say integers beyond 2**53) or the scale overflows.
    """
    lo, hi = float(min(pos.min(), neg.min())), float(max(pos.max(), neg.max()))
    halve = not np.isfinite(hi - lo)
    if halve:
        lo, hi = lo * 0.5, hi * 0.5
    span = hi - lo
    scale = (nbins - 1) / span if span > 0 else np.inf
    if not np.isfinite(scale):
        return None

    def bucket(scores: np.ndarray) -> np.ndarray:
        if halve:
            t = np.multiply(scores, 0.5, dtype=np.float64)
            t -= lo
        else:
            t = np.subtract(scores, lo, dtype=np.float64)
        t *= scale
        if scores.dtype.kind != "f":
            np.clip(t, 0, nbins - 1, out=t)
        return t.astype(np.intp)

    return bucket(pos), bucket(neg)


def _sorted_pair_counts(pos: np.ndarray, neg: np.ndarray) -> tuple[int, int]:
    """`pair_counts` by sorting both sides and searchsorted, O(n log n).

    For each positive score, searchsorted gives how many negatives lie strictly below it
    (side="left"): ``greater`` is their sum. A positive equal to the negative found there is
    tied with some; for those positives only, side="right" gives how many are at or below it.
    Sorted keys make searchsorted walk the array forward, much faster than random queries.
    """
    pos_sorted = np.sort(pos)
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos_sorted, side="left")
    greater = int(below.sum(dtype=np.int64))
    # below == neg.size means every negative is smaller: the last one cannot be equal
    tied = np.flatnonzero(neg_sorted[np.minimum(below, neg.size - 1)] == pos_sorted)
    if tied.size == 0:
        return greater, 0
    if 2 * tied.size > pos.size:  # mostly tied: one more pass over all beats picking them
        at_or_below = np.searchsorted(neg_sorted, pos_sorted, side="right")
        return greater, int(at_or_below.sum(dtype=np.int64)) - greater
    at_or_below = np.searchsorted(neg_sorted, pos_sorted[tied], side="right")
    return greater, int((at_or_below - below[tied]).sum(dtype=np.int64))


def pair_fraction(greater: int, equal: int, tie: float, n_pairs: int) -> float:
    """Return ``(greater + tie * equal) / n_pairs``, rounded once to float.

    Integer counts and Fraction keep the ratio exact; float() rounds once, correctly.

    >>> pair_fraction(3, 1, 0.5, 4)
    0.875
    """
    return float((Fraction(greater) + Fraction(tie) * equal) / n_pairs)
