"""DomainBed parity: every algorithm's update against a reference written from its update equations.

One model (M = 1) on three environments x four samples, float64, 4 updates on fixed minibatches;
the algorithm's parameters must equal the reference's to 1e-10. Each reference is plain torch
written from the update equations of DomainBed's ``algorithms.py`` (not from its code, nor from
oodeval's): a functional MLP started from the algorithm's initial weights, Adam from its equations
(Kingma & Ba, Algorithm 1, with DomainBed's L2 weight decay added to the gradient), and the
algorithm's random draws replayed from the model's own stream (`Algorithm.stream`) in the order its
docstring states. Labels are 0 or 2 of 4 classes, so "largest label + 1" (CDANN), "classes
present" and "number of classes" all differ.
"""

from __future__ import annotations

import warnings
from itertools import cycle

import numpy as np
import pytest
import torch
from scipy import stats
from torch.nn import functional as F

import oodeval.algorithms as alg
from oodeval.training import train_models
from tests.helpers.training import TinyScenario

torch.set_num_threads(1)

SHAPE = (1, 4, 4)
E, B, C = 3, 4, 4  # environments, samples per environment, classes
STEPS = 4
TOL = 1e-10


def minibatches(e: int = E, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """STEPS fixed minibatches (x (e, B, 1, 4, 4) float64, y (e, B) in {0, 2})."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        y = 2 * torch.randint(0, 2, (e, B), generator=g)
        x = torch.randn(e, B, *SHAPE, generator=g, dtype=torch.float64)
        out.append((x + 0.5 * y[..., None, None, None], y))
    return out


def build(name: str, e: int = E, **hp) -> alg.Algorithm:
    """One model of `name` on e environments, in float64."""
    torch.manual_seed(0)
    mask = torch.ones(1, e, dtype=torch.bool)
    return alg.get_algorithm(name)(SHAPE, C, mask, alg.resolve_hparams(name, hp)).double()


# --- the reference network and optimizer ---------------------------------------------------------


def linear(layer: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """Model 0's (in, out) weight and (out,) bias of a stacked linear layer, as fresh leaves."""
    return {
        f"{prefix}w": layer.weight[0].detach().clone().requires_grad_(),
        f"{prefix}b": layer.bias[0, 0].detach().clone().requires_grad_(),
    }


def net_params(a: alg.Algorithm) -> dict[str, torch.Tensor]:
    """featurizer (f1, f2) and classifier (c) weights of model 0."""
    return {
        **linear(a.featurizer.fc1, "f1"),
        **linear(a.featurizer.fc2, "f2"),
        **linear(a.classifier, "c"),
    }


def algo_params(a: alg.Algorithm) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in net_params(a).items()}


def feats(p: dict, x: torch.Tensor) -> torch.Tensor:
    """The IRM-style MLP featurizer: relu(relu(x W1 + b1) W2 + b2) on flattened images."""
    h = torch.relu(x.reshape(x.shape[0], -1) @ p["f1w"] + p["f1b"])
    return torch.relu(h @ p["f2w"] + p["f2b"])


def head(p: dict, f: torch.Tensor, prefix: str = "c") -> torch.Tensor:
    return f @ p[f"{prefix}w"] + p[f"{prefix}b"]


def ce(logits: torch.Tensor, y: torch.Tensor, reduce: bool = True) -> torch.Tensor:
    """Cross-entropy -log softmax(z)_y, averaged over the rows unless reduce=False."""
    per = torch.logsumexp(logits, dim=1) - logits[torch.arange(len(y)), y]
    return per.mean() if reduce else per


def grads(loss: torch.Tensor, p: dict, keys=None) -> dict[str, torch.Tensor]:
    keys = list(p) if keys is None else keys
    return dict(zip(keys, torch.autograd.grad(loss, [p[k] for k in keys]), strict=True))


