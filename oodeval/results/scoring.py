"""Score validated long-form results: every measure per algorithm and seed, and, when the file has
`all` rows, the ideal measure, correlations with it, selections and their degradation.

All tables are pandas DataFrames; `ScoreTables.to_dict()` gives JSON-ready records (NaN -> None).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from oodeval.errors import OodevalError
from oodeval.measures.domain import MEASURES, domain_measures, ideal
from oodeval.measures.meta import (
    bootstrap_correlation_ci,
    mean_std,
    rank_correlation,
    select_algorithm,
)
from oodeval.results.longform import LongResults

__all__ = ["ScoreTables", "score_results"]

_NEEDS_THREE = ("worst_plus_gap", "gap_only")


@dataclass
class ScoreTables:
    """Every table `oodeval measures` prints.

    Attributes
    ----------
    measures : one row per (seed, algorithm); a column per measure, plus ``ideal`` with all rows
    correlations : (seed, measure, spearman, kendall) with the ideal; None without all rows or
        with a single algorithm
    correlation_summary : (measure, n_seeds, spearman_mean, spearman_std, kendall_mean,
        kendall_std) over seeds, std with ddof=1; None unless correlations exist and seeds > 1
    selections : (seed, measure, selected, tied, score[, ideal_of_selected, degradation])
    degradation_summary : (measure, n_seeds, degradation_mean, degradation_std); None unless
        ideal exists and seeds > 1
    notes : human-readable remarks (skipped or undefined parts)
    info : counts and environment names
    """

    measures: pd.DataFrame
    correlations: pd.DataFrame | None
    correlation_summary: pd.DataFrame | None
    selections: pd.DataFrame
    degradation_summary: pd.DataFrame | None
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def sections(self) -> list[tuple[str, str, pd.DataFrame]]:
        """(key, title, table) for every non-empty table, in print order."""
        out = [("measures", "Measures per algorithm (lower is better)", self.measures)]
        if self.correlations is not None:
            title = "Rank correlation with the ideal measure (Spearman rho; Kendall tau-b, scipy)"
            if "spearman_low" in self.correlations.columns:
                title += "; percentile bootstrap intervals resampling algorithms"
            out.append(("correlations", title, self.correlations))
        if self.correlation_summary is not None:
            out.append(
                (
                    "correlation_summary",
                    "Correlation with the ideal measure over seeds (mean, std with ddof=1)",
                    self.correlation_summary,
                )
            )
        title = "Selected algorithm per measure (argmin; ties -> first name in sorted order)"
        if "degradation" in self.selections.columns:
            title += "; degradation = |R_IDEAL(A*_IDEAL) - R_IDEAL(A*_measure)|"
        out.append(("selections", title, self.selections))
        if self.degradation_summary is not None:
            out.append(
                (
                    "degradation_summary",
                    "Selection degradation over seeds (mean, std with ddof=1)",
                    self.degradation_summary,
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: info, one list of records per table, notes; NaN becomes None."""
        out: dict[str, Any] = {"info": self.info}
        for key, _, table in self.sections():
            out[key] = [
                {k: _json_value(v) for k, v in rec.items()} for rec in table.to_dict("records")
            ]
        out["notes"] = list(self.notes)
        return out


def _json_value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    return v


