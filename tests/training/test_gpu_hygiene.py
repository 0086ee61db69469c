"""Training steps never wait for the device, and the random draws stay those of the CPU streams.

No GPU exists where these tests run, so "the step never reads a device tensor on the host" is
checked on PyTorch's ``meta`` device: its tensors have shapes but no numbers, so ``.item()``,
``bool(t)``, ``.tolist()`` or a copy to the CPU of any tensor on it raises. A training step that
runs there with its models, minibatches and losses on ``meta`` reads nothing back; on a GPU it
queues its kernels without waiting for them. The CPU generators of the random streams
(`Algorithm.draw`) keep their state on the CPU, where reading it costs no round trip.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest
import torch

import oodeval.algorithms as alg
from oodeval._torch import TF32_MODES, tf32_mode
from oodeval.algorithms.mtl import MTL
from oodeval.algorithms.networks import conv_layout
from oodeval.errors import OodevalError
from oodeval.study.config import config_from_dict
from oodeval.training import TrainingDiverged, train_models
from oodeval.training.data import TrainingRun, prepare_data
from oodeval.training.loop import DivergenceWatch
from oodeval.training.options import TrainerOptions
from tests.helpers.training import TinyScenario

torch.set_num_threads(1)

SHAPE = (2, 8, 8)


def on_meta(name: str, model: str) -> alg.Algorithm:
    torch.manual_seed(0)
    mask = torch.ones(3, 2, dtype=torch.bool)
    hp = alg.resolve_hparams(name, {})
    return alg.get_algorithm(name)(SHAPE, 2, mask, hp, model=model).to("meta")


def test_meta_tensors_refuse_every_host_read():
    t = torch.zeros(3, device="meta")
    for read in (lambda: t.sum().item(), lambda: bool(t.any()), t.tolist, t.cpu):
        with pytest.raises((NotImplementedError, RuntimeError)):
            read()


@pytest.mark.parametrize("layout", ["grouped", "per_model"])
@pytest.mark.parametrize("name", sorted(alg.PAPER_ALGORITHMS))
def test_no_training_step_reads_the_device_back(name, layout):
    a = on_meta(name, "mnist_cnn" if layout == "grouped" else "cnn")
    assert a.env_mask.device.type == "meta"
    if a.random_draws:  # the streams' states stay on the CPU, where their generators draw
        assert a.rng_state.device.type == "cpu"
    x = torch.zeros(3, 2, 4, *SHAPE, device="meta")
    y = torch.zeros(3, 2, 4, dtype=torch.long, device="meta")
    with conv_layout(layout), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLDG's DomainBed defect warning
        for _ in range(3):
            loss = a.update(x, y)["loss"]
    assert loss.device.type == "meta" and loss.shape == (3,)


def test_the_trainers_step_reads_nothing_back():
    """Minibatches (indices drawn on the CPU, copied without waiting), each run's share of them
    and the divergence watch all stay on the device."""
    scenario = TinyScenario()
    data = prepare_data(scenario, scenario.given(), 0, TrainerOptions(), "meta")
    n = len(scenario.given())
    loo = torch.stack([torch.cat([torch.arange(k), torch.arange(k + 1, n)]) for k in range(n)])
    runs = [TrainingRun(on_meta("ERM", "mlp"), loo, list(range(n)))]
    runs[0].algorithm = alg.get_algorithm("ERM")(
        scenario.input_shape, scenario.num_classes, torch.ones(n, n - 1, dtype=torch.bool),
        alg.resolve_hparams("ERM", {}),
    ).to("meta")  # fmt: skip
    watch = DivergenceWatch(1)
    generator = torch.Generator().manual_seed(0)
    for step in (1, 2):
        xb, yb = data.minibatches(generator, 4)
        x, y = runs[0].minibatches(xb, yb)
        assert x.device.type == "meta" and x.shape[:3] == (n, n - 1, 4)
        watch.record(0, runs[0].algorithm.update(x, y)["loss"], step)
    assert watch.step[0].device.type == "meta"


def test_a_divergence_noticed_later_still_names_its_first_step():
    runs = [TrainingRun(None, torch.zeros(2, 1), [0, 1]), TrainingRun(None, torch.zeros(1, 2), [2])]
    watch = DivergenceWatch(2)
    watch.record(0, torch.tensor([0.5, 0.4]), 1)
    watch.record(1, torch.tensor([0.3]), 1)
    watch.check(runs, "ERM", ["a", "b", "all"])  # nothing bad yet
    watch.record(0, torch.tensor([0.5, math.inf]), 2)
    watch.record(1, torch.tensor([math.nan]), 3)
    watch.record(0, torch.tensor([math.nan, math.nan]), 4)
    with pytest.raises(TrainingDiverged) as caught:
        watch.check(runs, "ERM", ["a", "b", "all"])
    assert (caught.value.fold, caught.value.step, caught.value.value) == ("b", 2, math.inf)


def test_a_diverging_unit_is_still_stopped_at_its_first_bad_step():  # lr inf: NaN from step 2
    with pytest.raises(TrainingDiverged, match="at step 2;"):
        train_models(TinyScenario(), "ERM", seed=0, steps=3, hparams={"lr": math.inf})


# -- MTL's noise, drawn ahead in blocks ----------------------------------------------------------
def mtl_after(block: int, steps: int = 5) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    mask = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 1]], dtype=torch.bool)
    a = alg.get_algorithm("MTL")((1, 4, 4), 2, mask, alg.resolve_hparams("MTL", {})).double()
    a.NOISE_BLOCK = block
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        a.update(torch.randn(3, 5, 1, 4, 4, generator=g, dtype=torch.float64),
                 torch.randint(0, 2, (3, 5), generator=g))  # fmt: skip
    return {k: v for k, v in a.state_dict().items() if k != "rng_state"}


def test_mtl_noise_drawn_in_blocks_is_the_noise_drawn_update_by_update():
    """Block of 1 = one draw per update, as before blocks existed; 2 and 100 give every update
    the same numbers (exactly: the same draws from the same streams in the same order)."""
    once = mtl_after(1)
    for block in (2, 100):
        ahead = mtl_after(block)
        assert all(torch.equal(once[k], ahead[k]) for k in once)


def test_mtl_block_noise_replays_from_the_models_own_stream():
    torch.manual_seed(0)
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    a = alg.get_algorithm("MTL")((1, 4, 4), 2, mask, alg.resolve_hparams("MTL", {}))
    gens = [a.stream(m) for m in range(2)]
    for _ in range(3):
        noise = a.training_noise(3, 5, 7, torch.float32)
        for m in range(2):
            for e in range(3):
                want = torch.randn(5, 7, generator=gens[m]) if mask[m, e] else torch.zeros(5, 7)
                assert torch.equal(noise[m, e], want)


def test_mtl_blocks_stay_within_their_memory_bound():
    torch.manual_seed(0)
    a = alg.get_algorithm("MTL")((1, 4, 4), 2, torch.ones(4, 3, dtype=torch.bool),
                                 alg.resolve_hparams("MTL", {}))  # fmt: skip
    a.NOISE_BLOCK_NUMBERS = 4 * 3 * 5 * 7 * 3  # three updates' worth
    a.training_noise(3, 5, 7, torch.float32)
    assert a.noise_ahead[1].shape == (3, 4, 3, 5, 7)


def test_mtl_prediction_noise_is_kept_and_renewed_with_the_seeds():
    torch.manual_seed(0)
    a = alg.get_algorithm("MTL")((1, 4, 4), 2, torch.ones(2, 3, dtype=torch.bool),
                                 alg.resolve_hparams("MTL", {})).eval()  # fmt: skip
    x = torch.rand(6, 1, 4, 4)
    first = a.predict(x)
    kept = a.predict_noise[1]
    assert torch.equal(a.predict(x), first) and a.predict_noise[1] is kept
    one = a.select_models(1)  # its own seed: its own noise, model 1's
    assert isinstance(one, MTL) and torch.equal(one.predict(x)[0], first[1])


# -- TF32 policy ---------------------------------------------------------------------------------
def test_tf32_default_sets_pytorchs_defaults_and_off_turns_both_off_for_the_block():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    # PyTorch's own defaults (a fresh process): full float32 matmul, TF32 cuDNN convolutions
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; b = torch.backends; print(b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert fresh == ["False", "True"]
    torch.backends.cuda.matmul.allow_tf32 = True  # a process that changed them: reset
    torch.backends.cudnn.allow_tf32 = False
    try:
        with tf32_mode("default"):
            assert not torch.backends.cuda.matmul.allow_tf32
            assert torch.backends.cudnn.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    with tf32_mode("off"):
        assert not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    with pytest.raises(OodevalError, match="unknown tf32 mode 'on'; choose one of default, off"):
        with tf32_mode("on"):
            pass


def test_tf32_is_a_trainer_option_and_a_stored_config_key():
    assert TF32_MODES == ("default", "off")
    assert TrainerOptions.from_keywords({"tf32": "off"}).tf32 == "off"
    with pytest.raises(OodevalError, match="unknown tf32 mode 'fast'"):
        TrainerOptions(tf32="fast")
    base = {"name": "t", "algorithms": ["ERM"], "seeds": [0], "steps": 2,
            "scenarios": [{"family": "sr-cmnist"}], "source": "digits"}  # fmt: skip
    assert "tf32" not in config_from_dict({**base, "trainer": {"tf32": "default"}}).trainer
    assert config_from_dict({**base, "trainer": {"tf32": "off"}}).trainer == {"tf32": "off"}
    with pytest.raises(OodevalError, match="tf32"):
        config_from_dict({**base, "trainer": {"tf32": "on"}})


def test_tf32_off_gives_the_cpus_numbers_unchanged():
    options = {"seed": 0, "steps": 3, "selection": "last"}
    default = train_models(TinyScenario(), "ERM", **options)
    off = train_models(TinyScenario(), "ERM", tf32="off", **options)
    for a, b in zip(default.models, off.models, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_cli_tf32_is_checked_in_one_line():
    from typer.testing import CliRunner

    from oodeval.cli.main import app

    result = CliRunner().invoke(app, ["study", "estimate", "--preset", "quick", "--tf32", "on"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: unknown --tf32 'on'; choose one of default, off"


def test_only_arm_has_a_per_image_part_and_the_others_refuse_predict_from():
    """`per_image` is None by default, and `predict_from` then names the algorithm; ARM's pair
    gives its `predict` (the contract the E_all evaluation relies on)."""
    mask = torch.ones(2, 3, dtype=torch.bool)
    erm = alg.get_algorithm("ERM")((1, 4, 4), 2, mask, alg.resolve_hparams("ERM", {}))
    x = torch.rand(5, 1, 4, 4)
    assert erm.per_image(x) is None
    with pytest.raises(NotImplementedError, match="ERM has no per-image part"):
        erm.predict_from(x, x)
    arm = alg.get_algorithm("ARM")((1, 4, 4), 2, mask, alg.resolve_hparams("ARM", {})).double()
    arm.eval()
    with torch.no_grad():
        xd = x.double()
        assert torch.allclose(arm.predict_from(xd, arm.per_image(xd)), arm.predict(xd), atol=1e-12)
