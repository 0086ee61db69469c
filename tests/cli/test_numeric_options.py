"""Every numeric option of every command, at 0, -1, 1e20, a 20-digit integer, NaN and infinity.

The options are found by walking the Typer app (`oodeval.cli.main.app`): every option whose
type is an int or a float, in every visible subcommand. Each runs on top of a minimal valid
invocation of its command (`BASES`), so that the value itself decides the outcome. The contract:
exit 0 or 2, never a traceback; on 2, one ``error:`` line and nothing created in the output
folder. A value that runs (exit 0) must be listed in `ACCEPTED`: 0 is a fine seed, but a huge
step count or resample count must be refused, not run for hours. A new numeric option, or a new
command with one, fails `test_every_numeric_option_has_a_base` until `BASES` covers it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer.main
from typer.testing import CliRunner

from oodeval.cli.main import app, run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
VALUES = ("0", "-1", "1e20", "99999999999999999999", "nan", "inf")
HUGE = ("1e20", "99999999999999999999", "inf")


def numeric_options() -> list[tuple[str, str]]:
    """(command, option) for every int or float option of every visible leaf command."""
    found = []

    def walk(cmd: object, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                if not sub.hidden:  # a deprecated alias (`splits`) is the same command
                    walk(sub, [*path, name])
            return
        for param in cmd.params:  # type: ignore[attr-defined]
            annotation = param.type_descriptor.annotation
            if annotation in (int, float) or str(annotation) in ("list[int]", "list[float]"):
                found.append((" ".join(path), param.opts[0]))

    walk(typer.main.get_command(app), [])
    return found


Base = Callable[[SimpleNamespace, Path], list[object]]

STUDY_TOML = """\
name = "numbers"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "VREx"]
seeds = [0]
steps = 5
measures = ["average", "worst_plus_gap", "worst_only", "gap_only"]
[[scenarios]]
family = "synthetic"
ratio = "3:1"
scale = 1
"""

#: A minimal valid invocation of each command with a numeric option: (inputs, output folder)
#: -> the arguments after the command. Everything the command writes goes into the folder.
BASES: dict[str, Base] = {
    "measures": lambda f, out: [f.results],
    "variance": lambda f, out: [f.checkpoints],
    "shift": lambda f, out: [
        "--train",
        "digits",
        "--test",
        "digits",
        "--n-seeds",
        "1",
        "--n-steps",
        "2",
        "--max-samples",
        "60",
        "--batch-size",
        "16",
        "-o",
        out / "shift.txt",
    ],
    "openworld score": lambda f, out: [f.predictions, "--base-classes", "0-2"],
    "openworld ratio-study": lambda f, out: [
        f.predictions,
        "--base-classes",
        "0-2",
        "--n-repeats",
        "2",
        "--ratios",
        "1:1",
    ],
    "openworld make-features": lambda f, out: [
        "--source",
        "synthetic",
        "--train-out",
        out / "tr.npz",
        "--test-out",
        out / "te.npz",
    ],
    "openworld train-gmop": lambda f, out: [f.features, "--out", out / "m.npz", "--n-steps", "2"],
    "study run": lambda f, out: [f.study_toml, "--out", out / "s", "--no-progress"],
    "study measures": lambda f, out: [f.study, "--bootstrap", "10", "-o", out / "m.txt"],
    "study summary": lambda f, out: [f.study, "--bootstrap", "10"],
    "study estimate": lambda f, out: [f.study_toml, "--workers", "1", "-o", out / "e.txt"],
    "envs show": lambda f, out: ["sr-cmnist", "--source", "digits", "--size", "8"],
    "envs preview": lambda f, out: [
        "sr-cmnist",
        "--source",
        "digits",
        "--size",
        "8",
        "--out",
        out / "p.png",
    ],
    "protocols classic": lambda f, out: [f.tree, "--test", "dim", "--out", out / "sp.csv"],
    "protocols flexible-random": lambda f, out: [
        f.tree,
        "--n-dominant",
        "1",
        "--n-minor",
        "1",
        "--n-test",
        "1",
        "--per-minor",
        "1",
        "--per-test",
        "1",
        "--out",
        out / "sp.csv",
    ],
    "protocols flexible-compositional": lambda f, out: [
        f.tree,
        "--n-exclusive",
        "1",
        "--n-majority",
        "1",
        "--n-minority",
        "1",
        "--n-test",
        "1",
        "--per-minor",
        "1",
        "--per-test",
        "1",
        "--out",
        out / "sp.csv",
    ],
}

#: Options that only apply to one family or executor run on this base instead of the command's.
OPTION_BASES: dict[tuple[str, str], Base] = {
    ("envs show", "--severity"): lambda f, out: ["corrupted", "--source", "digits"],
    ("envs show", "--workers"): lambda f, out: ["corrupted", "--source", "digits"],
    ("envs show", "--image-size"): lambda f, out: ["corrupted", "--source", "digits"],
}

#: Values that legitimately run (exit 0), per (command, option); any other must be refused.
ACCEPTED: dict[tuple[str, str], set[str]] = {
    ("measures", "--bootstrap"): {"0"},
    ("measures", "--seed"): {"0"},
    ("variance", "--ddof"): {"0"},
    ("openworld score", "--tie"): {"0"},
    ("openworld ratio-study", "--seed"): {"0"},
    ("openworld make-features", "--overlap"): {"0"},
    ("openworld make-features", "--seed"): {"0"},
    ("openworld train-gmop", "--auc-weight"): {"0"},
    ("openworld train-gmop", "--lambda"): {"0"},
    ("openworld train-gmop", "--ranking-weight"): {"0"},
    ("openworld train-gmop", "--detector-weight"): {"0"},
    ("openworld train-gmop", "--weight-decay"): {"0"},
    ("openworld train-gmop", "--seed"): {"0"},
    ("study run", "--ray-max-retries"): {"0"},  # an option of another executor: not used
    ("study measures", "--bootstrap"): {"0"},
    ("study measures", "--seed"): {"0"},
    ("study summary", "--seed"): {"0"},
    ("envs show", "--seed"): {"0"},
    ("envs preview", "--seed"): {"0"},
    ("envs preview", "--max-eval"): {"0"},  # the given environments only
    ("protocols classic", "--seed"): {"0"},
    ("protocols classic", "--val-fraction"): {"0"},
    ("protocols flexible-random", "--val-fraction"): {"0"},
    ("protocols flexible-random", "--seed"): {"0"},
    ("protocols flexible-random", "--n-minor"): {"0"},
    ("protocols flexible-compositional", "--val-fraction"): {"0"},
    ("protocols flexible-compositional", "--seed"): {"0"},
    ("protocols flexible-compositional", "--n-minority"): {"0"},
}


@pytest.fixture(scope="module")
def f(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The inputs: a results file, checkpoints, open-world predictions and features, a
    <domain>/<class> tree, a synthetic study config and a finished study of it."""
    root = tmp_path_factory.mktemp("numbers")
    results = root / "results.csv"
    results.write_text((EXAMPLES / "results.csv").read_text(encoding="utf-8"), encoding="utf-8")
    predictions = root / "preds.csv"
    predictions.write_text(
        (EXAMPLES / "openworld_predictions.csv").read_text(encoding="utf-8"), encoding="utf-8"
    )
    rows = [
        f"D,{alg},0,{trial},0,{step},{0.5 + 0.01 * step},{0.6 + 0.01 * trial},0.7"
        for alg in ("ERM", "IRM")
        for trial in range(2)
        for step in range(3)
    ]
    checkpoints = root / "ckpt.csv"
    checkpoints.write_text(
        "dataset,algorithm,environment,trial,hparams,step,test_acc,train_val_acc,"
        "oracle_val_acc\n" + "\n".join(rows) + "\n",
        encoding="utf-8",
    )
    tree = root / "tree"
    for dom in ("autumn", "dim", "grass", "rock"):
        for cls in ("cat", "dog"):
            (tree / dom / cls).mkdir(parents=True)
            for i in range(3):
                (tree / dom / cls / f"{i}.jpg").touch()
    study_toml = root / "study.toml"
    study_toml.write_text(STUDY_TOML, encoding="utf-8")
    features = root / "train.npz"
    study = root / "study"
    for argv in (
        [
            "openworld",
            "make-features",
            "--source",
            "synthetic",
            "--train-out",
            features,
            "--test-out",
            root / "test.npz",
        ],
        ["study", "run", study_toml, "--out", study, "--no-progress", "--no-report"],
    ):
        code, _, stderr = _invoke([str(a) for a in argv])
        assert code == 0, stderr
    return SimpleNamespace(
        results=results,
        predictions=predictions,
        checkpoints=checkpoints,
        tree=tree,
        study_toml=study_toml,
        features=features,
        study=study,
    )


