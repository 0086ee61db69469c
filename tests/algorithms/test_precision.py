"""Mixed precision (``precision="bf16"``): only the products change, and every algorithm trains."""

from __future__ import annotations

import warnings

import pytest
import torch

import oodeval.algorithms as alg
import oodeval.training.loop as loop
from oodeval.algorithms.networks import (
    EnsembleConv2d,
    EnsembleLinear,
    compute_precision,
    native_bf16,
)
from oodeval.errors import OodevalError
from oodeval.training import run_unit, train_models
from tests.helpers.training import SHAPE, TinyScenario, TwoGiven, synthetic_env

torch.set_num_threads(1)

#: bfloat16 keeps 8 significant bits: one rounding is off by at most 2**-8 relative
BF16_EPS = 2.0**-8
#: float32's unit roundoff: a float32 sum of n terms is within n * F32_EPS * sum(|terms|) of exact
F32_EPS = 2.0**-24


def _rounded(t: torch.Tensor) -> torch.Tensor:
    """`t` rounded to bfloat16, as exact float64."""
    return t.detach().to(torch.bfloat16).double()


def _bf16_tolerance(exact, abs_sum, out, terms: int):
    """How far a bf16 product can be from `exact`, the float64 product of the rounded inputs.

    The product of two bfloat16 values is exact in float32; the kernel sums `terms` of them in
    float32, in any order (at most terms * F32_EPS * abs_sum off, abs_sum = the same sum over
    |inputs|), rounds that sum v once to bfloat16 (half a unit of its last of 8 bits: at most
    BF16_EPS * |v| <= BF16_EPS * (|exact| + the summation error), hence the factor 2 on the
    latter) and adds the float32 bias (F32_EPS * |out|). A bound, not a measured margin: no CPU's
    summation order or bf16 kernel (native or emulated) can leave it.
    """
    return BF16_EPS * exact.abs() + 2 * terms * F32_EPS * abs_sum + F32_EPS * out.abs()


def test_fp32_context_is_bit_identical_to_no_context():
    torch.manual_seed(0)
    layer, conv = EnsembleLinear(3, 7, 5), EnsembleConv2d(2, 3, 4, 3, padding=1)
    x, h = torch.randn(3, 6, 7), torch.randn(5, 6, 8, 8)
    plain = layer(x), layer(x[0]), conv(h)
    with compute_precision("fp32"):
        inside = layer(x), layer(x[0]), conv(h)
    assert all(torch.equal(a, b) for a, b in zip(plain, inside, strict=True))


@pytest.mark.parametrize("shared", [True, False])
def test_bf16_linear_is_the_product_of_rounded_inputs_plus_a_float32_bias(shared):
    """Each output is (x_bf16 . W_bf16) rounded once to bfloat16, plus the float32 bias."""
    torch.manual_seed(1)
    layer = EnsembleLinear(3, 40, 6)
    x = torch.randn(9, 40) if shared else torch.randn(3, 9, 40)
    with compute_precision("bf16"):
        out = layer(x)
    assert out.dtype == torch.float32 and out.shape == (3, 9, 6)
    xs = _rounded(x).expand(3, 9, 40) if shared else _rounded(x)
    product = torch.stack([xs[m] @ _rounded(layer.weight[m]) for m in range(3)])
    abs_sum = torch.stack([xs[m].abs() @ _rounded(layer.weight[m]).abs() for m in range(3)])
    got = out.double() - layer.bias.detach().double()
    tolerance = _bf16_tolerance(product, abs_sum, out.double(), terms=40)
    assert bool(((got - product).abs() <= tolerance).all())
    assert not torch.equal(out, layer(x))  # really not the float32 result


def test_bf16_convolution_matches_a_float64_reference_on_rounded_inputs():
    torch.manual_seed(2)
    conv = EnsembleConv2d(2, 3, 4, 3, padding=1)
    h = torch.randn(5, 6, 8, 8)
    with compute_precision("bf16"):
        out = conv(h)

    def reference(transform):
        return torch.cat(
            [
                torch.nn.functional.conv2d(
                    transform(_rounded(h[:, 3 * m : 3 * m + 3])),
                    transform(_rounded(conv.weight[m])),
                    padding=1,
                )
                for m in range(2)
            ],
            dim=1,
        )

    product, abs_sum = reference(lambda t: t), reference(torch.abs)
    got = out.double() - conv.bias.detach().double().reshape(1, -1, 1, 1)
    assert out.dtype == torch.float32
    tolerance = _bf16_tolerance(product, abs_sum, out.double(), terms=3 * 3 * 3)
    assert bool(((got - product).abs() <= tolerance).all())


def test_bf16_gradients_are_float32_and_close_to_float32_gradients():
    torch.manual_seed(3)
    layer = EnsembleLinear(2, 30, 4)
    x = torch.randn(2, 16, 30)
    layer(x).square().sum().backward()
    want = layer.weight.grad.clone()
    layer.weight.grad = None
    with compute_precision("bf16"):
        layer(x).square().sum().backward()
    got = layer.weight.grad
    assert got.dtype == torch.float32
    assert torch.allclose(got, want, rtol=0.05, atol=0.05 * float(want.abs().max()))


