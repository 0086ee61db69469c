"""The one measure registry: a measure registered once is seen everywhere measures are listed or
accepted, user measures come in through a config's ``imports``, and no module keeps its own list.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import oodeval
from oodeval.cli.main import build_app
from oodeval.errors import OodevalError
from oodeval.measures import (
    MEASURES,
    domain_measures,
    get_measure,
    measure_code_digest,
    measure_names,
    register_measure,
    register_measure_family,
    unit_measures,
    unregister_measure,
)
from oodeval.study import config_from_dict
from oodeval.study.config import ConfigError, import_module_or_file

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "examples" / "results.csv"
SYNTHETIC = {
    "name": "registry-test",
    "backend": "oodeval.study.synthetic",
    "algorithms": ["ERM", "IRM"],
    "seeds": [0],
    "steps": 3,
    "scenarios": [{"family": "synthetic", "ratio": "3:1", "scale": 1}],
}


@pytest.fixture
def toys() -> Iterator[tuple[str, str]]:
    """A plain toy measure (second largest error) and a toy family (the k-th largest)."""

    @register_measure("toy_second_worst", label="2nd worst", min_envs=2)
    def toy_second_worst(errors: np.ndarray) -> np.ndarray:
        """The second largest error."""
        return np.sort(errors, axis=-1)[..., -2]

    @register_measure_family("toy_kth_worst", params={"k": int}, label="worst#{k}")
    def toy_kth_worst(k: int):
        if k < 1:
            raise OodevalError(f"measure toy_kth_worst: k must be >= 1, got {k}")
        return lambda errors: np.sort(np.asarray(errors), axis=-1)[..., -k]

    yield "toy_second_worst", "toy_kth_worst:k=2"
    unregister_measure("toy_second_worst")
    unregister_measure("toy_kth_worst")


def test_a_registered_measure_is_seen_everywhere(toys: tuple[str, str], tmp_path: Path) -> None:
    plain, member = toys
    errors = np.array([[0.1, 0.4, 0.2, 0.3], [0.5, 0.5, 0.1, 0.9]])
    second = [0.3, 0.5]  # by hand: the second largest of each row

    # the registry and its lists
    assert plain in measure_names() and "toy_kth_worst:k=<int>" in measure_names()
    assert plain in MEASURES and get_measure(member).label == "worst#2"
    assert get_measure(plain).description == "The second largest error."
    assert len(measure_code_digest(plain)) == 16 and len(measure_code_digest(member)) == 16
    # domain_measures: by default (plain measures) and by spec
    assert domain_measures(errors)[plain].tolist() == second
    assert domain_measures(errors, [member])[member].tolist() == second
    # the per-unit layer of every analysis
    rows = {
        "algorithm": ["A"] * 4 + ["B"] * 4,
        "split": ["loo"] * 8,
        "environment": ["e1", "e2", "e3", "e4"] * 2,
        "error": errors.ravel(),
    }
    units = unit_measures(rows, [plain, member])
    assert units[plain].tolist() == second and units[member].tolist() == second
    # oodeval.score / Scores: by default and by spec, and the answer line names them
    scores = oodeval.score(pd.DataFrame(rows))
    assert scores.measures[plain].tolist() == second
    assert "2nd worst picks A" in oodeval.score(pd.DataFrame(rows), measures=[plain, member]).answer

    # the command line: listed in --help, accepted by --measures, listed when a name is wrong
    runner = CliRunner()
    app = build_app()
    help_text = " ".join(runner.invoke(app, ["measures", "--help"]).output.split())
    assert plain in help_text and "toy_kth_worst:k=<int>" in help_text
    out = tmp_path / "scores.csv"
    res = runner.invoke(
        app,
        ["measures", str(RESULTS), "--measures", f"{plain},{member}", "-f", "csv"]
        + ["-o", str(out)],
    )
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out)
    assert {plain, member} <= set(table.loc[table["table"] == "measures", "measure"])
    res = runner.invoke(app, ["measures", str(RESULTS), "--measures", "toy_sekond"])
    assert res.exit_code == 2 and plain in res.output

    # a study config's measures
    config = config_from_dict({**SYNTHETIC, "measures": ["average", plain, "toy_kth_worst:k=2"]})
    assert config.measures == ("average", plain, member)


def test_unregistered_it_is_gone_again(toys: tuple[str, str]) -> None:
    plain, member = toys
    unregister_measure(plain)
    unregister_measure(member.split(":")[0])
    assert plain not in measure_names() and plain not in MEASURES
    with pytest.raises(OodevalError, match="unknown measure"):
        get_measure(member)
    with pytest.raises(ConfigError, match="unknown measure"):
        config_from_dict({**SYNTHETIC, "measures": [plain]})


def test_names_are_checked_and_built_ins_kept(toys: tuple[str, str]) -> None:
    plain, _ = toys
    with pytest.raises(OodevalError, match="already registered"):
        register_measure("cvar")(lambda errors: errors.max(axis=-1))
    with pytest.raises(OodevalError, match="already registered"):
        register_measure(plain)(lambda errors: errors.max(axis=-1))
    with pytest.raises(OodevalError, match="lower-case letters"):
        register_measure("My Measure")
    with pytest.raises(OodevalError, match="min_envs of x_measure must be an integer >= 1"):
        register_measure("x_measure", min_envs=0)
    with pytest.raises(OodevalError, match="split must be"):
        register_measure("x_measure", split="test")
    with pytest.raises(OodevalError, match="built-in"):
        unregister_measure("cvar")
    with pytest.raises(OodevalError, match="k must be >= 1"):
        get_measure("toy_kth_worst:k=0")
    with pytest.raises(OodevalError, match="'two' is not a valid int"):
        get_measure("toy_kth_worst:k=two")
    register_measure("toy_bad_shape")(lambda errors: np.array(1.0))  # one value for 2 rows
    try:
        with pytest.raises(OodevalError, match=r"returned shape \(\) for errors of shape"):
            domain_measures([[0.1, 0.2], [0.3, 0.4]], ["toy_bad_shape"])
    finally:
        unregister_measure("toy_bad_shape")
    with pytest.raises(OodevalError, match="needs >= 2 environments, got N=1"):
        domain_measures([[0.1]], [plain])


MY_MEASURES = '''
import numpy as np
from oodeval.measures import register_measure


@register_measure("file_trimmed_worst", label="trimmed worst", min_envs=3)
def file_trimmed_worst(errors):
    """The worst error once the single worst environment is dropped."""
    return np.sort(errors, axis=-1)[..., -2]
'''


def test_a_configs_imports_bring_its_measures(tmp_path: Path) -> None:
    module = tmp_path / "registry_test_measures.py"
    module.write_text(MY_MEASURES, encoding="utf-8")
    try:
        config = config_from_dict(
            {**SYNTHETIC, "imports": [str(module)], "measures": ["file_trimmed_worst"]}
        )
        assert config.measures == ("file_trimmed_worst",)
        assert get_measure("file_trimmed_worst").label == "trimmed worst"
        # the measure's code digest is the one the config records for its file
        first = measure_code_digest("file_trimmed_worst")
        assert first == config.import_digests[str(module)] == sha16(module.read_bytes())
        # an edit alone changes nothing loaded; the file executed again (as a worker or a
        # later command does) replaces its measure instead of clashing, with the new digest
        module.write_text(MY_MEASURES.replace("trimmed worst", "trimmed"), encoding="utf-8")
        assert measure_code_digest("file_trimmed_worst") == first
        import_module_or_file(str(module))
        assert get_measure("file_trimmed_worst").label == "trimmed"
        assert measure_code_digest("file_trimmed_worst") == sha16(module.read_bytes()) != first
    finally:
        unregister_measure("file_trimmed_worst")
        sys.modules.pop("registry_test_measures", None)


def sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def test_built_in_digests_are_their_modules_bytes() -> None:
    measures = ROOT / "oodeval" / "measures"
    assert measure_code_digest("average") == sha16((measures / "domain.py").read_bytes())
    comparators = sha16((measures / "comparators.py").read_bytes())
    assert measure_code_digest("cvar:alpha=0.5") == measure_code_digest("median") == comparators


def test_named_measure_lists_name_registered_measures_only() -> None:
    """Module constants ``*_MEASURES`` (the paper's choices of measures per table, a report's
    ranking) are selections from the registry, never a second list of what exists."""
    found = {}
    for path in (ROOT / "oodeval").rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List)):
                for target in node.targets:
                    if isinstance(target, ast.Name) and re.search(r"MEASURES$|^RANKED$", target.id):
                        names = [ast.literal_eval(e) for e in node.value.elts]
                        found[f"{path.name}:{target.id}"] = names
    assert len(found) >= 5, found  # DEFAULT_, CORRELATION_, ABLATION_, SELECTION_, DOMAINBED_...
    for where, names in found.items():
        for name in names:
            assert get_measure(name).name == name, where


def test_a_configs_measures_are_canonical_specs_and_bad_ones_one_problem() -> None:
    config = config_from_dict({**SYNTHETIC, "measures": ["cvar:alpha=.50", "median"]})
    assert config.measures == ("cvar:alpha=0.5", "median")
    with pytest.raises(ConfigError) as info:
        config_from_dict({**SYNTHETIC, "measures": ["cvar:alpha=2", "ideal", "medain"]})
    assert info.value.problems == (
        "measures: measure cvar: alpha must lie in (0, 1], got 2; e.g. cvar:alpha=0.25",
        f"unknown measure(s) 'ideal', 'medain'; choose from {', '.join(measure_names())}; "
        "did you mean 'median' for 'medain'?",
    )
