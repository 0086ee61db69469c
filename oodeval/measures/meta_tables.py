"""Meta-evaluation over long-form tables: the worst+gap paper's Sections 5-6 as flat tables.

One layer for every caller (`oodeval measures`, `oodeval study analyze`, the reports, the DomainBed
import), so the numbers they print come from the same code:

- `unit_measures`: long-form errors -> one row per unit (scenario, seed, algorithm) with every
  requested measure and, when the errors have ``all`` rows, the ideal measure (Eq. 4);
- `ideal_correlations` and `correlation_summary`: Spearman's rho and Kendall's tau-b with the ideal
  measure across algorithms, per (scenario, seed), then mean and std over seeds (Section 5);
- `selections` and `degradation_summary`: the algorithm each measure selects (Eq. 3/5/7) and the
  selection degradation |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| (Section 6.1);
- `seed_means`: each algorithm's measures averaged over seeds (selection on the seed average);
- `distance_to_ideal`: mean |R^IDEAL - R^measure| as the number of environments grows,
  normalised to the smallest size (asymptotics, Section 6.3);
- `baseline_vs_best`: a baseline (ERM) against the ideal-best algorithm (Section 6.4).

A *table* is a mapping from column name to a 1-D array, all of one length: a dict of numpy arrays
or a pandas DataFrame on input (read column by column), a dict of numpy arrays on output
(``pandas.DataFrame(table)`` makes a frame of it). This keeps `oodeval.measures` free of pandas.
Groups appear in the order their first row appears, and values are reduced in row order, so a
caller decides the order of seeds and algorithms by ordering its rows. Scores are "lower is
better"; ties are handled as in `oodeval.measures.meta`.

The long-form errors table has one row per (scenario, seed, algorithm, split, environment):

===========  ==========================================================================
column       meaning
===========  ==========================================================================
scenario     optional; a label of the experiment the algorithms are compared in
seed         optional; any label
algorithm    name of the algorithm
split        ``loo``: the error of the model trained without that given environment, on it;
             ``all``: the error of the model trained on all given environments, on an
             environment of E_all (Eq. 4 of the worst+gap paper)
environment  name of the environment
error        error as a fraction in [0, 1]
===========  ==========================================================================

>>> errors = {
...     "algorithm": ["A"] * 4 + ["B"] * 4,
...     "split": ["loo", "loo", "loo", "all"] * 2,
...     "environment": ["e1", "e2", "e3", "x"] * 2,
...     "error": [0.1, 0.2, 0.3, 0.5, 0.2, 0.2, 0.2, 0.4],
... }
>>> units = unit_measures(errors, ["average", "worst_plus_gap"])
>>> units["worst_plus_gap"].round(12).tolist(), units["ideal"].tolist()
([0.5, 0.2], [0.5, 0.4])
>>> sel = selections(units, ["worst_plus_gap", "average"])
>>> sel["selected"].tolist(), sel["degradation"].round(12).tolist()
(['B', 'A'], [0.0, 0.1])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.measures._validation import as_float_array
from oodeval.measures.domain import (
    MEASURES,
    REGISTRY,
    check_measures,
    domain_measures,
    measure_label,
)
from oodeval.measures.meta import (
    TIE_DECIMALS,
    bootstrap_correlation_ci,
    mean_std,
    paired_spearman_ci,
    rank_correlation,
    select_algorithm,
    spearman_critical_value,
)

__all__ = [
    "ANSWER_MEASURES",
    "MIN_INTERVAL_ALGORITHMS",
    "MIN_VERDICT_ALGORITHMS",
    "TRACKING_RHO",
    "SEED_MEAN",
    "UNIT_KEYS",
    "VERDICTS",
    "Table",
    "answer_line",
    "baseline_vs_best",
    "correlation_summary",
    "correlation_verdicts",
    "degradation_summary",
    "distance_to_ideal",
    "ideal_correlations",
    "interval_warning",
    "seed_means",
    "selections",
    "tracks_ideal",
    "unit_measures",
    "verdict_sentence",
]

Table = dict[str, np.ndarray]
"""Column name -> 1-D array; every column has the same length."""

UNIT_KEYS = ("scenario", "seed", "algorithm")
"""The columns that name a unit: one algorithm trained with one seed in one scenario."""

SEED_MEAN = "mean"
"""The seed label of `seed_means` rows."""

# ----------------------------------------------------------------------------- table helpers


def _column(table: Mapping[str, Any], name: str) -> np.ndarray:
    try:
        values = table[name]
    except KeyError:
        raise OodevalError(f"the table has no {name!r} column; it needs {name}") from None
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise OodevalError(f"column {name!r} must be 1-D, got shape {arr.shape}")
    return arr


def _length(table: Mapping[str, Any]) -> int:
    lengths = {len(np.asarray(table[c])) for c in table}
    if len(lengths) > 1:
        raise OodevalError(f"the table's columns differ in length: {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def _factorize(values: np.ndarray) -> np.ndarray:
    """Integer codes of `values`, numbered in order of first appearance."""
    if values.dtype == object:  # any hashable labels; a dict keeps first-appearance order
        seen: dict[Any, int] = {}
        return np.fromiter(
            (seen.setdefault(v, len(seen)) for v in values.tolist()), np.int64, len(values)
        )
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.ravel()]


def _codes(*columns: np.ndarray) -> np.ndarray:
    """One integer code per distinct tuple of `columns`, numbered in order of first appearance."""
    n = len(columns[0]) if columns else 0
    combined = np.zeros(n, dtype=np.int64)
    for col in columns:
        codes = _factorize(col)
        combined = combined * (int(codes.max()) + 1 if n else 1) + codes
        combined = _factorize(combined)  # renumber so the product never overflows
    return combined


def _groups(*columns: np.ndarray) -> list[np.ndarray]:
    """Row indices of each distinct tuple of `columns`, groups and rows in order of appearance."""
    codes = _codes(*columns)
    if codes.size == 0:
        return []
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, bounds)


def _as_table(records: list[dict[str, Any]], columns: Sequence[str]) -> Table:
    """Column arrays of `records`: bool, int64 or float64 when every value is one, else object."""
    out: Table = {}
    for name in columns:
        values = [r[name] for r in records]
        kinds = {type(v) for v in values}
        if kinds and kinds <= {bool, np.bool_}:
            out[name] = np.array(values, dtype=bool)
        elif kinds and kinds <= {int, np.int64}:
            out[name] = np.array(values, dtype=np.int64)
        elif kinds and kinds <= {float, np.float64}:
            out[name] = np.array(values, dtype=np.float64)
        else:  # labels, tuples of names, mixed values: kept as the Python objects
            column = np.empty(len(values), dtype=object)
            for k, v in enumerate(values):
                column[k] = v
            out[name] = column
    return out


def _python(value: Any) -> Any:
    """A numpy scalar as the Python value (so labels print and compare as the caller gave them)."""
    return value.item() if isinstance(value, np.generic) else value


# ----------------------------------------------------------------------------- units


def _dense_by_length(
    unit: np.ndarray, values: np.ndarray, n_units: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(unit ids, matrix) per row count: each unit's values as one matrix row, in row order."""
    order = np.argsort(unit, kind="stable")
    unit_sorted, values_sorted = unit[order], values[order]
    counts = np.bincount(unit, minlength=n_units)
    starts = np.cumsum(counts) - counts
    position = np.arange(len(unit)) - starts[unit_sorted]
    out = []
    for n in np.unique(counts[counts > 0]):
        members = np.flatnonzero(counts == n)
        row_of = np.full(n_units, -1)
        row_of[members] = np.arange(len(members))
        take = counts[unit_sorted] == n
        matrix = np.empty((len(members), int(n)))
        matrix[row_of[unit_sorted[take]], position[take]] = values_sorted[take]
        out.append((members, matrix))
    return out


