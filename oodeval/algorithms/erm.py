"""ERM: empirical risk minimisation, the mean cross-entropy over the training environments.

``L_m = (1 / |E_m|) sum_{e in E_m} CE_e`` for model m with training environments E_m; the base of
most other algorithms (a featurizer, a linear classifier and one Adam optimizer).
"""

from __future__ import annotations

import torch
from torch import nn

from oodeval.algorithms.base import Algorithm, adam
from oodeval.algorithms.networks import EnsembleLinear, ResNet, build_featurizer
from oodeval.algorithms.registry import register_algorithm


@register_algorithm
class ERM(Algorithm):
    """Empirical risk minimisation (Vapnik, 1998) with Adam."""

    def build_parts(self) -> None:
        """The featurizer, the linear classifier, what a subclass adds, and the optimizer."""
        self.featurizer = build_featurizer(
            self.model,
            self.num_models,
            self.featurizer_input_shape(),
            hparams=self.hparams,
            image_channels=self.input_shape[0],  # what an algorithm appends is not an image
        )
        self.classifier = EnsembleLinear(
            self.num_models, self.classifier_inputs(self.featurizer.n_outputs), self.num_classes
        )
        self.network = nn.Sequential(self.featurizer, self.classifier)
        self.build_extra_parts()
        self.optimizer = self.build_optimizer()

    def build_extra_parts(self) -> None:
        """Create what a subclass adds to ERM (modules, buffers, extra optimizers); none for ERM.

        Called once by the constructor after the network and before `build_optimizer`, so a
        subclass needs no constructor of its own and its optimizer can include the new modules.
        """

    def featurizer_input_shape(self) -> tuple[int, ...]:
        """Shape of one featurizer input (ARM adds a context channel)."""
        return self.input_shape

    def normalized_images(self, x: torch.Tensor) -> torch.Tensor:
        """Images ``x`` (..., C, H, W) as the featurizer sees them: ImageNet-normalised by a
        ResNet that normalises (`oodeval.algorithms.networks.ResNet.normalized`), else as they
        are; for what an algorithm computes from the images beside the featurizer (ARM's
        context network)."""
        if isinstance(self.featurizer, ResNet):
            return self.featurizer.normalized(x)
        return x

    def classifier_inputs(self, n_features: int) -> int:
        """Width of the classifier input (MTL appends an environment embedding)."""
        return n_features

    def build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over every parameter of the network."""
        return adam(self.network.parameters(), self.hparams)

    def reset_optimizer(self) -> None:
        """Forget Adam's moment estimates (IRM/VREx do this when their penalty switches on)."""
        self.optimizer = self.build_optimizer()

    def logits_per_env(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (M, E, B, d) and logits (M, E, B, C) of minibatches x ([M,] E, B, ...)."""
        e, b = x.shape[x.dim() - len(self.input_shape) - 2 :][:2]
        feats = self.featurizer(self.flat_inputs(x))
        logits = self.classifier(feats)
        return feats.view(self.num_models, e, b, -1), logits.view(self.num_models, e, b, -1)

    def step(self, loss: torch.Tensor) -> None:
        """Minimise the sum over models of `loss` (M,): the models' gradients never mix."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        self.optimizer.step()
        self.update_count += 1

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        _, logits = self.logits_per_env(x)
        loss = self.erm_loss(logits, y)
        self.step(loss)
        return {"loss": loss.detach()}

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)
