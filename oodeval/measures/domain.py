"""Domain-generalization measures over per-environment test errors (worst+gap paper, NICO++ Eq. 5).

Every measure takes `errors` of shape ``(..., n_envs)``: environments on the LAST axis, any
leading axes (algorithms, seeds, ...) are kept, so one call scores 10,000 algorithms at once.
For the LOO measures the entries are the leave-one-environment-out test errors
``R_{e_n}(f_A^{E_given \\ e_n})``, n = 1..N (Section 2.2 of the worst+gap paper). Lower is better
for every measure in `MEASURES`. Accuracies or percentages are accepted with ``accuracy=True`` /
``percent=True`` and converted to error fractions first.

>>> worst_plus_gap([0.1, 0.2, 0.4, 0.3])
0.55
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError, listing, repeats
from oodeval.measures._validation import (
    ErrorFractions,
    as_float_array,
    error_fractions,
    reduced_errors,
    scalar_or_array,
    to_errors,
)
from oodeval.measures.registry import (
    MEASURES,
    REGISTRY,
    MeasureSpec,
    check_measures,
    get_measure,
    measure_label,
    measure_values,
    register_measure,
    undefined_measures,
    unregister_measure,
)

__all__ = [
    "MEASURES",
    "REGISTRY",
    "MeasureSpec",
    "get_measure",
    "average",
    "best",
    "check_measures",
    "domain_average",
    "domain_measures",
    "domain_overall",
    "domain_std",
    "STD_DDOFS",
    "check_std_ddof",
    "gap",
    "gap_only",
    "ideal",
    "measure_label",
    "per_domain_summary",
    "register_measure",
    "scaled_worst",
    "undefined_measures",
    "unregister_measure",
    "worst",
    "worst_only",
    "worst_plus_gap",
]


def _gap_term(e: ErrorFractions) -> np.ndarray:
    """Return the gap term of Eq. 6 of the worst+gap paper, (worst - best) / (N - 2).

    Raises OodevalError for N <= 2 environments, where the 1/(N-2) factor is undefined.
    """
    n = e.values.shape[-1]
    if n <= 2:
        raise OodevalError(
            f"worst+gap (Eq. 6) is undefined for N={n} given environments because of the "
            "1/(N-2) factor; it needs >= 3 environments"
        )
    return (e.worst - e.best) / (n - 2)


def average(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Average LOO error, Eq. 2 of the worst+gap paper: R^AVG = (1/N) sum_n R_{e_n}.

    The measures below take and return what this one does.

    Parameters
    ----------
    errors : array-like of shape (..., n_envs)
        LOO test errors, environments on the last axis.
    accuracy, percent : bool
        The values are accuracies (error = 1 - accuracy) / percentages in [0, 100].

    Returns
    -------
    float or ndarray of shape errors.shape[:-1]

    >>> average([0.1, 0.2, 0.4, 0.3])
    0.25
    """
    return reduced_errors(
        errors, lambda e: e.values.mean(axis=-1), accuracy=accuracy, percent=percent
    )


