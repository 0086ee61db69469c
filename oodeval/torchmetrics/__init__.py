"""The OpenworldAUC suite as torchmetrics metrics, for evaluation in batches and across processes
(``pip install 'oodeval[torchmetrics]'``).

- `OpenworldAUC`: ``update(score, is_base, correct)`` per batch, ``compute()`` =
  `oodeval.measures.openworld_auc` on every sample seen;
- `OpenworldSummary`: ``update(scores, labels, base_predictions, new_predictions,
  predictions=None)``, ``compute()`` = the dict of `oodeval.measures.openworld_scores` (BaseAcc,
  NewAcc, HM, OverallAcc, AUROC, OpenworldAUC).

Their states are synced by torchmetrics across processes (DDP, Lightning), and ``compute()``
calls the numpy functions on all of them, so the values are exactly those of the functions on the
whole evaluation set. Importing this module without torchmetrics raises `MissingExtra`, one line
naming the extra to install.
"""

from oodeval._extras import MissingExtra, missing_extra_message

try:
    import torchmetrics  # noqa: F401  (checked here so that the error names the extra)
except ModuleNotFoundError as exc:  # torchmetrics itself, or the torch it needs
    if exc.name not in ("torchmetrics", "torch"):
        raise
    raise MissingExtra(
        missing_extra_message("oodeval.torchmetrics", exc.name, "torchmetrics")
    ) from exc

from oodeval.torchmetrics._metrics import OpenworldAUC, OpenworldSummary  # noqa: E402

__all__ = ["OpenworldAUC", "OpenworldSummary"]