def _unit_name(keys: dict[str, np.ndarray], u: int) -> str:
    parts = [f"{k} {_python(keys[k][u])}" for k in UNIT_KEYS if str(keys[k][u]) != ""]
    return ", ".join(parts)


def _check_unit_rows(
    keys: dict[str, np.ndarray], unit: np.ndarray, loo: np.ndarray, env: np.ndarray
) -> None:
    """Raise on a repeated (unit, split, environment) row or a unit without loo rows."""
    codes = _codes(unit, loo.astype(np.int64), env)
    repeated = np.flatnonzero(np.bincount(codes) > 1)
    if repeated.size:
        row = int(np.flatnonzero(codes == repeated[0])[0])
        raise OodevalError(
            f"{_unit_name(keys, int(unit[row]))} has two {'loo' if loo[row] else 'all'} rows for "
            f"environment {_python(env[row])}; keep one row per unit, split and environment"
        )
    n_units = len(keys["algorithm"])
    has_loo = np.bincount(unit[loo], minlength=n_units) > 0
    if not has_loo.all():
        u = int(np.flatnonzero(~has_loo)[0])
        raise OodevalError(
            f"{_unit_name(keys, u)} has no loo rows; every unit needs its leave-one-out errors"
        )
    has_all = np.bincount(unit[~loo], minlength=n_units) > 0
    if has_all.any() and not has_all.all():
        u = int(np.flatnonzero(~has_all)[0])
        raise OodevalError(
            f"{_unit_name(keys, u)} has no all rows while other units have them; the ideal "
            "measure needs the errors of the model trained on all given environments"
        )


def unit_measures(errors: Mapping[str, Any], measures: Sequence[str] | None = None) -> Table:
    """Every requested measure per unit (scenario, seed, algorithm) from long-form errors.

    The LOO measures (`oodeval.measures.domain.MEASURES`) read a unit's ``loo`` errors in row
    order, the ``all``-split measures of `REGISTRY` (the ideal measure, Eq. 4) its ``all`` errors;
    units with the same number of environments are scored in one vectorised call. Labels may be
    any hashable values; integer labels are grouped fastest.

    Parameters
    ----------
    errors : table with columns algorithm, split, environment, error[, scenario, seed]
    measures : names of LOO measures (default: all)

    Returns
    -------
    Table with one row per unit, in order of first appearance: scenario and seed (``""`` when
    the input has no such column), algorithm, n_given (number of loo rows), each measure, and
    ``ideal`` when the errors have ``all`` rows (then every unit needs them).
    """
    names = check_measures(measures)
    n_rows = _length(errors)
    if n_rows == 0:
        raise OodevalError("the errors table has no rows; give one row per unit and environment")
    split = _column(errors, "split")
    loo = split == "loo"
    unknown = ~loo & (split != "all")
    if unknown.any():
        raise OodevalError(
            f"unknown split {_python(split[np.argmax(unknown)])!r}; split must be 'loo' or 'all'"
        )
    env = _column(errors, "environment")
    # NaN, infinities and the range [0, 1] are checked by the measures themselves
    error = as_float_array(_column(errors, "error"), "error", check_finite=False)
    key_columns = {k: _column(errors, k) for k in UNIT_KEYS if k in errors or k == "algorithm"}
    unit = _codes(*key_columns.values())
    n_units = int(unit.max()) + 1
    first = np.full(n_units, n_rows)
    np.minimum.at(first, unit, np.arange(n_rows))
    keys = {
        k: _labels(key_columns[k][first]) if k in key_columns else np.full(n_units, "", object)
        for k in UNIT_KEYS
    }
    _check_unit_rows(keys, unit, loo, env)
    out: Table = dict(keys)
    out["n_given"] = np.bincount(unit[loo], minlength=n_units).astype(np.int64)
    for name in names:
        out[name] = np.empty(n_units)
    for members, matrix in _dense_by_length(unit[loo], error[loo], n_units):
        for name, value in domain_measures(matrix, names).items():
            out[name][members] = value
    if not loo.all():
        for name in (n for n, spec in REGISTRY.items() if spec.split == "all"):
            out[name] = np.empty(n_units)
            for members, matrix in _dense_by_length(unit[~loo], error[~loo], n_units):
                out[name][members] = REGISTRY[name].function(matrix)
    return out


def _labels(values: np.ndarray) -> np.ndarray:
    """Fixed-width text arrays as object arrays of Python str; other arrays unchanged."""
    return values.astype(object) if values.dtype.kind == "U" else values


