"""The self-contained HTML page: sections of text, tables (`oodeval.tables.Table`) and embedded
figures.

Every string that may come from a user's file (algorithm, environment and file names) reaches the
page only escaped (Jinja2 with autoescaping on, or markupsafe), so `<script>` in a name is shown
as text, and after `oodeval._text.safe_text`, so a bidi override (U+202E) in a name is shown as
``\\u202e`` instead of reversing the text after it, and a newline as ``\\n``, as the terminal
shows them. Names can be any length: the page shows them shortened (`oodeval.report.names`) with the
full text in a tooltip (``title``) and in the collapsed "Full names" list at the end, so a
5,000-character name costs one line, not a page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import jinja2
import pandas as pd
from markupsafe import Markup, escape

from oodeval import __version__
from oodeval._text import safe_text
from oodeval._time import utc_minute_stamp
from oodeval.report.figures import Figure
from oodeval.report.names import NAME_WIDTH, TEXT_WIDTH, shorten
from oodeval.tables import Table


@dataclass
class Section:
    """One titled part of the report.

    ``facts`` are (key, value) pairs; a value is a text or a list of names (each shortened on its
    own). ``items`` are (head, text) pairs shown as a list after the intro, one line each, the
    head in bold (the Answer's one line per scenario). A ``lead`` section comes before the
    table of contents, as the page's opening block; ``anchor`` names its id (default
    ``s<position>``).
    """

    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: list[tuple[str, str | list[str]]] = field(default_factory=list)
    items: list[tuple[str, str]] = field(default_factory=list)
    lead: bool = False
    anchor: str = ""


class _Clipper:
    """Escaped text (`safe_text`, then HTML-escaped), shortened to a width with the full text in a
    tooltip; remembers every text it shortened, for the page's list of full names."""

    def __init__(self) -> None:
        self.full: dict[str, None] = {}

    def __call__(self, text: object, width: int = TEXT_WIDTH) -> Markup:
        text = "" if text is None else safe_text(text)
        if len(text) <= width:
            return escape(text)
        return self._tooltip(shorten(text, width), text)

    def labelled(self, short: str, full: str) -> Markup:
        """`short` with `full` as its tooltip (and in the list of full names)."""
        return self._tooltip(safe_text(short), safe_text(full))

    def _tooltip(self, short: str, full: str) -> Markup:
        self.full[full] = None
        return Markup('<span class="clip" title="{}">{}</span>').format(full, short)

    def names(self, values: Sequence[str]) -> Markup:
        """Each name shortened on its own; "; " between names that hold ", " themselves."""
        joiner = "; " if any(", " in v for v in values) else ", "
        return Markup(joiner).join(self(v, NAME_WIDTH) for v in values)


def _cell(value: object, digits: int) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.{digits}f}"
    return "" if value is None else str(value)


def _table_view(table: Table, clip: _Clipper) -> dict:
    frame = table.frame
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    widths = [table.widths.get(str(c), NAME_WIDTH) for c in frame.columns]
    return {
        "title": clip(table.title),
        "caption": clip(table.caption, 4 * TEXT_WIDTH),
        "numeric": numeric,
        "columns": [clip(c, NAME_WIDTH) for c in frame.columns],
        "rows": [
            [clip(_cell(v, table.digits), w) for v, w in zip(row, widths, strict=True)]
            for row in frame.itertuples(index=False, name=None)
        ],
    }


def _figure_view(figure: Figure, clip: _Clipper) -> dict:
    return {
        "title": clip(figure.title),
        "caption": clip(figure.caption, 4 * TEXT_WIDTH),
        "src": figure.data_uri,
        "key": figure.key,
        "labels": [clip.labelled(short, full) for short, full in figure.labels],
    }


def _section_view(section: Section, i: int, clip: _Clipper) -> dict:
    return {
        "title": clip(section.title),
        "anchor": section.anchor or f"s{i}",
        "lead": section.lead,
        "intro": clip(section.intro, 4 * TEXT_WIDTH),
        "facts": [
            (clip(k, NAME_WIDTH), clip.names(v) if isinstance(v, list) else clip(v))
            for k, v in section.facts
        ],
        "items": [(clip(h, NAME_WIDTH), clip(t, 4 * TEXT_WIDTH)) for h, t in section.items],
        "notes": [clip(n) for n in section.notes],
        "tables": [_table_view(t, clip) for t in section.tables],
        "figures": [_figure_view(f, clip) for f in section.figures],
    }


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("oodeval.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_fragment(sections: Sequence[Section], anchor: str) -> str:
    """The `sections` as one HTML block (no page around them), as a notebook shows a result:
    the report's markup and escaping (`render_page`), a style that applies inside the block
    only, and the full text of every shortened name in a collapsed list at its end. `anchor`
    is the block's id (each section's id and the list's start with it), so that several
    blocks on one notebook page keep distinct ids.
    """
    template = _ENV.get_template("fragment.html.j2")
    clip = _Clipper()
    views = [
        _section_view(replace(s, anchor=s.anchor or f"{anchor}-{i}"), i, clip)
        for i, s in enumerate(sections)
    ]
    return template.render(anchor=anchor, sections=views, full_names=list(clip.full))


def render_page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """Render the report as one HTML string with every figure embedded as a data URI.

    Lead sections open the page, before the table of contents of the others; every shortened
    text is listed in full, escaped, in a collapsed list at the end.
    """
    template = _ENV.get_template("report.html.j2")
    clip = _Clipper()
    views = [_section_view(s, i, clip) for i, s in enumerate(sections)]
    heading = (clip(title, TEXT_WIDTH), clip(subtitle, 2 * NAME_WIDTH))
    return template.render(
        title=shorten(safe_text(title), TEXT_WIDTH),
        heading=heading[0],
        subtitle=heading[1],
        generated=utc_minute_stamp(),
        version=__version__,
        lead=[v for v in views if v["lead"]],
        sections=[v for v in views if not v["lead"]],
        full_names=list(clip.full),
    )