def worst(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Worst (largest) LOO error, max_n R_{e_n}: the first term of Eq. 6 of the worst+gap paper.

    `errors`, `accuracy`, `percent` and the result are those of `average`.

    >>> worst([0.1, 0.2, 0.4, 0.3])
    0.4
    """
    return reduced_errors(errors, lambda e: e.worst, accuracy=accuracy, percent=percent)


def best(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Best (smallest) LOO error, min_n R_{e_n} (Section 3.1 of the worst+gap paper).

    `errors`, `accuracy`, `percent` and the result are those of `average`.

    >>> best([0.1, 0.2, 0.4, 0.3])
    0.1
    """
    return reduced_errors(errors, lambda e: e.best, accuracy=accuracy, percent=percent)


def gap(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Gap between worst and best LOO error, max_n R_{e_n} - min_n R_{e_n} (Eq. 6's gap).

    `errors`, `accuracy`, `percent` and the result are those of `average`.

    >>> round(gap([0.1, 0.2, 0.4, 0.3]), 12)
    0.3
    """
    return reduced_errors(errors, lambda e: e.worst - e.best, accuracy=accuracy, percent=percent)


def worst_plus_gap(
    errors: Any, *, accuracy: bool = False, percent: bool = False
) -> float | np.ndarray:
    """Worst+gap measure, Eq. 6 of the worst+gap paper: worst + (worst - best) / (N - 2).

    Undefined for N <= 2 environments (the 1/(N-2) factor): raises OodevalError instead of
    dividing by zero or guessing. Otherwise `errors` (n_envs >= 3), `accuracy`, `percent` and
    the result are those of `average`.

    >>> worst_plus_gap([0.1, 0.2, 0.4, 0.3])
    0.55
    """
    return reduced_errors(
        errors, lambda e: e.worst + _gap_term(e), accuracy=accuracy, percent=percent
    )


def worst_only(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """The "worst only" ablation of Table 5 of the worst+gap paper: the worst term of Eq. 6.

    Equal to `worst`; exposed under the paper's ablation name so that
    ``worst_only + gap_only == worst_plus_gap``.

    >>> worst_only([0.1, 0.2, 0.4, 0.3])
    0.4
    """
    return worst(errors, accuracy=accuracy, percent=percent)


def gap_only(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """The "gap only" ablation of Table 5 of the worst+gap paper: the gap term of Eq. 6.

    gap_only = (worst - best) / (N - 2). For a fixed N it ranks algorithms exactly as `gap`
    does; it is scaled so that ``worst_only + gap_only == worst_plus_gap``. Needs N >= 3
    (n_envs of `errors`); the arguments and the result are otherwise those of `average`.

    >>> round(gap_only([0.1, 0.2, 0.4, 0.3]), 12)
    0.15
    """
    return reduced_errors(errors, _gap_term, accuracy=accuracy, percent=percent)


def scaled_worst(
    errors: Any, *, accuracy: bool = False, percent: bool = False
) -> float | np.ndarray:
    """Theorem 3.3's estimate of the ideal measure, Eq. 16 of the worst+gap paper: (N+1)/N * worst.

    N is the number of given environments (one LOO error each, the last axis), so
    ``scaled_worst = (N + 1) / N * max_n R_{e_n}``. If the errors of the environments are i.i.d.
    uniform on [a, b], Lemma 3.2 gives E[max of N] = (a + bN) / (N + 1), and with probability
    at least 1 - delta^2 the largest error over E_all (b) is this estimate up to
    O((b - a) / (N delta)). Within one scenario (one N) it orders algorithms exactly as `worst`
    does; it differs in value, as an estimate of the ideal measure, not of the worst LOO error.
    `errors`, `accuracy`, `percent` and the result are those of `average`.

    >>> scaled_worst([0.1, 0.2, 0.4, 0.3])
    0.5
    """

    def term(e: ErrorFractions) -> np.ndarray:
        n = e.values.shape[-1]
        return e.worst * ((n + 1) / n)

    return reduced_errors(errors, term, accuracy=accuracy, percent=percent)


def ideal(all_errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Ideal measure, Eq. 4 of the worst+gap paper: R^IDEAL_A = max_{e in E_all} R_e(f_A^{E_given}).

    Parameters
    ----------
    all_errors : array-like of shape (..., n_all_envs)
        Test errors of the model trained on ALL given environments, on every environment of E_all.
    accuracy, percent : bool
        As for `average`.

    Returns
    -------
    float or ndarray of shape all_errors.shape[:-1]

    >>> ideal([0.25, 0.31, 0.9])
    0.9
    """
    return reduced_errors(
        all_errors, lambda e: e.worst, accuracy=accuracy, percent=percent, name="all_errors"
    )


_BUILT_INS = (
    ("average", average, "average", "mean LOO error over the N given environments (Eq. 2)", 1),
    ("worst", worst, "worst", "largest LOO error over the given environments", 1),
    ("best", best, "best", "smallest LOO error over the given environments", 1),
    ("gap", gap, "gap", "worst minus best LOO error", 1),
    ("worst_plus_gap", worst_plus_gap, "worst+gap", "worst + (worst - best) / (N - 2) (Eq. 6)", 3),
    ("worst_only", worst_only, "worst only", "the worst term of Eq. 6 (Table 5 ablation)", 1),
    ("gap_only", gap_only, "gap only", "the gap term of Eq. 6, (worst - best) / (N - 2)", 3),
    ("scaled_worst", scaled_worst, "scaled worst", "(N + 1) / N * worst (Theorem 3.3, Eq. 16)", 1),
)
for _name, _function, _label, _description, _min_envs in _BUILT_INS:
    register_measure(_name, label=_label, description=_description, min_envs=_min_envs)(_function)
#: The built-in measures, which take the `ErrorFractions` `domain_measures` validated once.
_READS_FRACTIONS = frozenset(function for _, function, *_ in _BUILT_INS)
register_measure(
    "ideal",
    label="ideal",
    description="largest error on E_all of the model trained on all given environments (Eq. 4)",
    split="all",
)(ideal)


def domain_measures(
    errors: Any,
    names: Sequence[str] | None = None,
    *,
    accuracy: bool = False,
    percent: bool = False,
) -> dict[str, float | np.ndarray]:
    """Every requested measure at once, each computed by its registered function.

    `errors` is validated, and its worst and best found, once for all the built-in measures.

    Parameters
    ----------
    errors : array-like of shape (..., n_envs)
    names : sequence of str, optional
        Names or specs (``cvar:alpha=0.25``) of LOO measures of the registry (default: every
        measure of `MEASURES`, in its order). The keys of the result are the canonical specs.
    accuracy, percent : bool

    Returns
    -------
    dict mapping each name to a float or an ndarray of shape errors.shape[:-1]

    Examples
    --------
    >>> {k: round(v, 12) for k, v in domain_measures([0.1, 0.2, 0.4, 0.3]).items()}
    ... # doctest: +NORMALIZE_WHITESPACE
    {'average': 0.25, 'worst': 0.4, 'best': 0.1, 'gap': 0.3, 'worst_plus_gap': 0.55,
     'worst_only': 0.4, 'gap_only': 0.15, 'scaled_worst': 0.5}
    >>> domain_measures([0.1, 0.2, 0.4, 0.3], ["cvar:alpha=0.5"])
    {'cvar:alpha=0.5': 0.35}
    """
    names = check_measures(names)
    e = error_fractions(errors, accuracy=accuracy, percent=percent)
    values: dict[str, float | np.ndarray] = {}
    for k in names:
        function = get_measure(k).function
        if function in _READS_FRACTIONS:  # a built-in: reuses e's validation and worst/best
            values[k] = function(e)
        else:  # any other registered measure or family member, checked by the registry
            values[k] = measure_values(k, e.values)
    return {k: scalar_or_array(v) for k, v in values.items()}


# --- NICO++ Eq. 5: Average, Overall, Std over test domains (accuracies) -------------------------


def _as_accuracies(accuracies: Any, *, percent: bool) -> np.ndarray:
    arr = as_float_array(accuracies, "accuracies")
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise OodevalError(
            f"accuracies must have test domains on the last axis, got shape {arr.shape}"
        )
    # to_errors(accuracy=False) only validates the range and rescales percentages.
    return to_errors(arr, accuracy=False, percent=percent, name="accuracies")


def domain_average(accuracies: Any, *, percent: bool = False) -> float | np.ndarray:
    """NICO++ "Average" (Eq. 5 of the NICO++ paper): (1/K) sum_k acc_k over the K test domains.

    Parameters
    ----------
    accuracies : array-like of shape (..., n_domains)
        Per-domain accuracies in [0, 1] (or [0, 100] with ``percent=True``).

    Returns
    -------
    float or ndarray of shape accuracies.shape[:-1], as a fraction

    >>> round(domain_average([0.9, 0.8, 0.7]), 12)
    0.8
    """
    acc = _as_accuracies(accuracies, percent=percent)
    return scalar_or_array(acc.mean(axis=-1))


def domain_overall(accuracies: Any, counts: Any, *, percent: bool = False) -> float | np.ndarray:
    """NICO++ "Overall" (Eq. 5): sample-weighted accuracy sum_k N_k acc_k / sum_k N_k.

    Parameters
    ----------
    accuracies : array-like of shape (..., n_domains)
    counts : array-like of shape (n_domains,) or broadcastable to `accuracies`
        Number of test samples N_k per domain; non-negative, with a positive total.

    Returns
    -------
    float or ndarray of shape accuracies.shape[:-1]

    >>> domain_overall([0.9, 0.5], [300, 100])
    0.8
    """
    acc = _as_accuracies(accuracies, percent=percent)
    n = as_float_array(counts, "counts")
    if n.ndim == 0:
        raise OodevalError("counts must hold one sample count per domain, got a scalar")
    if np.any(n < 0) or np.any(n != np.round(n)):
        raise OodevalError("counts must be non-negative whole numbers of test samples")
    try:
        acc_b, n_b = np.broadcast_arrays(acc, n)
    except ValueError:
        raise OodevalError(
            f"counts of shape {n.shape} do not match accuracies of shape {acc.shape}; "
            "give one count per domain"
        ) from None
    total = n_b.sum(axis=-1)
    if np.any(total <= 0):
        raise OodevalError("counts sum to zero; Overall needs at least one test sample")
    return scalar_or_array((acc_b * n_b).sum(axis=-1) / total)


#: The two standard deviations NICO++ reports as "Std": ddof -> what it is and where it is used.
STD_DDOFS: dict[int, str] = {
    0: "population std, divides by K (NICO++'s tables)",
    1: "sample std, divides by K-1 (NICO++ Eq. 5)",
}


def check_std_ddof(ddof: Any) -> int:
    """Return `ddof` as an int after checking it is 0 or 1 (`STD_DDOFS`).

    >>> check_std_ddof(0)
    0
    """
    whole = isinstance(ddof, (int, np.integer)) and not isinstance(ddof, bool)
    if not whole or int(ddof) not in STD_DDOFS:
        accepted = "; ".join(f"{k} ({v})" for k, v in STD_DDOFS.items())
        raise OodevalError(f"ddof must be 0 or 1, got {ddof!r}; use {accepted}")
    return int(ddof)


def domain_std(accuracies: Any, *, ddof: int = 1, percent: bool = False) -> float | np.ndarray:
    """NICO++ "Std": standard deviation of the per-domain accuracies, sample (ddof=1) or population.

    sqrt( (1/(K-ddof)) sum_k (acc_k - Average)^2 ); needs K >= 2 domains. NICO++'s Eq. 5 divides
    by K-1 (``ddof=1``, the default), but the paper's own tables (Tables 2, 5, 7 and 9) are the
    population standard deviation (``ddof=0``): recomputed from the printed per-domain accuracies,
    every Std of Table 2 is matched with ``ddof=0`` and none with ``ddof=1`` (Deepall, first
    setting: 3.04 with ddof=0, 3.51 with ddof=1; printed 3.05). Use ``ddof=0`` to compare with
    the paper's numbers.

    Parameters
    ----------
    accuracies : array-like of shape (..., n_domains), n_domains >= 2
    ddof : {1, 0}
        1: sample std (Eq. 5); 0: population std (the paper's tables). Anything else is an error.
    percent : bool
        The accuracies are percentages in [0, 100] (the result is a fraction, as for the others).

    Returns
    -------
    float or ndarray of shape accuracies.shape[:-1]

    >>> round(domain_std([0.9, 0.8, 0.7]), 12)
    0.1
    >>> round(domain_std([0.9, 0.8, 0.7], ddof=0), 6)
    0.08165
    """
    ddof = check_std_ddof(ddof)
    acc = _as_accuracies(accuracies, percent=percent)
    if acc.shape[-1] < 2:
        raise OodevalError(
            f"Std (NICO++ Eq. 5, ddof={ddof}) needs >= 2 test domains, got 1; report Average only"
        )
    return scalar_or_array(acc.std(axis=-1, ddof=ddof))


def per_domain_summary(
    accuracies: Mapping[str, float], counts: Mapping[str, int]
) -> dict[str, float | int]:
    """Per-domain results in WILDS' flat key style.

    Keys: ``acc_<env>`` and ``count_<env>`` for every domain (in the order of `accuracies`), then
    ``acc_avg`` (NICO++ Average), ``acc_overall`` (NICO++ Overall, sample-weighted),
    ``acc_wg`` (worst domain: lowest accuracy) and ``acc_gap`` (best minus worst accuracy).

    Parameters
    ----------
    accuracies : mapping domain name -> accuracy in [0, 1]
    counts : mapping domain name -> number of test samples (same domain names)

    Returns
    -------
    dict

    >>> s = per_domain_summary({"a": 0.9, "b": 0.5}, {"a": 300, "b": 100})
    >>> s["acc_a"], s["count_b"], s["acc_overall"], s["acc_wg"], round(s["acc_gap"], 12)
    (0.9, 100, 0.8, 0.5, 0.4)
    """
    if not accuracies:
        raise OodevalError("accuracies is empty; give at least one domain's accuracy")
    names = [str(k) for k in accuracies]
    if len(set(names)) != len(names):
        raise OodevalError(
            f"domain names must be distinct as text (they become acc_<name> keys), repeated: "
            f"{listing(repeats(names))}"
        )
    if set(map(str, counts)) != set(names):
        missing = sorted(set(names) - set(map(str, counts)))
        extra = sorted(set(map(str, counts)) - set(names))
        raise OodevalError(
            "accuracies and counts must name the same domains"
            + (f"; counts lacks {listing(missing)}" if missing else "")
            + (f"; counts has extra {listing(extra)}" if extra else "")
        )
    counts_by_name = {str(k): v for k, v in counts.items()}
    acc = _as_accuracies([accuracies[k] for k in accuracies], percent=False)
    cnt = np.asarray([counts_by_name[k] for k in names])
    if not np.issubdtype(cnt.dtype, np.integer) or np.any(cnt < 0):
        raise OodevalError("counts must be non-negative integers (test samples per domain)")
    summary: dict[str, float | int] = {}
    for k, a, c in zip(names, acc, cnt, strict=True):
        summary[f"acc_{k}"] = float(a)
        summary[f"count_{k}"] = int(c)
    summary["acc_avg"] = float(acc.mean())
    summary["acc_overall"] = float(domain_overall(acc, cnt))
    summary["acc_wg"] = float(acc.min())
    summary["acc_gap"] = float(acc.max() - acc.min())
    return summary