# ----------------------------------------------------------------------------- correlations


def ideal_correlations(
    units: Mapping[str, Any],
    measures: Sequence[str],
    *,
    bootstrap: int = 0,
    confidence: float = 0.95,
    bootstrap_seed: int = 0,
) -> Table:
    """Spearman's rho and Kendall's tau-b with the ideal measure, per (scenario, seed, measure).

    Section 5 of the worst+gap paper, through `oodeval.measures.meta.rank_correlation` over the
    algorithms of each (scenario, seed). With ``bootstrap > 0`` each row also gets percentile
    bootstrap intervals (`bootstrap_correlation_ci`, the same resamples for every measure).

    Parameters
    ----------
    units : table as `unit_measures` returns it (with ``ideal``)
    measures : columns of `units` to correlate with ``ideal``
    bootstrap, confidence, bootstrap_seed : resamples, level and seed of the intervals

    Returns
    -------
    Table: scenario, seed, measure, spearman, kendall, n_algorithms[, spearman_low,
    spearman_high, kendall_low, kendall_high, n_valid]
    """
    cols = {k: _column(units, k) for k in (*UNIT_KEYS, "ideal", *measures)}
    records = []
    for idx in _groups(cols["scenario"], cols["seed"]):
        ideal = cols["ideal"][idx].astype(np.float64)
        for measure in measures:
            scores = cols[measure][idx].astype(np.float64)
            row = {
                "scenario": _python(cols["scenario"][idx[0]]),
                "seed": _python(cols["seed"][idx[0]]),
                "measure": measure,
                **rank_correlation(scores, ideal),
                "n_algorithms": int(len(idx)),
            }
            if bootstrap > 0:
                ci = bootstrap_correlation_ci(
                    scores,
                    ideal,
                    n_resamples=bootstrap,
                    confidence=confidence,
                    seed=bootstrap_seed,
                )
                row.update(
                    spearman_low=ci["spearman"][0],
                    spearman_high=ci["spearman"][1],
                    kendall_low=ci["kendall"][0],
                    kendall_high=ci["kendall"][1],
                    n_valid=ci["n_valid"],
                )
            records.append(row)
    columns = ["scenario", "seed", "measure", "spearman", "kendall", "n_algorithms"]
    if bootstrap > 0:
        columns += ["spearman_low", "spearman_high", "kendall_low", "kendall_high", "n_valid"]
    return _as_table(records, columns)


def correlation_summary(correlations: Mapping[str, Any]) -> Table:
    """Mean and std (ddof=1) over seeds of each (scenario, measure)'s correlations.

    Parameters
    ----------
    correlations : table as `ideal_correlations` returns it

    Returns
    -------
    Table: scenario, measure, n_seeds, n_algorithms (the fewest of any seed), spearman_mean,
    spearman_std, kendall_mean, kendall_std (std NaN for one seed; NaN correlations propagate)
    """
    cols = {
        k: _column(correlations, k)
        for k in ("scenario", "measure", "spearman", "kendall", "n_algorithms")
    }
    records = []
    for idx in _groups(cols["scenario"], cols["measure"]):
        rho_mean, rho_std = mean_std(cols["spearman"][idx])
        tau_mean, tau_std = mean_std(cols["kendall"][idx])
        records.append(
            {
                "scenario": _python(cols["scenario"][idx[0]]),
                "measure": _python(cols["measure"][idx[0]]),
                "n_seeds": int(len(idx)),
                "n_algorithms": int(cols["n_algorithms"][idx].min()),
                "spearman_mean": rho_mean,
                "spearman_std": rho_std,
                "kendall_mean": tau_mean,
                "kendall_std": tau_std,
            }
        )
    columns = ["scenario", "measure", "n_seeds", "n_algorithms"]
    columns += ["spearman_mean", "spearman_std", "kendall_mean", "kendall_std"]
    return _as_table(records, columns)


# ----------------------------------------------------------------------------- verdict

VERDICTS = ("clearly ahead", "ahead", "tied", "behind", "clearly behind", "undefined")
"""What `correlation_verdicts` says of a measure against a baseline in one scenario."""

MIN_VERDICT_ALGORITHMS = 3
"""With two algorithms Spearman's rho is +1 or -1 whatever the scores, so a seed enters a verdict
only with at least three finished algorithms."""

_TIE = 1e-12  # rho values are ratios of rank sums; equal orderings give equal rho up to rounding