def test_unknown_precision_is_a_one_line_error():
    with pytest.raises(OodevalError, match="unknown precision 'fp16'; choose one of fp32, bf16"):
        with compute_precision("fp16"):
            pass
    with pytest.raises(OodevalError, match="unknown precision"):
        run_unit(TinyScenario(), "ERM", seed=0, steps=2, precision="half")


def test_precision_is_restored_after_the_block_and_after_errors():
    layer, x = EnsembleLinear(1, 4, 3), torch.randn(5, 4)
    want = layer(x)
    with pytest.raises(RuntimeError):
        with compute_precision("bf16"):
            raise RuntimeError("boom")
    assert torch.equal(layer(x), want)


@pytest.mark.parametrize("name", alg.PAPER_ALGORITHMS)
def test_every_algorithm_trains_and_tests_in_bf16(name):
    res = run_unit(TwoGiven(n=24), name, seed=0, steps=3, batch_size=4, eval_every=2,
                   precision="bf16")  # fmt: skip
    assert len(res.rows) == 2 + 5 and all(0.0 <= r.error <= 1.0 for r in res.rows)


def test_bf16_cnn_unit_runs():
    res = run_unit(TinyScenario(n=24), "ERM", seed=0, steps=2, batch_size=4, model="cnn",
                   precision="bf16")  # fmt: skip
    assert all(0.0 <= r.error <= 1.0 for r in res.rows)


def test_bf16_is_deterministic_and_close_to_but_not_float32():
    kwargs = dict(seed=4, steps=6, batch_size=8, eval_every=3)
    a = train_models(TinyScenario(), "ERM", precision="bf16", **kwargs)
    b = train_models(TinyScenario(), "ERM", precision="bf16", **kwargs)
    c = train_models(TinyScenario(), "ERM", precision="fp32", **kwargs)
    probe = torch.as_tensor(synthetic_env("probe", 16, 77, 0.5).images)
    assert probe.shape[1:] == SHAPE
    with torch.inference_mode():
        la, lb, lc = (t.models[-1].predict(probe) for t in (a, b, c))
    assert torch.equal(la, lb)
    assert not torch.equal(la, lc)
    assert torch.allclose(la, lc, atol=0.05)


def test_bf16_without_native_support_warns(monkeypatch):
    monkeypatch.setattr(loop, "native_bf16", lambda: False)
    with pytest.warns(RuntimeWarning, match="without native bfloat16"):
        run_unit(TinyScenario(n=24), "ERM", seed=0, steps=1, batch_size=4, precision="bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_unit(TinyScenario(n=24), "ERM", seed=0, steps=1, batch_size=4)


def test_native_bf16_reads_the_cpu_flags():
    assert isinstance(native_bf16(), bool)
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:  # not Linux: no flags to read, no native bfloat16 claimed
        flags = ""
    assert native_bf16() == (" avx512_bf16" in flags or " amx_bf16" in flags)


def test_bf16_convolution_gradients_reach_weights_biases_and_inputs():
    torch.manual_seed(5)
    conv = EnsembleConv2d(2, 3, 4, 3, padding=1)
    h = torch.randn(5, 6, 8, 8, requires_grad=True)
    conv(h).square().sum().backward()
    want = [t.grad.clone() for t in (conv.weight, conv.bias, h)]
    for t in (conv.weight, conv.bias, h):
        t.grad = None
    with compute_precision("bf16"):
        conv(h).square().sum().backward()
    for got, ref in zip((conv.weight.grad, conv.bias.grad, h.grad), want, strict=True):
        assert got is not None and got.dtype == torch.float32
        assert torch.allclose(got, ref, rtol=0.05, atol=0.05 * float(ref.abs().max()))


def test_bf16_linear_gradients_reach_biases_and_inputs():
    torch.manual_seed(6)
    layer = EnsembleLinear(2, 30, 4)
    x = torch.randn(2, 16, 30, requires_grad=True)
    layer(x).square().sum().backward()
    want = [layer.bias.grad.clone(), x.grad.clone()]
    layer.bias.grad, x.grad = None, None
    with compute_precision("bf16"):
        layer(x).square().sum().backward()
    for got, ref in zip((layer.bias.grad, x.grad), want, strict=True):
        assert got.dtype == torch.float32
        assert torch.allclose(got, ref, rtol=0.05, atol=0.05 * float(ref.abs().max()))


def test_bf16_units_do_not_depend_on_the_thread_count():
    kwargs = dict(seed=1, steps=6, batch_size=8, eval_every=3, precision="bf16")
    one = run_unit(TinyScenario(), "IRM", **kwargs)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = run_unit(TinyScenario(), "IRM", **kwargs)
    finally:
        torch.set_num_threads(threads)
    assert one.rows == two.rows


def test_trained_units_record_their_precision_and_run_unit_tests_in_it():
    from oodeval.training import predict_labels

    kwargs = dict(seed=2, steps=4, batch_size=8, eval_every=2)
    trained = train_models(TinyScenario(), "ERM", precision="bf16", **kwargs)
    assert trained.precision == "bf16"
    assert train_models(TinyScenario(), "ERM", **kwargs).precision == "fp32"
    env = list(TinyScenario().evaluation())[0]
    with compute_precision(trained.precision):
        pred = predict_labels(trained.models[-1], env.images, context=8)[0]
    error = float((pred != torch.as_tensor(env.labels)).double().mean())
    res = run_unit(TinyScenario(), "ERM", precision="bf16", **kwargs)
    assert res.all_errors()[env.name] == error
