"""examples/my_algorithm.py, a user's own algorithm: its math, its stacked training, and a study
run end to end through the `oodeval` command the way the tutorial (docs/tutorials/own-algorithm.md)
tells a user to."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.nn import functional as F

import oodeval.algorithms as alg
from oodeval._registry import Registry
from oodeval.study import load_study

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SHAPE = (2, 5, 5)
C = 3
LOO_MASK = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
# Stacked against alone, in float64: the two differ only in the order of floating-point sums
# (batched against single-model products; masked slots add exact zeros), ~1e-16 relative per
# operation, so rtol 1e-12 on losses and 1e-10 on weights after 4 Adam steps keep a wide margin
# while a model that saw one wrong minibatch is off by ~1e-2.


def load_example():
    """Import examples/my_algorithm.py (registers FishrLite, as a study's ``imports`` does)."""
    spec = importlib.util.spec_from_file_location("my_algorithm", EXAMPLES / "my_algorithm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = load_example()


def batches(e: int = 3, b: int = 10, seed: int = 0):
    """float64 minibatches (e, b, *SHAPE) whose class shifts channel 0; environment e is shifted."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, C, (e, b), generator=g)
    x = torch.rand(e, b, *SHAPE, generator=g, dtype=torch.float64)
    x[:, :, 0] += 0.4 * y[:, :, None, None]
    x += 0.3 * torch.arange(e, dtype=torch.float64).view(e, 1, 1, 1, 1)
    return x, y


def make(mask: torch.Tensor, seed: int = 0, **hp) -> alg.Algorithm:
    torch.manual_seed(seed)
    hparams = alg.resolve_hparams("FishrLite", hp)
    return alg.get_algorithm("FishrLite")(SHAPE, C, mask, hparams).double()


def reference_penalty(logits: np.ndarray, y: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """P_m from per-sample gradients of CE(z + b, y) w.r.t. a bias b = 0, taken by autograd,
    with Python loops over the models' own environments (logits (M, E, B, C), y (M, E, B))."""
    out = []
    for m in range(logits.shape[0]):
        own = [e for e in range(logits.shape[1]) if mask[m, e]]
        variances = []
        for e in own:
            grads = []
            for i in range(logits.shape[2]):
                bias = torch.zeros(C, dtype=torch.float64, requires_grad=True)
                z = torch.as_tensor(logits[m, e, i]) + bias
                loss = F.cross_entropy(z[None], torch.tensor([int(y[m, e, i])]))
                (g,) = torch.autograd.grad(loss, bias)
                grads.append(g.numpy())
            variances.append(np.var(np.stack(grads), axis=0))  # population variance, per class
        vbar = np.mean(variances, axis=0)
        out.append(np.mean([np.mean((v - vbar) ** 2) for v in variances]))
    return np.array(out)


# --- the algorithm ---------------------------------------------------------------------------


def test_the_example_docstring_runs():
    result = doctest.testmod(example, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_registered_with_its_own_hyperparameters_beside_erms():
    assert "FishrLite" in alg.available()
    assert alg.default_hparams("FishrLite") == {
        "lr": 1e-3,
        "weight_decay": 0.0,
        "fishr_lite_lambda": 1e3,
    }
    for seed in range(20):
        assert 10.0 <= alg.sample_hparams("FishrLite", seed)["fishr_lite_lambda"] <= 1e4


@pytest.mark.parametrize("per_model_labels", [False, True])
def test_penalty_matches_per_sample_gradients_by_autograd(per_model_labels):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 3, 6, C, generator=g, dtype=torch.float64)
    y = torch.randint(0, C, (4, 3, 6) if per_model_labels else (3, 6), generator=g)
    got = example.fishr_lite_penalty(logits, y, LOO_MASK)
    want = reference_penalty(logits.numpy(), y.expand(4, 3, 6).numpy(), LOO_MASK.numpy())
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-15)
    assert (want > 0).all()  # a penalty that cannot be zero on random logits, so the test bites


def test_penalty_ignores_the_environments_a_model_does_not_own():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 3, 6, C, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, C, (3, 6), generator=g)
    changed = logits.detach().clone()
    changed[0, 0] = 50 * torch.randn(
        6, C, generator=g, dtype=torch.float64
    )  # model 0's held-out slot
    base = example.fishr_lite_penalty(logits, y, LOO_MASK)
    other = example.fishr_lite_penalty(changed, y, LOO_MASK)
    assert other[0] == base[0]
    (grad,) = torch.autograd.grad(base[0], logits)
    assert torch.count_nonzero(grad[0, 0]) == 0 and torch.count_nonzero(grad[0, 1:]) > 0
    assert torch.count_nonzero(grad[1:]) == 0  # model 0's penalty never touches the others


