"""Opening a study store for reading, without writing anything, in any folder one may read.

A store is a SQLite database in WAL mode. SQLite reads such a file through its wal-index, the
``-shm`` file beside it (with the write-ahead log, ``-wal``). A read-only connection
(``mode=ro``) creates both when they are missing, so it needs a folder it may write, or both
files already there (it then reads through them without writing). `open_reader` picks the
connection:

- ``mode=ro``, whenever SQLite can open it that way: a folder this user may write, or one
  holding ``-shm`` and ``-wal`` already. It takes SQLite's shared locks and sees the last
  committed unit, even while a writer runs.
- ``mode=ro&immutable=1``, when SQLite cannot create ``-shm``/``-wal`` (the folder is not
  writable for this user: archives, read-only mounts, shared folders) and no ``-wal`` file
  holds changes: then no connection has the file open in WAL mode (each keeps a ``-shm``),
  and everything committed is in ``results.sqlite`` itself. SQLite then takes no locks and
  assumes the file does not change while it is read; `Reader.check_unchanged` refuses a read
  during which it changed (a writer with the right to write the folder finished meanwhile).
- refused in one line when a ``-wal`` file holds changes SQLite cannot read without creating
  ``-shm`` (a folder copied while a run wrote to it, or a stopped run's log, unwritable).

A read-only connection cannot remove the ``-wal``/``-shm`` files it created: `Reader.close` then
has SQLite remove them, by closing a read-write connection that reads nothing, as the last
connection closing does (it leaves them while another connection uses the file, and writes
nothing to the store: the log it would copy back is empty).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from oodeval._files import refuse_links
from oodeval.errors import OodevalError

#: SQLite's messages when a read-only connection cannot create (or open) ``-shm``/``-wal``.
_SIDE_FILE_ERRORS = ("attempt to write a readonly database", "unable to open database file")


def side_file(path: Path, suffix: str) -> Path:
    """The ``-wal`` or ``-shm`` file of the store `path`.

    >>> side_file(Path("s/results.sqlite"), "-wal").name
    'results.sqlite-wal'
    """
    return path.with_name(path.name + suffix)


def connect(path: Path, mode: str) -> sqlite3.Connection:
    """A connection to `path` with the URI parameters `mode` (e.g. ``mode=ro``)."""
    return sqlite3.connect(
        f"{path.resolve().as_uri()}?{mode}", uri=True, isolation_level=None, timeout=30.0
    )


def file_stamp(path: Path) -> tuple[int, int, int, int]:
    """(inode, size, mtime, ctime) of `path`: what changes when the file is written."""
    s = path.stat()
    return (s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


@dataclass
class Reader:
    """An open read-only connection to a store, and how it was opened.

    ``immutable`` holds the file's (inode, size, mtime, ctime) when it was opened with
    ``immutable=1`` (None otherwise); ``created_side_files`` is True when this connection
    created the ``-wal``/``-shm`` files (neither existed before).
    """

    path: Path
    conn: sqlite3.Connection
    immutable: tuple[int, int, int, int] | None = None
    created_side_files: bool = False

    def check_unchanged(self) -> None:
        """Refuse (OodevalError) when the file of an immutable read changed while it was read."""
        if self.immutable is None:
            return
        try:
            same = file_stamp(self.path) == self.immutable
        except OSError:
            same = False
        if not same:
            raise OodevalError(
                f"{self.path} changed while it was read (a `study run` by a user who may write "
                f"{self.path.parent}?); nothing read is used: run the command again when it ends"
            )

    def close(self) -> None:
        """Close the connection, and have SQLite remove the side files this reader created."""
        self.conn.close()
        wal = side_file(self.path, "-wal")
        try:
            empty_log = wal.stat().st_size == 0
        except OSError:
            return  # gone already (or never made)
        if self.created_side_files and empty_log:
            try:
                cleaner = connect(self.path, "mode=rw")
                try:
                    cleaner.execute("SELECT count(*) FROM sqlite_master").fetchone()
                finally:
                    cleaner.close()
            except sqlite3.Error:
                pass  # a damaged file: the empty side files stay, harmless


def open_reader(path: Path) -> Reader:
    """Open the store `path` read-only (see the module doc for which mode and when).

    SQLite's errors other than "cannot create the side files" propagate (`sqlite3.Error`);
    a log SQLite cannot read is an OodevalError. A store that is a symbolic link is read at its
    target, where SQLite keeps the side files, so that a reader removes those it created there.
    A ``-wal`` or ``-shm`` beside that target that is a symbolic link is refused
    (`oodeval._files.link_refusal`) before SQLite opens anything.
    """
    path = Path(os.path.realpath(path))
    # SQLite follows links: a planted -wal/-shm would be read (or created) through, elsewhere
    refuse_links(side_file(path, "-wal"), side_file(path, "-shm"))
    fresh = not any(side_file(path, s).exists() for s in ("-wal", "-shm"))
    conn = connect(path, "mode=ro")
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens -wal and -shm
    except sqlite3.OperationalError as exc:
        conn.close()
        if not str(exc).startswith(_SIDE_FILE_ERRORS):
            raise
        return _immutable_reader(path, exc)
    except BaseException:
        conn.close()
        raise
    return Reader(path, conn, created_side_files=fresh)


def _immutable_reader(path: Path, exc: sqlite3.Error) -> Reader:
    """`path` opened with ``immutable=1``, unless its ``-wal`` holds changes (refused)."""
    wal = side_file(path, "-wal")
    try:
        logged = wal.stat().st_size
    except FileNotFoundError:
        logged = 0
    if logged:
        raise OodevalError(
            f"cannot read {path} ({exc}): {wal.name} beside it holds changes not yet in "
            f"{path.name} (a run stopped, or the folder was copied while one wrote), and SQLite "
            f"must create {path.name}-shm to read them, which {path.parent} does not allow; copy "
            f"the study folder, {wal.name} included, to a folder you may write and read the copy"
        )
    stamp = file_stamp(path)
    return Reader(path, connect(path, "mode=ro&immutable=1"), immutable=stamp)
