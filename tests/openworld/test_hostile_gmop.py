"""`oodeval openworld train-gmop`'s lambda, ranking weight and gate options, and their old names.

Bad values are one ``error:`` line naming the accepted values, exit 2, nothing written; the old
spellings ``--auc-weight`` and ``--detector-weight`` train the same model as the new ones, with
one ``warning:`` line that says what changed; the objective trained is printed in the paper's
symbols. Library-level bad values (a gate, a template, a prompt length) are one OodevalError.
"""

from __future__ import annotations

import numpy as np
import pytest
import typer.main

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.openworld.features import save_features, synthetic_features
from oodeval.openworld.gmop import GMoPConfig, train_gmop
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.text_tower import TinyTextTower, toy_tokenizer


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile-gmop") / "train.npz"
    save_features(path, synthetic_features(n_classes=8, dim=6, n_per_class=4, seed=0))
    return path


def _train(features, out, *extra):
    argv = ["openworld", "train-gmop", str(features), "--out", str(out), "--n-steps", "3", *extra]
    return argv, invoke(argv)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gate", "soft"], "'sigmoid', 'hard', 'none'"),
        (["--gate", ""], "'sigmoid', 'hard', 'none'"),
        (["--gate", "Sigmoid"], "'sigmoid', 'hard', 'none'"),
        (["--lambda", "-1"], "--lambda"),
        (["--ce-weight", "-0.5"], "--ce-weight"),
        (["--lambda", "nan"], "lambda"),
        (["--ranking-weight", "-2"], "--ranking-weight"),
        (["--ranking-weight", "inf"], "--ranking-weight"),
        (["--lambda", "0.5", "--detector-weight", "0.5"], "give only --lambda"),
        (["--ranking-weight", "1", "--auc-weight", "1"], "give only --ranking-weight"),
    ],
)
def test_a_bad_value_is_one_error_line_naming_the_accepted_ones(features, tmp_path, extra, message):
    out = tmp_path / "out"
    out.mkdir()
    argv, (code, stdout, stderr) = _train(features, out / "m.npz", *extra)
    assert_refused(code, stdout, stderr, argv)
    assert message in stderr, stderr
    assert not any(out.iterdir())


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("--auc-weight", "--ranking-weight", "not the paper's λ"),
        ("--detector-weight", "--lambda", "it is the paper's λ"),
    ],
)
def test_an_old_spelling_trains_the_same_model_with_one_warning(features, tmp_path, old, new, says):
    _, (code, _, old_err) = _train(features, tmp_path / "old.npz", old, "0.5")
    _, (code_new, _, new_err) = _train(features, tmp_path / "new.npz", new, "0.5")
    assert code == code_new == 0, old_err + new_err
    warning = [line for line in old_err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"{old} is now {new}" in warning[0] and says in warning[0]
    assert "warning:" not in new_err
    assert (tmp_path / "old.npz").read_bytes() == (tmp_path / "new.npz").read_bytes()


def test_lambda_and_ce_weight_are_one_option_and_the_log_prints_the_objective(features, tmp_path):
    _, (code, _, err) = _train(features, tmp_path / "a.npz", "--lambda", "0.5", "--gate", "hard")
    _, (code_b, _, _) = _train(features, tmp_path / "b.npz", "--ce-weight", "0.5", "--gate", "hard")
    assert code == code_b == 0, err
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    objective = [line for line in err.splitlines() if line.startswith("objective:")]
    assert objective == [
        "objective: L = l_ce(g) + 1 * (1/K) sum_k R_k + lambda * (1/K) sum_k l_ce(r_k) with "
        "lambda = 0.5, K = 3; R_k = mean over pairs of phi_b * l_sq(r_k(x_b) - r_k(x_n)) * phi_n, "
        "gate hard: phi = 1[argmax p(.|x) = y]"
    ]


def test_the_help_names_lambda_on_the_ce_term_and_not_on_the_ranking_term():
    command = typer.main.get_command(app).commands["openworld"].commands["train-gmop"]
    helps = {p.opts[0]: getattr(p, "help", None) or "" for p in command.params}
    assert helps["--lambda"].startswith("λ (lambda): weight of the cross-entropy regulariser")
    assert "λ" not in helps["--ranking-weight"].replace("(it is not λ)", "")
    assert "--ce-weight" in next(p.opts for p in command.params if p.opts[0] == "--lambda")
    assert "sigmoid" in helps["--gate"] and "hard" in helps["--gate"] and "none" in helps["--gate"]


def test_library_bad_values_are_one_clear_error():
    fs = synthetic_features(n_classes=6, dim=6, n_per_class=3, seed=0)
    with pytest.raises(OodevalError, match="unknown gate 'soft'; use one of sigmoid, hard, none"):
        train_gmop(fs, GMoPConfig(gate="soft", steps=1))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(OodevalError, match="ce_weight \\(lambda\\) must be a finite number"):
            train_gmop(fs, GMoPConfig(ce_weight=bad, steps=1))
        with pytest.raises(OodevalError, match="ranking_weight must be a finite number"):
            train_gmop(fs, GMoPConfig(ranking_weight=bad, steps=1))


def test_clip_bad_templates_and_prompt_lengths_are_one_clear_error():
    from oodeval.openworld.clip import PromptTextEncoder, check_templates

    for bad in ([], "a photo of a {}.", ["a photo"], ["{} and {}"], ["a {name}"], [3]):
        with pytest.raises(OodevalError, match="templates must|must hold"):
            check_templates(bad)
    tower, tokenize = TinyTextTower(), toy_tokenizer()
    for n_ctx in (0, -1, 2.5, True):
        with pytest.raises(OodevalError, match="n_ctx >= 1"):
            PromptTextEncoder(tower, tokenize, ["a", "b"], n_ctx=n_ctx)
    assert np.isfinite(PromptTextEncoder(tower, tokenize, ["a", "b"], n_ctx=1).width)
