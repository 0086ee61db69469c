"""The built-in studies: ``paper`` is the faithful DomainBed protocol, ``paper-cpu`` the shortened
grid that ``paper`` used to be, ``quick`` unchanged; each checked field by field against values
written here, not read from oodeval."""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.environments.mnist import MNIST_ENV_VAR, bundled_mnist_dir, is_test_set_only
from oodeval.study import config_from_dict, preset, preset_names
from oodeval.study.config import (
    ScenarioSpec,
    data_note,
    import_backend,
    resolved_hparams,
    validate_config,
)
from oodeval.study.runner import prepare_config
from oodeval.training.options import TrainerOptions
from tests.helpers.studies import FOURTEEN

GRID = [(r, s) for s in (1, 2, 3, 4) for r in ("3:1", "4:1", "5:1")]

# DomainBed's hparams_registry.py defaults for its SMALL_IMAGES datasets (ColoredMNIST), copied
# by hand from its _hparam(...) lines. Everything an algorithm reads besides the shared lr /
# weight_decay (SMALL_IMAGES: lr 1e-3, weight_decay 0) is listed under the algorithm. DANN and
# CDANN train the generator with lr_g / weight_decay_g (1e-3 / 0 for small images), which oodeval
# calls lr / weight_decay. batch_size (64 for small images) is the trainer's batch_size. The
# unconditional keys (data_augmentation, resnet18, resnet_dropout, class_balanced,
# nonlinear_classifier) concern ResNets and image augmentation, which DomainBed's MNIST datasets
# do not use.
DOMAINBED_SHARED = {"lr": 1e-3, "weight_decay": 0.0}
DOMAINBED_BATCH_SIZE = 64
_ADVERSARIAL = {
    "lambda": 1.0,
    "weight_decay_d": 0.0,
    "d_steps_per_g_step": 1,
    "grad_penalty": 0.0,
    "beta1": 0.5,
    "mlp_width": 256,
    "mlp_depth": 3,
    "mlp_dropout": 0.0,
    "lr_d": 1e-3,
}
DOMAINBED_DEFAULTS = {
    "ERM": {},
    "IRM": {"irm_lambda": 1e2, "irm_penalty_anneal_iters": 500},
    "GroupDRO": {"groupdro_eta": 1e-2},
    "Mixup": {"mixup_alpha": 0.2},
    "MLDG": {"mldg_beta": 1.0, "n_meta_test": 2},
    "CORAL": {"mmd_gamma": 1.0},
    "MMD": {"mmd_gamma": 1.0},
    "DANN": dict(_ADVERSARIAL),
    "CDANN": dict(_ADVERSARIAL),
    "MTL": {"mtl_ema": 0.99},
    "SagNet": {"sag_w_adv": 0.1},
    "ARM": {},
    "VREx": {"vrex_lambda": 1e1, "vrex_penalty_anneal_iters": 500},
    "RSC": {"rsc_f_drop_factor": 1 / 3, "rsc_b_drop_factor": 1 / 3},
}
# oodeval's options that depart from DomainBed when set; at their defaults they do what
# DomainBed's algorithms.py does (ARM's context net: 64 channels, never trained; MLDG: no update
# without a meta-test pair; MTL: the embedding overwritten by N(0, 1) noise).
DOMAINBED_BEHAVIOUR_OPTIONS = {
    "ARM": {"arm_context_channels": 64, "arm_train_context_net": False},
    "MLDG": {"mldg_always_update": False},
    "MTL": {"mtl_feed_embedding": False},
}

# The literal `paper` preset before it became the faithful protocol (oodeval/study/presets.py at
# main 6cb374d), now `paper-cpu` (only its name changes), and the unchanged `quick`.
PAPER_CPU = {
    "name": "paper-cpu",
    "source": "auto",
    "algorithms": FOURTEEN,
    "seeds": [0, 1, 2],
    "steps": 450,
    "model": "mlp",
    "scenarios": [{"family": "sr-cmnist", "ratio": r, "scale": s} for r, s in GRID],
    "trainer": {"eval_every": 100},
    "hparams": {
        "IRM": {"irm_penalty_anneal_iters": 100},
        "VREx": {"vrex_penalty_anneal_iters": 100},
    },
}
QUICK = {
    "name": "quick",
    "source": "auto",
    "algorithms": ["ERM", "IRM", "GroupDRO", "VREx", "CORAL", "MMD", "Mixup", "MLDG"],
    "seeds": [0],
    "steps": 500,
    "model": "mlp",
    "scenarios": [
        {"family": "sr-cmnist", "ratio": r, "scale": 1, "n_per_given": 1000, "n_eval": 1000}
        for r in ("3:1", "4:1", "5:1")
    ],
    "trainer": {"eval_every": 100},
    "hparams": {
        "IRM": {"irm_penalty_anneal_iters": 100},
        "VREx": {"vrex_penalty_anneal_iters": 100},
    },
}


@pytest.fixture()
def with_mnist(mnist_dir, monkeypatch):
    """Real MNIST found through OODEVAL_MNIST, wherever the tests run from."""
    monkeypatch.setenv(MNIST_ENV_VAR, str(mnist_dir))
    return mnist_dir


def test_names_in_order_of_cost():
    # the MNIST presets by cost, then the image presets (tests/study/test_image_presets.py)
    assert preset_names()[:3] == ["quick", "paper-cpu", "paper"]


