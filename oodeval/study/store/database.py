"""The SQLite file under a study store: opening it, its checks, statements, transactions, and
SQLite's errors turned into one clear line.

`StoreFile` is the connection every other module of `oodeval.study.store` works through, by its
public methods only (`StoreFile.execute`, `StoreFile.transaction`, `StoreFile.guard`, ...);
`oodeval.study.store.result_store.ResultStore` is a `StoreFile` with the study's operations on
top. `create_store` makes a new, empty store; the file-system helpers here (`fsync`,
`link_or_copy`, `unused_path`) are what a rebuild needs to swap files safely.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from oodeval._files import open_no_link
from oodeval.errors import OodevalError
from oodeval.study.store.readonly import Reader, connect, open_reader, side_file
from oodeval.study.store.records import StoreDamagedError
from oodeval.study.store.schema import (
    INTEGRITY_COLUMNS,
    RESTORE_HINT,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    SIDE_SUFFIXES,
    STORE_NAME,
    UNIT_COLUMNS,
)


class StoreFile:
    """An open ``DIR/results.sqlite``: read-only (``writer=False``) or read-write.

    Parameters
    ----------
    directory : the study folder.
    writer : open read-write (WAL journal, ``synchronous=FULL``, foreign keys on); the caller
        holds the folder's lock. Otherwise read-only, writing nothing, in a folder this user
        may not write too (`oodeval.study.store.readonly`).

    The file is opened by `open`, which runs SQLite's full integrity check on it, for readers
    and the writer alike (one damage check for every command; it also compares every index with
    its table); ``sqlite_check`` then holds SQLite's messages (empty when it says ok),
    ``tables`` the names in its schema.
    """

    check_kind = "integrity check"

    def __init__(self, directory: str | Path, *, writer: bool) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STORE_NAME
        self.writer = writer
        self.sqlite_check: list[str] = []
        self.tables: set[str] = set()
        self._columns: list[str] = []
        self._conn: sqlite3.Connection | None = None
        self._reader: Reader | None = None

    def open(self) -> None:
        """Connect, check the file is a study store, and run SQLite's check on it."""
        if self.path.stat().st_size == 0:
            raise StoreDamagedError(
                f"{self.path} is empty (0 bytes): it holds no study and is never started over "
                f"silently; restore it from a backup, or delete it to run the study again in "
                f"{self.directory}"
            )
        try:
            if self.writer:
                conn = connect(self.path, "mode=rw")
            else:
                self._reader = open_reader(self.path)
                conn = self._reader.conn
        except sqlite3.Error as exc:
            raise _unopenable(self.path, exc) from None
        conn.text_factory = decode_text
        self._conn = conn
        try:
            if self.writer:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("PRAGMA foreign_keys=ON")
            self.refresh_layout()
        except sqlite3.DatabaseError as exc:
            raise _unopenable(self.path, exc) from None
        missing = {"study", "units", "results"} - self.tables
        if missing:
            raise StoreDamagedError(
                f"{self.path} is not an oodeval study store (tables missing: "
                f"{', '.join(sorted(missing))}); {RESTORE_HINT}"
            )
        check_schema(self.path, self._stored_schema())
        self.sqlite_check = sqlite_check(conn, "integrity_check")

    def _stored_schema(self) -> str | None:
        """The ``schema`` row of the ``study`` table, or None when it is missing or cannot be
        read (a damaged table: the verified read names the damage)."""
        try:
            row = self.execute("SELECT value FROM study WHERE key = 'schema'").fetchone()
        except sqlite3.DatabaseError:
            return None
        return None if row is None else str(row[0])

    def check_unchanged(self) -> None:
        """Refuse (OodevalError) when a reader opened the file immutable (a folder it may not
        write) and the file changed while it was read; nothing otherwise."""
        if self._reader is not None:
            self._reader.check_unchanged()

    def refresh_layout(self) -> None:
        """Read the names in the file's schema (``tables``) and the ``units`` columns again."""
        self.tables = {r[0] for r in self.execute("SELECT name FROM sqlite_master")}
        self._columns = [r[1] for r in self.execute("PRAGMA table_info(units)")]

    @property
    def has_checksums(self) -> bool:
        """False for a schema 1 store (written before units carried checksums)."""
        return "checksum" in self._columns

    def unit_columns(self) -> tuple[str, ...]:
        """The columns of the ``units`` table, in order (no integrity record in schema 1)."""
        return UNIT_COLUMNS + (INTEGRITY_COLUMNS if self.has_checksums else ())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one statement (inside `transaction` when it writes)."""
        if self._conn is None:
            raise OodevalError(f"{self.path} is closed")
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each of `rows`."""
        if self._conn is None:
            raise OodevalError(f"{self.path} is closed")
        self._conn.executemany(sql, rows)

    @contextlib.contextmanager
    def strict_text(self) -> Iterator[None]:
        """Decode text strictly (fast) inside the block: text that is not UTF-8 raises."""
        assert self._conn is not None
        self._conn.text_factory = str
        try:
            yield
        finally:
            self._conn.text_factory = decode_text

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """``BEGIN IMMEDIATE ... COMMIT``, rolled back on any exception."""
        return _transaction(self._conn)

    @contextlib.contextmanager
    def guard(self, doing: str) -> Iterator[None]:
        """Turn a SQLite exception into one clear OodevalError line."""
        try:
            yield
        except sqlite3.Error as exc:
            raise _translate(exc, self.path, doing) from None

    def study_rows(self) -> dict[str, Any]:
        """{key: value} of the ``study`` table (config, its checksum, schema, repairs)."""
        try:
            return dict(self.execute("SELECT key, value FROM study").fetchall())
        except sqlite3.DatabaseError as exc:
            raise StoreDamagedError(
                f"{self.path}: the study table cannot be read ({exc}); {RESTORE_HINT}"
            ) from None

    def set_study(self, key: str, value: str) -> None:
        """Write one row of the ``study`` table (inside the caller's transaction)."""
        self.execute("INSERT OR REPLACE INTO study(key, value) VALUES (?, ?)", (key, value))

    def require_writer(self) -> None:
        """Refuse (OodevalError) when the file is open read-only."""
        if not self.writer:
            raise OodevalError(f"{self.path} is open read-only; open it with create=True to write")

    def require_writable(self) -> None:
        """Refuse unless open as the writer on a file that passes SQLite's check."""
        self.require_writer()
        if self.sqlite_check:
            raise StoreDamagedError(
                f"{self.path} fails SQLite's integrity check; call move_damaged_aside() (as "
                "`oodeval study run` does) before writing to it"
            )

    def disconnect(self) -> None:
        """Close the connection (`open` connects again)."""
        if self._reader is not None:
            self._reader.close()  # removes the -wal/-shm files the reader created
        elif self._conn is not None:
            self._conn.close()
        self._conn = self._reader = None


