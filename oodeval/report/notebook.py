"""What a notebook shows for a result: the ``_repr_html_`` of `oodeval.Scores`, of a loaded
study (`oodeval.study.Study`) and of a leaderboard (`oodeval.study.analysis.Leaderboard`).

Each is the answer line first, then the tables its command prints (`oodeval measures`,
`oodeval study status`, `oodeval study measures`), rendered by the HTML report's own markup
(`oodeval.report.page.render_fragment`): the same cells, escaping (`oodeval._text.safe_text`,
then HTML escaping) and shortened long names with their full text in a tooltip.

The HTML needs Jinja2, which comes with the ``report`` extra; without it `result_html` returns
None, and Jupyter shows the object's ``_repr_markdown_`` instead (the markdown the command
prints with ``--format markdown``).

>>> import pandas as pd
>>> from oodeval.tables import Table
>>> html = result_html("ERM wins", [Table("Errors", pd.DataFrame({"algorithm": ["<b>"]}))])
>>> html.index("ERM wins") < html.index("<table>"), "&lt;b&gt;" in html
(True, True)
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from oodeval.tables import Table

__all__ = ["Displayed", "HtmlParts", "result_html"]


def result_html(
    answer: str,
    tables: Sequence[Table],
    *,
    lines: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> str | None:
    """One HTML block: `answer` (a sentence), the `lines` under it (what the results hold), the
    `notes` (remarks and warnings), then the `tables`, each under its title; None when Jinja2 is
    not installed.

    The block's id is random, so that several results shown on one notebook page never share
    an id.
    """
    if importlib.util.find_spec("jinja2") is None:
        return None
    from oodeval.report.page import Section, render_fragment

    items = [("", line) for line in lines]
    section = Section("", intro=answer, tables=list(tables), notes=list(notes), items=items)
    return render_fragment([section], f"oodeval-{uuid.uuid4().hex[:12]}")


class HtmlParts(NamedTuple):
    """What `result_html` shows for a result: its answer, tables, lines and notes."""

    answer: str
    tables: Sequence[Table]
    lines: Sequence[str] = ()
    notes: Sequence[str] = ()


class Displayed:
    """How a result shows itself: ``print()`` gives `render` ("table"), a notebook the HTML of
    `html_parts` (`result_html`), or `render` ("markdown") without Jinja2.

    A result class defines ``render(fmt)`` (``table`` or ``markdown``, as its command prints
    it) and ``html_parts()``; `oodeval.Scores`, `oodeval.study.Study` and
    `oodeval.study.analysis.Leaderboard` do.
    """

    def render(self, fmt: str = "table") -> str:
        raise NotImplementedError

    def html_parts(self) -> HtmlParts:
        raise NotImplementedError

    def __str__(self) -> str:
        """`render` as plain text, as the result's command prints it."""
        return self.render("table")

    def _repr_markdown_(self) -> str:
        """A notebook's display without the ``report`` extra: `render` as markdown."""
        return self.render("markdown")

    def _repr_html_(self) -> str | None:
        """A notebook's display: `html_parts` in the HTML report's markup; None without
        Jinja2, when Jupyter shows `_repr_markdown_`."""
        parts = self.html_parts()
        return result_html(parts.answer, parts.tables, lines=parts.lines, notes=parts.notes)
