"""oodeval.measures: the evaluation measures (pure numpy/scipy).

- `oodeval.measures.registry`: the one registry of measures (`register_measure`,
  `register_measure_family`, `get_measure` for a name or a spec such as ``cvar:alpha=0.25``,
  `measure_names`, `measure_code_digest`); every list of measure names comes from it.
- `oodeval.measures.domain`: worst+gap paper measures (average, worst, best, gap, worst+gap, the
  Table 5 ablations, Theorem 3.3's scaled worst, ideal) and NICO++ Eq. 5 / WILDS-style
  per-domain summaries.
- `oodeval.measures.comparators`: measures beyond the paper (CVaR, quantile, median,
  mean + lambda std, worst + W gap), registered as parameterised families.
- `oodeval.measures.meta`: meta-evaluation across algorithms (rank correlation with the ideal
  measure, algorithm choice and ranks, selection degradation, seed statistics, bootstrap
  intervals), over arrays and over long-form tables of errors (per unit, per seed, over seeds):
  the one layer `oodeval measures`, `oodeval study analyze` and the reports share; also the
  answer line (`answer_line`), the verdict's rules (`tracks_ideal`, `verdict_sentence`) and the
  few-algorithm warning (`interval_warning`).
- `oodeval.measures.openworld`: the OpenworldAUC suite (OpenworldAUC, AUROC, the curve, scores
  from model outputs).
"""

from oodeval.measures import comparators  # noqa: F401  (importing it registers the comparators)
from oodeval.measures.domain import (
    STD_DDOFS,
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
    scaled_worst,
    worst,
    worst_only,
    worst_plus_gap,
)
from oodeval.measures.meta import (
    Choice,
    algorithm_choice,
    answer_line,
    baseline_vs_best,
    bootstrap_correlation_ci,
    choice_degradation,
    choices,
    correlation_summary,
    correlation_verdicts,
    degradation_summary,
    distance_to_ideal,
    ideal_correlations,
    interval_warning,
    mean_std,
    paired_spearman_ci,
    rank_correlation,
    seed_means,
    spearman_critical_value,
    tracks_ideal,
    unit_measures,
    verdict_sentence,
)
from oodeval.measures.meta import __getattr__ as __getattr__  # deprecated names
from oodeval.measures.openworld import auroc, openworld_auc, openworld_curve, openworld_scores
from oodeval.measures.registry import (
    FAMILIES,
    MEASURES,
    REGISTRY,
    MeasureFamily,
    MeasureSpec,
    UnknownMeasure,
    check_measures,
    did_you_mean,
    freeze_built_ins,
    get_measure,
    measure_code_digest,
    measure_columns,
    measure_label,
    measure_names,
    register_measure,
    register_measure_family,
    undefined_measures,
    unregister_measure,
)

__all__ = [
    "FAMILIES",
    "MEASURES",
    "REGISTRY",
    "register_measure",
    "register_measure_family",
    "unregister_measure",
    "get_measure",
    "measure_code_digest",
    "measure_columns",
    "measure_names",
    "MeasureFamily",
    "MeasureSpec",
    "UnknownMeasure",
    "did_you_mean",
    "Choice",
    "answer_line",
    "auroc",
    "average",
    "baseline_vs_best",
    "best",
    "bootstrap_correlation_ci",
    "check_measures",
    "correlation_summary",
    "correlation_verdicts",
    "degradation_summary",
    "distance_to_ideal",
    "domain_average",
    "domain_measures",
    "domain_overall",
    "domain_std",
    "STD_DDOFS",
    "gap",
    "gap_only",
    "ideal",
    "ideal_correlations",
    "interval_warning",
    "mean_std",
    "measure_label",
    "openworld_auc",
    "openworld_curve",
    "openworld_scores",
    "paired_spearman_ci",
    "per_domain_summary",
    "rank_correlation",
    "scaled_worst",
    "seed_means",
    "algorithm_choice",
    "choice_degradation",
    "choices",
    "spearman_critical_value",
    "tracks_ideal",
    "undefined_measures",
    "unit_measures",
    "verdict_sentence",
    "worst",
    "worst_only",
    "worst_plus_gap",
]

freeze_built_ins()  # every measure registered by now is oodeval's own
