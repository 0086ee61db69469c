"""What every output says in words, and the numbers behind the words:

- the verdict: does one measure order the algorithms more like the ideal measure than another,
  and how sure are we (paired bootstrap intervals of Spearman's rho), and the verdict in words;
- the one-line answer every output opens with: which algorithm each measure picks, and whether
  the measures disagree;
- the caveats: the warnings every output gives when its numbers rest on too little (too few
  algorithms for a rank correlation, too few environments for a measure's pick).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.limits import check_confidence, check_count, check_resamples, check_seed
from oodeval.measures.meta._choice import TIE_DECIMALS, tie_text
from oodeval.measures.meta._correlation import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    paired_spearman_ci,
    spearman_critical_value,
)
from oodeval.measures.meta._tables import choices, seed_means
from oodeval.measures.meta._units import (
    UNIT_KEYS,
    Columns,
    column_array,
    group_codes,
    python_value,
    records_to_columns,
    row_count,
    row_groups,
)
from oodeval.measures.registry import measure_columns, measure_label, measure_names

__all__ = [
    "ANSWER_MEASURES",
    "MIN_INTERVAL_ALGORITHMS",
    "MIN_PICK_ENVIRONMENTS",
    "MIN_VERDICT_ALGORITHMS",
    "TRACKING_RHO",
    "VERDICTS",
    "answer_line",
    "answer_parts",
    "correlation_verdicts",
    "environment_warning",
    "interval_warning",
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
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
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
    confidence: float = CONFIDENCE,
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


ANSWER_MEASURES = ("worst_plus_gap", "average")
"""The measures the answer line compares by default: the worst+gap paper's and the usual one."""


def answer_line(
    units: Mapping[str, Any], measures: Sequence[str] | None = None, *, how: str | None = None
) -> str:
    """The one-line answer: which algorithm each measure picks, and whether they disagree.

    Every output that scores algorithms opens with it (`oodeval measures`, `oodeval import
    domainbed`, both HTML reports, `oodeval.Scores.answer`). Per scenario:

    - each measure picks the algorithm with the lowest value (`choices`); an algorithm tied
      at the minimum is named with the others, joined by `TIE_SEPARATOR` (``|``), and marked
      ``(tied)``;
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
        every LOO measure it has: `oodeval.measures.registry.measure_columns`)
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
    parts = answer_parts(units, measures, how=how)
    return ". ".join(f"{scenario}: {text}" if scenario else text for scenario, text in parts)


def answer_parts(
    units: Mapping[str, Any], measures: Sequence[str] | None = None, *, how: str | None = None
) -> list[tuple[str, str]]:
    """`answer_line` cut into its scenarios: one ``(scenario, answer)`` pair per scenario, the
    scenario's label left out of the answer (``""`` for a table without scenarios).

    The reports show one line per scenario from these pairs; `answer_line` joins them, so both
    say the same words. Parameters as `answer_line`'s.

    >>> units = {"scenario": ["s1"] * 2 + ["s2"] * 2, "algorithm": ["ERM", "IRM"] * 2,
    ...          "average": [0.2, 0.3, 0.3, 0.2], "worst_plus_gap": [0.4, 0.5, 0.6, 0.5]}
    >>> answer_parts(units)
    [('s1', 'worst+gap picks ERM; average picks ERM (they agree)'), \
('s2', 'worst+gap picks IRM; average picks IRM (they agree)')]
    """
    n_rows = row_count(units)
    if n_rows == 0:
        raise OodevalError("the table has no rows; the answer needs one row per algorithm")
    names = list(measures) if measures is not None else [m for m in ANSWER_MEASURES if m in units]
    if measures is None and len(names) < len(ANSWER_MEASURES):  # a subset chosen by the user
        names = measure_columns(list(units))
    if not names:
        raise OodevalError(
            f"the table has no measure column; give one of {', '.join(measure_names())}"
        )
    has_ideal = "ideal" in units
    values = list(dict.fromkeys([*names, *(["ideal"] if has_ideal else [])]))
    table = {
        k: column_array(units, k) if k in units else np.full(n_rows, "", object) for k in UNIT_KEYS
    }
    table.update({k: column_array(units, k) for k in values})
    means = seed_means(table, names)
    picked = choices(means, values)
    parts: list[tuple[str, str]] = []
    for rows in row_groups(table["scenario"]):
        scenario = python_value(table["scenario"][rows[0]])
        n_seeds = len(np.unique(group_codes(table["seed"][rows])))
        mine = (
            np.flatnonzero(picked["scenario"] == scenario)
            if len(picked["scenario"])
            else np.empty(0, dtype=np.intp)
        )
        label = str(scenario)
        algorithms = list(dict.fromkeys(str(a) for a in table["algorithm"][rows]))
        if len(algorithms) == 1:
            parts.append((label, f"only one algorithm ({algorithms[0]}), so nothing to choose"))
        elif len(mine) == 0:
            parts.append((label, "no algorithm has every seed, so there is no pick"))
        else:
            seeds = how or (f"on each measure's mean over {n_seeds} seeds" if n_seeds > 1 else "")
            parts.append((label, _picks_text(picked, mine, names, has_ideal, seeds)))
    return parts


def _picks_text(
    picked: Columns, rows: np.ndarray, names: Sequence[str], has_ideal: bool, how: str
) -> str:
    """``m1 picks A; m2 picks B[; the ideal measure picks C] (...)`` for one scenario."""
    tied = {str(picked["measure"][k]): tuple(picked["tied"][k]) for k in rows}
    chosen = {str(picked["measure"][k]): str(picked["selected"][k]) for k in rows}

    def pick(name: str) -> str:
        return tie_text(tied[name]) + (" (tied)" if len(tied[name]) > 1 else "")

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
    n = check_count(n_algorithms, "n_algorithms")
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