def correlation_verdicts(
    units: Mapping[str, Any],
    measure: str = "worst_plus_gap",
    baseline: str = "average",
    *,
    min_algorithms: int = MIN_VERDICT_ALGORITHMS,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    bootstrap_seed: int = 0,
) -> Table:
    """Per scenario: does `measure` order the algorithms more like the ideal measure than
    `baseline` does, and how sure are we?

    Spearman's rho of each measure with the ideal measure (Section 5 of the worst+gap paper) and
    paired bootstrap intervals over algorithms (`oodeval.measures.meta.paired_spearman_ci`):
    rho is the mean over seeds of the per-seed rho (Table 1's mean), each resample draws the
    algorithms once for every seed and both measures. The seeds that enter are those with at
    least `min_algorithms` algorithms (`MIN_VERDICT_ALGORITHMS`); in a complete study, all.

    ``verdict`` (one of `VERDICTS`) reads ``difference`` = rho_measure - rho_baseline: "tied"
    when it is 0 (to 1e-12); "ahead" / "behind" by its sign; "clearly ahead" / "clearly behind"
    when its `confidence` interval also excludes 0; "undefined" when no seed has enough
    algorithms or a measure (or the ideal measure) is equal for every algorithm of a seed, so
    rho is undefined; ``reason`` then says which (else it is empty).

    Returns
    -------
    Table: scenario, n_seeds (that entered), n_seeds_left_out, n_algorithms (fewest of a seed
    that entered), for m in (measure, baseline) ``rho_<m>``, ``rho_<m>_low``, ``rho_<m>_high``,
    then difference, difference_low, difference_high, n_valid (resamples kept), verdict, reason

    >>> units = {
    ...     "scenario": ["s"] * 4, "seed": [0] * 4, "algorithm": list("ABCD"),
    ...     "ideal": [0.1, 0.2, 0.3, 0.4], "worst_plus_gap": [0.1, 0.2, 0.3, 0.4],
    ...     "average": [0.4, 0.3, 0.2, 0.1],
    ... }
    >>> v = correlation_verdicts(units, n_resamples=200)
    >>> v["rho_worst_plus_gap"].tolist(), v["rho_average"].tolist(), v["difference_low"].tolist()
    ([1.0], [-1.0], [2.0])
    >>> v["verdict"].tolist()
    ['clearly ahead']
    """
    names = list(dict.fromkeys([measure, baseline]))
    if len(names) != 2:
        raise OodevalError(f"compare two different measures, got {measure!r} twice")
    cols = {k: _column(units, k) for k in dict.fromkeys((*UNIT_KEYS, "ideal", *names))}
    options = {"n_resamples": n_resamples, "confidence": confidence, "seed": bootstrap_seed}
    records = []
    for rows in _groups(cols["scenario"]):
        seeds, matrices = _seed_by_algorithm(cols, rows, ["ideal", *names])
        counts = (~np.isnan(matrices["ideal"])).sum(axis=1)
        used = counts >= min_algorithms
        record: dict[str, Any] = {
            "scenario": _python(cols["scenario"][rows[0]]),
            "n_seeds": int(used.sum()),
            "n_seeds_left_out": int((~used).sum()),
            "n_algorithms": int(counts[used].min()) if used.any() else int(counts.max()),
        }
        nan_ci = {"first": np.nan, "second": np.nan, "difference": np.nan}
        nan_ci.update({f"{k}_ci": (np.nan, np.nan) for k in ("first", "second", "difference")})
        reason = _undefined_reason(matrices, used, names, min_algorithms)
        out = nan_ci | {"n_valid": 0}
        if not reason:
            m, b, i = (matrices[k][used] for k in (*names, "ideal"))
            out = paired_spearman_ci(m, b, i, **options)
        for prefix, key in ((f"rho_{names[0]}", "first"), (f"rho_{names[1]}", "second")):
            record[prefix] = float(out[key])
            record[f"{prefix}_low"], record[f"{prefix}_high"] = map(float, out[f"{key}_ci"])
        record["difference"] = float(out["difference"])
        record["difference_low"], record["difference_high"] = map(float, out["difference_ci"])
        record["n_valid"] = int(out["n_valid"])
        record["verdict"] = "undefined" if reason else _verdict(record)
        record["reason"] = reason
        records.append(record)
    columns = ["scenario", "n_seeds", "n_seeds_left_out", "n_algorithms"]
    for m in names:
        columns += [f"rho_{m}", f"rho_{m}_low", f"rho_{m}_high"]
    columns += ["difference", "difference_low", "difference_high", "n_valid", "verdict", "reason"]
    return _as_table(records, columns)


def _seed_by_algorithm(
    cols: dict[str, np.ndarray], rows: np.ndarray, values: Sequence[str]
) -> tuple[list[Any], dict[str, np.ndarray]]:
    """Seed labels and one (n_seeds, n_algorithms) matrix per value column; NaN = no unit."""
    seed = _codes(cols["seed"][rows])
    algorithm = _codes(cols["algorithm"][rows])
    shape = (int(seed.max()) + 1, int(algorithm.max()) + 1)
    if len(np.unique(seed * shape[1] + algorithm)) < len(rows):
        raise OodevalError(
            f"scenario {_python(cols['scenario'][rows[0]])} has two rows for one (seed, "
            "algorithm); keep one row per unit"
        )
    labels = [_python(cols["seed"][rows[idx[0]]]) for idx in _groups(seed)]
    matrices = {}
    for name in values:
        matrix = np.full(shape, np.nan)
        matrix[seed, algorithm] = cols[name][rows].astype(np.float64)
        matrices[name] = matrix
    return labels, matrices


def _undefined_reason(
    matrices: dict[str, np.ndarray], used: np.ndarray, names: Sequence[str], min_algorithms: int
) -> str:
    """Why rho is undefined for a scenario ("" when it is defined)."""
    if not used.any():
        return f"fewer than {min_algorithms} algorithms in every seed"
    for name in ("ideal", *names):
        for row in matrices[name][used]:
            present = row[~np.isnan(row)]
            if np.ptp(np.round(present, TIE_DECIMALS)) == 0:
                label = "the ideal measure" if name == "ideal" else measure_label(name)
                return f"{label} is equal for every algorithm of a seed"
    return ""


def _verdict(record: dict[str, Any]) -> str:
    difference = record["difference"]
    if abs(difference) <= _TIE:
        return "tied"
    if difference > 0:
        return "clearly ahead" if record["difference_low"] > 0 else "ahead"
    return "clearly behind" if record["difference_high"] < 0 else "behind"


TRACKING_RHO = 0.5
"""A measure *tracks the ideal measure well* in a scenario when its mean Spearman's rho with the
ideal measure is at least this and the lower end of its bootstrap interval is above 0
(`tracks_ideal`)."""

MIN_INTERVAL_ALGORITHMS = 8
"""Rank correlations over fewer algorithms get a warning (`interval_warning`): below 8, an exact
two-sided 5% test of Spearman's rho needs |rho| >= 0.786 (7 algorithms), 0.886 (6), 1 (5) or
cannot reject at all (4 or fewer), so only near-perfect orderings can be told from no relation,
and a percentile bootstrap interval over the algorithms spans about half of [-1, 1] or more."""


MIN_PICK_ENVIRONMENTS = 4
"""Picks over fewer LOO environments get a warning (`environment_warning`): the worst+gap paper's
smallest scenario has N = 4; at N = 3 each algorithm's worst and best come from three errors and
worst+gap weighs its gap by 1/(N - 2) = 1."""


