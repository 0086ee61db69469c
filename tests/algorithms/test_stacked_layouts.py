"""The two layouts of the stacked conv nets give the same numbers.

``conv_layout("grouped")`` runs the M models' convolutions as one grouped convolution per layer
(GroupNorm / BatchNorm per model over the channel-stacked layout), ``"per_model"`` runs them model
after model (channels-last on the CPU). Both are the same math, so in float64 every algorithm's
parameters, buffers and losses after a few updates must agree to 1e-10 (rounding of sums taken in
another order is ~1e-16 relative; 1e-10 leaves room for a few Adam steps amplifying it, while a
model that saw another model's rows, images or statistics would be off by O(1e-3) or more).
"""

from __future__ import annotations

import pytest
import torch

import oodeval.algorithms as alg
from oodeval.algorithms.arm import ContextNet
from oodeval.algorithms.networks import CONV_LAYOUTS, conv_layout, stacked_layout
from oodeval.errors import OodevalError

torch.set_num_threads(1)

TOL = 1e-10
#: MMD's Gaussian kernels exp(-gamma d^2), gamma up to 1e3 (DomainBed's bandwidths), magnify
#: rounding: in float64 its conv weights after 3 updates differ by 1.5e-10 between the layouts, and
#: by exactly as much between the per-model layout in channels-last and in NCHW memory (the same
#: calls, only the summation order differs), so 1e-9 for it; a model mixing in another's rows or
#: statistics would be off by O(1e-3)
TOLERANCE = {"MMD": 1e-9}
STEPS = 3
SHAPE = (2, 8, 8)  # small images keep float64 convolutions fast; the layers are MNIST_CNN's
# three LOO models on per-model minibatches (as the trainer gives them), then a masked stack on
# shared minibatches (model k without slot k, the last model on all: ARM's masked BatchNorm)
LOO = torch.tensor([[1, 2], [0, 2], [0, 1]])
MASK = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)


def batches(seed: int = 0, e: int = 3, b: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        y = torch.randint(0, 2, (e, b), generator=g)
        x = torch.rand(e, b, *SHAPE, generator=g, dtype=torch.float64)
        x[:, :, 0] += 0.3 * y[:, :, None, None]
        out.append((x, y))
    return out


def trained(name: str, model: str, layout: str, per_model: bool) -> tuple[dict, list]:
    """State dict and losses of `name` after STEPS float64 updates in `layout`."""
    torch.manual_seed(0)
    mask = torch.ones(3, 2, dtype=torch.bool) if per_model else MASK
    hp = alg.resolve_hparams(name, {"arm_train_context_net": True} if name == "ARM" else {})
    a = alg.get_algorithm(name)(SHAPE, 2, mask, hp, model=model).double().train()
    losses = []
    with conv_layout(layout):
        for x, y in batches():
            out = a.update(x[LOO], y[LOO]) if per_model else a.update(x, y)
            losses.append(out["loss"])
        a.eval()
        with torch.no_grad():
            losses.append(a.predict(batches(seed=1)[0][0].flatten(0, 1)))
    return a.state_dict(), losses


def assert_same(first: tuple[dict, list], second: tuple[dict, list], tol: float = TOL) -> None:
    (s1, l1), (s2, l2) = first, second
    assert list(s1) == list(s2)
    for key in s1:
        if s1[key].is_floating_point():
            torch.testing.assert_close(s1[key], s2[key], atol=tol, rtol=0, msg=key)
        else:
            assert torch.equal(s1[key], s2[key]), key
    for a, b in zip(l1, l2, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


@pytest.mark.parametrize("name", sorted(alg.PAPER_ALGORITHMS))
def test_every_algorithm_on_mnist_cnn_is_the_same_in_both_layouts(name):
    for per_model in (True, False):
        grouped = trained(name, "mnist_cnn", "grouped", per_model)
        one_by_one = trained(name, "mnist_cnn", "per_model", per_model)
        assert_same(grouped, one_by_one, TOLERANCE.get(name, TOL))


@pytest.mark.parametrize("name", ["ERM", "ARM", "MTL"])
def test_cnn_and_arms_context_net_on_the_mlp_are_the_same_in_both_layouts(name):
    for model in ("cnn", "mlp"):
        assert_same(
            trained(name, model, "grouped", per_model=False),
            trained(name, model, "per_model", per_model=False),
        )


def test_the_layouts_really_differ_in_their_calls(monkeypatch):
    """Grouped: one conv2d per layer with groups = M; per model: M calls with groups = 1."""
    calls = []
    real = torch.nn.functional.conv2d

    def spy(*args, **kwargs):
        calls.append(kwargs.get("groups", args[6] if len(args) > 6 else 1))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "conv2d", spy)
    net = ContextNet(4, 2, 8).double()
    x = torch.rand(4, 6, *SHAPE, dtype=torch.float64)
    with conv_layout("grouped"):
        net(x, 2)
    assert calls == [4, 4, 4]
    calls.clear()
    with conv_layout("per_model"):
        net(x, 2)
    assert calls == [1] * 12


def test_auto_is_grouped_on_gpus_and_per_model_on_the_cpu():
    assert CONV_LAYOUTS == ("auto", "grouped", "per_model")
    assert stacked_layout(torch.device("cpu")) == "per_model"
    assert stacked_layout(torch.device("cuda", 0)) == "grouped"
    with conv_layout("per_model"):
        assert stacked_layout(torch.device("cuda", 0)) == "per_model"
    with pytest.raises(OodevalError, match="unknown conv layout 'vmap'; choose one of auto"):
        with conv_layout("vmap"):
            pass


def test_arm_tests_e_all_from_per_image_maps_with_the_environment_by_environment_errors(
    monkeypatch,
):
    """ARM's context maps of the shared E_all images are computed once per variant and gathered
    per environment: in float64 every environment's error equals the error of predicting that
    environment's own images in batches, as for any batch-dependent algorithm."""
    import numpy as np

    from oodeval.environments import build_scenario
    from oodeval.training import evaluation

    monkeypatch.setattr(
        evaluation,
        "on_device",
        lambda images, device: torch.as_tensor(np.asarray(images), dtype=torch.float64),
    )
    scenario = build_scenario("sr-cmnist", source="digits", ratio="3:1", scale=1, n_eval=60)
    torch.manual_seed(0)
    full = alg.get_algorithm("ARM")(
        scenario.input_shape,
        2,
        torch.ones(1, 4, dtype=torch.bool),
        alg.resolve_hparams("ARM", {"arm_context_channels": 8}),
    ).double()
    g = torch.Generator().manual_seed(0)
    for _ in range(2):  # move the BatchNorm statistics and set the support size (B = 16)
        full.update(torch.rand(4, 16, *scenario.input_shape, generator=g, dtype=torch.float64),
                    torch.randint(0, 2, (4, 16), generator=g))  # fmt: skip
    with torch.no_grad():  # weights far from the start, so that the predictions differ by color
        for p in full.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    calls = []
    monkeypatch.setattr(type(full), "per_image", lambda self, x: calls.append(len(x)) or
                        self.context_net(x, x.shape[0]))  # fmt: skip
    shared = evaluation.full_model_rows(full, scenario, 16)
    assert sum(calls) == 2 * 60  # every image once per color, not once per environment
    one_by_one = [evaluation.environment_error(full, env, 16) for env in scenario.evaluation()]
    assert [r.environment for r in shared] == [env.name for env in scenario.evaluation()]
    assert [r.error for r in shared] == one_by_one
    assert len(set(one_by_one)) > 1  # the environments really differ
