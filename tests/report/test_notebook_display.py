"""What a notebook shows for `oodeval.score`'s `Scores`, a loaded `Study` and a `Leaderboard`:
the answer line first, then the very cells the commands print (`oodeval measures`, `oodeval
study status`, `oodeval study measures`), in the HTML report's markup and escaping; a short
plain repr; the markdown the commands print when Jinja2 is missing; and, in headless Chromium,
tables a reader sees with no script of a name run."""

from __future__ import annotations

import importlib.util
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape

import oodeval
from oodeval.report.page import Section, render_page
from oodeval.study.analysis import Leaderboard, analyze, leaderboard_of
from oodeval.study.config import config_from_dict
from oodeval.study.runner import run_study
from oodeval.study.store import load_study
from oodeval.tables import Table
from tests.helpers.cli import invoke
from tests.helpers.text import markdown_cells
from tests.report_backend import name

EVIL = "<script>alert(1)</script>&\"'"
IMG = '<img src=x onerror="window.ran=1">'
LEADERBOARD_MEASURES = ["average", "worst_plus_gap", "worst", "gap", "scaled_worst"]


# ----------------------------------------------------------------------------- reading back


class Shown(HTMLParser):
    """What an HTML block shows, in order: the intro sentence, the lines under it, and each
    table as (title, header, rows) of cell texts (entities decoded)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.intro: str | None = None
        self.lines: list[str] = []
        self.tables: list[tuple[str, list[str], list[list[str]]]] = []
        self.texts: list[str] = []
        self._into: list[str] | None = None
        self._title = ""
        self._row: list[str] | None = None
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag in ("p", "li", "h3", "th", "td") and (tag != "p" or ("class", "intro") in attrs):
            self._into = []
        if tag == "table":
            self.tables.append((self._title, [], []))
        elif tag == "tr":
            self._row = []

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._into is not None:
            self._into.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("p", "li", "h3", "th", "td") and self._into is not None:
            text, self._into = "".join(self._into), None
            if tag == "p" and self.intro is None:
                self.intro = text
            elif tag == "li":
                self.lines.append(text)
            elif tag == "h3":
                self._title = text
            elif self._row is not None:
                self._row.append(text)
        elif tag == "tr" and self._row is not None:
            _, header, rows = self.tables[-1]
            if header:
                rows.append(self._row)
            else:
                header.extend(self._row)
            self._row = None


def markdown_tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Each markdown table of a command's output: (the ``###`` heading above it, or "", the
    header cells, the rows' cells)."""
    tables, title, lines = [], "", text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("### "):
            title = line[4:]
        elif line.startswith("| ") and (i == 0 or not lines[i - 1].startswith("|")):
            end = next((k for k, r in enumerate(lines[i:]) if not r.startswith("|")), None)
            block = lines[i:] if end is None else lines[i : i + end]
            rows = [markdown_cells(r) for r in block[2:]]
            tables.append((title, markdown_cells(block[0]), rows))
    return tables


def as_printed(cell: str) -> str:
    """An HTML cell as the text output writes it: the report shows NaN as an en dash."""
    return "nan" if cell == "–" else cell


def assert_same_tables(html_tables, printed_tables, *, titles: bool = True) -> None:
    """The same tables, cell for cell, and, with `titles`, under the same headings (a table
    printed under none may have a title in the HTML)."""
    assert len(html_tables) == len(printed_tables) > 0
    for (title, header, rows), (p_title, p_header, p_rows) in zip(
        html_tables, printed_tables, strict=True
    ):
        if p_title and titles:
            assert title == p_title
        assert header == p_header
        assert [[as_printed(c) for c in row] for row in rows] == p_rows


def table_blocks(html: str) -> list[str]:
    return re.findall(r"<table>.*?</table>", html, flags=re.DOTALL)


def assert_nothing_unescaped(html: str, shown: Shown) -> None:
    """No markup of a name reaches the HTML: no script or image element, no event handler,
    only the renderer's own attributes, and every name shown exactly as text."""
    tags = {tag for tag, _ in shown.tags}
    assert not tags & {"script", "img", "iframe", "object"}
    assert tags <= {"div", "style", "section", "p", "ul", "li", "h3", "table", "thead"} | {
        "tbody",
        "tr",
        "th",
        "td",
        "span",
        "details",
        "summary",
        "ol",
        "b",
        "dl",
        "dt",
        "dd",
    }
    assert {key for _, attrs in shown.tags for key, _ in attrs} <= {"class", "id", "scope", "title"}
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert str(escape(EVIL)) in html
    assert EVIL in "".join(shown.texts)


