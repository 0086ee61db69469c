"""Domain-adversarial training, as in DomainBed: DANN (Ganin et al., 2016), CDANN (Li et al., 2018).

A discriminator (an MLP on the features, plus a class embedding for CDANN) learns to tell the
environments apart; the featurizer and classifier alternate with it and minimise
``R_cls - lambda * (R_disc + grad_penalty * P)``, i.e. they *maximise* the discriminator's loss.
Update n (counting from 1) is a discriminator step when ``n % (1 + k) < k``, k =
`d_steps_per_g_step`, else a generator step: DomainBed increments its counter before the test, so
with k = 1 the sequence is generator, discriminator, generator, ...
The discriminator of a model only has logits for that model's training environments (the others
are masked out), so it is the same classifier DANN would build for those environments alone.

CDANN weights the discriminator's per-sample losses by ``1 / (n_y * K)``, n_y the number of samples
of class y in the model's minibatches and K the largest label present plus one (DomainBed's
``one_hot(y).sum(0)`` has that many columns), and adds a learned class embedding to the features.

Hyperparameters: the generator (featurizer and classifier) uses `lr` and `weight_decay`, which play
DomainBed's ``lr_g`` and ``weight_decay_g`` (same defaults and search distributions, for small
images and, on the ResNets, for larger ones: `oodeval.algorithms.hparams.IMAGE_HPARAMS`, which
also gives ``lr_d`` DomainBed's larger-image values; DomainBed's own ``lr`` is unused by DANN).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from oodeval.algorithms.base import adam, masked_mean
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, choice, log_uniform, log_uniform_int
from oodeval.algorithms.networks import EnsembleMLP
from oodeval.algorithms.registry import register_algorithm


class _Adversarial(ERM):
    HPARAMS = {
        "lambda": HParam(1.0, log_uniform(-2, 2), "weight of the adversarial term"),
        "lr_d": HParam(1e-3, log_uniform(-4.5, -2.5), "discriminator learning rate"),
        "weight_decay_d": HParam(0.0, log_uniform(-6, -2), "discriminator weight decay"),
        "d_steps_per_g_step": HParam(1, log_uniform_int(0, 3, base=2), "disc steps per gen step"),
        "grad_penalty": HParam(
            0.0, log_uniform(-2, 1), "weight of the discriminator input-gradient penalty"
        ),
        "beta1": HParam(0.5, choice(0.0, 0.5), "Adam beta1 of both optimizers"),
        "mlp_width": HParam(256, log_uniform_int(6, 10, base=2), "discriminator width"),
        "mlp_depth": HParam(3, choice(3, 4, 5), "discriminator depth (layers)"),
        "mlp_dropout": HParam(0.0, choice(0.0, 0.1, 0.5), "discriminator dropout"),
    }
    conditional = False

    def build_extra_parts(self) -> None:
        d = self.featurizer.n_outputs
        self.discriminator = EnsembleMLP(
            self.num_models,
            d,
            self.num_envs,
            width=int(self.hparams["mlp_width"]),
            depth=int(self.hparams["mlp_depth"]),
            dropout=float(self.hparams["mlp_dropout"]),
        )
        self.class_embeddings = nn.Parameter(torch.randn(self.num_models, self.num_classes, d))
        self.disc_optimizer = adam(
            list(self.discriminator.parameters()) + [self.class_embeddings],
            self.hparams,
            lr_key="lr_d",
            wd_key="weight_decay_d",
            betas=self.adam_betas(),
        )

    def adam_betas(self) -> tuple[float, float]:
        """Adam's (beta1, beta2) for both optimizers: (`beta1`, 0.9) as in DomainBed."""
        return (float(self.hparams["beta1"]), 0.9)

    def build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over the featurizer and classifier (the generator side)."""
        return adam(self.network.parameters(), self.hparams, betas=self.adam_betas())

    def discriminator_loss(self, feats: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-model discriminator cross-entropy over each model's own environments: (M,).

        feats: (M, E, B, d); y: (E, B) or (M, E, B). CDANN weights every sample by
        ``1 / (n_y * K)``, K = the model's largest label + 1 (DomainBed's class balance).
        """
        m, e, b, d = feats.shape
        labels = self.labels_per_model(y).reshape(m, e * b)
        disc_in = feats.reshape(m, e * b, d)
        if self.conditional:
            disc_in = disc_in + self.class_embeddings.gather(1, labels[..., None].expand(-1, -1, d))
        out = self.discriminator(disc_in)
        out = out.masked_fill(~self.env_mask[:, None, :], -1e4)
        env_of = torch.arange(e, device=feats.device).repeat_interleave(b)
        ce = F.cross_entropy(out.reshape(-1, e), env_of.repeat(m), reduction="none").view(m, e * b)
        valid = self.env_mask[:, env_of]
        if self.conditional:
            zero = torch.zeros((), dtype=ce.dtype, device=ce.device)
            onehot = F.one_hot(labels, self.num_classes).to(ce.dtype)
            counts = torch.where(valid[..., None], onehot, zero).sum(dim=1)
            top = torch.where(valid, labels, torch.zeros_like(labels)).max(dim=1, keepdim=True)
            per_sample = counts.gather(1, labels).clamp_min(1)
            weights = torch.where(valid, 1.0 / (per_sample * (top.values + 1).to(ce.dtype)), zero)
            loss = (torch.where(valid, ce, zero) * weights).sum(dim=1)
        else:
            loss = masked_mean(ce, valid)
        gp = float(self.hparams["grad_penalty"])
        if gp > 0 and torch.is_grad_enabled():
            (grad,) = torch.autograd.grad(
                torch.where(valid, ce, torch.zeros((), device=ce.device)).sum(),
                disc_in,
                create_graph=True,
            )
            loss = loss + gp * masked_mean((grad**2).sum(-1), valid)
        return loss

    def is_discriminator_step(self) -> bool:
        """True when the next update is a discriminator step: update n (from 1) with
        ``n % (1 + k) < k`` (DomainBed's counter is incremented before its test)."""
        k = int(self.hparams["d_steps_per_g_step"])
        return (self.update_count + 1) % (1 + k) < k

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        feats, logits = self.logits_per_env(x)
        disc_loss = self.discriminator_loss(feats, y)
        if self.is_discriminator_step():
            self.disc_optimizer.zero_grad(set_to_none=True)
            disc_loss.sum().backward()
            self.disc_optimizer.step()
            self.update_count += 1
            return {"loss": disc_loss.detach(), "disc_loss": disc_loss.detach()}
        nll = self.erm_loss(logits, y)
        gen_loss = nll - float(self.hparams["lambda"]) * disc_loss
        self.step(gen_loss)
        return {"loss": gen_loss.detach(), "nll": nll.detach(), "disc_loss": disc_loss.detach()}


@register_algorithm
class DANN(_Adversarial):
    """Domain-adversarial neural network: features the environment discriminator cannot separate."""


@register_algorithm
class CDANN(_Adversarial):
    """Conditional DANN: the discriminator also sees the class, aligning p(features | class)."""

    conditional = True
