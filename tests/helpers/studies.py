"""Study helpers: a synthetic study config, reading a store, comparing two stores.

The synthetic backend (`oodeval.study.synthetic`) is pure numpy with milliseconds per unit and
errors derived from the unit's seed, so the study machinery is tested without training.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from oodeval.study import config_from_dict, load_study
from tests.helpers.cli import invoke

#: The algorithms of `synthetic_config`.
ALGOS = ["ERM", "IRM", "GroupDRO", "VREx", "MMD"]

#: The worst+gap paper's fourteen DomainBed algorithms, in its order, written here rather than
#: read from oodeval (tests compare oodeval's lists with it).
FOURTEEN = [
    "ERM",
    "IRM",
    "GroupDRO",
    "Mixup",
    "MLDG",
    "CORAL",
    "MMD",
    "DANN",
    "CDANN",
    "MTL",
    "SagNet",
    "ARM",
    "VREx",
    "RSC",
]


def synthetic_config(**overrides):
    """A study of the synthetic backend: 5 algorithms x 2 seeds x 2 scenarios, `overrides`
    replacing top-level keys."""
    data = {
        "name": "synthetic-test",
        "backend": "oodeval.study.synthetic",
        "algorithms": ALGOS,
        "seeds": [0, 1],
        "steps": 10,
        "scenarios": [
            {"family": "synthetic", "ratio": "3:1", "scale": 1},
            {"family": "synthetic", "ratio": "4:1", "scale": 2},
        ],
    }
    data.update(overrides)
    return config_from_dict(data)


def stored_rows(directory: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Everything of a store that must be reproducible (not timings or wall-clock stamps)."""
    study = load_study(directory)
    # timings and clock stamps vary; versions carry a digest of the (possibly edited) sources
    units = study.units.drop(columns=["timings", "started", "finished", "versions"])
    units = units.assign(**{c: units[c].map(repr) for c in ("params", "hparams")})
    return units.reset_index(drop=True), study.results.reset_index(drop=True)


def assert_same_store(a: Path, b: Path) -> None:
    """The stores in folders `a` and `b` hold the same units and the same numbers, exactly."""
    units_a, results_a = stored_rows(a)
    units_b, results_b = stored_rows(b)
    pd.testing.assert_frame_equal(units_a, units_b)
    pd.testing.assert_frame_equal(results_a, results_b, check_exact=True)


def count_stored_units(directory: Path) -> int:
    """Units in `directory`'s store, read-only and without waiting for its writer (0 while the
    store or its tables do not exist yet)."""
    try:
        uri = f"{(directory / 'results.sqlite').as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM units").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def finished_study(root: Path, config: str) -> Path:
    """Run the study `config` (TOML text, written to ``root/study.toml``) to the end in
    ``root/s`` with one worker, no progress bar and no report; return ``root/s``."""
    (root / "study.toml").write_text(config, encoding="utf-8")
    argv = ["study", "run", str(root / "study.toml"), "--out", str(root / "s"), "--workers", "1"]
    code, out, err = invoke([*argv, "--no-progress", "--no-report"])
    assert code == 0, out + err
    return root / "s"
