"""A study in a folder its reader may not write: every reading command answers, writing nothing.

An archived study, a read-only mount, a colleague's folder: `status`, `verify`, `variance`,
`analyze --analysis-dir ELSEWHERE` and `report --out ELSEWHERE` answer there exactly as on the
writable original, with or without SQLite's ``-shm``/``-wal`` files beside the store (and with a
``-wal`` that holds a unit not yet in the file), and leave the folder as it was; `analyze`
without ``--analysis-dir`` refuses in one line naming it. The commands run as a user without
privileges (`tests.helpers.unprivileged`: as ``nobody`` when the tests run as root, whom
permissions do not stop). In a folder the reader may write, readers leave no side files behind.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.study.store import STORE_NAME, ResultStore
from oodeval.study.store.readonly import Reader, file_stamp
from tests.helpers.studies import finished_study
from tests.helpers.unprivileged import give_to_reader, make_read_only, make_writable, run_commands

CONFIG = """
name = "read-only"
backend = "tests.checkpoint_backend"
algorithms = ["ERM", "IRM", "VREx"]
seeds = [0]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 }]
"""
#: How the folder holds the store: the file alone, or with SQLite's side files beside it.
STATES = ["no -shm/-wal", "empty -wal and -shm", "-wal holding a unit, with -shm"]


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """The study, and the answers of every reader on it (where it may write)."""
    return finished_study(tmp_path_factory.mktemp("clean"), CONFIG)


@pytest.fixture(scope="module")
def expected(clean, tmp_path_factory) -> dict[str, str]:
    """What each command says about the writable original (its path replaced by DIR)."""
    out = tmp_path_factory.mktemp("expected")
    said = {}
    for name, args in reader_commands(clean, out).items():
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        said[name] = result.stdout.replace(str(clean), "DIR")
    said["analysis"] = str(analysis_csvs(out / "analysis"))
    said["report"] = str(report_cells(out / "report.html"))
    return said


@pytest.fixture
def shared_tmp():
    """A temporary folder every user may enter (pytest's are private to the test's user, and
    the commands check their paths with ``access``, which a capability does not pass)."""
    folder = Path(tempfile.mkdtemp(prefix="oodeval-readonly-"))
    folder.chmod(0o755)
    yield folder
    for sub in folder.iterdir():
        if sub.is_dir():
            make_writable(sub)
    shutil.rmtree(folder)


def reader_commands(folder: Path, out: Path) -> dict[str, list[str]]:
    return {
        "status": ["study", "status", str(folder)],
        "verify": ["study", "verify", str(folder)],
        "variance": ["variance", str(folder)],
        "analyze into DIR": ["study", "analyze", str(folder), "--format", "csv"],
        "analyze": ["study", "analyze", str(folder), "--analysis-dir", str(out / "analysis")],
        "report": ["report", str(folder), "--out", str(out / "report.html")],
    }


def analysis_csvs(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.glob("*.csv"))}


def report_cells(path: Path) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", path.read_text(), flags=re.S)


def snapshot(folder: Path) -> dict[str, str]:
    """{name: SHA-256} of every file in `folder`."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def copy_study(clean: Path, folder: Path, state: str) -> Path:
    """A copy of the study in `folder`, its store in `state` (one of `STATES`, or
    "-wal holding a unit, no -shm")."""
    folder.mkdir(parents=True)
    shutil.copy(clean / "study.lock", folder / "study.lock")
    if state == "no -shm/-wal":
        shutil.copy(clean / STORE_NAME, folder / STORE_NAME)
        return folder
    scratch = folder.parent / f"scratch-{folder.name}"
    scratch.mkdir()
    shutil.copy(clean / STORE_NAME, scratch / STORE_NAME)
    conn = sqlite3.connect(scratch / STORE_NAME, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")  # what is logged stays in the log
    if state.startswith("-wal holding a unit"):
        # the store's file lacks the last unit; the log holds it (committed, not copied back)
        tables = ("units", "results", "checkpoints")
        (key,) = conn.execute("SELECT max(unit_key) FROM units").fetchone()
        rows = {
            t: conn.execute(f"SELECT * FROM {t} WHERE unit_key=?", (key,)).fetchall()
            for t in tables
        }
        for table in tables:
            conn.execute(f"DELETE FROM {table} WHERE unit_key=?", (key,))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("BEGIN")
        for table, values in rows.items():
            marks = ", ".join("?" * len(values[0]))
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
        conn.execute("COMMIT")
    else:
        conn.execute("SELECT count(*) FROM units").fetchone()  # opens the (empty) log
    suffixes = ["", "-wal", "-shm"][: 2 if state.endswith("no -shm") else 3]
    for suffix in suffixes:  # copied while the connection is open, as a copy taken meanwhile
        shutil.copy(scratch / (STORE_NAME + suffix), folder / (STORE_NAME + suffix))
    conn.close()
    if state.startswith("-wal holding a unit"):  # the file alone lacks the unit
        uri = f"{(folder / STORE_NAME).as_uri()}?mode=ro&immutable=1"
        alone = sqlite3.connect(uri, uri=True)
        assert alone.execute("SELECT count(*) FROM units").fetchone() == (2,)
        alone.close()
    return folder


def run_read_only(folder: Path, tmp_path: Path) -> tuple[dict, Path]:
    """Run every reader on `folder` made read-only, as a user without privileges."""
    out = tmp_path / "out"
    out.mkdir()
    give_to_reader(out)
    (tmp_path / "home").mkdir()
    names = list(reader_commands(folder, out))
    make_read_only(folder)
    try:
        ran = run_commands(folder, list(reader_commands(folder, out).values()), tmp_path / "home")
    finally:
        make_writable(folder)
    assert ran["uid"] != 0
    assert ran["probe"] is not None  # the child really may not write the folder
    return dict(zip(names, ran["results"], strict=True)), out


@pytest.mark.parametrize("state", STATES)
def test_every_reader_answers_in_a_folder_it_may_not_write(clean, expected, shared_tmp, state):
    tmp_path = shared_tmp
    folder = copy_study(clean, tmp_path / "archive", state)
    before = snapshot(folder)
    results, out = run_read_only(folder, tmp_path)
    assert snapshot(folder) == before  # nothing written, nothing left behind
    for name, result in results.items():
        assert result["exception"] is None, (name, result)
        said = result["stdout"].replace(str(folder), "DIR")
        if name == "analyze into DIR":  # it would write DIR/analysis: refused, naming the way
            assert result["exit"] == 2 and said == "", result
            lines = result["stderr"].splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: cannot write the analysis")
            assert "--analysis-dir" in lines[0] and "not writable" in lines[0]
            continue
        assert result["exit"] == 0, (name, result)
        if name in ("status", "verify", "variance"):
            assert said == expected[name], name
    assert str(analysis_csvs(out / "analysis")) == expected["analysis"]
    assert str(report_cells(out / "report.html")) == expected["report"]


def test_a_log_sqlite_cannot_read_without_its_index_is_refused_in_one_line(clean, shared_tmp):
    tmp_path = shared_tmp
    folder = copy_study(clean, tmp_path / "archive", "-wal holding a unit, no -shm")
    before = snapshot(folder)
    results, out = run_read_only(folder, tmp_path)
    assert snapshot(folder) == before
    for name, result in results.items():
        assert result["exit"] == 2 and result["stdout"] == "", (name, result)
        lines = result["stderr"].splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, result)
        if name != "analyze into DIR":
            assert f"{STORE_NAME}-wal beside it holds changes" in lines[0], lines[0]
            assert "copy the study folder" in lines[0], lines[0]
    assert not any(out.iterdir())


