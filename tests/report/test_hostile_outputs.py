"""Hostile outputs: an output that names an input, two outputs that are one file, and writes
that fail (a full disk: ``/dev/full``, or a write primitive made to fail).

The rules (CONTRIBUTING.md, "rules every command keeps"): an output is never an input (the
study store and its side files included, by path and by device and inode), nor another output
of the same command: refused in one ``error:`` line naming both, exit 2, nothing changed. A
failed write names the file and the cause, and leaves none of the command's files behind; the
answer line comes only after a successful write; ``--out`` is written as given.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.cli import assert_refused, invoke
from tests.helpers.outputs import finished, make_world, snapshot

FULL = "/dev/full"
needs_dev_full = pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full here")


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished(tmp_path_factory.mktemp("study"))


@pytest.fixture()
def world(tmp_path: Path, study: Path) -> dict[str, Path]:
    return make_world(tmp_path / "w", study)


def _sweep(w: dict[str, Path], domainbed_sweep: Path) -> Path:
    target = w["study"].parent / "sweep"
    shutil.copytree(domainbed_sweep, target)
    return target


def _first_run(sweep: Path) -> Path:
    return sorted(d for d in sweep.iterdir() if d.is_dir())[0] / "results.jsonl"


def _mnist_copy(w: dict[str, Path], mnist_dir: Path) -> Path:
    target = w["study"].parent / "mnist"
    target.mkdir()
    for f in mnist_dir.glob("t10k-*"):
        shutil.copy(f, target / f.name)
    return target


W = dict[str, Path]

# (id, argv from the world, the output the error line names). Each, on main, exited 0 and wrote
# over the input (or wrote one file twice).
ALIASES: list[tuple[str, Callable[[W], list[str]], Callable[[W], Path]]] = [
    (
        "report DIR --out DIR/results.sqlite",
        lambda w: ["report", w["study"], "--out", w["store"]],
        lambda w: w["store"],
    ),
    (
        "study analyze -o the store",
        lambda w: ["study", "analyze", w["study"], "-o", w["store"]],
        lambda w: w["store"],
    ),
    (
        "study status -o the store",
        lambda w: ["study", "status", w["study"], "-o", w["store"]],
        lambda w: w["store"],
    ),
    (
        "study verify -o the store",
        lambda w: ["study", "verify", w["study"], "-o", w["store"]],
        lambda w: w["store"],
    ),
    (
        "study status -o the store's -wal",
        lambda w: ["study", "status", w["study"], "-o", f"{w['store']}-wal"],
        lambda w: Path(f"{w['store']}-wal"),
    ),
    (
        "study verify -o the store's -journal",
        lambda w: ["study", "verify", w["study"], "-o", f"{w['store']}-journal"],
        lambda w: Path(f"{w['store']}-journal"),
    ),
    (
        "study measures -o the store",
        lambda w: ["study", "measures", w["study"], "--bootstrap", "0", "-o", w["store"]],
        lambda w: w["store"],
    ),
    (
        "variance CSV -o CSV",
        lambda w: ["variance", w["checkpoints"], "-o", w["checkpoints"]],
        lambda w: w["checkpoints"],
    ),
    (
        "study analyze -o one of its analysis files",
        lambda w: [
            "study",
            "analyze",
            w["study"],
            "--analysis-dir",
            w["study"].parent,
            "-o",
            w["study"].parent / "verdict.csv",
        ],
        lambda w: w["study"].parent / "verdict.csv",
    ),
    (
        "measures r.csv -f csv -o r.csv",
        lambda w: ["measures", w["results"], "-f", "csv", "-o", w["results"]],
        lambda w: w["results"],
    ),
    (
        "measures --imports m.py -o m.py",
        lambda w: ["measures", w["results"], "--imports", w["measure_py"], "-o", w["measure_py"]],
        lambda w: w["measure_py"],
    ),
    (
        "report r.csv --out r.csv",
        lambda w: ["report", w["results"], "--out", w["results"]],
        lambda w: w["results"],
    ),
    (
        "openworld --curve the predictions",
        lambda w: [
            "openworld",
            w["predictions"],
            "--base-classes",
            "0-2",
            "--curve",
            w["predictions"],
        ],
        lambda w: w["predictions"],
    ),
    (
        "openworld --curve and --output one file",
        lambda w: [
            "openworld",
            w["predictions"],
            "--base-classes",
            "0-2",
            "--curve",
            w["study"].parent / "c.csv",
            "-o",
            w["study"].parent / "." / "c.csv",
        ],
        lambda w: w["study"].parent / "c.csv",
    ),
    (
        "openworld ratio-study -o the predictions",
        lambda w: [
            "openworld",
            "ratio-study",
            w["predictions"],
            "--base-classes",
            "0-2",
            "-o",
            w["predictions"],
        ],
        lambda w: w["predictions"],
    ),
    (
        "openworld train-gmop F --out F",
        lambda w: ["openworld", "train-gmop", w["train"], "--out", w["train"], "--n-steps", "1"],
        lambda w: w["train"],
    ),
    (
        "openworld train-gmop F.npz --out F (.npz added)",
        lambda w: [
            "openworld",
            "train-gmop",
            w["train"],
            "--out",
            w["train"].with_suffix(""),
            "--n-steps",
            "1",
        ],
        lambda w: w["train"],
    ),
    (
        "openworld evaluate F --predictions F",
        lambda w: ["openworld", "evaluate", w["features"], "--predictions", w["features"]],
        lambda w: w["features"],
    ),
    (
        "openworld make-features x.npz x.npz",
        lambda w: [
            "openworld",
            "make-features",
            "--source",
            "synthetic",
            "--train-out",
            w["study"].parent / "x.npz",
            "--test-out",
            w["study"].parent / "x.npz",
        ],
        lambda w: w["study"].parent / "x.npz",
    ),
    (
        "openworld make-features x x.npz (.npz added)",
        lambda w: [
            "openworld",
            "make-features",
            "--source",
            "synthetic",
            "--train-out",
            w["study"].parent / "x",
            "--test-out",
            w["study"].parent / "x.npz",
        ],
        lambda w: w["study"].parent / "x.npz",
    ),
    (
        "protocols classic --out an image of the tree",
        lambda w: [
            "protocols",
            "classic",
            w["tree"],
            "--train",
            "a,b",
            "--out",
            w["tree"] / "a" / "cat" / "0.jpg",
        ],
        lambda w: w["tree"] / "a" / "cat" / "0.jpg",
    ),
    (
        "protocols flexible-random --out an image of the tree",
        lambda w: [
            "protocols",
            "flexible-random",
            w["tree"],
            "--n-dominant",
            "1",
            "--n-minor",
            "1",
            "--n-test",
            "1",
            "--common",
            "a,b,c",
            "--out",
            w["tree"] / "b" / "cat" / "1.jpg",
        ],
        lambda w: w["tree"] / "b" / "cat" / "1.jpg",
    ),
    (
        "protocols evaluate -o the assignment",
        lambda w: [
            "protocols",
            "evaluate",
            w["assignment"],
            w["protocol_predictions"],
            "-o",
            w["assignment"],
        ],
        lambda w: w["assignment"],
    ),
    (
        "study estimate CONFIG -o CONFIG",
        lambda w: ["study", "estimate", w["config"], "--workers", "1", "-o", w["config"]],
        lambda w: w["config"],
    ),
]


@pytest.fixture()
def full_world(world: W, study: Path) -> W:
    root = world["study"].parent
    (root / "m.py").write_text("VALUE = 1\n")
    shutil.copy(study.parent / "study.toml", root / "study.toml")
    return {**world, "measure_py": root / "m.py", "config": root / "study.toml"}


def _refused_and_unchanged(argv: list[str], root: Path, named: Path) -> str:
    before = snapshot(root)
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    assert snapshot(root) == before, f"oodeval {' '.join(argv)} changed its folder"
    line = err.strip()
    assert str(named) in line, line
    return line


@pytest.mark.parametrize("case", ALIASES, ids=[c[0] for c in ALIASES])
def test_an_output_that_is_an_input_is_refused_and_nothing_changes(full_world, case) -> None:
    _, make_argv, named = case
    argv = [str(a) for a in make_argv(full_world)]
    line = _refused_and_unchanged(argv, full_world["study"].parent, named(full_world))
    assert "the same file" in line or "inside" in line, line


def test_import_domainbed_refuses_an_output_that_is_a_runs_results(world, domainbed_sweep):
    sweep = _sweep(world, domainbed_sweep)
    target = _first_run(sweep)
    argv = ["import", "domainbed", str(sweep), "-f", "csv", "-o", str(target)]
    line = _refused_and_unchanged(argv, sweep.parent, target)
    assert f"SWEEP {target}" in line, line


@pytest.mark.parametrize("command", ["show", "preview"])
def test_envs_refuses_an_output_inside_its_image_source(world, mnist_dir, command) -> None:
    images = _mnist_copy(world, mnist_dir)
    target = sorted(images.iterdir())[0]
    flag = "--out" if command == "preview" else "-o"
    argv = ["envs", command, "sr-cmnist", "--source", f"mnist:{images}", flag, str(target)]
    line = _refused_and_unchanged(argv, images, target)
    assert "inside --source" in line, line


def test_shift_refuses_an_output_inside_its_image_source(world, mnist_dir) -> None:
    images = _mnist_copy(world, mnist_dir)
    target = sorted(images.iterdir())[0]
    argv = ["shift", "--train", "sr-cmnist:e=0.1", "--test", "sr-cmnist:e=0.9"]
    argv += ["--source", f"mnist:{images}", "--n-seeds", "1", "--n-steps", "1", "-o", str(target)]
    _refused_and_unchanged(argv, images, target)


def test_a_hard_link_to_the_store_is_refused_as_an_output(full_world) -> None:
    root = full_world["study"].parent
    link = root / "innocent.txt"
    os.link(full_world["store"], link)
    argv = ["study", "status", str(full_world["study"]), "-o", str(link)]
    line = _refused_and_unchanged(argv, root, link)
    assert "study store" in line, line


def test_a_study_run_config_that_is_its_report_is_refused(full_world) -> None:
    root = full_world["study"].parent
    config = full_world["study"] / "report.html"
    shutil.copy(full_world["config"], config)
    argv = ["study", "run", str(config), "--out", str(full_world["study"]), "--workers", "1"]
    _refused_and_unchanged([*argv, "--no-progress"], root, config)


# -- failed writes --------------------------------------------------------------------------
def _one_error(argv: list[str]) -> str:
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    return err.strip()


@needs_dev_full
@pytest.mark.parametrize(
    "make_argv",
    [
        lambda w: ["measures", w["results"], "-o", FULL],  # a table (echo_output)
        lambda w: ["report", w["results"], "--out", FULL],  # an HTML page
        lambda w: ["protocols", "classic", w["tree"], "--train", "a,b", "--out", FULL],  # a CSV
        lambda w: ["openworld", "evaluate", w["features"], "--predictions", FULL],  # an npz
        lambda w: ["envs", "preview", "sr-cmnist", "--source", "digits", "--out", FULL],  # a PNG
    ],
    ids=["table", "html", "assignment-csv", "npz", "png"],
)
def test_a_full_disk_is_one_line_naming_the_file(world, make_argv) -> None:
    created = [p for p in (Path(f"{FULL}.png"), Path(f"{FULL}.npz")) if not p.exists()]
    try:
        line = _one_error([str(a) for a in make_argv(world)])
    finally:  # the old code wrote /dev/full.png and /dev/full.npz beside the device
        leftovers = [p for p in created if p.exists()]
        for p in leftovers:
            p.unlink()
    assert not leftovers, leftovers
    assert f"cannot write {FULL} (No space left on device)" in line, line


@needs_dev_full
def test_study_analyze_on_a_full_disk_leaves_no_analysis(world) -> None:
    line = _one_error(["study", "analyze", str(world["study"]), "-o", FULL])
    assert f"cannot write {FULL} (No space left on device)" in line, line
    assert not (world["study"] / "analysis").exists()


def test_study_analyze_failing_at_its_fifth_file_keeps_the_old_analysis(world, monkeypatch):
    assert invoke(["study", "analyze", str(world["study"])])[0] == 0
    analysis = world["study"] / "analysis"
    before = snapshot(analysis)
    assert len(before) == 16  # the 15 tables of `study analyze` and analysis.md
    (analysis / "verdict.csv").write_text("old verdict\n")
    before = snapshot(analysis)
    real_fdopen = os.fdopen
    opened = []

    class Full:  # a file of a full disk: every write fails
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def __getattr__(self, name):
            return getattr(self.fh, name)

    def fdopen(fd, *args, **kwargs):
        fh = real_fdopen(fd, *args, **kwargs)
        opened.append(fd)
        return Full(fh) if len(opened) == 5 else fh

    monkeypatch.setattr(os, "fdopen", fdopen)
    line = _one_error(["study", "analyze", str(world["study"]), "--analysis-dir", str(analysis)])
    monkeypatch.undo()
    assert "(No space left on device)" in line and str(analysis) in line, line
    assert snapshot(analysis) == before  # the old files, no new one, no temporary one


@needs_dev_full
def test_import_domainbed_prints_no_answer_before_a_failed_write(world, domainbed_sweep):
    sweep = _sweep(world, domainbed_sweep)
    line = _one_error(["import", "domainbed", str(sweep), "-f", "csv", "-o", FULL])
    assert f"cannot write {FULL}" in line, line


@needs_dev_full
@pytest.mark.parametrize("kept", ["curve", "predictions", "train"])
def test_a_failed_second_output_takes_the_first_with_it(world, kept) -> None:
    root = world["study"].parent
    first = root / f"{kept}-first.{'csv' if kept == 'curve' else 'npz'}"
    argv = {
        "curve": ["openworld", world["predictions"], "--base-classes", "0-2", "--curve", first],
        "predictions": ["openworld", "evaluate", world["features"], "--predictions", first],
        "train": ["openworld", "make-features", "--source", "synthetic", "--train-out", first],
    }[kept]
    argv += ["--test-out", FULL] if kept == "train" else ["-o", FULL]
    created = Path(f"{FULL}.npz")
    existed = created.exists()
    try:
        line = _one_error([str(a) for a in argv])
    finally:
        if created.exists() and not existed:
            created.unlink()
    assert f"cannot write {FULL}" in line, line
    assert not first.exists(), f"{first} was left behind"


def test_envs_preview_writes_out_as_given(world, tmp_path) -> None:
    out = tmp_path / "grid"
    code, _, err = invoke(["envs", "preview", "sr-cmnist", "--source", "digits", "--out", str(out)])
    assert code == 0, err
    assert out.is_file() and out.read_bytes().startswith(b"\x89PNG"), err
    assert not Path(f"{out}.png").exists()
    assert f"wrote {out} " in err, err


def test_a_write_error_names_the_regular_file(world, monkeypatch) -> None:
    target = world["study"].parent / "scores.txt"

    def replace(src, dst):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "replace", replace)
    line = _one_error(["measures", str(world["results"]), "-o", str(target)])
    monkeypatch.undo()
    assert f"cannot write {target} (Input/output error)" in line, line
    assert not target.exists() and not list(target.parent.glob(".scores.txt.*"))


@needs_dev_full
def test_a_full_standard_output_is_named(world) -> None:
    """``oodeval measures r.csv > /dev/full``, as a real process: the line names stdout."""
    with open(FULL, "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "oodeval.cli.main", "measures", str(world["results"])],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert lines == [
        "error: cannot write the standard output (No space left on device); free some space or "
        "choose another path"
    ], done.stderr
