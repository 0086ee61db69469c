"""The HTML page: escaping of users' strings, embedded figures, and a real-browser load."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from oodeval.report.figures import PALETTE, heatmap, scatter_with_identity
from oodeval.report.page import Section, render_page
from oodeval.tables import Table

EVIL = "<script>alert(1)</script> $x$"


def _page(tmp_path):
    data = pd.DataFrame(
        {"ideal": [0.3, 0.5, 0.7], "measure": [0.35, 0.45, 0.8], "algorithm": ["A", EVIL, "C"]}
    )
    fig = scatter_with_identity(
        data,
        x="ideal",
        y="measure",
        panel=None,
        hue="algorithm",
        key="scatter",
        title=f"Scatter {EVIL}",
        caption="Points on the dashed line agree.",
        xlabel="ideal",
        ylabel="measure",
    )
    matrix = pd.DataFrame(
        np.array([[0.1, 0.2], [0.3, 0.4]]), index=["A", EVIL], columns=["e1", EVIL]
    )
    heat = heatmap(matrix, key="heat", title="Heat", caption="Errors.", colorbar="error")
    table = Table(f"Table {EVIL}", pd.DataFrame({"algorithm": [EVIL], "worst": [0.25]}), "cap")
    html = render_page(
        f"Report {EVIL}",
        "sub",
        [
            Section(
                "One",
                intro=EVIL,
                tables=[table],
                figures=[fig, heat],
                notes=[f"missing {EVIL}"],
                facts=[("file", EVIL)],
            )
        ],
    )
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")
    return html, path, fig


def test_users_strings_are_escaped_in_the_markup(tmp_path):
    html, _, _ = _page(tmp_path)
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; $x$" in html


def test_figures_are_embedded_and_keep_their_data(tmp_path):
    html, _, fig = _page(tmp_path)
    assert html.count('src="data:image/png;base64,') == 2
    assert fig.png.startswith(b"\x89PNG")
    assert list(fig.data["measure"]) == [0.35, 0.45, 0.8]


def test_hue_groups_are_drawn_in_palette_order(tmp_path):
    """The i-th hue (in order of first appearance) is painted PALETTE[i]; no other palette colour.

    Markers are drawn at alpha 0.85 over the white axes, so a marker's inner pixels hold
    0.85 * colour + 0.15 * 255 per channel (2 levels of slack for the rasteriser's rounding).
    """
    _, _, fig = _page(tmp_path)  # hues "A", EVIL, "C"
    pixels = np.asarray(Image.open(io.BytesIO(fig.png)).convert("RGB")).reshape(-1, 3).astype(int)

    def painted(colour: str) -> int:
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(pixels - np.rint(0.85 * rgb + 0.15 * 255)).max(axis=1) <= 2).sum())

    assert all(painted(c) >= 4 for c in PALETTE[:3])
    assert not any(painted(c) for c in PALETTE[3:7])  # black (last) is also the text colour


@pytest.mark.browser
def test_page_loads_in_chromium_with_images_and_shows_names_as_text(tmp_path):
    from tests.helpers.browser import check_page

    _, path, _ = _page(tmp_path)
    page = check_page(path, "report-page-escaping.png")
    assert page.console_errors == []
    assert page.alerts == 0
    assert page.images == 2 and page.broken_images == []
    assert EVIL in page.body_text
    assert page.screenshot.stat().st_size > 0
