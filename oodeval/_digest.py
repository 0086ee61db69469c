"""The one code digest: the first 16 hex digits of a SHA-256, of bytes or of Python code on disk.

A study config records the digest of each of its ``imports`` and a measure the digest of the
file defining it (`oodeval.measures.measure_code_digest`); both come from here, so a config's
``import_digests[file]`` equals the digest of a measure defined in that file.

A file too large to read at once (pretrained network weights) has its full SHA-256 from
`file_sha256`, read in chunks.

>>> short_digest(b"")
'e3b0c44298fc1c14'
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def short_digest(data: bytes) -> str:
    """``sha256(data)[:16]`` in hex."""
    return hashlib.sha256(data).hexdigest()[:16]


def code_digest(path: str | Path) -> str:
    """SHA-256 (first 16 hex digits) of Python code: a file's bytes, or for a folder every
    ``*.py`` below it (relative path and bytes, in sorted order).

    Parameters
    ----------
    path : a ``.py`` file or a folder.

    Returns
    -------
    str
        ``sha256(bytes)[:16]`` in hex, the bytes being the file's, or the concatenation of
        ``relative path + bytes`` of every ``*.py`` file below the folder.
    """
    path = Path(path)
    if not path.is_dir():
        return short_digest(path.read_bytes())
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*.py")):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def file_sha256(path: str | Path, *, chunk: int = 1 << 20) -> str:
    """The full SHA-256 (64 hex digits) of a file's bytes, read `chunk` bytes at a time.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     file_sha256(f.name)[:16] == short_digest(b"")
    True
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
