"""Behaviour tests of the 14 algorithms: each one really does its job, on tiny synthetic batches."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import oodeval.algorithms as alg
from oodeval.algorithms.adversarial import DANN
from oodeval.algorithms.alignment import coral_distances, mmd_distances
from oodeval.algorithms.base import masked_mean, per_env_cross_entropy
from oodeval.algorithms.invariance import irm_penalties
from oodeval.algorithms.mixup import cyclic_pairs
from oodeval.algorithms.mldg import meta_pairs
from oodeval.algorithms.sagnet import feature_style, randomize_content, randomize_style
from oodeval.errors import OodevalError

torch.set_num_threads(1)

SHAPE = (2, 14, 14)
LOO_MASK = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)


def batches(e: int = 3, b: int = 16, seed: int = 0, shift: float = 0.0):
    """Per-environment minibatches whose channel-0 mean tells the class; env e is shifted."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (e, b), generator=g)
    x = torch.rand(e, b, *SHAPE, generator=g) * 0.5
    x[:, :, 0] += 0.3 * y[:, :, None, None]
    x += shift * torch.arange(e).view(e, 1, 1, 1, 1)
    return x, y


def make(name: str, mask: torch.Tensor = LOO_MASK, seed: int = 0, **hp):
    torch.manual_seed(seed)
    return alg.get_algorithm(name)(SHAPE, 2, mask, alg.resolve_hparams(name, hp))


# --- registry and hyperparameters ----------------------------------------------------------------

DOMAINBED_DEFAULTS = [
    ("ERM", "lr", 1e-3),
    ("IRM", "irm_lambda", 1e2),
    ("IRM", "irm_penalty_anneal_iters", 500),
    ("VREx", "vrex_lambda", 1e1),
    ("VREx", "vrex_penalty_anneal_iters", 500),
    ("GroupDRO", "groupdro_eta", 1e-2),
    ("Mixup", "mixup_alpha", 0.2),
    ("MLDG", "mldg_beta", 1.0),
    ("MMD", "mmd_gamma", 1.0),
    ("CORAL", "mmd_gamma", 1.0),
    ("DANN", "lambda", 1.0),
    ("DANN", "mlp_width", 256),
    ("DANN", "mlp_depth", 3),
    ("CDANN", "beta1", 0.5),
    ("MLDG", "n_meta_test", 2),
    ("MTL", "mtl_ema", 0.99),
    ("SagNet", "sag_w_adv", 0.1),
    ("RSC", "rsc_f_drop_factor", 1 / 3),
    ("RSC", "rsc_b_drop_factor", 1 / 3),
    ("ARM", "arm_context_channels", 64),
    # DomainBed's defects are kept by default; these options correct them
    ("MLDG", "mldg_always_update", False),
    ("MTL", "mtl_feed_embedding", False),
    ("ARM", "arm_train_context_net", False),
]


@pytest.mark.parametrize(("name", "key", "value"), DOMAINBED_DEFAULTS)
def test_defaults_are_domainbeds_small_image_defaults(name, key, value):
    assert alg.default_hparams(name)[key] == value


def test_all_fourteen_paper_algorithms_are_registered():
    assert set(alg.PAPER_ALGORITHMS) <= set(alg.available())
    assert len(alg.PAPER_ALGORITHMS) == 14


def test_sample_hparams_is_seeded_and_within_the_search_space():
    a, b = alg.sample_hparams("IRM", 3), alg.sample_hparams("IRM", 3)
    assert a == b
    assert a != alg.sample_hparams("IRM", 4)
    for seed in range(30):
        hp = alg.sample_hparams("IRM", seed)
        assert 10**-4.5 <= hp["lr"] <= 10**-2.5
        assert 10**-1 <= hp["irm_lambda"] <= 10**5
        assert 1 <= hp["irm_penalty_anneal_iters"] <= 10**4
        assert set(hp) == set(alg.default_hparams("IRM"))
    assert {alg.sample_hparams("DANN", s)["mlp_depth"] for s in range(40)} == {3, 4, 5}