def _invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run `oodeval ARGV` as the console script does; return (status, stdout, stderr)."""
    with CliRunner().isolation() as (out, err, _):
        try:
            code = run(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        return code, out.getvalue().decode(), err.getvalue().decode()


CASES = [(c, o, v) for c, o in numeric_options() for v in VALUES]


def test_every_numeric_option_has_a_base() -> None:
    """A new command with a numeric option needs a minimal valid invocation in BASES."""
    missing = sorted({c for c, _ in numeric_options()} - set(BASES))
    assert not missing, f"numeric options of commands BASES does not cover: {missing}"
    assert len(numeric_options()) >= 50  # the walk finds them (93 when written)


def test_the_walk_finds_the_options_it_must() -> None:
    found = set(numeric_options())
    for known in [
        ("measures", "--bootstrap"),
        ("openworld ratio-study", "--n-repeats"),
        ("study run", "--workers"),
        ("study run", "--slurm-mem"),
        ("envs show", "--scale"),
        ("shift", "--lr"),
    ]:
        assert known in found
    assert not any(c.startswith("splits") for c, _ in found)


@pytest.mark.parametrize(("command", "option", "value"), CASES, ids=[" ".join(c) for c in CASES])
def test_a_numeric_option_is_refused_in_one_line_or_runs(
    command: str, option: str, value: str, f: SimpleNamespace, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    base = OPTION_BASES.get((command, option), BASES[command])
    argv = [*command.split(), *map(str, base(f, out)), option, value]
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a command writing to the working folder writes here
    try:
        code, stdout, stderr = _invoke(argv)
    finally:
        os.chdir(cwd)
    shown = (
        f"oodeval {' '.join(argv)}\nexit {code}\nstdout: {stdout[-500:]}\nstderr: {stderr[-2000:]}"
    )
    assert "Traceback" not in stdout + stderr, shown
    assert code in (0, 2), shown
    if code == 2:
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
        assert "No such option" not in lines[0], shown  # the case must reach the value
        assert not any(out.iterdir()), f"{shown}\nleft: {sorted(out.iterdir())}"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], shown
    else:
        assert value in ACCEPTED.get((command, option), set()), f"ran: {shown}"
        assert value not in HUGE, shown
