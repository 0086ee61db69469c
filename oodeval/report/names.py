"""Names as the report shows them: users' names (studies, scenarios, algorithms, environments)
can be any length, so the page and the figures show a shortened form and keep the full one in a
tooltip and in the page's list of full names.

Shortening keeps the start and the end of a name (``shorten``), which is where names of one study
differ (``sr-cmnist/ratio=3:1/scale=1`` and ``.../scale=2``); `short_labels` makes the shortened
forms of a set of names distinct, so a legend never shows two entries alike.
"""

from __future__ import annotations

from collections.abc import Iterable

ELLIPSIS = "…"

NAME_WIDTH = 40
"""Table cells and listed names: longer ones are shortened to this many characters."""

FIGURE_WIDTH = 28
"""Labels inside figures (ticks, legends, panel titles)."""

TEXT_WIDTH = 400
"""Sentences that may embed names (notes, failure reasons, captions, headings)."""


def shorten(text: str, width: int) -> str:
    """`text` if it has at most `width` characters, else its start, an ellipsis and its end.

    Two thirds of the kept characters are the start. The result has exactly `width` characters.

    >>> shorten("sr-cmnist/ratio=3:1/scale=12", 12)
    'sr-cmnis…=12'
    >>> shorten("ERM", 12)
    'ERM'
    """
    if width < 2:
        raise ValueError(f"width must be at least 2, got {width}")
    return _cut(text, _head(width), width)


def _head(width: int) -> int:
    return (2 * (width - 1) + 2) // 3


def _cut(text: str, head: int, width: int) -> str:
    """`text` shortened to `width` characters keeping `head` of its start (and the rest of its
    end)."""
    if len(text) <= width:
        return text
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[len(text) - tail :] if tail else "")


def short_labels(names: Iterable[object], width: int) -> dict[str, str]:
    """{name: its shortened form}, distinct across `names` (order of first appearance).

    Names whose `shorten` forms coincide keep more of their start, or of their end, whichever
    first tells them apart; failing both, they end in a counter ``#k``.

    >>> short_labels(["algorithm-one-xyz", "algorithm-two-xyz", "IRM"], 10)
    {'algorithm-one-xyz': 'algo…e-xyz', 'algorithm-two-xyz': 'algo…o-xyz', 'IRM': 'IRM'}
    """
    full = list(dict.fromkeys(str(n) for n in names))
    short = {n: shorten(n, width) for n in full}
    groups: dict[str, list[str]] = {}
    for name in full:
        groups.setdefault(short[name], []).append(name)
    taken = {label for label, members in groups.items() if len(members) == 1}
    for members in (m for m in groups.values() if len(m) > 1):
        default = _head(width)
        for head in [*range(default + 1, width), *range(default - 1, -1, -1)]:
            labels = [_cut(n, head, width) for n in members]
            if len(set(labels)) == len(labels) and not taken & set(labels):
                break
        else:  # alike at both ends: number them
            labels, k = [], 1
            for name in members:
                cut = name[: width - len(f"#{k}") - 1] + ELLIPSIS + f"#{k}"
                while cut in taken or cut in labels:
                    k += 1
                    cut = name[: width - len(f"#{k}") - 1] + ELLIPSIS + f"#{k}"
                labels.append(cut)
                k += 1
        short.update(zip(members, labels, strict=True))
        taken.update(labels)
    return short


def counted(values: Iterable[object], word: str) -> str:
    """How many `values` there are and which: ``1 seed (0)``, ``3 seeds (0, 1, 2)``, so a
    list of one number never reads as a count.

    >>> counted([0], "seed"), counted([0, 1, 2], "seed"), counted([], "seed")
    ('1 seed (0)', '3 seeds (0, 1, 2)', 'no seeds')
    """
    items = [str(v) for v in values]
    if not items:
        return f"no {word}s"
    return f"{len(items)} {word}{'' if len(items) == 1 else 's'} ({', '.join(items)})"