def test_unknown_names_raise_one_line_errors():
    with pytest.raises(OodevalError, match="unknown algorithm 'Nope'"):
        alg.default_hparams("Nope")
    with pytest.raises(OodevalError, match="unknown hyperparameter"):
        alg.resolve_hparams("ERM", {"irm_lambda": 1.0})
    with pytest.raises(OodevalError, match="subclass"):
        alg.register_algorithm(int)


# --- the ensemble is M independent models --------------------------------------------------------

# every algorithm: the random ones draw from per-model streams, so a lone copy draws the same
STACKED = list(alg.PAPER_ALGORITHMS) + ["MLDG-always"]


def stacked_case(name: str) -> tuple[str, dict]:
    if name == "MLDG-always":
        return "MLDG", {"mldg_always_update": True}
    hp = {f"{name.lower()}_penalty_anneal_iters": 1} if name in ("IRM", "VREx") else {}
    return name, hp


@pytest.mark.parametrize("name", STACKED)
def test_batched_models_train_exactly_like_separate_models(name):
    """Model m of the stack follows the same trajectory as a lone copy trained on its own mask."""
    x, y = batches()
    name, hp = stacked_case(name)
    stack = make(name, **hp)
    lone = []
    for m in range(4):  # a fresh single model (own optimizer) starting from model m's weights
        one = type(stack)(SHAPE, 2, LOO_MASK[m : m + 1], stack.hparams)
        one.load_state_dict({k: v[m : m + 1].clone() for k, v in stack.state_dict().items()})
        lone.append(one)
    for _ in range(3):
        stack.update(x, y)
        for one in lone:
            one.update(x, y)
    stack.eval()
    probe = batches(seed=9)[0][0]
    together = stack.predict(probe)
    for m, one in enumerate(lone):
        torch.testing.assert_close(one.eval().predict(probe)[0], together[m], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", STACKED)
def test_per_model_minibatches_train_like_separate_models_on_their_own_environments(name):
    """The trainer's LOO layout: model k gets x[envs[k]] of shape (M, N - 1, B, ...)."""
    x, y = batches()
    envs = torch.tensor([[1, 2], [0, 2], [0, 1]])
    name, hp = stacked_case(name)
    stack = make(name, mask=torch.ones(3, 2, dtype=torch.bool), **hp)
    lone = []
    for m in range(3):
        one = type(stack)(SHAPE, 2, torch.ones(1, 2, dtype=torch.bool), stack.hparams)
        one.load_state_dict({k: v[m : m + 1].clone() for k, v in stack.state_dict().items()})
        lone.append(one)
    for _ in range(3):
        stack.update(x[envs], y[envs])
        for m, one in enumerate(lone):
            one.update(x[envs[m]], y[envs[m]])
    probe = batches(seed=9)[0][0]
    together = stack.eval().predict(probe)
    for m, one in enumerate(lone):
        torch.testing.assert_close(one.eval().predict(probe)[0], together[m], atol=2e-5, rtol=1e-4)


def test_batched_cnn_models_train_exactly_like_separate_cnns():
    """The grouped convolutions keep the stacked CNNs independent."""
    x, y = batches(b=6)
    torch.manual_seed(0)
    stack = alg.get_algorithm("ERM")(SHAPE, 2, LOO_MASK, alg.default_hparams("ERM"), model="cnn")
    lone = []
    for m in range(4):
        one = type(stack)(SHAPE, 2, LOO_MASK[m : m + 1], stack.hparams, model="cnn")
        one.load_state_dict({k: v[m : m + 1].clone() for k, v in stack.state_dict().items()})
        lone.append(one)
    for _ in range(2):
        stack.update(x, y)
        for one in lone:
            one.update(x, y)
    probe = batches(seed=9)[0][0]
    together = stack.eval().predict(probe)
    for m, one in enumerate(lone):
        torch.testing.assert_close(one.eval().predict(probe)[0], together[m], atol=2e-5, rtol=1e-4)


def test_select_models_copies_one_model():
    a = make("ERM").eval()
    probe = batches()[0][1]
    for m in range(4):
        assert torch.equal(a.select_models(m).predict(probe)[0], a.predict(probe)[m])


# --- IRM and VREx: penalties switch on after the anneal steps, Adam is reset ---------------------


def test_irm_penalty_matches_closed_form():
    """d/dw CE(w z, y) at w = 1 is mean(sum_c softmax(z)_c z_c - z_y); penalty = g_even * g_odd."""
    torch.manual_seed(0)
    logits = torch.randn(1, 2, 10, 3)
    y = torch.randint(0, 3, (2, 10))
    got = irm_penalties(logits, y)
    for e in range(2):
        z, t = logits[0, e].numpy().astype(np.float64), y[e].numpy()
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        g = (p * z).sum(1) - z[np.arange(10), t]
        assert got[0, e].item() == pytest.approx(g[0::2].mean() * g[1::2].mean(), rel=1e-4)


@pytest.mark.parametrize(("name", "lam_key", "anneal_key"),
                         [("IRM", "irm_lambda", "irm_penalty_anneal_iters"),
                          ("VREx", "vrex_lambda", "vrex_penalty_anneal_iters")])  # fmt: skip
def test_penalty_weight_switches_on_after_anneal_and_adam_resets(name, lam_key, anneal_key):
    x, y = batches()
    a = make(name, **{lam_key: 1000.0, anneal_key: 2})
    for step in range(4):
        out = a.update(x, y)
        weight = 1000.0 if step >= 2 else 1.0
        torch.testing.assert_close(out["loss"], out["nll"] + weight * out["penalty"])
        adam_steps = int(a.optimizer.state[a.classifier.weight]["step"])
        assert adam_steps == (step + 1 if step < 2 else step - 1)  # fresh Adam at update 2


def test_vrex_penalty_is_the_variance_of_own_environment_risks():
    x, y = batches()
    a = make("VREx")
    _, logits = a.logits_per_env(x)
    risks = per_env_cross_entropy(logits, y).detach().numpy()
    got = a.penalties(torch.as_tensor(risks), logits, y).detach().numpy()
    for m in range(4):
        own = risks[m][LOO_MASK[m].numpy()]
        assert got[m] == pytest.approx(np.var(own), rel=1e-5)


# --- GroupDRO ------------------------------------------------------------------------------------


def test_groupdro_weights_move_toward_the_worst_environment():
    x, y = batches()
    y[2] = torch.randint(0, 2, y[2].shape, generator=torch.Generator().manual_seed(5))
    x[2] = torch.rand_like(x[2])  # environment 2: labels unrelated to the images
    a = make("GroupDRO", groupdro_eta=0.5)
    _, logits = a.logits_per_env(x)
    risks = per_env_cross_entropy(logits, y).detach()
    q0 = a.q.clone()
    a.update(x, y)
    expected = torch.where(LOO_MASK, q0 * torch.exp(0.5 * risks), torch.zeros(()))
    torch.testing.assert_close(a.q, expected / expected.sum(1, keepdim=True))
    for _ in range(30):
        a.update(x, y)
    for m in (0, 1, 3):  # models that train on environment 2 weight it most
        assert int(a.q[m].argmax()) == 2 and a.q[m, 2] > q0[m, 2]
    assert torch.all(a.q[~LOO_MASK] == 0)
    torch.testing.assert_close(a.q.sum(1), torch.ones(4))


# --- Mixup and MLDG ------------------------------------------------------------------------------


def test_mixup_pairs_only_a_models_own_environments():
    a = make("Mixup")
    draws = a.mixing_draws()
    first, second, valid = cyclic_pairs([order for order, _ in draws], 3)
    for m in range(4):
        own = set(torch.nonzero(LOO_MASK[m]).flatten().tolist())
        slots = valid[m]
        assert sorted(draws[m][0]) == sorted(own)  # a permutation of the model's environments
        assert set(first[m][slots].tolist()) == own  # every own env is a first member once
        assert set(second[m][slots].tolist()) == own
        assert int(slots.sum()) == len(own) == len(draws[m][1])
    f, s, v = cyclic_pairs([[1]], 3)
    assert (f[0, 0], s[0, 0], int(v.sum())) == (1, 1, 1)  # one environment: mixed with itself


def test_mixup_weights_follow_the_beta_distribution():
    """The inverse-CDF draws are Beta(alpha, alpha): Kolmogorov-Smirnov against scipy's CDF."""
    stats = pytest.importorskip("scipy.stats")
    a = make("Mixup", mask=torch.ones(1, 3, dtype=torch.bool), mixup_alpha=0.4)
    lam = torch.cat([a.mixing_draws()[0][1] for _ in range(700)]).numpy()
    assert stats.kstest(lam, stats.beta(0.4, 0.4).cdf).pvalue > 1e-3


def test_mixup_trains_on_mixed_inputs():
    x, y = batches()
    a = make("Mixup")
    before = a.classifier.weight.detach().clone()
    losses = [a.update(x, y)["loss"] for _ in range(20)]
    assert not torch.equal(before, a.classifier.weight)
    assert losses[-1].mean() < losses[0].mean()


def test_mldg_pairs_follow_domainbeds_split():
    assert meta_pairs([2, 0, 1], 2) == [(2, 0)]  # E - 2 pairs; environment 1 sits out
    assert meta_pairs([2, 0, 1], 1) == [(2, 1), (0, 1)]
    assert meta_pairs([3, 1, 0, 2], 2) == [(3, 0), (1, 2)]
    assert meta_pairs([1, 0], 2) == [] and meta_pairs([1], 1) == []  # DomainBed: no update
    assert meta_pairs([1, 0], 2, always_update=True) == [(1, 0)]
    assert meta_pairs([1], 2, always_update=True) == [(1, None)]
    assert meta_pairs([2, 0, 1], 2, always_update=True) == [(2, 0)]  # enough envs: unchanged


def test_mldg_with_two_environments_is_domainbeds_no_op_and_warns_once():
    x, y = batches(e=2)
    mask = torch.ones(1, 2, dtype=torch.bool)
    a = make("MLDG", mask)
    before = {k: v.clone() for k, v in a.state_dict().items() if k != "rng_state"}
    with pytest.warns(alg.DomainBedDefectWarning, match="mldg_always_update=True") as caught:
        for _ in range(3):
            a.update(x, y)
    assert len([w for w in caught if issubclass(w.category, alg.DomainBedDefectWarning)]) == 1
    for k, v in before.items():
        assert torch.equal(a.state_dict()[k], v), k  # DomainBed's MLDG never moves
    assert a.idle_models() == [0]


def test_mldg_always_update_trains_two_and_one_environment_models():
    x, y = batches(e=2)
    mask = torch.tensor([[True, True], [False, True]])
    a = make("MLDG", mask, mldg_always_update=True)
    w0 = a.classifier.weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no defect left to warn about
        out = a.update(x, y)
    assert a.idle_models() == []
    assert not torch.equal(a.classifier.weight[0], w0[0])
    assert not torch.equal(a.classifier.weight[1], w0[1])
    assert out["meta_test"][0] > 0 and out["meta_test"][1] == 0  # one env: an ERM step


def test_mldg_rejects_a_non_positive_n_meta_test():
    with pytest.raises(OodevalError, match="n_meta_test"):
        make("MLDG", n_meta_test=0)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("MLDG", "mldg_always_update"),
        ("MTL", "mtl_feed_embedding"),
        ("ARM", "arm_train_context_net"),
    ],
)
def test_domainbed_corrections_must_be_booleans(name, key):
    with pytest.raises(OodevalError, match=f"{key} of {name} must be true or false"):
        make(name, **{key: "false"})


# --- CORAL and MMD -------------------------------------------------------------------------------


def test_coral_distance_matches_numpy_means_and_covariances():
    torch.manual_seed(0)
    f = torch.randn(1, 2, 12, 4)
    got = coral_distances(f, torch.ones(1, 2, dtype=torch.bool)).item()
    a, b = f[0, 0].numpy().astype(np.float64), f[0, 1].numpy().astype(np.float64)
    want = ((a.mean(0) - b.mean(0)) ** 2).mean() + ((np.cov(a.T) - np.cov(b.T)) ** 2).mean()
    assert got == pytest.approx(want, rel=1e-4)


def test_mmd_distance_matches_brute_force_kernel_sums():
    # float64: the kernel distance |a|^2 + |b|^2 - 2ab loses ~1e-7 |a|^2 to float32 rounding and
    # exp(-1000 d) multiplies that by 1000 (1e-4 relative, CPU-dependent); float64 leaves ~1e-13
    torch.manual_seed(0)
    f = torch.randn(1, 2, 5, 3, dtype=torch.float64) * 0.3
    got = mmd_distances(f, torch.ones(1, 2, dtype=torch.bool)).item()
    gammas = [1e-3, 1e-2, 1e-1, 1, 10, 100, 1000]

    def k(u, v):
        return sum(math.exp(-g * float(((u - v) ** 2).sum())) for g in gammas)

    a, b = f[0, 0], f[0, 1]
    kaa = np.mean([k(u, v) for u in a for v in a])
    kbb = np.mean([k(u, v) for u in b for v in b])
    kab = np.mean([k(u, v) for u in a for v in b])
    assert got == pytest.approx(kaa + kbb - 2 * kab, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", ["CORAL", "MMD"])
def test_alignment_penalty_decreases_under_training(name):
    # float64 (see above): in float32 the MMD penalty carries CPU-dependent rounding noise that 40
    # Adam steps grow past the threshold on some CPUs. In float64 (differences across CPUs ~1e-13)
    # the penalty falls to 0.05-0.10 (CORAL) and 0.12-0.38 (MMD) of its first value.
    x, y = batches(shift=0.5)
    a = make(name, mmd_gamma=10.0, lr=3e-3).double()
    x = x.double()
    first = a.update(x, y)["penalty"]
    for _ in range(40):
        last = a.update(x, y)["penalty"]
    assert torch.all(last[LOO_MASK.sum(1) >= 2] < 0.5 * first)


def test_masked_pairs_are_ignored():
    torch.manual_seed(0)
    f = torch.randn(2, 3, 6, 4)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    g = f.clone()
    g[0, 2] = 1000.0  # model 0 does not train on environment 2
    assert coral_distances(f, mask)[0] == coral_distances(g, mask)[0]
    assert mmd_distances(f, mask)[0] == mmd_distances(g, mask)[0]


# --- DANN and CDANN ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["DANN", "CDANN"])
def test_dann_alternates_adversarial_generator_and_discriminator_steps(name):
    """DomainBed's phase: with d_steps_per_g_step = 1 the first update is a generator step."""
    x, y = batches(shift=0.3)
    a = make(name, **{"lambda": 50.0})
    feat0 = a.featurizer.fc1.weight.detach().clone()
    disc0 = a.discriminator.layers[0].weight.detach().clone()
    assert not a.is_discriminator_step()
    a.eval()
    before = a.discriminator_loss(a.logits_per_env(x)[0], y).detach()
    a.update(x, y)  # generator step: the featurizer moves to *raise* the discriminator's loss
    assert torch.equal(a.discriminator.layers[0].weight, disc0)
    assert not torch.equal(a.featurizer.fc1.weight, feat0)
    mid = a.discriminator_loss(a.logits_per_env(x)[0], y).detach()
    assert torch.all(mid > before)
    feat1 = a.featurizer.fc1.weight.detach().clone()
    assert a.is_discriminator_step()
    a.update(x, y)  # discriminator step: only the discriminator moves, and it gets better
    assert torch.equal(a.featurizer.fc1.weight, feat1)
    assert not torch.equal(a.discriminator.layers[0].weight, disc0)
    after = a.discriminator_loss(a.logits_per_env(x)[0], y).detach()
    assert torch.all(after < mid)


def test_dann_phase_with_several_discriminator_steps():
    """Update n (from 1) is a discriminator step when n % (1 + k) < k: k = 2 gives D G D D G."""
    x, y = batches(b=4)
    a = make("DANN", d_steps_per_g_step=2)
    phases = []
    for _ in range(5):
        phases.append("D" if a.is_discriminator_step() else "G")
        w = a.featurizer.fc1.weight.detach().clone()
        a.update(x, y)
        assert torch.equal(a.featurizer.fc1.weight, w) == (phases[-1] == "D")
    assert "".join(phases) == "DGDDG"


def test_dann_discriminator_only_scores_a_models_own_environments():
    x, y = batches()
    a = make("DANN")
    feats = a.logits_per_env(x)[0].detach()
    moved = feats.clone()
    moved[0, 0] += 5.0  # model 0 does not train on environment 0
    assert torch.equal(a.discriminator_loss(feats, y)[0], a.discriminator_loss(moved, y)[0])
    assert isinstance(a, DANN) and a.discriminator.layers[-1].weight.shape[-1] == 3


def test_cdann_weights_each_class_equally():
    x, y = batches()
    y[:, :12] = 0
    y[:, 12:] = 1  # 3:1 class imbalance
    a = make("CDANN", mask=torch.ones(1, 3, dtype=torch.bool))
    feats = a.logits_per_env(x)[0].detach()
    out = a.discriminator(
        feats.reshape(1, -1, feats.shape[-1]) + a.class_embeddings[:, y.reshape(-1)]
    )
    ce = F.cross_entropy(out[0], torch.arange(3).repeat_interleave(16), reduction="none").detach()
    labels = y.reshape(-1)
    want = 0.5 * ce[labels == 0].mean() + 0.5 * ce[labels == 1].mean()
    assert a.discriminator_loss(feats, y)[0].item() == pytest.approx(want.item(), rel=1e-5)


def test_cdann_class_balance_divides_by_the_largest_label_plus_one():
    """DomainBed's one_hot(y) has max(y) + 1 columns: classes 1 and 3 present -> divide by 4."""
    x, y = batches()
    y[:, :8] = 1
    y[:, 8:] = 3
    a = make("CDANN", mask=torch.ones(1, 3, dtype=torch.bool))
    a.class_embeddings.data = torch.randn(1, 5, a.class_embeddings.shape[-1])
    a.num_classes = 5
    feats = a.logits_per_env(x)[0].detach()
    out = a.discriminator(
        feats.reshape(1, -1, feats.shape[-1]) + a.class_embeddings[:, y.reshape(-1)]
    )
    ce = F.cross_entropy(out[0], torch.arange(3).repeat_interleave(16), reduction="none").detach()
    labels = y.reshape(-1)
    want = (ce[labels == 1].mean() + ce[labels == 3].mean()) / 4
    assert a.discriminator_loss(feats, y)[0].item() == pytest.approx(want.item(), rel=1e-5)


# --- MTL, ARM: batch-dependent predictions -------------------------------------------------------


def test_mtl_embeddings_are_an_ema_of_batch_feature_means():
    x, y = batches()
    a = make("MTL", mtl_ema=0.7)
    e, b = y.shape
    feats = a.featurizer(x.reshape(e * b, *SHAPE)).view(4, e, b, -1).detach()
    a.update(x, y)
    want = torch.where(LOO_MASK[..., None], 0.7 * feats.mean(2), torch.zeros(()))
    torch.testing.assert_close(a.embeddings, want)
    old = a.embeddings.clone()
    feats = a.featurizer(x.reshape(e * b, *SHAPE)).view(4, e, b, -1).detach()
    a.update(x, y)
    want = torch.where(LOO_MASK[..., None], 0.7 * feats.mean(2) + 0.3 * old, torch.zeros(()))
    torch.testing.assert_close(a.embeddings, want)


@pytest.mark.parametrize(("name", "hp"), [("ARM", {}), ("MTL", {"mtl_feed_embedding": True})])
def test_context_adaptation_changes_predictions_with_the_batch(name, hp):
    x, _ = batches()
    a = make(name, **hp).eval()
    assert a.batch_dependent
    probe = x[0, :4]
    alone = a.predict(probe)[:, 0]
    with_others = a.predict(torch.cat([probe[:1], x[1] + 1.0]))[:, 0]
    assert not torch.allclose(alone, with_others)
    assert not make("ERM").batch_dependent


def test_mtl_default_feeds_domainbeds_noise_not_the_embedding():
    """DomainBed's normal_() overwrites the embedding: the classifier sees f(x) and N(0, 1) noise,
    the same noise on every predict call (a function of x), unrelated to the other inputs."""
    x, y = batches()
    a = make("MTL").eval()
    probe = x[0, :4]
    first = a.predict(probe)
    assert torch.equal(first, a.predict(probe))  # deterministic
    moved = a.predict(torch.cat([probe[:1], x[1, :3] + 1.0]))
    assert torch.equal(moved[:, 0], first[:, 0])  # no batch embedding reaches row 0
    fed = make("MTL", mtl_feed_embedding=True).eval()
    assert not torch.allclose(fed.predict(probe), first)
    feats = a.featurizer(probe)
    n, d = feats.shape[1:]
    g = torch.Generator().manual_seed(int(a.predict_seed[2]))
    want = a.classifier(
        torch.cat([feats, torch.randn(n, d, generator=g)[None].expand(4, -1, -1)], -1)
    )
    torch.testing.assert_close(first[2], want[2])


def test_arm_trains_its_network_and_by_default_not_its_context_net():
    x, y = batches()
    a = make("ARM", lr=3e-3)
    context = {k: v.clone() for k, v in a.context_net.named_parameters()}
    first = a.update(x, y)["loss"]
    for _ in range(15):
        last = a.update(x, y)["loss"]
    assert torch.all(last < first)
    for k, v in a.context_net.named_parameters():
        assert torch.equal(v, context[k]), k  # DomainBed never trains it
    assert not torch.equal(
        a.context_net.norms[0].running_mean, torch.zeros_like(context["norms.0.bias"])
    )
    trained = make("ARM", lr=3e-3, arm_train_context_net=True)
    trained.update(x, y)
    assert not torch.equal(trained.context_net.convs[0].weight, context["convs.0.weight"])


def test_arm_predicts_in_groups_of_the_training_batch_size():
    """DomainBed's support_size rule: groups of B when the batch splits evenly, else one group."""
    x, y = batches(b=4)
    a = make("ARM")
    a.update(x, y)
    a.eval()
    probe = batches(seed=3)[0].reshape(-1, *SHAPE)[:12]
    together = a.predict(probe)
    parts = torch.cat([a.predict(probe[i : i + 4]) for i in range(0, 12, 4)], dim=1)
    torch.testing.assert_close(together, parts)
    odd = a.predict(probe[:10])  # 10 % 4 != 0: one group of 10
    assert not torch.allclose(odd[:, :4], together[:, :4])


# --- SagNet --------------------------------------------------------------------------------------


def test_sagnet_style_randomisation_keeps_content_and_mixes_statistics():
    torch.manual_seed(0)
    f = torch.randn(1, 6, 32) * torch.rand(1, 6, 1) * 3 + torch.randn(1, 6, 1)
    partner = torch.tensor([[5, 4, 3, 2, 1, 0]])
    content, mean, var = feature_style(f)
    same = randomize_style(f, partner, torch.ones(1, 6, 1))
    torch.testing.assert_close(same, f, atol=1e-4, rtol=1e-4)
    swapped = randomize_style(f, partner, torch.zeros(1, 6, 1))
    c2, m2, v2 = feature_style(swapped)
    torch.testing.assert_close(c2, content, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(m2, mean[:, partner[0]], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(v2, var[:, partner[0]], atol=1e-3, rtol=1e-3)


def test_sagnet_content_randomisation_keeps_style_and_swaps_content():
    torch.manual_seed(0)
    f = torch.randn(1, 6, 32) * 2 + 1
    partner = torch.tensor([[1, 2, 3, 4, 5, 0]])
    content, mean, var = feature_style(f)
    out = randomize_content(f, partner)
    c2, m2, v2 = feature_style(out)
    torch.testing.assert_close(m2, mean, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(v2, var, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(c2, content[:, partner[0]], atol=1e-3, rtol=1e-3)


def test_sagnet_partners_are_a_permutation_of_a_models_own_samples():
    a = make("SagNet")
    draws = a.randomization_draws(3, 16)
    assert len(draws) == 3
    for partner, alpha in draws:
        for m in range(4):
            own = torch.nonzero(LOO_MASK[m].repeat_interleave(16)).flatten()
            assert sorted(partner[m, own].tolist()) == own.tolist()  # each own sample once
            others = torch.nonzero(~LOO_MASK[m].repeat_interleave(16)).flatten()
            assert torch.equal(partner[m, others], others) and torch.all(alpha[m, others] == 1)
            assert torch.all((alpha[m, own] >= 0) & (alpha[m, own] < 1))
    x, y = batches()
    out = a.update(x, y)
    assert {"loss_c", "loss_s", "loss_adv"} <= set(out)


def test_sagnet_style_uses_the_unbiased_variance():
    f = torch.tensor([[[1.0, 2.0, 4.0]]])
    _, mean, var = feature_style(f)
    assert mean.item() == pytest.approx(7 / 3) and var.item() == pytest.approx(7 / 3)


# --- RSC -----------------------------------------------------------------------------------------


def test_rsc_mutes_the_stated_fractions_of_features_and_samples():
    x, y = batches(b=30)
    a = make("RSC", mask=torch.ones(1, 3, dtype=torch.bool))
    feats = a.featurizer(x.reshape(90, *SHAPE))
    valid = torch.ones(1, 90, dtype=torch.bool)
    keep = a.keep_mask(feats, y.reshape(-1), valid)[0]
    muted_rows = (~keep).any(dim=1)
    assert int(muted_rows.sum()) == pytest.approx(90 / 3, abs=1)
    d = feats.shape[-1]
    per_row = (~keep[muted_rows]).sum(dim=1).float()
    assert torch.all((per_row - d / 3).abs() <= 2)
    # the muted features are the ones with the largest true-class gradient
    onehot = F.one_hot(y.reshape(-1), 2).float()
    (grad,) = torch.autograd.grad((a.classifier(feats) * onehot).sum(), feats)
    row = int(torch.nonzero(muted_rows)[0])
    assert grad[0, row][~keep[row]].min() >= grad[0, row][keep[row]].max()


def test_masked_mean_ignores_non_finite_masked_entries():
    v = torch.tensor([[1.0, float("nan"), 3.0]], requires_grad=True)
    out = masked_mean(v, torch.tensor([[True, False, True]]))
    out.sum().backward()
    assert out.item() == 2.0 and v.grad.tolist() == [[0.5, 0.0, 0.5]]


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
def test_random_search_configurations_train(name):
    x, y = batches(b=8)
    for seed in (1, 2):
        hp = alg.sample_hparams(name, seed)
        a = alg.get_algorithm(name)(SHAPE, 2, LOO_MASK, hp)
        for _ in range(3):
            out = a.update(x, y)
        assert out["loss"].shape == (4,) and torch.isfinite(out["loss"]).all()


def test_dann_gradient_penalty_adds_the_input_gradient_norm():
    x, y = batches()
    plain = make("DANN", mask=torch.ones(1, 3, dtype=torch.bool))
    penalised = make("DANN", mask=torch.ones(1, 3, dtype=torch.bool), grad_penalty=2.0)
    feats = plain.logits_per_env(x)[0].detach().requires_grad_(True)
    base = plain.discriminator_loss(feats, y)
    out = plain.discriminator(feats.reshape(1, -1, feats.shape[-1]))
    ce = F.cross_entropy(out[0], torch.arange(3).repeat_interleave(16), reduction="sum")
    (grad,) = torch.autograd.grad(ce, feats)
    want = base + 2.0 * (grad**2).sum(-1).mean()
    got = penalised.discriminator_loss(feats, y)
    assert got.item() == pytest.approx(want.item(), rel=1e-4)
