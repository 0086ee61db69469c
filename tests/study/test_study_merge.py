"""`oodeval study merge A B ... --out C`: studies run apart become one.

The halves of a study (split by algorithm, or by seed) merge into a store that holds, unit by
unit, the same result rows, checkpoint rows, statuses and hyperparameters as the study run whole,
and whose `study analyze` output is byte for byte the same. A unit found twice is kept once when
its results are identical and refused, naming it, when they differ; a done unit wins over a failed
one. Damaged or incompatible inputs are refused in one line and nothing is written. A merge killed
(SIGKILL) or interrupted (Ctrl-C) at any point completes when run again, with no duplicate."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.study import load_study
from oodeval.study.config import scenario_key
from oodeval.study.store import (
    INTEGRITY_COLUMNS,
    STORE_NAME,
    UNIT_COLUMNS,
    ResultStore,
    UnitRecord,
    unit_checksum,
    verify_store,
)
from tests.helpers.interrupts import STOPS, Stop, default_ctrl_c
from tests.helpers.studies import count_stored_units
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]

WHOLE = """
name = "halves"
backend = "tests.checkpoint_backend"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx"]
seeds = [0, 1]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1, n_all = 21 },
             { family = "synthetic", ratio = "3:1", scale = 2, n_all = 21 }]
