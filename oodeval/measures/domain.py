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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from oodeval.errors import OodevalError, listing, repeats
from oodeval.measures._validation import as_float_array, to_errors

__all__ = [
    "MEASURES",
    "REGISTRY",
    "MeasureSpec",
    "average",
    "best",
    "check_measures",
    "domain_average",
    "domain_measures",
    "domain_overall",
    "domain_std",
    "gap",
    "gap_only",
    "ideal",
    "measure_label",
    "per_domain_summary",
    "register_measure",
    "undefined_measures",
    "unregister_measure",
    "worst",
    "worst_only",
    "worst_plus_gap",
]


class _Errors(NamedTuple):
    """Validated error fractions with their per-row extremes (computed once, reused)."""

    values: np.ndarray  # (..., n_envs)
    worst: np.ndarray  # (...,) max over environments
    best: np.ndarray  # (...,) min over environments


def _as_errors(errors: Any, *, accuracy: bool, percent: bool, name: str = "errors") -> _Errors:
    """Validate `errors` (..., n_envs) and return error fractions with row max and min.

    Validation rides on the max/min reductions every measure needs: NaN propagates through them
    and +-inf shows up in them, so the input is scanned twice instead of five times.
    """
    arr = as_float_array(errors, name, check_finite=False)
    if arr.ndim == 0:
        raise OodevalError(
            f"{name} must have environments on the last axis, got a scalar; pass a list of "
            "per-environment values"
        )
    if arr.shape[-1] == 0:
        raise OodevalError(f"{name} has no environments (last axis is empty, shape {arr.shape})")
    hi = arr.max(axis=-1)
    lo = arr.min(axis=-1)
    if not (np.isfinite(hi).all() and np.isfinite(lo).all()):
        as_float_array(arr, name)  # raises the shared NaN/inf message with the count
    # range checks and their messages on the two extreme values only (none with 0 algorithms)
    if hi.size:
        to_errors(np.array([lo.min(), hi.max()]), accuracy=accuracy, percent=percent, name=name)
    if percent:
        arr, hi, lo = arr / 100.0, hi / 100.0, lo / 100.0
    if accuracy:
        arr, hi, lo = 1.0 - arr, 1.0 - lo, 1.0 - hi
    return _Errors(arr, hi, lo)


def _scalar_or_array(x: np.ndarray) -> float | np.ndarray:
    """Return a Python float for 0-d results, the array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


def _gap_term(e: _Errors) -> np.ndarray:
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
    e = _as_errors(errors, accuracy=accuracy, percent=percent)
    return _scalar_or_array(e.values.mean(axis=-1))


def worst(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Worst (largest) LOO error, max_n R_{e_n}: the first term of Eq. 6 of the worst+gap paper.

    Parameters
    ----------
    errors : array-like of shape (..., n_envs)
    accuracy, percent : bool

    Returns
    -------
    float or ndarray of shape errors.shape[:-1]

    >>> worst([0.1, 0.2, 0.4, 0.3])
    0.4
    """
    e = _as_errors(errors, accuracy=accuracy, percent=percent)
    return _scalar_or_array(e.worst)