def state(a: alg.Algorithm, index: int = 0) -> dict[str, torch.Tensor]:
    """Model `index`'s parameters (the mask, whose width differs between the views, left out)."""
    return {k: v[index] for k, v in a.state_dict().items() if k != "env_mask"}


def test_stacked_shared_minibatches_train_each_model_like_domainbeds_single_model():
    """Shared layout with the leave-one-out mask: model m of the stack equals a lone model (M = 1)
    given only DomainBed's list of its own environments' minibatches, to float64 rounding."""
    stack = make(LOO_MASK)
    lone = []
    for m in range(4):
        own = stack.own_envs[m]
        one = make(torch.ones(1, len(own), dtype=torch.bool))
        one.load_state_dict(
            {**{k: v[None] for k, v in state(stack, m).items()}, "env_mask": one.env_mask}
        )
        lone.append((one, own))
    for step in range(4):
        x, y = batches(seed=step)
        losses = stack.update(x, y)
        for m, (one, own) in enumerate(lone):
            alone = one.update(x[own], y[own])
            for key in ("loss", "nll", "penalty"):
                torch.testing.assert_close(alone[key][0], losses[key][m], rtol=1e-12, atol=1e-14)
    assert float(losses["penalty"].min()) > 0
    for m, (one, _) in enumerate(lone):
        for key, value in state(one).items():
            torch.testing.assert_close(value, state(stack, m)[key], rtol=1e-10, atol=1e-12)


def test_per_model_minibatches_train_each_model_like_it_alone():
    """The trainer's layout: model k gets x[envs[k]], (M, N - 1, B, ...), with an all-True mask."""
    envs = torch.tensor([[1, 2], [0, 2], [0, 1]])
    stack = make(torch.ones(3, 2, dtype=torch.bool))
    lone = [stack.select_models(m).double().train() for m in range(3)]
    for step in range(4):
        x, y = batches(seed=step)
        losses = stack.update(x[envs], y[envs])
        for m, one in enumerate(lone):
            alone = one.update(x[envs[m]], y[envs[m]])
            torch.testing.assert_close(alone["loss"][0], losses["loss"][m], rtol=1e-12, atol=1e-14)
    probe = batches(seed=9)[0][0]
    together = stack.eval().predict(probe)
    for m, one in enumerate(lone):
        torch.testing.assert_close(
            one.eval().predict(probe)[0], together[m], rtol=1e-10, atol=1e-12
        )


def noisy_batches(b: int = 30, seed: int = 0, noise: tuple[float, ...] = (0.0, 0.1, 0.3)):
    """Class-balanced minibatches whose environments differ in label noise (the rate flipped to
    the next class), so their per-sample gradient variances differ once a model fits them."""
    g = torch.Generator().manual_seed(seed)
    e = len(noise)
    y = (torch.arange(b) % C).repeat(e, 1)
    x = torch.rand(e, b, *SHAPE, generator=g, dtype=torch.float64)
    x[:, :, 0] += 0.5 * y[:, :, None, None]
    flip = torch.rand(e, b, generator=g, dtype=torch.float64) < torch.tensor(noise)[:, None]
    return x, torch.where(flip, (y + 1) % C, y)


def test_the_penalty_weight_shrinks_the_spread_of_gradient_variances():
    """From the same weights and minibatches, the default weight (1e3) ends with a much smaller
    penalty on fresh data than ERM's (weight 0): measured 1.6e-4 against 2.1e-3."""
    mask = torch.ones(1, 3, dtype=torch.bool)
    x, y = noisy_batches(b=300, seed=100)
    ends = {}
    for weight in (0.0, 1e3):
        a = make(mask, fishr_lite_lambda=weight)
        for step in range(60):
            a.update(*noisy_batches(seed=step))
        with torch.no_grad():
            ends[weight] = float(example.fishr_lite_penalty(a.logits_per_env(x)[1], y, mask)[0])
    assert ends[1e3] < 0.2 * ends[0.0]


TUTORIAL = REPO / "docs" / "tutorials" / "own-algorithm.md"


