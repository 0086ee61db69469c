"""`scripts/test.sh` asks before it changes the machine: system packages (Chromium, Slurm and its
database) are installed and daemons started only with ``--system`` or ``CI=true``; otherwise one
line says which tests are skipped and how to run them, and pytest's arguments pass through. A
type error (mypy) stops it before the suite.

The script runs in a copy of its folder whose ``.venv`` installs nothing (its ``python`` runs
this interpreter, its ``ruff`` passes, its ``python -m mypy`` records its arguments and exits
with ``$MYPY_EXIT``), with a PATH that finds neither Chromium nor Slurm and whose ``apt-get``
and ``sudo`` only record that they were called.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = {"chromium", "chromium-browser", "chromedriver", "sinfo", "apt-get", "sudo"}
TINY_TESTS = """
def test_one():
    pass


def test_two():
    pass
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the scripts with a stand-in .venv and tests, and the environment to run it in."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_tiny.py").write_text(TINY_TESTS)
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    mypy_log = tmp_path / "mypy-calls.log"
    _executable(
        venv / "python",
        f'#!/bin/sh\n[ "$1 $2" = "-m pip" ] && exit 0\n'
        f'[ "$1 $2" = "-m mypy" ] && {{ echo "$*" >> "{mypy_log}"; exit "${{MYPY_EXIT:-0}}"; }}\n'
        f'exec "{sys.executable}" "$@"\n',
    )
    _executable(venv / "ruff", "#!/bin/sh\nexit 0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not Path(folder).is_dir():
            continue
        for tool in Path(folder).iterdir():
            target = bin_dir / tool.name
            if tool.name not in HIDDEN and not target.exists() and os.access(tool, os.X_OK):
                target.symlink_to(tool)
    log = tmp_path / "system-calls.log"
    for tool in ("apt-get", "sudo"):  # record the call and fail, so nothing is installed
        _executable(bin_dir / tool, f'#!/bin/sh\necho "{tool} $*" >> "{log}"\nexit 3\n')
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "OODEVAL_SLURM_DIR": str(tmp_path / "slurm"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return repo, env


def _test_sh(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "scripts" / "test.sh"), *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_installs_only_when_told_and_else_names_the_skipped_tests(checkout) -> None:
    repo, env = checkout
    result = _test_sh(repo, env, "tests/test_tiny.py", "-k", "one")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (repo.parent / "system-calls.log").exists()  # neither apt-get nor sudo ran
    said = [line for line in result.stderr.splitlines() if line.startswith("test.sh:")]
    assert len(said) == 1, result.stderr
    assert "real-browser tests" in said[0] and "tests marked slurm" in said[0]
    assert "bash scripts/test.sh --system" in said[0]
    assert "1 passed, 1 deselected" in result.stdout  # the pytest arguments reached pytest
    assert (repo.parent / "mypy-calls.log").read_text() == "-m mypy oodeval\n"
    for args, ci in [(("--system", "tests/test_tiny.py"), ""), (("tests/test_tiny.py",), "true")]:
        told = _test_sh(repo, {**env, "CI": ci}, *args)  # told: Chromium is installed
        calls = (repo.parent / "system-calls.log").read_text()
        assert "apt-get update" in calls and told.returncode != 0, args  # the stand-in failed
        assert "test.sh: skipping" not in told.stderr
        (repo.parent / "system-calls.log").unlink()


def test_a_type_error_stops_it_before_the_suite(checkout) -> None:
    repo, env = checkout
    result = _test_sh(repo, {**env, "MYPY_EXIT": "1"}, "tests/test_tiny.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert (repo.parent / "mypy-calls.log").read_text() == "-m mypy oodeval\n"
    assert "passed" not in result.stdout  # pytest never started
