"""Comparators beyond the worst+gap paper: parameterised measures of LOO errors over environments.

Each family is registered in `oodeval.measures.registry` and asked for by spec:

- ``cvar:alpha=A``: CVaR_alpha, the mean of the worst ceil(alpha N) environments;
- ``quantile:q=Q`` and ``median``: numpy's linear-interpolation quantile of the errors;
- ``mean_plus_std:lambda=L``: mean + L * std, with the population std (ddof=0);
- ``weighted_worst_plus_gap:weight=W``: worst + W * (worst - best); W = 1/(N-2) is Eq. 6.

Each family's function takes the family's parameters and returns the measure function
(`MeasureFunction`) they define: like every measure, it takes errors of shape ``(..., n_envs)``
(environments on the last axis), refuses NaN and infinities, and returns one value per leading
index (a float for one row); lower is better.

>>> from oodeval.measures.registry import get_measure
>>> get_measure("cvar:alpha=0.5").function([0.1, 0.2, 0.4, 0.3])
0.35
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import ErrorFractions, reduced_errors
from oodeval.measures.registry import MeasureFunction, register_measure_family

__all__ = [
    "cvar",
    "cvar_count",
    "mean_plus_std",
    "median",
    "quantile",
    "weighted_worst_plus_gap",
]


def cvar_count(alpha: float, n_envs: int) -> int:
    """The number of worst environments CVaR_alpha averages: ceil(alpha N), computed exactly.

    `alpha` is read as the decimal it prints as (0.07 is seven hundredths, not the binary float
    next to it), so ``cvar_count(0.07, 100) == 7`` although ``0.07 * 100`` is
    7.000000000000001 in float64, whose ceiling is 8.

    >>> cvar_count(0.25, 4), cvar_count(0.07, 100), cvar_count(0.26, 4), cvar_count(1.0, 7)
    (1, 7, 2, 7)
    """
    return math.ceil(Fraction(repr(float(alpha))) * n_envs)


def _measure_of(formula: Callable[[ErrorFractions], np.ndarray]) -> MeasureFunction:
    """The measure function of `formula`, under its name: it validates the errors (accuracies
    or percentages converted, NaN and infinities refused) and gives a float for one row."""

    def measure(errors: Any, *, accuracy: bool = False, percent: bool = False) -> Any:
        return reduced_errors(errors, formula, accuracy=accuracy, percent=percent)

    measure.__name__, measure.__qualname__ = formula.__name__, formula.__qualname__
    return measure


def _check_in(family: str, key: str, value: float, low: float, high: float, low_open: bool) -> None:
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise OodevalError(
            f"measure {family}: {key} must lie in {bracket}{low:g}, {high:g}], got {value:g}; "
            f"e.g. {family}:{key}=0.25"
        )


def cvar(alpha: float) -> MeasureFunction:
    """CVaR_alpha over environments: the mean of the worst k = ceil(alpha N) LOO errors.

    CVaR_alpha = (1/k) sum_{i=N-k+1}^{N} R_(i), with R_(1) <= ... <= R_(N) the sorted errors
    and 0 < alpha <= 1 (`cvar_count` computes k exactly). alpha = 1 is the average; any alpha
    <= 1/N is the worst. Ties do not matter: the k largest values form one multiset.

    Parameters
    ----------
    alpha : float in (0, 1]

    >>> cvar(0.5)([0.1, 0.2, 0.4, 0.3])
    0.35
    >>> cvar(0.25)([[0.1, 0.2, 0.4, 0.3], [0.5, 0.5, 0.0, 0.0]])
    array([0.4, 0.5])
    """
    _check_in("cvar", "alpha", alpha, 0.0, 1.0, low_open=True)

    def cvar_alpha(e: ErrorFractions) -> np.ndarray:
        k = cvar_count(alpha, e.values.shape[-1])
        return np.sort(e.values, axis=-1)[..., -k:].mean(axis=-1)

    return _measure_of(cvar_alpha)


def quantile(q: float) -> MeasureFunction:
    """The q-quantile of the LOO errors with numpy's default linear interpolation.

    With R_(1) <= ... <= R_(N) sorted, h = (N - 1) q and j = floor(h):
    Q_q = R_(j+1) + (h - j) (R_(j+2) - R_(j+1)) (``numpy.quantile(method="linear")``, Hyndman
    and Fan's type 7). q = 1 is the worst, q = 0 the best, q = 0.5 the median.

    Parameters
    ----------
    q : float in [0, 1]

    >>> round(quantile(0.9)([0.1, 0.2, 0.4, 0.3]), 12)
    0.37
    """
    _check_in("quantile", "q", q, 0.0, 1.0, low_open=False)

    def quantile_q(e: ErrorFractions) -> np.ndarray:
        return np.quantile(e.values, q, axis=-1, method="linear")

    return _measure_of(quantile_q)


def median() -> MeasureFunction:
    """The median of the LOO errors: the middle sorted value, or the mean of the middle two.

    Equal to ``quantile:q=0.5`` (numpy's ``median``).

    >>> round(median()([0.1, 0.2, 0.4, 0.3]), 12)
    0.25
    """

    def median_of(e: ErrorFractions) -> np.ndarray:
        return np.median(e.values, axis=-1)

    return _measure_of(median_of)


def mean_plus_std(**params: float) -> MeasureFunction:
    """Mean plus lambda standard deviations of the LOO errors, with the population std (ddof=0).

    M = (1/N) sum_n R_n + lambda sqrt((1/N) sum_n (R_n - mean)^2), lambda >= 0; lambda = 0 is
    the average. Defined for any N >= 1 (the std of one environment is 0).

    Parameters
    ----------
    **params : float
        ``lambda`` >= 0, the one parameter (a Python keyword, hence passed as
        ``mean_plus_std(**{"lambda": 1.0})``; in a spec ``mean_plus_std:lambda=1``)

    >>> round(mean_plus_std(**{"lambda": 2.0})([0.1, 0.3]), 12)
    0.4
    """
    lam = params["lambda"]
    if lam < 0:
        raise OodevalError(
            f"measure mean_plus_std: lambda must be >= 0 (a larger spread must not help), got "
            f"{lam:g}; e.g. mean_plus_std:lambda=1"
        )

    def mean_plus_lambda_std(e: ErrorFractions) -> np.ndarray:
        return e.values.mean(axis=-1) + lam * e.values.std(axis=-1, ddof=0)

    return _measure_of(mean_plus_lambda_std)


def weighted_worst_plus_gap(weight: float) -> MeasureFunction:
    """The worst+gap family with a fixed gap weight: worst + W (worst - best), W >= 0.

    Eq. 6 of the worst+gap paper is the member W = 1/(N-2); W = 0 is the worst. A fixed W does
    not shrink with N, so it weighs the gap more than Eq. 6 does on many environments.

    Parameters
    ----------
    weight : float >= 0

    >>> round(weighted_worst_plus_gap(0.5)([0.1, 0.2, 0.4, 0.3]), 12)
    0.55
    """
    if weight < 0:
        raise OodevalError(
            f"measure weighted_worst_plus_gap: weight must be >= 0, got {weight:g}; e.g. "
            "weighted_worst_plus_gap:weight=0.5"
        )

    def worst_plus_weighted_gap(e: ErrorFractions) -> np.ndarray:
        return e.worst + weight * (e.worst - e.best)

    return _measure_of(worst_plus_weighted_gap)


#: (name, factory, parameters, label, description) of each family, registered in this order.
_FAMILIES: tuple[tuple[str, Callable[..., MeasureFunction], dict[str, type], str, str], ...] = (
    (
        "cvar",
        cvar,
        {"alpha": float},
        "CVaR_{alpha}",
        "mean of the worst ceil(alpha N) LOO errors (CVaR over environments)",
    ),
    (
        "quantile",
        quantile,
        {"q": float},
        "q_{q}",
        "q-quantile of the LOO errors (numpy's linear interpolation)",
    ),
    ("median", median, {}, "median", "median of the LOO errors"),
    (
        "mean_plus_std",
        mean_plus_std,
        {"lambda": float},
        "mean+{lambda}std",
        "mean + lambda * std of the LOO errors (population std, ddof=0)",
    ),
    (
        "weighted_worst_plus_gap",
        weighted_worst_plus_gap,
        {"weight": float},
        "worst+{weight}gap",
        "worst + weight * (worst - best); weight 1/(N-2) is worst+gap (Eq. 6)",
    ),
)
for _name, _factory, _params, _label, _description in _FAMILIES:
    register_measure_family(_name, params=_params, label=_label, description=_description)(_factory)