class RefAdam:
    """Adam from its equations: m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
    theta <- theta - lr m_hat / (sqrt(v_hat) + eps), g = grad + weight_decay * theta."""

    def __init__(self, keys, lr=1e-3, wd=0.0, betas=(0.9, 0.999), eps=1e-8):
        self.keys, self.lr, self.wd, self.betas, self.eps = list(keys), lr, wd, betas, eps
        self.t, self.m, self.v = 0, {}, {}

    def step(self, p: dict, g: dict) -> None:
        b1, b2 = self.betas
        self.t += 1
        for k in self.keys:
            grad = g[k] + self.wd * p[k].detach()
            self.m[k] = b1 * self.m.get(k, 0.0) + (1 - b1) * grad
            self.v[k] = b2 * self.v.get(k, 0.0) + (1 - b2) * grad * grad
            m_hat = self.m[k] / (1 - b1**self.t)
            v_hat = self.v[k] / (1 - b2**self.t)
            new = p[k].detach() - self.lr * m_hat / (v_hat.sqrt() + self.eps)
            p[k] = new.requires_grad_()


def assert_same(got: dict, want: dict, start: dict | None = None) -> None:
    for k in want:
        torch.testing.assert_close(got[k], want[k].detach(), atol=TOL, rtol=0, msg=k)
    if start is not None:  # the updates did move the weights, so the comparison can fail
        assert max(float((got[k] - start[k]).abs().max()) for k in start) > 1e-5


def flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, *x.shape[2:])


# --- ERM, IRM, VREx, GroupDRO --------------------------------------------------------------------


def test_erm_parity():
    a = build("ERM")
    p, start = net_params(a), algo_params(a)
    opt = RefAdam(p)
    for x, y in minibatches():
        opt.step(p, grads(ce(head(p, feats(p, flat(x))), y.reshape(-1)), p))
        a.update(x, y)
    assert_same(algo_params(a), p, start)


