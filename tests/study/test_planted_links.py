"""Never write through a planted link (issue 23, item 5).

A symbolic link where a study writes (``analysis/`` and its files, ``report.html``,
``study.lock``, ``results.sqlite`` and its ``-wal``/``-shm``/``-journal`` files), or a link the
user names as an output file, is refused: exit 2, one ``error:`` line naming the link, the
link's target unchanged (bytes and modification time), and nothing written in the study folder
either. The names a store repair picks (the damaged copy, the rebuild's temporary file) are
never written through a link. A folder the user names may be a link (see `oodeval._files`).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from oodeval.study.store import STORE_NAME
from tests.helpers.cli import invoke as invoke_argv
from tests.helpers.studies import finished_study

CONFIG = """
name = "links"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "GroupDRO"]
seeds = [0]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 }]
"""


def invoke(*argv: object) -> tuple[int, str, str]:
    """`oodeval ARGV` as the console script runs it: (status, stdout, stderr)."""
    return invoke_argv([str(a) for a in argv])


#: Files SQLite makes beside a store it only reads (the read side's business, not this one's).
READER_FILES = (f"{STORE_NAME}-shm", f"{STORE_NAME}-wal")


def tree(root: Path, *, read: bool = False) -> dict[str, tuple]:
    """Everything under `root` as {relative path: (kind, bytes or link target, mtime_ns)},
    links not followed: the state that must not change. ``read=True``: a store there is read,
    so SQLite's `READER_FILES` (files, not links) are left out."""
    found: dict[str, tuple] = {}
    for path in sorted(root.rglob("*")):
        if read and path.name in READER_FILES and not path.is_symlink():
            continue
        info = path.lstat()
        if path.is_symlink():
            found[str(path.relative_to(root))] = ("link", os.readlink(path), info.st_mtime_ns)
        elif path.is_file():
            found[str(path.relative_to(root))] = ("file", path.read_bytes(), info.st_mtime_ns)
        else:
            found[str(path.relative_to(root))] = ("folder", None, None)
    return found


def assert_refused(result: tuple[int, str, str], link: Path) -> None:
    code, stdout, stderr = result
    shown = f"stdout: {stdout[-500:]}\nstderr: {stderr[-1500:]}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, shown
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert f"{link} is a symbolic link" in lines[0], shown
    assert "Traceback" not in stdout + stderr, shown


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished synthetic study (``DIR/s``) and its config (``DIR/study.toml``)."""
    root = tmp_path_factory.mktemp("finished")
    finished_study(root, CONFIG)
    return root


@pytest.fixture()
def world(tmp_path: Path, finished: Path) -> dict[str, Path]:
    """A copy of the finished study (``study``), its config, and an ``outside`` folder holding
    a file (``victim``) and another study's store (``other``): what links point to."""
    study = tmp_path / "study"
    shutil.copytree(finished / "s", study)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"precious bytes\n")
    shutil.copytree(finished / "s", outside / "other")
    (outside / "empty").mkdir()
    return {
        "study": study,
        "config": finished / "study.toml",
        "outside": outside,
        "victim": outside / "victim.txt",
        "other": outside / "other" / STORE_NAME,
        "empty": outside / "empty",
        "devnull": Path(os.devnull),
        "tmp": tmp_path,
    }


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)  # a finished study keeps its study.lock
    link.symlink_to(target)
    return link


# (command, the link's name inside the study folder, what it points to, fresh folder?)
RUN_CASES = [
    ("report.html", "victim", False),
    ("report.html", "victim", True),
    ("report.html", "devnull", False),  # a name oodeval picks: refused whatever it points to
    ("study.lock", "victim", False),
    ("study.lock", "victim", True),
    (STORE_NAME, "other", True),
    (f"{STORE_NAME}-wal", "victim", False),
    (f"{STORE_NAME}-shm", "victim", False),
    (f"{STORE_NAME}-journal", "victim", False),
]


@pytest.mark.parametrize(("name", "target", "fresh"), RUN_CASES)
def test_study_run_refuses_a_planted_link(world, name: str, target: str, fresh: bool) -> None:
    """`study run` on a finished study (or a new folder holding only the link) refuses before
    it writes anything: a link to an outside file or to another study's store."""
    folder = world["tmp"] / "fresh" if fresh else world["study"]
    link = plant(folder / name, world[target])
    before, outside = tree(folder), tree(world["outside"])
    result = invoke("study", "run", world["config"], "--out", folder, "--no-progress")
    assert_refused(result, link)
    assert tree(folder) == before and tree(world["outside"]) == outside