def test_paper_is_the_faithful_protocol(with_mnist):
    paper = preset("paper")
    assert paper.name == "paper"
    assert paper.source == f"mnist:{with_mnist.resolve()}"
    assert paper.source_identity is not None and paper.source_identity["kind"] == "mnist"
    assert list(paper.algorithms) == FOURTEEN
    assert paper.seeds == (0, 1, 2)
    assert paper.steps == 5001  # DomainBed's N_STEPS for its MNIST datasets
    assert paper.model == "mnist_cnn"
    expected = [ScenarioSpec("sr-cmnist", {"ratio": r, "scale": s, "size": 28}) for r, s in GRID]
    assert list(paper.scenarios) == expected
    assert paper.trainer == {"eval_every": 100, "batch_size": DOMAINBED_BATCH_SIZE}
    assert paper.hparams == {} and paper.hparams_mode == "default"
    assert paper.backend == "oodeval.study.trainer_backend" and paper.imports == ()
    # what the trainer uses for the keys the preset leaves out: DomainBed's training-domain
    # validation on a 20% holdout, float32
    left_out = TrainerOptions()
    assert (left_out.selection, left_out.holdout_fraction, left_out.precision) == (
        "training_domain",
        0.2,
        "fp32",
    )
    assert config_from_dict(paper.to_dict()) == paper


def test_paper_trains_with_domainbed_default_hyperparameters(with_mnist):
    paper = preset("paper")
    backend = import_backend(paper)
    assert set(DOMAINBED_DEFAULTS) == set(paper.algorithms)
    for algorithm in paper.algorithms:
        expected = {
            **DOMAINBED_SHARED,
            **DOMAINBED_DEFAULTS[algorithm],
            **DOMAINBED_BEHAVIOUR_OPTIONS.get(algorithm, {}),
        }
        for seed in paper.seeds:
            got = resolved_hparams(paper, backend, algorithm, seed)
            assert got == expected, algorithm
            assert {k: type(v) for k, v in got.items()} == {
                k: type(v) for k, v in expected.items()
            }, algorithm


def test_paper_grid_builds_on_28x28_mnist(with_mnist):
    validated = validate_config(preset("paper"))
    names = [built.name for built in validated.scenarios]
    assert names == [f"sr-cmnist/ratio={r}/scale={s}/size=28" for r, s in GRID]
    n_given = validated.n_given()
    assert n_given == [(int(r[0]) + 1) * s for r, s in GRID]  # (N_major + N_minor) * Scale
    assert all(built.params["size"] == 28 for built in validated.scenarios)


def test_paper_cpu_is_the_former_paper_preset():
    assert preset("paper-cpu") == config_from_dict(PAPER_CPU)


def test_quick_is_unchanged():
    assert preset("quick") == config_from_dict(QUICK)


@pytest.mark.parametrize("name", ["quick", "paper-cpu", "paper"])
def test_every_preset_passes_validation(name, with_mnist):
    config = prepare_config(preset(name))
    assert config.source.startswith("mnist:")
    validated = validate_config(config)
    assert len(validated.scenarios) == len(config.scenarios)


def test_paper_without_mnist_trains_on_the_bundled_test_set_and_says_so(bare_install):
    paper = preset("paper")
    assert paper.source == f"mnist:{bundled_mnist_dir()}"
    assert paper.source_identity is not None and is_test_set_only(paper.source_identity)
    note = data_note(paper)
    assert note is not None and "test set alone (10,000 images), 1/7 of the 70,000" in note
    assert preset("paper-cpu").source == "auto"  # the others resolve when they run


def test_paper_on_the_full_set_has_no_test_set_note(tmp_path, monkeypatch):
    """OODEVAL_MNIST with train and t10k files: the source is all of them, no note."""
    full = tmp_path / "mnist"
    shutil.copytree(bundled_mnist_dir(), full)
    images = np.arange(20 * 28 * 28, dtype=np.uint8).reshape(20, 28, 28)
    labels = np.arange(20, dtype=np.uint8) % 10
    for stem, array in (("train-images-idx3-ubyte", images), ("train-labels-idx1-ubyte", labels)):
        header = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
        (full / stem).write_bytes(header + array.tobytes())
    monkeypatch.setenv(MNIST_ENV_VAR, str(full))
    paper = preset("paper")
    assert paper.source == f"mnist:{full.resolve()}"
    assert not is_test_set_only(paper.source_identity) and data_note(paper) is None


@pytest.mark.parametrize("command", ["run", "estimate"])
def test_a_broken_install_without_the_bundled_set_exits_2(
    command, bare_install, tmp_path, monkeypatch
):
    """The bundled files missing (a damaged install) and nothing else found: one error line."""
    import importlib.resources

    monkeypatch.setattr(importlib.resources, "files", lambda package: tmp_path / "site")
    args = ["study", command, "--preset", "paper"]
    if command == "run":
        args += ["--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: oodeval's bundled MNIST test set is missing from ")
    assert "reinstall oodeval, or set OODEVAL_MNIST=DIR" in lines[0]
    assert not (tmp_path / "out").exists()


def test_cli_help_names_every_preset():
    for command in ("run", "estimate"):
        result = CliRunner().invoke(app, ["study", command, "--help"], env={"COLUMNS": "200"})
        text = " ".join(result.output.split())
        for name in preset_names():
            assert re.search(rf"\b{re.escape(name)}\b", text), (command, name)


def test_estimate_runs_for_the_quick_preset(with_mnist):
    # paper-cpu goes through the same code with more scenarios, but even at one step its sample
    # takes minutes (ARM's test on the 101 environments of E_all dominates), too slow for a test;
    # benchmarks/RESULTS.md records its estimate
    name = "quick"
    steps = preset(name).steps
    result = CliRunner().invoke(
        app,
        [
            "study",
            "estimate",
            "--preset",
            name,
            "--workers",
            str(min(2, os.cpu_count() or 1)),
            "--algorithms",
            "ERM",
            "--steps-fraction",
            str(1 / steps),  # one training step per sampled unit
        ],
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"projected wall time: \d+ s = [\d.]+ h", result.output), result.output
