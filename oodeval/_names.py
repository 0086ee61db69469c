"""Look-alike names: two spellings a reader would keep apart that print the same.

``Café`` written with one character (U+00E9) and with ``e`` and a combining accent (U+0301),
``ERM`` and ``ERM`` followed by a zero-width space, ``ＥＲＭ`` in full-width letters: each pair
is two algorithms (or environments, domains, datasets) to a reader that compares strings, yet
one name on a terminal, in a table or an answer line ("worst+gap picks Café; average picks
Café"). Every reader of users' names calls `refuse_lookalikes` on each kind of name it read, so
such a pair is refused in one line naming both spellings, each with its characters outside
printable ASCII written as code points (``'Café' (Cafe<U+0301>)``).

Two names look alike when they differ but are equal once control and format characters
(Unicode categories Cc and Cf: zero-width spaces and joiners, bidi controls, the byte-order
mark, soft hyphens) are removed and the rest is NFKC-normalised (`lookalike_key`). Letter case
is left alone: ``ERM`` and ``erm`` are told apart by any reader.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from oodeval._text import shortened
from oodeval.errors import OodevalError

__all__ = ["lookalike_key", "lookalike_pair", "lookalike_problem", "refuse_lookalikes"]

_INVISIBLE = ("Cc", "Cf")  # the categories removed before comparing


def lookalike_key(name: str) -> str:
    """`name` as compared for look-alikes: control and format characters removed, then NFKC.

    >>> lookalike_key("Cafe\\u0301") == lookalike_key("Caf\\u00e9\\u200b") == "Caf\\u00e9"
    True
    >>> lookalike_key("\\uff25RM")
    'ERM'
    """
    if name.isascii() and name.isprintable():  # the common case: nothing to remove or fold
        return name
    kept = "".join(c for c in name if unicodedata.category(c) not in _INVISIBLE)
    folded = unicodedata.normalize("NFKC", kept)
    return "".join(c for c in folded if unicodedata.category(c) not in _INVISIBLE)


def lookalike_pair(names: Iterable[str]) -> tuple[str, str] | None:
    """The first two different names of `names` with the same `lookalike_key`, or None.

    >>> lookalike_pair(["ERM", "IRM", "ERM\\u200b"])
    ('ERM', 'ERM\\u200b')
    >>> lookalike_pair(["ERM", "ERM", "erm"]) is None
    True
    """
    seen: dict[str, str] = {}
    for name in names:
        name = str(name)
        first = seen.setdefault(lookalike_key(name), name)
        if first != name:
            return first, name
    return None


def _spelled(name: str) -> str:
    """`name` quoted, then, when it holds any, with each character outside printable ASCII
    written as its code point (``Cafe<U+0301>``), so that two look-alikes read differently
    even after the error line's `oodeval._text.safe_text`.

    >>> print(_spelled("Cafe\u0301"), _spelled("ERM"))
    'Cafe\u0301' (Cafe<U+0301>) 'ERM'
    """
    coded = "".join(c if c.isascii() and c.isprintable() else f"<U+{ord(c):04X}>" for c in name)
    text = f"'{name}'" if coded == name else f"'{name}' ({coded})"
    return shortened(text, longest=80)


def lookalike_problem(names: Iterable[str], what: str) -> str | None:
    """The words of a look-alike refusal among `names` (`what` names their kind), or None.

    >>> print(lookalike_problem(["ERM", "ERM\\u200b"], "algorithm").split(" differ ")[0])
    algorithm names 'ERM' and 'ERM\u200b' (ERM<U+200B>)
    """
    pair = lookalike_pair(names)
    if pair is None:
        return None
    return (
        f"{what} names {_spelled(pair[0])} and {_spelled(pair[1])} differ only by Unicode "
        "normalisation or invisible characters; spell them the same way, or give them "
        "different names"
    )


def refuse_lookalikes(names: Iterable[str], what: str, where: str) -> None:
    """Raise `OodevalError` ("`where`: ...") when two of `names` look alike (`lookalike_pair`).

    >>> refuse_lookalikes(["ERM", "IRM"], "algorithm", "r.csv")
    """
    problem = lookalike_problem(names, what)
    if problem is not None:
        raise OodevalError(f"{where}: {problem}")
