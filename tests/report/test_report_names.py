"""Long names in the reports: shortened on the page and in figures, the full name only in tooltips
and the collapsed list of full names; the page keeps its height; the bump chart's texts never
overlap."""

from __future__ import annotations

import itertools
import json
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.text import Text

from oodeval.report.build import build_report
from oodeval.report.figures import bump_chart, bump_chart_figure
from oodeval.report.names import ELLIPSIS, NAME_WIDTH, short_labels, shorten
from oodeval.study.analysis import errors_table
from oodeval.study.config import config_from_dict
from oodeval.study.runner import run_study
from oodeval.study.store import load_study
from tests.report_backend import LENGTHS, name

# ----------------------------------------------------------------------------- shortening


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.text(min_size=0, max_size=120), min_size=1, max_size=25),
    st.integers(min_value=4, max_value=40),
)
def test_short_labels_are_distinct_short_and_leave_short_names_alone(names, width):
    short = short_labels(names, width)
    assert list(short) == list(dict.fromkeys(names))
    assert len(set(short.values())) == len(short)
    for full, label in short.items():
        assert len(label) <= width
        assert label == full if len(full) <= width else ELLIPSIS in label


def test_shorten_keeps_both_ends():
    text = "sr-cmnist/ratio=3:1/scale=" + "9" * 100 + "/seed=4"
    short = shorten(text, 30)
    assert len(short) == 30 and short.startswith("sr-cmnist/ratio") and short.endswith("seed=4")
    assert short_labels([text + "a", text + "b"], 30) == {
        text + "a": shorten(text + "a", 30),
        text + "b": shorten(text + "b", 30),
    }


# ----------------------------------------------------------------------------- the bump chart


def drawn_texts(fig) -> list[Text]:
    """The texts matplotlib draws (after `fig.canvas.draw()`): the figure's and each axes' own
    texts and title, the tick and axis labels of shown axes, the legends' texts."""
    texts = list(fig.texts)
    for ax in fig.axes:
        texts += [*ax.texts, ax.title]
        if ax.axison:
            for axis in (ax.xaxis, ax.yaxis):
                if axis.get_visible():
                    texts += [*axis.get_ticklabels(), axis.label]
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def overlapping(fig) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose boxes share area."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    return [
        (a, b)
        for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2)
        if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 0
        and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 0
    ]


def _ranks(n: int, length: int, *, ties: bool) -> pd.DataFrame:
    rng = np.random.default_rng(n + length)
    left = rng.permutation(n) + 1
    right = rng.permutation(n) + 1
    if ties and n > 3:  # two ties under each measure, ranked the 'min' way
        left = pd.Series(np.minimum(left, n - 2)).rank(method="min").astype(int).to_numpy()
        right = pd.Series(np.where(right <= 2, 1, right)).rank(method="min").astype(int).to_numpy()
    names = [name(k, length) for k in range(n)]
    return pd.DataFrame({"algorithm": names, "average": left, "worst_plus_gap": right})


@pytest.mark.parametrize(
    ("n", "length", "ties"), [(2, 12, False), (5, 5000, False), (14, 5000, True), (40, 60, True)]
)
def test_bump_chart_texts_never_overlap(n, length, ties):
    import matplotlib.pyplot as plt

    ranks = _ranks(n, length, ties=ties)
    fig = bump_chart_figure(ranks, label="algorithm", left="average", right="worst_plus_gap")
    try:
        assert overlapping(fig) == []
        texts = drawn_texts(fig)
        assert len(texts) == 2 * n + 3  # two labels per algorithm, two headers, the axis title
        # every label shows its algorithm's rank next to its (shortened) name
        labels = sorted(t.get_text() for t in texts if t.get_text().startswith(tuple("0123456789")))
        assert labels == sorted(
            f"{r}  {short}"
            for r, short in zip(
                ranks["worst_plus_gap"],
                short_labels(ranks["algorithm"], 28).values(),
                strict=True,
            )
        )
        assert all(len(t.get_text()) <= 40 for t in texts)
    finally:
        plt.close(fig)


def test_bump_chart_keeps_the_ranks_and_lists_the_shortened_names():
    ranks = _ranks(6, 5000, ties=True)
    fig = bump_chart(
        ranks,
        label="algorithm",
        left="average",
        right="worst_plus_gap",
        key="bump",
        title="t",
        caption="c",
    )
    assert fig.data.equals(ranks)
    assert [full for _, full in fig.labels] == list(ranks["algorithm"])


# ----------------------------------------------------------------------------- the pages

