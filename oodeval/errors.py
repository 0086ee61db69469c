"""The one exception type oodeval raises for bad input, and the one way its messages list items.

Every message is a single line that names the problem and how to fix it; the CLI prints it on
stderr and exits with status 2, without a traceback.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

__all__ = ["OodevalError", "SHOWN_ITEMS", "listing", "repeats"]

#: How many items of a user-controlled list an error message shows before counting the rest.
SHOWN_ITEMS = 6


class OodevalError(ValueError):
    """Bad input or configuration: the message says what was wrong and what to do instead."""


def listing(items: Iterable[object], *, shown: int = SHOWN_ITEMS, sep: str = ", ") -> str:
    """The first `shown` items joined by `sep`, then how many more: short enough for one line.

    Every list that comes from the user's input (names, values, rows) goes through this before
    it enters an error message, so a 100,000-item list gives a short line, not megabytes.

    >>> listing(range(100_000))
    '0, 1, 2, 3, 4, 5 and 99,994 more'
    >>> listing(["a", "b"])
    'a, b'
    """
    values = [str(v) for v in items]
    head = sep.join(values[:shown])
    more = len(values) - shown
    return f"{head} and {more:,} more" if more > 0 else head


def repeats(items: Iterable[Hashable]) -> list:
    """The items that occur more than once, each once, in order of first appearance (O(n)).

    >>> repeats(["b", "a", "b", "c", "a"])
    ['b', 'a']
    """
    counts = Counter(items)
    return [item for item, n in counts.items() if n > 1]
