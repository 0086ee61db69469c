"""The worst+gap paper's meta-evaluation tables over per-unit measures, as column tables:

- `ideal_correlations` and `correlation_summary`: Spearman's rho and Kendall's tau-b with the ideal
  measure across algorithms, per (scenario, seed), then mean and std over seeds (Section 5);
- `choices` and `degradation_summary`: the algorithm each measure chooses (Eq. 3/5/7) and the
  selection degradation |R^IDEAL(A*_IDEAL) - R^IDEAL(A*_measure)| (Section 6.1);
- `seed_means`: each algorithm's measures averaged over seeds (the choice on the seed average);
- `baseline_vs_best`: a baseline (ERM) against the ideal-best algorithm (Section 6.4);
- `ideal_bounds`: how often the ideal measure is at most a bound such as worst+gap (Theorem 3.4,
  Eq. 39) or worst;
- `distance_to_ideal`: how far each measure stays from the ideal measure as the number of
  environments grows (Section 6.3 / Figure 7).

Values are reduced in row order; ties are handled as in `oodeval.measures.meta.algorithm_choice`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oodeval.limits import check_confidence, check_resamples, check_seed
from oodeval.measures.meta._choice import algorithm_choice
from oodeval.measures.meta._correlation import (
    CONFIDENCE,
    bootstrap_correlation_ci,
    mean_std,
    rank_correlation,
)
from oodeval.measures.meta._units import (
    SEED_MEAN,
    UNIT_KEYS,
    Columns,
    column_array,
    group_codes,
    python_value,
    records_to_columns,
    row_groups,
)

__all__ = [
    "baseline_vs_best",
    "choices",
    "correlation_summary",
    "degradation_summary",
    "distance_to_ideal",
    "ideal_bounds",
    "ideal_correlations",
    "seed_means",
]


def ideal_correlations(
    units: Mapping[str, Any],
    measures: Sequence[str],
    *,
    bootstrap: int = 0,
    confidence: float = CONFIDENCE,
    bootstrap_seed: int = 0,
) -> Columns:
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
    Columns: scenario, seed, measure, spearman, kendall, n_algorithms[, spearman_low,
    spearman_high, kendall_low, kendall_high, n_valid]
    """
    check_resamples(bootstrap, "bootstrap")
    check_confidence(confidence)
    check_seed(bootstrap_seed, "bootstrap_seed")
    cols = {k: column_array(units, k) for k in (*UNIT_KEYS, "ideal", *measures)}
    records = []
    for idx in row_groups(cols["scenario"], cols["seed"]):
        ideal = cols["ideal"][idx].astype(np.float64)
        for measure in measures:
            scores = cols[measure][idx].astype(np.float64)
            row = {
                "scenario": python_value(cols["scenario"][idx[0]]),
                "seed": python_value(cols["seed"][idx[0]]),
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
    return records_to_columns(records, columns)


def correlation_summary(correlations: Mapping[str, Any]) -> Columns:
    """Mean and std (ddof=1) over seeds of each (scenario, measure)'s correlations.

    Parameters
    ----------
    correlations : table as `ideal_correlations` returns it

    Returns
    -------
    Columns: scenario, measure, n_seeds, n_algorithms (the fewest of any seed), spearman_mean,
    spearman_std, kendall_mean, kendall_std (std NaN for one seed; NaN correlations propagate)
    """
    cols = {
        k: column_array(correlations, k)
        for k in ("scenario", "measure", "spearman", "kendall", "n_algorithms")
    }
    records = []
    for idx in row_groups(cols["scenario"], cols["measure"]):
        rho_mean, rho_std = mean_std(cols["spearman"][idx])
        tau_mean, tau_std = mean_std(cols["kendall"][idx])
        records.append(
            {
                "scenario": python_value(cols["scenario"][idx[0]]),
                "measure": python_value(cols["measure"][idx[0]]),
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
    return records_to_columns(records, columns)


def choices(units: Mapping[str, Any], measures: Sequence[str]) -> Columns:
    """The algorithm each measure chooses per (scenario, seed), and what that choice costs.

    argmin of each measure over the algorithms of a (scenario, seed), ties to the first name in
    sorted order (`oodeval.measures.meta.algorithm_choice`, Eq. 3/5/7 of the worst+gap paper).
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
    Columns: scenario, seed, measure, selected, tied (tuple of every name tied at the minimum,
    sorted), score (the selected algorithm's value)[, ideal_of_selected, degradation,
    matches_ideal]
    """
    has_ideal = "ideal" in units
    needed = [*UNIT_KEYS, *measures] + (["ideal"] if has_ideal else [])
    cols = {k: column_array(units, k) for k in dict.fromkeys(needed)}
    records = []
    for idx in row_groups(cols["scenario"], cols["seed"]):
        names = [str(a) for a in cols["algorithm"][idx]]
        ideal = cols["ideal"][idx].astype(np.float64) if has_ideal else None
        best = algorithm_choice(ideal, names) if ideal is not None else None
        for measure in measures:
            scores = cols[measure][idx].astype(np.float64)
            chosen = algorithm_choice(scores, names)
            row = {
                "scenario": python_value(cols["scenario"][idx[0]]),
                "seed": python_value(cols["seed"][idx[0]]),
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
    return records_to_columns(records, columns)


def degradation_summary(selected: Mapping[str, Any]) -> Columns:
    """Mean and std (ddof=1) over seeds of each (scenario, measure)'s selection degradation.

    Parameters
    ----------
    selected : table as `choices` returns it for units with an ideal measure

    Returns
    -------
    Columns: scenario, measure, n_seeds, degradation_mean, degradation_std
    """
    cols = {k: column_array(selected, k) for k in ("scenario", "measure", "degradation")}
    records = []
    for idx in row_groups(cols["scenario"], cols["measure"]):
        mean, std = mean_std(cols["degradation"][idx])
        records.append(
            {
                "scenario": python_value(cols["scenario"][idx[0]]),
                "measure": python_value(cols["measure"][idx[0]]),
                "n_seeds": int(len(idx)),
                "degradation_mean": mean,
                "degradation_std": std,
            }
        )
    return records_to_columns(
        records, ["scenario", "measure", "n_seeds", "degradation_mean", "degradation_std"]
    )


def seed_means(units: Mapping[str, Any], measures: Sequence[str]) -> Columns:
    """Each algorithm's measures averaged over seeds, per scenario (seed label `SEED_MEAN`).

    Only algorithms with a unit for every seed of their scenario are averaged, so every mean is
    over the same seeds. Feed the result to `choices` for the choice on the seed average.

    Returns
    -------
    Columns: scenario, seed (``"mean"``), algorithm, and the mean of each measure (and of
    ``ideal`` when `units` has it)
    """
    value_names = list(dict.fromkeys([*measures, *(["ideal"] if "ideal" in units else [])]))
    cols = {k: column_array(units, k) for k in (*UNIT_KEYS, *value_names)}
    records = []
    for scenario_rows in row_groups(cols["scenario"]):
        n_seeds = len(np.unique(group_codes(cols["seed"][scenario_rows])))
        for idx in row_groups(cols["algorithm"][scenario_rows]):
            rows = scenario_rows[idx]
            if len(np.unique(group_codes(cols["seed"][rows]))) != n_seeds:
                continue
            record = {
                "scenario": python_value(cols["scenario"][rows[0]]),
                "seed": SEED_MEAN,
                "algorithm": python_value(cols["algorithm"][rows[0]]),
            }
            record.update({m: float(cols[m][rows].astype(np.float64).mean()) for m in value_names})
            records.append(record)
    return records_to_columns(records, [*UNIT_KEYS, *value_names])


def baseline_vs_best(
    units: Mapping[str, Any], measures: Sequence[str], *, baseline: str = "ERM"
) -> Columns:
    """A baseline algorithm against the ideal-best algorithm under each measure, per scenario.

    Section 6.4 / Figure 1 of the worst+gap paper. The ideal-best algorithm A*_IDEAL of a
    scenario is selected on the seed-averaged ideal measure, exactly as `seed_means` then
    `choices` choose it (so only algorithms that ran every seed compete); for it and for
    `baseline`, each measure's mean and std (ddof=1) over seeds. Scenarios without the baseline
    are left out.

    Returns
    -------
    Columns: scenario, measure, baseline, baseline_mean, baseline_std, best_algorithm, best_mean,
    best_std
    """
    value_names = list(dict.fromkeys(["ideal", *measures]))
    cols = {k: column_array(units, k) for k in (*UNIT_KEYS, *value_names)}
    averaged = seed_means({k: cols[k] for k in (*UNIT_KEYS, "ideal")}, ["ideal"])
    records = []
    for rows in row_groups(cols["scenario"]):
        algorithms = [str(a) for a in cols["algorithm"][rows]]
        if baseline not in algorithms:
            continue
        scenario = python_value(cols["scenario"][rows[0]])
        mine = averaged["scenario"] == scenario
        if not mine.any():  # no algorithm ran every seed: no seed average to select on
            continue
        names = [str(a) for a in averaged["algorithm"][mine]]
        best = algorithm_choice(averaged["ideal"][mine], names).name
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
    return records_to_columns(records, [*columns, "best_algorithm", "best_mean", "best_std"])


def ideal_bounds(
    units: Mapping[str, Any], bounds: Sequence[str] = ("worst_plus_gap", "worst")
) -> Columns:
    """Per scenario, how many (algorithm, seed) units have ideal <= each bound (Eq. 39).

    Theorem 3.4 of the worst+gap paper, carried to the trained models in Eq. 39, bounds the
    ideal measure (Eq. 4) by worst+gap (Eq. 6) under its assumptions; this counts how often the
    bound held: ``ideal <= bound`` compared exactly, float64. With ``worst`` as a bound it says
    how often the worst LOO error alone (the bound without its gap term) was enough.

    Parameters
    ----------
    units : table with scenario, ``ideal`` and the `bounds` columns (e.g. `unit_measures`);
        ``n_given`` is reported when present
    bounds : measure columns to test as upper bounds of ``ideal``

    Returns
    -------
    Columns: scenario[, n_given], n_units, and per bound ``b``: ``within_<b>`` (units with
    ideal <= b) and ``share_within_<b>`` (that count / n_units)

    >>> t = ideal_bounds({"scenario": ["s", "s"], "ideal": [0.5, 0.7],
    ...                   "worst_plus_gap": [0.6, 0.6], "worst": [0.4, 0.5]})
    >>> t["within_worst_plus_gap"].tolist(), t["share_within_worst_plus_gap"].tolist()
    ([1], [0.5])
    """
    has_n = "n_given" in units
    cols = {k: column_array(units, k) for k in ("scenario", "ideal", *bounds)}
    if has_n:
        cols["n_given"] = column_array(units, "n_given")
    records = []
    for idx in row_groups(cols["scenario"]):
        ideal = cols["ideal"][idx].astype(np.float64)
        row: dict[str, Any] = {"scenario": python_value(cols["scenario"][idx[0]])}
        if has_n:
            row["n_given"] = python_value(cols["n_given"][idx[0]])
        row["n_units"] = int(len(idx))
        for bound in bounds:
            within = int(np.count_nonzero(ideal <= cols[bound][idx].astype(np.float64)))
            row[f"within_{bound}"] = within
            row[f"share_within_{bound}"] = within / len(idx)
        records.append(row)
    columns = ["scenario", *(["n_given"] if has_n else []), "n_units"]
    columns += [f"{k}_{b}" for b in bounds for k in ("within", "share_within")]
    return records_to_columns(records, columns)


def distance_to_ideal(
    units: Mapping[str, Any],
    measures: Sequence[str],
    *,
    size: str,
    group: Sequence[str] = (),
) -> Columns:
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
    Columns: the group columns, `size`, n_given (of the first unit at that size), measure,
    algorithm, abs_diff, normalized, ``reference_<size>``; per group and measure the ``(all)``
    rows, then one algorithm after another, sizes ascending
    """
    needed = dict.fromkeys([*group, size, "n_given", "algorithm", "ideal", *measures])
    cols = {k: column_array(units, k) for k in needed}
    ideal = cols["ideal"].astype(np.float64)
    groups = row_groups(*(cols[g] for g in group)) if group else [np.arange(len(ideal))]
    records = []
    for rows in groups:
        sizes = cols[size][rows].astype(np.int64)
        reference = int(sizes.min())
        first = {int(s): int(cols["n_given"][rows[sizes == s][0]]) for s in np.unique(sizes)}
        lead = {g: python_value(cols[g][rows[0]]) for g in group}
        for measure in measures:
            diff = np.abs(ideal[rows] - cols[measure][rows].astype(np.float64))
            parts = [("(all)", np.arange(len(rows)))]
            parts += [
                (python_value(cols["algorithm"][rows[i[0]]]), i)
                for i in row_groups(cols["algorithm"][rows])
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
    return records_to_columns(records, [*columns, f"reference_{size}"])
