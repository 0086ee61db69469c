"""Damaged study stores: every command refuses in one line or answers with the clean numbers.

A small study (2 scenarios x 4 algorithms, with checkpoint records) is run once; each test copies
its ``results.sqlite``, damages the copy one way (`DAMAGE`) and runs one command on it. Allowed
outcomes, per command:

- a refusal: exit 2, one ``error:`` line, no traceback, and the store's bytes unchanged;
- an answer whose numbers equal the clean store's (``status``, ``analyze``, ``report``,
  ``variance``), or, with ``--exclude-damaged``, equal the clean store's numbers computed on the
  units that were kept, with every output naming the excluded units;
- ``verify``: exit 0 only when nothing is damaged (then the other commands answer as on the clean
  store), exit 1 naming the damage; the store's bytes never change;
- ``run``: after it, the store verifies clean and its analysis equals the clean one exactly.

So no damaged number can reach an output. ``python -m tests.study.test_store_damage`` prints the
damage x command table of outcomes quoted in docs/howto/store-guarantees.md.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.study.store import STORE_NAME, load_study
from tests.helpers.studies import finished_study

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
name = "damage"
backend = "tests.checkpoint_backend"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx"]
seeds = [0]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 },
             { family = "synthetic", ratio = "3:1", scale = 2 }]
"""
PAGE = 4096  # SQLite's default page size


def _first_loo_error(conn: sqlite3.Connection) -> float:
    return conn.execute(
        "SELECT error FROM results WHERE fold = environment ORDER BY unit_key, fold LIMIT 1"
    ).fetchone()[0]


