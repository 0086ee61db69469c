"""oodeval.measures: the evaluation measures (pure numpy/scipy).

- `oodeval.measures.domain`: worst+gap paper measures (average, worst, best, gap, worst+gap, the
  Table 5 ablations, ideal) and NICO++ Eq. 5 / WILDS-style per-domain summaries.
- `oodeval.measures.meta`: meta-evaluation across algorithms (rank correlation with the ideal
  measure, selection, degradation, seed statistics, bootstrap intervals).
- `oodeval.measures.openworld`: the OpenworldAUC suite (OpenworldAUC, AUROC, the curve, scores
  from model outputs).
"""

from oodeval.measures.domain import (
    MEASURES,
    average,
    best,
    domain_average,
    domain_measures,
    domain_overall,
    domain_std,
    gap,
    gap_only,
    ideal,
    per_domain_summary,
    worst,
    worst_only,
    worst_plus_gap,
)
from oodeval.measures.meta import (
    Selection,
    bootstrap_correlation_ci,
    mean_std,
    rank_correlation,
    select_algorithm,
    selection_degradation,
)
from oodeval.measures.openworld import auroc, openworld_auc, openworld_curve, openworld_scores

__all__ = [
    "MEASURES",
    "Selection",
    "auroc",
    "average",
    "best",
    "bootstrap_correlation_ci",
    "domain_average",
    "domain_measures",
    "domain_overall",
    "domain_std",
    "gap",
    "gap_only",
    "ideal",
    "mean_std",
    "openworld_auc",
    "openworld_curve",
    "openworld_scores",
    "per_domain_summary",
    "rank_correlation",
    "select_algorithm",
    "selection_degradation",
    "worst",
    "worst_only",
    "worst_plus_gap",
]
