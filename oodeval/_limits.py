"""The stated maxima of what oodeval reads, and reading within them.

Every reader checks what it is given against these bounds before it allocates, so a hostile or
damaged input (``/dev/zero``, a gzip bomb, an array header claiming terabytes, a class id of
10**12) is one `OodevalError` line instead of a MemoryError or a machine out of memory:

======================  =========  ===========================================================
bound                   value      what it bounds
======================  =========  ===========================================================
`MAX_TEXT_BYTES`        1 GiB      a text input (results CSV / JSON lines, predictions CSV,
                                   study config), from a file, a pipe or standard input;
                                   ``OODEVAL_MAX_TEXT_BYTES`` sets another value
`MAX_INFLATED_BYTES`    1 GiB      what one gzip file (an MNIST IDX ``.gz``) may inflate to
`MAX_ARRAY_BYTES`       8 GiB      the data of one array in an ``.npz`` / ``.npy`` file
`MAX_CLASS_IDS`         10**7      the class ids one ``--base-classes`` list names
======================  =========  ===========================================================

A CIFAR-10 batch has its own bound (`oodeval.environments.cifar.MAX_BATCH_BYTES`, 256 MiB).

The docs' page ``concepts/security.md`` states the same table.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from typing import BinaryIO

from oodeval.errors import OodevalError

__all__ = [
    "MAX_ARRAY_BYTES",
    "MAX_CLASS_IDS",
    "MAX_INFLATED_BYTES",
    "MAX_TEXT_BYTES",
    "ZLIB_MAX_RATIO",
    "human_bytes",
    "inflate_capped",
    "max_text_bytes",
    "read_capped",
]

MAX_TEXT_BYTES = 1 << 30
MAX_INFLATED_BYTES = 1 << 30
MAX_ARRAY_BYTES = 1 << 33
MAX_CLASS_IDS = 10_000_000
#: Deflate cannot inflate one byte to more than about 1032 (zlib's technical notes, "maximum
#: compression factor"), so a member declaring more per compressed byte is damaged or hostile.
ZLIB_MAX_RATIO = 1032

_TEXT_ENV = "OODEVAL_MAX_TEXT_BYTES"
CHUNK = 1 << 20  # bytes read at a time


def human_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit that keeps it at least 1, for messages.

    >>> human_bytes(1 << 30), human_bytes(64 * (1 << 40)), human_bytes(10)
    ('1 GiB', '64 TiB', '10 bytes')
    """
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            text = f"{size:.0f}" if size == int(size) else f"{size:.1f}"
            return f"{text} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def max_text_bytes() -> int:
    """The largest text input read: `MAX_TEXT_BYTES`, or ``OODEVAL_MAX_TEXT_BYTES`` when set
    (a positive whole number of bytes).

    >>> max_text_bytes() == MAX_TEXT_BYTES or "OODEVAL_MAX_TEXT_BYTES" in os.environ
    True
    """
    raw = os.environ.get(_TEXT_ENV, "").strip()
    if not raw:
        return MAX_TEXT_BYTES
    if not raw.isdigit() or int(raw) < 1:
        raise OodevalError(
            f"{_TEXT_ENV} must be a positive whole number of bytes, got {raw[:40]!r}; unset it "
            f"for the default ({human_bytes(MAX_TEXT_BYTES)})"
        )
    return int(raw)


def read_capped(stream: BinaryIO, limit: int) -> Iterator[bytes]:
    """The bytes of `stream` a chunk of at most `CHUNK` at a time, `limit` + 1 bytes at most: the
    caller refuses the stream when the chunks total over `limit`.

    >>> import io
    >>> [len(c) for c in read_capped(io.BytesIO(b"x" * 5), 3)]
    [4]
    """
    total = 0
    while total <= limit:
        block = stream.read(min(CHUNK, limit + 1 - total))
        if not block:
            return
        total += len(block)
        yield block


def inflate_capped(path: str | os.PathLike[str], limit: int, name: str) -> Iterator[bytes]:
    """Decompress the gzip file `path` a chunk at a time, refusing in one line (`name` names the
    file) once it inflates to more than `limit` bytes, before the excess is held.

    Unlike ``gzip.open(path).read()``, at most `limit` + 1 MiB is ever inflated, whatever the
    compressed stream holds (4 MB of gzip-compressed zeros inflate to 4 GiB). A damaged or
    truncated stream raises OSError or EOFError, as `gzip` does.

    >>> import gzip, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x.gz")
    >>> _ = open(p, "wb").write(gzip.compress(b"abc"))
    >>> b"".join(inflate_capped(p, 10, "x.gz"))
    b'abc'
    """
    with gzip.open(path, "rb") as stream:
        total = 0
        for block in iter(lambda: stream.read(CHUNK), b""):
            total += len(block)
            if total > limit:
                raise OodevalError(
                    f"{name} inflates to more than {human_bytes(limit)} (the bound on one gzip "
                    "file); it is damaged or not a file of its kind, replace it"
                )
            yield block
