"""Hypothesis strategies for study configs (valid and broken) and a small TOML writer.

Every generated config uses the synthetic backend (`oodeval.study.synthetic`: numpy, no
training), so a config that a broken variant leaves valid costs milliseconds, never a training.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import strategies as st

from oodeval.paper_grid import PAPER_ALGORITHMS
from oodeval.study.config import DEFAULT_MEASURES
from oodeval.study.synthetic import MODELS
from oodeval.training.options import CHECKPOINT_SELECTIONS, PRECISIONS
from tests.helpers.fuzz import names

SYNTHETIC = "oodeval.study.synthetic"


def toml_value(value: Any) -> str:
    """`value` as a TOML value (inline tables and arrays; strings as basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):  # JSON's escapes are TOML's, but TOML also escapes DEL
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def toml_text(config: dict[str, Any]) -> str:
    """A TOML document of top-level ``key = value`` lines (nested tables written inline);
    ``backend`` first, so that a truncated file never loses it while keeping the rest."""
    keys = sorted(config, key=lambda k: k != "backend")
    return "".join(f"{toml_value(k)} = {toml_value(config[k])}\n" for k in keys)


@st.composite
def scenarios(draw: st.DrawFn) -> list[dict[str, Any]]:
    """1-3 distinct synthetic scenarios of 3 to 12 given environments."""
    found = draw(st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 2)),
        min_size=1, max_size=3, unique=True,
    ))
    return [{"family": "synthetic", "ratio": f"{a}:{b}", "scale": s} for a, b, s in found
            if (a + b) * s >= 3] or [{"family": "synthetic", "ratio": "3:1", "scale": 1}]


@st.composite
def study_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid study config of the synthetic backend, as the dict a TOML file holds."""
    steps = draw(st.integers(1, 10_000_000))
    config: dict[str, Any] = {
        "backend": SYNTHETIC,
        "name": draw(names()),
        "algorithms": draw(st.lists(st.sampled_from(PAPER_ALGORITHMS), min_size=1, max_size=4,
                                    unique=True)),
        "seeds": draw(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=3, unique=True)),
        "steps": steps,
        "scenarios": draw(scenarios()),
    }
    optional = {
        "data_seed": st.integers(0, 2**32 - 1),
        "hparams_mode": st.sampled_from(["default", "random"]),
        "model": st.sampled_from(sorted(MODELS)),
        "measures": st.lists(st.sampled_from(DEFAULT_MEASURES), min_size=1, unique=True),
        "trainer": st.fixed_dictionaries({}, optional={
            "eval_every": st.integers(1, 10_000_000),
            "holdout_fraction": st.floats(0.01, 0.99),
            "batch_size": st.integers(1, 65_536),
            "selection": st.sampled_from(CHECKPOINT_SELECTIONS),
            "precision": st.sampled_from(PRECISIONS),
        }),
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
        config[key] = draw(optional[key])
    return config


#: Values of a wrong type or out of range for a key (each is refused wherever it lands).
WRONG_VALUES: dict[str, list[Any]] = {
    "steps": [0, -1, 10**30, 10_000_001, 1.5, "100", True, [100], {"n": 1}, math.nan],
    "seeds": [[], [-1], [2**32], [0, 0], "0", 0, [1.5], [True], [[0]], [math.inf]],
    "data_seed": [-1, 2**32, 2**70, "0", 0.5, False, [0]],
    "algorithms": [[], ["NoSuchAlgorithm"], ["ERM", "ERM"], "ERM", [1], [""], [["ERM"]]],
    "scenarios": [[], "synthetic", [{"family": "nope"}], [{"ratio": "3:1"}], [1],
                  [{"family": "synthetic", "ratio": "x"}],
                  [{"family": "synthetic", "ratio": "0:1", "scale": 1}],
                  [{"family": "synthetic", "ratio": "3:1", "scale": -2}]],
    "name": ["", 5, [], {"a": 1}],
    "model": ["no-such-model", 3, ""],
    "backend": [3, "", ["x"]],
    "hparams_mode": ["sometimes", 1, ""],
    "measures": [[], ["no_such_measure"], "average", [1], ["average", "average"], ["cvar:alpha=7"]],
    "trainer": [{"eval_every": 0}, {"eval_every": -5}, {"batch_size": 0},
                {"batch_size": 65_537}, {"batch_size": 2**80}, {"holdout_fraction": 1.0},
                {"holdout_fraction": -0.1}, {"holdout_fraction": math.nan},
                {"holdout_fraction": "0.2"}, {"selection": "best"}, {"precision": "fp8"},
                {"device": "tpu"}, {"tf32": "on"}, {"augment": "yes"}, {"augment": 1},
                {"imagenet_normalize": "no"}, {"imagenet_normalize": 0},
                {"unknown_option": 1}, "fast", [1]],
    "hparams": [{"NoSuchAlgorithm": {"lr": 1}}, "x", {"ERM": 5}],
    "unit_options": ["x", [1]],
    "imports": [5, "module", [5]],
}


@st.composite
def broken_configs(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """(config, what is wrong): a valid config with one key given a wrong value, an unknown
    key, a computed key, or a required key missing."""
    config = draw(study_configs())
    how = draw(st.sampled_from(["wrong value", "unknown key", "computed key", "missing key"]))
    if how == "wrong value":
        key = draw(st.sampled_from(sorted(WRONG_VALUES)))
        value = draw(st.sampled_from(WRONG_VALUES[key]))
        config[key] = value
        return config, f"{key} = {value!r}"
    if how == "unknown key":
        key = draw(st.sampled_from(["step", "Seeds", "algorithm", "trainers", "épochs", "x y"]))
        config[key] = draw(st.sampled_from([1, "x", [1], {"a": 1}]))
        return config, f"unknown key {key!r}"
    if how == "computed key":
        key = draw(st.sampled_from(["source_identity", "import_digests"]))
        config[key] = {"kind": "digits", "digest": "0"}
        return config, f"computed key {key!r}"
    key = draw(st.sampled_from(["scenarios", "algorithms", "seeds", "steps"]))
    del config[key]
    return config, f"missing {key!r}"