def test_readers_leave_no_side_files_in_a_folder_they_may_write(clean, tmp_path):
    folder = copy_study(clean, tmp_path / "s", "no -shm/-wal")
    before = snapshot(folder)
    for name, args in reader_commands(folder, tmp_path / "out").items():
        if name != "analyze into DIR":
            assert invoke(*args).exit_code == 0, name
            assert snapshot(folder) == before, name  # the store unchanged, no -wal/-shm left
    assert invoke("study", "analyze", folder).exit_code == 0
    assert {p.name for p in folder.iterdir()} == {STORE_NAME, "study.lock", "analysis"}


def test_a_reader_leaves_the_side_files_of_a_connection_still_open(clean, tmp_path):
    folder = copy_study(clean, tmp_path / "s", "no -shm/-wal")
    writer = sqlite3.connect(folder / STORE_NAME, isolation_level=None)
    try:
        writer.execute("SELECT count(*) FROM units").fetchone()  # it has the log open
        assert invoke("study", "status", folder).exit_code == 0
        assert (folder / f"{STORE_NAME}-wal").exists() and (folder / f"{STORE_NAME}-shm").exists()
        writer.execute("UPDATE study SET value = value WHERE key = 'schema'")  # still works
    finally:
        writer.close()
    assert {p.name for p in folder.iterdir()} == {STORE_NAME, "study.lock"}


def test_an_immutable_read_of_a_file_that_changed_meanwhile_is_refused(clean, tmp_path):
    folder = copy_study(clean, tmp_path / "s", "no -shm/-wal")
    path = folder / STORE_NAME
    uri = f"{path.as_uri()}?mode=ro&immutable=1"
    reader = Reader(path, sqlite3.connect(uri, uri=True), immutable=file_stamp(path))
    reader.check_unchanged()  # unchanged: nothing to say
    with ResultStore(folder, create=True) as store:  # a writer with the right to write
        with store.transaction():
            store.set_study("note", "a change")
    with pytest.raises(OodevalError, match="changed while it was read"):
        reader.check_unchanged()
    reader.close()
