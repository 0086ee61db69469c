"""The suite's one rule for missing extras and shared data: skip with the reason, fail under CI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.requires import REPO, in_ci, requires_module, requires_path


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", False), ("0", False), ("false", False), ("No", False), ("true", True), ("1", True)],
)
def test_ci_is_any_value_but_empty_or_false(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected


@pytest.mark.parametrize(
    ("ci", "outcome"), [("", pytest.skip.Exception), ("true", pytest.fail.Exception)]
)
def test_missing_data_and_extras_skip_locally_and_fail_in_ci(monkeypatch, tmp_path, ci, outcome):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"the thing not found at .*nothing \(\.\./shared"):
        requires_path(tmp_path / "nothing", "the thing")
    monkeypatch.setitem(sys.modules, "open_clip", None)  # `import open_clip` fails from here on
    with pytest.raises(outcome, match=r"optional extra 'clip' is not installed"):
        requires_module("open_clip")
    assert requires_path(tmp_path, "the folder") == tmp_path


def test_our_own_modules_are_never_optional():
    with pytest.raises(ValueError, match="not the module of an optional extra"):
        requires_module("oodeval.training")


BLOCK_TORCH = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("ci", ["", "true"])
def test_doctests_of_a_module_needing_a_missing_extra_skip_locally_and_fail_in_ci(tmp_path, ci):
    """The root conftest.py: without torch, oodeval.algorithms.networks cannot be imported."""
    script = tmp_path / "block_torch.py"
    script.write_text(BLOCK_TORCH, encoding="utf-8")
    env = {**os.environ, "CI": ci}
    args = ["-q", "-rs", "-p", "no:cacheprovider", "oodeval/algorithms/networks.py"]
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if ci:
        assert (
            proc.returncode != 0 and "ModuleNotFoundError: No module named 'torch'" in proc.stdout
        )
    else:
        assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, proc.stdout  # all skipped
        reason = "the optional extra 'train' is not installed (no module 'torch'"
        assert reason in proc.stdout and "skipped" in proc.stdout
