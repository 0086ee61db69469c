"""Running oodeval commands as a user who may not write a folder, also when the tests run as root.

Root ignores file permissions, so a test of a read-only study folder run as root proves nothing.
`run_commands` runs the commands in a child process:

- when the tests run as root, as the ``nobody`` account (its uid and gid, no other groups),
  keeping one capability, CAP_DAC_READ_SEARCH: it may read any file and search any folder, so
  the interpreter runs wherever it is installed (e.g. under /root, which ``nobody`` may not
  enter), while every write is checked against the folder's permissions as for any user
  without privileges;
- otherwise as the current user, on folders `make_read_only` made read-only with chmod.

The child runs this module: it first tries to create a file in the read-only folder (the test
checks that it was refused, so the permissions really bind), then runs each command with
Typer's runner and prints what each gave as JSON.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# <linux/prctl.h>, <linux/capability.h>
PR_SET_KEEPCAPS = 8
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
CAP_DAC_READ_SEARCH = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def as_root() -> bool:
    return os.geteuid() == 0


def nobody() -> tuple[int, int]:
    """(uid, gid) of the ``nobody`` account."""
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _drop_to_nobody() -> Callable[[], None]:
    """A ``preexec_fn``: become ``nobody``, keeping only CAP_DAC_READ_SEARCH (see module doc)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    uid, gid = nobody()
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    bit = 1 << CAP_DAC_READ_SEARCH
    data[0].effective = data[0].permitted = data[0].inheritable = bit

    def check(status: int, what: str) -> None:
        if status != 0:
            raise OSError(ctypes.get_errno(), f"{what} failed")

    def drop() -> None:
        check(libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(PR_SET_KEEPCAPS)")
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        check(libc.capset(ctypes.byref(header), data), "capset")
        raise_ambient = libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0)
        check(raise_ambient, "prctl(PR_CAP_AMBIENT_RAISE)")

    return drop


def give_to_reader(path: Path) -> None:
    """Let the child write into `path` (a folder for its outputs): as root, hand it to nobody."""
    if as_root():
        os.chown(path, *nobody())


def make_read_only(folder: Path) -> None:
    """Take write permission away from `folder` and its files, for everyone."""
    for item in [*folder.iterdir(), folder]:
        mode = stat.S_IMODE(item.stat().st_mode)
        item.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(folder: Path) -> None:
    """Undo `make_read_only` (so the test's temporary folder can be removed)."""
    folder.chmod(stat.S_IMODE(folder.stat().st_mode) | stat.S_IWUSR)
    for item in folder.iterdir():
        item.chmod(stat.S_IMODE(item.stat().st_mode) | stat.S_IWUSR)


def run_commands(read_only: Path, commands: list[list[str]], home: Path) -> dict:
    """Run `commands` (oodeval's arguments) in one child process that may not write
    `read_only`; return {"probe": the errno name of creating a file in `read_only` (None when
    it could), "results": [{"exit", "stdout", "stderr", "exception"} per command]}.

    `home` (made writable for the child) is its HOME and matplotlib's config folder.
    """
    give_to_reader(home)
    env = dict(os.environ, HOME=str(home), MPLCONFIGDIR=str(home), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.unprivileged", str(read_only), json.dumps(commands)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_drop_to_nobody() if as_root() else None,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _child(read_only: Path, commands: list[list[str]]) -> dict:
    from typer.testing import CliRunner

    from oodeval.cli.main import app

    try:
        (read_only / "probe").touch(exist_ok=False)
        probe = None
    except OSError as exc:
        probe = os.strerror(exc.errno or 0)
    results = []
    for argv in commands:
        result = CliRunner().invoke(app, argv)
        exception = result.exception
        results.append(
            {
                "exit": result.exit_code,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "exception": None
                if isinstance(exception, (SystemExit, type(None)))
                else repr(exception),
            }
        )
    return {"uid": os.getuid(), "probe": probe, "results": results}


if __name__ == "__main__":
    print(json.dumps(_child(Path(sys.argv[1]), json.loads(sys.argv[2]))))
