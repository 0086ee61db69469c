"""The one JSON parser of users' files: repeated keys refused, nesting bounded.

Every reader of a JSON text a user gives (results ``.json`` / ``.jsonl``, a DomainBed sweep's
``results.jsonl`` lines, the study lock file) parses it with `load_json`, which is
`json.loads` with two more rules:

- an object may not hold a key twice (``{"error": 0.1, "error": 0.9}``: Python keeps the last
  value without a word), nor, where the reader looks keys up case-insensitively as the CSV
  reader does headers, two keys equal once stripped and case-folded (``error`` and ``Error``);
- arrays and objects may nest at most `MAX_DEPTH` levels deep. The depth is measured before
  parsing by a scan of the brackets outside strings (`json_depth`), so a text nested a million
  levels deep is refused in one line instead of exhausting Python's recursion limit.

Either is an `OodevalError` whose message starts with the reader's `where` ("r.jsonl line 3");
invalid JSON still raises the `ValueError` `json.loads` raises, for the reader to word.
`structure_depth` measures parsed data (a TOML table) without recursion.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from oodeval._text import shortened
from oodeval.errors import OodevalError

__all__ = [
    "json_lines",
    "MAX_DEPTH",
    "bracket_depth",
    "depth_problem",
    "json_depth",
    "load_json",
    "refuse_folded_keys",
    "structure_depth",
]

#: How deep arrays and objects (JSON) or arrays and tables (TOML) of a user's file may nest.
#: A results file needs 2 levels, a DomainBed record 3, a study config about 4.
MAX_DEPTH = 64

# A JSON string (escapes included), so that brackets inside one are not counted.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def depth_problem(depth: int, kind: str = "JSON", *, at_least: bool = False) -> str:
    """The words of a too-deep refusal, shared by the JSON and TOML readers.

    >>> depth_problem(65)
    'JSON arrays and objects nest 65 levels deep; oodeval reads at most 64'
    """
    parts = "arrays and objects" if kind == "JSON" else "arrays and tables"
    deep = f"at least {depth:,}" if at_least else f"{depth:,}"
    return f"{kind} {parts} nest {deep} levels deep; oodeval reads at most {MAX_DEPTH}"


def json_depth(text: str) -> int:
    """How deep the arrays and objects of the JSON `text` nest, counted without parsing.

    The brackets outside strings are counted in order (`bracket_depth`); for invalid JSON the
    count goes on past where a parser would stop, so it never falls short of what a parser
    would descend.

    >>> json_depth('{"a": [1, {"b": "[[[["}]}'), json_depth("1")
    (3, 0)
    """
    return bracket_depth(_STRING.sub("", text))


def bracket_depth(skeleton: str) -> int:
    """The deepest nesting of the brackets ``[ { ] }`` of `skeleton` (a text whose strings and
    comments were removed), counted in order with numpy rather than by recursion.

    >>> bracket_depth("[[{}], [[[]]]]")
    4
    """
    brackets = _NOT_BRACKET.sub("", skeleton).encode("ascii")
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)
    return max(int(np.cumsum(steps).max()), 0)


def structure_depth(data: Any, *, root: bool = True) -> int:
    """How deep the lists and dicts of parsed `data` nest (0 for a scalar), walked without
    recursion; with ``root=False`` the outermost container is not counted (a TOML document's
    table, which no bracket opens).

    >>> structure_depth({"a": {"b": [1, 2]}}), structure_depth({"a": {"b": 1}}, root=False)
    (3, 1)
    """
    deepest, stack = 0, [(data, 1 if root else 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _key(text: str) -> str:
    return shortened(repr(text), longest=80)  # the error line escapes what repr leaves


class _RepeatedKey(Exception):
    """Raised inside the parser for a repeated key; `load_json` words it with its `where`."""


def _exact_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for twice, _ in pairs:
            if twice in seen:
                raise _RepeatedKey(
                    f"the key {_key(twice)} appears twice in one object, and which value "
                    "counts is unclear; keep one"
                )
            seen.add(twice)
    return obj


def _folded_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = _exact_pairs(pairs)
    problem = _folded_problem(obj)
    if problem is not None:
        raise _RepeatedKey(problem)
    return obj


# One decoder per rule, made once: `json.loads` with a hook builds a decoder at every call.
_DECODERS = {
    False: json.JSONDecoder(object_pairs_hook=_exact_pairs),
    True: json.JSONDecoder(object_pairs_hook=_folded_pairs),
}


def _folded_problem(obj: dict[str, Any]) -> str | None:
    if len({k.strip().casefold() for k in obj}) == len(obj):  # the common case, at C speed
        return None
    folded: dict[str, str] = {}
    for k in obj:
        first = folded.setdefault(k.strip().casefold(), k)
        if first is not k:
            return (
                f"the keys {_key(first)} and {_key(k)} name the same field (keys are read "
                "case-insensitively, spaces around them ignored); keep one"
            )
    return None


def refuse_folded_keys(obj: dict[str, Any], *, where: str) -> None:
    """Refuse two keys of `obj` equal once stripped and case-folded (``error``, `` Error``),
    for a reader that looks keys up case-insensitively in only some objects of a text (those
    parsed with ``fold_case=False``).

    >>> try:
    ...     refuse_folded_keys({"lr": 1, "LR": 2}, where="run line 1")
    ... except OodevalError as exc:
    ...     print(str(exc).split(" name ")[0])
    run line 1: the keys 'lr' and 'LR'
    """
    problem = _folded_problem(obj)
    if problem is not None:
        raise OodevalError(f"{where}: {problem}")


def load_json(text: str, *, where: str, fold_case: bool = True) -> Any:
    """`json.loads(text)`, refusing a repeated key and nesting deeper than `MAX_DEPTH`.

    Parameters
    ----------
    text : str
        The JSON text (one line of a JSON-lines file, or a whole file).
    where : str
        What the messages call the text, e.g. ``"r.jsonl line 3"``.
    fold_case : bool
        Also refuse two keys of one object that are equal once stripped and case-folded
        (``error`` and ``Error``), as the CSV readers refuse such headers; the exact repeat is
        refused either way.

    Raises
    ------
    OodevalError
        A repeated key, or nesting deeper than `MAX_DEPTH`, one line starting with `where`.
    ValueError
        Invalid JSON, as `json.loads` raises it (`json.JSONDecodeError`, or int()'s refusal of
        a number over 4300 digits).

    >>> load_json('{"a": [1, 2]}', where="x")
    {'a': [1, 2]}
    >>> try:
    ...     load_json('{"error": 0.1, "Error": 0.9}', where="r.jsonl line 1")
    ... except OodevalError as exc:
    ...     print(str(exc).split(" name ")[0])
    r.jsonl line 1: the keys 'error' and 'Error'
    """
    # more opening brackets than the bound, strings included: only then can it nest too deep
    depth = json_depth(text) if text.count("[") + text.count("{") > MAX_DEPTH else 0
    if depth > MAX_DEPTH:
        raise OodevalError(f"{where}: {depth_problem(depth)}; flatten the data")
    if text.startswith("\ufeff"):  # as json.loads refuses it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    try:
        return _DECODERS[fold_case].decode(text)
    except _RepeatedKey as exc:
        raise OodevalError(f"{where}: {exc}") from None


def json_lines(text: str) -> list[str]:
    r"""The lines of the JSON-lines `text`: split at ``\n`` alone (a ``\r`` before it dropped),
    as the format defines them. ``str.splitlines`` would also split at U+0085, U+2028 and
    U+2029, which a JSON string may hold as they are (``json.dumps(..., ensure_ascii=False)``).

    >>> json_lines('{"a": "x\u2028y"}\r\n{"a": 2}\n')
    ['{"a": "x\u2028y"}', '{"a": 2}', '']
    """
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
