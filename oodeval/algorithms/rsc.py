"""RSC: representation self-challenging (Huang et al., 2020).

For every sample, the features with the largest gradient of the true-class logit (the top
`rsc_f_drop_factor` fraction) are muted; the samples whose true-class probability drops most when
muted (the top `rsc_b_drop_factor` fraction of the model's batch) are trained with those features
set to zero, the others with all their features. Thresholds are linear-interpolation percentiles,
computed per sample (features) and per model over its own training samples (batch).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, uniform
from oodeval.algorithms.registry import register_algorithm


@register_algorithm
class RSC(ERM):
    """ERM that drops each hard sample's most predictive features."""

    HPARAMS = {
        "rsc_f_drop_factor": HParam(1 / 3, uniform(0, 0.5), "fraction of features muted"),
        "rsc_b_drop_factor": HParam(1 / 3, uniform(0, 0.5), "fraction of samples challenged"),
    }

    def keep_mask(self, feats: torch.Tensor, y: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Which features each sample keeps (True) after self-challenging: (M, n, d).

        feats: (M, n, d) requiring grad; y: (n,) or (M, n); valid: (M, n) samples of each
        model's own environments.
        """
        onehot = F.one_hot(y, self.num_classes).float()
        logits = self.classifier(feats)
        (grads,) = torch.autograd.grad((logits * onehot).sum(), feats, retain_graph=True)
        f_drop = float(self.hparams["rsc_f_drop_factor"])
        b_drop = float(self.hparams["rsc_b_drop_factor"])
        with torch.no_grad():
            feat_thresh = torch.quantile(grads, 1 - f_drop, dim=-1, keepdim=True)
            keep_f = grads < feat_thresh
            muted = self.classifier(feats * keep_f)
            before = (F.softmax(logits, dim=-1) * onehot).sum(-1)
            after = (F.softmax(muted, dim=-1) * onehot).sum(-1)
            change = torch.where(
                valid, before - after, torch.full((), torch.nan, device=before.device)
            )
            batch_thresh = torch.nanquantile(change, 1 - b_drop, dim=1, keepdim=True)
            keep_b = change < batch_thresh
        return keep_f | keep_b[..., None]

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        e, b = y.shape[-2:]
        feats = self.featurizer(self.flat_inputs(x))
        valid = self.env_mask.repeat_interleave(b, dim=1)
        keep = self.keep_mask(feats, y.reshape(*y.shape[:-2], -1), valid)
        logits = self.classifier(feats * keep).view(self.num_models, e, b, -1)
        loss = self.erm_loss(logits, y)
        self.step(loss)
        return {"loss": loss.detach()}