def damage(path: Path, kind: str) -> None:
    """Damage the store file `path` in place, one `DAMAGE` kind (deterministically)."""
    data = bytearray(path.read_bytes())
    rng = random.Random(kind)
    if kind == "truncated to half":
        data = data[: len(data) // 2]
    elif kind == "last page cut off":
        data = data[:-PAGE]
    elif kind == "1 bit flipped mid-file":
        data[len(data) // 2 + 1001] ^= 0x10
    elif kind == "20 bytes flipped":
        for offset in rng.sample(range(100, len(data)), 20):
            data[offset] ^= 1 << rng.randrange(8)
    elif kind == "1 bit of a stored error":
        # SQLite stores a REAL as 8 big-endian bytes: flip the lowest mantissa bit of one LOO
        # error; the file stays structurally valid, so only the checksum can tell
        with sqlite3.connect(path) as conn:
            packed = struct.pack(">d", _first_loo_error(conn))
        conn.close()
        assert data.count(packed) == 1
        data[data.index(packed) + 7] ^= 0x01
    elif kind == "1 byte of a result row's key flipped":
        # the record of a results row holds unit_key, fold, environment and error one after the
        # other; flipping the key's last byte (seed=0 -> seed=1) in the table's record, not in
        # its index entry, breaks the index: only SQLite's integrity check sees it
        with sqlite3.connect(path) as conn:
            key, fold, env, error = conn.execute(
                "SELECT unit_key, fold, environment, error FROM results WHERE unit_key LIKE "
                "'%seed=0' ORDER BY unit_key, fold, environment LIMIT 1"
            ).fetchone()
        conn.close()
        record = (key + fold + env).encode() + struct.pack(">d", error)
        assert data.count(record) == 1
        data[data.index(record) + len(key) - 1] ^= 0x01
    elif kind == "4 KiB page garbled":
        start = (len(data) // 2) // PAGE * PAGE
        data[start : start + PAGE] = rng.randbytes(PAGE)
    elif kind == "0 bytes":
        data = bytearray()
    elif kind == "not a SQLite file":
        data = bytearray(b"unit,error\nERM,0.25\n" * 200)
    elif kind in ("10 result rows deleted", "5 checkpoint rows deleted"):
        table, n = ("results", 10) if kind.startswith("10") else ("checkpoints", 5)
        with sqlite3.connect(path) as conn:
            key = conn.execute("SELECT unit_key FROM units ORDER BY unit_key LIMIT 1").fetchone()
            conn.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE "
                f"unit_key = ? ORDER BY rowid LIMIT {n})",
                key,
            )
        conn.close()
        return
    else:
        raise ValueError(kind)
    path.write_bytes(bytes(data))


DAMAGE = [
    "truncated to half",
    "last page cut off",
    "1 bit flipped mid-file",
    "1 bit of a stored error",
    "1 byte of a result row's key flipped",
    "20 bytes flipped",
    "10 result rows deleted",
    "5 checkpoint rows deleted",
    "4 KiB page garbled",
    "0 bytes",
    "not a SQLite file",
]
COMMANDS = ["status", "analyze", "analyze --exclude-damaged", "report", "report --exclude-damaged"]
COMMANDS += ["verify", "variance", "run"]


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return finished_study(tmp_path_factory.mktemp("clean"), CONFIG).parent


def damaged_copy(clean: Path, target: Path, kind: str) -> Path:
    folder = target / "s"
    folder.mkdir()
    shutil.copy(clean / "s" / STORE_NAME, folder / STORE_NAME)
    damage(folder / STORE_NAME, kind)
    return folder


def analysis_csvs(folder: Path) -> dict[str, str]:
    """The analysis CSVs of `folder` (run `study analyze` first), warning lines dropped."""
    return {
        p.name: "".join(line for line in p.read_text().splitlines(True) if not line.startswith("#"))
        for p in sorted((folder / "analysis").glob("*.csv"))
    }


def report_cells(html: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", html, flags=re.S)


def reference_without(clean: Path, target: Path, kept: set[str]) -> Path:
    """The clean store minus every unit not in `kept` (the rest still verify)."""
    folder = target / "reference"
    folder.mkdir()
    shutil.copy(clean / "s" / STORE_NAME, folder / STORE_NAME)
    with sqlite3.connect(folder / STORE_NAME) as conn:
        keys = [k for (k,) in conn.execute("SELECT unit_key FROM units") if k not in kept]
        for table in ("results", "checkpoints", "units"):
            conn.executemany(f"DELETE FROM {table} WHERE unit_key = ?", [(k,) for k in keys])
    conn.close()
    return folder


def assert_refusal(result, store: Path, before: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    assert not store.exists() or digest(store) == before  # never changed, never started over


def clean_outputs(clean: Path, command: str, tmp: Path) -> str:
    """What `command` says about the clean store (the study folder's path replaced by DIR)."""
    folder = clean / "s"
    if command == "status":
        out = invoke("study", "status", folder).output
    elif command == "variance":
        out = invoke("variance", folder).stdout
    else:
        raise ValueError(command)
    return out.replace(str(folder), "DIR")


def outcome(clean: Path, tmp_path: Path, kind: str, command: str) -> str:
    """Run `command` on a store damaged by `kind`; check it; return the outcome's name."""
    folder = damaged_copy(clean, tmp_path, kind)
    store = folder / STORE_NAME
    before = digest(store)
    name, *options = command.split()
    if name in ("status", "variance"):
        args = ("study", "status", folder) if name == "status" else ("variance", folder)
        result = invoke(*args)
        if result.exit_code == 2:
            assert_refusal(result, store, before)
            return "refused"
        assert result.exit_code == 0 and result.exception is None, result.output
        said = (result.output if name == "status" else result.stdout).replace(str(folder), "DIR")
        if name == "status" and "damaged" in said:
            counts = re.search(r"(\d+) done, (\d+) failed, (?:(\d+) damaged, )?(\d+) pending", said)
            assert counts and sum(int(c or 0) for c in counts.groups()) == 8, said
            assert "\ndamaged store: " in said, said  # the verdict every command gives
            if counts.group(3) is None:  # the file is damaged, no unit: SQLite's check names it
                assert "SQLite's integrity check FAILED" in said, said
                return f"answered: {counts.group(1)} done, the file's damage named"
            return f"answered: {counts.group(1)} done, {counts.group(3)} damaged named"
        assert said == clean_outputs(clean, name, tmp_path)  # no damage seen: the clean answer
        return "clean answer"
    if name == "verify":
        result = invoke("study", "verify", folder)
        assert digest(store) == before
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
        if result.exit_code == 0:
            assert "verdict: clean" in result.output
            assert_same_analysis(clean, folder)  # really undamaged
            return "clean (exit 0)"
        assert result.exit_code == 1 and "verdict: DAMAGED" in result.output, result.output
        return "damage found (exit 1)"
    if name == "run":
        (tmp_path / "study.toml").write_text(CONFIG, encoding="utf-8")
        result = invoke(
            "study", "run", tmp_path / "study.toml", "--out", folder, "--workers", "1",
            "--no-progress", "--no-report",
        )  # fmt: skip
        if result.exit_code == 2:
            assert_refusal(result, store, before)
            return "refused"
        assert result.exit_code == 0 and result.exception is None, result.output
        verified = invoke("study", "verify", folder)
        assert verified.exit_code == 0, verified.output
        assert_same_analysis(clean, folder)
        reran = re.search(r"(\d+) run \(", result.stdout)
        return f"repaired, {reran.group(1)} unit(s) re-run" if reran else "repaired"
    exclude = bool(options)
    if name == "analyze":
        result = invoke("study", "analyze", folder, *options)
    else:
        result = invoke("report", folder, "--out", tmp_path / "r.html", *options)
    if result.exit_code == 2:
        assert_refusal(result, store, before)
        return "refused"
    assert result.exit_code == 0 and result.exception is None, result.output
    study = load_study(folder, exclude_damaged=True)
    kept = set(study.units["unit_key"])
    excluded = 8 - len(kept)
    if excluded or study.health.damage():
        assert exclude, "a damaged store answered without --exclude-damaged"
        assert "warning:" in result.stderr, result.stderr
    if excluded:
        assert "excluded" in result.stderr
    reference = reference_without(clean, tmp_path, kept) if excluded else clean / "s"
    if name == "analyze":
        if excluded:
            assert all(
                p.read_text().startswith("# WARNING:")
                for p in (folder / "analysis").glob("*")
                if p.suffix == ".csv"
            )
            assert "**Warning:**" in (folder / "analysis" / "analysis.md").read_text()
        assert invoke("study", "analyze", reference).exit_code == 0
        assert analysis_csvs(folder) == analysis_csvs(reference)
    else:
        html = (tmp_path / "r.html").read_text()
        assert invoke("report", reference, "--out", tmp_path / "ref.html").exit_code == 0
        assert report_cells(html) == report_cells((tmp_path / "ref.html").read_text())
        if excluded:
            assert "are damaged and excluded from every number" in html
    if excluded:
        return f"answered without {excluded} damaged unit(s)"
    return "clean numbers, the damage named" if study.health.damage() else "clean answer"


def assert_same_analysis(clean: Path, folder: Path) -> None:
    if not (clean / "s" / "analysis").exists():
        assert invoke("study", "analyze", clean / "s").exit_code == 0
    assert invoke("study", "analyze", folder).exit_code == 0
    assert analysis_csvs(folder) == analysis_csvs(clean / "s")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_store_gives_a_refusal_or_the_clean_numbers(clean, tmp_path, kind, command):
    outcome(clean, tmp_path, kind, command)


# the outcomes that must hold for damage the quick check cannot see, and for unreadable files
@pytest.mark.parametrize(
    ("kind", "command", "expected"),
    [
        ("1 bit of a stored error", "analyze", "refused"),
        ("1 bit of a stored error", "verify", "damage found (exit 1)"),
        ("1 bit of a stored error", "run", "repaired, 1 unit(s) re-run"),
        ("10 result rows deleted", "status", "answered: 7 done, 1 damaged named"),
        ("10 result rows deleted", "report", "refused"),
        ("10 result rows deleted", "run", "repaired, 1 unit(s) re-run"),
        ("5 checkpoint rows deleted", "variance", "refused"),
        ("5 checkpoint rows deleted", "analyze --exclude-damaged", "answered without 1 damaged"
         " unit(s)"),
        ("1 byte of a result row's key flipped", "status", "answered: 8 done, the file's damage"
         " named"),
        ("1 byte of a result row's key flipped", "analyze", "refused"),
        ("1 byte of a result row's key flipped", "report", "refused"),
        ("1 byte of a result row's key flipped", "variance", "refused"),
        ("1 byte of a result row's key flipped", "verify", "damage found (exit 1)"),
        ("1 byte of a result row's key flipped", "analyze --exclude-damaged", "clean numbers, the"
         " damage named"),
        ("4 KiB page garbled", "analyze", "refused"),
        ("0 bytes", "run", "refused"),
        ("not a SQLite file", "status", "refused"),
        ("truncated to half", "run", "refused"),
    ],
)  # fmt: skip
def test_specific_outcomes(clean, tmp_path, kind, command, expected):
    assert outcome(clean, tmp_path, kind, command) == expected


def test_the_flipped_key_breaks_an_index_that_only_the_integrity_check_compares(clean, tmp_path):
    folder = damaged_copy(clean, tmp_path, "1 byte of a result row's key flipped")
    conn = sqlite3.connect(folder / STORE_NAME)
    try:
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        (message,) = conn.execute("PRAGMA integrity_check").fetchone()
        assert "missing from index sqlite_autoindex_results_1" in message
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["0 bytes", "4 KiB page garbled", "not a SQLite file"])
def test_no_traceback_in_a_real_process(clean, tmp_path, kind):
    folder = damaged_copy(clean, tmp_path, kind)
    for args in (["study", "status", folder], ["study", "analyze", folder], ["variance", folder]):
        proc = subprocess.run(
            [sys.executable, "-m", "oodeval.cli.main", *map(str, args)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in proc.stderr
        if args[1] == "status" and proc.returncode == 0:  # status may answer, naming damage
            assert "damaged" in proc.stdout
        else:
            assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr


def outcome_table(clean: Path, scratch: Path) -> str:
    """The markdown table of outcomes (damage kind x command)."""
    lines = ["| damage | " + " | ".join(COMMANDS) + " |", "|---" * (len(COMMANDS) + 1) + "|"]
    for kind in DAMAGE:
        cells = []
        for command in COMMANDS:
            tmp = scratch / f"{len(lines)}-{len(cells)}"
            tmp.mkdir()
            cells.append(outcome(clean, tmp, kind, command))
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "clean").mkdir()
        (root / "clean" / "study.toml").write_text(CONFIG, encoding="utf-8")
        assert invoke(
            "study", "run", root / "clean" / "study.toml", "--out", root / "clean" / "s",
            "--workers", "1", "--no-progress", "--no-report",
        ).exit_code == 0  # fmt: skip
        print(outcome_table(root / "clean", root))