def check_schema(path: Path, schema: str | None) -> None:
    """Refuse (OodevalError) a store written by a newer schema than `SCHEMA_VERSION`, naming both
    versions, and (StoreDamagedError) one whose schema is not a version number; nothing for this
    schema, an older one (migrated by the writer, `oodeval.study.store.migrations`) or none
    recorded (schema 1). Every command opens a store through `StoreFile.open`, which calls it
    before anything is read or written.

    >>> check_schema(Path("s/results.sqlite"), "1")
    >>> try:
    ...     check_schema(Path("s/results.sqlite"), "99")
    ... except OodevalError as exc:
    ...     print(str(exc)[:82])
    s/results.sqlite was written by a newer oodeval (store schema 99; this oodeval rea
    """
    if schema is None:
        return
    text = schema.strip()
    if not (text.isascii() and text.isdigit()):
        raise StoreDamagedError(
            f"{path} records the schema version {schema[:40]!r}, which is no version "
            f"number; {RESTORE_HINT}"
        )
    if int(text) > int(SCHEMA_VERSION):
        raise OodevalError(
            f"{path} was written by a newer oodeval (store schema {int(text)}; this oodeval "
            f"reads schema {SCHEMA_VERSION} and older); upgrade oodeval to a release that "
            f"reads schema {int(text)} to use it"
        )


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection | None) -> Iterator[None]:
    assert conn is not None
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def or_default(read: Callable[[], Any], default: Any) -> Any:
    """What `read` returns, or `default` when the store cannot answer (damaged or closed)."""
    try:
        return read()
    except (sqlite3.DatabaseError, OodevalError):
        return default


def key_match(key: Any) -> tuple[str, Any]:
    """The SQL condition and parameter finding rows stored under `key` exactly as it was read
    (text that is not UTF-8 was decoded with surrogates; it is matched byte for byte).

    >>> key_match("a|ERM|seed=0")
    ('unit_key = ?', 'a|ERM|seed=0')
    >>> key_match(b"\\xff".decode("utf-8", "surrogateescape"))
    ('unit_key = CAST(? AS TEXT)', b'\\xff')
    """
    if isinstance(key, str):
        raw = key.encode("utf-8", "surrogateescape")
        if raw.decode("utf-8", "replace") != key:
            return "unit_key = CAST(? AS TEXT)", raw
    return "unit_key = ?", key


