"""The worst+gap paper's analyses of a stored study (Sections 5-6), and what `oodeval study
analyze` writes of them.

- `oodeval.study.analysis.paper`: the tables, as DataFrames, under the paper's numbers
  (`analyze`: ``verdict``, ``units``, ``table1``, ..., ``figure5``; see `PAPER_REFERENCES`);
- `oodeval.study.analysis.output`: the verdict block in words, ``analysis.md`` and the CSVs
  (`write_analysis`);
- `oodeval.study.analysis.versions`: the code digests of the measures an analysis computed with
  ``--measures``, and the warnings when it mixes versions of a measure's code.

All numbers come from `oodeval.measures.meta`, the layer `oodeval measures` uses too.
"""

from oodeval.study.analysis.output import (
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
    PAPER_REFERENCES,
    PAPER_TABLE1,
    SELECTION_MEASURES,
    VERDICT_RESAMPLES,
    ablation_correlations,
    analyze,
    baseline_vs_ideal_best,
    correlatable,
    correlation_verdicts,
    correlation_vs_paper,
    correlation_with_ideal,
    degradation_by_scenario,
    distance_to_ideal_by_scale,
    errors_table,
    ideal_measure_pairs,
    selected_algorithms,
    selection_agreement,
    unit_measures,
)
from oodeval.study.analysis.versions import measure_digests, measure_version_notes

__all__ = [
    "ABLATION_MEASURES",
    "CORRELATION_MEASURES",
    "PAPER_REFERENCES",
    "PAPER_TABLE1",
    "SELECTION_MEASURES",
    "VERDICT_FOOTNOTE",
    "VERDICT_RESAMPLES",
    "ablation_correlations",
    "analysis_files",
    "analysis_markdown",
    "analyze",
    "baseline_vs_ideal_best",
    "completeness_sentence",
    "correlatable",
    "correlation_verdicts",
    "correlation_vs_paper",
    "correlation_with_ideal",
    "degradation_by_scenario",
    "distance_to_ideal_by_scale",
    "errors_table",
    "ideal_measure_pairs",
    "measure_digests",
    "measure_version_notes",
    "selected_algorithms",
    "selection_agreement",
    "unit_measures",
    "verdict_markdown",
    "verdict_view",
    "verdict_warning",
    "write_analysis",
]
