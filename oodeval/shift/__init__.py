"""Dataset-shift diagnostics of the NICO++ paper (Section 3).

- `covariate_shift` (M_cov, the discrepancy distance) and `concept_shift` (M_cpt^min / M_cpt^max)
  estimate one seed each; `shift_metrics` runs both over several seeds with mean +- std and the
  Theorem 3.3 quantity M_cpt^max - M_cov.
- `load_spec` / `parse_spec` read the SPEC strings of `oodeval shift` (`oodeval.shift.specs`).

The estimators train small torch networks; torch is imported when one of them is first used.
"""

from __future__ import annotations

from oodeval._lazy import lazy_attributes

_EXPORTS = {
    "covariate_shift": "discrepancy",
    "CovariateShift": "discrepancy",
    "disagreement": "discrepancy",
    "concept_shift": "concept",
    "ConceptShift": "concept",
    "shift_metrics": "metrics",
    "ShiftMetrics": "metrics",
    "METRICS": "metrics",
    "load_spec": "specs",
    "parse_spec": "specs",
    "disjoint_pair": "specs",
    "ShiftSet": "specs",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_attributes(
    globals(), {name: f"oodeval.shift.{home}" for name, home in _EXPORTS.items()}, __all__
)