@pytest.mark.parametrize("name", ["analysis", "analysis/table1.csv", "analysis/analysis.md"])
def test_study_analyze_refuses_a_planted_link(world, name: str) -> None:
    """`analysis` -> an outside folder (`analyze` wrote 12 files there), or one of its files ->
    an outside file: refused before the first file is written."""
    target = world["empty"] if name == "analysis" else world["victim"]
    link = plant(world["study"] / name, target)
    before, outside = tree(world["study"], read=True), tree(world["outside"])
    assert_refused(invoke("study", "analyze", world["study"]), link)
    assert tree(world["study"], read=True) == before and tree(world["outside"]) == outside


@pytest.mark.parametrize("inside", [True, False])
def test_report_refuses_a_link_as_its_out_file(world, inside: bool) -> None:
    """`report --out FILE`: FILE a link (in the study folder, or anywhere the user names) is
    refused before the report is built."""
    folder = world["study"] if inside else world["tmp"] / "elsewhere"
    link = plant(folder / "report.html", world["victim"])
    before, outside = tree(world["study"], read=True), tree(world["outside"])
    assert_refused(invoke("report", world["study"], "--out", link), link)
    assert tree(world["study"], read=True) == before and tree(world["outside"]) == outside


@pytest.mark.parametrize(
    ("name", "target"),
    [(STORE_NAME, "other"), ("study.lock", "victim"), (f"{STORE_NAME}-wal", "victim")],
)
def test_study_merge_refuses_a_planted_link_in_its_out_folder(world, name: str, target: str):
    out = world["tmp"] / "merged"
    link = plant(out / name, world[target])
    before, outside = tree(world["study"], read=True), tree(world["outside"])
    assert_refused(invoke("study", "merge", world["study"], "--out", out, "--no-progress"), link)
    assert tree(world["study"], read=True) == before and tree(world["outside"]) == outside
    assert sorted(p.name for p in out.iterdir()) == [name]


@pytest.mark.parametrize(
    "argv",
    [
        ["study", "analyze", "{study}", "--output", "{link}"],
        ["study", "status", "{study}", "--output", "{link}"],
        ["study", "measures", "{study}", "--output", "{link}"],
        ["measures", "{results}", "--output", "{link}"],
        ["import", "domainbed", "{sweep}", "--output", "{link}"],
    ],
)
def test_a_link_as_the_output_file_is_refused(world, argv: list[str]) -> None:
    """`--output FILE` (every command that has it writes through `echo_output`)."""
    root = Path(__file__).resolve().parents[2]
    link = plant(world["tmp"] / "table.txt", world["victim"])
    names = {
        "study": world["study"],
        "link": link,
        "results": root / "examples" / "results.csv",
        "sweep": world["tmp"] / "no-sweep-needed",
    }
    before, outside = tree(world["study"], read=True), tree(world["outside"])
    assert_refused(invoke(*[a.format(**names) for a in argv]), link)
    assert tree(world["study"], read=True) == before and tree(world["outside"]) == outside


def test_a_linked_folder_the_user_names_is_used(world) -> None:
    """The documented rule: a folder named on the command line (--analysis-dir, or a folder
    above an output file) may be a link; the files oodeval names inside it may not."""
    linked = plant(world["tmp"] / "linked", world["empty"])
    code, out, err = invoke("study", "analyze", world["study"], "--analysis-dir", linked)
    assert code == 0, out + err
    assert (world["empty"] / "analysis.md").is_file() and not (world["study"] / "analysis").exists()
    code, out, err = invoke("measures", Path(__file__).resolve().parents[2] / "examples" /
                            "results.csv", "--output", linked / "m.txt")  # fmt: skip
    assert code == 0, out + err
    assert (world["empty"] / "m.txt").is_file()


def test_a_replaced_file_keeps_its_permissions_and_the_folder_no_temporary(world) -> None:
    """`write_file` replaces a file atomically: same mode, no temporary file left behind."""
    from oodeval._files import write_file

    path = world["tmp"] / "kept.txt"
    path.write_text("old\n", encoding="utf-8")
    path.chmod(0o640)
    write_file(path, "new\n")
    assert path.read_text(encoding="utf-8") == "new\n"
    assert (path.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in world["tmp"].iterdir() if p.name.startswith(".")) == []


