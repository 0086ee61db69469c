"""One writer per study folder: an exclusive `flock` on ``DIR/study.lock`` for the writer's life.

Every writer of a study store (`oodeval.study.store.ResultStore` opened with ``create=True``, as
``oodeval study run`` does) holds this lock from the moment it opens the store until it closes
it; a second writer refuses at once, naming the holder's host, PID and start time, which the
holder writes into the lock file. Readers (status, analyze, report, verify) never take it.

The kernel releases a `flock` when its holder dies, however it dies (SIGKILL included), so a dead
holder's lock is free: the next writer takes it over and overwrites the stale holder line. The
file itself is never deleted (deleting a lock file lets two processes lock two different files).
A symbolic link where the file should be is refused, never followed (`oodeval._files`).

Where it works: local file systems, and NFS (v4, or v3 with lockd), where Linux implements
`flock` with NFS byte-range locks shared by every client; a holder on another host that died
keeps the lock until the NFS server's lease runs out (90 s by default on NFSv4). A file system
without locks (``flock`` answers ENOLCK/ENOTSUP/ENOSYS, e.g. Lustre mounted without ``-o
flock``) is refused with one line: SQLite needs working locks on such a folder too. Without
``fcntl`` (Windows) writers are refused; readers do not need the lock.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from oodeval._files import open_no_link
from oodeval._json import load_json
from oodeval._time import utc_timestamp
from oodeval.errors import OodevalError

try:
    import fcntl
except ImportError:  # not POSIX (Windows): readers work, writers are refused in one line
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = "study.lock"


class StudyLockedError(OodevalError):
    """Another live process holds the study folder's write lock."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or last held) a study lock, as written in the lock file."""

    host: str
    pid: int
    started: str
    command: str = ""

    def describe(self) -> str:
        """'host H, PID P, since T'; on this host, says when that PID is no longer running.

        >>> LockHolder("node7", 4242, "2025-01-01T00:00:00+00:00").describe()
        'host node7, PID 4242, since 2025-01-01T00:00:00+00:00'
        """
        text = f"host {self.host}, PID {self.pid}, since {self.started}"
        if self.host == socket.gethostname() and not _alive(self.pid):
            # the lock is held, so a process that inherited the descriptor still runs
            text += " (no longer running; a child process of it still holds the lock)"
        return text


def read_holder(directory: str | Path) -> LockHolder | None:
    """The holder recorded in ``DIR/study.lock`` (None when the file is missing, empty or
    unreadable). It is only a record: whether the lock is held is what `flock` says."""
    try:
        text = (Path(directory) / LOCK_NAME).read_text(encoding="utf-8")
        data = load_json(text, where=LOCK_NAME)  # a repeated key or deep nesting: unreadable
        return LockHolder(
            str(data["host"]), int(data["pid"]), str(data["started"]), str(data.get("command", ""))
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class StudyLock:
    """The exclusive write lock of one study folder; a context manager.

    ``acquire()`` takes it without waiting or raises `StudyLockedError` naming the holder;
    ``release()`` (or leaving the ``with`` block) frees it. The folder must exist.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> StudyLock:
        if self._fd is not None:
            return self
        if fcntl is None:
            raise OodevalError(
                "running a study needs POSIX file locks (Linux, macOS); run it there, or in WSL"
            )
        try:
            fd = open_no_link(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # a link is refused
        except OSError as exc:
            raise OodevalError(
                f"cannot create the lock file {self.path} ({exc.strerror}); the study folder must "
                "be writable to run a study in it"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                holder = read_holder(self.directory)
                who = holder.describe() if holder else "holder unknown"
                raise StudyLockedError(
                    f"{self.directory} is being written by another oodeval study run ({who}); "
                    "wait for it to finish or stop it, then run again (status, analyze and "
                    "report work meanwhile)"
                ) from None
            raise OodevalError(
                f"cannot lock {self.path} ({exc.strerror}): the file system does not support "
                "locks; put the study folder on a local disk or a file system with working "
                "locks (NFS with lockd, Lustre with -o flock)"
            ) from None
        self._fd = fd
        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": utc_timestamp(),
            "command": " ".join(sys.argv),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # the file names no holder while the lock is free
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> StudyLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def study_lock(directory: str | Path) -> StudyLock:
    """Take the write lock of study folder `directory` (see the module doc); release it with
    ``release()`` or use the result as a context manager."""
    return StudyLock(directory).acquire()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
