"""Rank correlation of a measure with the ideal measure across algorithms (Section 5 of the
worst+gap paper), seed statistics, and bootstrap confidence intervals for the correlations.

Conventions: Spearman's rho is Pearson's correlation of average ranks (as
`scipy.stats.spearmanr`); Kendall's tau is tau-b (as `scipy.stats.kendalltau`, variant "b",
which corrects for ties). Both are computed here in numpy, exactly (the tests compare them with
scipy's): importing scipy.stats costs about a second, more than a whole `oodeval measures` run.
Scores are "lower is better" and rounded to `TIE_DECIMALS` decimals before ranking.
"""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.limits import (
    MAX_RESAMPLES,
    check_confidence,
    check_count,
    check_resamples,
    check_seed,
)
from oodeval.measures._validation import as_float_array, check_same_length
from oodeval.measures.meta._choice import tie_rounded

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "CONFIDENCE",
    "KENDALL_PAIRWISE_MAX",
    "MAX_RESAMPLES",
    "average_ranks",
    "bootstrap_correlation_ci",
    "mean_std",
    "paired_spearman_ci",
    "rank_correlation",
    "rowwise_kendall_b",
    "rowwise_spearman",
    "spearman_critical_value",
]

BOOTSTRAP_RESAMPLES = 2000
"""Bootstrap draws of the meta-evaluation's percentile intervals (seeded) by default."""

CONFIDENCE = 0.95
"""Confidence level of those intervals by default."""

KENDALL_PAIRWISE_MAX = 200
"""Up to this many algorithms Kendall's tau-b comes from numpy's pairwise signs (no scipy)."""


def _paired_scores(measure_scores: Any, ideal_scores: Any) -> tuple[np.ndarray, np.ndarray]:
    m = tie_rounded(as_float_array(measure_scores, "measure_scores", ndim=1))
    i = tie_rounded(as_float_array(ideal_scores, "ideal_scores", ndim=1))
    n = check_same_length(measure_scores=m, ideal_scores=i)
    if n < 2:
        raise OodevalError(f"correlations need >= 2 algorithms, got {n}; add algorithms to compare")
    return m, i


def rank_correlation(measure_scores: Any, ideal_scores: Any) -> dict[str, float]:
    """Spearman's rho and Kendall's tau-b between a measure and the ideal measure over algorithms.

    Section 5 of the worst+gap paper. rho = Pearson's r of the average ranks (ties share the
    mean of their positions); tau_b = (n_c - n_d) / sqrt((n_0 - n_x)(n_0 - n_y)) over the n_0 =
    n(n-1)/2 pairs, n_c / n_d concordant / discordant, n_x / n_y tied in one input: the values
    of scipy's `spearmanr` and `kendalltau(variant="b")`. Computed on scores rounded to
    TIE_DECIMALS decimals (so floating-point noise does not order tied values). When either
    input is constant the correlation is undefined and NaN is returned (the caller decides how
    to report it).

    Parameters
    ----------
    measure_scores : array-like of shape (n_algorithms,)
    ideal_scores : array-like of shape (n_algorithms,)
        n_algorithms >= 2, else OodevalError.

    Returns
    -------
    dict with keys "spearman" and "kendall" (floats in [-1, 1] or NaN)

    >>> rank_correlation([0.3, 0.1, 0.2], [0.9, 0.2, 0.4])
    {'spearman': 1.0, 'kendall': 1.0}
    """
    m, i = _paired_scores(measure_scores, ideal_scores)
    if np.ptp(m) == 0 or np.ptp(i) == 0:
        return {"spearman": float("nan"), "kendall": float("nan")}
    rho = rowwise_spearman(m[None, :], i[None, :])[0]
    tau = rowwise_kendall_b(m[None, :], i[None, :])[0]
    return {"spearman": float(rho), "kendall": float(tau)}


def mean_std(values: Any, *, ddof: int = 1) -> tuple[float, float]:
    """Mean and standard deviation over seeds (sample std, ddof=1 by default).

    NaN entries (e.g. undefined correlations) propagate. With fewer than ddof + 1 values the std
    is undefined and returned as NaN.

    Parameters
    ----------
    values : array-like of shape (n_seeds,)
    ddof : int, default 1

    Returns
    -------
    (mean, std) as floats

    >>> [round(v, 12) for v in mean_std([0.5, 0.7, 0.9])]
    [0.7, 0.2]
    """
    check_count(ddof, "ddof")
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise OodevalError("mean_std needs at least one value")
    mean = float(v.mean())
    std = float(v.std(ddof=ddof)) if v.size > ddof else float("nan")
    return mean, std


