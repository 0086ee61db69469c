"""Safe terminal text: a user's name holding a newline, a tab, a control or a bidi character is
shown escaped (``\\n``, ``\\t``, ``\\u202e``) in every text and markdown output, so one row stays
one line and nothing reorders the text around it; CSV and JSON keep the names exact; the HTML
report shows the same escapes.

`oodeval._text.safe_text` is the one function; these tests check it (a property over any text),
the table renderers (a property over any names) and each command that prints names or paths, end
to end with hostile names: `measures`, `import domainbed`, `study analyze`, `study status`,
`study verify`, `study measures`, `report`, and error lines echoing a path.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from oodeval._text import safe_text, shortened
from oodeval.cli._common import LONGEST_ERROR
from oodeval.cli.main import run
from oodeval.study.config import config_from_dict
from oodeval.study.runner import run_study
from oodeval.tables import markdown_table, render_frame, text_table
from tests.helpers.text import HOSTILE_CHARS, RAW_UNSAFE, markdown_cells, unescape
from tests.hostile_backend import HOSTILE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "results.csv"
SWEEP = ROOT / "examples" / "domainbed-sweep"

# The example's algorithms renamed: each name holds one character a terminal must not get raw.
RENAMED = {
    "ERM": "ERM\nnew",
    "IRM": "IRM\there",
    "VREx": "V\u202eREx",
    "GroupDRO": "Group|DRO",
    "Mixup": "Mix\\nup",
}

names = st.text(
    alphabet=st.one_of(st.characters(), st.sampled_from(HOSTILE_CHARS + "\udcff")),
    min_size=1,
    max_size=24,
)


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run `oodeval ARGV` as the console script does; return (status, stdout, stderr)."""
    with CliRunner().isolation() as (out, err, _):
        try:
            code = run(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()  # `echo_output` writes to sys.stdout, which buffers
        sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode()


def assert_clean(text: str) -> None:
    """No raw control, bidi or separator character in `text` (newlines are the program's own)."""
    found = RAW_UNSAFE.search(text)
    assert found is None, f"raw {found.group()!r} in {text[max(0, found.start() - 80) :][:160]!r}"


# ----------------------------------------------------------------------------- the function


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.one_of(st.characters(), st.sampled_from(HOSTILE_CHARS + "\udcff"))))
def test_safe_text_is_one_clean_line_that_reads_back(text):
    shown = safe_text(text)
    assert "\n" not in shown
    assert_clean(shown)
    assert unescape(shown) == text
    shown.encode("utf-8")  # a terminal can encode it (no lone surrogate)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("ERM\nnew", "ERM\\nnew"),
        ("IRM\there", "IRM\\there"),
        ("V\u202eREx", "V\\u202eREx"),
        ("a\u2066b\u2069", "a\\u2066b\\u2069"),
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("\x00\x1b[31m\x7f\x85", "\\x00\\x1b[31m\\x7f\\x85"),
        ("C:\\runs", "C:\\\\runs"),
        ("Mix\\nup", "Mix\\\\nup"),  # a literal backslash-n is not a newline
        ("é 中 ✓ <b>&|", "é 中 ✓ <b>&|"),
        ("", ""),
    ],
)
def test_safe_text_escapes_exactly_the_unsafe_characters(name, shown):
    assert safe_text(name) == shown


def test_ordinary_names_come_back_unchanged_as_the_same_object():
    name = "sr-cmnist/ratio=3:1/scale=1 ERM (seed 0)"
    assert safe_text(name) is name


# ----------------------------------------------------------------------------- the renderers


@settings(max_examples=150, deadline=None)
@given(st.lists(names, min_size=1, max_size=6), names)
def test_a_text_table_has_one_line_per_row_whatever_the_names(cells, column):
    rows = [[name, f"{i}.5"] for i, name in enumerate(cells)]
    text = text_table([column, "value"], rows, right=[False, True])
    lines = text.split("\n")
    assert len(lines) == len(rows) + 1
    assert_clean(text)
    for line, name in zip(lines, [column, *cells], strict=True):
        shown = safe_text(name)
        assert line.startswith(shown)
        assert unescape(shown) == name


