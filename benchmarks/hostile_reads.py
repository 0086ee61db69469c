"""Time and peak memory of refusing hostile inputs, against reading a normal results file in the
same run.

    PYTHONPATH=. .venv/bin/python benchmarks/hostile_reads.py [--dir /tmp] [--repeat 3]

Cases (the files are made here, none is kept in the repository):

- baseline: ``oodeval measures examples/results.csv`` (a normal run, the unit of the ratios);
- ``oodeval measures /dev/zero`` (refused unread: a device file);
- ``cat /dev/zero | oodeval measures -`` (an endless stream, refused at its first chunk);
- a 4 GiB gzip bomb (~4 MB on disk) as MNIST's images, read by ``oodeval envs show sr-cmnist
  --source mnist:DIR`` (its IDX header refused before inflating) and hashed by
  `oodeval.environments.sources.source_identity` with a valid header (inflation stops at the
  1 GiB bound);
- an ``.npz`` whose ``probs`` member's header claims 64 TiB, read by ``oodeval openworld score``.

Each command runs in a fresh interpreter, its peak resident memory the child's ``ru_maxrss``
(from `os.wait4`, one child at a time); the figure printed is the best of `--repeat` wall times
(the machine is shared) and the largest peak. Every hostile case must end in exit 2 with one
``error:`` line; the script stops otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.hostile import (  # noqa: E402
    SHAPE_64_TIB,
    gzip_bomb,
    idx_header,
    npy_header,
    npz_claiming,
)

DIGEST = (
    "import sys\nfrom oodeval.errors import OodevalError\n"
    "from oodeval.environments.sources import source_identity\n"
    "try:\n    source_identity(sys.argv[1])\n"
    "except OodevalError as exc:\n    sys.exit(print('error:', exc, file=sys.stderr) or 2)\n"
)


def _run(command: list[str], stdin: str | None, want: int) -> tuple[float, float]:
    """(wall seconds, peak RSS bytes) of one child; exits when its status is not `want`."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with open(stdin or os.devnull, "rb") as given:
        start = time.perf_counter()
        child = subprocess.Popen(
            command, stdin=given, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        err = child.stderr.read().decode() if child.stderr else ""
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if code != want or (want == 2 and len(errors) != 1):
        sys.exit(f"{' '.join(command)}: exit {code}, expected {want}: {err[-800:]}")
    return elapsed, usage.ru_maxrss * 1024.0  # ru_maxrss is in KiB on Linux


def _cases(folder: Path) -> list[tuple[str, list[str], str | None, int]]:
    oodeval = [sys.executable, "-c", "from oodeval.cli.main import main; main()"]
    zeros, valid = folder / "zeros", folder / "valid-header"
    for where, head in ((zeros, b""), (valid, idx_header((10000, 28, 28)))):
        where.mkdir(exist_ok=True)
        gzip_bomb(where / "t10k-images-idx3-ubyte.gz", 4 << 30, head=head)
        labels = idx_header((10000,)) + bytes(10000)
        gzip_bomb(where / "t10k-labels-idx1-ubyte.gz", len(labels), head=labels)
    npz = npz_claiming(folder / "claims-64tib.npz", {"probs": npy_header(SHAPE_64_TIB)})
    return [
        (
            "baseline: measures examples/results.csv",
            [*oodeval, "measures", str(ROOT / "examples" / "results.csv")],
            None,
            0,
        ),
        ("measures /dev/zero", [*oodeval, "measures", "/dev/zero"], None, 2),
        ("measures - < /dev/zero", [*oodeval, "measures", "-"], "/dev/zero", 2),
        (
            "4 GiB gzip, bad IDX header: envs show",
            [*oodeval, "envs", "show", "sr-cmnist", "--source", f"mnist:{zeros}"],
            None,
            2,
        ),
        (
            "4 GiB gzip, valid header: source digest",
            [sys.executable, "-c", DIGEST, f"mnist:{valid}"],
            None,
            2,
        ),
        (
            "npz member claiming 64 TiB: openworld score",
            [*oodeval, "openworld", "score", str(npz), "--base-classes", "0"],
            None,
            2,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None, help="where to write the hostile files")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        folder = Path(scratch)
        start = time.perf_counter()
        cases = _cases(folder)
        bomb = (folder / "zeros" / "t10k-images-idx3-ubyte.gz").stat().st_size
        print(f"hostile files made in {time.perf_counter() - start:.1f} s (bomb: {bomb:,} bytes)")
        rows = []
        for name, command, stdin, want in cases:
            runs = [_run(command, stdin, want) for _ in range(max(1, args.repeat))]
            rows.append((name, min(r[0] for r in runs), max(r[1] for r in runs)))
    base_wall, base_peak = rows[0][1], rows[0][2]
    print(f"{'case':<48} {'wall':>8} {'peak RSS':>10} {'x wall':>7} {'x peak':>7}")
    for name, wall, peak in rows:
        print(
            f"{name:<48} {wall:>7.2f}s {peak / 2**20:>7.0f} MiB {wall / base_wall:>6.2f}x "
            f"{peak / base_peak:>6.2f}x"
        )


if __name__ == "__main__":
    main()
