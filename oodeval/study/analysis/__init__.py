"""The worst+gap paper's analyses of a stored study (Sections 5-6), and what `oodeval study
analyze` writes of them.

- `oodeval.study.analysis.paper`: the tables, as DataFrames, under the paper's numbers
  (`analyze`: ``verdict``, ``units``, ``table1``, ..., ``figure5``; see `PAPER_REFERENCES`);
- `oodeval.study.analysis.paper_values`: the paper's own values (Tables 1-5 and Section 6.5's
  counts, and the NICO++ paper's Tables 2 and 5), in one place, and the tables that set a
  study's beside them;
- `oodeval.study.analysis.output`: the verdict block in words, ``analysis.md`` and the CSVs
  (`write_analysis`);
- `oodeval.study.analysis.leaderboard`: the measure leaderboard (`leaderboard_of` a study, a
  `Leaderboard` that prints and shows itself in a notebook);
- `oodeval.study.analysis.versions`: the code digests of the measures an analysis computed with
  ``--measures``, and the warnings when it mixes versions of a measure's code.

All numbers come from `oodeval.measures.meta`, the layer `oodeval measures` uses too.
"""

import warnings
from typing import Any

from oodeval.study.analysis.leaderboard import Leaderboard
from oodeval.study.analysis.output import (
    BOUNDS_SENTENCE,
    NICO_PAPER_NOTE,
    TABLE3_PAPER_NOTE,
    TABLE5_PAPER_NOTE,
    VERDICT_FOOTNOTE,
    analysis_files,
    analysis_markdown,
    completeness_sentence,
    verdict_markdown,
    verdict_view,
    verdict_warning,
    write_analysis,
)
from oodeval.study.analysis.paper import (
    ABLATION_MEASURES,
    CORRELATION_MEASURES,
    DATASET_META,
    PAPER_REFERENCES,
    PAPER_TABLE1,
    SELECTION_MEASURES,
    VERDICT_RESAMPLES,
    ablation_correlations,
    analyze,
    baseline_vs_ideal_best,
    bounds_by_scenario,
    correlatable,
    correlation_by_seed,
    correlation_verdicts,
    correlation_vs_paper,
    correlation_with_ideal,
    dataset_tables,
    degradation_by_scenario,
    distance_to_ideal_by_scale,
    errors_table,
    ideal_measure_pairs,
    leaderboard_of,
    scenario_meta,
    selected_algorithms,
    selection_agreement,
    study_unit_measures,
)
from oodeval.study.analysis.paper_values import (
    CORRUPTED_DATASETS,
    NICO_DATASET,
    NICO_SPLITS,
    PAPER_NICO_TABLE2,
    PAPER_NICO_TABLE5,
    PAPER_SELECTION_COUNTS,
    PAPER_TABLE2,
    PAPER_TABLE3,
    PAPER_TABLE4,
    PAPER_TABLE5,
    corrupted_vs_paper,
    nico_vs_paper,
    selection_vs_paper,
    table5_vs_paper,
)
from oodeval.study.analysis.versions import measure_digests, measure_version_notes

__all__ = [
    "ABLATION_MEASURES",
    "Leaderboard",
    "BOUNDS_SENTENCE",
    "CORRELATION_MEASURES",
    "CORRUPTED_DATASETS",
    "DATASET_META",
    "NICO_DATASET",
    "NICO_PAPER_NOTE",
    "NICO_SPLITS",
    "PAPER_NICO_TABLE2",
    "PAPER_NICO_TABLE5",
    "PAPER_REFERENCES",
    "PAPER_SELECTION_COUNTS",
    "PAPER_TABLE1",
    "PAPER_TABLE2",
    "PAPER_TABLE3",
    "PAPER_TABLE4",
    "PAPER_TABLE5",
    "SELECTION_MEASURES",
    "TABLE3_PAPER_NOTE",
    "TABLE5_PAPER_NOTE",
    "VERDICT_FOOTNOTE",
    "VERDICT_RESAMPLES",
    "ablation_correlations",
    "analysis_files",
    "analysis_markdown",
    "analyze",
    "baseline_vs_ideal_best",
    "bounds_by_scenario",
    "completeness_sentence",
    "correlatable",
    "correlation_by_seed",
    "correlation_verdicts",
    "correlation_vs_paper",
    "correlation_with_ideal",
    "corrupted_vs_paper",
    "dataset_tables",
    "degradation_by_scenario",
    "distance_to_ideal_by_scale",
    "errors_table",
    "ideal_measure_pairs",
    "leaderboard_of",
    "measure_digests",
    "measure_version_notes",
    "nico_vs_paper",
    "scenario_meta",
    "selected_algorithms",
    "selection_agreement",
    "selection_vs_paper",
    "study_unit_measures",
    "table5_vs_paper",
    "verdict_markdown",
    "verdict_view",
    "verdict_warning",
    "write_analysis",
]

#: Names of the last release -> their names now. Kept for one release; each use warns.
DEPRECATED_NAMES = {"unit_measures": "study_unit_measures"}


def __getattr__(name: str) -> Any:
    """A deprecated name (`DEPRECATED_NAMES`): its new object, with a DeprecationWarning."""
    if name in DEPRECATED_NAMES:
        new = DEPRECATED_NAMES[name]
        warnings.warn(
            f"oodeval.study.analysis.{name} is deprecated, use {new} (a study's per-unit "
            "measures; oodeval.measures.unit_measures scores long-form errors)",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
