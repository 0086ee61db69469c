"""`oodeval study run|status|analyze|estimate` end to end on the synthetic backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.study import config_from_dict, preset
from tests.helpers.studies import FOURTEEN

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
name = "cli-test"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "GroupDRO"]
seeds = [0, 1]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 },
             { family = "synthetic", ratio = "3:1", scale = 2 }]
[unit_options]
fail_algorithms = ["IRM"]
"""


@pytest.fixture()
def config_file(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def test_run_status_analyze(tmp_path, config_file):
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["study", "run", str(config_file), "--out", str(out), "--workers", "2", "--no-progress"],
    )
    assert result.exit_code == 0, result.output
    assert "12 units: 0 already stored, 12 run (8 done, 4 failed)" in result.output
    again = runner.invoke(
        app, ["study", "run", str(config_file), "--out", str(out), "--no-progress"]
    )
    assert "12 already stored, 0 run" in again.output
    status = runner.invoke(app, ["study", "status", str(out)])
    assert status.exit_code == 0
    assert "8 done, 4 failed, 0 pending (of 12)" in status.output
    assert "failed: synthetic/ratio=3:1/scale=1|IRM|seed=0: SyntheticFailure" in status.output
    analyzed = runner.invoke(app, ["study", "analyze", str(out)])
    assert analyzed.exit_code == 0, analyzed.output
    assert (out / "analysis" / "analysis.md").is_file()
    assert (out / "analysis" / "table1.csv").read_text().startswith("scenario,")


