"""Your own domain-generalisation algorithm in oodeval: FishrLite, an example to copy.

FishrLite is ERM plus a penalty on how much the variance of the per-sample gradients differs from
one training environment to another (the Fishr penalty, Rame et al., ICML 2022), restricted to the
gradients of the classifier's bias, which have a closed form, and without Fishr's moving average
and warm-up. For model m with training environments E_m and a minibatch of B samples per
environment::

    g_i  = softmax(z_i) - onehot(y_i)                 the gradient of CE(z_i, y_i) w.r.t. the bias
    v_e  = (1 / B) sum_{i in e} (g_i - mean_e g)^2    per class: the gradient variance in e
    P_m  = (1 / |E_m|) sum_{e in E_m} mean_c (v_e,c - vbar_c)^2,   vbar = mean_{e in E_m} v_e
    L_m  = mean_{e in E_m} CE_e + fishr_lite_lambda * P_m

Run it in a study from the repository root (``imports = ["my_algorithm.py"]`` of the config names
this file, relative to the config; the driver and every worker load it)::

    .venv/bin/oodeval study run examples/my_algorithm.toml --out out/mine
    .venv/bin/oodeval study analyze out/mine
    .venv/bin/oodeval report out/mine --out out/mine/report.html

The pieces of the algorithm contract this file uses (all of it: the docstring of
`oodeval.algorithms.Algorithm`):

- ``@register_algorithm`` adds the class to the registry under its class name, so a study config
  can list ``"FishrLite"`` under ``algorithms`` once this module is imported.
- Subclassing `oodeval.algorithms.erm.ERM` gives the stacked network (a featurizer and a linear
  classifier holding M models, parameters with the model axis first), Adam, ``logits_per_env``,
  ``erm_loss``, ``step`` and ``predict``; nothing here needs a constructor.
- ``HPARAMS`` declares this class's hyperparameters (default, random-search sampler, meaning); they
  join ERM's ``lr`` and ``weight_decay``, a study's ``[hparams.FishrLite]`` table overrides them and
  ``hparams_mode = "random"`` draws them. The update reads them from ``self.hparams``.
- ``update(x, y)`` gets one minibatch per environment slot: ``x`` (E, B, *input_shape) shared by
  all models, or (M, E, B, *input_shape) per model (what the trainer gives the leave-one-out
  models: model k gets its own N - 1 environments); ``y`` (E, B) or (M, E, B) accordingly.
- ``self.env_mask`` (M, E) says which slots model m trains on. Everything computed across
  environments (losses, and here the mean variance vbar too) averages only over model m's own
  slots, with `masked_mean`: model k of the leave-one-out stack never learns from e_k.
- ``self.step(loss)`` takes the per-model losses (M,) and minimises their sum, which gives every
  model exactly its own gradient.
- ``update`` returns detached (M,) tensors: ``"loss"`` (the trainer stops with an error naming the
  fold when it is not finite) and anything else worth inspecting.
- No random draws here; an algorithm that draws sets ``random_draws = True`` and draws through
  ``self.draw`` so that a model draws the same numbers stacked or alone.

>>> import torch
>>> logits = torch.randn(1, 1, 5, 3).expand(1, 2, 5, 3)  # two environments, identical data
>>> y = torch.tensor([[0, 1, 2, 1, 0], [0, 1, 2, 1, 0]])
>>> fishr_lite_penalty(logits, y, torch.ones(1, 2, dtype=torch.bool)).tolist()
[0.0]
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from oodeval.algorithms import HParam, register_algorithm
from oodeval.algorithms.base import masked_mean
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import log_uniform


def fishr_lite_penalty(
    logits: torch.Tensor, y: torch.Tensor, env_mask: torch.Tensor
) -> torch.Tensor:
    """Per model, the spread across its own environments of the bias-gradient variances: (M,).

    logits (M, E, B, C); y (E, B) shared or (M, E, B) per model; env_mask (M, E). ``P_m`` of the
    module docstring; environments outside ``env_mask[m]`` take no part (not even in vbar).
    """
    m, e, b, c = logits.shape
    grads = logits.softmax(dim=-1) - F.one_hot(y.expand(m, e, b), c).to(logits.dtype)
    var = grads.var(dim=2, correction=0)  # (M, E, C): v_e per model and environment
    mean_var = masked_mean(var.transpose(1, 2), env_mask[:, None, :])  # (M, C): vbar
    spread = (var - mean_var[:, None, :]).pow(2).mean(dim=-1)  # (M, E)
    return masked_mean(spread, env_mask)


@register_algorithm
class FishrLite(ERM):
    """ERM + ``fishr_lite_lambda`` x the spread of the bias-gradient variances (``P_m`` above)."""

    HPARAMS = {
        "fishr_lite_lambda": HParam(
            1e3, log_uniform(1, 4), "weight of the gradient-variance penalty (Fishr's range)"
        ),
    }

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        _, logits = self.logits_per_env(x)  # (M, E, B, C), from shared or per-model minibatches
        nll = self.erm_loss(logits, y)  # (M,): mean cross-entropy over each model's own slots
        penalty = fishr_lite_penalty(logits, y, self.env_mask)  # (M,)
        loss = nll + float(self.hparams["fishr_lite_lambda"]) * penalty
        self.step(loss)  # one Adam step per model on its own loss
        return {"loss": loss.detach(), "nll": nll.detach(), "penalty": penalty.detach()}