def average_ranks(x: np.ndarray) -> np.ndarray:
    """The rank of each entry within its row, 1-based; tied entries share the mean of their
    positions; NaN entries stay NaN and are not counted (scipy's ``rankdata(x, axis=1,
    nan_policy="omit")``).

    >>> average_ranks(np.array([[0.5, 0.1, 0.5, np.nan, 0.2]]))
    array([[3.5, 1. , 3.5, nan, 2. ]])
    """
    n = x.shape[1]
    order = np.argsort(x, axis=1, kind="stable")  # NaN sort last
    ordered = np.take_along_axis(x, order, axis=1)
    starts = np.ones(x.shape, dtype=bool)  # position j opens a run of equal values
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = np.ones(x.shape, dtype=bool)  # position j closes one
    ends[:, :-1] = starts[:, 1:]
    positions = np.arange(n)
    first = np.maximum.accumulate(np.where(starts, positions, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, positions, n)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(x.shape)
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, axis=1)
    ranks[np.isnan(x)] = np.nan
    return ranks


def spearman_critical_value(n: int, alpha: float = 0.05) -> float:
    """The smallest |rho| that an exact two-sided permutation test of Spearman's rho over `n`
    algorithms finds significant at level `alpha`; NaN when not even rho = 1 is.

    Under the null hypothesis every ordering of n untied ranks is equally likely; with
    rho = 1 - 6 * sum(d**2) / (n * (n**2 - 1)), the critical value is the smallest c with
    P(|rho| >= c) <= alpha. Exact enumeration of the n! orderings for n <= 8; beyond that the
    normal approximation c = z_(1 - alpha/2) / sqrt(n - 1) (it is used only to word warnings).

    Parameters
    ----------
    n : int, number of algorithms (>= 2)
    alpha : float in (0, 1), default 0.05

    Returns
    -------
    float in (0, 1], or NaN

    >>> [round(spearman_critical_value(n), 3) for n in (5, 6, 7, 8)]
    [1.0, 0.886, 0.786, 0.738]
    >>> spearman_critical_value(4)  # 4! = 24 orderings: P(|rho| = 1) = 2/24 > 0.05
    nan
    """
    check_count(n, "n", minimum=2, what="algorithms")
    check_confidence(alpha, "alpha")
    if n > 8:
        return NormalDist().inv_cdf(1 - alpha / 2) / math.sqrt(float(n - 1))
    from itertools import permutations

    ranks = np.array(list(permutations(range(n))), dtype=np.int64)
    d2 = ((ranks - np.arange(n)) ** 2).sum(axis=1)  # integer: exact, no float ties to break
    values, counts = np.unique(np.abs(n * (n * n - 1) - 6 * d2), return_counts=True)
    tail = np.cumsum(counts[::-1])[::-1] / len(ranks)  # P(|rho| >= value), values ascending
    ok = np.flatnonzero(tail <= alpha)
    return float(values[ok[0]] / (n * (n * n - 1))) if ok.size else float("nan")


def rowwise_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair (average ranks for ties); NaN for constant rows.

    NaN entries (missing values, NaN in x and y alike) are left out of their row, so a row's rho
    is that of its present pairs; a row with fewer than two distinct present values is NaN.
    """
    rx = average_ranks(x)
    ry = average_ranks(y)
    with warnings.catch_warnings():  # an all-NaN row has no mean; it is NaN below
        warnings.simplefilter("ignore", RuntimeWarning)
        rx -= np.nanmean(rx, axis=1, keepdims=True)
        ry -= np.nanmean(ry, axis=1, keepdims=True)
    num = np.nansum(rx * ry, axis=1)
    den = np.sqrt(np.nansum(rx * rx, axis=1) * np.nansum(ry * ry, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def rowwise_kendall_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row pair by pairwise signs; NaN for constant rows.

    tau_b = (n_c - n_d) / sqrt((n_0 - n_x)(n_0 - n_y)), n_0 = n(n-1)/2 pairs, n_x / n_y the pairs
    tied in x / y; (n_c - n_d) is half the sum of sign(dx)*sign(dy) over ordered pairs.
    Beyond KENDALL_PAIRWISE_MAX columns the pairwise signs get large (n^2 per row): scipy's
    O(n log n) `kendalltau` per row instead, imported only then.
    """
    n = x.shape[1]
    if n > KENDALL_PAIRWISE_MAX:
        from scipy import stats

        with warnings.catch_warnings():  # constant rows: NaN, as below
            warnings.simplefilter("ignore")
            return np.array(
                [stats.kendalltau(a, b, variant="b").statistic for a, b in zip(x, y, strict=True)],
                dtype=np.float64,
            )
    out = np.empty(x.shape[0])
    chunk = max(1, 4_000_000 // (n * n))
    n0 = n * (n - 1) / 2
    for start in range(0, x.shape[0], chunk):
        xs, ys = x[start : start + chunk], y[start : start + chunk]
        sx = np.sign(xs[:, :, None] - xs[:, None, :])
        sy = np.sign(ys[:, :, None] - ys[:, None, :])
        s = (sx * sy).sum(axis=(1, 2)) / 2
        tx = ((sx == 0).sum(axis=(1, 2)) - n) / 2
        ty = ((sy == 0).sum(axis=(1, 2)) - n) / 2
        den = np.sqrt((n0 - tx) * (n0 - ty))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + chunk] = np.where(den > 0, s / np.where(den > 0, den, 1.0), np.nan)
    return out


