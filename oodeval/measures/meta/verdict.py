"""The verdict: does one measure order the algorithms more like the ideal measure than another,
and how sure are we (paired bootstrap intervals of Spearman's rho); and the verdict in words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.limits import check_confidence, check_count, check_resamples, check_seed
from oodeval.measures.domain import measure_label
from oodeval.measures.meta.choice import TIE_DECIMALS
from oodeval.measures.meta.columns import (
    UNIT_KEYS,
    Columns,
    column_array,
    group_codes,
    python_value,
    records_to_columns,
    row_groups,
)
from oodeval.measures.meta.correlation import paired_spearman_ci

__all__ = [
    "MIN_VERDICT_ALGORITHMS",
    "TRACKING_RHO",
    "VERDICTS",
    "correlation_verdicts",
    "tracks_ideal",
    "verdict_sentence",
]

VERDICTS = (
    "clearly ahead",
    "ahead, not clearly",
    "tied",
    "behind, not clearly",
    "clearly behind",
    "undefined",
)
"""What `correlation_verdicts` says of a measure against a baseline in one scenario. The words
say what the interval says: "clearly" only when the interval of the difference excludes 0, and
"not clearly" when it covers 0, so a sign alone is never read as a lead."""

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
) -> Columns:
    """Per scenario: does `measure` order the algorithms more like the ideal measure than
    `baseline` does, and how sure are we?

    Spearman's rho of each measure with the ideal measure (Section 5 of the worst+gap paper) and
    paired bootstrap intervals over algorithms (`oodeval.measures.meta.paired_spearman_ci`):
    rho is the mean over seeds of the per-seed rho (Table 1's mean), each resample draws the
    algorithms once for every seed and both measures. The seeds that enter are those with at
    least `min_algorithms` algorithms (`MIN_VERDICT_ALGORITHMS`); in a complete study, all.

    ``verdict`` (one of `VERDICTS`) reads ``difference`` = rho_measure - rho_baseline: "tied"
    when it is 0 (to 1e-12); "clearly ahead" / "clearly behind" when its `confidence` interval
    excludes 0; "ahead, not clearly" / "behind, not clearly" by its sign when the interval
    covers 0; "undefined" when no seed has enough
    algorithms or a measure (or the ideal measure) is equal for every algorithm of a seed, so
    rho is undefined; ``reason`` then says which (else it is empty).

    Returns
    -------
    Columns: scenario, n_seeds (that entered), n_seeds_left_out, n_algorithms (fewest of a seed
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
    check_resamples(n_resamples, "n_resamples", minimum=1)
    check_confidence(confidence)
    check_seed(bootstrap_seed, "bootstrap_seed")
    check_count(min_algorithms, "min_algorithms", minimum=2, what="a rank correlation needs two")
    cols = {k: column_array(units, k) for k in dict.fromkeys((*UNIT_KEYS, "ideal", *names))}
    options: dict[str, Any] = {
        "n_resamples": n_resamples,
        "confidence": confidence,
        "seed": bootstrap_seed,
    }
    records = []
    for rows in row_groups(cols["scenario"]):
        seeds, matrices = _seed_by_algorithm(cols, rows, ["ideal", *names])
        counts = (~np.isnan(matrices["ideal"])).sum(axis=1)
        used = counts >= min_algorithms
        record: dict[str, Any] = {
            "scenario": python_value(cols["scenario"][rows[0]]),
            "n_seeds": int(used.sum()),
            "n_seeds_left_out": int((~used).sum()),
            "n_algorithms": int(counts[used].min()) if used.any() else int(counts.max()),
        }
        nan_ci: dict[str, Any] = {"first": np.nan, "second": np.nan, "difference": np.nan}
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
    return records_to_columns(records, columns)


def _seed_by_algorithm(
    cols: dict[str, np.ndarray], rows: np.ndarray, values: Sequence[str]
) -> tuple[list[Any], dict[str, np.ndarray]]:
    """Seed labels and one (n_seeds, n_algorithms) matrix per value column; NaN = no unit."""
    seed = group_codes(cols["seed"][rows])
    algorithm = group_codes(cols["algorithm"][rows])
    shape = (int(seed.max()) + 1, int(algorithm.max()) + 1)
    if len(np.unique(seed * shape[1] + algorithm)) < len(rows):
        raise OodevalError(
            f"scenario {python_value(cols['scenario'][rows[0]])} has two rows for one (seed, "
            "algorithm); keep one row per unit"
        )
    labels = [python_value(cols["seed"][rows[idx[0]]]) for idx in row_groups(seed)]
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
        return "clearly ahead" if record["difference_low"] > 0 else "ahead, not clearly"
    return "clearly behind" if record["difference_high"] < 0 else "behind, not clearly"


TRACKING_RHO = 0.5
"""A measure *tracks the ideal measure well* in a scenario when its mean Spearman's rho with the
ideal measure is at least this and the lower end of its bootstrap interval is above 0
(`tracks_ideal`)."""


def tracks_ideal(rho: float, low: float) -> bool:
    """Whether a measure tracks the ideal measure well: mean rho >= `TRACKING_RHO` (0.5) and
    the lower end `low` of its bootstrap interval > 0. NaN (undefined) is never tracking.

    >>> tracks_ideal(0.8, 0.3), tracks_ideal(0.55, -0.2), tracks_ideal(0.4, 0.1)
    (True, False, False)
    """
    try:
        rho, low = float(rho), float(low)
    except (TypeError, ValueError, OverflowError):
        raise OodevalError(f"rho and low must be numbers, got {rho!r} and {low!r}") from None
    return bool(np.isfinite(rho) and np.isfinite(low) and rho >= TRACKING_RHO and low > 0)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _rho_text(verdicts: Mapping[str, Any], name: str) -> str:
    rho, low, high = (column_array(verdicts, f"rho_{name}{s}") for s in ("", "_low", "_high"))
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

    >>> table = {"verdict": np.array(["behind, not clearly", *["ahead, not clearly"] * 2]),
    ...          "reason": np.array([""] * 3),
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
    check_confidence(confidence)
    verdict = [str(v) for v in column_array(verdicts, "verdict")]
    reasons = [str(r) for r in column_array(verdicts, "reason")]
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
        rho, low = (column_array(verdicts, f"rho_{name}{s}").astype(float) for s in ("", "_low"))
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