def environment_warning(n_environments: int) -> str:
    """A one-line warning when `n_environments` (N, the given environments of the LOO errors)
    are too few for a measure's pick to say much (fewer than `MIN_PICK_ENVIRONMENTS`), else ``""``.

    >>> environment_warning(3)[:52]
    'only 3 environments: each algorithm is scored on 3 l'
    >>> environment_warning(4)
    ''
    """
    n = int(n_environments)
    if n >= MIN_PICK_ENVIRONMENTS:
        return ""
    gap = (
        f"worst+gap weighs its gap by 1/(N - 2) = {1 / (n - 2):g}"
        if n >= 3
        else "worst+gap needs at least 3"
    )
    return (
        f"only {n} environments: each algorithm is scored on {n} leave-one-out errors, so one "
        f"environment can decide every pick ({gap}); compare the picks over seeds, or add "
        "environments, before trusting one"
    )


def interval_warning(n_algorithms: int) -> str:
    """A one-line warning when `n_algorithms` are too few for a meaningful rank correlation
    (fewer than `MIN_INTERVAL_ALGORITHMS`), else ``""``.

    The rule: with n algorithms, a rank correlation (and any interval around it, bootstrap over
    algorithms included) can only tell an ordering from no relation when |rho| reaches the exact
    5% critical value (`oodeval.measures.meta.spearman_critical_value`); below 8 algorithms that
    value is 0.786 or more, so the warning is given.

    >>> interval_warning(5)[:69]
    'only 5 algorithms: with fewer than 8, a rank correlation with the ide'
    >>> interval_warning(14)
    ''
    """
    n = int(n_algorithms)
    if n >= MIN_INTERVAL_ALGORITHMS:
        return ""
    if n < 2:
        return f"only {n} algorithm: there is no rank correlation to compute; add algorithms"
    critical = spearman_critical_value(n)
    need = (
        f"no rho, not even 1, differs from 0 at the 5% level with {n}"
        if np.isnan(critical)
        else "only a perfect ordering (|rho| = 1) differs from 0 at the 5% level"
        if critical >= 1
        else f"only |rho| >= {critical:.3f} differs from 0 at the 5% level"
    )
    return (
        f"only {n} algorithms: with fewer than {MIN_INTERVAL_ALGORITHMS}, a rank correlation with "
        f"the ideal measure says little ({need}; bootstrap intervals over algorithms span most "
        "of [-1, 1]); add algorithms before trusting the correlations"
    )


def tracks_ideal(rho: float, low: float) -> bool:
    """Whether a measure tracks the ideal measure well: mean rho >= `TRACKING_RHO` (0.5) and
    the lower end `low` of its bootstrap interval > 0. NaN (undefined) is never tracking.

    >>> tracks_ideal(0.8, 0.3), tracks_ideal(0.55, -0.2), tracks_ideal(0.4, 0.1)
    (True, False, False)
    """
    return bool(np.isfinite(rho) and np.isfinite(low) and rho >= TRACKING_RHO and low > 0)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _rho_text(verdicts: Mapping[str, Any], name: str) -> str:
    rho, low, high = (_column(verdicts, f"rho_{name}{s}") for s in ("", "_low", "_high"))
    cells = [
        "undefined" if np.isnan(r) else f"{r:.2f} [{lo:.2f}, {hi:.2f}]"
        for r, lo, hi in zip(rho.astype(float), low.astype(float), high.astype(float), strict=True)
    ]
    return f"rho {measure_label(name)} {', '.join(cells)}"


def verdict_sentence(
    verdicts: Mapping[str, Any],
    measure: str = "worst_plus_gap",
    baseline: str = "average",
    *,
    confidence: float = 0.95,
) -> str:
    """The verdict in words, counted from `correlation_verdicts`' table; it never claims more
    than the table shows.

    The rule, per scenario (one row of the table):

    - *clearly better*: the `confidence` paired bootstrap interval of the difference in
      Spearman's rho (``difference_low``, ``difference_high``) lies above 0 (or below 0 for the
      baseline); *no clear difference* otherwise (the interval covers 0, or the rhos are equal),
      whatever the sign of the difference; *no verdict* for an undefined row, with its reason;
    - *tracks the ideal well*: `tracks_ideal` (mean rho >= `TRACKING_RHO` and the rho's own
      interval above 0). The sentence says in how many scenarios each measure does, and names
      the scenarios where *neither* does, which can happen while one measure is ahead.

    With at most three scenarios it also states every rho with its interval.

    Parameters
    ----------
    verdicts : table with ``verdict`` and ``reason``, and for both measures ``rho_<m>``,
        ``rho_<m>_low``, ``rho_<m>_high`` (as `correlation_verdicts` returns it)
    measure, baseline : the two measures compared
    confidence : the level of the intervals, for the wording

    Returns
    -------
    str, one line

    >>> table = {"verdict": np.array(["behind", "ahead", "ahead"]), "reason": np.array([""] * 3),
    ...          "rho_worst_plus_gap": np.array([-0.33, 0.02, 0.55]),
    ...          "rho_worst_plus_gap_low": np.array([-0.9, -0.7, -0.2]),
    ...          "rho_worst_plus_gap_high": np.array([0.5, 0.8, 0.95]),
    ...          "rho_average": np.array([-0.2, -0.1, 0.3]),
    ...          "rho_average_low": np.array([-0.8, -0.8, -0.4]),
    ...          "rho_average_high": np.array([0.6, 0.7, 0.9])}
    >>> print(verdict_sentence(table))  # doctest: +NORMALIZE_WHITESPACE
    worst+gap vs average over 3 scenarios: worst+gap tracks the ideal measure clearly better in
    0, average clearly better in 0, no clear difference in 3 (the 95% bootstrap interval of the
    difference in Spearman's rho includes 0). Neither tracks the ideal measure well in any of the
    3 (well: mean rho >= 0.5 with its 95% interval above 0); rho worst+gap -0.33 [-0.90, 0.50],
    0.02 [-0.70, 0.80], 0.55 [-0.20, 0.95]; rho average -0.20 [-0.80, 0.60], -0.10 [-0.80,
    0.70], 0.30 [-0.40, 0.90].
    """
    verdict = [str(v) for v in _column(verdicts, "verdict")]
    reasons = [str(r) for r in _column(verdicts, "reason")]
    if not verdict:
        return "No scenario has finished units yet, so there is no verdict."
    m, b = measure_label(measure), measure_label(baseline)
    n = len(verdict)
    defined = [v != "undefined" for v in verdict]
    clear_m, clear_b = verdict.count("clearly ahead"), verdict.count("clearly behind")
    unclear = sum(defined) - clear_m - clear_b
    interval = f"the {confidence:.0%} bootstrap interval of the difference in Spearman's rho"
    why = [r for r, d in zip(reasons, defined, strict=True) if not d]
    kinds = "; ".join(
        r if why.count(r) in (1, len(why)) else f"{r}: {why.count(r)}" for r in dict.fromkeys(why)
    )
    if not any(defined):
        return f"no verdict ({kinds})." if n == 1 else f"no verdict in any of the {n} ({kinds})."
    if n == 1:
        if clear_m or clear_b:
            winner, loser = (m, b) if clear_m else (b, m)
            text = f"{winner} tracks the ideal measure clearly better than {loser} ({interval} "
            text += "excludes 0)"
        else:
            text = f"no clear difference between {m} and {b} ({interval} includes 0)"
    else:
        text = (
            f"{m} vs {b} over {_count(n, 'scenario')}: {m} tracks the ideal measure clearly "
            f"better in {clear_m}, {b} clearly better in {clear_b}, no clear difference in "
            f"{unclear}" + (f" ({interval} includes 0)" if unclear else "")
        )
    if why:
        text += f"; no verdict in {len(why)} ({kinds})"
    text += ". " + _tracking_text(verdicts, measure, baseline, defined, confidence)
    if n <= 3:
        text += f"; {_rho_text(verdicts, measure)}; {_rho_text(verdicts, baseline)}"
    return text + "."


