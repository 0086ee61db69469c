"""SagNet: style-agnostic networks (Nam et al., 2021), as in DomainBed.

Features are split into *content* (the per-sample normalised feature vector) and *style* (its mean
and unbiased variance over the feature axis). Two randomisation modules swap one part with a
partner sample of the same model's training environments, the partners being a random
permutation of the model's samples (each sample is some sample's partner exactly once):

- style randomisation: ``z_hat * sqrt(var_mix + eps) + mu_mix`` with
  ``mu_mix = a mu + (1 - a) mu_partner`` (same for var), ``a ~ U(0, 1)`` per sample;
- content randomisation: ``z_hat_partner * sqrt(var + eps) + mu`` (the sample keeps its style).

Each update takes three steps: the featurizer and content network (classifier) learn from
style-randomised features; the style network learns from content-randomised features; the
featurizer is trained adversarially (weight `sag_w_adv`) to make the style network's predictions
uniform, on a fresh content randomisation. DomainBed's MNIST network pools its features to a vector
too, so the statistics are over the feature axis there as here (the paper's ResNet variant takes
them per channel over a feature map).

Draws, from each model's own stream, per randomisation (three per update, in the order above):
``a = rand(n, 1)`` (float32, drawn also for content randomisation, which ignores it, as DomainBed
does) then ``randperm(n)``, n = the model's E * B samples; sample t's partner is sample perm[t].
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from oodeval.algorithms.base import adam, masked_mean
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, log_uniform
from oodeval.algorithms.networks import EnsembleLinear
from oodeval.algorithms.registry import register_algorithm

EPS = 1e-5


def feature_style(feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(content, mean, unbiased var) of features (..., d) over the last axis; content normalised."""
    mean = feats.mean(dim=-1, keepdim=True)
    var = feats.var(dim=-1, keepdim=True)
    return (feats - mean) / torch.sqrt(var + EPS), mean, var


def gather_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per model, rows `index` (M, n) of `t` (M, n, k)."""
    return t.gather(1, index[..., None].expand(-1, -1, t.shape[-1]))


def randomize_style(
    feats: torch.Tensor, partner: torch.Tensor, alpha: torch.Tensor
) -> torch.Tensor:
    """Keep each sample's content, interpolate its style toward its partner's (M, n, d)."""
    content, mean, var = feature_style(feats)
    mean = alpha * mean + (1 - alpha) * gather_rows(mean, partner)
    var = alpha * var + (1 - alpha) * gather_rows(var, partner)
    return content * torch.sqrt(var + EPS) + mean


def randomize_content(feats: torch.Tensor, partner: torch.Tensor) -> torch.Tensor:
    """Keep each sample's style, take its partner's (detached) content (M, n, d)."""
    content, mean, var = feature_style(feats)
    return gather_rows(content, partner).detach() * torch.sqrt(var + EPS) + mean


@register_algorithm
class SagNet(ERM):
    """Style-agnostic network: content classifier, style classifier and adversarial featurizer."""

    HPARAMS = {"sag_w_adv": HParam(0.1, log_uniform(-2, 1), "weight of the adversarial style loss")}
    random_draws = True

    def build_extra_parts(self) -> None:
        self.style_net = EnsembleLinear(
            self.num_models, self.featurizer.n_outputs, self.num_classes
        )
        self.opt_f = adam(self.featurizer.parameters(), self.hparams)
        self.opt_c = adam(self.classifier.parameters(), self.hparams)
        self.opt_s = adam(self.style_net.parameters(), self.hparams)

    def randomization_draws(self, e: int, b: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The (partner (M, E*B), a (M, E*B, 1)) of the update's three randomisations.

        Each model permutes its own samples (slots of its own environments); samples of other
        environments are their own partners with a = 1 (they are masked out of every loss).
        """
        own_rows = [
            torch.cat([torch.arange(env * b, (env + 1) * b) for env in own])
            for own in self.own_envs
        ]

        def sample(m: int, gen: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
            n = len(own_rows[m])
            return [
                (torch.rand(n, 1, generator=gen), torch.randperm(n, generator=gen))
                for _ in range(3)
            ]

        draws = self.draw(sample)
        out = []
        for step in range(3):
            partner = torch.arange(e * b).repeat(self.num_models, 1)
            alpha = torch.ones(self.num_models, e * b, 1)
            for m, rows in enumerate(own_rows):
                a, perm = draws[m][step]
                partner[m, rows] = rows[perm]
                alpha[m, rows] = a
            out.append((partner, alpha))
        return out

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        e, b = y.shape[-2:]
        m = self.num_models
        flat = self.flat_inputs(x)
        draws = self.randomization_draws(e, b)
        # content network on style-randomised features
        partner, alpha = draws[0]
        feats = self.featurizer(flat)
        partner, alpha = partner.to(feats.device), alpha.to(feats.device, feats.dtype)
        logits_c = self.classifier(randomize_style(feats, partner, alpha)).view(m, e, b, -1)
        loss_c = self.erm_loss(logits_c, y)
        self.opt_f.zero_grad(set_to_none=True)
        self.opt_c.zero_grad(set_to_none=True)
        loss_c.sum().backward()
        self.opt_f.step()
        self.opt_c.step()
        # style network on content-randomised features
        partner = draws[1][0].to(feats.device)
        logits_s = self.style_net(randomize_content(self.featurizer(flat), partner))
        logits_s = logits_s.view(m, e, b, -1)
        loss_s = self.erm_loss(logits_s, y)
        self.opt_s.zero_grad(set_to_none=True)
        loss_s.sum().backward()
        self.opt_s.step()
        # featurizer against the style network: push its predictions toward uniform
        partner = draws[2][0].to(feats.device)
        logits_adv = self.style_net(randomize_content(self.featurizer(flat), partner))
        neg_log_uniform = -F.log_softmax(logits_adv, dim=-1).mean(dim=-1).view(m, e, b).mean(2)
        loss_adv = float(self.hparams["sag_w_adv"]) * masked_mean(neg_log_uniform, self.env_mask)
        self.opt_f.zero_grad(set_to_none=True)
        loss_adv.sum().backward()
        self.opt_f.step()
        self.update_count += 1
        total = loss_c + loss_s + loss_adv
        return {
            "loss": total.detach(),
            "loss_c": loss_c.detach(),
            "loss_s": loss_s.detach(),
            "loss_adv": loss_adv.detach(),
        }