def _percentile_interval(
    draws: np.ndarray, valid: np.ndarray, confidence: float
) -> tuple[float, float]:
    """The percentile bootstrap interval: the (1 - c)/2 and (1 + c)/2 quantiles of the valid
    draws, or (nan, nan) when no draw is valid."""
    if not valid.any():
        return (float("nan"), float("nan"))
    lo, hi = np.quantile(draws[valid], [(1 - confidence) / 2, (1 + confidence) / 2])
    return (float(lo), float(hi))


def bootstrap_correlation_ci(
    measure_scores: Any,
    ideal_scores: Any,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> dict[str, Any]:
    """Percentile bootstrap confidence intervals for Spearman's rho and Kendall's tau-b.

    Beyond the worst+gap paper: algorithms are resampled with replacement (pairs of measure and
    ideal score stay together), each resample's rho and tau-b are computed exactly as in
    `rank_correlation`, and the interval is the (1-confidence)/2 and (1+confidence)/2 quantiles.
    Degenerate resamples, in which the measure or the ideal scores are all equal (e.g. one
    algorithm drawn n times), have no defined correlation: they are dropped, and `n_valid` says
    how many resamples remained (the interval is conditional on a non-degenerate resample). If
    none remain the bounds are NaN. Same `seed` -> identical interval.

    Parameters
    ----------
    measure_scores, ideal_scores : array-like of shape (n_algorithms,), n_algorithms >= 2
    n_resamples : int, default 2000
    confidence : float in (0, 1), default 0.95
    seed : int, default 0

    Returns
    -------
    dict with "spearman": (low, high), "kendall": (low, high), "n_valid": int,
    "n_resamples": int, "confidence": float

    >>> ci = bootstrap_correlation_ci([0.1, 0.2, 0.3, 0.4], [0.2, 0.3, 0.4, 0.5], seed=1)
    >>> ci["spearman"], ci["kendall"]
    ((1.0, 1.0), (1.0, 1.0))
    """
    m, i = _paired_scores(measure_scores, ideal_scores)
    _check_bootstrap_options(n_resamples, confidence, seed)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, m.size, size=(int(n_resamples), m.size))
    x, y = m[idx], i[idx]
    rho = rowwise_spearman(x, y)
    tau = rowwise_kendall_b(x, y)
    valid = np.isfinite(rho) & np.isfinite(tau)
    return {
        "spearman": _percentile_interval(rho, valid, confidence),
        "kendall": _percentile_interval(tau, valid, confidence),
        "n_valid": int(valid.sum()),
        "n_resamples": int(n_resamples),
        "confidence": float(confidence),
    }


def _check_bootstrap_options(n_resamples: Any, confidence: float, seed: Any) -> None:
    """The bounds of `oodeval.limits` (the CLI's): 1 to `MAX_RESAMPLES` resamples, a level in
    (0, 1), a seed in [0, 2**32)."""
    check_resamples(n_resamples, "n_resamples", minimum=1)
    check_confidence(confidence)
    check_seed(seed, "seed")


