"""Writing files and folders without following symbolic links: the one place oodeval writes.

A study folder may be shared, copied or unpacked from someone else's archive, so a name in it
(``analysis/``, ``report.html``, ``study.lock``, ``results.sqlite`` and its ``-wal``/``-shm``/
``-journal`` files) may be a symbolic link to a file or folder elsewhere. Following it would
overwrite that file, fill that folder, or write into another study's store. So every file
oodeval writes goes through `write_file` (a temporary file made in the same folder, then
``os.replace``, which replaces a link rather than following it), a folder it makes through
`make_folder`, and a file it opens for writing in place through `open_no_link` (``O_NOFOLLOW``).
Each first refuses a link where the file should be with `refuse_links`: one line naming it,
before anything is written.

The rule for paths a user names: a file named on the command line (``--out report.html``,
``--output table.csv``) must not be a link to a file or a folder, nor a dangling one; a link
there to a character device, a pipe or a socket (``/dev/stdout``, ``/dev/fd/N``, the shell's
``>(...)``) is written in place (``named_by_user=True``). A folder named there (``study run
--out DIR``, ``--analysis-dir``) may be any link, as may any folder above a written file: the
user chose it. The names oodeval picks inside a folder are never links, whatever they point to.

A replaced file is a new file (a new inode): a hard link to the old one elsewhere keeps the old
content. When the folder may not be written but the file may (an ``--output`` file in a shared
folder), the temporary file cannot be made, and the file is rewritten in place instead.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from oodeval.errors import OodevalError

__all__ = [
    "WriteError",
    "all_or_nothing",
    "names_the_file",
    "link_refusal",
    "make_folder",
    "open_no_link",
    "refuse_links",
    "write_file",
    "write_files",
]


class WriteError(OodevalError, OSError):
    """Writing a file failed (a full disk, an I/O error): one line naming the file and the
    cause. An OSError too, for callers that retry or skip an optional write."""


#: Errors about where a file is (no folder, no permission, a folder there): their own lines
#: name the file already (`oodeval.cli._common.reports_errors`); every other is a `WriteError`.
_WHERE_ERRORS = (errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOENT, errno.ENOTDIR, errno.EEXIST)
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@contextmanager
def names_the_file(path: str | Path) -> Iterator[None]:
    """Inside the block, an OSError of writing `path` (other than `_WHERE_ERRORS`) becomes a
    `WriteError` naming `path` and the cause.

    >>> with names_the_file("/dev/full"):  # doctest: +ELLIPSIS
    ...     raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    Traceback (most recent call last):
    oodeval._files.WriteError: cannot write /dev/full (No space left on device); free some ...
    """
    try:
        yield
    except OSError as exc:
        if isinstance(exc, WriteError) or exc.errno in _WHERE_ERRORS:
            raise
        reason = exc.strerror or type(exc).__name__
        fix = (
            "free some space or choose another path"
            if exc.errno in _FULL
            else "check the disk and the path, or choose another path"
        )
        raise WriteError(f"cannot write {path} ({reason}); {fix}") from None


def link_refusal(path: str | Path) -> OodevalError:
    """The one-line refusal of a symbolic link at `path`, where oodeval would write.

    >>> print(link_refusal("study/report.html"))  # doctest: +NORMALIZE_WHITESPACE
    study/report.html is a symbolic link; oodeval does not write through links it did not
    create: remove it, or choose another folder
    """
    return OodevalError(
        f"{path} is a symbolic link; oodeval does not write through links it did not create: "
        "remove it, or choose another folder"
    )


def refuse_links(*paths: str | Path, named_by_user: bool = False) -> None:
    """Raise `link_refusal` for the first of `paths` that is a symbolic link (dangling or not).

    Only the last part of each path is looked at (``os.lstat``): folders above it may be links.
    `named_by_user` (files the user named on the command line): a link to a character device,
    a pipe or a socket (``/dev/stdout``, ``>(...)``) is let through; `write_file` writes it in
    place.
    """
    for path in paths:
        if os.path.islink(path) and not (named_by_user and _leads_to_a_stream(path)):
            raise link_refusal(path)


def is_stream(mode: int) -> bool:
    """A character device, a pipe or a socket: written in place, never replaced."""
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _leads_to_a_stream(path: str | Path) -> bool:
    try:
        return is_stream(os.stat(path).st_mode)  # the link followed
    except OSError:  # dangling, or a loop
        return False


def make_folder(path: str | Path, *, what: str = "folder", named_by_user: bool = False) -> Path:
    """Create the folder `path` (and missing folders above it), or reuse it. Returns it as a
    Path.

    A symbolic link at `path` is refused, unless `named_by_user` (a folder the user named,
    e.g. ``study run --out DIR``: they chose it). When the system refuses (a read-only or
    virtual file system such as /proc, no permission), an OodevalError names the `what` and
    the reason, in one line: nothing is created then.
    """
    path = Path(path)
    if not named_by_user:
        refuse_links(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OodevalError(
            f"cannot create the {what} {path} ({reason}); choose a folder you can write to"
        ) from None
    return path


def open_no_link(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode)``: a file descriptor; a symbolic
    link at `path` is refused (`link_refusal`) instead of followed, even one planted after a
    check."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise link_refusal(path) from None
        raise


def write_file(path: str | Path, data: str | bytes, *, named_by_user: bool = False) -> Path:
    """Write `data` (text as UTF-8) to the file `path`, never through a symbolic link.

    A regular file (or none) is replaced atomically: `data` goes into a new temporary file in
    the same folder (created exclusively, keeping an existing file's permissions), which then
    replaces `path` (``os.replace`` replaces a link, never follows it), so a reader sees the old
    file or the new one, never half of one; the result is a new inode (a hard link to the old
    file keeps the old content). Where the folder refuses the temporary file (no permission, a
    read-only mount) but an existing regular file is there, that file is rewritten in place.
    A device or pipe (``/dev/null``) is written in place. A link at `path` is refused
    (`link_refusal`) and nothing is written, except, when `named_by_user`, a link to a
    character device, a pipe or a socket (``/dev/stdout``; see `refuse_links`).
    Returns `path` as a Path.
    """
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    refuse_links(path, named_by_user=named_by_user)
    mode = _mode(path)
    with names_the_file(path):
        if mode is not None and stat.S_ISLNK(mode):  # to a device or pipe the user named
            _write_to_stream(path, raw)
        elif mode is not None and not stat.S_ISREG(mode):
            _write_in_place(open_no_link(path, os.O_WRONLY), raw)
        else:
            _replace(path, raw, mode)
    return path


@contextmanager
def all_or_nothing() -> Iterator[list[Path]]:
    """A list to which a command adds each file it has written; when the block fails (a full
    disk at the second file, Ctrl-C), the regular files in it are removed, and then the folders
    in it that are empty (a folder the command made for them), so a failed command leaves none
    of its files behind. Devices and pipes (``/dev/stdout``) are left alone.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> try:
    ...     with all_or_nothing() as written:
    ...         written.append(write_file(d / "a.csv", "x"))
    ...         raise WriteError("cannot write b.csv")
    ... except WriteError:
    ...     pass
    >>> (d / "a.csv").exists()
    False
    """
    written: list[Path] = []
    try:
        yield written
    except BaseException:
        for path in written:
            if os.path.isfile(path) and not os.path.islink(path):
                Path(path).unlink(missing_ok=True)
        for path in reversed(written):
            if os.path.isdir(path) and not os.path.islink(path):
                try:
                    os.rmdir(path)  # only when empty
                except OSError:
                    pass
        raise


def _mode(path: Path) -> int | None:
    """`path`'s st_mode (not following a link), None when absent; a folder is refused."""
    try:
        mode: int | None = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    return mode


def write_files(contents: Mapping[Path, str | bytes]) -> list[Path]:
    """Write every file of `contents` ({path: data}) or none, never through a symbolic link.

    Each is written to a temporary file beside it first; only when all are written does each
    replace its file (``os.replace``). When one fails (a full disk), the temporary files are
    removed and the error (a `WriteError` naming the file) raised: the files there before are
    unchanged, and no new one is left. A file there that is no regular file (a device, a pipe)
    is written in place at the end. Returns the paths.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> [p.name for p in write_files({d / "a.csv": "x", d / "b.md": "y"})]
    ['a.csv', 'b.md']
    """
    paths = [Path(p) for p in contents]
    refuse_links(*paths)  # all of them before the first is written
    staged: list[tuple[Path, Path]] = []
    late: list[tuple[Path, bytes]] = []
    try:
        for path, data in zip(paths, contents.values(), strict=True):
            raw = data.encode("utf-8") if isinstance(data, str) else data
            mode = _mode(path)
            if mode is not None and not stat.S_ISREG(mode):
                late.append((path, raw))
                continue
            with names_the_file(path):
                tmp = _staged(path, raw, mode)
            if tmp is not None:  # None: rewritten in place already (a folder one may not write)
                staged.append((tmp, path))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for path, raw in late:
        write_file(path, raw)
    return paths


def _write_in_place(fd: int, raw: bytes) -> None:
    with os.fdopen(fd, "wb") as fh:
        fh.write(raw)


def _write_to_stream(path: Path, raw: bytes) -> None:
    """Write through the link `path` to a device, pipe or socket; refused (`link_refusal`) when
    it leads elsewhere by the time it is opened (opening does not truncate: nothing changes)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.EISDIR):
            raise link_refusal(path) from None
        raise
    if not is_stream(os.fstat(fd).st_mode):
        os.close(fd)
        raise link_refusal(path)
    _write_in_place(fd, raw)


def _replace(path: Path, raw: bytes, mode: int | None) -> None:
    """Replace the regular file `path` (`mode`: its st_mode, None when absent) by `raw`."""
    tmp = _staged(path, raw, mode)
    if tmp is None:  # rewritten in place
        return
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _staged(path: Path, raw: bytes, mode: int | None) -> Path | None:
    """A new temporary file beside `path` holding `raw` (with `mode`'s permissions), to replace
    `path`; None when the folder refuses it and the existing file was rewritten in place."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = open_no_link(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:  # name the file asked for, not the temporary one
        if mode is not None and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            _write_in_place(open_no_link(path, os.O_WRONLY | os.O_TRUNC), raw)
            return None
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            if mode is not None:
                os.fchmod(fh.fileno(), stat.S_IMODE(mode))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp
