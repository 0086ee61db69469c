"""Fuzzing outputs that alias inputs: every spelling of "the file this command reads".

For a command drawn from `READERS` and one of the files it reads, Hypothesis draws how the
output names that file: the same path, the absolute path, with ``./`` or ``sub/..`` inside, a
symbolic link to it, a hard link to it, through a linked folder, or a fresh file (the control).
The contract: an alias is refused (exit 2, one ``error:`` line) and every file of the folder is
byte-identical afterwards, links included; a fresh output is written (exit 0) and the inputs are
unchanged. `test_two_outputs_of_one_command_are_never_one_file` does the same for two outputs of
one command. The example counts are in `fuzz_settings` (bounded for CI); ``pytest
--hypothesis-show-statistics`` prints how many ran.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import fuzz_settings
from tests.helpers.outputs import finished, make_world, snapshot

W = dict[str, Path]
Argv = Callable[[W, str], list[str]]

#: (name, the input aliased (a key of the world, or the store's side file), argv with the output)
READERS: list[tuple[str, str, Argv]] = [
    ("measures", "results", lambda w, o: ["measures", w["results"], "-f", "csv", "-o", o]),
    ("report results", "results", lambda w, o: ["report", w["results"], "--out", o]),
    (
        "openworld --curve",
        "predictions",
        lambda w, o: ["openworld", w["predictions"], "--base-classes", "0-2", "--curve", o],
    ),
    (
        "openworld -o",
        "predictions",
        lambda w, o: ["openworld", w["predictions"], "--base-classes", "0-2", "-o", o],
    ),
    (
        "ratio-study",
        "predictions",
        lambda w, o: [
            "openworld",
            "ratio-study",
            w["predictions"],
            "--base-classes",
            "0-2",
            "--n-repeats",
            "1",
            "-o",
            o,
        ],
    ),
    (
        "evaluate --predictions",
        "features",
        lambda w, o: ["openworld", "evaluate", w["features"], "--predictions", o],
    ),
    (
        "protocols evaluate",
        "assignment",
        lambda w, o: ["protocols", "evaluate", w["assignment"], w["protocol_predictions"], "-o", o],
    ),
    (
        "protocols evaluate",
        "protocol_predictions",
        lambda w, o: ["protocols", "evaluate", w["assignment"], w["protocol_predictions"], "-o", o],
    ),
    ("study status", "store", lambda w, o: ["study", "status", w["study"], "-o", o]),
    ("study status", "-wal", lambda w, o: ["study", "status", w["study"], "-o", o]),
    ("study verify", "store", lambda w, o: ["study", "verify", w["study"], "-o", o]),
    ("study verify", "-journal", lambda w, o: ["study", "verify", w["study"], "-o", o]),
    ("report study", "store", lambda w, o: ["report", w["study"], "--out", o]),
    ("report study", "-shm", lambda w, o: ["report", w["study"], "--out", o]),
    ("variance", "checkpoints", lambda w, o: ["variance", w["checkpoints"], "-o", o]),
]

#: How an output may name a file: the first six are aliases, ``fresh`` is the control.
SPELLINGS = ["same", "absolute", "dot", "dotdot", "symlink", "hardlink", "linked-folder", "fresh"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> W:
    """One world for every example: a refused command changes nothing (checked), and what an
    example adds (links, a fresh output) it removes."""
    study = finished(tmp_path_factory.mktemp("study"))
    root = tmp_path_factory.mktemp("outputs")
    w = make_world(root / "w", study)
    (root / "w" / "sub").mkdir()
    (root / "elsewhere").mkdir()
    (root / "linked").symlink_to(root / "w")
    (root / "linked-study").symlink_to(root / "w" / "S")
    return {**w, "root": root}


def _target(w: W, key: str) -> Path:
    if key.startswith("-"):
        return Path(f"{w['store']}{key}")
    return w[key]


def _spell(w: W, target: Path, spelling: str) -> str:
    """The output naming `target` as `spelling` says; links made here are in ``elsewhere``."""
    parent = target.parent
    if spelling == "same":  # relative to the working folder, as typed
        return os.path.relpath(target)
    if spelling == "absolute":
        return os.path.abspath(target)
    if spelling == "dot":
        return str(parent / "." / target.name)
    if spelling == "dotdot":
        return str(w["root"] / "w" / "sub" / ".." / target.relative_to(w["root"] / "w"))
    if spelling == "symlink":
        link = w["root"] / "elsewhere" / "link"
        link.symlink_to(target)
        return str(link)
    if spelling == "hardlink":
        link = w["root"] / "elsewhere" / "hard"
        os.link(target, link)
        return str(link)
    if spelling == "linked-folder":
        top = w["root"] / ("linked-study" if parent == w["study"] else "linked")
        inside = target.relative_to(w["study"] if parent == w["study"] else w["root"] / "w")
        return str(top / inside)
    return str(w["root"] / "elsewhere" / f"fresh{target.suffix or '.txt'}")


def _clean(w: W) -> None:
    for path in (w["root"] / "elsewhere").iterdir():
        path.unlink()


@fuzz_settings(120)
@given(case=st.sampled_from(READERS), spelling=st.sampled_from(SPELLINGS))
def test_an_output_never_overwrites_an_input_however_it_is_spelled(world, case, spelling):
    _, key, make_argv = case
    target = _target(world, key)
    if spelling in ("symlink", "hardlink") and not target.exists():
        spelling = "same"  # a side file not there: no link to it can be made
    try:
        output = _spell(world, target, spelling)
        before = snapshot(world["root"] / "w")
        links = snapshot(world["root"] / "elsewhere")
        argv = [str(a) for a in make_argv(world, output)]
        code, out, err = invoke(argv)
        after = snapshot(world["root"] / "w")
        if spelling == "fresh":
            assert code == 0, err
            assert Path(output).exists() or Path(f"{output}.npz").exists(), err
        else:
            assert_refused(code, out, err, argv)
            assert snapshot(world["root"] / "elsewhere") == links
        assert after == before, f"oodeval {' '.join(argv)} changed an input"
    finally:
        _clean(world)


#: Commands with two outputs: (name, argv with both outputs).
TWO_OUTPUTS: list[tuple[str, Callable[[W, str, str], list[str]]]] = [
    (
        "openworld --curve/-o",
        lambda w, a, b: [
            "openworld",
            w["predictions"],
            "--base-classes",
            "0-2",
            "--curve",
            a,
            "-o",
            b,
        ],
    ),
    (
        "evaluate --predictions/-o",
        lambda w, a, b: ["openworld", "evaluate", w["features"], "--predictions", a, "-o", b],
    ),
    (
        "make-features",
        lambda w, a, b: [
            "openworld",
            "make-features",
            "--source",
            "synthetic",
            "--n-shots",
            "2",
            "--train-out",
            a,
            "--test-out",
            b,
        ],
    ),
]


@fuzz_settings(40)
@given(
    case=st.sampled_from(TWO_OUTPUTS),
    spelling=st.sampled_from(["same", "absolute", "dot", "dotdot", "linked-folder", "hardlink"]),
    exists=st.booleans(),
)
def test_two_outputs_of_one_command_are_never_one_file(world, case, spelling, exists):
    _, make_argv = case
    first = world["root"] / "w" / "both.npz"
    if exists or spelling == "hardlink":
        first.write_bytes(b"there before\n")
    try:
        second = _spell(world, first, spelling)
        before = snapshot(world["root"] / "w")
        argv = [str(a) for a in make_argv(world, str(first), second)]
        code, out, err = invoke(argv)
        assert_refused(code, out, err, argv)
        assert "are the same file" in err, err
        assert snapshot(world["root"] / "w") == before
    finally:
        first.unlink(missing_ok=True)
        _clean(world)