def _tracking_text(
    verdicts: Mapping[str, Any],
    measure: str,
    baseline: str,
    defined: list[bool],
    confidence: float,
) -> str:
    """How many defined scenarios each measure tracks the ideal well in, and where neither does."""
    well = {}
    for name in (measure, baseline):
        rho, low = (_column(verdicts, f"rho_{name}{s}").astype(float) for s in ("", "_low"))
        well[name] = [tracks_ideal(r, lo) and d for r, lo, d in zip(rho, low, defined, strict=True)]
    k = sum(defined)
    neither = sum(d and not (a or c) for d, a, c in zip(defined, *well.values(), strict=True))
    rule = f"well: mean rho >= {TRACKING_RHO:g} with its {confidence:.0%} interval above 0"
    m, b = measure_label(measure), measure_label(baseline)
    if neither == k:
        where = "here" if k == 1 else ("in either" if k == 2 else f"in any of the {k}")
        return f"Neither tracks the ideal measure well {where} ({rule})"
    counts = f"{m} tracks the ideal measure well in {sum(well[measure])} of {k}, "
    counts += f"{b} in {sum(well[baseline])}"
    return counts + (f", neither in {neither}" if neither else "") + f" ({rule})"


# ----------------------------------------------------------------------------- selection


def selections(units: Mapping[str, Any], measures: Sequence[str]) -> Table:
    """The algorithm each measure selects per (scenario, seed), and what that choice costs.

    argmin of each measure over the algorithms of a (scenario, seed), ties to the first name in
    sorted order (`oodeval.measures.meta.select_algorithm`, Eq. 3/5/7 of the worst+gap paper).
    With an ``ideal`` column, also the ideal measure of the selected algorithm, the selection
    degradation |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| (Section 6.1) and whether the choice
    is the ideal measure's.

    Parameters
    ----------
    units : table with scenario, seed, algorithm and the measure columns (e.g. `unit_measures`
        or `seed_means`); ``measures`` may include ``"ideal"``
    measures : columns to select by

    Returns
    -------
    Table: scenario, seed, measure, selected, tied (tuple of every name tied at the minimum,
    sorted), score (the selected algorithm's value)[, ideal_of_selected, degradation,
    matches_ideal]
    """
    has_ideal = "ideal" in units
    needed = [*UNIT_KEYS, *measures] + (["ideal"] if has_ideal else [])
    cols = {k: _column(units, k) for k in dict.fromkeys(needed)}
    records = []
    for idx in _groups(cols["scenario"], cols["seed"]):
        names = [str(a) for a in cols["algorithm"][idx]]
        ideal = cols["ideal"][idx].astype(np.float64) if has_ideal else None
        best = select_algorithm(ideal, names) if ideal is not None else None
        for measure in measures:
            scores = cols[measure][idx].astype(np.float64)
            chosen = select_algorithm(scores, names)
            row = {
                "scenario": _python(cols["scenario"][idx[0]]),
                "seed": _python(cols["seed"][idx[0]]),
                "measure": measure,
                "selected": chosen.name,
                "tied": chosen.tied,
                "score": float(scores[chosen.index]),
            }
            if ideal is not None and best is not None:
                row["ideal_of_selected"] = float(ideal[chosen.index])
                row["degradation"] = float(abs(ideal[best.index] - ideal[chosen.index]))
                row["matches_ideal"] = chosen.name == best.name
            records.append(row)
    columns = ["scenario", "seed", "measure", "selected", "tied", "score"]
    if has_ideal:
        columns += ["ideal_of_selected", "degradation", "matches_ideal"]
    return _as_table(records, columns)


def degradation_summary(selected: Mapping[str, Any]) -> Table:
    """Mean and std (ddof=1) over seeds of each (scenario, measure)'s selection degradation.

    Parameters
    ----------
    selected : table as `selections` returns it for units with an ideal measure

    Returns
    -------
    Table: scenario, measure, n_seeds, degradation_mean, degradation_std
    """
    cols = {k: _column(selected, k) for k in ("scenario", "measure", "degradation")}
    records = []
    for idx in _groups(cols["scenario"], cols["measure"]):
        mean, std = mean_std(cols["degradation"][idx])
        records.append(
            {
                "scenario": _python(cols["scenario"][idx[0]]),
                "measure": _python(cols["measure"][idx[0]]),
                "n_seeds": int(len(idx)),
                "degradation_mean": mean,
                "degradation_std": std,
            }
        )
    return _as_table(
        records, ["scenario", "measure", "n_seeds", "degradation_mean", "degradation_std"]
    )


