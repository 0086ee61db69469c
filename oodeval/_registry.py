"""The one registry type: names -> entries, filled by decorators, with one rule for a taken name.

Measures, algorithms, image-source kinds and executors are each a `Registry`. A name may be
registered again by the same definition (the same module and qualified name: a module imported
again, a file executed again after an edit, a notebook cell run again), which replaces the old
entry in its place; a name held by any other definition is refused in one line naming the name,
what holds it and the fix. A registry is a read-only, live `Mapping`: every list of names is read
from it, and only `Registry.add` and `Registry.remove` change it.

>>> kinds = Registry("toy kind")
>>> def square(x):
...     return x * x
>>> kinds.add("square", square) is square
True
>>> kinds.add("square", square) is square  # the same definition again replaces itself
True
>>> kinds.add("square", lambda x: x)  # doctest: +ELLIPSIS
Traceback (most recent call last):
oodeval.errors.OodevalError: a toy kind named 'square' is already registered by ...
>>> list(kinds), kinds.remove("square"), len(kinds)
(['square'], None, 0)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from oodeval.errors import OodevalError

__all__ = ["Registry", "definition_name", "same_definition"]

T = TypeVar("T")


def definition_name(obj: object) -> str:
    """``module.qualname`` of a function or class (its repr for anything else).

    >>> definition_name(OodevalError)
    'oodeval.errors.OodevalError'
    """
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return repr(obj)
    return f"{module}.{qualname}"


def same_definition(a: object, b: object) -> bool:
    """Whether `a` and `b` are one definition: the same object, or the same module and qualified
    name (what a module executed again, after its file changed, defines anew).

    >>> same_definition(OodevalError, type("OodevalError", (), {"__module__": "oodeval.errors"}))
    True
    >>> same_definition(OodevalError, ValueError)
    False
    """
    if a is b:
        return True
    names = [(getattr(x, "__module__", None), getattr(x, "__qualname__", None)) for x in (a, b)]
    return None not in names[0] and names[0] == names[1]


class Registry(Mapping[str, T], Generic[T]):
    """Names -> entries of one `kind` (``"measure"``, ``"algorithm"``), in registration order.

    `definition` gives the function or class an entry stands for (the entry itself by default;
    e.g. a measure's function, the class of a source-kind instance): it is what `add` compares
    with the holder of a taken name.
    """

    def __init__(self, kind: str, *, definition: Callable[[T], object] | None = None) -> None:
        self.kind = kind
        self._definition: Callable[[T], object] = definition or (lambda entry: entry)
        self._entries: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)!r})"

    def holder(self, name: str) -> object | None:
        """The definition registered as `name` (None when the name is free)."""
        entry = self._entries.get(name)
        return None if entry is None else self._definition(entry)

    def check_free(self, name: str, definition: object) -> None:
        """Refuse `name` when another definition than `definition` holds it (one line naming
        the name, the holder and the fix); nothing when it is free or held by `definition`."""
        held = self.holder(name)
        if held is not None and not same_definition(held, definition):
            article = "an" if self.kind[:1].lower() in "aeiou" else "a"
            raise OodevalError(
                f"{article} {self.kind} named {name!r} is already registered by "
                f"{definition_name(held)}; choose another name"
            )

    def add(self, name: str, entry: T) -> T:
        """Register `entry` as `name` (`check_free` first); the same definition again replaces
        its old entry in the same place. Returns `entry`."""
        self.check_free(name, self._definition(entry))
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        """Remove `name` (nothing happens when it is not registered)."""
        self._entries.pop(name, None)
