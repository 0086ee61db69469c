"""The one exception type oodeval raises for bad input, and the one way its messages list items.

Every message is a single line that names the problem and how to fix it; the CLI prints it on
stderr and exits with status 2, without a traceback. A message that names an option names it in
the caller's language (`option`): the keyword through the Python API (``percent=True``), the flag
on the command line (``--percent``), where the CLI's error wrapper runs the command inside
`command_line`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from oodeval._contextvars import scoped_value

__all__ = ["FLAGS", "OodevalError", "SHOWN_ITEMS", "command_line", "listing", "option", "repeats"]

#: How many items of a user-controlled list an error message shows before counting the rest.
SHOWN_ITEMS = 6


class OodevalError(ValueError):
    """Bad input or configuration: the message says what was wrong and what to do instead."""


#: Python keyword -> the command-line flag that sets the same thing, for `option`. A keyword
#: not listed is named as itself in both languages.
FLAGS: dict[str, str] = {
    "percent": "--percent",
    "seed": "--seed",
    "bootstrap": "--bootstrap",
    "n_resamples": "--bootstrap",
    "confidence": "--confidence",
    "measures": "--measures",
    "exclude_damaged": "--exclude-damaged",
    "drop_duplicates": "--drop-duplicates",
    "directory": "--out",  # the study folder that run_study and merge_studies write
    "out": "--out",
    "out_dir": "--analysis-dir",  # where write_analysis writes; study analyze's flag
    "base_classes": "--base-classes",
    "hypothesis": "--hypothesis",
    "lr": "--lr",
    "shots": "--n-shots",
    "n_partitions": "--n-partitions",
    "n_dominant": "--n-dominant",
    "n_exclusive": "--n-exclusive",
    "n_minor": "--n-minor",
    "n_minority": "--n-minority",
    "n_test": "--n-test",
}

_ON_COMMAND_LINE: ContextVar[bool] = ContextVar("oodeval_on_command_line", default=False)


@contextmanager
def command_line() -> Iterator[None]:
    """Within it, `option` names flags: the CLI runs every command inside it."""
    with scoped_value(_ON_COMMAND_LINE, True):
        yield


def option(keyword: str, value: object = None) -> str:
    """How a message names the option `keyword` (set to `value`) to its caller: the Python
    keyword (``percent=True``), or inside `command_line` its flag (``--percent``, `FLAGS`; a
    list value joined by commas, a True one left out as a flag takes none).

    >>> option("percent", True), option("seed"), option("measures", ["average", "worst"])
    ('percent=True', 'seed', "measures=['average', 'worst']")
    >>> with command_line():
    ...     option("percent", True), option("seed"), option("measures", ["average", "worst"])
    ('--percent', '--seed', '--measures average,worst')
    """
    if _ON_COMMAND_LINE.get():
        flag = FLAGS.get(keyword, keyword)
        if value is None or value is True:
            return flag
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        return f"{flag} {value}"
    return keyword if value is None else f"{keyword}={value!r}"


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
