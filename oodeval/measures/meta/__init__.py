"""Meta-evaluation of measures across algorithms: the worst+gap paper's Sections 5-6.

One layer for every caller (`oodeval measures`, `oodeval study analyze`, the reports, the DomainBed
import), so the numbers they print come from the same code. Everything public is imported from
here; the private modules hold one concept each:

- `_units`: the column tables (`Columns`) the layer reads and returns, grouping helpers, and the
  per-unit measures (`unit_measures` from long-form errors, `dense_unit_measures` from a
  (units, N) matrix; the ideal measure, Eq. 4);
- `_choice`: the algorithm a measure chooses (argmin, ties, `TIE_SEPARATOR`), the ranks of the
  algorithms (`algorithm_ranks`), selection degradation (Section 6.1);
- `_correlation`: Spearman's rho and Kendall's tau-b with the ideal measure (Section 5), seed
  statistics and bootstrap intervals;
- `_tables`: correlations, choices and degradation per (scenario, seed) and over seeds, seed
  means, the baseline against the ideal-best algorithm (Section 6.4), the bounds (Theorem 3.4)
  and the distance to the ideal measure as environments grow (Section 6.3);
- `_leaderboard`: every measure ranked by how well it tracks the ideal measure over (scenario,
  seed) cells, with bootstrap intervals over cells and a paired test against average and
  worst+gap (`measure_leaderboard`, `leaderboard_sentence`); `measure_rankings` where no ideal
  exists;
- `_wording`: what the outputs say: the verdict (does worst+gap track the ideal measure better
  than average, and how sure are we), the one-line answer every output opens with, and the
  warnings for too few algorithms or environments.

Scores are "lower is better". The long-form errors table has one row per (scenario, seed,
algorithm, split, environment):

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
>>> sel = choices(units, ["worst_plus_gap", "average"])
>>> sel["selected"].tolist(), sel["degradation"].round(12).tolist()
(['B', 'A'], [0.0, 0.1])
"""

import warnings
from typing import Any

from oodeval.limits import MAX_RESAMPLES
from oodeval.measures.meta._choice import (
    TIE_DECIMALS,
    TIE_SEPARATOR,
    Choice,
    algorithm_choice,
    algorithm_ranks,
    choice_degradation,
    tie_text,
)
from oodeval.measures.meta._correlation import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    bootstrap_correlation_ci,
    mean_std,
    paired_spearman_ci,
    rank_correlation,
    spearman_critical_value,
)
from oodeval.measures.meta._leaderboard import (
    NO_IDEAL_NOTE,
    VERSUS,
    leaderboard_sentence,
    measure_leaderboard,
    measure_rankings,
)
from oodeval.measures.meta._tables import (
    baseline_vs_best,
    choices,
    correlation_summary,
    degradation_summary,
    distance_to_ideal,
    ideal_bounds,
    ideal_correlations,
    seed_means,
)
from oodeval.measures.meta._units import (
    SEED_MEAN,
    UNIT_KEYS,
    Columns,
    dense_unit_measures,
    unit_measures,
)
from oodeval.measures.meta._wording import (
    ANSWER_MEASURES,
    MIN_INTERVAL_ALGORITHMS,
    MIN_PICK_ENVIRONMENTS,
    MIN_VERDICT_ALGORITHMS,
    TRACKING_RHO,
    VERDICTS,
    answer_line,
    answer_parts,
    correlation_verdicts,
    environment_warning,
    interval_warning,
    tracks_ideal,
    verdict_sentence,
)

__all__ = [
    "ANSWER_MEASURES",
    "BOOTSTRAP_RESAMPLES",
    "CONFIDENCE",
    "MAX_RESAMPLES",
    "MIN_INTERVAL_ALGORITHMS",
    "MIN_PICK_ENVIRONMENTS",
    "MIN_VERDICT_ALGORITHMS",
    "NO_IDEAL_NOTE",
    "SEED_MEAN",
    "TIE_DECIMALS",
    "TIE_SEPARATOR",
    "TRACKING_RHO",
    "UNIT_KEYS",
    "VERDICTS",
    "VERSUS",
    "Columns",
    "Choice",
    "algorithm_ranks",
    "answer_line",
    "answer_parts",
    "baseline_vs_best",
    "bootstrap_correlation_ci",
    "correlation_summary",
    "correlation_verdicts",
    "degradation_summary",
    "dense_unit_measures",
    "distance_to_ideal",
    "environment_warning",
    "ideal_bounds",
    "ideal_correlations",
    "interval_warning",
    "leaderboard_sentence",
    "mean_std",
    "measure_leaderboard",
    "measure_rankings",
    "paired_spearman_ci",
    "rank_correlation",
    "seed_means",
    "algorithm_choice",
    "choice_degradation",
    "choices",
    "spearman_critical_value",
    "tie_text",
    "tracks_ideal",
    "unit_measures",
    "verdict_sentence",
]

#: Names of the last release -> their names now (*selection* means checkpoint selection only; the
#: algorithm a measure picks is its *choice*). Kept for one release; each use warns.
DEPRECATED_NAMES = {
    "Selection": "Choice",
    "select_algorithm": "algorithm_choice",
    "selection_degradation": "choice_degradation",
    "selections": "choices",
}


def __getattr__(name: str) -> Any:
    """A deprecated name (`DEPRECATED_NAMES`): its new object, with a DeprecationWarning."""
    if name in DEPRECATED_NAMES:
        new = DEPRECATED_NAMES[name]
        warnings.warn(
            f"oodeval.measures.{name} is deprecated, use {new} (the algorithm a measure chooses)",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
