"""The OpenworldAUC suite: open-world metrics from the OpenworldAUC paper (pure numpy/scipy).

- `oodeval.measures.openworld.metrics`: OpenworldAUC, AUROC, the MissRate_b / HitRate_n curve
  and the summary (BaseAcc, NewAcc, HM, AUROC, OpenworldAUC) from detector scores and
  per-sample correctness;
- `oodeval.measures.openworld.outputs`: the same suite plus OverallAcc from model outputs over
  all classes (Algorithm 1 of the paper), with the validation of outputs, labels and predictions;
- `oodeval.measures.openworld.ranking`: the exact comparison keys and the exact pair
  counts (O(n log n) at worst, O(n) for tied scores) the ranking metrics share.
"""

from oodeval.measures.openworld.metrics import (
    auroc,
    openworld_auc,
    openworld_curve,
    openworld_summary,
)
from oodeval.measures.openworld.outputs import (
    ScoredSamples,
    openworld_scored_samples,
    openworld_scores,
)

__all__ = [
    "auroc",
    "openworld_auc",
    "ScoredSamples",
    "openworld_curve",
    "openworld_scored_samples",
    "openworld_scores",
    "openworld_summary",
]
