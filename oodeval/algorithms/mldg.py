"""MLDG: meta-learning for domain generalisation (Li et al., 2018), first-order, as in DomainBed.

Each update, every model permutes its E training environments (its own random stream) and splits
the permutation as DomainBed's ``split_meta_train_test`` does: meta-train = the first
``E - n_meta_test``, meta-test = the last `n_meta_test`, paired in order with the meta-test list
repeated (``zip(train, cycle(test))``). For every pair (i, j):

- ``G_i = grad R_i(theta)``, the meta-train gradient;
- ``theta' = theta - lr * g / (|g| + 1e-8)`` with ``g = G_i + weight_decay * theta``: the first step
  of a *fresh* Adam (DomainBed builds a new inner Adam per pair), elementwise nearly a sign step;
- ``G_j = grad R_j(theta')``, the meta-test gradient at the stepped weights (first order: the inner
  step is not differentiated).

The outer Adam then steps with the gradient ``sum_pairs (G_i + mldg_beta G_j) / E``.

DomainBed's defect, kept by default: with ``n_meta_test = 2`` (its default) the split yields E - 2
pairs, so a model with E <= 2 environments gets no pair, a zero gradient, and never moves (Adam
with zero gradients and zero moments does not step; with weight decay > 0 it only decays). In a
leave-one-out study on three given environments every LOO model is in that case; the first update
then raises `DomainBedDefectWarning`. ``mldg_always_update=True`` corrects it: such a model uses
``n_meta_test = E - 1`` (one meta-test environment, E - 1 pairs), and a model with a single
environment takes a plain ERM step (``G_i / 1``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from itertools import cycle

import torch
from torch.func import functional_call
from torch.nn import functional as F

from oodeval.algorithms.base import DomainBedDefectWarning
from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, choice, fixed, log_uniform
from oodeval.algorithms.registry import register_algorithm
from oodeval.errors import OodevalError

#: Adam's epsilon: the first step of a fresh Adam is ``lr * g / (|g| + INNER_EPS)``
INNER_EPS = 1e-8


def meta_pairs(
    order: Sequence[int], n_meta_test: int, *, always_update: bool = False
) -> list[tuple[int, int | None]]:
    """The (meta-train, meta-test) environment pairs of one update, given the permuted `order`.

    DomainBed's split: ``order[:E - k]`` paired with ``cycle(order[-k:])``, k = `n_meta_test`
    (Python slicing, as DomainBed). With `always_update`, an order that leaves no meta-train
    environment uses k = E - 1 instead, and a single environment is paired with None (no
    meta-test: an ERM step).

    >>> meta_pairs([2, 0, 1], 2), meta_pairs([3, 1, 0, 2], 2), meta_pairs([2, 0, 1], 1)
    ([(2, 0)], [(3, 0), (1, 2)], [(2, 1), (0, 1)])
    >>> meta_pairs([1, 0], 2), meta_pairs([1, 0], 2, always_update=True)
    ([], [(1, 0)])
    >>> meta_pairs([4], 2, always_update=True)
    [(4, None)]
    """
    order = list(order)
    e, k = len(order), int(n_meta_test)
    if always_update and not order[: e - k]:
        if e == 1:
            return [(order[0], None)]
        k = e - 1
    return list(zip(order[: e - k], cycle(order[-k:])))


@register_algorithm
class MLDG(ERM):
    """First-order MLDG with DomainBed's meta-train / meta-test pairs and fresh-Adam inner step."""

    HPARAMS = {
        "mldg_beta": HParam(1.0, log_uniform(-1, 1), "weight of the meta-test gradient"),
        "n_meta_test": HParam(2, choice(1, 2), "meta-test environments per split (DomainBed)"),
        "mldg_always_update": HParam(
            False, fixed(False), "train models with <= n_meta_test environments (not DomainBed)"
        ),
    }
    random_draws = True

    def build_extra_parts(self) -> None:
        k = self.hparams["n_meta_test"]
        if int(k) != k or int(k) < 1:
            raise OodevalError(f"n_meta_test must be an integer >= 1, got {k!r}")
        self.flag("mldg_always_update")  # fails early on a non-boolean value
        self.warned = False

    def idle_models(self) -> list[int]:
        """Models whose every update is a no-op (no meta-train environment): DomainBed's defect."""
        k, always = int(self.hparams["n_meta_test"]), self.flag("mldg_always_update")
        return [
            m for m, own in enumerate(self.own_envs) if not meta_pairs(own, k, always_update=always)
        ]

    def warn_once(self) -> None:
        """Raise `DomainBedDefectWarning` (once per instance) when some model cannot learn."""
        if self.warned:
            return
        self.warned = True
        idle = self.idle_models()
        if idle:
            sizes = "/".join(str(n) for n in sorted({len(self.own_envs[m]) for m in idle}))
            warnings.warn(
                f"MLDG with n_meta_test={int(self.hparams['n_meta_test'])} never updates a model "
                f"with {sizes} training environment(s): DomainBed's meta split leaves no "
                "meta-train environment; set mldg_always_update=True to train it",
                DomainBedDefectWarning,
                stacklevel=3,
            )

    def pair_draws(self) -> list[list[tuple[int, int | None]]]:
        """Per model, this update's (meta-train, meta-test) pairs: ``randperm(E)`` of its own
        environments from its stream, split by `meta_pairs`."""
        k, always = int(self.hparams["n_meta_test"]), self.flag("mldg_always_update")

        def sample(m: int, gen: torch.Generator) -> list[tuple[int, int | None]]:
            own = self.own_envs[m]
            order = [own[i] for i in torch.randperm(len(own), generator=gen).tolist()]
            return meta_pairs(order, k, always_update=always)

        return self.draw(sample)

    def env_risk(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, index: list[int]
    ) -> torch.Tensor:
        """Per model m, the cross-entropy (M,) of environment ``index[m]`` with weights `params`."""
        logits = functional_call(self.network, params, (self.env_minibatch(x, index),))
        labels = self.env_minibatch(y, index, labels=True)
        ce = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        )
        return ce.view(labels.shape).mean(dim=1)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        self.warn_once()
        pairs = self.pair_draws()
        params: dict[str, torch.Tensor] = dict(self.network.named_parameters())
        lr, wd = float(self.hparams["lr"]), float(self.hparams["weight_decay"])
        beta = float(self.hparams["mldg_beta"])
        first = next(iter(params.values()))
        zero = torch.zeros((), dtype=first.dtype, device=first.device)
        grads = {name: torch.zeros_like(p) for name, p in params.items()}
        meta_train = torch.zeros(self.num_models, dtype=zero.dtype, device=zero.device)
        meta_test = torch.zeros_like(meta_train)
        for slot in range(max(len(p) for p in pairs)):
            # model m's pair number `slot`, or a placeholder masked out of both risks
            own_pair = [p[slot] if slot < len(p) else None for p in pairs]
            i_idx = [q[0] if q else own[0] for q, own in zip(own_pair, self.own_envs, strict=True)]
            j_idx = [
                q[1] if q and q[1] is not None else i for q, i in zip(own_pair, i_idx, strict=True)
            ]
            has_i = torch.tensor([q is not None for q in own_pair], device=zero.device)
            has_j = torch.tensor(
                [q is not None and q[1] is not None for q in own_pair], device=zero.device
            )
            risk_i = torch.where(has_i, self.env_risk(params, x, y, i_idx), zero)
            grad_i = dict(
                zip(params, torch.autograd.grad(risk_i.sum(), list(params.values())), strict=True)
            )
            with torch.no_grad():  # a fresh Adam's first step: lr * g / (|g| + eps)
                stepped = {}
                for name, p in params.items():
                    g = grad_i[name] + wd * p if wd else grad_i[name]
                    stepped[name] = (p - lr * g / (g.abs() + INNER_EPS)).requires_grad_()
            risk_j = torch.where(has_j, self.env_risk(stepped, x, y, j_idx), zero)
            grad_j = torch.autograd.grad(risk_j.sum(), list(stepped.values()))
            for name, gj in zip(params, grad_j, strict=True):
                grads[name].add_(grad_i[name] + beta * gj)
            meta_train += risk_i.detach()
            meta_test += risk_j.detach()
        count = self.env_mask.sum(dim=1).to(zero.dtype)
        for name, p in params.items():
            p.grad = grads[name] / count.view(-1, *([1] * (p.dim() - 1)))
        self.optimizer.step()
        self.update_count += 1
        return {
            "loss": (meta_train + beta * meta_test) / count,
            "meta_train": meta_train,
            "meta_test": meta_test,
        }
