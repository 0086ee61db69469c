"""Read users' ``.npz`` archives safely: plain arrays only, never unpickled; write them
without following links.

One reader serves every ``.npz`` input of oodeval (prediction files, feature files, GMoP models,
the ``npz:`` SPECs of `oodeval shift`); each caller then checks the arrays it needs. One writer,
`write_npz`, serves every ``.npz`` output.

Before any array is allocated, each member's ``.npy`` header is read alone and its shape checked
(`array_size`): the bytes it claims, computed in exact integers (no int64 wrap), may not exceed
what the member holds (its declared size; deflate inflates at most `ZLIB_MAX_RATIO` to one) nor
`MAX_ARRAY_BYTES`. A member claiming 64 TiB is one error line, not a MemoryError.
"""

from __future__ import annotations

import io
import math
import os
import stat
import tokenize
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import IO

import numpy as np

from oodeval._files import write_file
from oodeval.errors import OodevalError
from oodeval.limits import MAX_ARRAY_BYTES, ZLIB_MAX_RATIO, human_bytes

_NPY_MAGIC = b"\x93NUMPY"
_HEADER_MOST = 100_000  # bytes of an .npy header (numpy's own bound is 10,000 by default)
_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def array_size(stream: IO[bytes], held: int) -> tuple[tuple[int, ...], np.dtype, int]:
    """Read the ``.npy`` header at the start of `stream` (`held` bytes long in all) and return
    (shape, dtype, data bytes) once the data it claims fits: at most `held` less the header and
    at most `MAX_ARRAY_BYTES`. The product of the dimensions is taken in Python integers, so a
    shape whose int64 product would wrap is refused too. Raises ValueError naming the problem.

    >>> buffer = io.BytesIO()
    >>> np.save(buffer, np.zeros((2, 3)))
    >>> array_size(io.BytesIO(buffer.getvalue()), len(buffer.getvalue()))[::2]
    ((2, 3), 48)
    """
    version = np.lib.format.read_magic(stream)
    if version not in _READERS:
        raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    try:  # numpy parses the header with a literal parser: garbled text raises what it finds
        shape, _, dtype = _READERS[version](stream, max_header_size=_HEADER_MOST)
    except (SyntaxError, tokenize.TokenError, TypeError, KeyError, MemoryError, RecursionError):
        raise ValueError("its .npy header is not readable") from None
    if dtype.hasobject:
        raise ValueError("has object dtype, which is never loaded")
    data = math.prod(int(d) for d in shape) * dtype.itemsize
    payload = held - stream.tell()
    if data > MAX_ARRAY_BYTES:
        raise ValueError(
            f"its header claims {human_bytes(data)}, over the bound of "
            f"{human_bytes(MAX_ARRAY_BYTES)} on one array"
        )
    if data > payload:
        raise ValueError(f"its header claims {human_bytes(data)} but it holds {payload:,} bytes")
    return tuple(int(d) for d in shape), dtype, data


def _check_members(path: str | Path, names: Collection[str] | None) -> None:
    """Check every member to be read before np.load: its declared size against what deflate can
    give, and an ``.npy`` member's header (`array_size`), whatever the member's name ends in."""
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if names is not None and name not in names:
                continue
            most = info.compress_size * (ZLIB_MAX_RATIO if info.compress_type else 1)
            if info.file_size > max(most, 1 << 16):
                raise ValueError(
                    f"array {name!r} declares {human_bytes(info.file_size)} inflated from "
                    f"{info.compress_size:,} bytes, more than deflate can give"
                )
            with archive.open(info) as member:
                if member.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                    continue  # np.load gives such a member as bytes, at most its declared size
            with archive.open(info) as member:
                try:
                    array_size(member, info.file_size)
                except ValueError as exc:
                    sep = " " if str(exc).startswith("has ") else ": "
                    raise ValueError(f"array {name!r}{sep}{exc}") from None