# JavaScript: where the text of the long names appears in the page (CHUNKS is filled in).
WHERE_PROBE = """
const chunks = CHUNKS;
const details = document.getElementById('full-names');
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
let outside = 0, inside = 0;
while (walker.nextNode()) {
  const n = walker.currentNode;
  if (chunks.some(c => n.nodeValue.includes(c))) {
    if (details && details.contains(n)) inside++; else outside++;
  }
}
const attributes = new Set();
for (const el of document.querySelectorAll('*'))
  for (const a of el.attributes)
    if (chunks.some(c => a.value.includes(c))) attributes.add(a.name);
const bump = document.querySelector('#fig-bump img');
return {
  outside: outside, inside: inside, attributes: Array.from(attributes),
  open: details ? details.open : null,
  visible: chunks.some(c => document.body.innerText.includes(c)),
  scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
  bump: bump ? [bump.naturalWidth, bump.getBoundingClientRect().width] : null,
};
"""


def _chunks() -> list[str]:
    """A 100-character piece of the middle of every 5,000-character name of the studies."""
    return [name(k, 5000)[2000:2100] for k in range(5)]


def _config(length: int):
    return config_from_dict(
        {
            "name": name(0, length, kind="study"),
            "backend": "tests.report_backend",
            "algorithms": [name(k, length) for k in range(5)],
            "seeds": [0, 1],
            "steps": 10,
            "scenarios": [
                {
                    "family": "synthetic",
                    "ratio": "3:1",
                    "scale": s,
                    "label": name(s, length, kind="scenario"),
                }
                for s in (1, 2)
            ],
        }
    )


@pytest.fixture(scope="module")
def named_studies(tmp_path_factory):
    """The same study (same numbers) under names of 12, 40 and 5,000 characters, with a results
    file of its first scenario."""
    out = {}
    for length in LENGTHS:
        directory = tmp_path_factory.mktemp(f"names{length}")
        run_study(_config(length), directory / "study", workers=1, progress=False)
        errors = errors_table(load_study(directory / "study"))
        first = errors[errors.scenario == errors.scenario.iloc[0]].drop(columns="scenario")
        first.to_csv(directory / "results.csv", index=False)
        out[length] = directory
    return out


class _Where(HTMLParser):
    """Where text pieces occur in a page: text inside / outside the list of full names, and the
    names of the attributes holding them."""

    def __init__(self, chunks: list[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.chunks, self.depth, self.in_details = chunks, 0, 0
        self.inside = self.outside = 0
        self.attributes: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.depth += 1
        if tag == "details" and ("id", "full-names") in attrs:
            self.in_details = self.depth
        self.attributes |= {k for k, v in attrs if v and any(c in v for c in self.chunks)}

    def handle_endtag(self, tag):
        if self.in_details == self.depth:
            self.in_details = 0
        self.depth -= 1

    def handle_data(self, data):
        if any(c in data for c in self.chunks):
            if self.in_details:
                self.inside += 1
            else:
                self.outside += 1


@pytest.mark.parametrize("source", ["study", "results.csv"])
def test_names_are_escaped_and_in_full_only_in_tooltips_and_the_list(named_studies, source):
    html = build_report(named_studies[5000] / source)
    assert "<b>&" not in html  # the names' markup is text
    where = _Where(_chunks())
    where.feed(html)
    assert where.outside == 0 and where.inside > 0
    assert where.attributes == {"title"}


@pytest.mark.browser
@pytest.mark.parametrize("source", ["study", "results.csv"])
def test_long_names_keep_the_page_short_and_in_tooltips(named_studies, source, tmp_path):
    """Every shown name is cut to NAME_WIDTH (40) characters or fewer, so the page with 5,000-
    character names is laid out as the one whose names have exactly 40: same height but for the
    ellipses' wrapping (5%). Names of 12 characters are never cut: that page may be shorter, but
    not by a third (before the fix: 12,428 px against 4,246 px)."""
    from tests.helpers.browser import check_page

    assert NAME_WIDTH == 40 == LENGTHS[1]
    probe = WHERE_PROBE.replace("CHUNKS", json.dumps(_chunks()))
    heights = {}
    for length in LENGTHS:
        page = tmp_path / f"{length}.html"
        page.write_text(build_report(named_studies[length] / source), encoding="utf-8")
        shot = f"report-names-{source.split('.')[0]}-{length}.png"
        checked = check_page(page, shot, probe=probe)
        assert checked.console_errors == [] and checked.broken_images == []
        heights[length] = checked.height
        seen = checked.probed
        assert seen["scrollWidth"] <= seen["innerWidth"]  # nothing runs off the page
        if source == "results.csv":
            natural, shown = seen["bump"]
            assert natural > 0 and 0 < shown <= seen["innerWidth"]
        if length == 5000:
            assert seen["outside"] == 0 and seen["inside"] > 0 and seen["open"] is False
            assert seen["attributes"] == ["title"] and not seen["visible"]
    assert heights[5000] <= 1.05 * heights[40]
    assert heights[5000] < 1.5 * heights[12]