def best(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Best (smallest) LOO error, min_n R_{e_n} (Section 3.1 of the worst+gap paper).

    Parameters
    ----------
    errors : array-like of shape (..., n_envs)
    accuracy, percent : bool

    Returns
    -------
    float or ndarray of shape errors.shape[:-1]

    >>> best([0.1, 0.2, 0.4, 0.3])
    0.1
    """
    e = _as_errors(errors, accuracy=accuracy, percent=percent)
    return _scalar_or_array(e.best)


def gap(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Gap between worst and best LOO error, max_n R_{e_n} - min_n R_{e_n} (Eq. 6's gap).

    Parameters
    ----------
    errors : array-like of shape (..., n_envs)
    accuracy, percent : bool

    Returns
    -------
    float or ndarray of shape errors.shape[:-1]

    >>> round(gap([0.1, 0.2, 0.4, 0.3]), 12)
    0.3
    """
    e = _as_errors(errors, accuracy=accuracy, percent=percent)
    return _scalar_or_array(e.worst - e.best)


def worst_plus_gap(
    errors: Any, *, accuracy: bool = False, percent: bool = False
) -> float | np.ndarray:
    """Worst+gap measure, Eq. 6 of the worst+gap paper: worst + (worst - best) / (N - 2).

    Undefined for N <= 2 environments (the 1/(N-2) factor): raises OodevalError instead of
    dividing by zero or guessing.

    Parameters
    ----------
    errors : array-like of shape (..., n_envs), n_envs >= 3
    accuracy, percent : bool

    Returns
    -------
    float or ndarray of shape errors.shape[:-1]

    >>> worst_plus_gap([0.1, 0.2, 0.4, 0.3])
    0.55
    """
    e = _as_errors(errors, accuracy=accuracy, percent=percent)
    return _scalar_or_array(e.worst + _gap_term(e))


def worst_only(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """The "worst only" ablation of Table 5 of the worst+gap paper: the worst term of Eq. 6.

    Equal to `worst`; exposed under the paper's ablation name so that
    ``worst_only + gap_only == worst_plus_gap``.

    Parameters
    ----------
    errors : array-like of shape (..., n_envs)
    accuracy, percent : bool

    Returns
    -------
    float or ndarray of shape errors.shape[:-1]

    >>> worst_only([0.1, 0.2, 0.4, 0.3])
    0.4
    """
    return worst(errors, accuracy=accuracy, percent=percent)


def gap_only(errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """The "gap only" ablation of Table 5 of the worst+gap paper: the gap term of Eq. 6.

    gap_only = (worst - best) / (N - 2). For a fixed N it ranks algorithms exactly as `gap`
    does; it is scaled so that ``worst_only + gap_only == worst_plus_gap``. Needs N >= 3.

    Parameters
    ----------
    errors : array-like of shape (..., n_envs), n_envs >= 3
    accuracy, percent : bool

    Returns
    -------
    float or ndarray of shape errors.shape[:-1]

    >>> round(gap_only([0.1, 0.2, 0.4, 0.3]), 12)
    0.15
    """
    e = _as_errors(errors, accuracy=accuracy, percent=percent)
    return _scalar_or_array(_gap_term(e))


def ideal(all_errors: Any, *, accuracy: bool = False, percent: bool = False) -> float | np.ndarray:
    """Ideal measure, Eq. 4 of the worst+gap paper: R^IDEAL_A = max_{e in E_all} R_e(f_A^{E_given}).

    Parameters
    ----------
    all_errors : array-like of shape (..., n_all_envs)
        Test errors of the model trained on ALL given environments, on every environment of E_all.
    accuracy, percent : bool

    Returns
    -------
    float or ndarray of shape all_errors.shape[:-1]

    >>> ideal([0.25, 0.31, 0.9])
    0.9
    """
    e = _as_errors(all_errors, accuracy=accuracy, percent=percent, name="all_errors")
    return _scalar_or_array(e.worst)


@dataclass(frozen=True)
class MeasureSpec:
    """One measure of the registry: what to call, what it needs, and how reports name it."""

    name: str
    function: Callable[..., float | np.ndarray]
    label: str
    """How tables and figures print it ("worst+gap")."""
    min_envs: int = 1
    """Fewest environments its formula is defined for (Eq. 6 divides by N - 2: 3)."""
    split: str = "loo"
    """Errors it reads: ``loo`` (each LOO model on its held-out given environment) or ``all``
    (the model trained on all given environments, on every environment of E_all)."""


REGISTRY: dict[str, MeasureSpec] = {
    spec.name: spec
    for spec in (
        MeasureSpec("average", average, "average"),
        MeasureSpec("worst", worst, "worst"),
        MeasureSpec("best", best, "best"),
        MeasureSpec("gap", gap, "gap"),
        MeasureSpec("worst_plus_gap", worst_plus_gap, "worst+gap", min_envs=3),
        MeasureSpec("worst_only", worst_only, "worst only"),
        MeasureSpec("gap_only", gap_only, "gap only", min_envs=3),
        MeasureSpec("ideal", ideal, "ideal", split="all"),
    )
}
"""Every measure by name: the one list the analyses, the CLI and the reports read."""

MEASURES: dict[str, Callable[..., float | np.ndarray]] = {
    name: spec.function for name, spec in REGISTRY.items() if spec.split == "loo"
}
"""Name -> measure function of the LOO measures; lower is better for all of them."""

MeasureFunction = Callable[..., "float | np.ndarray"]


def register_measure(
    name: str, *, label: str | None = None, min_envs: int = 1, split: str = "loo"
) -> Callable[[MeasureFunction], MeasureFunction]:
    """Decorator adding a measure to `REGISTRY` (and, when ``split="loo"``, to `MEASURES`).

    The function takes errors of shape ``(..., n_envs)`` (float64 error fractions, environments on
    the last axis) and returns one value per leading index; lower must be better. Once
    registered, the measure is accepted wherever measure names are (``oodeval measures
    --measures``, `domain_measures`, `oodeval.score`). A name already registered is refused.

    >>> @register_measure("doc_median", label="median", min_envs=1)
    ... def doc_median(errors):
    ...     return np.median(errors, axis=-1)
    >>> float(domain_measures([0.1, 0.2, 0.4], ["doc_median"])["doc_median"])
    0.2
    >>> unregister_measure("doc_median")
    """
    if split not in ("loo", "all"):
        raise ValueError(f"split must be 'loo' or 'all', not {split!r}")

    def add(function: MeasureFunction) -> MeasureFunction:
        if name in REGISTRY:
            raise ValueError(f"a measure named {name!r} is already registered")
        REGISTRY[name] = MeasureSpec(name, function, label or name, min_envs, split)
        if split == "loo":
            MEASURES[name] = function
        return function

    return add


def unregister_measure(name: str) -> None:
    """Remove a measure added by `register_measure` (built-in measures cannot be removed)."""
    if name in _BUILT_IN:
        raise ValueError(f"{name!r} is a built-in measure")
    REGISTRY.pop(name, None)
    MEASURES.pop(name, None)


_BUILT_IN = frozenset(REGISTRY)


def measure_label(name: str) -> str:
    """How reports print measure `name` (the name itself when it is not in `REGISTRY`).

    >>> measure_label("worst_plus_gap"), measure_label("my_measure")
    ('worst+gap', 'my_measure')
    """
    spec = REGISTRY.get(name)
    return spec.label if spec is not None else name


def check_measures(names: Sequence[str] | None = None) -> list[str]:
    """`names` as a list of LOO measures of `MEASURES` (default: all of them), or OodevalError.

    >>> check_measures(["average", "gap"])
    ['average', 'gap']
    """
    names = list(MEASURES) if names is None else list(names)
    unknown = [n for n in names if n not in MEASURES]
    if unknown:
        raise OodevalError(
            f"unknown measure(s) {listing(unknown)}; choose from {', '.join(MEASURES)}"
        )
    return names


def undefined_measures(names: Sequence[str], n_envs: int) -> list[str]:
    """The measures of `names` whose formula needs more than `n_envs` environments.

    >>> undefined_measures(["average", "worst_plus_gap", "gap_only"], 2)
    ['worst_plus_gap', 'gap_only']
    """
    return [n for n in names if REGISTRY[n].min_envs > n_envs]


def domain_measures(
    errors: Any,
    names: Sequence[str] | None = None,
    *,
    accuracy: bool = False,
    percent: bool = False,
) -> dict[str, float | np.ndarray]:
    """Every requested measure of `MEASURES` at once, validating and reducing `errors` only once.

    Parameters
    ----------
    errors : array-like of shape (..., n_envs)
    names : sequence of str, optional
        Keys of `MEASURES` to compute (default: all, in `MEASURES` order).
    accuracy, percent : bool

    Returns
    -------
    dict mapping each name to a float or an ndarray of shape errors.shape[:-1]

    Examples
    --------
    >>> {k: round(v, 12) for k, v in domain_measures([0.1, 0.2, 0.4, 0.3]).items()}
    ... # doctest: +NORMALIZE_WHITESPACE
    {'average': 0.25, 'worst': 0.4, 'best': 0.1, 'gap': 0.3, 'worst_plus_gap': 0.55,
     'worst_only': 0.4, 'gap_only': 0.15}
    """
    names = check_measures(names)
    e = _as_errors(errors, accuracy=accuracy, percent=percent)
    hi, lo = e.worst, e.best
    values: dict[str, np.ndarray] = {}
    for k in names:
        if k == "average":
            values[k] = e.values.mean(axis=-1)
        elif k in ("worst", "worst_only"):
            values[k] = hi
        elif k == "best":
            values[k] = lo
        elif k == "gap":
            values[k] = hi - lo
        elif k == "worst_plus_gap":
            values[k] = hi + _gap_term(e)
        elif k == "gap_only":
            values[k] = _gap_term(e)
        else:  # a measure added with register_measure
            values[k] = np.asarray(MEASURES[k](e.values), dtype=np.float64)
    return {k: _scalar_or_array(v) for k, v in values.items()}


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
    return _scalar_or_array(acc.mean(axis=-1))


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
    return _scalar_or_array((acc_b * n_b).sum(axis=-1) / total)


def domain_std(accuracies: Any, *, percent: bool = False) -> float | np.ndarray:
    """NICO++ "Std" (Eq. 5): sample standard deviation (ddof=1) of the per-domain accuracies.

    sqrt( (1/(K-1)) sum_k (acc_k - Average)^2 ); needs K >= 2 domains.

    Parameters
    ----------
    accuracies : array-like of shape (..., n_domains), n_domains >= 2

    Returns
    -------
    float or ndarray of shape accuracies.shape[:-1]

    >>> round(domain_std([0.9, 0.8, 0.7]), 12)
    0.1
    """
    acc = _as_accuracies(accuracies, percent=percent)
    if acc.shape[-1] < 2:
        raise OodevalError(
            "Std (NICO++ Eq. 5, ddof=1) needs >= 2 test domains, got 1; report Average only"
        )
    return _scalar_or_array(acc.std(axis=-1, ddof=1))


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
