"""A command that needs a missing optional extra says so in one line, exits 2, writes nothing.

Each command runs in a fresh interpreter in which the extra's module cannot be imported (an
import hook raises ModuleNotFoundError for it, as Python does for a package that is not
installed), whether or not the extra is installed here. The message comes from one place,
`oodeval._extras.missing_extra_message`, used by every command's error wrapper.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oodeval._extras import EXTRAS, extra_of, missing_extra_message, require_extra
from oodeval.errors import OodevalError

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "examples" / "results.csv"

# Runs `oodeval ARGS...` with the top-level modules named in BLOCKED unimportable.
WITHOUT = """
import sys

BLOCKED = set(sys.argv[1].split(","))


class NotInstalled:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled)
sys.argv = ["oodeval", *sys.argv[2:]]
from oodeval.cli.main import main

main()
"""


def run_without(modules: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def expected(command: str, module: str) -> str:
    extra = EXTRAS[module]
    return (
        f"error: oodeval {command} needs the '{extra}' extra ({module} is not installed); "
        f"install it with: pip install 'oodeval[{extra}]'"
    )


def assert_one_line(done: subprocess.CompletedProcess, line: str, tmp_path: Path) -> None:
    shown = f"stdout: {done.stdout[-800:]}\nstderr: {done.stderr[-2000:]}"
    assert done.returncode == 2, shown
    assert done.stderr.splitlines() == [line], shown
    assert done.stdout == "", shown
    assert list(tmp_path.iterdir()) == [], shown  # nothing written


@pytest.mark.parametrize(
    "args",
    [
        ("study", "run", "--preset", "quick", "--out", "{tmp}/study"),
        ("study", "estimate", "--preset", "quick"),
        ("shift", "--train", "sr-cmnist:e=0.1", "--test", "sr-cmnist:e=0.9"),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_commands_that_train_name_the_train_extra(tmp_path, args):
    args = [a.format(tmp=tmp_path) for a in args]
    command = " ".join(a for a in args[:2] if not a.startswith("-"))
    done = run_without("torch", *args, cwd=tmp_path)
    assert_one_line(done, expected(command, "torch"), tmp_path)


def test_train_gmop_names_the_train_extra(tmp_path):
    features = tmp_path / "in"
    features.mkdir()
    made = run_without(
        "torch",  # writing synthetic features needs no torch
        *("openworld", "make-features", "--source", "synthetic", "--n-shots", "4"),
        *("--train-out", str(features / "train.npz"), "--test-out", str(features / "test.npz")),
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    out.mkdir()
    done = run_without(
        "torch",
        *("openworld", "train-gmop", str(features / "train.npz"), "--out", str(out / "m.npz")),
        cwd=out,
    )
    assert_one_line(done, expected("openworld train-gmop", "torch"), out)


@pytest.mark.parametrize("module", ["matplotlib", "jinja2"])
def test_report_names_the_report_extra(tmp_path, module):
    done = run_without(
        module, "report", str(RESULTS), "--out", str(tmp_path / "r.html"), cwd=tmp_path
    )
    assert_one_line(done, expected("report", module), tmp_path)


def test_envs_preview_names_the_report_extra(tmp_path):
    args = ("envs", "preview", "sr-cmnist", "--ratio", "4:1", "--out", str(tmp_path / "p.png"))
    done = run_without("matplotlib", *args, cwd=tmp_path)
    assert_one_line(done, expected("envs preview", "matplotlib"), tmp_path)


def test_study_run_checks_the_report_extra_before_training(tmp_path):
    args = ("study", "run", "--preset", "quick", "--out", str(tmp_path / "study"))
    done = run_without("matplotlib", *args, cwd=tmp_path)
    line = (
        "error: oodeval study run's report (--no-report skips it) needs the 'report' extra "
        "(matplotlib is not installed); install it with: pip install 'oodeval[report]'"
    )
    assert_one_line(done, line, tmp_path)
    # without torch as well, the first thing to install is named first
    both = run_without("torch,matplotlib", *args, cwd=tmp_path)
    assert_one_line(both, expected("study run", "torch"), tmp_path)


def test_scoring_needs_no_extra(tmp_path):
    # the core install scores a CSV: every extra's module blocked, `measures` still works
    done = run_without(",".join(EXTRAS), "measures", str(RESULTS), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "worst_plus_gap" in done.stdout


def test_the_helper_words_and_checks():
    assert missing_extra_message("x", "PIL") == (
        "x needs the 'train' extra (PIL is not installed); install it with: "
        "pip install 'oodeval[train]'"
    )
    assert extra_of(ModuleNotFoundError(name="torch")) == "train"
    assert extra_of(ModuleNotFoundError(name="torch.nn")) is None  # a broken torch install
    assert extra_of(ModuleNotFoundError(name="oodeval.nothing")) is None
    assert extra_of(ImportError("cannot import name 'x'", name="torch")) is None  # a real bug
    require_extra("train", "this test")  # installed here: no error
    with pytest.raises(ValueError, match="unknown extra"):
        require_extra("nope", "x")


def hide(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """`importlib.util.find_spec` finds no `module`, as where it is not installed."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a)
    )


def test_require_extra_names_the_first_missing_module(monkeypatch):
    hide(monkeypatch, "jinja2")
    with pytest.raises(OodevalError, match=r"^y needs the 'report' extra \(jinja2 is not"):
        require_extra("report", "y")


def test_the_digits_source_names_the_train_extra(monkeypatch):
    from oodeval.environments import sources

    hide(monkeypatch, "sklearn")
    with pytest.raises(OodevalError, match=r"^the digits source needs the 'train' extra \(sklearn"):
        sources.source_identity("digits")
