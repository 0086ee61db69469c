"""Reading back what `oodeval._text.safe_text` escaped: the inverse the safe-text tests check
round trips with, and the characters no text or markdown output may hold raw."""

from __future__ import annotations

import re

# What a terminal must never receive raw from a user's name (newline excepted: it ends a line
# the program writes): C0 controls and DEL, C1 controls, bidi controls, U+2028/2029.
RAW_UNSAFE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)

# Characters a hostile name holds: every kind `safe_text` escapes, and ones that look alike.
HOSTILE_CHARS = (
    "\n\t\r\x00\x1b\x7f\x85\x9f\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
    "\u2066\u2067\u2068\u2069\\|xn "
)

_ESCAPE = re.compile(r"\\(\\|n|t|r|\||x[0-9a-f]{2}|u[0-9a-f]{4})")
_SHORT = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r", "|": "|"}


def unescape(text: str, *, pipes: bool = False) -> str:
    """The text `safe_text` was given; with `pipes`, ``\\|`` (a markdown cell's pipe) too.

    Raises ValueError on a backslash that starts no escape: `safe_text` never writes one.
    """

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code == "|" and not pipes:
            raise ValueError(f"\\| outside a markdown cell at {match.start()}")
        return _SHORT[code] if code in _SHORT else chr(int(code[1:], 16))

    out, last = [], 0
    for match in _ESCAPE.finditer(text):
        if "\\" in text[last : match.start()]:
            raise ValueError(f"a lone backslash before {match.start()} in {text!r}")
        out += [text[last : match.start()], one(match)]
        last = match.end()
    if "\\" in text[last:]:
        raise ValueError(f"a lone backslash after {last} in {text!r}")
    return "".join([*out, text[last:]])


def markdown_cells(line: str) -> list[str]:
    """The cells of one markdown table row as `oodeval.tables.markdown_table` writes it
    (``| a | b |``), split at the pipes no backslash escapes, each read back by `unescape`."""
    assert line.startswith("| ") and line.endswith(" |"), line
    cells, current, i = [], [], 2
    body = line[: len(line) - 2]
    while i < len(body):
        char = body[i]
        if char == "\\":
            current.append(body[i : i + 2])
            i += 2
        elif body.startswith(" | ", i):
            cells.append("".join(current))
            current, i = [], i + 3
        else:
            current.append(char)
            i += 1
    cells.append("".join(current))
    return [unescape(c, pipes=True) for c in cells]
