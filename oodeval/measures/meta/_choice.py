"""Algorithm choice: the algorithm a measure picks (argmin), the ties, the ranks, and what a
choice costs (selection degradation, Section 6.1 of the worst+gap paper).

Scores are "lower is better" and compared after rounding to `TIE_DECIMALS` decimals. Tied
algorithms are written joined by `TIE_SEPARATOR` (`tie_text`), in every output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from oodeval.errors import OodevalError, listing, repeats
from oodeval.measures._validation import as_float_array, check_same_length
from oodeval.measures.meta._units import row_groups

__all__ = [
    "TIE_DECIMALS",
    "TIE_SEPARATOR",
    "Choice",
    "algorithm_ranks",
    "algorithm_choice",
    "choice_degradation",
    "tie_rounded",
    "tie_text",
]

TIE_DECIMALS = 12
"""Scores are compared after rounding to this many decimals, so floating-point noise such as
0.3 - 0.1 != 0.4 - 0.2 neither breaks a tie in a choice nor orders tied values in a rank."""


TIE_SEPARATOR = "|"
"""What joins the names of algorithms tied at a measure's minimum, in every output (`tie_text`)."""


def tie_rounded(x: np.ndarray) -> np.ndarray:
    """`x` rounded to `TIE_DECIMALS` decimals, the values ties and ranks compare.

    >>> bool(tie_rounded(np.array(0.3 - 0.1)) == tie_rounded(np.array(0.4 - 0.2)))
    True
    """
    return np.round(x, TIE_DECIMALS)


def tie_text(tied: Sequence[str]) -> str:
    """The names of tied algorithms as one cell: joined by `TIE_SEPARATOR`.

    >>> tie_text(("IRM", "VREx")), tie_text(("ERM",))
    ('IRM|VREx', 'ERM')
    """
    return TIE_SEPARATOR.join(tied)


class Choice(NamedTuple):
    """The algorithm a measure selects (argmin) and every algorithm tied with it."""

    name: str
    index: int  # type: ignore[assignment]  # the field shadows tuple.index, by design
    tied: tuple[str, ...]
    """All algorithms whose score equals the minimum after rounding to TIE_DECIMALS, sorted by
    name (so ``len(tied) > 1`` means the choice was a tie broken by name)."""


def algorithm_choice(scores: Any, names: Sequence[str]) -> Choice:
    """The algorithm with the lowest score: argmin, Eq. 3/5/7 of the worst+gap paper.

    Ties (scores equal to the minimum after rounding to TIE_DECIMALS) go to the first name in
    sorted order, and are reported in `Choice.tied`, so the choice never depends on input
    order.

    Parameters
    ----------
    scores : array-like of shape (n_algorithms,)
    names : sequence of str of length n_algorithms (distinct)

    Returns
    -------
    Choice(name, index, tied)

    >>> algorithm_choice([0.3, 0.1, 0.1], ["ERM", "VREx", "IRM"])
    Choice(name='IRM', index=2, tied=('IRM', 'VREx'))
    """
    s = as_float_array(scores, "scores", ndim=1)
    names = [str(n) for n in names]
    check_same_length(scores=s, names=np.asarray(names, dtype=object))
    if s.size == 0:
        raise OodevalError("scores is empty; a choice needs at least one algorithm")
    if len(set(names)) != len(names):
        dup = repeats(names)
        raise OodevalError(f"algorithm names must be distinct, repeated: {listing(dup)}")
    r = tie_rounded(s)
    tied_idx = np.flatnonzero(r == r.min())
    tied = tuple(sorted(names[k] for k in tied_idx))
    return Choice(name=tied[0], index=names.index(tied[0]), tied=tied)


def choice_degradation(measure_scores: Any, ideal_scores: Any, names: Sequence[str]) -> float:
    """Performance degradation of selecting with a measure, Section 6.1 of the worst+gap paper.

    |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| where A*_x = argmin_A of measure x (ties broken as
    in `algorithm_choice`). Zero when the measure selects a truly best algorithm.

    Parameters
    ----------
    measure_scores, ideal_scores : array-like of shape (n_algorithms,)
    names : sequence of str of length n_algorithms

    Returns
    -------
    float (in the units of `ideal_scores`)

    >>> round(choice_degradation([0.2, 0.3], [0.9, 0.4], ["ERM", "IRM"]), 12)
    0.5
    """
    m = as_float_array(measure_scores, "measure_scores", ndim=1)
    i = as_float_array(ideal_scores, "ideal_scores", ndim=1)
    check_same_length(measure_scores=m, ideal_scores=i)
    by_measure = algorithm_choice(m, names)
    by_ideal = algorithm_choice(i, names)
    return float(abs(i[by_ideal.index] - i[by_measure.index]))


def algorithm_ranks(
    scores: Any, by: Sequence[Any] = (), *, decimals: int | None = TIE_DECIMALS
) -> np.ndarray:
    """Each algorithm's rank under a measure, 1 = lowest score; tied algorithms share the better
    (smaller) rank: rank_i = 1 + #{j in i's group : s_j < s_i} (pandas' ``rank(method="min")``).

    Scores are compared after rounding to `decimals` decimals (default `TIE_DECIMALS`, so
    floating-point noise does not order tied values; None compares them as they are). NaN scores
    get no rank (NaN) and are not counted. With `by` (columns of group labels, each as long as
    `scores`), algorithms are ranked within each group of equal labels.

    Parameters
    ----------
    scores : array-like of shape (n,)
    by : sequence of array-likes of shape (n,), default () (one group)
    decimals : int or None, default TIE_DECIMALS

    Returns
    -------
    numpy.ndarray of float64, shape (n,): ranks (whole numbers) or NaN

    >>> algorithm_ranks([0.3, 0.1, 0.3, np.nan]).tolist()
    [2.0, 1.0, 2.0, nan]
    >>> algorithm_ranks([0.2, 0.1, 0.5, 0.4], by=[["a", "a", "b", "b"]]).tolist()
    [2.0, 1.0, 2.0, 1.0]
    """
    values = np.asarray(scores, dtype=np.float64).ravel()
    if decimals is not None:
        values = np.round(values, decimals)
    keys = [np.asarray(b, dtype=object) for b in by]
    groups = row_groups(*keys) if keys else [np.arange(values.size)]
    ranks = np.full(values.size, np.nan)
    for rows in groups:
        mine = values[rows]
        present = np.sort(mine[~np.isnan(mine)])
        ranks[rows] = np.searchsorted(present, mine, side="left") + 1.0
    ranks[np.isnan(values)] = np.nan
    return ranks
