"""The command-line contract (CONTRIBUTING.md "Command-line contract"), checked over every command.

The structural tests walk the Typer app, so a new command is checked (and must be classified
below) without editing this file's parametrisation: a table-printing command takes
``--format/-f`` with exactly table|csv|json|markdown and ``--output/-o FILE``; a command that
writes artefacts takes ``--out`` with no short form; ``--source`` is a data source everywhere;
counts are ``--n-THINGS``. The behavioural tests check that every format of a command parses
back to the same table, that ``-o FILE`` writes exactly what stdout shows, and that Ctrl-C
and SIGTERM stop long commands with one line and exit status 130 or 143.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import typing
import uuid
from pathlib import Path

import pandas as pd
import pytest
import typer.main
from typer.testing import CliRunner

from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT
from oodeval.cli.main import app
from oodeval.protocols import AssignmentRow, write_assignment_csv
from oodeval.tables import FORMATS
from tests.helpers.interrupts import (
    LEAK_WARNING,
    MARK,
    STOPS,
    Stop,
    assert_no_process_survives,
    default_ctrl_c,
    guard_announcer,
    write_config,
)
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()

# Every command is in exactly one group; a new command fails test_every_command_is_classified
# until it is added here, so nobody adds a command outside the contract by accident.
TABLE_COMMANDS = {
    "measures",
    "variance",
    "shift",
    "import domainbed",
    "openworld score",
    "openworld ratio-study",
    "openworld evaluate",
    "study status",
    "study analyze",
    "study measures",
    "study verify",
    "study estimate",
    "envs list",
    "envs show",
    "protocols evaluate",
}
ARTEFACT_COMMANDS = {
    "report",
    "openworld train-gmop",
    "study run",
    "study merge",
    "study export",
    "envs preview",
    "protocols classic",
    "protocols flexible-random",
    "protocols flexible-compositional",
}
# Writes two files named by --train-out and --test-out (neither is "the" output folder).
OTHER_COMMANDS = {"openworld make-features"}
# Prints one sentence per study, for a terminal or a log; the tables are study analyze's.
OTHER_COMMANDS |= {"study summary"}

# Options that hold a count but are not --n-THINGS: bounds (--max-*) and resources.
COUNT_NAMES_ALLOWED = {"--max-samples", "--ray-max-retries", "--workers", "--slurm-cpus"}
RETIRED = {"--seeds", "--steps", "--json", "--repeats", "--shots", "--partitions", "--images"}
RETIRED |= {"--scenario", "--target"}  # shift's sets are --train and --test


def _walk(command, path: tuple[str, ...] = ()):
    if hasattr(command, "commands"):  # a group; hidden ones are deprecated names, not the contract
        for name, sub in sorted(command.commands.items()):
            if not sub.hidden:
                yield from _walk(sub, (*path, name))
    else:
        yield " ".join(path), command


COMMANDS = dict(_walk(typer.main.get_command(app)))


def _options(command) -> list:
    return [p for p in command.params if p.param_type_name == "option"]


def _visible(command) -> list:
    return [p for p in _options(command) if not p.hidden]


def _annotation(option):
    """The Python type of an option (typer >= 0.2x keeps it on the parameter)."""
    return option.type_descriptor.annotation


def _names(option) -> list[str]:
    return [*option.opts, *option.secondary_opts]


def test_every_command_is_classified():
    groups = [TABLE_COMMANDS, ARTEFACT_COMMANDS, OTHER_COMMANDS]
    assert set(COMMANDS) == set().union(*groups)
    assert sum(len(g) for g in groups) == len(COMMANDS)  # disjoint


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_exits_0(name):
    result = runner.invoke(app, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_output_options(name):
    command = COMMANDS[name]
    by_name = {n: opt for opt in _options(command) for n in _names(opt)}
    if name in TABLE_COMMANDS:
        fmt = by_name.get("--format")
        assert fmt is not None and by_name.get("-f") is fmt, f"{name}: --format/-f"
        choices = [member.value for member in _annotation(fmt)]
        assert choices == list(FORMATS) == ["table", "csv", "json", "markdown"]
        assert fmt.default.value == "table"
        out = by_name.get("--output")
        assert out is not None and by_name.get("-o") is out, f"{name}: --output/-o"
        # the one shared definition (oodeval.cli._common), not a look-alike
        assert (fmt.help, out.help) == (FORMAT_OPT.help, OUTPUT_OPT.help), name
        assert "--out" not in by_name, f"{name} prints a table: it writes with --output"
    else:
        assert "--format" not in by_name and "--output" not in by_name, name
    if name in ARTEFACT_COMMANDS:
        assert "--out" in by_name, f"{name} writes artefacts: --out"
        assert _names(by_name["--out"]) == ["--out"], f"{name}: --out has no short form"
    # -o is --output's, -f is --format's, wherever they appear
    if "-o" in by_name:
        assert "--output" in _names(by_name["-o"])
    if "-f" in by_name:
        assert "--format" in _names(by_name["-f"])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_option_names(name):
    command = COMMANDS[name]
    visible = {n for opt in _visible(command) for n in _names(opt)}
    assert not visible & RETIRED, f"{name}: retired option names {visible & RETIRED}"
    for opt in _visible(command):
        long = opt.opts[0]
        if long == "--source":  # the data source: an image spec as `oodeval envs` takes
            assert "digits" in opt.help and "mnist:DIR" in opt.help, f"{name} --source"
        is_int = _annotation(opt) is int or int in typing.get_args(_annotation(opt))
        if is_int and long.endswith("s") and long not in COUNT_NAMES_ALLOWED:
            assert long.startswith("--n-"), f"{name} {long}: a count is --n-THINGS"


# -------------------------------------------------------------------- the formats agree


def _invoke(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def _text_rows(text: str) -> list[list[str]]:
    """Rows of a plain table whose cells hold no spaces."""
    return [line.split() for line in text.strip().splitlines()]


def _markdown_rows(text: str) -> list[list[str]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return [rows[0], *rows[2:]]  # without the rule


def test_openworld_score_formats_give_one_table():
    args = ["openworld", str(REPO / "examples/openworld_predictions.csv"), "--base-classes", "0-2"]
    as_json = json.loads(_invoke([*args, "-f", "json"]))
    as_csv = pd.read_csv(io.StringIO(_invoke([*args, "-f", "csv"])))
    assert list(as_csv.columns) == list(as_json)
    assert as_csv.iloc[0].to_dict() == pytest.approx(as_json)  # csv keeps every digit
    table = _text_rows(_invoke([*args, "-f", "table"]))
    markdown = _markdown_rows(_invoke([*args, "-f", "markdown"]))
    assert table[0] == markdown[0] == ["metric", "value"]
    for rows in (table[1:], markdown[1:]):
        assert [r[0] for r in rows] == list(as_json)
        for key, value in rows:  # six decimals shown: within half a unit of the last
            assert float(value) == pytest.approx(as_json[key], abs=5e-7)


def test_envs_show_formats_give_one_table():
    args = ["envs", "show", "sr-cmnist", "--ratio", "4:1"]
    as_csv = pd.read_csv(io.StringIO(_invoke([*args, "-f", "csv"])))
    as_json = json.loads(_invoke([*args, "-f", "json"]))
    assert dict(zip(as_csv["environment"], as_csv["images"], strict=True)) == as_json["given"]
    markdown = _markdown_rows(_invoke([*args, "-f", "markdown"]))
    assert markdown[0] == ["environment", "images"]
    assert {r[0]: int(r[1]) for r in markdown[1:]} == as_json["given"]
    table = _invoke([*args, "-f", "table"])
    for env, images in as_json["given"].items():
        assert f"  {env:<24} {images:>7} images" in table


@pytest.fixture()
def split_files(tmp_path):
    split, preds = tmp_path / "s.csv", tmp_path / "p.csv"
    rows = [AssignmentRow("a/x/0", "x", "a", "test"), AssignmentRow("b/x/0", "x", "b", "test")]
    rows += [AssignmentRow("b/x/1", "x", "b", "test"), AssignmentRow("c/x/0", "x", "c", "train")]
    write_assignment_csv(rows, split)
    preds.write_text("path,prediction\na/x/0,x\nb/x/0,x\nb/x/1,y\n", encoding="utf-8")
    return split, preds


def test_protocols_evaluate_formats_give_one_table(split_files):
    args = ["protocols", "evaluate", *map(str, split_files)]
    as_csv = list(csv.DictReader(io.StringIO(_invoke([*args, "-f", "csv"]))))
    assert as_csv == [
        {"domain": "a", "images": "1", "accuracy": "1.0"},
        {"domain": "b", "images": "2", "accuracy": "0.5"},
    ]
    summary = json.loads(_invoke([*args, "-f", "json"]))
    for row in as_csv:
        assert summary[f"acc_{row['domain']}"] == float(row["accuracy"])
        assert summary[f"count_{row['domain']}"] == int(row["images"])
    want = [["domain", "images", "accuracy"], ["a", "1", "1.0000"], ["b", "2", "0.5000"]]
    assert _markdown_rows(_invoke([*args, "-f", "markdown"])) == want
    assert _text_rows(_invoke([*args, "-f", "table"]))[:3] == want


def test_deprecated_json_flag_still_works_with_a_note(split_files):
    args = ["protocols", "evaluate", *map(str, split_files)]
    old = runner.invoke(app, [*args, "--json"])
    assert old.exit_code == 0
    assert old.stdout == _invoke([*args, "--format", "json"])
    assert old.stderr == "note: --json is deprecated; use --format json\n"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "args",
    [
        ["openworld", "examples/openworld_predictions.csv", "--base-classes", "0-2"],
        ["envs", "show", "cmnist"],
        ["envs", "list"],
    ],
    ids=["openworld", "envs-show", "envs-list"],
)
def test_output_file_holds_exactly_what_stdout_shows(tmp_path, monkeypatch, args, fmt):
    monkeypatch.chdir(REPO)
    shown = _invoke([*args, "-f", fmt])
    target = tmp_path / f"out.{fmt}"
    result = runner.invoke(app, [*args, "-f", fmt, "-o", str(target)])
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == f"wrote {target}\n"
    assert target.read_text(encoding="utf-8") == shown


def test_format_is_case_insensitive_and_refuses_others():
    args = ["openworld", str(REPO / "examples/openworld_predictions.csv"), "--base-classes", "0-2"]
    assert _invoke([*args, "-f", "JSON"]) == _invoke([*args, "-f", "json"])
    bad = runner.invoke(app, [*args, "-f", "xml"])
    assert bad.exit_code == 2 and "'xml' is not one of" in bad.output


# ------------------------------------------------------------------------------ Ctrl-C


#: The console script a user runs. (Through ``python -m oodeval.cli.main``, train-gmop used to
#: end by SIGINT itself after printing its line, about one run in 36: see
#: test_python_m_exits_130_after_an_interrupt_raised_inside_exec.)
OODEVAL = Path(sys.executable).parent / "oodeval"
#: What a command prints on stderr once it is inside its Ctrl-C guard, when started with
#: `tests.helpers.interrupts.guard_announcer` on its path: the test interrupts then.
GUARDED = "test: inside the Ctrl-C guard"


def _oodeval(args: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [str(OODEVAL), *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},  # tests' own backends
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, so the signal reaches nothing else
        preexec_fn=default_ctrl_c,
    )


def _interrupt(proc: subprocess.Popen, signum: int = signal.SIGINT) -> tuple[int, str]:
    """Send `signum` (Ctrl-C's SIGINT) to `proc`'s group; return its exit status and stderr."""
    try:
        os.killpg(proc.pid, signum)
        _, stderr = proc.communicate(timeout=60)  # seconds, not the minutes of the work left
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, stderr


def _features(tmp_path: Path) -> tuple[Path, Path]:
    """Synthetic open-world features (train.npz, test.npz) in `tmp_path`, for train-gmop."""
    train, test = tmp_path / "train.npz", tmp_path / "test.npz"
    _invoke(
        ["openworld", "make-features", "--source", "synthetic", "--n-shots", "8",
         "--train-out", str(train), "--test-out", str(test)]
    )  # fmt: skip
    return train, test


@pytest.mark.parametrize("stop", STOPS.values(), ids=STOPS)
def test_ctrl_c_or_sigterm_in_train_gmop_is_one_line_and_exit_130_or_143(tmp_path, stop: Stop):
    train, test = _features(tmp_path)
    model, hook = tmp_path / "model.npz", guard_announcer(tmp_path / "hook")
    # The test file has new-class rows: the note about them is printed just before training.
    proc = _oodeval(
        ["openworld", "train-gmop", str(test), "--out", str(model), "--n-steps", "10000000"],
        env={"PYTHONPATH": f"{REPO}{os.pathsep}{hook}", "OODEVAL_TEST_ANNOUNCE": GUARDED},
    )
    first = proc.stderr.readline()
    assert first.startswith("note: ignoring"), first
    guarded = proc.stderr.readline()  # training has begun inside the Ctrl-C guard
    assert guarded == f"{GUARDED}\n", guarded + proc.stderr.read()
    code, rest = _interrupt(proc, stop.signum)
    assert code == stop.status, rest
    kept = f"nothing was written to {model} (the model is saved at the end); run it again"
    assert rest.splitlines() == [f"{stop.word}: {kept}"]
    assert not model.exists()


@pytest.mark.parametrize("stop", STOPS.values(), ids=STOPS)
@pytest.mark.parametrize("command", ["shift", "report"])
def test_ctrl_c_or_sigterm_in_shift_and_report_is_one_line_and_exit_130_or_143(
    tmp_path, command: str, stop: Stop
):
    """shift stopped while it trains its networks (for ten million steps, the cap); report, whose
    work takes a second, stopped inside its guard, which the hook holds until the signal."""
    hook, html = guard_announcer(tmp_path / "hook"), tmp_path / "report.html"
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{hook}", "OODEVAL_TEST_ANNOUNCE": GUARDED}
    if command == "shift":
        args = ["shift", "--train", "digits", "--test", "digits", "--n-seeds", "1"]
        args += ["--n-steps", "10000000"]
        kept = "nothing is kept (the networks train in memory); run it again"
    else:
        args = ["report", "examples/results.csv", "--out", str(html)]
        env["OODEVAL_TEST_HOLD"] = "1"
        kept = f"{html} was not written (the page is written at the end); run it again"
    proc = _oodeval(args, env=env)
    guarded = proc.stderr.readline()
    assert guarded == f"{GUARDED}\n", guarded + proc.stderr.read()
    code, rest = _interrupt(proc, stop.signum)
    assert code == stop.status, rest
    assert rest.splitlines() == [f"{stop.word}: {kept}"]
    assert not html.exists()


def test_python_m_exits_130_after_an_interrupt_raised_inside_exec(tmp_path):
    """CPython marks a KeyboardInterrupt that leaves an ``exec()`` or ``eval()`` of a string as
    unhandled, and keeps the mark once the interrupt is caught; run as ``python -m``, it then ended
    by SIGINT (status -2) after exiting 130. That is how train-gmop ended about one Ctrl-C in 36
    through ``-m``: the SIGINT landed in the lazy imports of the first training step, inside a
    dataclass's ``exec()``. The console script exits through another path, which ignores the mark.
    """
    train, test = _features(tmp_path)
    model, hook = tmp_path / "model.npz", guard_announcer(tmp_path / "hook")
    cmd = [sys.executable, "-m", "oodeval.cli.main", "openworld", "train-gmop", str(test)]
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{hook}", "OODEVAL_TEST_RAISE_IN_EXEC": "1"}
    result = subprocess.run(
        [*cmd, "--out", str(model)],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 130, result.stderr
    kept = f"nothing was written to {model} (the model is saved at the end); run it again"
    assert result.stderr.splitlines()[-1] == f"interrupted: {kept}"


@pytest.mark.slow
@pytest.mark.parametrize("stop", STOPS.values(), ids=STOPS)
def test_ctrl_c_or_sigterm_in_study_estimate_is_one_line_and_exit_130_or_143(tmp_path, stop: Stop):
    started = tmp_path / "started"
    started.mkdir()
    config = write_config(tmp_path, options=f'started_dir = "{started}"')
    token = uuid.uuid4().hex
    # every ERM unit sleeps ten minutes: Ctrl-C comes while one is in flight
    proc = _oodeval(
        ["study", "estimate", str(config), "--workers", "1", "--algorithms", "ERM,IRM"],
        env={MARK: token, "OODEVAL_TEST_HANG": "ERM"},
    )
    wait_until(lambda: any(started.iterdir()), "ERM unit started", proc=proc)
    code, stderr = _interrupt(proc, stop.signum)
    assert code == stop.status, stderr
    assert "Traceback" not in stderr and LEAK_WARNING not in stderr
    lines = [ln for ln in stderr.replace("\r", "\n").splitlines() if ln.startswith(stop.word)]
    assert lines == [
        f"{stop.word}: the timing sample was discarded; run the same command again to re-estimate"
    ]
    assert stderr.rstrip().endswith(lines[0])
    assert_no_process_survives(token)


# ------------------------------------------------------------------- the one renderer


def test_render_frame_round_trips_csv_and_json_with_nan_and_mixed_columns():
    from oodeval.tables import render_frame

    frame = pd.DataFrame(
        {"name": ["a|b", "c"], "n": [1, 2], "x": [0.1 + 0.2, float("nan")], "ok": [True, False]}
    )
    back = pd.read_csv(io.StringIO(render_frame(frame, "csv")))
    pd.testing.assert_frame_equal(back, frame)  # every digit of 0.30000000000000004 kept
    records = json.loads(render_frame(frame, "json"))
    assert records == [
        {"name": "a|b", "n": 1, "x": 0.30000000000000004, "ok": True},
        {"name": "c", "n": 2, "x": None, "ok": False},
    ]
    assert render_frame(frame, "markdown").splitlines() == [
        "| name | n | x | ok |",
        "| --- | ---: | ---: | --- |",
        "| a\\|b | 1 | 0.3000 | True |",
        "| c | 2 | nan | False |",
    ]
    assert render_frame(frame, "table").splitlines() == [
        "name  n       x  ok",
        "a|b   1  0.3000  True",
        "c     2     nan  False",
    ]
    assert render_frame(frame.iloc[:0], "table") == render_frame(frame.iloc[:0], "markdown")


def test_analysis_markdown_is_the_one_renderer_with_three_digits():
    from oodeval.study.analysis.output import _markdown
    from oodeval.tables import frame_cells, markdown_table

    frame = pd.DataFrame({"rho": [0.12345, float("nan")], "scenario": ["s|1", "s2"]})
    assert _markdown(frame) == markdown_table(*frame_cells(frame, 3))
    assert _markdown(frame).splitlines()[2] == "| 0.123 | s\\|1 |"


@pytest.mark.parametrize(("fmt", "golden"), [("table", "txt"), ("markdown", "md")])
def test_import_domainbed_prints_what_it_printed_before_the_one_renderer(
    domainbed_sweep, fmt, golden
):
    """Byte for byte the text of the four separate renderers the one renderer replaced (captured
    from that code on DomainBed's VLCS sweep fixture; the sweep's path reads SWEEP)."""
    want = (REPO / "tests" / "fixtures" / f"domainbed_vlcs_import.{golden}").read_text("utf-8")
    got = _invoke(["import", "domainbed", str(domainbed_sweep), "-f", fmt])
    assert got.replace(str(domainbed_sweep), "SWEEP") == want
