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
from oodeval.measures.domain import MEASURES, check_measures, undefined_measures
from oodeval.measures.meta import TIE_DECIMALS
from oodeval.measures.meta_tables import (
    Table,
    correlation_summary,
    degradation_summary,
    ideal_correlations,
    selections,
    unit_measures,
)
from oodeval.results.longform import LongResults

__all__ = ["ScoreTables", "score_results"]


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

    All numbers come from `oodeval.measures.meta_tables` (the layer `oodeval study analyze`
    uses too): `unit_measures`, `ideal_correlations`, `correlation_summary`, `selections` and
    `degradation_summary`; this function picks their columns and words the notes.

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
    names = _measure_names(results, measures)
    units = unit_measures(results.errors_table(), names)
    units["seed"] = np.asarray(results.seeds, dtype=object)[units["seed"]]
    units["algorithm"] = np.asarray(results.algorithms, dtype=object)[units["algorithm"]]
    has_ideal = "ideal" in units
    measures_df = pd.DataFrame(units)[["seed", "algorithm", *names, *(["ideal"] * has_ideal)]]
    notes: list[str] = list(results.notes)
    correlations = correlation_table = None
    if has_ideal and len(results.algorithms) < 2:
        notes.append(
            f"correlations with the ideal measure need >= 2 algorithms, got 1 "
            f"({results.algorithms[0]}); they are skipped"
        )
    elif has_ideal:
        correlations, correlation_table = _correlations(
            results, units, names, notes, bootstrap, confidence, bootstrap_seed
        )
    selectors = names + ["ideal"] * has_ideal
    selected, degradation = _selections(results, units, selectors, notes)
    if not results.has_seed:
        measures_df = measures_df.drop(columns="seed")
        selected = selected.drop(columns="seed")
        if correlations is not None:
            correlations = correlations.drop(columns="seed")
    return ScoreTables(
        measures=measures_df,
        correlations=correlations,
        correlation_summary=correlation_table,
        selections=selected,
        degradation_summary=degradation,
        notes=notes,
        info=_info(results),
    )


def _measure_names(results: LongResults, measures: Sequence[str] | None) -> list[str]:
    names = check_measures(measures)
    n_given = len(results.given_environments)
    undefined = undefined_measures(names, n_given)
    if undefined:
        cheap = ",".join(n for n in names if n not in undefined) or ",".join(
            n for n in MEASURES if not undefined_measures([n], n_given)
        )
        raise OodevalError(
            f"worst+gap (Eq. 6) is undefined for N={n_given} given environments (1/(N-2)); it "
            f"needs >= 3 environments: add loo rows or pass --measures {cheap}"
        )
    return names


def _seed_text(results: LongResults, seed: str) -> str:
    return f" for seed {seed}" if results.has_seed else ""


def _correlations(
    results: LongResults,
    units: Table,
    names: list[str],
    notes: list[str],
    bootstrap: int,
    confidence: float,
    bootstrap_seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Per-seed correlations with the ideal, their summary over seeds (None for one seed), and a
    note for every undefined correlation."""
    table = ideal_correlations(
        units, names, bootstrap=bootstrap, confidence=confidence, bootstrap_seed=bootstrap_seed
    )
    for seed, measure, rho in zip(table["seed"], table["measure"], table["spearman"], strict=True):
        if math.isnan(rho):
            ideal = units["ideal"][units["seed"] == seed]
            const = "the ideal measure" if np.ptp(np.round(ideal, TIE_DECIMALS)) == 0 else measure
            notes.append(
                f"correlation of {measure} with the ideal is undefined"
                + _seed_text(results, seed)
                + f": {const} is the same for every algorithm"
            )
    columns = ["seed", "measure", "spearman", "kendall"]
    if bootstrap > 0:
        columns += ["spearman_low", "spearman_high", "kendall_low", "kendall_high", "n_valid"]
    summary = None
    if len(results.seeds) > 1:
        summary = pd.DataFrame(correlation_summary(table)).drop(
            columns=["scenario", "n_algorithms"]
        )
    return pd.DataFrame(table)[columns], summary


def _selections(
    results: LongResults, units: Table, selectors: list[str], notes: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The selection per seed and measure, the degradation over seeds (None without the ideal
    or with one seed), and a note for every tie."""
    table = selections(units, selectors)
    for seed, measure, name, tied in zip(
        table["seed"], table["measure"], table["selected"], table["tied"], strict=True
    ):
        if len(tied) > 1:
            notes.append(
                f"{measure} ties between {', '.join(tied)}"
                + _seed_text(results, seed)
                + f"; selected {name} (first in sorted order)"
            )
    frame = pd.DataFrame(table)
    frame["tied"] = [", ".join(t) if len(t) > 1 else "" for t in table["tied"]]
    columns = ["seed", "measure", "selected", "tied", "score"]
    summary = None
    if "degradation" in table:
        columns += ["ideal_of_selected", "degradation"]
        if len(results.seeds) > 1:
            summary = pd.DataFrame(degradation_summary(table)).drop(columns="scenario")
    return frame[columns], summary


def _info(results: LongResults) -> dict[str, Any]:
    return {
        "algorithms": list(results.algorithms),
        "seeds": list(results.seeds) if results.has_seed else [],
        "given_environments": list(results.given_environments),
        "all_environments": list(results.all_environments),
        "n_given": len(results.given_environments),
        "n_all": len(results.all_environments),
        "value_column": results.value_column,
        "units": "error fractions in [0, 1]",
        "kendall_variant": "tau-b (scipy.stats.kendalltau)",
        "std_ddof": 1,
    }