def seed_means(units: Mapping[str, Any], measures: Sequence[str]) -> Table:
    """Each algorithm's measures averaged over seeds, per scenario (seed label `SEED_MEAN`).

    Only algorithms with a unit for every seed of their scenario are averaged, so every mean is
    over the same seeds. Feed the result to `selections` for the selection on the seed average.

    Returns
    -------
    Table: scenario, seed (``"mean"``), algorithm, and the mean of each measure (and of
    ``ideal`` when `units` has it)
    """
    value_names = list(dict.fromkeys([*measures, *(["ideal"] if "ideal" in units else [])]))
    cols = {k: _column(units, k) for k in (*UNIT_KEYS, *value_names)}
    records = []
    for scenario_rows in _groups(cols["scenario"]):
        n_seeds = len(np.unique(_codes(cols["seed"][scenario_rows])))
        for idx in _groups(cols["algorithm"][scenario_rows]):
            rows = scenario_rows[idx]
            if len(np.unique(_codes(cols["seed"][rows]))) != n_seeds:
                continue
            record = {
                "scenario": _python(cols["scenario"][rows[0]]),
                "seed": SEED_MEAN,
                "algorithm": _python(cols["algorithm"][rows[0]]),
            }
            record.update({m: float(cols[m][rows].astype(np.float64).mean()) for m in value_names})
            records.append(record)
    return _as_table(records, [*UNIT_KEYS, *value_names])


ANSWER_MEASURES = ("worst_plus_gap", "average")
"""The measures the answer line compares by default: the worst+gap paper's and the usual one."""


def answer_line(
    units: Mapping[str, Any], measures: Sequence[str] | None = None, *, how: str | None = None
) -> str:
    """The one-line answer: which algorithm each measure picks, and whether they disagree.

    Every output that scores algorithms opens with it (`oodeval measures`, `oodeval import
    domainbed`, both HTML reports, `oodeval.Scores.answer`). Per scenario:

    - each measure picks the algorithm with the lowest value (`selections`); an algorithm tied
      at the minimum is named with the others, joined by ``|``, and marked ``(tied)``;
    - with several seeds, each algorithm's measure is first averaged over the seeds
      (`seed_means`: only algorithms with every seed of their scenario take part), so the pick
      is Table 6's "mean" pick, and the line says ``on each measure's mean over k seeds``;
    - with an ``ideal`` column, the ideal measure's pick follows, and the line says which
      measures pick the ideal's choice;
    - the measures *agree* when their (tied) picks are the same.

    Format: ``<m1> picks A; <m2> picks B[; the ideal measure picks C] (they disagree|agree[;
    <who> pick(s) the ideal's choice][; on each measure's mean over k seeds])``. With several
    scenarios (or a non-empty scenario label), each part is prefixed ``<scenario>: `` and the
    parts are joined by ``. ``.

    Parameters
    ----------
    units : table with algorithm, the measure columns[, ideal, scenario, seed] (as
        `unit_measures` returns it, or `oodeval.Scores.measures`)
    measures : the measures to name (default: `ANSWER_MEASURES` when `units` has both, else
        every LOO measure it has, in the order of `oodeval.measures.MEASURES`)
    how : how the values were aggregated, when the caller did it (replaces the seed wording)

    Returns
    -------
    str, one line without a final full stop

    >>> units = {"algorithm": ["ERM", "IRM", "Mixup"], "average": [0.20, 0.22, 0.18],
    ...          "worst_plus_gap": [0.40, 0.31, 0.45]}
    >>> answer_line(units)
    'worst+gap picks IRM; average picks Mixup (they disagree)'
    >>> answer_line({**units, "seed": [0, 0, 0], "ideal": [0.5, 0.3, 0.4]})
    "worst+gap picks IRM; average picks Mixup; the ideal measure picks IRM (they disagree; \
worst+gap picks the ideal's choice)"
    """
    n_rows = _length(units)
    if n_rows == 0:
        raise OodevalError("the table has no rows; the answer needs one row per algorithm")
    names = list(measures) if measures is not None else [m for m in ANSWER_MEASURES if m in units]
    if measures is None and len(names) < len(ANSWER_MEASURES):  # a subset chosen by the user
        names = [m for m in MEASURES if m in units]
    if not names:
        raise OodevalError(f"the table has no measure column; give one of {', '.join(MEASURES)}")
    has_ideal = "ideal" in units
    values = list(dict.fromkeys([*names, *(["ideal"] if has_ideal else [])]))
    table = {k: _column(units, k) if k in units else np.full(n_rows, "", object) for k in UNIT_KEYS}
    table.update({k: _column(units, k) for k in values})
    means = seed_means(table, names)
    picked = selections(means, values)
    parts = []
    for rows in _groups(table["scenario"]):
        scenario = _python(table["scenario"][rows[0]])
        n_seeds = len(np.unique(_codes(table["seed"][rows])))
        mine = np.flatnonzero(picked["scenario"] == scenario) if len(picked["scenario"]) else []
        label = f"{scenario}: " if str(scenario) != "" else ""
        algorithms = list(dict.fromkeys(str(a) for a in table["algorithm"][rows]))
        if len(algorithms) == 1:
            parts.append(f"{label}only one algorithm ({algorithms[0]}), so nothing to choose")
        elif len(mine) == 0:
            parts.append(f"{label}no algorithm has every seed, so there is no pick")
        else:
            seeds = how or (f"on each measure's mean over {n_seeds} seeds" if n_seeds > 1 else "")
            parts.append(label + _picks_text(picked, mine, names, has_ideal, seeds))
    return ". ".join(parts)