def read_npz(
    path: str | Path,
    *,
    what: str,
    example: str = "np.savez(path, name=array, ...)",
    names: Collection[str] | None = None,
) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """The arrays of the ``.npz`` archive `path` and the names of all arrays it holds.

    Read with ``allow_pickle=False``. Content that is not an ``.npz`` archive of plain arrays (a
    CSV, a pickle, a single ``.npy`` array, a damaged archive, an object-dtype array among the
    ones read) is one OodevalError naming the file, `what` it should have been and how to write
    one (`example`); np.load's own message for such content suggests unpickling, which is never
    repeated. A missing file or a folder stays FileNotFoundError / IsADirectoryError.

    Parameters
    ----------
    path : str or Path
        The file to read.
    what : str
        What the file should be, for the error message ("feature file").
    example : str
        How to write a valid file, for the error message.
    names : collection of str, optional
        Read only these arrays (those present); by default every array.

    Returns
    -------
    (arrays, found) : dict of name -> ndarray, and the names of every array in the archive.

    Examples
    --------
    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "x.npz")
    >>> np.savez(f, a=np.arange(3), b=np.ones(2))
    >>> arrays, found = read_npz(f, what="test file", names=["a"])
    >>> sorted(arrays), found
    (['a'], ('a', 'b'))
    """

    def refuse(problem: str) -> OodevalError:
        return OodevalError(
            f"cannot read {path} as a {what}: {problem}; save it as an .npz archive of plain "
            f"arrays with {example}"
        )

    if not stat.S_ISREG(os.stat(path).st_mode):
        raise refuse("it is not a regular file (a device, a pipe or a socket)")
    with open(path, "rb") as stream:
        if stream.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
            raise refuse("it holds a single array (.npy), not an .npz archive")
    try:
        _check_members(path, names)
        data = np.load(path, allow_pickle=False)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except ValueError as exc:
        if str(exc).startswith("array "):
            raise refuse(str(exc)) from None
        raise refuse("not a readable .npz archive") from None
    except (OSError, EOFError, zipfile.BadZipFile):
        raise refuse("not a readable .npz archive") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise refuse("it holds a single array (.npy), not an .npz archive")
    with data:
        found = tuple(data.files)
        arrays: dict[str, np.ndarray] = {}
        for name in found:
            if names is not None and name not in names:
                continue
            try:
                arrays[name] = data[name]
            except ValueError:
                raise refuse(f"array {name!r} has object dtype, which is never loaded") from None
            except (OSError, EOFError, zipfile.BadZipFile):
                raise refuse(f"array {name!r} is damaged") from None
            if not isinstance(arrays[name], np.ndarray):  # np.load gives a non-.npy member raw
                raise refuse(f"member {name!r} is not an .npy array")
    return arrays, found


def npz_path(path: str | Path) -> Path:
    """The file `write_npz` writes for `path`: `path` itself when its name ends in ``.npz`` or
    it is a device or pipe (``/dev/stdout``), else with ``.npz`` added (as ``np.savez`` does).
    Commands check and name this one.

    >>> npz_path("model").name, npz_path("model.npz").name, str(npz_path("/dev/null"))
    ('model.npz', 'model.npz', '/dev/null')
    """
    path = Path(path)
    if path.name.endswith(".npz") or (path.exists() and not path.is_file() and not path.is_dir()):
        return path
    return path.with_name(path.name + ".npz")


def read_npy(path: str | Path, *, what: str) -> np.ndarray:
    """The array of the ``.npy`` file `path` (``allow_pickle=False``), its header checked first
    (`array_size`: what it claims against the file's size and `MAX_ARRAY_BYTES`). Raises
    ValueError naming the problem, OSError as reading does.

    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(f, np.arange(3))
    >>> read_npy(f, what="cache file")
    array([0, 1, 2])
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{what} {path} is not a regular file")
    with open(path, "rb") as stream:
        array_size(stream, os.fstat(stream.fileno()).st_size)
    return np.load(path, allow_pickle=False)


def write_npz(path: str | Path, **arrays: np.ndarray) -> Path:
    """Write `arrays` as ``np.savez`` does (``.npz`` added to a name without it), through
    `oodeval._files.write_file` (atomically, never through a symbolic link); return the path.

    >>> import tempfile, os
    >>> write_npz(os.path.join(tempfile.mkdtemp(), "x"), a=np.arange(3)).name
    'x.npz'
    """
    path = npz_path(path)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return write_file(path, buffer.getvalue())