# ----------------------------------------------------------------------------- Scores


def long_results() -> pd.DataFrame:
    """Loo and all rows of 4 algorithms x 2 seeds; an algorithm, an environment and a seed
    carry hostile names."""
    rng = np.random.default_rng(7)
    rows = []
    for seed in ("s0", EVIL):
        for algorithm in ("ERM", EVIL, "IRM", IMG):
            for split, envs in (("loo", 4), ("all", 5)):
                for env in ["e1", EVIL, "e3", "e4", "e5"][:envs]:
                    error = round(float(rng.uniform(0.1, 0.6)), 3)
                    rows.append((seed, algorithm, env, split, error))
    return pd.DataFrame(rows, columns=["seed", "algorithm", "environment", "split", "error"])


@pytest.fixture(scope="module")
def scores_and_cli(tmp_path_factory: pytest.TempPathFactory):
    frame = long_results()
    path = tmp_path_factory.mktemp("scores") / "results.csv"
    frame.to_csv(path, index=False)
    printed = {}
    for fmt in ("table", "markdown"):
        code, out, err = invoke(["measures", str(path), "--format", fmt])
        assert code == 0, out + err
        printed[fmt] = out.replace(str(path), "results")  # the source `Scores` names
    return oodeval.score(frame), printed


def test_scores_html_starts_with_the_answer_and_shows_the_cli_tables(scores_and_cli):
    scores, printed = scores_and_cli
    html = scores._repr_html_()
    shown = Shown(html)
    assert shown.intro == scores.answer
    assert html.index('class="intro"') < html.index("<table>")
    assert shown.lines[0] == scores.header()
    assert printed["table"].splitlines()[0] == scores.answer  # the command's first line too
    assert_same_tables(shown.tables, markdown_tables(printed["markdown"]))
    # the plain-text tables hold the same cells, row by row (names hold no blanks here)
    blocks = printed["table"].split("\n\n")[2:]
    assert len(blocks) == len(shown.tables)
    for block, (title, header, rows) in zip(blocks, shown.tables, strict=True):
        lines = block.splitlines()
        assert lines[0] == title
        texts = [" ".join(header)] + [" ".join(as_printed(c) for c in row) for row in rows]
        assert [line.split() for line in lines[1:]] == [t.split() for t in texts]


def test_scores_html_escapes_names_as_the_report_page_does(scores_and_cli):
    scores, _ = scores_and_cli
    html = scores._repr_html_()
    assert_nothing_unescaped(html, Shown(html))
    assert IMG in "".join(Shown(html).texts)
    tables = [Table(title, df, digits=4) for _, title, df in scores.sections()]
    page = render_page("results", "", [Section("Scores", tables=tables)])
    assert table_blocks(html) == table_blocks(page)


def test_scores_prints_as_the_command_and_repr_is_two_short_lines(scores_and_cli):
    scores, printed = scores_and_cli
    assert str(scores) == printed["table"]
    assert scores._repr_markdown_() == printed["markdown"]
    first, second = repr(scores).splitlines()
    assert first == f"<Scores: {scores.answer}>"
    assert second.startswith(scores.header() + "; tables: measures, correlations")
    assert "choices" in second and "DataFrame" not in repr(scores)


def test_without_jinja2_a_notebook_falls_back_to_the_markdown(scores_and_cli, monkeypatch):
    scores, printed = scores_and_cli
    find_spec = importlib.util.find_spec

    def no_jinja(module: str, *args):
        return None if module == "jinja2" else find_spec(module, *args)

    monkeypatch.setattr(importlib.util, "find_spec", no_jinja)
    assert scores._repr_html_() is None
    assert scores._repr_markdown_() == printed["markdown"]


def test_two_displays_on_one_page_keep_distinct_ids():
    scores = oodeval.score(long_results())
    ids = [re.findall(r'id="([^"]+)"', scores._repr_html_()) for _ in range(2)]
    assert ids[0] and not set(ids[0]) & set(ids[1])


