"""The study results store: atomic per-unit writes, no duplicates, config binding, and the
integrity of what it holds (row counts and checksums, quarantine, rebuild, schema 1 stores)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import sqlite3
import struct

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.study.store import (
    UNIT_COLUMNS,
    ResultStore,
    SetAside,
    StoreDamagedError,
    StoreIntegrityWarning,
    UnitRecord,
    load_study,
    unit_checksum,
    unit_key,
    verify_store,
)

CONFIG = {"name": "s", "algorithms": ["ERM"], "seeds": [0], "scenarios": [{"family": "x"}]}


def record(algorithm="ERM", seed=0, status="done", failure=None, rows=()):
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
        rows=rows,
    )


ROWS = [("e=0.1", "e=0.1", 0.25, 10), ("all", "e=0.1", 0.2, 10), ("all", "e=0.9", 0.6, 10)]


def test_unit_rows_and_metadata_round_trip(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.bind_config(CONFIG)
        store.record_unit(record(rows=ROWS))
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
        store.record_unit(record(rows=ROWS))
        store.record_unit(record(rows=[("all", "e=0.1", 0.99, 1)]))
        frame = store.results_frame()
        units = store.units_frame()
    assert sorted(frame["error"]) == sorted(r[2] for r in ROWS)
    assert units["attempts"].tolist() == [1]


def test_failed_unit_is_replaced_and_attempts_counted(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.record_unit(record(status="failed", failure="ValueError: boom"))
        assert store.statuses() == {"scen|ERM|seed=0": "failed"}
        store.record_unit(record(rows=ROWS))
        units = store.units_frame()
    assert units["status"].tolist() == ["done"] and units["attempts"].tolist() == [2]
    assert units["failure"].isna().all()


def test_a_duplicate_row_rolls_back_the_whole_unit(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        with pytest.raises(OodevalError, match=r"two rows share the \(fold, environment\)"):
            store.record_unit(record(rows=[*ROWS, ROWS[0]]))
        assert store.statuses() == {}
        assert store.results_frame().empty


def test_other_config_is_refused_naming_the_keys(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        store.bind_config(CONFIG)
        store.bind_config(dict(CONFIG))  # the same config binds again
        with pytest.raises(OodevalError, match=r"would not compare with this config's: steps \("):
            store.bind_config({**CONFIG, "seeds": [0, 1], "steps": 3})
        assert store.bind_config({**CONFIG, "seeds": [0, 1]}).added_seeds == (1,)  # a growth
        assert [r.seq for r in store.config_history()] == [1, 2]


def test_missing_or_foreign_store_is_a_clear_error(tmp_path):
    with pytest.raises(OodevalError, match="no study in"):
        load_study(tmp_path / "nothing")
    (tmp_path / "results.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(OodevalError, match="not"):
        ResultStore(tmp_path)


def test_wal_and_full_sync_are_on(tmp_path):
    with ResultStore(tmp_path, create=True) as store:
        assert store.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


# -- integrity: counts and checksums --------------------------------------------------------
CKPTS = [("e=0.1", 1, 0.5, 0.75, 0.7), ("e=0.1", 2, 0.625, 0.8, 0.75)]
CONFIG2 = {**CONFIG, "algorithms": ["ERM", "IRM"]}


def two_units(directory):
    """A store with config CONFIG2 and two done units (ERM, IRM), each with checkpoints."""
    with ResultStore(directory, create=True) as store:
        store.bind_config(CONFIG2)
        for algorithm in ("ERM", "IRM"):
            store.record_unit(dataclasses.replace(record(algorithm, rows=ROWS), checkpoints=CKPTS))
    return directory / "results.sqlite"


def raw(path):
    """A plain sqlite3 connection, as a user (or a damaged disk) would change the file."""
    return contextlib.closing(sqlite3.connect(path, isolation_level=None))


def test_each_unit_stores_its_row_counts_and_a_checksum_of_what_sqlite_returns(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:
        columns = ", ".join(UNIT_COLUMNS)
        unit = conn.execute(f"SELECT {columns} FROM units WHERE algorithm='ERM'").fetchone()
        n_results, n_checkpoints, checksum = conn.execute(
            "SELECT n_results, n_checkpoints, checksum FROM units WHERE algorithm='ERM'"
        ).fetchone()
        rows = conn.execute(
            "SELECT fold, environment, error, count FROM results WHERE unit_key=?", (unit[0],)
        ).fetchall()
        ckpts = conn.execute(
            "SELECT fold, step, train_val_acc, test_acc, oracle_val_acc FROM checkpoints "
            "WHERE unit_key=?",
            (unit[0],),
        ).fetchall()
    assert (n_results, n_checkpoints) == (3, 2)
    assert checksum == unit_checksum(unit, rows, ckpts)
    # what the writer hashed is what SQLite gives back, row for row and bit for bit
    assert sorted(rows) == sorted(ROWS) and sorted(ckpts) == sorted(CKPTS)


def test_the_checksum_format_is_fixed():
    """Stores written today must verify with every later oodeval: the format is spelled out
    here (the repr of each row, row sets sorted, one per line) and its digest pinned."""
    unit, rows, ckpts = ["k", 1, None, "x"], [("all", "e=0", 0.25, 10)], [("e", 1, 0.5, 0.5, 1.0)]
    text = "\n".join(
        [
            "oodeval-unit-v1",
            "('k', 1, None, 'x')",
            "results",
            "('all', 'e=0', 0.25, 10)",
            "checkpoints",
            "('e', 1, 0.5, 0.5, 1.0)",
        ]
    )
    expected = hashlib.sha256(text.encode()).hexdigest()
    assert unit_checksum(unit, rows, ckpts) == expected
    assert expected == "edcb4ceef5d985baa96289689934dec80a0216e058397741c86111f3f75e52a2"


@given(
    rows=st.lists(
        st.tuples(
            st.text(max_size=3), st.text(max_size=3), st.floats(allow_nan=False), st.integers()
        ),
        min_size=1,
        max_size=6,
        unique_by=lambda r: r[:2],
    ),
    data=st.data(),
)
def test_checksum_ignores_row_order_and_sees_every_bit(rows, data):
    unit = ["k", 0]
    digest = unit_checksum(unit, rows, [])
    assert unit_checksum(unit, data.draw(st.permutations(rows)), []) == digest
    i = data.draw(st.integers(0, len(rows) - 1))
    fold, env, error, count = rows[i]
    bits = struct.unpack("<q", struct.pack("<d", error))[0] ^ (1 << data.draw(st.integers(0, 62)))
    flipped = struct.unpack("<d", struct.pack("<q", bits))[0]
    changed = [*rows[:i], (fold, env, flipped, count), *rows[i + 1 :]]
    assert unit_checksum(unit, changed, []) != digest
    assert unit_checksum(unit, rows[:i] + rows[i + 1 :], []) != digest  # a row less
    assert unit_checksum(unit, [*rows[:i], (fold, env, error, str(count))], []) != digest


def first(table):
    """The SQL condition picking the first row of `table` (the ERM unit's, in `two_units`)."""
    return f"WHERE rowid = (SELECT MIN(rowid) FROM {table})"


DIFFER = "rows differ from their checksum"
TAMPER = {
    "a result value": (f"UPDATE results SET error = error + 1e-12 {first('results')}", DIFFER),
    "a deleted result row": (f"DELETE FROM results {first('results')}", "2 of 3 result rows"),
    "an extra result row": (
        "INSERT INTO results SELECT unit_key, 'x', environment, error, count FROM results "
        + first("results"),
        "4 of 3 result rows",
    ),
    "a deleted checkpoint": (
        f"DELETE FROM checkpoints {first('checkpoints')}",
        "1 of 2 checkpoint",
    ),
    "a checkpoint value": (f"UPDATE checkpoints SET test_acc = 0.5 {first('checkpoints')}", DIFFER),
    "the unit's hyperparameters": (
        f"UPDATE units SET hparams = '{{\"lr\": 0.1}}' {first('units')}",
        DIFFER,
    ),
    "the unit's status": (f"UPDATE units SET status = 'failed' {first('units')}", DIFFER),
    "a lost checksum": (
        f"UPDATE units SET checksum = NULL {first('units')}",
        "its checksum record",
    ),
}


@pytest.mark.parametrize("change", TAMPER)
def test_a_changed_unit_is_named_refused_and_excluded_on_request(tmp_path, change):
    sql, reason = TAMPER[change]
    path = two_units(tmp_path)
    with raw(path) as conn:
        conn.execute(sql)
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"  # SQLite sees nothing
    with pytest.raises(StoreDamagedError, match=re.escape(f"scen|ERM|seed=0 ({reason}")):
        load_study(tmp_path)
    with ResultStore(tmp_path) as store, pytest.raises(StoreDamagedError):
        store.results_frame()
    study = load_study(tmp_path, exclude_damaged=True)
    assert study.units["algorithm"].tolist() == ["IRM"]
    assert set(study.results["unit_key"]) == {"scen|IRM|seed=0"}
    assert study.counts() == {"done": 1, "failed": 0, "damaged": 1, "pending": 0, "planned": 2}
    assert "scen|ERM|seed=0" in study.integrity_notes()[0]
    assert "excluded from every number" in study.integrity_notes()[0]


def test_the_writer_moves_damaged_units_aside_with_their_rows(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:
        conn.execute(TAMPER["a deleted result row"][0])
    with ResultStore(tmp_path, create=True) as store:
        done = store.move_damaged_aside()
        assert done.units == {"scen|ERM|seed=0": "2 of 3 result rows"}
        assert done.damaged_copy is None
        assert store.statuses() == {"scen|IRM|seed=0": "done"}  # ERM will run again
        assert store.move_damaged_aside() == SetAside()  # nothing left to move
    with raw(path) as conn:
        key, reason, data = conn.execute("SELECT unit_key, reason, data FROM quarantine").fetchone()
        left = conn.execute("SELECT COUNT(*) FROM results WHERE unit_key=?", (key,)).fetchone()
    assert (key, reason, left) == ("scen|ERM|seed=0", "2 of 3 result rows", (0,))
    kept = json.loads(data)
    assert kept["unit"]["algorithm"] == "ERM" and len(kept["results"]) == 2
    assert len(kept["checkpoints"]) == 2
    assert verify_store(tmp_path).clean


def test_stray_rows_are_reported_and_moved_aside(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:
        conn.execute("INSERT INTO results VALUES ('nobody', 'all', 'e=0', 0.5, 1)")
    report = verify_store(tmp_path)
    assert report.health.stray_rows == 1 and not report.clean
    # every reader calls it damage, as verify does; no number uses the rows
    with pytest.raises(StoreDamagedError, match="1 result/checkpoint row.s. belong to no stored"):
        load_study(tmp_path)
    study = load_study(tmp_path, exclude_damaged=True)
    assert study.counts()["done"] == 2
    assert any("1 result/checkpoint row(s) of no stored unit" in n for n in study.integrity_notes())
    with ResultStore(tmp_path, create=True) as store:
        assert store.move_damaged_aside().stray_keys == 1
    assert verify_store(tmp_path).clean


def test_a_store_failing_sqlites_check_is_rebuilt_from_the_units_that_verify(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        # the root page of the results table's primary-key index: garbling it breaks the file
        # for SQLite while every table row stays readable
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name='sqlite_autoindex_results_1'"
        ).fetchone()
    data = bytearray(path.read_bytes())
    data[(root - 1) * page + 8 : root * page] = bytes(page - 8)
    path.write_bytes(bytes(data))
    damaged = path.read_bytes()
    with ResultStore(tmp_path) as reader:
        assert reader.sqlite_check  # the integrity check fails
    with pytest.raises(StoreDamagedError, match="SQLite's integrity check fails"):
        load_study(tmp_path)
    with ResultStore(tmp_path, create=True) as store:
        done = store.move_damaged_aside()
        assert done.damaged_copy is not None and done.damaged_copy.read_bytes() == damaged
        assert store.sqlite_check == []
    report = verify_store(tmp_path)
    assert report.clean and report.damaged_copies == [done.damaged_copy.name]
    assert any(line.startswith("rebuilt on ") for line in report.history)
    study = load_study(tmp_path)  # whatever verified was kept, exactly
    assert sorted(study.units["algorithm"]) == sorted(
        {"ERM", "IRM"} - {k.split("|")[1] for k in done.units}
    )
    for rows in study.results.groupby("unit_key"):
        assert sorted(
            map(tuple, rows[1][["fold", "environment", "error", "count"]].values)
        ) == sorted(ROWS)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty (0 bytes)"),
        (b"SQLite format 3\x00" + bytes(200), "not a readable study store"),
        (b"unit,error\nERM,0.25\n" * 300, "not a readable study store"),
    ],
)
def test_an_empty_or_unreadable_store_is_refused_never_started_over(tmp_path, content, message):
    path = tmp_path / "results.sqlite"
    path.write_bytes(content)
    for open_it in (lambda: ResultStore(tmp_path), lambda: ResultStore(tmp_path, create=True)):
        with pytest.raises(StoreDamagedError, match=re.escape(message)):
            open_it()
    assert path.read_bytes() == content
    report = verify_store(tmp_path)
    assert not report.clean and report.lines()[-1] == "verdict: DAMAGED (unreadable)"


def test_a_new_store_never_exists_without_its_tables(tmp_path):
    with ResultStore(tmp_path / "new", create=True) as store:
        assert store.stored_config() is None
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["results.sqlite", "study.lock"]
    with raw(tmp_path / "new" / "results.sqlite") as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        schema = conn.execute("SELECT value FROM study WHERE key='schema'").fetchone()
    assert tables == {"study", "units", "results", "checkpoints", "quarantine", "configs"}
    assert schema == ("3",)


def test_readers_and_verify_never_change_the_store(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:
        conn.execute(TAMPER["a result value"][0])
    before = path.read_bytes()
    with ResultStore(tmp_path) as store:
        with pytest.raises(OodevalError, match="read-only"):
            store.record_unit(record("IRM", rows=ROWS))
        with pytest.raises(OodevalError, match="read-only"):
            store.move_damaged_aside()
    load_study(tmp_path, exclude_damaged=True)
    report = verify_store(tmp_path)
    assert report.health.damaged == {"scen|ERM|seed=0": "rows differ from their checksum"}
    assert path.read_bytes() == before


def test_a_damaged_config_is_refused_by_readers_and_writers(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:
        conn.execute("""UPDATE study SET value = replace(value, '"s"', '"t"') WHERE key='config'""")
    with pytest.raises(StoreDamagedError, match="study config does not match its checksum"):
        load_study(tmp_path, exclude_damaged=True)
    with ResultStore(tmp_path, create=True) as store:
        with pytest.raises(StoreDamagedError, match="study config does not match its checksum"):
            store.bind_config(CONFIG2)
    assert verify_store(tmp_path).health.problems


def test_units_without_a_config_are_not_adopted_by_a_new_config(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:
        conn.execute("DELETE FROM study WHERE key IN ('config', 'config_sha256')")
    with ResultStore(tmp_path, create=True) as store:
        with pytest.raises(StoreDamagedError, match="holds units but no study config"):
            store.bind_config(CONFIG2)


def make_schema_1(path):
    """Turn a store into what the previous oodeval wrote: no integrity columns, no quarantine
    table, no config checksum, schema '1'."""
    with raw(path) as conn:
        for column in ("checksum", "n_checkpoints", "n_results"):
            conn.execute(f"ALTER TABLE units DROP COLUMN {column}")
        conn.execute("DROP TABLE quarantine")
        conn.execute("DROP TABLE configs")
        conn.execute("DELETE FROM study WHERE key='config_sha256'")
        conn.execute("UPDATE study SET value='1' WHERE key='schema'")


def test_a_schema_1_store_is_read_as_unverified_then_checksummed_by_a_writer(tmp_path):
    path = two_units(tmp_path)
    reference = load_study(tmp_path)
    make_schema_1(path)
    study = load_study(tmp_path)  # readers compute, and say the units are not verified
    pd.testing.assert_frame_equal(study.results, reference.results)
    assert study.health.unverified == ["scen|ERM|seed=0", "scen|IRM|seed=0"]
    assert "2 unit(s) were stored by an oodeval without checksums" in study.integrity_notes()[0]
    with ResultStore(tmp_path) as store, pytest.warns(StoreIntegrityWarning, match="without"):
        store.results_frame()
    report = verify_store(tmp_path)
    assert not report.clean and report.lines()[-1].startswith("verdict: UNVERIFIED")
    with ResultStore(tmp_path, create=True) as store:  # the writer checks and adds checksums
        assert store.has_checksums
    study = load_study(tmp_path)
    assert study.health.verified == 2 and study.integrity_notes() == []
    pd.testing.assert_frame_equal(study.results, reference.results)
    report = verify_store(tmp_path)
    assert report.clean and report.schema == "3"
    assert "checksums added on" in report.history[0]
    assert "(migrated from schema 1, " in report.history[1]


def test_a_damaged_schema_1_store_cannot_be_salvaged_and_says_so(tmp_path):
    path = two_units(tmp_path)
    make_schema_1(path)
    with raw(path) as conn:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name='sqlite_autoindex_results_1'"
        ).fetchone()
    data = bytearray(path.read_bytes())
    data[(root - 1) * 4096 + 8 : root * 4096] = bytes(4096 - 8)
    path.write_bytes(bytes(data))
    with pytest.raises(StoreDamagedError, match="without checksums, so none of its units"):
        ResultStore(tmp_path, create=True)


def test_verify_command_exit_codes(tmp_path):
    runner = CliRunner()
    two_units(tmp_path)
    clean = runner.invoke(app, ["study", "verify", str(tmp_path)])
    assert clean.exit_code == 0 and clean.output.splitlines()[-1] == "verdict: clean"
    with raw(tmp_path / "results.sqlite") as conn:
        conn.execute(TAMPER["a deleted checkpoint"][0])
    damaged = runner.invoke(app, ["study", "verify", str(tmp_path)])
    assert damaged.exit_code == 1
    assert "damaged: scen|ERM|seed=0: 1 of 2 checkpoint rows" in damaged.output
    missing = runner.invoke(app, ["study", "verify", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no study in" in missing.output


def test_a_unit_key_that_is_not_utf8_is_named_and_moved_aside(tmp_path):
    path = two_units(tmp_path)
    with raw(path) as conn:  # one byte of ERM's key flipped to 0xFF: no longer UTF-8
        conn.execute(
            "UPDATE units SET unit_key = CAST(X'7363656eff7c45524d7c736565643d30' AS TEXT) "
            "WHERE algorithm = 'ERM'"
        )
    with pytest.raises(StoreDamagedError, match=re.escape("scen\\udcff|ERM|seed=0 (0 of 3")):
        load_study(tmp_path)
    status = CliRunner().invoke(app, ["study", "status", str(tmp_path)])
    assert status.exit_code == 0 and status.exception is None
    # the key as `printable` writes it, made terminal-safe (its backslash doubled)
    assert "damaged: scen\\\\udcff|ERM|seed=0: 0 of 3 result rows" in status.output
    with ResultStore(tmp_path, create=True) as store:
        done = store.move_damaged_aside()
        assert list(done.units) == ["scen\\udcff|ERM|seed=0"] and done.stray_keys == 1
        assert store.statuses() == {"scen|IRM|seed=0": "done"}
    assert verify_store(tmp_path).clean
