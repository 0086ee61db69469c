"""`scoped_value`: a context variable set for the length of a block, the one way oodeval's settings
(a network's precision and conv layout, the CLI's option names) are switched for a block."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def scoped_value(var: ContextVar[T], value: T) -> Iterator[None]:
    """Set `var` to `value` inside the block and restore what it was after, however it ends.

    >>> flag: ContextVar[bool] = ContextVar("flag", default=False)
    >>> with scoped_value(flag, True):
    ...     flag.get()
    True
    >>> flag.get()
    False
    """
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)