# ----------------------------------------------------------------------------- Study, leaderboard


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """5 algorithms x 2 seeds x 2 scenarios of the synthetic backend; the study and a scenario
    carry the hostile name."""
    config = config_from_dict(
        {
            "name": EVIL,
            "backend": "tests.report_backend",
            "algorithms": [name(k, 12) for k in range(5)],
            "seeds": [0, 1],
            "steps": 10,
            "scenarios": [
                {"family": "synthetic", "ratio": "3:1", "scale": 1, "label": EVIL},
                {"family": "synthetic", "ratio": "4:1", "scale": 2},
            ],
        }
    )
    directory = tmp_path_factory.mktemp("study") / "s"
    run_study(config, directory, workers=1, progress=False)
    return directory


def test_study_html_starts_with_its_status_and_shows_the_status_table(study_dir):
    study = load_study(study_dir)
    html = study._repr_html_()
    shown = Shown(html)
    assert shown.intro == study.status_line()
    assert html.index('class="intro"') < html.index("<table>")
    code, out, err = invoke(["study", "status", str(study_dir), "--format", "markdown"])
    assert code == 0, out + err
    assert out.splitlines()[0] == study.status_line()
    assert_same_tables(shown.tables, markdown_tables(out))
    assert shown.tables[0][2][0][:2] == ["scenario", EVIL]
    assert shown.lines == [line[2:] for line in out.splitlines() if line.startswith("- ")]
    assert_nothing_unescaped(html, shown)


def test_study_prints_its_status_and_repr_is_one_line(study_dir):
    study = load_study(study_dir)
    code, out, _ = invoke(["study", "status", str(study_dir)])
    assert code == 0
    assert str(study) + "\n" == out
    assert repr(study) == f"<Study {study_dir}: {study.status_line()}>"
    code, out, _ = invoke(["study", "status", str(study_dir), "--format", "markdown"])
    assert study._repr_markdown_() + "\n" == out


def test_leaderboard_html_starts_with_its_sentence_and_shows_the_cli_table(study_dir):
    board = leaderboard_of(study_dir, LEADERBOARD_MEASURES, n_resamples=50, seed=3)
    html = board._repr_html_()
    shown = Shown(html)
    assert shown.intro == board.sentence
    assert html.index('class="intro"') < html.index("<table>")
    argv = ["study", "measures", str(study_dir), "--measures", ",".join(LEADERBOARD_MEASURES)]
    argv += ["--bootstrap", "50", "--seed", "3"]
    code, out, err = invoke([*argv, "--format", "markdown"])
    assert code == 0, out + err
    blocks = out.split("\n\n")
    assert blocks[0] == f"### Study {EVIL}"
    assert blocks[1] == board.sentence  # first after the study's heading, as in the notebook
    assert_same_tables(shown.tables, markdown_tables(out), titles=False)
    assert [row[1] for row in shown.tables[0][2]]  # one row per measure (or group)
    assert board.footnote in "".join(shown.texts)
    code, text, _ = invoke(argv)
    assert board.render("table") in text


def test_leaderboard_of_a_study_is_the_one_analyze_computes(study_dir):
    study = load_study(study_dir)
    board = leaderboard_of(study)
    pd.testing.assert_frame_equal(board.board, analyze(study)["leaderboard"])
    wrapped = Leaderboard(analyze(study)["leaderboard"])
    assert wrapped.render("markdown") == board._repr_markdown_()
    assert repr(board) == f"<Leaderboard of {len(board.board)} measures: {board.sentence}>"
    assert "\n" not in repr(board)


# ----------------------------------------------------------------------------- a real browser


@pytest.mark.browser
def test_a_display_in_chromium_shows_its_tables_and_runs_no_script(tmp_path, scores_and_cli):
    from tests.helpers.browser import check_page

    scores, _ = scores_and_cli
    # a notebook puts the block into its page as it is
    page = tmp_path / "notebook.html"
    page.write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
        f"{scores._repr_html_()}</body></html>",
        encoding="utf-8",
    )
    probe = (
        "return {tables: Array.from(document.querySelectorAll('table'))"
        ".filter(t => t.offsetHeight > 0 && t.offsetWidth > 0).length,"
        " scripts: document.scripts.length, ran: window.ran === undefined ? 0 : 1,"
        " first: document.querySelector('.intro').innerText};"
    )
    shown = check_page(page, "notebook-scores.png", probe=probe)
    assert shown.console_errors == []
    assert shown.alerts == 0 and shown.images == 0
    assert shown.probed == {
        "tables": len(scores.sections()),
        "scripts": 0,
        "ran": 0,
        "first": scores.answer,
    }
    assert EVIL in shown.body_text and IMG in shown.body_text
    assert shown.body_text.lstrip().startswith(scores.answer)
