"""The one code digest: the first 16 hex digits of a SHA-256, of bytes or of Python code on disk.

A study config records the digest of each of its ``imports`` and a measure the digest of the
file defining it (`oodeval.measures.measure_code_digest`); both come from here, so a config's
``import_digests[file]`` equals the digest of a measure defined in that file.

A pretrained weights file has its full SHA-256 from `file_sha256`, or, read once to be both
hashed and parsed, from `read_file`: a `ReadFile` is the file's path (a str) carrying the bytes
read and their SHA-256, so that code handed one never reads the file again. `file_bytes` is the
one place either reads a file.

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


def file_bytes(path: str | Path) -> bytes:
    """The bytes of file `path`: the one read of `read_file` and `file_sha256` (OSError when it
    cannot be read)."""
    return Path(path).read_bytes()


class ReadFile(str):
    """The path of a file (a str: it goes wherever the path goes, and means the same) carrying
    what one read of the file gave: its bytes (`data`) and their SHA-256 (`sha256`, 64 hex
    digits). `read_file` and `file_sha256` give a `ReadFile` back as it is, never reading again.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     read = read_file(f.name)
    ...     read == f.name, read.data, read_file(read) is read
    (True, b'', True)
    """

    data: bytes
    sha256: str

    def __new__(cls, path: str | Path, data: bytes) -> ReadFile:
        read = super().__new__(cls, str(path))
        read.data, read.sha256 = data, hashlib.sha256(data).hexdigest()
        return read

    def __getnewargs__(self) -> tuple[str, bytes]:  # type: ignore[override]  # str's is (str,)
        return (str(self), self.data)


def read_file(path: str | Path) -> ReadFile:
    """File `path` read once (`file_bytes`): its path with its bytes and their SHA-256; `path`
    itself when it is a `ReadFile` already. OSError when the file cannot be read."""
    if isinstance(path, ReadFile):
        return path
    return ReadFile(path, file_bytes(path))


def file_sha256(path: str | Path) -> str:
    """The full SHA-256 (64 hex digits) of a file's bytes (`read_file`: a `ReadFile`'s own,
    without reading the file again).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     file_sha256(f.name)[:16] == short_digest(b"")
    True
    """
    return read_file(path).sha256