def _seed_matrices(
    first_scores: Any, second_scores: Any, ideal_scores: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three score arrays as tie-rounded (n_seeds, n_algorithms) matrices, NaN = missing."""
    named = {"first_scores": first_scores, "second_scores": second_scores}
    named["ideal_scores"] = ideal_scores
    out = {}
    for name, values in named.items():
        arr = as_float_array(values, name, ndim=(1, 2), check_finite=False)
        if np.isinf(arr).any():
            raise OodevalError(f"{name} holds an infinite value; scores must be finite or NaN")
        out[name] = tie_rounded(arr.reshape(1, -1) if arr.ndim == 1 else arr)
    shapes = {a.shape for a in out.values()}
    if len(shapes) > 1:
        raise OodevalError(f"the three score arrays differ in shape: {sorted(shapes)}")
    f, s, i = out.values()
    missing = np.isnan(i)
    if (np.isnan(f) != missing).any() or (np.isnan(s) != missing).any():
        raise OodevalError(
            "NaN marks a missing (seed, algorithm) and must be at the same places in all three "
            "score arrays"
        )
    present = (~missing).sum(axis=1)
    if present.size == 0 or present.min() < 2:
        raise OodevalError(
            f"correlations need >= 2 algorithms in every seed, got {present.tolist()}; leave out "
            "seeds with fewer"
        )
    return f, s, i


def paired_spearman_ci(
    first_scores: Any,
    second_scores: Any,
    ideal_scores: Any,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> dict[str, Any]:
    """Spearman's rho of two measures with the ideal measure, their difference, and paired
    percentile bootstrap intervals over algorithms.

    Beyond the worst+gap paper, which reports rho without an interval (Table 1). Inputs are one
    seed's scores, shape (n_algorithms,), or several seeds', shape (n_seeds, n_algorithms), with
    NaN marking an algorithm that has no unit for that seed (at the same places in all three).

    - Point estimates: per seed, rho of each measure with the ideal measure over that seed's
      algorithms (`rank_correlation`), then the mean over seeds; ``difference`` = rho_first -
      rho_second. These equal Table 1's seed means (`oodeval.measures.meta.correlation_summary`).
    - Bootstrap: algorithms are the resampled unit. Each resample draws n_algorithms columns with
      replacement; the same draw serves every seed (seeds are repeated runs of the same
      algorithms) and both measures, so the difference is paired. Per seed, rho over the drawn
      algorithms it has; mean over seeds; the interval is the (1-confidence)/2 and
      (1+confidence)/2 quantiles. A resample in which some seed's rho is undefined (its drawn
      scores constant, or fewer than two of its algorithms drawn) is dropped; ``n_valid`` says
      how many remained (NaN bounds when none). Same `seed` -> identical intervals.

    Parameters
    ----------
    first_scores, second_scores, ideal_scores : array-like of shape (n_algorithms,) or
        (n_seeds, n_algorithms); every seed needs >= 2 algorithms, else OodevalError
    n_resamples : int, default 2000
    confidence : float in (0, 1), default 0.95
    seed : int, default 0

    Returns
    -------
    dict with "first", "second", "difference" (point estimates) and "first_ci", "second_ci",
    "difference_ci" ((low, high) tuples), "n_valid", "n_resamples", "confidence"

    >>> out = paired_spearman_ci([1, 2, 3, 4], [4, 3, 1, 2], [1, 2, 3, 4], seed=1)
    >>> [round(out[k], 12) for k in ("first", "second", "difference")], out["first_ci"]
    ([1.0, -0.8, 1.8], (1.0, 1.0))
    """
    _check_bootstrap_options(n_resamples, confidence, seed)
    f, s, i = _seed_matrices(first_scores, second_scores, ideal_scores)
    n_seeds, n = i.shape
    point = np.empty((2, n_seeds))
    for k in range(n_seeds):
        present = ~np.isnan(i[k])
        point[0, k] = rank_correlation(f[k, present], i[k, present])["spearman"]
        point[1, k] = rank_correlation(s[k, present], i[k, present])["spearman"]
    rho_first, rho_second = (float(v) for v in point.mean(axis=1))
    idx = np.random.default_rng(seed).integers(0, n, size=(int(n_resamples), n))
    draws = np.empty((2, n_seeds, int(n_resamples)))
    for k in range(n_seeds):
        ideal = i[k][idx]
        draws[0, k] = rowwise_spearman(f[k][idx], ideal)
        draws[1, k] = rowwise_spearman(s[k][idx], ideal)
    first, second = draws.mean(axis=1)  # NaN when any seed's rho is undefined
    valid = np.isfinite(first) & np.isfinite(second)

    return {
        "first": rho_first,
        "second": rho_second,
        "difference": rho_first - rho_second,
        "first_ci": _percentile_interval(first, valid, confidence),
        "second_ci": _percentile_interval(second, valid, confidence),
        "difference_ci": _percentile_interval(first - second, valid, confidence),
        "n_valid": int(valid.sum()),
        "n_resamples": int(n_resamples),
        "confidence": float(confidence),
    }
