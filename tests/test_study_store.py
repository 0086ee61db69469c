"""The study results store: atomic per-unit writes, no duplicates, config binding."""

from __future__ import annotations

import pytest

from oodeval.errors import OodevalError
from oodeval.study.store import ResultStore, UnitRecord, load_study, unit_key

CONFIG = {"name": "s", "algorithms": ["ERM"], "seeds": [0], "scenarios": [{"family": "x"}]}


def record(algorithm="ERM", seed=0, status="done", failure=None):
    return UnitRecord(
        scenario="scen",
        family="x",
        params={"scale": 1},
        algorithm=algorithm,
        seed=seed,
        hparams={"lr": 0.001},
        steps=5,
        model="mlp",
        status=status,
        failure=failure,
        timings={"wall": 1.5},
        versions={"oodeval": "0"},
    )


ROWS = [("e=0.1", "e=0.1", 0.25, 10), ("all", "e=0.1", 0.2, 10), ("all", "e=0.9", 0.6, 10)]


def test_unit_rows_and_metadata_round_trip(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.bind_config(CONFIG)
        store.record_unit(record(), ROWS)
    study = load_study(tmp_path)
    assert study.config == CONFIG
    unit = study.units.iloc[0]
    assert unit["unit_key"] == unit_key("scen", "ERM", 0) == "scen|ERM|seed=0"
    assert unit["hparams"] == {"lr": 0.001} and unit["timings"] == {"wall": 1.5}
    assert unit["status"] == "done" and unit["attempts"] == 1
    got = sorted(study.results[["fold", "environment", "error", "count"]].itertuples(index=False))
    assert [tuple(r) for r in got] == sorted(ROWS)
    assert study.counts() == {"done": 1, "failed": 0, "damaged": 0, "pending": 0, "planned": 1}


def test_done_unit_is_never_rewritten(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.record_unit(record(), ROWS)
        store.record_unit(record(), [("all", "e=0.1", 0.99, 1)])
        frame = store.results_frame()
        units = store.units_frame()
    assert sorted(frame["error"]) == sorted(r[2] for r in ROWS)
    assert units["attempts"].tolist() == [1]


def test_failed_unit_is_replaced_and_attempts_counted(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.record_unit(record(status="failed", failure="ValueError: boom"))
        assert store.statuses() == {"scen|ERM|seed=0": "failed"}
        store.record_unit(record(), ROWS)
        units = store.units_frame()
    assert units["status"].tolist() == ["done"] and units["attempts"].tolist() == [2]
    assert units["failure"].isna().all()


def test_a_duplicate_row_rolls_back_the_whole_unit(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        with pytest.raises(OodevalError, match=r"two rows share the \(fold, environment\)"):
            store.record_unit(record(), [*ROWS, ROWS[0]])
        assert store.statuses() == {}
        assert store.results_frame().empty


def test_other_config_is_refused_naming_the_keys(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.bind_config(CONFIG)
        store.bind_config(dict(CONFIG))  # the same config binds again
        with pytest.raises(OodevalError, match=r"keys differ: seeds, steps"):
            store.bind_config({**CONFIG, "seeds": [0, 1], "steps": 3})


def test_missing_or_foreign_store_is_a_clear_error(tmp_path):
    with pytest.raises(OodevalError, match="no study in"):
        load_study(tmp_path / "nothing")
    (tmp_path / "results.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(OodevalError, match="not"):
        ResultStore(tmp_path)


def test_wal_and_full_sync_are_on(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