def tutorial_core() -> str:
    """The Python block of the "Evaluate your own algorithm" tutorial's "The algorithm" section."""
    text = TUTORIAL.read_text(encoding="utf-8")
    section = text.split("## The algorithm", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_tutorial_core_is_the_example(monkeypatch):
    """The tutorial's 20-line version computes the same penalty and the same updates."""
    namespace: dict = {"__name__": "own_algorithm_page"}
    # the page's FishrLite is another definition than the example's: it registers into a copy of
    # the registry without the example's (the real one is restored after the test)
    page_registry = Registry("algorithm")
    for name, cls in alg.registry._REGISTRY.items():
        if name != "FishrLite":
            page_registry.add(name, cls)
    monkeypatch.setattr(alg.registry, "_REGISTRY", page_registry)
    exec(compile(tutorial_core(), str(TUTORIAL), "exec"), namespace)
    logits = torch.randn(4, 3, 6, C, dtype=torch.float64)
    y = torch.randint(0, C, (3, 6))
    torch.testing.assert_close(
        namespace["fishr_lite_penalty"](logits, y, LOO_MASK),
        example.fishr_lite_penalty(logits, y, LOO_MASK),
        rtol=0,
        atol=0,
    )
    for key, hp in example.FishrLite.hparam_space().items():
        page_hp = namespace["FishrLite"].hparam_space()[key]
        assert page_hp.default == hp.default
        assert page_hp.sample(np.random.default_rng(3)) == hp.sample(np.random.default_rng(3))
    ours, theirs = make(LOO_MASK), make(LOO_MASK)
    page = namespace["FishrLite"](SHAPE, C, LOO_MASK, theirs.hparams).double()
    page.load_state_dict(theirs.state_dict())
    for step in range(2):
        x, y = batches(seed=step)
        a, b = ours.update(x, y), page.update(x, y)
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# --- end to end: the tutorial's commands on examples/my_algorithm.toml -------------------------


def oodeval_command(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`oodeval ARGS` in a real process: the installed command when present (what a user runs)."""
    script = Path(sys.executable).with_name("oodeval")
    head = [str(script)] if script.is_file() else [sys.executable, "-m", "oodeval.cli.main"]
    return subprocess.run(
        [*head, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def user_env(pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return env


def test_study_analyze_and_report_with_the_example_algorithm(tmp_path):
    out = tmp_path / "mine"
    env = user_env(None)  # imports = ["my_algorithm.py"]: found beside the config, no PYTHONPATH
    config = str(EXAMPLES / "my_algorithm.toml")
    run = oodeval_command(
        "study",
        "run",
        config,
        "--out",
        str(out),
        "--workers",
        "2",
        "--no-progress",
        "--no-report",
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "3 units: 0 already stored, 3 run (3 done, 0 failed)" in run.stdout

    units = load_study(out).units.set_index("algorithm")
    assert units.loc["FishrLite", "status"] == "done"
    assert set(units["status"]) == {"done"}
    stored = units.loc["FishrLite", "hparams"]
    stored = json.loads(stored) if isinstance(stored, str) else stored
    assert stored["fishr_lite_lambda"] == 1000.0
    source = EXAMPLES / "my_algorithm.py"
    config = load_study(out).config
    assert config["imports"] == [str(source.resolve())]
    digest = config["import_digests"][str(source.resolve())]
    assert set(units["versions"].map(lambda v: v["import:my_algorithm"])) == {digest}

    analyze = oodeval_command("study", "analyze", str(out), cwd=tmp_path, env=env)
    assert analyze.returncode == 0, analyze.stderr
    measures = pd.read_csv(out / "analysis" / "units.csv").set_index("algorithm")
    assert list(measures.index) == ["ERM", "FishrLite", "VREx"]
    row = measures.loc["FishrLite"]
    assert 0 <= row["average"] <= row["worst"] <= 1 and 0 <= row["ideal"] <= 1
    assert row["worst_plus_gap"] == pytest.approx(row["worst"] + row["gap"] / (row["n_given"] - 2))
    assert pd.read_csv(out / "analysis" / "table1.csv")["n_algorithms"].tolist() == [3]

    report = oodeval_command(
        "report", str(out), "--out", str(out / "report.html"), cwd=tmp_path, env=env
    )
    assert report.returncode == 0, report.stderr
    assert "FishrLite" in (out / "report.html").read_text(encoding="utf-8")


def test_without_the_file_beside_the_config_the_study_stops_with_one_line(tmp_path):
    """The config copied elsewhere names my_algorithm.py relative to itself: not found there."""
    config = tmp_path / "my_algorithm.toml"
    config.write_text((EXAMPLES / "my_algorithm.toml").read_text(encoding="utf-8"))
    proc = oodeval_command(
        "study",
        "run",
        str(config),
        "--out",
        str(tmp_path / "x"),
        "--no-progress",
        cwd=EXAMPLES,  # the working directory does not matter: the path is the config's
        env=user_env(None),
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"imports: file {tmp_path / 'my_algorithm.py'} not found" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x" / "results.sqlite").exists()