def irm_scale_grad(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d/ds CE(s z, y) at s = 1 = mean_i (sum_c softmax(z_i)_c z_ic - z_iy) (closed form)."""
    return ((torch.softmax(z, 1) * z).sum(1) - z[torch.arange(len(y)), y]).mean()


@pytest.mark.parametrize("name", ["IRM", "VREx"])
def test_irm_and_vrex_parity(name):
    """Penalty weight 1 for the first 2 updates, lambda after; Adam restarts at update 2."""
    key = name.lower()
    a = build(name, **{f"{key}_lambda": 10.0, f"{key}_penalty_anneal_iters": 2})
    p, start = net_params(a), algo_params(a)
    opt = RefAdam(p)
    for t, (x, y) in enumerate(minibatches()):
        if t == 2:
            opt = RefAdam(p)
        z = head(p, feats(p, flat(x))).view(E, B, -1)
        risks = torch.stack([ce(z[e], y[e]) for e in range(E)])
        if name == "IRM":
            penalty = torch.stack(
                [
                    irm_scale_grad(z[e, 0::2], y[e, 0::2]) * irm_scale_grad(z[e, 1::2], y[e, 1::2])
                    for e in range(E)
                ]
            ).mean()
        else:
            penalty = ((risks - risks.mean()) ** 2).mean()
        weight = 10.0 if t >= 2 else 1.0
        opt.step(p, grads(risks.mean() + weight * penalty, p))
        a.update(x, y)
    assert_same(algo_params(a), p, start)


def test_groupdro_parity():
    a = build("GroupDRO", groupdro_eta=0.5)
    p, start = net_params(a), algo_params(a)
    opt = RefAdam(p)
    q = torch.ones(E, dtype=torch.float64)
    for x, y in minibatches():
        risks = torch.stack([ce(head(p, feats(p, x[e])), y[e]) for e in range(E)])
        q = q * torch.exp(0.5 * risks.detach())
        q = q / q.sum()
        opt.step(p, grads((q * risks).sum(), p))
        a.update(x, y)
    assert_same(algo_params(a), p, start)
    torch.testing.assert_close(a.q[0], q, atol=TOL, rtol=0)


# --- Mixup, MLDG ---------------------------------------------------------------------------------


def test_mixup_parity():
    """Cyclic pairs of a random permutation, one Beta(alpha, alpha) weight per pair."""
    alpha = 0.2
    a = build("Mixup")
    p, start = net_params(a), algo_params(a)
    opt = RefAdam(p)
    gen = a.stream(0)
    for x, y in minibatches():
        perm = torch.randperm(E, generator=gen).tolist()
        u = torch.rand(E, generator=gen, dtype=torch.float64).numpy()
        lam = stats.beta.ppf(u, alpha, alpha)
        objective = 0.0
        for s in range(E):
            i, j = perm[s], perm[(s + 1) % E]
            logits = head(p, feats(p, lam[s] * x[i] + (1 - lam[s]) * x[j]))
            objective = objective + lam[s] * ce(logits, y[i]) + (1 - lam[s]) * ce(logits, y[j])
        opt.step(p, grads(objective / E, p))
        a.update(x, y)
    assert_same(algo_params(a), p, start)


def mldg_reference(a, data, e, k, beta, lr, wd, always=False):
    """DomainBed's MLDG: split a permutation into meta-train perm[:e-k] / meta-test perm[-k:],
    pairs zip(train, cycle(test)); per pair a fresh Adam steps a copy on meta-train i, the
    meta-test gradient is taken there; the outer Adam steps with sum(G_i + beta G_j) / e."""
    p = net_params(a)
    opt = RefAdam(p, lr=lr, wd=wd)
    gen = a.stream(0)
    for x, y in data:
        perm = torch.randperm(e, generator=gen).tolist()
        kk = k
        if always and not perm[: e - k]:  # the corrected option: one meta-test environment
            kk = e - 1
        pairs = list(zip(perm[: e - kk], cycle(perm[-kk:]))) if kk else [(perm[0], None)]
        total = {key: torch.zeros_like(v) for key, v in p.items()}
        for i, j in pairs:
            inner = {key: v.detach().clone().requires_grad_() for key, v in p.items()}
            g_i = grads(ce(head(inner, feats(inner, x[i])), y[i]), inner)
            RefAdam(inner, lr=lr, wd=wd).step(inner, g_i)  # a fresh Adam: one step
            g_j = {key: torch.zeros_like(v) for key, v in p.items()}
            if j is not None:
                g_j = grads(ce(head(inner, feats(inner, x[j])), y[j]), inner)
            for key in total:
                total[key] = total[key] + g_i[key] + beta * g_j[key]
        opt.step(p, {key: v / e for key, v in total.items()})
    return p


@pytest.mark.parametrize(("n_meta_test", "wd"), [(2, 0.0), (1, 0.0), (1, 1e-2)])
def test_mldg_parity(n_meta_test, wd):
    a = build("MLDG", n_meta_test=n_meta_test, weight_decay=wd, mldg_beta=0.7)
    start, data = algo_params(a), minibatches()
    want = mldg_reference(a, data, E, n_meta_test, 0.7, 1e-3, wd)
    for x, y in data:
        a.update(x, y)
    assert_same(algo_params(a), want, start)


@pytest.mark.parametrize("e", [1, 2])
def test_mldg_always_update_parity(e):
    """The corrected option: E = 2 takes one pair (n_meta_test lowered to 1), E = 1 an ERM step."""
    a = build("MLDG", e=e, mldg_always_update=True)
    start, data = algo_params(a), minibatches(e=e)
    want = mldg_reference(a, data, e, 2, 1.0, 1e-3, 0.0, always=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", alg.DomainBedDefectWarning)
        for x, y in data:
            a.update(x, y)
    assert_same(algo_params(a), want, start)


def test_mldg_defect_warns_once_per_unit_with_three_given_environments():
    """Three given environments: every LOO model has two, so DomainBed's MLDG never trains it."""
    with pytest.warns(alg.DomainBedDefectWarning, match="mldg_always_update") as caught:
        trained = train_models(TinyScenario(n=24), "MLDG", seed=0, steps=3, batch_size=4)
    assert sum(issubclass(w.category, alg.DomainBedDefectWarning) for w in caught) == 1
    assert trained.folds[-1] == "all"
    with warnings.catch_warnings():
        warnings.simplefilter("error", alg.DomainBedDefectWarning)
        train_models(
            TinyScenario(n=24), "MLDG", seed=0, steps=3, batch_size=4,
            hparams={"mldg_always_update": True},
        )  # fmt: skip


# --- CORAL, MMD ----------------------------------------------------------------------------------


def coral(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ca = (a - a.mean(0)).T @ (a - a.mean(0)) / (len(a) - 1)
    cb = (b - b.mean(0)).T @ (b - b.mean(0)) / (len(b) - 1)
    return ((a.mean(0) - b.mean(0)) ** 2).mean() + ((ca - cb) ** 2).mean()


def mmd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    def k(u, v):
        d = ((u[:, None] - v[None]) ** 2).sum(-1)
        return sum(torch.exp(-g * d) for g in (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)).mean()

    return k(a, a) + k(b, b) - 2 * k(a, b)


@pytest.mark.parametrize(("name", "distance"), [("CORAL", coral), ("MMD", mmd)])
def test_alignment_parity(name, distance):
    a = build(name, mmd_gamma=2.0)
    p, start = net_params(a), algo_params(a)
    opt = RefAdam(p)
    pairs = [(i, j) for i in range(E) for j in range(i + 1, E)]
    for x, y in minibatches():
        f = [feats(p, x[e]) for e in range(E)]
        nll = torch.stack([ce(head(p, f[e]), y[e]) for e in range(E)]).mean()
        penalty = sum(distance(f[i], f[j]) for i, j in pairs) / len(pairs)
        opt.step(p, grads(nll + 2.0 * penalty, p))
        a.update(x, y)
    assert_same(algo_params(a), p, start)


# --- DANN, CDANN ---------------------------------------------------------------------------------


def disc_params(a) -> dict[str, torch.Tensor]:
    """The discriminator's layers, and CDANN's class embedding (C, d)."""
    out = {}
    for i, layer in enumerate(a.discriminator.layers):
        out.update(linear(layer, f"d{i}"))
    if a.conditional:
        out["emb"] = a.class_embeddings[0].detach().clone().requires_grad_()
    return out


@pytest.mark.parametrize(("name", "k"), [("DANN", 1), ("DANN", 2), ("CDANN", 1)])
def test_dann_parity(name, k):
    """Update n (from 1) is a discriminator step iff n % (1 + k) < k: G D G D for k = 1."""
    conditional = name == "CDANN"
    hp = {"lambda": 0.5, "grad_penalty": 0.1, "mlp_width": 8, "weight_decay_d": 1e-3}
    a = build(name, d_steps_per_g_step=k, **hp)
    p, pd = net_params(a), disc_params(a)
    start = {**algo_params(a), **{key: v.detach().clone() for key, v in pd.items()}}
    gen_opt = RefAdam(p, betas=(0.5, 0.9))
    disc_opt = RefAdam(pd, wd=1e-3, betas=(0.5, 0.9))
    env = torch.arange(E).repeat_interleave(B)
    depth = len(a.discriminator.layers)
    for n, (x, y) in enumerate(minibatches(), start=1):
        labels = y.reshape(-1)
        z = feats(p, flat(x))
        disc_in = z + pd["emb"][labels] if conditional else z
        h = disc_in
        for i in range(depth):
            h = head(pd, h, f"d{i}")
            h = torch.relu(h) if i < depth - 1 else h
        per = ce(h, env, reduce=False)
        if conditional:
            top = int(labels.max()) + 1  # DomainBed's one_hot(y) width
            counts = torch.stack([(labels == c).sum() for c in range(top)]).double()
            disc_loss = (per / (counts[labels] * top)).sum()
        else:
            disc_loss = per.mean()
        (in_grad,) = torch.autograd.grad(per.sum(), disc_in, create_graph=True)
        disc_loss = disc_loss + 0.1 * (in_grad**2).sum(1).mean()
        if n % (1 + k) < k:
            disc_opt.step(pd, grads(disc_loss, pd))
        else:
            gen_opt.step(p, grads(ce(head(p, z), labels) - 0.5 * disc_loss, p))
        a.update(x, y)
    got = {**algo_params(a), **{key: v.detach() for key, v in disc_params(a).items()}}
    assert_same(got, {**p, **pd}, start)
    assert not torch.equal(got["d0w"], start["d0w"]) and not torch.equal(got["f1w"], start["f1w"])


# --- MTL -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("feed", [False, True])
def test_mtl_parity(feed):
    """Default: DomainBed's normal_() noise (one randn(B, d) per environment) beside f(x);
    mtl_feed_embedding=True: the EMA embedding itself. The loss sums the environments' risks."""
    ema = 0.9
    a = build("MTL", mtl_ema=ema, mtl_feed_embedding=feed)
    p, start = net_params(a), algo_params(a)
    opt = RefAdam(p)
    gen = a.stream(0)
    emb = torch.zeros(E, a.featurizer.n_outputs, dtype=torch.float64)
    for x, y in minibatches():
        loss = 0.0
        for e in range(E):
            f = feats(p, x[e])
            new = ema * f.mean(0) + (1 - ema) * emb[e]
            emb[e] = new.detach()
            if feed:
                side = new.expand_as(f)
            else:  # drawn in the features' dtype, as normal_() on them
                side = torch.randn(*f.shape, generator=gen, dtype=torch.float64)
            loss = loss + ce(head(p, torch.cat([f, side], 1)), y[e])
        opt.step(p, grads(loss, p))
        a.update(x, y)
    assert_same(algo_params(a), p, start)
    torch.testing.assert_close(a.embeddings[0], emb, atol=TOL, rtol=0)


# --- SagNet --------------------------------------------------------------------------------------


def randomize(f: torch.Tensor, what: str, gen: torch.Generator, eps: float = 1e-5) -> torch.Tensor:
    """DomainBed's randomisation: a ~ U(0, 1) per sample, a permutation of the samples as
    partners; statistics over the feature axis with the unbiased variance."""
    n = len(f)
    a = torch.rand(n, 1, generator=gen).double()
    perm = torch.randperm(n, generator=gen)
    mean, var = f.mean(1, keepdim=True), f.var(1, keepdim=True)
    z = (f - mean) / (var + eps).sqrt()
    if what == "style":
        mean = a * mean + (1 - a) * mean[perm]
        var = a * var + (1 - a) * var[perm]
    else:
        z = z[perm].detach()
    return z * (var + eps).sqrt() + mean


def test_sagnet_parity():
    w_adv = 0.1
    a = build("SagNet")
    p = {**net_params(a), **linear(a.style_net, "s")}
    start = {**algo_params(a), "sw": a.style_net.weight[0].detach().clone()}
    keys_f, keys_c, keys_s = ["f1w", "f1b", "f2w", "f2b"], ["cw", "cb"], ["sw", "sb"]
    opt_f, opt_c, opt_s = RefAdam(keys_f), RefAdam(keys_c), RefAdam(keys_s)
    gen = a.stream(0)
    for x, y in minibatches():
        xs, ys = flat(x), y.reshape(-1)
        loss_c = ce(head(p, randomize(feats(p, xs), "style", gen)), ys)
        g = grads(loss_c, p, keys_f + keys_c)
        opt_f.step(p, g)
        opt_c.step(p, g)
        loss_s = ce(head(p, randomize(feats(p, xs), "content", gen), "s"), ys)
        opt_s.step(p, grads(loss_s, p, keys_s))
        logits = head(p, randomize(feats(p, xs), "content", gen), "s")
        loss_adv = w_adv * -torch.log_softmax(logits, 1).mean(1).mean()
        opt_f.step(p, grads(loss_adv, p, keys_f))
        a.update(x, y)
    got = {
        **algo_params(a),
        "sw": a.style_net.weight[0].detach(),
        "sb": a.style_net.bias[0, 0].detach(),
    }
    assert_same(got, p, start)


# --- ARM -----------------------------------------------------------------------------------------


def context_params(a) -> dict[str, torch.Tensor]:
    out = {}
    for i, conv in enumerate(a.context_net.convs):
        out[f"k{i}w"] = conv.weight[0].detach().clone().requires_grad_()
        out[f"k{i}b"] = conv.bias[0].detach().clone().requires_grad_()
    for i, norm in enumerate(a.context_net.norms):
        out[f"n{i}w"] = norm.weight[0].detach().clone().requires_grad_()
        out[f"n{i}b"] = norm.bias[0].detach().clone().requires_grad_()
    return out


def context_map(pc: dict, running: list, x: torch.Tensor, training: bool) -> torch.Tensor:
    """DomainBed's ContextNet: 5x5 conv -> BatchNorm -> ReLU, twice, then a 5x5 conv to 1 channel.
    BatchNorm: batch mean / biased variance in training (running averages updated with momentum
    0.1 and the unbiased variance), the running averages in evaluation."""
    h = x
    for i in range(2):
        h = F.conv2d(h, pc[f"k{i}w"], pc[f"k{i}b"], padding=2)
        if training:
            mean, var = h.mean((0, 2, 3)), h.var((0, 2, 3), unbiased=False)
            with torch.no_grad():
                running[i][0] = 0.9 * running[i][0] + 0.1 * mean
                running[i][1] = 0.9 * running[i][1] + 0.1 * h.var((0, 2, 3), unbiased=True)
        else:
            mean, var = running[i]
        h = (h - mean[:, None, None]) / (var[:, None, None] + 1e-5).sqrt()
        h = torch.relu(h * pc[f"n{i}w"][:, None, None] + pc[f"n{i}b"][:, None, None])
    return F.conv2d(h, pc["k2w"], pc["k2b"], padding=2)


def arm_logits(p, pc, running, x: torch.Tensor, groups: int, training: bool) -> torch.Tensor:
    """Append each group's mean context map to its images, then the MLP on (C + 1) channels."""
    ctx = context_map(pc, running, x, training)
    ctx = (
        ctx.view(groups, -1, *ctx.shape[1:])
        .mean(1, keepdim=True)
        .expand(-1, len(x) // groups, -1, -1, -1)
    )
    return head(p, feats(p, torch.cat([x, ctx.reshape(len(x), *ctx.shape[2:])], dim=1)))


@pytest.mark.parametrize("train_context", [False, True])
def test_arm_parity(train_context):
    """Default: DomainBed's context net is never trained (only its BatchNorm statistics move)."""
    a = build("ARM", arm_train_context_net=train_context)
    p, pc = net_params(a), context_params(a)
    start = {**algo_params(a), **{k: v.detach().clone() for k, v in pc.items()}}
    opt = RefAdam(list(p) + (list(pc) if train_context else []))
    both = {**p, **pc}
    channels = pc["k0w"].shape[0]
    running = [[torch.zeros(channels).double(), torch.ones(channels).double()] for _ in range(2)]
    for x, y in minibatches():
        loss = ce(arm_logits(both, both, running, flat(x), E, True), y.reshape(-1))
        opt.step(both, grads(loss, both, opt.keys))
        a.update(x, y)
    got = {**algo_params(a), **{k: v.detach() for k, v in context_params(a).items()}}
    assert_same(got, both, start)
    assert train_context != all(torch.equal(got[k], start[k]) for k in pc)
    for i, norm in enumerate(a.context_net.norms):
        torch.testing.assert_close(norm.running_mean[0], running[i][0], atol=TOL, rtol=0)
        torch.testing.assert_close(norm.running_var[0], running[i][1], atol=TOL, rtol=0)
    # prediction: groups of the training batch size B when they divide the batch (running stats)
    a.eval()
    probe = flat(minibatches(seed=5)[0][0])[:8]
    with torch.no_grad():
        want = arm_logits(both, both, running, probe, 2, False)
        torch.testing.assert_close(a.predict(probe)[0], want, atol=TOL, rtol=0)
        want = arm_logits(both, both, running, probe[:7], 1, False)
        torch.testing.assert_close(a.predict(probe[:7])[0], want, atol=TOL, rtol=0)


# --- RSC -----------------------------------------------------------------------------------------


def test_rsc_parity():
    """Drop factors 0.3 (not the default 1/3): with 256 features, 1/3 puts the feature percentile
    exactly on a sample (index 170), where numpy and torch may round the threshold apart."""
    f_drop = b_drop = 0.3
    a = build("RSC", rsc_f_drop_factor=f_drop, rsc_b_drop_factor=b_drop)
    p, start = net_params(a), algo_params(a)
    opt = RefAdam(p)
    for x, y in minibatches():
        ys = y.reshape(-1)
        f = feats(p, flat(x))
        grad = p["cw"].detach().T[ys]  # d logit_y / d f = the classifier's column y
        f_np = grad.numpy()
        keep_f = grad < torch.from_numpy(np.percentile(f_np, (1 - f_drop) * 100, axis=1))[:, None]
        with torch.no_grad():
            before = torch.softmax(head(p, f), 1)[torch.arange(len(ys)), ys]
            after = torch.softmax(head(p, f * keep_f), 1)[torch.arange(len(ys)), ys]
            change = (before - after).numpy()
        keep_b = torch.from_numpy(change < np.percentile(change, (1 - b_drop) * 100))[:, None]
        opt.step(p, grads(ce(head(p, f * (keep_f | keep_b)), ys), p))
        a.update(x, y)
    assert_same(algo_params(a), p, start)


@pytest.mark.parametrize(
    "module",
    ["oodeval.algorithms", "oodeval.algorithms.base", "oodeval.algorithms.mldg",
     "oodeval.algorithms.mixup", "oodeval.algorithms.invariance"],
)  # fmt: skip
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
