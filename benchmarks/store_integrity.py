"""What verified integrity costs: writing and reading a paper-sized study store.

    .venv/bin/python benchmarks/store_integrity.py [--units 504] [--checkpoints 50] [--repeats 3]

The store holds ``--units`` units (504 = the paper's 14 algorithms x 12 scenarios x 3 seeds), each
with N_given leave-one-out rows plus 101 rows of the model trained on all (N_given cycling over
the paper's 4, 5, 6, 8, 10, 12, 12, 15, 16, 18, 20, 24) and ``--checkpoints`` checkpoint rows per
LOO model (5000 steps evaluated every 100).

Timed, each the fastest of ``--repeats`` runs, with the baseline measured in the same run:

- write: `ResultStore.record_unit` (rows, counts and checksum in one transaction) against the same
  inserts without the integrity record (what the store did before checksums);
- read: `load_study` (SQLite's integrity check on open, every unit's rows and checkpoints counted
  and hashed again, rows of no unit counted) against plain ``pd.read_sql_query`` of units and
  results (what it read before checksums) and of all three tables;
- SQLite's ``quick_check`` (what readers ran before every command ran the same check) and
  ``integrity_check`` (every command, on open: it also compares each index with its table), the
  count of rows of no stored unit (every command), and ``oodeval study verify``'s whole check.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import pandas as pd

from oodeval.study.store import (
    SCHEMA_SQL,
    UNIT_COLUMNS,
    ResultStore,
    UnitRecord,
    load_study,
    unit_values,
    verify_store,
)
from oodeval.study.store.units import count_stray_rows

N_GIVEN = (4, 5, 6, 8, 10, 12, 12, 15, 16, 18, 20, 24)


def unit(i: int, checkpoints: int) -> tuple[UnitRecord, list[tuple]]:
    n = N_GIVEN[(i // 42) % len(N_GIVEN)]
    folds = [f"e={k / 100:.3f}" for k in range(n)]
    rows = [(f, f, 0.25 + (i % 7) / 100 + k / 1000, 200) for k, f in enumerate(folds)]
    rows += [("all", f"e={k / 100:.3f}", 0.3 + k / 1000, 200) for k in range(101)]
    ckpts = [
        (f, s * 100, 0.5 + s / 1000, 0.6 + s / 2000, 0.55 + s / 3000)
        for f in folds
        for s in range(1, checkpoints + 1)
    ]
    record = UnitRecord(
        scenario=f"s{i // 42}", family="synthetic", params={"scale": 1}, algorithm=f"A{i % 14}",
        seed=i % 3, hparams={"lr": 1e-3}, steps=5000, model="mlp", status="done",
        timings={"wall": 1.0}, versions={"oodeval": "0"}, checkpoints=ckpts, rows=rows,
    )  # fmt: skip
    return record, rows


def write_verified(directory: Path, units: list) -> float:
    with ResultStore(directory, create=True) as store:
        store.bind_config({"name": "bench", "algorithms": [], "seeds": [], "scenarios": []})
        start = time.perf_counter()
        for record, _rows in units:
            store.record_unit(record)
        return time.perf_counter() - start


def write_plain(path: Path, units: list) -> float:
    """The same rows, one transaction per unit, without counts or checksum."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(SCHEMA_SQL)
    start = time.perf_counter()
    for record, rows in units:
        conn.execute("BEGIN IMMEDIATE")
        values = unit_values(record, 1)
        conn.execute(
            f"INSERT INTO units({', '.join(UNIT_COLUMNS)}) VALUES "
            f"({', '.join('?' * len(UNIT_COLUMNS))})",
            values,
        )
        conn.executemany(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?)", [(values[0], *r) for r in rows]
        )
        conn.executemany(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
            [(values[0], *c) for c in record.checkpoints],
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def read_verified(directory: Path) -> float:
    """`load_study`: what status, analyze and report read (every unit verified)."""
    start = time.perf_counter()
    load_study(directory)
    return time.perf_counter() - start


def read_plain(path: Path, tables: tuple[str, ...]) -> float:
    """Plain reads of `tables`: units + results is what `load_study` read before checksums."""
    start = time.perf_counter()
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    for table in tables:
        pd.read_sql_query(f"SELECT * FROM {table}", conn)
    conn.close()
    return time.perf_counter() - start


def pragma_seconds(path: Path, pragma: str) -> float:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    start = time.perf_counter()
    assert conn.execute(f"PRAGMA {pragma}").fetchone()[0] == "ok"
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def stray_seconds(directory: Path) -> float:
    """Counting the rows of no stored unit, as every command does when it reads."""
    with ResultStore(directory) as store:
        start = time.perf_counter()
        assert count_stray_rows(store) == 0
        return time.perf_counter() - start


def verify_seconds(directory: Path) -> float:
    start = time.perf_counter()
    assert verify_store(directory).clean
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=504)
    parser.add_argument("--checkpoints", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    units = [unit(i, args.checkpoints) for i in range(args.units)]
    n_rows = sum(len(rows) for _, rows in units)
    n_ckpts = sum(len(r.checkpoints) for r, _ in units)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for k in range(args.repeats):
            verified, plain = Path(scratch) / f"v{k}", Path(scratch) / f"p{k}.sqlite"
            times.setdefault("write, verified", []).append(write_verified(verified, units))
            times.setdefault("write, plain", []).append(write_plain(plain, units))
            times.setdefault("read, verified", []).append(read_verified(verified))
            times.setdefault("read, plain", []).append(read_plain(plain, ("units", "results")))
            times.setdefault("read all tables, plain", []).append(
                read_plain(plain, ("units", "results", "checkpoints"))
            )
            store = verified / "results.sqlite"
            times.setdefault("quick_check", []).append(pragma_seconds(store, "quick_check"))
            times.setdefault("integrity_check", []).append(pragma_seconds(store, "integrity_check"))
            times.setdefault("stray rows count", []).append(stray_seconds(verified))
            times.setdefault("study verify", []).append(verify_seconds(verified))
            size = store.stat().st_size
    best = {name: min(values) for name, values in times.items()}
    print(
        f"store: {args.units} units, {n_rows} result rows, {n_ckpts} checkpoint rows, "
        f"{size / 2**20:.1f} MiB; fastest of {args.repeats}"
    )
    v, p = best["write, verified"], best["write, plain"]
    print(
        f"write (record_unit) {1000 * v / args.units:6.2f} ms/unit; without the integrity "
        f"record {1000 * p / args.units:6.2f} ms/unit; ratio {v / p:.2f}x"
    )
    v, p, a = best["read, verified"], best["read, plain"], best["read all tables, plain"]
    print(
        f"read (load_study)   {v:6.2f} s; plain units+results {p:6.2f} s (ratio {v / p:.2f}x); "
        f"plain all three tables {a:6.2f} s (ratio {v / a:.2f}x)"
    )
    for name in ("quick_check", "integrity_check", "stray rows count", "study verify"):
        print(f"{name:16s} {best[name]:7.2f} s")
    extra = best["integrity_check"] - best["quick_check"] + best["stray rows count"]
    print(
        f"one damage check for every command: integrity_check + stray count instead of "
        f"quick_check adds {extra:.2f} s to a read of {best['read, verified']:.2f} s "
        f"({100 * extra / best['read, verified']:.0f}%)"
    )


if __name__ == "__main__":
    main()
