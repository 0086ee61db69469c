"""MTL: marginal transfer learning (Blanchard et al., 2021).

The classifier sees each sample's features together with an embedding of its environment, the mean
feature vector of the environment's minibatch smoothed across updates:
``emb_e <- ema * mean_b f(x_b) + (1 - ema) * emb_e`` (DomainBed's convention: `mtl_ema` weights the
*current* batch mean). At prediction time the embedding is the mean feature of the batch being
predicted, so predictions depend on the batch (the trainer predicts in training-batch-size chunks).
"""

from __future__ import annotations

import torch

from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, choice
from oodeval.algorithms.registry import register_algorithm


@register_algorithm
class MTL(ERM):
    """ERM on [features, environment embedding] with EMA-smoothed embeddings (M, E, d)."""

    HPARAMS = {"mtl_ema": HParam(0.99, choice(0.5, 0.9, 0.99, 1.0), "weight of the batch mean")}
    batch_dependent = True

    def build_extra_parts(self) -> None:
        d = self.featurizer.n_outputs
        self.register_buffer("embeddings", torch.zeros(self.num_models, self.num_envs, d))

    def classifier_inputs(self, n_features: int) -> int:
        return 2 * n_features

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        e, b = y.shape[-2:]
        feats = self.featurizer(self.flat_inputs(x)).view(self.num_models, e, b, -1)
        ema = float(self.hparams["mtl_ema"])
        emb = ema * feats.mean(dim=2) + (1 - ema) * self.embeddings
        with torch.no_grad():
            self.embeddings.copy_(torch.where(self.env_mask[..., None], emb, self.embeddings))
        joint = torch.cat([feats, emb[:, :, None].expand_as(feats)], dim=-1)
        logits = self.classifier(joint.reshape(self.num_models, e * b, -1)).view(
            self.num_models, e, b, -1
        )
        loss = self.erm_loss(logits, y)
        self.step(loss)
        return {"loss": loss.detach()}

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.featurizer(x)
        emb = feats.mean(dim=1, keepdim=True).expand_as(feats)
        return self.classifier(torch.cat([feats, emb], dim=-1))
