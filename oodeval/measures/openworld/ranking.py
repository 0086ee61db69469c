"""Exact ranking of detector scores: comparison keys, pair counts and pair fractions.

The ranking metrics of the OpenworldAUC suite (`oodeval.measures.openworld.metrics`) count
(base, new) pairs by sorting, never by a double loop. Scores may lie in any real range and are
compared exactly as given, so no tie is created or broken: floats as float64 (float16/float32
convert exactly), integers as integers (int64, uint64: float64 would merge neighbours beyond
2**53), and integers against floats by exact keys (`comparable`). `pair_counts` counts the pairs
in O(n log n) and `pair_fraction` turns the counts into a rate with a tie credit (`checked_tie`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from oodeval.errors import OodevalError

__all__ = ["checked_tie", "comparable", "pair_counts", "pair_fraction"]

_INT64_MAX = np.iinfo(np.int64).max


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
    """Return (#pairs with pos > neg, #pairs with pos == neg) in O(n log n) time, O(n) memory.

    ``greater = sum_{p, n} 1[p > n]`` and ``equal = sum_{p, n} 1[p == n]``. Both sides are
    sorted; for each positive score, searchsorted gives how many negatives lie strictly below it
    (side="left") and at or below it (side="right"). Sorted keys make searchsorted walk the array
    forward, which is much faster than random queries. Give arrays from `comparable`.

    >>> pair_counts(np.array([3.0, 1.0]), np.array([1.0, 0.0]))
    (3, 1)
    """
    if pos.size == 0 or neg.size == 0:
        return 0, 0
    pos_sorted = np.sort(pos)
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos_sorted, side="left")
    at_or_below = np.searchsorted(neg_sorted, pos_sorted, side="right")
    greater = int(below.sum(dtype=np.int64))
    equal = int(at_or_below.sum(dtype=np.int64)) - greater
    return greater, equal


def pair_fraction(greater: int, equal: int, tie: float, n_pairs: int) -> float:
    """Return ``(greater + tie * equal) / n_pairs``, rounded once to float.

    Integer counts and Fraction keep the ratio exact; float() rounds once, correctly.

    >>> pair_fraction(3, 1, 0.5, 4)
    0.875
    """
    return float((Fraction(greater) + Fraction(tie) * equal) / n_pairs)