def score_results(
    results: LongResults,
    *,
    measures: Sequence[str] | None = None,
    bootstrap: int = 0,
    confidence: float = 0.95,
    bootstrap_seed: int = 0,
) -> ScoreTables:
    """Compute every table of `oodeval measures` from validated results.

    Parameters
    ----------
    results : LongResults from `oodeval.results.longform.read_results`
    measures : names from `oodeval.measures.MEASURES` (default: all)
    bootstrap : int
        When > 0, add percentile bootstrap intervals (resampling algorithms, this many
        resamples; see `oodeval.measures.meta.bootstrap_correlation_ci`) to the correlations:
        columns spearman_low, spearman_high, kendall_low, kendall_high, n_valid.
    confidence, bootstrap_seed : interval level and resampling seed for `bootstrap`; every
        measure uses the same resamples of algorithms, so their intervals are comparable

    Returns
    -------
    ScoreTables
    """
    names = list(MEASURES) if measures is None else list(measures)
    unknown = [n for n in names if n not in MEASURES]
    if unknown:
        raise OodevalError(
            f"unknown measure(s) {', '.join(unknown)}; choose from {', '.join(MEASURES)}"
        )
    n_given = len(results.given_environments)
    if n_given <= 2 and any(n in _NEEDS_THREE for n in names):
        cheap = ",".join(n for n in names if n not in _NEEDS_THREE) or "average,worst,best,gap"
        raise OodevalError(
            f"worst+gap (Eq. 6) is undefined for N={n_given} given environments (1/(N-2)); it "
            f"needs >= 3 environments: add loo rows or pass --measures {cheap}"
        )
    values = domain_measures(results.loo, names)  # each (n_seeds, n_algorithms)
    ideal_values = None if results.full is None else np.asarray(ideal(results.full))

    seeds, algs = results.seeds, results.algorithms
    notes: list[str] = []
    rows = []
    for s, seed in enumerate(seeds):
        for a, alg in enumerate(algs):
            row: dict[str, Any] = {"seed": seed, "algorithm": alg}
            row.update({n: float(np.asarray(values[n])[s, a]) for n in names})
            if ideal_values is not None:
                row["ideal"] = float(ideal_values[s, a])
            rows.append(row)
    measures_df = pd.DataFrame(rows)

    correlations = None
    correlation_summary = None
    if ideal_values is not None and len(algs) < 2:
        notes.append(
            f"correlations with the ideal measure need >= 2 algorithms, got 1 ({algs[0]}); "
            "they are skipped"
        )
    elif ideal_values is not None:
        corr_rows = []
        for s, seed in enumerate(seeds):
            for n in names:
                r = rank_correlation(np.asarray(values[n])[s], ideal_values[s])
                if math.isnan(r["spearman"]):
                    const = "the ideal measure" if np.ptp(np.round(ideal_values[s], 12)) == 0 else n
                    notes.append(
                        f"correlation of {n} with the ideal is undefined"
                        + (f" for seed {seed}" if results.has_seed else "")
                        + f": {const} is the same for every algorithm"
                    )
                row = {"seed": seed, "measure": n, **r}
                if bootstrap > 0:
                    ci = bootstrap_correlation_ci(
                        np.asarray(values[n])[s],
                        ideal_values[s],
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
                corr_rows.append(row)
        correlations = pd.DataFrame(corr_rows)
        if len(seeds) > 1:
            summary = []
            for n in names:
                sub = correlations[correlations["measure"] == n]
                rho_m, rho_s = mean_std(sub["spearman"], ddof=1)
                tau_m, tau_s = mean_std(sub["kendall"], ddof=1)
                summary.append(
                    {
                        "measure": n,
                        "n_seeds": len(sub),
                        "spearman_mean": rho_m,
                        "spearman_std": rho_s,
                        "kendall_mean": tau_m,
                        "kendall_std": tau_s,
                    }
                )
            correlation_summary = pd.DataFrame(summary)

    sel_rows = []
    selectors = names + (["ideal"] if ideal_values is not None else [])
    for s, seed in enumerate(seeds):
        best_true = None
        if ideal_values is not None:
            best_true = select_algorithm(ideal_values[s], algs)
        for n in selectors:
            scores = ideal_values[s] if n == "ideal" else np.asarray(values[n])[s]
            sel = select_algorithm(scores, algs)
            row = {
                "seed": seed,
                "measure": n,
                "selected": sel.name,
                "tied": ", ".join(sel.tied) if len(sel.tied) > 1 else "",
                "score": float(scores[sel.index]),
            }
            if ideal_values is not None and best_true is not None:
                row["ideal_of_selected"] = float(ideal_values[s, sel.index])
                row["degradation"] = float(
                    abs(ideal_values[s, best_true.index] - ideal_values[s, sel.index])
                )
            if len(sel.tied) > 1:
                notes.append(
                    f"{n} ties between {', '.join(sel.tied)}"
                    + (f" for seed {seed}" if results.has_seed else "")
                    + f"; selected {sel.name} (first in sorted order)"
                )
            sel_rows.append(row)
    selections = pd.DataFrame(sel_rows)

    degradation_summary = None
    if ideal_values is not None and len(seeds) > 1:
        summary = []
        for n in selectors:
            sub = selections[selections["measure"] == n]
            m, sd = mean_std(sub["degradation"], ddof=1)
            summary.append(
                {
                    "measure": n,
                    "n_seeds": len(sub),
                    "degradation_mean": m,
                    "degradation_std": sd,
                }
            )
        degradation_summary = pd.DataFrame(summary)

    if not results.has_seed:
        measures_df = measures_df.drop(columns="seed")
        selections = selections.drop(columns="seed")
        if correlations is not None:
            correlations = correlations.drop(columns="seed")

    info = {
        "algorithms": list(algs),
        "seeds": list(seeds) if results.has_seed else [],
        "given_environments": list(results.given_environments),
        "all_environments": list(results.all_environments),
        "n_given": n_given,
        "n_all": len(results.all_environments),
        "value_column": results.value_column,
        "units": "error fractions in [0, 1]",
        "kendall_variant": "tau-b (scipy.stats.kendalltau)",
        "std_ddof": 1,
    }
    return ScoreTables(
        measures=measures_df,
        correlations=correlations,
        correlation_summary=correlation_summary,
        selections=selections,
        degradation_summary=degradation_summary,
        notes=notes,
        info=info,
    )
