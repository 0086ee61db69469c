"""The bounds oodeval sets on what users give it, and the one check of each: the ranges of
its numeric options and keywords, and the maxima of what it reads (with reading within them).

The command line and the Python API take the same numbers (a seed, a count of bootstrap
resamples, an interval level); each is checked here, against one bound constant, so both refuse
the same values with the same `OodevalError` line (naming the keyword, or on the command line the
flag: `oodeval.errors.option`) instead of a numpy or pandas exception (a
negative seed reaching `numpy.random.default_rng` raises its own ``ValueError``). Plain Python:
every layer may import it (`oodeval.measures` included).

>>> check_seed(7)
7
>>> check_resamples(0)
0
>>> try:
...     check_seed(-1, "seed")
... except OodevalError as exc:
...     print(exc)
seed must be an integer in [0, 4,294,967,295] (same seed, same draws), got -1

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
import math
import numbers
import os
from collections.abc import Iterator
from typing import Any, BinaryIO

from oodeval.errors import OodevalError, option

__all__ = [
    "MAX_ARRAY_BYTES",
    "MAX_CLASS_IDS",
    "MAX_INFLATED_BYTES",
    "MAX_RESAMPLES",
    "MAX_TEXT_BYTES",
    "SEED_LIMIT",
    "ZLIB_MAX_RATIO",
    "check_confidence",
    "check_count",
    "check_flag",
    "check_resamples",
    "check_seed",
    "human_bytes",
    "inflate_capped",
    "max_text_bytes",
    "read_capped",
]

#: Seeds lie in [0, 2**32): what numpy's legacy seeding accepts, well inside torch's and
#: `numpy.random.default_rng`'s ranges (study seeds and ``data_seed`` too).
SEED_LIMIT = 2**32
#: Most bootstrap resamples any function or command (``--bootstrap``) draws: far more than a
#: percentile interval needs (2,000 is the default), few enough that a mistyped count is refused
#: instead of running for hours.
MAX_RESAMPLES = 100_000


def _whole(value: Any) -> bool:
    """An integer (Python's or numpy's), never a bool, a float or a string."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_seed(value: Any, name: str = "seed") -> int:
    """`value` as an int when it is an integer in [0, `SEED_LIMIT`); else OodevalError.

    >>> check_seed(2**32 - 1)
    4294967295
    """
    if not _whole(value) or not 0 <= value < SEED_LIMIT:
        raise OodevalError(
            f"{option(name)} must be an integer in [0, {SEED_LIMIT - 1:,}] (same seed, same "
            f"draws), got {value!r}"
        )
    return int(value)


def check_resamples(value: Any, name: str = "bootstrap", *, minimum: int = 0) -> int:
    """`value` as an int when it is a whole number of resamples in [`minimum`,
    `MAX_RESAMPLES`] (0 means no intervals where `minimum` is 0); else OodevalError.

    >>> check_resamples(2000, "n_resamples", minimum=1)
    2000
    """
    if not _whole(value):
        raise OodevalError(f"{option(name)} must be a whole number of resamples, got {value!r}")
    if value > MAX_RESAMPLES:
        raise OodevalError(
            f"{option(name)} must be at most {MAX_RESAMPLES:,} (the cap), got {value:,}"
        )
    if value < minimum:
        if minimum == 0:
            raise OodevalError(
                f"{option(name)} must be 0 (off) or a number of resamples up to "
                f"{MAX_RESAMPLES:,} (the cap), got {value:,}"
            )
        raise OodevalError(f"{option(name)} must be a positive integer, got {value!r}")
    return int(value)


def check_count(value: Any, name: str, *, minimum: int = 0, what: str = "") -> int:
    """`value` as an int when it is an integer >= `minimum` (a count: environments,
    algorithms, degrees of freedom); else OodevalError, `what` saying what it counts.

    >>> check_count(3, "n_envs")
    3
    """
    if not _whole(value) or value < minimum:
        counts = f" ({what})" if what else ""
        raise OodevalError(f"{option(name)} must be an integer >= {minimum}{counts}, got {value!r}")
    return int(value)


def check_confidence(value: Any, name: str = "confidence") -> float:
    """`value` as a float when it is a real number strictly between 0 and 1 (an interval's
    level); else OodevalError.

    >>> check_confidence(0.95)
    0.95
    """
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not real or math.isnan(value) or not 0 < value < 1:
        raise OodevalError(f"{option(name)} must lie strictly between 0 and 1, got {value!r}")
    return float(value)


def check_flag(value: Any, name: str) -> bool:
    """`value` as a bool when it is True or False (numpy's bools too); else OodevalError: a
    string such as ``"no"`` would otherwise count as True.

    >>> import numpy as np
    >>> check_flag(False, "percent"), check_flag(np.bool_(True), "percent")
    (False, True)
    """
    kind = type(value)
    numpy_bool = kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    if not isinstance(value, bool) and not numpy_bool:
        raise OodevalError(f"{name} must be True or False, got {value!r}")
    return bool(value)

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
