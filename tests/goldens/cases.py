"""The golden cases: the outputs that a behaviour-preserving change must leave byte-identical.

- `oodeval measures examples/results.csv` in every format;
- `oodeval import domainbed` on the DomainBed VLCS sweep beside the checkout
  (``../shared/fixtures/domainbed-vlcs-sweep``) in every format;
- `oodeval study analyze` on the stored `quick` study: every file it writes, and what it prints in
  every format.

Each case is what the command writes to ``--output`` plus what it prints on stderr (the answer
line and notes), so a change to either shows.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import shutil
from pathlib import Path

from oodeval.cli.main import run

GOLDENS = Path(__file__).resolve().parent
REPO = GOLDENS.parents[1]
DOMAINBED_SWEEP = REPO.parent / "shared" / "fixtures" / "domainbed-vlcs-sweep"
FORMATS = ("table", "csv", "json", "markdown")


def command_output(args: list[str], out: Path) -> bytes:
    """Run `oodeval ARGS --output OUT`; return OUT's bytes, then a marker and stderr's text."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run([*args, "--output", str(out)])
    assert code == 0, f"oodeval {' '.join(args)} exited {code}: {err.getvalue()}"
    found = out.read_bytes() + b"\n--- stderr ---\n" + err.getvalue().encode()
    return neutral_paths(found, out.parent)


def neutral_paths(data: bytes, scratch: Path) -> bytes:
    """`data` with the scratch folder, the checkout and its parent written as SCRATCH, REPO, PARENT.

    Outputs name the files they read and wrote; the goldens must not depend on where the checkout
    or the temporary folder is.
    """
    for path, name in ((scratch, "SCRATCH"), (REPO, "REPO"), (REPO.parent, "PARENT")):
        data = data.replace(str(path).encode(), name.encode())
    return data


def quick_study(scratch: Path) -> Path:
    """A fresh copy of the stored `quick` study in `scratch`."""
    folder = scratch / "quick"
    folder.mkdir()
    with gzip.open(GOLDENS / "quick-results.sqlite.gz") as src:
        with open(folder / "results.sqlite", "wb") as dst:
            shutil.copyfileobj(src, dst)
    return folder


def outputs(scratch: Path, *, domainbed: bool = True) -> dict[str, bytes]:
    """Every golden output, by file name; without the DomainBed cases when `domainbed` is False."""
    found: dict[str, bytes] = {}
    for fmt in FORMATS:
        found[f"measures.{fmt}"] = command_output(
            ["measures", str(REPO / "examples" / "results.csv"), "--format", fmt],
            scratch / f"measures.{fmt}",
        )
        if domainbed:
            found[f"import-domainbed.{fmt}"] = command_output(
                ["import", "domainbed", str(DOMAINBED_SWEEP), "--format", fmt],
                scratch / f"import-domainbed.{fmt}",
            )
    study = quick_study(scratch)
    for fmt in FORMATS:
        found[f"analyze.{fmt}"] = command_output(
            ["study", "analyze", str(study), "--format", fmt], scratch / f"analyze.{fmt}"
        )
    for path in sorted((study / "analysis").iterdir()):
        found[f"analysis--{path.name}"] = path.read_bytes()
    return found
