"""A folder of every kind of input a command reads, for the tests that name an input as an
output (`tests/report/test_hostile_outputs.py`, `tests/report/test_fuzz_outputs.py`).

`make_world` fills a folder with a results CSV, open-world predictions, a feature file, a study
folder, a domain-assignment CSV with its predictions and a protocol's image tree; `snapshot`
gives every file's bytes, so a test checks that a refused command changed nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.cli import invoke
from tests.helpers.studies import finished_study

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: A three-unit synthetic study: finished in about a second.
STUDY_CONFIG = """
name = "outputs"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "GroupDRO"]
seeds = [0]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1 }]
"""

#: Files SQLite may make beside a store it only reads: the read side's, not an output's.
READER_FILES = ("results.sqlite-wal", "results.sqlite-shm")


def finished(root: Path) -> Path:
    """A finished study in ``root/s`` (config ``root/study.toml``), to copy into worlds."""
    return finished_study(root, STUDY_CONFIG)


def make_world(root: Path, study: Path) -> dict[str, Path]:
    """Inputs in `root`: ``r.csv`` (results), ``pred.csv`` (open-world predictions),
    ``tr.npz``/``te.npz`` (features), ``S`` (a copy of the study `study`), ``tree`` (images of
    three domains), ``asg.csv`` (its classic assignment), ``p.csv`` (predictions for it) and
    ``ck.csv`` (per-checkpoint records for `variance`)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "results.csv", root / "r.csv")
    shutil.copy(EXAMPLES / "openworld_predictions.csv", root / "pred.csv")
    shutil.copytree(study, root / "S")
    for domain in ("a", "b", "c"):
        cell = root / "tree" / domain / "cat"
        cell.mkdir(parents=True)
        for i in range(3):
            (cell / f"{i}.jpg").write_bytes(f"{domain}{i}".encode())
    argv = ["protocols", "classic", str(root / "tree"), "--train", "a,b"]
    code, out, err = invoke([*argv, "--out", str(root / "asg.csv")])
    assert code == 0, out + err
    lines = (root / "asg.csv").read_text().splitlines()[1:]
    rows = [f"{line.split(',')[0]},cat" for line in lines]
    (root / "p.csv").write_text("path,prediction\n" + "\n".join(rows) + "\n")
    header = (
        "dataset,algorithm,environment,trial,hparams,step,test_acc,train_val_acc,oracle_val_acc"
    )
    records = [
        f"D,ERM,{env},{trial},0,{step},0.8{trial},0.7{env},0.75"
        for trial in (0, 1)
        for env in (0, 1)
        for step in (100, 200)
    ]
    (root / "ck.csv").write_text("\n".join([header, *records]) + "\n")
    argv = ["openworld", "make-features", "--source", "synthetic", "--n-shots", "2"]
    code, out, err = invoke(
        [*argv, "--train-out", str(root / "tr.npz"), "--test-out", str(root / "te.npz")]
    )
    assert code == 0, out + err
    return {
        "results": root / "r.csv",
        "predictions": root / "pred.csv",
        "features": root / "te.npz",
        "train": root / "tr.npz",
        "study": root / "S",
        "store": root / "S" / "results.sqlite",
        "tree": root / "tree",
        "assignment": root / "asg.csv",
        "protocol_predictions": root / "p.csv",
        "checkpoints": root / "ck.csv",
    }


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str | None]]:
    """Every path under `root`, links not followed: {relative path: (kind, bytes or target)},
    without the side files SQLite makes when it reads a store (`READER_FILES`)."""
    found: dict[str, tuple[str, bytes | str | None]] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.name in READER_FILES and not path.is_symlink():
            continue
        if path.is_symlink():
            found[name] = ("link", str(path.readlink()))
        elif path.is_file():
            found[name] = ("file", path.read_bytes())
        else:
            found[name] = ("folder", None)
    return found