[unit_options]
fail_algorithms = ["GroupDRO"]
[hparams.IRM]
penalty_weight = 2.0
"""
FIRST_ALGORITHMS = WHOLE.replace('"ERM", "IRM", "GroupDRO", "VREx"', '"ERM", "IRM"')
SECOND_ALGORITHMS = WHOLE.replace('"ERM", "IRM", "GroupDRO", "VREx"', '"GroupDRO", "VREx"').replace(
    "[hparams.IRM]\npenalty_weight = 2.0\n", ""
)
#: Columns of a unit that differ between two runs of it (not compared: see oodeval.study.merge).
RUN_COLUMNS = ("timings", "versions", "started", "finished", "checksum")


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def run(tmp_path: Path, text: str, out: Path, name: str = "study.toml"):
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    result = invoke("study", "run", config, "--out", out, "--workers", "1", "--no-progress",
                    "--no-report")  # fmt: skip
    assert result.exit_code == 0, result.output
    return result


def merge(*args):
    return invoke("study", "merge", *args, "--no-progress")


def table(out: Path, name: str) -> list[tuple]:
    conn = sqlite3.connect(f"{(out / STORE_NAME).as_uri()}?mode=ro", uri=True)
    try:
        return sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
    finally:
        conn.close()


def dump(out: Path) -> dict[str, list[tuple]]:
    return {t: table(out, t) for t in ("study", "units", "results", "checkpoints", "configs")}


def comparable_units(out: Path) -> list[tuple]:
    """The units rows without what differs between two runs of a unit."""
    columns = UNIT_COLUMNS + INTEGRITY_COLUMNS
    keep = [i for i, c in enumerate(columns) if c not in RUN_COLUMNS]
    return [tuple(row[i] for i in keep) for row in table(out, "units")]


def assert_same_study(merged: Path, whole: Path) -> None:
    """Unit by unit: statuses, hyperparameters, result rows, checkpoint rows; then the analyses
    byte for byte."""
    assert comparable_units(merged) == comparable_units(whole)
    assert table(merged, "results") == table(whole, "results")
    assert table(merged, "checkpoints") == table(whole, "checkpoints")
    assert load_study(merged).config == load_study(whole).config
    for folder in (merged, whole):
        assert invoke("study", "analyze", folder).exit_code == 0
    files = sorted(p.name for p in (whole / "analysis").iterdir())
    assert files == sorted(p.name for p in (merged / "analysis").iterdir()) and len(files) > 5
    for name in files:
        assert (merged / "analysis" / name).read_bytes() == (whole / "analysis" / name).read_bytes()


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """The study run whole, and its halves by algorithm and by seed, each run on its own."""
    tmp = tmp_path_factory.mktemp("merge")
    folders = {}
    for name, text in {
        "whole": WHOLE,
        "first-algorithms": FIRST_ALGORITHMS,
        "second-algorithms": SECOND_ALGORITHMS,
        "seed-0": WHOLE.replace("seeds = [0, 1]", "seeds = [0]"),
        "seed-1": WHOLE.replace("seeds = [0, 1]", "seeds = [1]"),
    }.items():
        run(tmp, text, tmp / name, f"{name}.toml")
        folders[name] = tmp / name
    return folders


@pytest.mark.parametrize(
    "halves",
    [("first-algorithms", "second-algorithms"), ("seed-0", "seed-1")],
    ids=["by-algorithm", "by-seed"],
)
def test_a_merge_of_two_halves_equals_the_study_run_whole(studies, tmp_path, halves):
    a, b = (studies[h] for h in halves)
    out = tmp_path / "merged"
    result = merge(a, b, "--out", out)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        f"16 units copied (8 from {a}, 8 from {b}); 0 identical duplicate(s) kept once; 0 already "
        f"in {out}; 16 units planned by the merged config; store: {out / STORE_NAME}"
    )
    assert_same_study(out, studies["whole"])
    assert verify_store(out).clean
    history = load_study(out).history
    assert len(history) == 1 and history[0].origin == f"merge of {a.resolve()}, {b.resolve()}"
    again = merge(a, b, "--out", out)  # resuming a finished merge copies nothing
    assert again.exit_code == 0 and again.output.startswith("0 units copied")
    assert "16 already in" in again.output
    whole_config = studies["whole"].parent / "whole.toml"  # the merged study grows like any other
    grown = invoke("study", "run", whole_config, "--out", out, "--workers", "1", "--no-progress",
                   "--no-report")  # fmt: skip
    assert grown.exit_code == 0 and "16 units: 16 already stored, 0 run" in grown.output


def test_identical_duplicates_are_kept_once(studies, tmp_path):
    out = tmp_path / "merged"
    whole, half = studies["whole"], studies["first-algorithms"]
    result = merge(half, whole, "--out", out)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        f"16 units copied (8 from {half}, 8 from {whole}); 8 identical duplicate(s) kept once"
    )
    assert_same_study(out, whole)
    assert len(table(out, "units")) == 16


def rewrite_unit(out: Path, key: str, change) -> None:
    """Change one stored unit with `change(conn, key)` and give it a matching checksum, as if
    another machine had computed it so (the store then verifies)."""
    conn = sqlite3.connect(out / STORE_NAME)
    try:
        change(conn, key)
        row = conn.execute(
            f"SELECT {', '.join(UNIT_COLUMNS)} FROM units WHERE unit_key=?", (key,)
        ).fetchone()
        results = conn.execute(
            "SELECT fold, environment, error, count FROM results WHERE unit_key=?", (key,)
        ).fetchall()
        checkpoints = conn.execute(
            "SELECT fold, step, train_val_acc, test_acc, oracle_val_acc FROM checkpoints "
            "WHERE unit_key=?",
            (key,),
        ).fetchall()
        conn.execute(
            "UPDATE units SET n_results=?, n_checkpoints=?, checksum=? WHERE unit_key=?",
            (len(results), len(checkpoints), unit_checksum(row, results, checkpoints), key),
        )
        conn.commit()
    finally:
        conn.close()


def copy_study(source: Path, target: Path) -> Path:
    target.mkdir()
    src = sqlite3.connect(f"{(source / STORE_NAME).as_uri()}?mode=ro", uri=True)
    dst = sqlite3.connect(target / STORE_NAME)
    src.backup(dst)
    src.close()
    dst.close()
    return target


KEY = "synthetic/ratio=3:1/scale=1|IRM|seed=0"


def test_a_unit_whose_copies_differ_is_refused_naming_it(studies, tmp_path):
    other = copy_study(studies["first-algorithms"], tmp_path / "other-machine")
    rewrite_unit(
        other,
        KEY,
        lambda c, k: c.execute(
            "UPDATE results SET error = error + 1e-9 WHERE unit_key=? AND fold='all'", (k,)
        ),  # fmt: skip
    )
    assert verify_store(other).clean  # a healthy store: only its numbers differ
    out = tmp_path / "merged"
    result = merge(studies["whole"], other, "--out", out)
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and line.startswith(
        f"error: unit {KEY} differs between {studies['whole']} and {other} (its result or "
        "checkpoint rows, or its hyperparameters, are not identical);"
    )
    assert not out.exists()
    # the hyperparameters count too
    hparams = copy_study(studies["first-algorithms"], tmp_path / "other-hparams")
    rewrite_unit(
        hparams,
        KEY,
        lambda c, k: c.execute(
            "UPDATE units SET hparams = replace(hparams, '2.0', '2.5') WHERE unit_key=?", (k,)
        ),  # fmt: skip
    )
    assert merge(studies["whole"], hparams, "--out", out).exit_code == 2
    # into a folder that already holds the unit: refused too, and the folder unchanged
    assert merge(studies["whole"], "--out", out).exit_code == 0
    before = dump(out)
    into = merge(other, "--out", out)
    assert into.exit_code == 2 and f"unit {KEY} differs between --out {out} and {other}" in (
        into.output
    )
    assert dump(out) == before


def test_a_done_unit_wins_over_a_failed_one(studies, tmp_path):
    failed = copy_study(studies["first-algorithms"], tmp_path / "failed")

    def fail(conn, key):
        conn.execute("DELETE FROM results WHERE unit_key=?", (key,))
        conn.execute("DELETE FROM checkpoints WHERE unit_key=?", (key,))
        conn.execute("UPDATE units SET status='failed', failure='worker died' WHERE unit_key=?",
                     (key,))  # fmt: skip

    rewrite_unit(failed, KEY, fail)
    out = tmp_path / "merged"
    first = merge(failed, studies["whole"], "--out", out)
    assert first.exit_code == 0, first.output
    assert first.output.startswith(f"16 units copied (7 from {failed}, 9 from ")
    assert_same_study(out, studies["whole"])
    # a failed unit already in the output is replaced by a done one
    out2 = tmp_path / "merged-2"
    assert merge(failed, "--out", out2).exit_code == 0
    assert dict((r[0], r[9]) for r in table(out2, "units"))[KEY] == "failed"
    second = merge(studies["first-algorithms"], "--out", out2)
    assert second.exit_code == 0 and "1 failed unit(s) replaced by done ones" in second.output
    assert dict((r[0], r[9]) for r in table(out2, "units"))[KEY] == "done"


def test_a_damaged_input_is_refused_naming_it(studies, tmp_path):
    damaged = copy_study(studies["first-algorithms"], tmp_path / "damaged")
    with sqlite3.connect(damaged / STORE_NAME) as conn:  # a value changed, its checksum not
        conn.execute("UPDATE results SET error = 0.5 WHERE unit_key=? AND fold='all'", (KEY,))
    conn.close()
    out = tmp_path / "merged"
    result = merge(studies["second-algorithms"], damaged, "--out", out)
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {damaged} is damaged: 1 of 8 units fail verification: {KEY} (rows differ "
        "from their checksum); run `oodeval study run` with its config on it first (then merge): "
        "it moves the damaged units (and rows) aside and runs them again"
    )
    assert not out.exists()


def test_incompatible_inputs_are_refused_naming_the_key_and_the_inputs(studies, tmp_path):
    other = tmp_path / "other-steps"
    run(tmp_path, SECOND_ALGORITHMS.replace("steps = 5", "steps = 6"), other)
    out = tmp_path / "merged"
    result = merge(studies["first-algorithms"], other, "--out", out)
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {studies['first-algorithms']} and {other} cannot be merged: their units would "
        "not compare (they differ in steps); only studies that differ in algorithms, seeds, "
        "scenarios or imports merge"
    )
    assert not out.exists()


def test_merging_into_a_folder_holding_an_incompatible_study_is_refused(studies, tmp_path):
    target = tmp_path / "target"
    run(tmp_path, WHOLE.replace("steps = 5", "steps = 6"), target)
    before = dump(target)
    result = merge(studies["first-algorithms"], studies["second-algorithms"], "--out", target)
    assert result.exit_code == 2
    assert f"error: --out {target} and {studies['first-algorithms']} cannot be merged" in (
        result.output
    )
    assert "(they differ in steps)" in result.output
    assert dump(target) == before


def test_bad_arguments_are_one_line(studies, tmp_path):
    a, b = studies["first-algorithms"], studies["second-algorithms"]
    for args, message in [
        ([a, a, "--out", tmp_path / "c"], f"{a} is given twice; list each study folder once"),
        ([a, b, "--out", a], f"--out {a} is one of the inputs; merge into another folder"),
        ([tmp_path / "no", "--out", tmp_path / "c"], f"no study in {tmp_path / 'no'} (results"),
    ]:
        result = merge(*args)
        assert result.exit_code == 2 and result.output.startswith(f"error: {message}")
        assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


# -- interrupted merges -----------------------------------------------------------------------
N_SCENARIOS, N_SEEDS = 10, 15


def large_store(
    folder: Path,
    algorithms: list[str],
    *,
    backend: str = "tests.checkpoint_backend",
    n_scenarios: int = N_SCENARIOS,
    n_seeds: int = N_SEEDS,
) -> None:
    """A verified store of n_scenarios x algorithms x n_seeds units, written through the API."""
    specs = [{"family": "synthetic", "ratio": "3:1", "scale": s} for s in range(1, n_scenarios + 1)]
    names = {scenario_key(s): f"synthetic/ratio=3:1/scale={s['scale']}" for s in specs}
    config = {
        "name": "large",
        "backend": backend,
        "algorithms": algorithms,
        "seeds": list(range(n_seeds)),
        "steps": 5,
        "scenarios": specs,
    }
    with ResultStore(folder, create=True) as store:
        store.bind_config(config, scenario_names=names)
        for spec in specs:
            for algorithm in algorithms:
                for seed in range(n_seeds):
                    scenario = names[scenario_key(spec)]
                    rows = [("all", f"e={i}", (seed + i) / 100, 50) for i in range(5)]
                    record = UnitRecord(
                        scenario, "synthetic", {"scale": spec["scale"]}, algorithm, seed,
                        {"lr": 0.001}, 5, "mlp", "done",
                        checkpoints=[("e=1", step, 0.5, 0.6, 0.7) for step in (1, 2)],
                        rows=rows,
                    )  # fmt: skip
                    store.record_unit(record)


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("large")
    large_store(tmp / "a", ["ERM", "IRM"])
    large_store(tmp / "b", ["VREx"])
    reference = tmp / "reference"
    assert merge(tmp / "a", tmp / "b", "--out", reference).exit_code == 0
    return tmp / "a", tmp / "b", reference


def merge_process(a: Path, b: Path, out: Path) -> subprocess.Popen:
    script = Path(sys.executable).with_name("oodeval")
    head = [str(script)] if script.is_file() else [sys.executable, "-m", "oodeval.cli.main"]
    return subprocess.Popen(
        [*head, "study", "merge", str(a), str(b), "--out", str(out), "--no-progress"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,  # one test interrupts it
    )


def wait_for_units(process: subprocess.Popen, out: Path, at_least: int) -> int:
    """Units stored once `process` has stored `at_least` of them (more may follow meanwhile)."""
    wait_until(
        lambda: count_stored_units(out) >= at_least, f"{at_least} stored units", proc=process
    )
    return count_stored_units(out)


def assert_equal_stores(out: Path, reference: Path) -> None:
    """Every unit exactly once, copied exactly (the merge's own history row aside)."""
    mine, theirs = dump(out), dump(reference)
    for name in ("units", "results", "checkpoints"):
        assert mine[name] == theirs[name]
    assert [r[1] for r in mine["configs"]] == [r[1] for r in theirs["configs"]]
    assert verify_store(out).clean


@pytest.mark.parametrize("attempt", range(3))
def test_a_merge_killed_at_a_random_point_completes_when_run_again(large, tmp_path, attempt):
    a, b, reference = large
    total = 3 * N_SCENARIOS * N_SEEDS
    out = tmp_path / "merged"
    # units stored when the kill lands; the last third is left as a margin for a loaded machine,
    # where more units are copied between the poll that sees them and the kill
    point = random.Random(attempt).randrange(1, 2 * total // 3)
    process = merge_process(a, b, out)
    seen = wait_for_units(process, out, point)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed = count_stored_units(out)
    assert seen <= killed < total, (seen, killed, point)  # killed mid-merge
    again = merge_process(a, b, out)
    stdout, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr
    copied = total - killed
    assert stdout.startswith(f"{copied} units copied") and f"; {killed} already in" in stdout
    assert_equal_stores(out, reference)


@pytest.mark.parametrize("stop", STOPS.values(), ids=STOPS)
def test_ctrl_c_or_sigterm_stops_a_merge_with_one_line_and_the_same_command_resumes(
    large, tmp_path, stop: Stop
):
    a, b, reference = large
    total = 3 * N_SCENARIOS * N_SEEDS
    out = tmp_path / "merged"
    process = merge_process(a, b, out)
    wait_for_units(process, out, total // 3)
    process.send_signal(stop.signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == stop.status, stderr
    stored = count_stored_units(out)
    assert stderr.strip() == (
        f"{stop.word}: {stored} of {total} units stored; run the same command again to resume"
    )
    assert 0 < stored < total and stdout == ""
    again = merge_process(a, b, out)
    stdout, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr
    assert_equal_stores(out, reference)


def test_only_the_units_of_an_inputs_current_config_are_copied(studies, tmp_path):
    grown = copy_study(studies["whole"], tmp_path / "shrunk")
    text = WHOLE.replace('"ERM", "IRM", "GroupDRO", "VREx"', '"ERM", "IRM"')
    run(tmp_path, text, grown)  # now 8 of its 16 units are outside its config
    out = tmp_path / "merged"
    result = merge(grown, studies["second-algorithms"], "--out", out)
    assert result.exit_code == 0, result.output
    assert "8 unit(s) outside the current config of" in result.output
    assert_same_study(out, studies["whole"])
    assert json.loads(dict(table(out, "study"))["config"])["algorithms"] == [
        "ERM", "IRM", "GroupDRO", "VREx"
    ]  # fmt: skip
    assert os.path.exists(out / "study.lock")


def test_studies_whose_backend_is_not_installed_here_merge(tmp_path):
    """Merging copies stored rows and never trains: a backend module that is not importable on
    this machine (the studies ran elsewhere) is kept as written, not refused."""
    backend = "lab_only_package.trainer_backend"  # on no Python path here
    large_store(tmp_path / "a", ["ERM"], backend=backend, n_scenarios=1, n_seeds=2)
    large_store(tmp_path / "b", ["IRM"], backend=backend, n_scenarios=1, n_seeds=2)
    out = tmp_path / "merged"
    result = merge(tmp_path / "a", tmp_path / "b", "--out", out)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("4 units copied (2 from ")
    assert json.loads(dict(table(out, "study"))["config"])["backend"] == backend
