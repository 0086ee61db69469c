"""Dataset-shift diagnostics of the NICO++ paper (Section 3).

- `covariate_shift` (M_cov, the discrepancy distance) and `concept_shift` (M_cpt^min / M_cpt^max)
  estimate one seed each; `shift_metrics` runs both over several seeds with mean +- std and the
  Theorem 3.3 quantity M_cpt^max - M_cov.
- `load_spec` / `parse_spec` read the SPEC strings of `oodeval shift` (`oodeval.shift.specs`).

The estimators train small torch networks; torch is imported when one of them is first used.
"""

from __future__ import annotations

from oodeval._lazy import lazy_package

__all__, __getattr__, __dir__ = lazy_package(
    globals(),
    {
        ".discrepancy": ("covariate_shift", "CovariateShift", "disagreement"),
        ".concept": ("concept_shift", "ConceptShift"),
        ".metrics": ("shift_metrics", "ShiftMetrics", "METRICS"),
        ".specs": ("load_spec", "parse_spec", "disjoint_pair", "ShiftSet"),
    },
)
