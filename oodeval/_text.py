"""Users' text in and out: read a user's text file (CSV, JSON lines, TOML) as UTF-8, refusing
anything else in one line, and show users' names and paths safely on a terminal.

Every file reader of oodeval goes through `read_text` (or, for a file too big to hold twice,
`first_character`, which checks it a block at a time), so a binary file, UTF-16 text or a folder
gets the same one-line `OodevalError` naming the file and the fix, never a UnicodeDecodeError.

Every text and markdown output (tables, notes, warnings, errors, echoed paths, progress-bar
descriptions, the HTML report's names) goes through `safe_text`, so a name holding a newline, a
tab or a bidi override prints as one line, in order, with the character shown as ``\\n``,
``\\t``, ``\\u202e``. CSV and JSON outputs keep names exact.
"""

from __future__ import annotations

import codecs
import re
import sys
from pathlib import Path

from oodeval.errors import OodevalError

__all__ = ["first_character", "parse_problem", "read_text", "safe_text", "shortened"]

_BLOCK = 1 << 20  # bytes decoded at a time by `first_character`

# Byte-order marks of the encodings a spreadsheet or editor may use instead of UTF-8. UTF-32's
# little-endian mark starts with UTF-16's, so it is tested first.
_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def _not_utf8_start(data: bytes) -> str | None:
    """Why a file starting with `data` is not UTF-8 text, judged by its first 64 KiB alone."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return f"{encoding} text with a byte-order mark"
    if b"\x00" in data[:65536]:
        return "a binary file, or UTF-16 without a byte-order mark: it holds NUL bytes"
    return None


def _not_utf8(data: bytes) -> str | None:
    """Why `data` is not UTF-8 text (a short phrase), or None when it is."""
    reason = _not_utf8_start(data)
    if reason is not None:
        return reason
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8"
    return None


def read_text(path: str | Path, *, what: str = "file", save_as: str = "UTF-8 CSV or JSON") -> str:
    """Return the text of the UTF-8 file `path` (a leading UTF-8 byte-order mark dropped).

    Raises OodevalError, one line, when `path` does not exist, is a folder, or is not UTF-8 text:
    binary content (a NUL byte in the first 64 KiB), UTF-16/UTF-32 with a byte-order mark, or any
    byte sequence UTF-8 cannot decode. `what` names the file in the message ("results file",
    "study config"); `save_as` says what to save it as.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "r.csv")
    >>> _ = open(p, "wb").write("a,b\\n".encode("utf-16"))
    >>> try:
    ...     read_text(p, what="results file")
    ... except OodevalError as exc:
    ...     print(str(exc).split(" is ")[1])
    not UTF-8 text (UTF-16 text with a byte-order mark); save it as UTF-8 CSV or JSON
    """
    path = _existing_file(path, what)
    data = path.read_bytes()
    _refuse_not_utf8(path, data, what, save_as)
    return data.decode("utf-8-sig")


def first_character(
    path: str | Path, *, what: str = "file", save_as: str = "UTF-8 CSV or JSON"
) -> str:
    """The first non-whitespace character of the UTF-8 file `path` ("" when it holds none).

    Checks the whole file as `read_text` does, with the same one-line messages, but decodes it
    a block at a time, so a big file is never held in memory (the whole file is read again only
    to word the message of a file that is refused).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "r.csv")
    >>> _ = open(p, "wb").write(b"\\xef\\xbb\\xbf  \\n algorithm,error\\n")
    >>> first_character(p)
    'a'
    """
    path = _existing_file(path, what)
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    first = ""
    with path.open("rb") as stream:
        head = block = stream.read(65536)
        clean = _not_utf8_start(head) is None
        while clean and block:
            try:
                text = decoder.decode(block)
            except UnicodeDecodeError:
                clean = False
                break
            first = first or text.lstrip()[:1]
            block = stream.read(_BLOCK)
        if clean:
            try:
                decoder.decode(b"", final=True)  # a truncated sequence at the very end
            except UnicodeDecodeError:
                clean = False
    if not clean:
        _refuse_not_utf8(path, path.read_bytes(), what, save_as)
    return first


def _existing_file(path: str | Path, what: str) -> Path:
    path = Path(path)
    if path.is_dir():
        raise OodevalError(f"{what} {path} is a folder, not a file; give the file's path")
    if not path.exists():
        raise OodevalError(f"{what} not found: {path}; check the path")
    return path


def _refuse_not_utf8(path: Path, data: bytes, what: str, save_as: str) -> None:
    reason = _not_utf8(data)
    if reason is not None:
        raise OodevalError(f"{what} {path} is not UTF-8 text ({reason}); save it as {save_as}")


# Characters `safe_text` shows as escapes: the backslash (so that an escape is unambiguous), C0
# controls with DEL, C1 controls, the bidi controls (embeddings and overrides U+202A-202E,
# isolates U+2066-2069, marks U+200E/U+200F and U+061C), the line and paragraph separators
# U+2028/U+2029, and lone surrogates (a file name that is not UTF-8, which a terminal cannot
# even encode).
_UNSAFE = re.compile(
    "[\\\\\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
_SHORT = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: object) -> str:
    """`text` as one terminal-safe line: control, bidi and separator characters shown as escapes.

    Newline, tab and carriage return become ``\\n``, ``\\t``, ``\\r``; the other C0 and C1
    controls and DEL become ``\\xNN``; the bidi controls (U+202A-202E, U+2066-2069, U+200E,
    U+200F, U+061C), U+2028/U+2029 and lone surrogates become ``\\uNNNN``. A backslash becomes
    ``\\\\``, so the escaped form is unambiguous: reading the escapes back gives `text` again.
    Any other text, the common case, is returned unchanged.

    >>> print(safe_text("ERM\\nIRM\\t\\u202emixup"))
    ERM\\nIRM\\t\\u202emixup
    >>> print(safe_text("C:\\\\runs"), safe_text("sr-cmnist/ratio=3:1"))
    C:\\\\runs sr-cmnist/ratio=3:1
    """
    text = str(text)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def shortened(text: str, *, longest: int = 200) -> str:
    """`text` with every quoted span or space-free run of over `longest` characters cut to its
    first and last characters around the count left out, for a message that quotes a user's
    3,000-character name or cell; shorter text is returned unchanged.

    >>> print(shortened("unknown algorithm '" + "x" * 100 + "'; give ERM", longest=30))
    unknown algorithm 'xxxxxxxxxxxxxxxxxxx...[79 characters]...xx'; give ERM
    """

    def cut(match: re.Match[str]) -> str:
        span = match.group(0)
        head, tail = longest * 2 // 3, max(longest // 10, 1)
        short = f"{span[:head]}...[{len(span) - head - tail:,} characters]...{span[-tail:]}"
        return short if len(short) < len(span) else span

    n = longest + 1  # a quoted span, or a run without spaces, longer than `longest`
    return re.sub(rf"'[^']{{{n},}}'|\"[^\"]{{{n},}}\"|\S{{{n},}}", cut, text)


def parse_problem(exc: ValueError) -> str:
    """What a JSON or TOML parser found wrong, for an error line: its message, or, for the
    ValueError Python's int() raises for an integer of over 4300 digits (which `json.loads` and
    `tomllib.loads` let through), that the number is too long.

    >>> import json
    >>> try:
    ...     json.loads("1" * 5000)
    ... except ValueError as exc:
    ...     print(parse_problem(exc))
    a number longer than 4300 digits
    """
    if "integer string conversion" in str(exc):
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        return f"a number longer than {limit} digits"
    return getattr(exc, "msg", None) or str(exc)