@settings(max_examples=150, deadline=None)
@given(st.lists(names, min_size=1, max_size=6), names)
def test_a_markdown_table_has_one_line_per_row_and_reads_back(cells, column):
    rows = [[name, name] for name in cells]
    text = markdown_table([column, "again"], rows)
    lines = text.split("\n")
    assert len(lines) == len(rows) + 2
    assert_clean(text)
    assert markdown_cells(lines[0]) == [column, "again"]
    for line, name in zip(lines[2:], cells, strict=True):
        assert markdown_cells(line) == [name, name]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(HOSTILE_CHARS + "ab"), min_size=1), min_size=1))
def test_csv_and_json_keep_the_names_exact(cells):
    frame = pd.DataFrame({"algorithm": cells, "error": [0.5] * len(cells)})
    assert [r["algorithm"] for r in json.loads(render_frame(frame, "json"))] == cells
    # a "\r" in a name is quoted too (pandas leaves it bare), so the csv module reads it back
    read = list(csv.DictReader(io.StringIO(render_frame(frame, "csv"), newline="")))
    assert [r["algorithm"] for r in read] == cells


def test_ordinary_tables_render_as_before():
    frame = pd.DataFrame({"algorithm": ["ERM", "a|b"], "error": [0.25, float("nan")]})
    assert render_frame(frame, "table") == "algorithm   error\nERM        0.2500\na|b           nan"
    assert render_frame(frame, "markdown") == (
        "| algorithm | error |\n| --- | ---: |\n| ERM | 0.2500 |\n| a\\|b | nan |"
    )


# ----------------------------------------------------------------------------- `oodeval measures`


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory) -> Path:
    """The shipped example with its five algorithms renamed to `RENAMED`."""
    frame = pd.read_csv(EXAMPLE)
    frame["algorithm"] = frame["algorithm"].map(RENAMED)
    assert frame["algorithm"].notna().all()
    path = tmp_path_factory.mktemp("hostile") / "results.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_measures_prints_hostile_names_escaped_and_one_row_per_line(hostile_results, fmt):
    plain = invoke(["measures", str(EXAMPLE), "-f", fmt])
    code, out, err = invoke(["measures", str(hostile_results), "-f", fmt])
    assert code == 0 == plain[0], err
    assert_clean(out + err)
    # the same lines as the example with ordinary names, and the rows hold the escaped names
    assert len(out.splitlines()) == len(plain[1].splitlines())
    assert len(err.splitlines()) == len(plain[2].splitlines())
    for shown in ("ERM\\nnew", "IRM\\there", "V\\u202eREx", "Mix\\\\nup"):
        assert shown in out
    assert ("Group\\|DRO" if fmt == "markdown" else "Group|DRO") in out
    if fmt == "markdown":
        header = next(line for line in out.splitlines() if line.startswith("| seed | algorithm"))
        width = len(markdown_cells(header))
        rows = [markdown_cells(line) for line in out.splitlines() if line.startswith("| 0 | ")]
        assert {cells[1] for cells in rows if len(cells) == width} == set(RENAMED.values())


def test_measures_csv_and_json_keep_the_hostile_names_exact(hostile_results):
    code, out, _ = invoke(["measures", str(hostile_results), "-f", "json"])
    assert code == 0
    payload = json.loads(out)
    assert set(payload["info"]["algorithms"]) == set(RENAMED.values())
    assert {r["algorithm"] for r in payload["measures"]} == set(RENAMED.values())
    code, out, _ = invoke(["measures", str(hostile_results), "-f", "csv"])
    assert code == 0
    read = csv.DictReader(io.StringIO(out, newline=""))
    assert {r["algorithm"] for r in read if r["algorithm"]} >= set(RENAMED.values())


# ----------------------------------------------------------------------------- `import domainbed`


