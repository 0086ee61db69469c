"""A report to scan, on the stored `quick` study (tests/goldens/quick-results.sqlite.gz): the
Answer as one line per scenario, verdict words that say what the interval says, one colour per
measure in every figure, rank-identical measures as one leaderboard row, tables that fit the
page with words for headers, lists written as lists, and each note said once by the demo."""

from __future__ import annotations

import gzip
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodeval.measures.meta import correlation_verdicts
from tests.helpers.cli import invoke

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "tests" / "goldens" / "quick-results.sqlite.gz"
NOTE = "the data is MNIST's test set alone"


def _quick_copy(folder: Path) -> Path:
    folder.mkdir(parents=True)
    with gzip.open(STORE) as src, open(folder / "results.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return folder


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The stored quick study, its analysis written, and `analyze`'s tables of it."""
    from oodeval.study import load_study
    from oodeval.study.analysis import analyze, write_analysis

    folder = _quick_copy(tmp_path_factory.mktemp("scan") / "quick")
    study = load_study(folder)
    results = analyze(study)
    write_analysis(study, results=results)
    return folder, results


@pytest.fixture(scope="module")
def sections(quick):
    from oodeval.report.study_report import study_sections

    return study_sections(quick[0])


# ----------------------------------------------------------------------------- verdict words
def test_an_interval_covering_0_is_never_printed_as_a_lead(quick):
    """0.062 [-0.671, 0.675] is "ahead, not clearly", not "ahead", in the table, analysis.md
    and what `study analyze` prints."""
    folder, results = quick
    verdicts = results["verdict"]
    covers = (verdicts["difference_low"] <= 0) & (verdicts["difference_high"] >= 0)
    assert covers.sum() == 2  # ratio 3:1 and 4:1
    for row in verdicts.itertuples():
        if row.difference_low > 0:
            assert row.verdict == "clearly ahead"
        elif row.difference_high < 0:
            assert row.verdict == "clearly behind"
        else:
            assert row.verdict == ("ahead" if row.difference > 0 else "behind") + ", not clearly"
    code, out, _ = invoke(["study", "analyze", str(folder)])
    assert code == 0
    markdown = (folder / "analysis" / "analysis.md").read_text()
    for text in (out, markdown):
        assert text.count("| ahead, not clearly |") == 2 and "| ahead |" not in text
        assert "| clearly ahead |" in text


def test_verdict_words_follow_the_interval_on_random_tables():
    rng = np.random.default_rng(7)
    ideal = np.linspace(0.1, 0.9, 8)
    rows = [
        {
            "scenario": f"s{k}",
            "seed": 0,
            "algorithm": f"A{i}",
            "ideal": ideal[i],
            "worst_plus_gap": ideal[i] + rng.normal(0, 0.4),
            "average": ideal[i] + rng.normal(0, 0.4),
        }
        for k in range(12)
        for i in range(8)
    ]
    v = pd.DataFrame(correlation_verdicts(pd.DataFrame(rows), n_resamples=300))
    covering = v[(v["difference_low"] <= 0) & (v["difference_high"] >= 0) & (v["difference"] != 0)]
    assert len(covering) > 0
    assert set(covering["verdict"]) <= {"ahead, not clearly", "behind, not clearly"}


# ----------------------------------------------------------------------------- the Answer
def test_the_answer_is_one_line_per_scenario_in_the_page(sections):
    from oodeval.report.page import render_page

    answer = sections[0]
    assert answer.title == "Answer" and len(answer.items) == 3
    html = render_page("t", "s", sections)
    box = html[html.index('<section id="answer"') : html.index('<section id="verdict"')]
    lines = re.findall(r"<li><b>(.*?):</b> (.*?)</li>", box)
    assert [head for head, _ in lines] == [
        f"sr-cmnist/ratio={r}/scale=1" for r in ("3:1", "4:1", "5:1")
    ]
    assert all(text.startswith("worst+gap picks ") for _, text in lines)


# ----------------------------------------------------------------------------- the palette
def test_each_measure_has_one_colour_in_every_figure(sections):
    from oodeval.report.figures import MEASURE_COLOURS

    drawn: dict[str, set[str]] = {}
    figures = {f.key: f for s in sections for f in s.figures}
    for key in ("figure5", "figure6"):
        for label, colour in figures[key].colours:
            drawn.setdefault(label, set()).add(colour)
    assert set(drawn) == {"worst+gap", "average"}
    assert drawn == {m: {MEASURE_COLOURS[m].lower()} for m in drawn}
    # Figure 1's bars (ERM, the ideal-best algorithm) take no measure's colour
    others = {colour for _, colour in figures["figure1"].colours}
    assert not others & {c.lower() for c in MEASURE_COLOURS.values()}


# ----------------------------------------------------------------------------- leaderboard
def _brute_force_groups(units: pd.DataFrame, measures: list[str]) -> list[set[str]]:
    """Measures whose scipy min-ranks agree in every (scenario, seed) cell."""

    def ranks(m: str) -> list[tuple]:
        return [
            tuple(stats.rankdata(np.round(cell[m].to_numpy(float), 12), method="min"))
            for _, cell in units.groupby(["scenario", "seed"], sort=True)
        ]

    groups: list[set[str]] = []
    for m in measures:
        for group in groups:
            if ranks(next(iter(group))) == ranks(m):
                group.add(m)
                break
        else:
            groups.append({m})
    return groups


def test_rank_identical_measures_are_one_leaderboard_row(quick):
    folder, results = quick
    markdown = (folder / "analysis" / "analysis.md").read_text()
    section = markdown[markdown.index("## Measure leaderboard") :]
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [r.split(" | ")[1] for r in rows] == [
        "gap / gap only",
        "worst+gap",
        "scaled worst / worst / worst only",
        "average",
    ]
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 2", "| 3", "| 4"]
    sentence = section.splitlines()[2]
    assert "gap / gap only (the same ranks in every cell) tracks the ideal measure best" in (
        sentence
    )
    assert "gap and gap only" not in sentence

    from oodeval.measures.meta._leaderboard import rank_identical_groups

    board, units = results["leaderboard"], results["units"]
    measures = board["measure"].tolist()
    groups = rank_identical_groups(units, measures)
    assert [set(g) for g in groups] == _brute_force_groups(units, measures)
    assert len(groups) == len(rows)
    for group in groups:  # the same numbers, as the definition promises
        same = board.set_index("measure").loc[group].drop(columns=["label", "same_ranks"])
        assert (same.nunique(dropna=False) <= 1).all()


# ----------------------------------------------------------------------------- tables, lists
def test_tables_beside_the_paper_show_words_and_one_cell_per_pair(sections):
    tables = {t.title: t for s in sections for t in s.tables}
    paper = tables["Table 1 next to the paper's numbers"].frame
    assert list(paper.columns) == [
        "scenario",
        "rho worst+gap: ours / paper",
        "rho average: ours / paper",
        "tau worst+gap: ours / paper",
        "tau average: ours / paper",
    ]
    assert paper.iloc[0, 1] == "-0.333 / 0.419"
    for table in tables.values():
        if table.title != "config":
            assert not [c for c in table.frame.columns if "_" in str(c)], table.title


def test_the_run_summary_writes_seeds_as_a_list(sections):
    summary = next(s for s in sections if s.title == "Run summary")
    assert dict(summary.facts)["seeds"] == "1 seed (0)"


@pytest.mark.browser
def test_every_table_of_the_report_fits_the_page(quick, tmp_path):
    from tests.helpers.browser import check_page

    page = tmp_path / "quick.html"
    code, _, err = invoke(["report", str(quick[0]), "--out", str(page)])
    assert code == 0, err
    probe = (
        "return Array.from(document.querySelectorAll('.scroll'))"
        ".filter(d => d.scrollWidth > d.clientWidth + 1)"
        ".map(d => d.previousElementSibling.innerText);"
    )
    checked = check_page(page, "report-scan-quick.png", probe=probe)
    assert checked.console_errors == [] and checked.broken_images == []
    assert checked.probed == []  # no table scrolls sideways in a 1280 px window


# ----------------------------------------------------------------------------- notes once
def _demo_commands(out: Path) -> list[list[str]]:
    """The oodeval command lines of scripts/demo.sh, its $OUT set to `out` and its $BIG (where
    the shipped run's report goes) to a folder beside it."""
    commands = []
    big = out.parent / "big"
    for line in (REPO / "scripts" / "demo.sh").read_text().splitlines():
        line = line.replace('"$OUT"', shlex.quote(str(out)))
        line = line.replace('"$BIG/', '"' + str(big) + "/")
        line = line.replace(" examples/", f" {REPO / 'examples'}/")
        words = shlex.split(line, comments=True)
        if words and words[0] == ".venv/bin/oodeval":
            commands.append(words[1:])
    return commands


def test_the_demo_says_the_data_note_once(tmp_path):
    """The demo's commands on the stored quick study (every unit stored, so nothing trains)."""
    folder = _quick_copy(tmp_path / "quick")
    commands = _demo_commands(folder)
    assert commands and commands[0][:3] == ["study", "run", "--preset"]
    said = 0
    for argv in commands:
        code, out, err = invoke(argv)
        assert code == 0, err
        said += (out + err).count(NOTE)
    assert said == 1
    assert (folder / "analysis" / "analysis.md").is_file() and (folder / "report.html").is_file()


def test_study_run_says_the_note_when_it_prints_no_verdict(tmp_path):
    folder = _quick_copy(tmp_path / "quick")
    code, out, err = invoke(["study", "run", "--preset", "quick", "--out", str(folder)])
    assert code == 0, err
    assert (out + err).count(NOTE) == 1 and "Verdict:" not in out