def decode_text(data: bytes) -> str:
    """Text of the file as read: undecodable bytes are kept as surrogates.

    Damaged text must stay data: the checksum (not a decoding error) tells the unit is damaged.
    """
    return data.decode("utf-8", "surrogateescape")


def writer_files(path: Path) -> tuple[Path, ...]:
    """The store file `path` and the files SQLite writes beside it (``-wal``, ``-shm``,
    ``-journal``): the names a writer checks are no symbolic links before it connects (SQLite
    follows links).

    >>> [p.name for p in writer_files(Path("s/results.sqlite"))]
    ['results.sqlite', 'results.sqlite-wal', 'results.sqlite-shm', 'results.sqlite-journal']
    """
    return (path, *(side_file(path, suffix) for suffix in SIDE_SUFFIXES))


def fresh_sqlite_file(path: Path) -> sqlite3.Connection:
    """A connection to a new SQLite file at `path`, a temporary name of oodeval's own: whatever
    stands there and at its side files (a stale copy, a planted link) is removed first, so
    SQLite never writes through a link."""
    for stale in writer_files(path):
        stale.unlink(missing_ok=True)  # removes a link itself, never what it points to
    return sqlite3.connect(path, isolation_level=None)


def create_store(path: Path) -> None:
    """Create an empty store with its tables under a temporary name and move it into place, so
    `path` never exists without its schema (a 0-byte store is always damage)."""
    tmp = path.with_name(path.name + ".new")
    conn = fresh_sqlite_file(tmp)
    try:
        conn.executescript(SCHEMA_SQL)
        conn.execute("INSERT INTO study(key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
    finally:
        conn.close()
    fsync(tmp)
    os.replace(tmp, path)
    fsync(path.parent)


def sqlite_check(conn: sqlite3.Connection, pragma: str) -> list[str]:
    """SQLite's ``quick_check`` / ``integrity_check`` messages; empty when it says ok."""
    try:
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    if rows == ["ok"]:
        return []
    # one row may hold several messages, one a line; '*** in database main ***' is a heading
    lines = [line.strip() for row in rows for line in row.splitlines()]
    return [line for line in lines if line and not line.startswith("***")]


def _translate(exc: sqlite3.Error, path: Path, doing: str) -> OodevalError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return OodevalError(
            f"{path} stayed locked by another program for 30 s while {doing} ({text}); close "
            "other programs that have it open (an sqlite3 shell, a viewer) and run again"
        )
    if "full" in text or "I/O" in text or "readonly" in text:
        return OodevalError(
            f"cannot write {path} while {doing} ({text}); free disk space or fix the folder's "
            "permissions, then run again (finished units are kept)"
        )
    return StoreDamagedError(
        f"{path} failed while {doing} ({text}); run `oodeval study verify "
        f"{path.parent}` to see the damage"
    )


def _unopenable(path: Path, exc: sqlite3.Error) -> OodevalError:
    if "unable to open" in str(exc):  # permissions, not damage
        return OodevalError(
            f"cannot open {path} ({exc}); it and its folder must be readable: fix their "
            "permissions or copy the study elsewhere"
        )
    return StoreDamagedError(f"{path} is not a readable study store ({exc}); {RESTORE_HINT}")


def fsync(path: Path) -> None:
    """Flush a file (or a folder's entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def link_or_copy(original: Path, target: Path) -> None:
    """Make `target` (a new name) a hard link to `original`, or a copy where links are not
    possible; the copy is created exclusively, so it never writes through a link at `target`."""
    try:
        os.link(original, target)
    except FileExistsError:
        raise
    except OSError:
        with (
            open(original, "rb") as src,
            os.fdopen(open_no_link(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        shutil.copystat(original, target)


def unused_path(path: Path, *, with_suffixes: Sequence[str] = ()) -> Path:
    """`path`, or ``path-2``, ``path-3``, ... the first name that is not taken, by a file or a
    link (dangling or not), nor with any of `with_suffixes` added."""
    candidate, n = path, 1
    while any(
        os.path.lexists(candidate.with_name(candidate.name + s)) for s in ("", *with_suffixes)
    ):
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate
