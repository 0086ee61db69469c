"""``model="mnist_cnn"``: every stacked model is DomainBed's MNIST_CNN, and it trains at 28x28.

The reference below is written from DomainBed's description of MNIST_CNN (``networks.py``): four
3x3 convs with 64, 128, 128, 128 channels, bias and padding 1, the second with stride 2, each
followed by ReLU then GroupNorm(8 groups), then the mean over the pixels -> 128 features.
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats
from torch import nn
from torch.nn import functional as F

from oodeval.algorithms.networks import (
    MODELS,
    MNISTCNNFeaturizer,
    build_featurizer,
    compute_precision,
    conv_layout,
)
from oodeval.environments import build_scenario, load_source
from oodeval.errors import OodevalError
from oodeval.training import run_unit, train_models

torch.set_num_threads(1)

SHAPE = (2, 28, 28)
CHANNELS = (64, 128, 128, 128)


class ReferenceMNISTCNN(nn.Module):
    """One plain MNIST_CNN with torch.nn layers."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        sizes = (in_channels, *CHANNELS)
        self.convs = nn.ModuleList(
            nn.Conv2d(a, b, 3, stride=2 if i == 1 else 1, padding=1)
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))
        )
        self.norms = nn.ModuleList(nn.GroupNorm(8, c) for c in CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = norm(F.relu(conv(x)))
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def reference_of(stack: MNISTCNNFeaturizer, k: int) -> ReferenceMNISTCNN:
    """A float64 reference holding a copy of stacked model k's weights."""
    ref = ReferenceMNISTCNN(stack.convs[0].weight.shape[2]).double()
    with torch.no_grad():
        for mine, theirs in zip(stack.convs, ref.convs, strict=True):
            theirs.weight.copy_(mine.weight[k])
            theirs.bias.copy_(mine.bias[k])
        for mine, theirs in zip(stack.norms, ref.norms, strict=True):
            theirs.weight.copy_(mine.weight[k])
            theirs.bias.copy_(mine.bias[k])
    return ref


def perturbed_stack(num_models: int, seed: int) -> MNISTCNNFeaturizer:
    """A float64 stack whose GroupNorm affine parameters are not the trivial 1 / 0."""
    torch.manual_seed(seed)
    stack = MNISTCNNFeaturizer(num_models, SHAPE).double()
    with torch.no_grad():
        for norm in stack.norms:
            norm.weight.add_(0.3 * torch.randn_like(norm.weight))
            norm.bias.add_(0.3 * torch.randn_like(norm.bias))
    return stack


def images(*lead: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(*lead, *SHAPE, generator=gen, dtype=torch.float64)


def test_registered_with_domainbeds_shapes():
    assert "mnist_cnn" in MODELS
    net = build_featurizer("mnist_cnn", 3, SHAPE)
    assert isinstance(net, MNISTCNNFeaturizer) and net.n_outputs == 128
    assert net(torch.zeros(4, *SHAPE)).shape == (3, 4, 128)
    per_model = sum(p.numel() for p in ReferenceMNISTCNN(2).parameters())
    assert sum(p.numel() for p in net.parameters()) == 3 * per_model
    with pytest.raises(OodevalError, match="model='mnist_cnn' needs \\(C, H, W\\) inputs"):
        build_featurizer("mnist_cnn", 1, (784,))
    with pytest.raises(OodevalError, match="unknown model 'resnet'; choose one of mlp, cnn"):
        build_featurizer("resnet", 1, SHAPE)


@pytest.mark.parametrize("layout", ["grouped", "per_model"])
@pytest.mark.parametrize("shared", [True, False])
def test_each_stacked_model_is_a_plain_mnist_cnn_forward_and_backward(shared, layout):
    m, n = 5, 6
    stack = perturbed_stack(m, seed=1)
    x = images(n) if shared else images(m, n)
    weights = torch.randn(
        m, n, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    with conv_layout(layout):
        out = stack(x)
    assert out.shape == (m, n, 128)
    (out * weights).sum().backward()
    for k in (0, 2, 4):
        ref = reference_of(stack, k)
        want = ref(x if shared else x[k])
        assert torch.allclose(out[k], want, rtol=0, atol=1e-12)
        (want * weights[k]).sum().backward()
        pairs = [(c.weight, r.weight) for c, r in zip(stack.convs, ref.convs, strict=True)]
        pairs += [(c.bias, r.bias) for c, r in zip(stack.convs, ref.convs, strict=True)]
        pairs += [(g.weight, r.weight) for g, r in zip(stack.norms, ref.norms, strict=True)]
        pairs += [(g.bias, r.bias) for g, r in zip(stack.norms, ref.norms, strict=True)]
        for mine, theirs in pairs:
            scale = float(theirs.grad.abs().max())
            assert torch.allclose(mine.grad[k], theirs.grad, rtol=0, atol=1e-12 * max(1, scale))


def test_stacked_forward_equals_separate_single_model_forwards():
    m, n = 4, 5
    stack = perturbed_stack(m, seed=3)
    x = images(m, n, seed=4)
    out = stack(x)
    for k in range(m):
        one = MNISTCNNFeaturizer(1, SHAPE).double()
        with torch.no_grad():
            for mine, single in zip(stack.parameters(), one.parameters(), strict=True):
                single.copy_(mine[k : k + 1])
        assert torch.allclose(out[k], one(x[k])[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", ["grouped", "per_model"])
def test_gradients_of_one_model_never_reach_another(layout):
    stack = perturbed_stack(3, seed=5)
    with conv_layout(layout):
        stack(images(3, 4, seed=6))[1].sum().backward()
    for p in stack.parameters():
        assert not p.grad[0].any() and not p.grad[2].any() and p.grad[1].any()


@pytest.mark.parametrize("layer", range(4))
def test_each_models_initialisation_has_pytorchs_default_distribution(layer):
    """Two-sample KS test of stacked model 1's weights against a fresh nn.Conv2d's (p > 1e-6)."""
    torch.manual_seed(7)
    stack = MNISTCNNFeaturizer(3, SHAPE)
    conv = stack.convs[layer]
    torch.manual_seed(8)
    ref = ReferenceMNISTCNN(2).convs[layer]
    for mine, theirs in ((conv.weight[1], ref.weight), (conv.bias[1], ref.bias)):
        assert mine.shape == theirs.shape
        assert stats.ks_2samp(mine.detach().flatten(), theirs.detach().flatten()).pvalue > 1e-6
    assert not torch.equal(conv.weight[0], conv.weight[1])  # each model drawn afresh
    assert all(torch.equal(g.weight, torch.ones_like(g.weight)) for g in stack.norms)
    assert all(not g.bias.any() for g in stack.norms)


def test_bf16_runs_the_convolutions_in_bfloat16_and_stays_close_to_float64():
    torch.manual_seed(9)
    stack = MNISTCNNFeaturizer(2, SHAPE)
    x = images(3, seed=10).float()
    with torch.no_grad():
        exact = stack.double()(x.double())
    stack = stack.float()
    fp32 = stack(x)
    with compute_precision("bf16"):
        bf16 = stack(x)
        bf16.sum().backward()
    assert bf16.dtype == torch.float32 and all(
        p.grad.dtype == torch.float32 for p in stack.parameters()
    )
    assert not torch.equal(bf16, fp32)
    # Four layers, each rounding its input, weights and output to 8 significant bits (3 x 2**-8
    # relative) and normalising (GroupNorm divides by a standard deviation of the order of the
    # mean of the ReLU outputs, about doubling a relative error): at most 4 x 2 x 3 x 2**-8 = 9%
    # if every error added up with the same sign; they mostly cancel (measured 0.35%).
    rel = float((bf16.detach().double() - exact).abs().mean() / exact.abs().mean())
    assert rel < 0.09


def test_a_unit_trains_mnist_cnn_end_to_end_at_28x28():
    """SR-CMNIST at 2x28x28 on the bundled digits resized to 28x28 (always available offline)."""
    scenario = build_scenario(
        "sr-cmnist", source=load_source("digits", size=28), size=28, n_per_given=10, n_eval=10
    )
    assert scenario.input_shape == SHAPE
    assert scenario.name == "sr-cmnist/ratio=3:1/scale=1/size=28"
    res = run_unit(scenario, "ERM", seed=0, steps=2, batch_size=4, eval_every=1, model="mnist_cnn")
    assert [r.fold for r in res.rows[:4]] == scenario.given_names
    assert len(res.rows) == 4 + 101 and all(0.0 <= r.error <= 1.0 for r in res.rows)
    assert {r.count for r in res.rows[4:]} == {10}
    trained = train_models(
        scenario, "ERM", seed=0, steps=1, batch_size=4, model="mnist_cnn", selection="last"
    )
    featurizer = trained.models[0].featurizer
    assert isinstance(featurizer, MNISTCNNFeaturizer) and featurizer.n_outputs == 128