def test_estimate_projects_from_a_sample(config_file):
    result = CliRunner().invoke(
        app,
        ["study", "estimate", str(config_file), "--workers", "1", "--algorithms", "ERM,GroupDRO"],
    )
    assert result.exit_code == 0, result.output
    assert "sampled 4 unit(s) at 100% of the steps" in result.output
    assert "projected wall time:" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["study", "run", "--out", "X"], "give exactly one of CONFIG.toml or --preset"),
        (["study", "run", "--preset", "huge", "--out", "X"], "unknown preset 'huge'"),
        (["study", "status", "nowhere"], "no study in nowhere"),
        (["study", "analyze", "nowhere"], "no study in nowhere"),
        (
            ["study", "run", "--preset", "quick", "--out", "X", "--precision", "fp16"],
            "unknown --precision 'fp16'; choose one of fp32, bf16",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output


def test_bad_config_in_a_real_subprocess_has_no_traceback(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(
        CONFIG.replace('["ERM", "IRM", "GroupDRO"]', '["ERM", "Magic"]'), encoding="utf-8"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "oodeval.cli.main",
            "study",
            "run",
            str(path),
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: unknown algorithm(s) Magic; available: " + ", ".join(sorted(FOURTEEN))
    ]


def test_presets_and_example_config_are_valid():
    quick, paper = preset("quick"), preset("paper-cpu")  # `paper` needs MNIST: test_presets.py
    assert set(quick.algorithms) >= {
        "ERM",
        "IRM",
        "GroupDRO",
        "VREx",
        "CORAL",
        "MMD",
        "Mixup",
        "MLDG",
    }
    assert [(s.params["ratio"], s.params["scale"]) for s in quick.scenarios] == [
        ("3:1", 1),
        ("4:1", 1),
        ("5:1", 1),
    ]
    assert quick.seeds == (0,) and quick.source == "auto"
    assert len(paper.algorithms) == 14 and len(paper.scenarios) == 12 and paper.seeds == (0, 1, 2)
    # the stored form round-trips
    assert config_from_dict(paper.to_dict()) == paper
    from oodeval.study import load_config

    example = load_config(REPO / "examples" / "study.toml")
    assert example.algorithms and example.scenarios


def test_precision_option_is_stored_with_the_config_and_checked_on_resume(tmp_path, config_file):
    from oodeval.study.store import ResultStore

    runner = CliRunner()
    out = tmp_path / "out"
    args = ["study", "run", str(config_file), "--out", str(out), "--no-progress", "--no-report"]
    result = runner.invoke(app, [*args, "--precision", "bf16"])
    assert result.exit_code == 0, result.output
    with ResultStore(out) as store:
        assert store.stored_config()["trainer"] == {"precision": "bf16"}
    again = runner.invoke(app, [*args, "--precision", "fp32"])
    assert again.exit_code == 2
    assert (
        'would not compare with this config\'s: trainer.precision ("bf16" -> "fp32")'
        in again.output
    )


def test_config_rejects_an_unknown_precision():
    from oodeval.errors import OodevalError

    data = {"algorithms": ["ERM"], "seeds": [0], "steps": 1, "scenarios": [{"family": "x"}]}
    assert config_from_dict({**data, "trainer": {"precision": "bf16"}}).trainer == {
        "precision": "bf16"
    }
    with pytest.raises(
        OodevalError, match=r"\[trainer\] precision must be one of fp32, bf16, got str 'fp16'"
    ):
        config_from_dict({**data, "trainer": {"precision": "fp16"}})
    # the default is never stored, so naming it does not make a different study
    assert config_from_dict({**data, "trainer": {"precision": "fp32"}}) == config_from_dict(data)


def test_naming_the_default_precision_resumes_a_study_stored_without_it(tmp_path, config_file):
    runner = CliRunner()
    out = tmp_path / "out"
    args = ["study", "run", str(config_file), "--out", str(out), "--no-progress", "--no-report"]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, [*args, "--precision", "fp32"])
    assert again.exit_code == 0, again.output
    assert "12 already stored, 0 run" in again.output


def test_precision_names_agree_between_the_config_and_the_networks():
    from oodeval.algorithms.networks import PRECISION_DTYPES as NETWORKS
    from oodeval.study.config import PRECISIONS as CONFIG

    assert list(NETWORKS) == list(CONFIG)


# -- bad configs through `oodeval study run CONFIG --out DIR` ---------------------------------
GOOD_TOP = {
    "name": '"bad-config"',
    "backend": '"oodeval.study.synthetic"',
    "algorithms": '["ERM", "IRM"]',
    "seeds": "[0]",
    "steps": "5",
    "scenarios": '[{ family = "synthetic", ratio = "3:1", scale = 1 }]',
}
ISSUE_TRAINER = {"batch_size": '"big"', "holdout_fraction": "2.0", "eval_every": "0"}


def toml_config(top: dict[str, str], trainer: dict[str, str] | None = None) -> str:
    lines = [f"{key} = {value}" for key, value in {**GOOD_TOP, **top}.items() if value]
    if trainer:
        lines += ["[trainer]", *(f"{key} = {value}" for key, value in trainer.items())]
    return "\n".join(lines) + "\n"


BAD_CONFIGS = {
    # the cases of the issue, one by one and together
    "batch_size": ({}, {"batch_size": '"big"'}, ["[trainer] batch_size must be an integer"]),
    "holdout": ({}, {"holdout_fraction": "2.0"}, ["holdout_fraction must be in (0, 1), got 2.0"]),
    "eval_every": ({}, {"eval_every": "0"}, ["[trainer] eval_every must be >= 1, got 0"]),
    "model": ({"model": '"transformer"'}, None, ["unknown model 'transformer'; choose one of"]),
    "huge_steps": (
        {"steps": "99999999999999999999"},
        None,
        ["steps must be <= 10_000_000, got 99999999999999999999"],
    ),
    "issue_together": (
        {"model": '"transformer"', "steps": "99999999999999999999"},
        ISSUE_TRAINER,
        [
            "5 problems in the study config: (1) steps must be <= 10_000_000",
            "(2) [trainer] eval_every must be >= 1",
            "(3) [trainer] holdout_fraction must be in (0, 1)",
            "(4) [trainer] batch_size must be an integer",
            "(5) unknown model 'transformer'",
        ],
    ),
    "trainer_types": (
        {},
        {
            "selection": "1",
            "eval_every": '"often"',
            "holdout_fraction": '"most"',
            "batch_size": "true",
            "precision": "16",
        },
        [
            "5 problems in the study config:",
            "[trainer] selection must be one of training_domain, last, got int 1",
            "[trainer] eval_every must be an integer in [1, 10_000_000], got str 'often'",
            "[trainer] holdout_fraction must be a number in (0, 1), got str 'most'",
            "[trainer] batch_size must be an integer in [1, 65_536], got bool True",
            "[trainer] precision must be one of fp32, bf16, got int 16",
        ],
    ),
    "precision": ({}, {"precision": '"fp16"'}, ["precision must be one of fp32, bf16"]),
    "trainer_key": ({}, {"lr": "0.1"}, ["unknown [trainer] key(s) 'lr'; allowed: "]),
    "family": ({"scenarios": '[{ family = "nope" }]'}, None, ["unknown scenario family 'nope'"]),
    "parameter": (
        {"scenarios": '[{ family = "synthetic", size = 3 }]'},
        None,
        ["scenario synthetic[size=3]: TypeError:", "unexpected keyword argument 'size'"],
    ),
    "algorithm": ({"algorithms": '["ERM", "Magic"]'}, None, ["unknown algorithm(s) Magic; avail"]),
    "measure": ({"measures": '["medain"]'}, None, ["unknown measure(s) 'medain'; choose from "]),
    "seed": ({"seeds": "[0, 4294967296]"}, None, ["seeds[1] must be <= 4_294_967_295"]),
    "negative_seed": ({"seeds": "[-1]"}, None, ["seeds[0] must be >= 0, got -1"]),
    "data_seed": ({"data_seed": "-1"}, None, ["data_seed must be >= 0, got -1"]),
    "float_steps": ({"steps": "inf"}, None, ["steps must be an integer in [1, 10_000_000]"]),
    "hparam_nan": ({}, None, ["hparams.ERM.lr must be a finite number, got nan"]),
    "top_key": ({"algorithm": '["ERM"]'}, None, ["config key(s) 'algorithm'; allowed "]),
    "source": ({"source": '"mnist:/no/such/mnist"'}, None, ["source folder not found"]),
    "imports": ({"imports": '["no_such_algorithms_x"]'}, None, ["imports: cannot import module"]),
    "many": (
        {"seeds": "[-1, -2, -3, -4, -5, -6, -7, -8]"},
        None,
        ["8 problems in the study config: (1) seeds[0]", " and 2 more (fix these first)"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_exits_2_with_one_line_and_writes_nothing(tmp_path, case):
    top, trainer, expected = BAD_CONFIGS[case]
    text = toml_config(top, trainer)
    if case == "hparam_nan":
        text += "[hparams.ERM]\nlr = nan\n"
    path = tmp_path / "study.toml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["study", "run", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in line
    for part in expected:
        assert part in line
    assert not out.exists()


def test_real_backend_bad_config_lists_model_and_scenario_problems(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(
        toml_config(
            {
                "backend": "",
                "model": '"transformer"',
                "scenarios": '[{ family = "sr-cmnist", scale = "big" }, { family = "nope" }]',
            }
        ),
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["study", "run", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: 3 problems in the study config: (1) unknown model 'transformer'")
    assert "(2) scenario sr-cmnist[scale=big]: scale must be an integer >= 1, got 'big'" in line
    assert "(3) scenario nope: unknown dataset family 'nope'" in line
    assert not (tmp_path / "o").exists()


def test_a_bad_config_leaves_a_bound_study_untouched(tmp_path, config_file):
    from oodeval.study.store import ResultStore

    out = tmp_path / "out"
    args = ["--out", str(out), "--no-progress", "--no-report"]
    assert CliRunner().invoke(app, ["study", "run", str(config_file), *args]).exit_code == 0
    with ResultStore(out) as store:
        before = (store.stored_config(), store.statuses())
    bad = tmp_path / "bad.toml"
    bad.write_text(CONFIG.replace("steps = 5", "steps = 0"), encoding="utf-8")
    result = CliRunner().invoke(app, ["study", "run", str(bad), *args])
    assert result.exit_code == 2 and "steps must be >= 1, got 0" in result.stderr
    with ResultStore(out) as store:
        assert (store.stored_config(), store.statuses()) == before