@pytest.fixture(scope="module")
def hostile_sweep(tmp_path_factory) -> Path:
    """The shipped DomainBed sweep with its algorithms renamed to `RENAMED`'s names."""
    sweep = tmp_path_factory.mktemp("sweep") / "sweep"
    shutil.copytree(SWEEP, sweep)
    for path in sweep.glob("*/results.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for r in records:
            r["args"]["algorithm"] = RENAMED.get(r["args"]["algorithm"], r["args"]["algorithm"])
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return sweep


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_import_domainbed_prints_hostile_names_escaped(hostile_sweep, fmt):
    plain = invoke(["import", "domainbed", str(SWEEP), "-f", fmt])
    code, out, err = invoke(["import", "domainbed", str(hostile_sweep), "-f", fmt])
    assert code == 0 == plain[0], err
    assert_clean(out + err)
    assert len(out.splitlines()) == len(plain[1].splitlines())
    renamed = [new for old, new in RENAMED.items() if f"{old}" in plain[1]]
    assert renamed, "the sweep holds none of the renamed algorithms"
    for name in renamed:
        shown = safe_text(name)
        assert (shown.replace("|", "\\|") if fmt == "markdown" else shown) in out


def test_import_domainbed_json_keeps_the_hostile_names_exact(hostile_sweep):
    code, out, _ = invoke(["import", "domainbed", str(hostile_sweep), "-f", "json"])
    assert code == 0
    found = {r["algorithm"] for r in json.loads(out)}
    assert found & set(RENAMED.values()) and not found & set(RENAMED)


# ----------------------------------------------------------------------------- a study


@pytest.fixture(scope="module")
def hostile_study(tmp_path_factory) -> Path:
    """A finished synthetic study whose name, scenarios and algorithms hold hostile characters."""
    directory = tmp_path_factory.mktemp("study") / "study"
    config = config_from_dict(
        {
            "name": "study\nwith\u202ename",
            "backend": "tests.hostile_backend",
            "algorithms": list(HOSTILE),
            "seeds": [0, 1],
            "steps": 10,
            "scenarios": [
                {"family": "synthetic", "ratio": "3:1", "scale": s, "label": f"scen\t{s}\u2066"}
                for s in (1, 2)
            ],
        }
    )
    run_study(config, directory, workers=1, progress=False)
    return directory


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_study_commands_print_hostile_names_escaped(hostile_study, fmt):
    shown = [safe_text(n) for n in HOSTILE]
    for argv in (["study", "status"], ["study", "verify"], ["study", "measures"]):
        code, out, err = invoke([*argv, str(hostile_study), "-f", fmt])
        assert code == 0, (argv, err)
        assert_clean(out + err)
    code, out, err = invoke(["study", "status", str(hostile_study), "-f", fmt])
    assert "study\\nwith\\u202ename" in out
    assert all((s.replace("|", "\\|") if fmt == "markdown" else s) in out for s in shown)
    code, out, err = invoke(["study", "analyze", str(hostile_study), "-f", fmt])
    assert code == 0, err
    assert_clean(out + err)
    verdict_rows = [line for line in out.splitlines() if line.startswith("| scen\\t")]
    assert [markdown_cells(line)[0] for line in verdict_rows] == ["scen\t1\u2066", "scen\t2\u2066"]


def test_analysis_md_escapes_and_the_csvs_keep_the_names(hostile_study):
    code, _, err = invoke(["study", "analyze", str(hostile_study)])
    assert code == 0, err
    markdown = (hostile_study / "analysis" / "analysis.md").read_text(encoding="utf-8")
    assert_clean(markdown)
    assert markdown.startswith("# Study analysis: study\\nwith\\u202ename\n")
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    widths = {len(markdown_cells(line)) for line in rows if "scen" in line}
    assert widths and all(w > 1 for w in widths)  # every row split into its cells, none broken
    units = pd.read_csv(hostile_study / "analysis" / "units.csv", comment="#")
    assert set(units["algorithm"]) == set(HOSTILE)
    assert set(units["scenario"]) == {"scen\t1\u2066", "scen\t2\u2066"}


def test_the_html_report_shows_bidi_and_newlines_escaped(hostile_study, tmp_path):
    folder = tmp_path / "copy\u202eof"  # the page's subtitle names the folder
    shutil.copytree(hostile_study, folder)
    page = tmp_path / "report.html"
    code, out, err = invoke(["report", str(folder), "--out", str(page)])
    assert code == 0, err
    assert_clean(out + err)
    html = page.read_text(encoding="utf-8")
    assert_clean(html)
    assert "V\\u202eREx" in html and "ERM\\nnew" in html and "scen\\t1\\u2066" in html
    assert "copy\\u202eof" in html and "Group|DRO" in html


HOSTILE_TOML = r"""
name = "study\nwith\u202Ename"
backend = "tests.hostile_backend"
algorithms = ["ERM\nnew", "IRM\there", "V\u202EREx", "Group|DRO"]
seeds = [0]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1, label = "scen\t1\u2066" }]
[unit_options]
fail_algorithms = ["ERM\nnew"]
warn_algorithms = ["V\u202EREx"]
"""


def test_study_run_prints_failures_and_warnings_of_hostile_units_one_line_each(tmp_path):
    config = tmp_path / "hostile.toml"
    config.write_text(HOSTILE_TOML, encoding="utf-8")
    argv = ["study", "run", str(config), "--out", str(tmp_path / "s"), "--no-progress"]
    code, out, err = invoke(argv)  # (the bar redraws itself with its own carriage returns)
    assert code == 0, err
    assert_clean(out + err)
    failed = [line for line in err.splitlines() if line.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith("failed: scen\\t1\\u2066 ERM\\nnew seed 0: ")
    warned = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert any("(first raised by scen\\t1\\u2066 V\\u202eREx seed 0)" in w for w in warned), err


# ----------------------------------------------------------------------------- paths in errors


def test_an_out_path_with_a_newline_is_one_error_line(tmp_path):
    blocker = tmp_path / "file\nname"
    blocker.write_text("x")
    code, out, err = invoke(
        ["study", "run", str(ROOT / "examples" / "study.toml"), "--out", str(blocker / "study")]
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: --out ")
    assert "file\\nname" in err
    assert_clean(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file\nname"]


def test_an_output_path_with_a_newline_and_a_bidi_override_is_one_error_line(tmp_path):
    target = tmp_path / "no\nsuch\u202e" / "out.csv"
    code, out, err = invoke(["measures", str(EXAMPLE), "--output", str(target)])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no\\nsuch\\u202e" in err
    assert_clean(err)
    assert list(tmp_path.iterdir()) == []


def test_a_results_file_path_with_a_tab_is_shown_escaped(tmp_path):
    missing = tmp_path / "res\tults.csv"
    code, _, err = invoke(["measures", str(missing)])
    assert code == 2 and err.count("\n") == 1 and "res\\tults.csv" in err
    assert_clean(err)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab '\""), max_size=400), st.integers(5, 60))
def test_shortened_cuts_only_long_spans_and_never_lengthens(text, longest):
    cut = shortened(text, longest=longest)
    assert len(cut) <= len(text)
    # nothing to cut: every space-free run and quoted span is at most `longest` long
    spans = [*text.split(), *text.split("'")[1::2], *text.split('"')[1::2]]
    if all(len(span) <= longest for span in spans):
        assert cut == text


@pytest.mark.parametrize("cell", ["A" * 3000, "A " * 1500])
def test_an_error_naming_a_huge_name_stays_a_short_line(tmp_path, cell):
    """A 3,000-character algorithm name in a refused row: the error line names it, shortened."""
    results = tmp_path / "r.csv"
    rows = ["algorithm,seed,split,environment,error"]
    rows += [f"{cell},0,loo,e{e},0.1" for e in range(4)] + [f"{cell},0,all,e0,nan"]
    results.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, out, err = invoke(["measures", str(results)])
    assert code == 2 and out == "" and err.count("\n") == 1, err[:300]
    assert err.startswith("error: ") and "error is NaN" in err, err[:300]
    if " " not in cell:  # a name of words is printed whole: no span in it is long
        assert len(err) < LONGEST_ERROR + 100 and "characters]..." in err, err[:300]
