"""Users' text in and out: read a user's text file (CSV, JSON lines, TOML) as UTF-8, refusing
anything else in one line, and show users' names and paths safely on a terminal.

Every file reader of oodeval goes through `read_text` (or, for a file too big to hold twice,
`first_character`, which checks it a block at a time), so a binary file, UTF-16 text or a folder
gets the same one-line `OodevalError` naming the file and the fix, never a UnicodeDecodeError.
Reads are bounded (`oodeval.limits.max_text_bytes`): a regular file over the bound is refused
before it is read, a pipe or standard input (``-``) is read a chunk at a time and refused past
it, and a device file (``/dev/zero``) is refused unread. A pipe or standard input is read once
(`stream_bytes`): every later read of it in the process parses the same bytes from memory.

Every text and markdown output (tables, notes, warnings, errors, echoed paths, progress-bar
descriptions, the HTML report's names) goes through `safe_text`, so a name holding a newline, a
tab or a bidi override prints as one line, in order, with the character shown as ``\\n``,
``\\t``, ``\\u202e``. CSV and JSON outputs keep names exact.
"""

from __future__ import annotations

import codecs
import io
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

from oodeval.errors import OodevalError
from oodeval.limits import human_bytes, max_text_bytes, read_capped

__all__ = [
    "STDIN",
    "first_character",
    "input_name",
    "parse_problem",
    "read_text",
    "reopener",
    "safe_text",
    "shortened",
    "stream_bytes",
]

#: The path that names standard input.
STDIN = "-"

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
    data = stream_bytes(path, what=what, save_as=save_as)
    if data is None:
        with path.open("rb") as stream:
            data = _bounded(stream, path, what, save_as)
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
    held = stream_bytes(path, what=what, save_as=save_as)
    if held is not None:
        return read_text(path, what=what, save_as=save_as).lstrip()[:1]
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


def input_name(path: str | Path) -> str:
    """How messages name the input `path`: its file name, or "standard input" for ``-``.

    >>> input_name("runs/r.csv"), input_name("-")
    ('r.csv', 'standard input')
    """
    return "standard input" if str(path) == STDIN else Path(path).name


def _shown(path: Path) -> str:
    return "standard input" if str(path) == STDIN else str(path)


def _existing_file(path: str | Path, what: str) -> Path:
    """`path` as a Path once it names something readable within the bounds: standard input
    (``-``), a pipe or socket, or a regular file of at most `max_text_bytes`; a folder, a
    missing path, a device file and a regular file over the bound are refused in one line."""
    path = Path(path)
    if str(path) == STDIN:
        return path
    if path.is_dir():
        raise OodevalError(f"{what} {path} is a folder, not a file; give the file's path")
    if not path.exists():
        raise OodevalError(f"{what} not found: {path}; check the path")
    info = path.stat()
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        raise OodevalError(
            f"{what} {path} is a device file, not a regular file or a pipe; give a file's path, "
            "or - to read standard input"
        )
    limit = max_text_bytes()
    if stat.S_ISREG(info.st_mode) and info.st_size > limit:
        raise OodevalError(_too_big(path, what, f"{human_bytes(info.st_size)}, over", limit))
    return path


def _too_big(path: Path, what: str, size: str, limit: int) -> str:
    return (
        f"{what} {_shown(path)} holds {size} the bound of {human_bytes(limit)} on a text input; "
        "give a smaller file, or set OODEVAL_MAX_TEXT_BYTES to a larger number of bytes"
    )


# The bytes of the pipes and standard inputs read in this process, by identity (a pipe's
# device and inode; standard input's stream object, kept so that its id stays its own), the
# newest last. A pipe can be read only once, so a reader that looks at its input twice (sniff,
# then parse) gets the same bytes again from here.
_HELD: dict[tuple[object, ...], tuple[object, bytes]] = {}
_HELD_MOST = 4


def stream_bytes(
    path: str | Path, *, what: str = "file", save_as: str = "UTF-8 CSV or JSON"
) -> bytes | None:
    """The bytes of standard input (``-``), a pipe or a socket at `path`, read once per process
    a chunk at a time and refused in one line past `max_text_bytes`; None for a regular file,
    which readers read (and may re-read) themselves.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "r.csv")
    >>> _ = open(p, "w").write("a,b\\n")
    >>> stream_bytes(p) is None
    True
    """
    path = _existing_file(path, what)
    if str(path) == STDIN:
        stream = cast(BinaryIO, getattr(sys.stdin, "buffer", sys.stdin))
        key: tuple[object, ...] = ("stdin", id(stream))
        if key not in _HELD:
            _hold(key, stream, _bounded(stream, path, what, save_as))
        return _HELD[key][1]
    info = os.stat(path)
    if stat.S_ISREG(info.st_mode):
        return None
    key = ("pipe", info.st_dev, info.st_ino)
    if key not in _HELD:
        with path.open("rb") as opened:
            _hold(key, None, _bounded(opened, path, what, save_as))
    return _HELD[key][1]


def reopener(
    path: str | Path, *, what: str = "file", save_as: str = "UTF-8 CSV or JSON"
) -> Callable[[], Path | io.BytesIO]:
    """A function that gives the input `path` afresh at each call, for a reader that passes over
    it more than once: the regular file's path again, or a new in-memory stream of the bytes of
    standard input or a pipe (`stream_bytes`, read once).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "r.csv")
    >>> _ = open(p, "w").write("a,b")
    >>> again = reopener(p)
    >>> again() == again() == Path(p)
    True
    """
    held = stream_bytes(path, what=what, save_as=save_as)
    path = Path(path)
    return (lambda: path) if held is None else (lambda: io.BytesIO(held))


def _hold(key: tuple[object, ...], owner: object, data: bytes) -> None:
    _HELD[key] = (owner, data)
    while len(_HELD) > _HELD_MOST:
        del _HELD[next(iter(_HELD))]


def _bounded(stream: BinaryIO, path: Path, what: str, save_as: str) -> bytes:
    """Every byte of `stream`, read a chunk at a time: refused past `max_text_bytes`, and as
    soon as its first 64 KiB show binary content (so ``cat /dev/zero |`` stops at once)."""
    limit = max_text_bytes()
    chunks: list[bytes] = []
    total = 0
    for block in read_capped(stream, limit):
        if not chunks:
            _refuse_reason(path, _not_utf8_start(block), what, save_as)
        chunks.append(block)
        total += len(block)
    if total > limit:
        raise OodevalError(_too_big(path, what, "more than", limit))
    return b"".join(chunks)


def _refuse_not_utf8(path: Path, data: bytes, what: str, save_as: str) -> None:
    _refuse_reason(path, _not_utf8(data), what, save_as)


def _refuse_reason(path: Path, reason: str | None, what: str, save_as: str) -> None:
    if reason is not None:
        raise OodevalError(
            f"{what} {_shown(path)} is not UTF-8 text ({reason}); save it as {save_as}"
        )


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
