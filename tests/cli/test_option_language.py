"""Errors in the caller's language: the same bad input refused through the Python API names the
keyword (``percent=True``, ``seed``), through the command line the flag (``--percent``,
``--seed``), from one message (`oodeval.errors.option`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

import oodeval
from oodeval.errors import FLAGS, OodevalError, command_line, option
from tests.helpers.cli import assert_refused, invoke

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "examples" / "results.csv"


def _rows(errors: dict[str, list[float]], column: str = "error") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"algorithm": a, "environment": f"e{k}", "split": "loo", column: v}
            for a, values in errors.items()
            for k, v in enumerate(values)
        ]
    )


def _both(tmp_path: Path, frame: pd.DataFrame, *args: str, **keywords: object) -> tuple[str, str]:
    """(Python message, CLI message) of the same results refused by `score` and `measures`."""
    with pytest.raises(OodevalError) as caught:
        oodeval.score(frame, **keywords)  # type: ignore[arg-type]
    path = tmp_path / "results.csv"
    frame.to_csv(path, index=False)
    argv = ["measures", str(path), *args]
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    return str(caught.value), err.strip().removeprefix("error: ")


def test_percentages_without_percent_name_the_keyword_or_the_flag(tmp_path: Path) -> None:
    frame = _rows({"ERM": [90.0, 80.0, 40.0], "IRM": [70.0, 70.0, 60.0]}, "accuracy")
    python, cli = _both(tmp_path, frame)
    assert "looks like percentages; pass percent=True or divide by 100" in python
    assert "looks like percentages; pass --percent or divide by 100" in cli
    assert "--" not in python and "percent=True" not in cli


def test_fractions_with_percent_name_the_keyword_or_the_flag(tmp_path: Path) -> None:
    frame = _rows({"ERM": [0.1, 0.2, 0.6], "IRM": [0.3, 0.3, 0.4]})
    python, cli = _both(tmp_path, frame, "--percent", percent=True)
    assert python.endswith("fractions, not percentages; drop percent=True")
    assert cli.endswith("fractions, not percentages; drop --percent")


def test_too_few_environments_name_the_measures_keyword_or_flag(tmp_path: Path) -> None:
    frame = _rows({"ERM": [0.1, 0.2], "IRM": [0.3, 0.4]})
    python, cli = _both(tmp_path, frame)
    cheap = ["average", "worst", "best", "gap", "worst_only", "scaled_worst"]
    assert python.endswith(f"add loo rows or pass measures={cheap!r}")
    assert cli.endswith(f"add loo rows or pass --measures {','.join(cheap)}")


def test_a_bad_seed_or_resample_count_names_the_keyword_in_python() -> None:
    with pytest.raises(OodevalError, match=r"^seed must be an integer in \[0, 4,294,967,295\]"):
        oodeval.score(RESULTS, seed=-1)
    with pytest.raises(OodevalError, match=r"^bootstrap must be 0 \(off\) or a number"):
        oodeval.score(RESULTS, bootstrap=-1)
    code, out, err = invoke(["measures", str(RESULTS), "--bootstrap", "-1"])
    assert_refused(code, out, err, ["measures"])
    assert err.startswith("error: --bootstrap must be 0 (off) or a number")


def test_the_language_is_the_callers_and_ends_with_the_command() -> None:
    assert option("exclude_damaged", True) == "exclude_damaged=True"
    with command_line():
        assert option("exclude_damaged", True) == "--exclude-damaged"
        assert option("bootstrap_seed") == "bootstrap_seed"  # no flag: named as itself
    assert option("seed") == "seed"


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are statements (docstrings, attribute notes)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def test_library_messages_name_an_option_with_a_keyword_only_through_option() -> None:
    """Outside oodeval/cli a message names a flag that has a Python keyword (`FLAGS`) only
    through `option`, so a Python caller reads the keyword; docstrings may name both, and so
    may a whole command line quoted for the user to type (`oodeval study run ... --out DIR`)."""
    found = {}
    for path in sorted((ROOT / "oodeval").rglob("*.py")):
        if "cli" in path.relative_to(ROOT).parts or path.name == "errors.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in docs or "`oodeval " in node.value:  # a command line to type
                    continue
                for flag in set(FLAGS.values()):
                    if flag in node.value:
                        found[f"{path.relative_to(ROOT)}:{node.lineno}"] = flag
    assert not found, f"write these with oodeval.errors.option: {found}"