def _break_sqlite_check(store: Path) -> None:
    """Zero the root page of the results table's primary-key index: SQLite's check fails while
    every row stays readable, so the writer rebuilds the store (`oodeval.study.store.repair`)."""
    conn = sqlite3.connect(store)
    try:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name='sqlite_autoindex_results_1'"
        ).fetchone()
    finally:
        conn.close()
    data = bytearray(store.read_bytes())
    data[(root - 1) * page + 8 : root * page] = bytes(page - 8)
    store.write_bytes(bytes(data))


def test_a_store_repair_never_writes_through_a_link(world, monkeypatch) -> None:
    """A rebuild keeps the damaged file under a new name, and builds the new one under a
    temporary name: links planted at those names (the damaged copy and its -wal, the rebuild
    file and its journal) are never written through; the copy goes to the next free name."""
    import oodeval.study.store.repair as repair

    monkeypatch.setattr(repair, "utc_file_stamp", lambda: "STAMP")
    study = world["study"]
    _break_sqlite_check(study / STORE_NAME)
    damaged = (study / STORE_NAME).read_bytes()
    aside = f"{STORE_NAME}.damaged-STAMP"
    for name in (aside, f"{aside}-2-wal", f"{STORE_NAME}.rebuild", f"{STORE_NAME}.rebuild-journal"):
        plant(study / name, world["victim"])
    outside = tree(world["outside"])
    code, out, err = invoke(
        "study", "run", world["config"], "--out", study, "--no-progress", "--no-report"
    )
    assert code == 0, out + err
    assert f"the damaged file is kept as {aside}-3" in err, err
    assert (study / f"{aside}-3").read_bytes() == damaged
    assert tree(world["outside"]) == outside
    assert not (study / f"{STORE_NAME}.rebuild").exists()  # the planted link was removed


def test_the_slurm_log_folder_is_never_a_link(world) -> None:
    """The Slurm executor keeps submitit's files in ``DIR/slurm``: a link there is refused
    before the store is opened (nothing created), not followed by submitit."""
    from oodeval.errors import OodevalError
    from oodeval.study import load_config, run_study
    from oodeval.study.executors.slurm import SlurmExecutor

    folder = world["tmp"] / "slurm-study"
    link = plant(folder / "slurm", world["empty"])
    with pytest.raises(OodevalError, match=f"{link} is a symbolic link"):
        run_study(load_config(world["config"]), folder, executor=SlurmExecutor(cluster="local"))
    assert sorted(p.name for p in folder.iterdir()) == ["slurm"]
    assert list(world["empty"].iterdir()) == []


@pytest.mark.parametrize("dangling", [True, False])
def test_the_one_write_place_refuses_links_dangling_or_not(world, dangling: bool) -> None:
    """`write_file`, `make_folder` and `open_no_link` refuse a link, one that points nowhere
    (yet) included: nothing is created at its target."""
    from oodeval._files import make_folder, open_no_link, write_file
    from oodeval.errors import OodevalError

    target = world["outside"] / ("nowhere" if dangling else "victim.txt")
    link = plant(world["tmp"] / "out.txt", target)
    outside = tree(world["outside"])
    for write in (
        lambda: write_file(link, "x"),
        lambda: make_folder(link),
        lambda: open_no_link(link, os.O_WRONLY | os.O_CREAT),
    ):
        with pytest.raises(OodevalError, match=f"^{link} is a symbolic link; "):
            write()
    assert tree(world["outside"]) == outside and link.is_symlink()


@pytest.mark.parametrize("command", ["status", "verify"])
def test_reading_a_linked_store_leaves_nothing_beside_its_target(world, command: str) -> None:
    """Reading is not refused, but SQLite keeps a reader's -shm/-wal beside the link's target:
    the reader opens the target, so that it removes them there when it is done."""
    study, other_folder = world["study"], world["other"].parent
    plant(study / STORE_NAME, world["other"])
    before = tree(other_folder)
    code, out, err = invoke("study", command, study)
    assert code == 0, out + err
    assert tree(other_folder) == before


# (planted side files, beside the store itself (False) or beside the target of a linked store)
SIDE_CASES = [(("-wal", "-shm"), False), (("-shm",), False), (("-wal", "-shm"), True)]


