"""Read users' ``.npz`` archives safely: plain arrays only, never unpickled; write them
without following links.

One reader serves every ``.npz`` input of oodeval (prediction files, feature files, GMoP models,
the ``npz:`` SPECs of `oodeval shift`); each caller then checks the arrays it needs. One writer,
`write_npz`, serves every ``.npz`` output.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Collection
from pathlib import Path

import numpy as np

from oodeval._files import write_file
from oodeval.errors import OodevalError


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

    try:
        data = np.load(path, allow_pickle=False)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
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
