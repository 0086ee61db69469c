"""The self-contained HTML page: sections of text, tables and embedded figures.

Every string that may come from a user's file (algorithm, environment and file names) reaches the
page only through Jinja2 with autoescaping on, so `<script>` in a name is shown as text.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import jinja2
import pandas as pd

from oodeval import __version__
from oodeval.report.figures import Figure


@dataclass
class Table:
    """A table to show: a caption and a DataFrame (index is dropped; make it a column if needed)."""

    title: str
    frame: pd.DataFrame
    caption: str = ""
    digits: int = 3


@dataclass
class Section:
    """One titled part of the report."""

    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)


def _cell(value: object, digits: int) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.{digits}f}"
    return "" if value is None else str(value)


def _table_view(table: Table) -> dict:
    frame = table.frame
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    return {
        "title": table.title,
        "caption": table.caption,
        "numeric": numeric,
        "columns": [str(c) for c in frame.columns],
        "rows": [
            [_cell(v, table.digits) for v in row]
            for row in frame.itertuples(index=False, name=None)
        ],
    }


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("oodeval.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """Render the report as one HTML string with every figure embedded as a data URI."""
    template = _ENV.get_template("report.html.j2")
    return template.render(
        title=title,
        subtitle=subtitle,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        sections=[
            {
                "title": s.title,
                "anchor": f"s{i}",
                "intro": s.intro,
                "facts": s.facts,
                "notes": s.notes,
                "tables": [_table_view(t) for t in s.tables],
                "figures": [
                    {"title": f.title, "caption": f.caption, "src": f.data_uri, "key": f.key}
                    for f in s.figures
                ],
            }
            for i, s in enumerate(sections)
        ],
    )