@pytest.mark.parametrize("command", ["status", "verify"])
@pytest.mark.parametrize(("planted", "linked"), SIDE_CASES)
def test_a_reader_refuses_planted_side_file_links(world, command, planted, linked) -> None:
    """A -wal/-shm link beside the store a reader opens (the link's target, for a linked
    store) is refused before SQLite opens anything: one line naming it, nothing created."""
    study = world["study"]
    for name in READER_FILES:
        (study / name).unlink(missing_ok=True)
    store = plant(study / STORE_NAME, world["other"]) if linked else study / STORE_NAME
    beside = world["other"] if linked else store
    for name in READER_FILES:
        (beside.parent / name).unlink(missing_ok=True)
    links = [plant(beside.with_name(beside.name + s), world["victim"]) for s in planted]
    before, outside = tree(study), tree(world["outside"])
    assert_refused(invoke("study", command, study), links[0])
    assert tree(study) == before and tree(world["outside"]) == outside


def test_a_link_the_user_names_to_a_device_or_pipe_is_written(world) -> None:
    """``-o LINK`` to /dev/null or to a pipe (what /dev/stdout and ``>(...)`` are) is written
    in place; a dangling link or one to a folder is still refused."""
    argv = ["measures", Path("examples/results.csv").resolve(), "-f", "csv", "-o"]
    devnull = plant(world["tmp"] / "null.csv", Path(os.devnull))
    code, out, err = invoke(*argv, devnull)
    assert code == 0 and devnull.is_symlink(), out + err
    fifo = world["tmp"] / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that opening it to write goes on
    try:
        code, out, err = invoke(*argv, plant(world["tmp"] / "to-pipe.csv", fifo))
        got = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
    assert code == 0 and got.startswith("table,"), out + err
    for target in (world["outside"] / "nowhere", world["empty"]):
        link = plant(world["tmp"] / "refused.csv", target)
        assert_refused(invoke(*argv, link), link)
        assert list(world["empty"].iterdir()) == []


def test_dev_stdout_is_written() -> None:
    """``-o /dev/stdout`` (a link to the pipe the shell gave): the table comes on stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "measures", "examples/results.csv"]
        + ["-f", "csv", "-o", "/dev/stdout"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0 and proc.stdout.startswith("table,"), proc.stderr


def test_a_replaced_file_is_a_new_one_a_hard_link_keeps_the_old(world) -> None:
    """`write_file` replaces a file by a new one (atomically): a hard link to it elsewhere is
    another name of the old file and keeps the old content (documented in `oodeval._files`)."""
    from oodeval._files import write_file

    hard = world["tmp"] / "hard.txt"
    os.link(world["victim"], hard)
    write_file(hard, "new\n")
    assert hard.read_text() == "new\n" and world["victim"].read_bytes() == b"precious bytes\n"
    assert hard.stat().st_nlink == 1


@pytest.mark.parametrize("command", ["report", "analyze"])
def test_a_folder_that_cannot_be_made_is_named(world, command: str) -> None:
    """The report's and the analysis' folders are made by `oodeval._files.make_folder`: a
    folder the system refuses is one line naming it and why."""
    if command == "report":
        argv = ["report", world["study"], "--out", "/proc/nope/report.html"]
    else:
        argv = ["study", "analyze", world["study"], "--analysis-dir", "/proc/nope/analysis"]
    code, out, err = invoke(*argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, out + err
    assert lines[0].startswith("error: cannot create the ") and "/proc/nope" in lines[0], err


def test_a_writable_file_in_a_folder_one_may_not_write_is_rewritten_in_place(tmp_path) -> None:
    """An existing ``--output`` file this user may write, in a folder they may not (no
    temporary file can be made beside it), is rewritten in place, as before files were
    replaced; run as a user without privileges (`tests.helpers.unprivileged`)."""
    from tests.helpers.unprivileged import make_read_only, make_writable, run_commands

    results = Path("examples/results.csv").resolve()
    folder = tmp_path / "shared"
    folder.mkdir()
    (tmp_path / "home").mkdir()
    table = folder / "table.csv"
    table.write_text("old\n", encoding="utf-8")
    make_read_only(folder)
    table.chmod(0o666)
    try:
        argv = ["measures", str(results), "-f", "csv", "-o", str(table)]
        ran = run_commands(folder, [argv], tmp_path / "home")
    finally:
        make_writable(folder)
    assert ran["probe"] is not None  # the child really may not write the folder
    for result in ran["results"]:
        assert result["exit"] == 0 and result["exception"] is None, result
    assert table.read_text(encoding="utf-8").startswith("table,")
    assert [p.name for p in folder.iterdir()] == ["table.csv"]