def _picks_text(
    picked: Table, rows: np.ndarray, names: Sequence[str], has_ideal: bool, how: str
) -> str:
    """``m1 picks A; m2 picks B[; the ideal measure picks C] (...)`` for one scenario."""
    tied = {str(picked["measure"][k]): tuple(picked["tied"][k]) for k in rows}
    chosen = {str(picked["measure"][k]): str(picked["selected"][k]) for k in rows}

    def pick(name: str) -> str:
        return "|".join(tied[name]) + (" (tied)" if len(tied[name]) > 1 else "")

    said = [f"{measure_label(m)} picks {pick(m)}" for m in names]
    if has_ideal:
        said.append(f"the ideal measure picks {pick('ideal')}")
    notes = []
    if len(names) > 1:
        notes.append("they agree" if len({tied[m] for m in names}) == 1 else "they disagree")
    if has_ideal:
        right = [measure_label(m) for m in names if chosen[m] == chosen["ideal"]]
        if not right:
            notes.append(
                "neither picks the ideal's choice"
                if len(names) == 2
                else "none picks the ideal's choice"
                if len(names) > 2
                else "it misses the ideal's choice"
            )
        elif len(right) == len(names) and len(names) == 2:
            notes.append("both pick the ideal's choice")
        else:
            notes.append(
                f"{', '.join(right)} pick{'s' if len(right) == 1 else ''} the ideal's choice"
            )
    if how:
        notes.append(how)
    return "; ".join(said) + (f" ({'; '.join(notes)})" if notes else "")


# ----------------------------------------------------------------------------- asymptotics


def distance_to_ideal(
    units: Mapping[str, Any],
    measures: Sequence[str],
    *,
    size: str,
    group: Sequence[str] = (),
) -> Table:
    """Mean |R^IDEAL - R^measure| as `size` grows, normalised to the smallest size of its group.

    Section 6.3 / Figure 7 of the worst+gap paper: within each `group` (scenarios that differ
    only in `size`, e.g. family and Ratio with size = Scale), per size the mean over algorithms
    and seeds (``algorithm = "(all)"``) and per algorithm the mean over seeds of |ideal -
    measure|; ``normalized`` divides by the same quantity at the group's smallest size
    (NaN when that is 0 or missing).

    Parameters
    ----------
    units : table with ``ideal``, ``n_given``, ``algorithm``, `size` (integers), the `group`
        columns and the measures; rows without a size must be left out by the caller
    measures : measure columns
    size : the column that orders the sizes (e.g. ``scale``, or ``n_given``)
    group : columns whose values define the groups (none: one group)

    Returns
    -------
    Table: the group columns, `size`, n_given (of the first unit at that size), measure,
    algorithm, abs_diff, normalized, ``reference_<size>``; per group and measure the ``(all)``
    rows, then one algorithm after another, sizes ascending
    """
    needed = dict.fromkeys([*group, size, "n_given", "algorithm", "ideal", *measures])
    cols = {k: _column(units, k) for k in needed}
    ideal = cols["ideal"].astype(np.float64)
    groups = _groups(*(cols[g] for g in group)) if group else [np.arange(len(ideal))]
    records = []
    for rows in groups:
        sizes = cols[size][rows].astype(np.int64)
        reference = int(sizes.min())
        first = {int(s): int(cols["n_given"][rows[sizes == s][0]]) for s in np.unique(sizes)}
        lead = {g: _python(cols[g][rows[0]]) for g in group}
        for measure in measures:
            diff = np.abs(ideal[rows] - cols[measure][rows].astype(np.float64))
            parts = [("(all)", np.arange(len(rows)))]
            parts += [
                (_python(cols["algorithm"][rows[i[0]]]), i)
                for i in _groups(cols["algorithm"][rows])
            ]
            for algorithm, idx in parts:
                at_reference = diff[idx][sizes[idx] == reference]
                base = float(at_reference.mean()) if at_reference.size else np.nan
                for s in np.unique(sizes[idx]):
                    value = float(diff[idx][sizes[idx] == s].mean())
                    records.append(
                        {
                            **lead,
                            size: int(s),
                            "n_given": first[int(s)],
                            "measure": measure,
                            "algorithm": algorithm,
                            "abs_diff": value,
                            "normalized": value / base if base and not np.isnan(base) else np.nan,
                            f"reference_{size}": reference,
                        }
                    )
    columns = [*group, size, "n_given", "measure", "algorithm", "abs_diff", "normalized"]
    return _as_table(records, [*columns, f"reference_{size}"])


# ----------------------------------------------------------------------------- baseline


def baseline_vs_best(
    units: Mapping[str, Any], measures: Sequence[str], *, baseline: str = "ERM"
) -> Table:
    """A baseline algorithm against the ideal-best algorithm under each measure, per scenario.

    Section 6.4 / Figure 1 of the worst+gap paper. The ideal-best algorithm A*_IDEAL of a
    scenario is selected on the seed-averaged ideal measure, exactly as `seed_means` then
    `selections` select it (so only algorithms that ran every seed compete); for it and for
    `baseline`, each measure's mean and std (ddof=1) over seeds. Scenarios without the baseline
    are left out.

    Returns
    -------
    Table: scenario, measure, baseline, baseline_mean, baseline_std, best_algorithm, best_mean,
    best_std
    """
    value_names = list(dict.fromkeys(["ideal", *measures]))
    cols = {k: _column(units, k) for k in (*UNIT_KEYS, *value_names)}
    averaged = seed_means({k: cols[k] for k in (*UNIT_KEYS, "ideal")}, ["ideal"])
    records = []
    for rows in _groups(cols["scenario"]):
        algorithms = [str(a) for a in cols["algorithm"][rows]]
        if baseline not in algorithms:
            continue
        scenario = _python(cols["scenario"][rows[0]])
        mine = averaged["scenario"] == scenario
        if not mine.any():  # no algorithm ran every seed: no seed average to select on
            continue
        names = [str(a) for a in averaged["algorithm"][mine]]
        best = select_algorithm(averaged["ideal"][mine], names).name
        of_baseline = rows[np.array(algorithms) == baseline]
        of_best = rows[np.array(algorithms) == best]
        for measure in measures:
            base_mean, base_std = mean_std(cols[measure][of_baseline].astype(np.float64))
            best_mean, best_std = mean_std(cols[measure][of_best].astype(np.float64))
            records.append(
                {
                    "scenario": scenario,
                    "measure": measure,
                    "baseline": baseline,
                    "baseline_mean": base_mean,
                    "baseline_std": base_std,
                    "best_algorithm": best,
                    "best_mean": best_mean,
                    "best_std": best_std,
                }
            )
    columns = ["scenario", "measure", "baseline", "baseline_mean", "baseline_std"]
    return _as_table(records, [*columns, "best_algorithm", "best_mean", "best_std"])
