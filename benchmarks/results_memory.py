"""Peak memory and speed of `oodeval measures FILE` on a big long-form results CSV, against a
plain `pandas.read_csv(FILE)` of the same file measured in the same run.

    PYTHONPATH=. .venv/bin/python benchmarks/results_memory.py [--rows 8000000] [--dir /tmp]

The file is written synthetically (not kept in the repository): A algorithms x S seeds x
(N loo + M all) environments, names like ``a042``, ``e1999``, errors with six decimals, about
26 bytes a row (8,000,000 rows: 100 algorithms x 8 seeds x (2,000 loo + 8,000 all), ~210 MB).
Smaller ``--rows`` shrink the environment counts (a test runs it at a few thousand rows).

Each command runs in a fresh interpreter; its peak resident memory is the child's
``ru_maxrss`` (from `os.wait4`, so one child's peak never leaks into another's). The commands
run in turn ``--repeat`` times (3 by default), so a passing load slows each of them alike.
Prints, for each, the median wall and CPU seconds (CPU is steadier on a loaded machine), rows/s,
the highest peak RSS and peak RSS / file size; then the ratios of oodeval's median wall time and
peak to pandas'.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ALGORITHMS, SEEDS = 100, 8
LOO_SHARE = 0.2  # 2,000 of the 10,000 environment rows per (algorithm, seed) are loo rows


def write_results(path: Path, rows: int, seed: int = 0) -> int:
    """Write a valid long-form CSV of about `rows` rows to `path`; return the row count."""
    algorithms = max(2, min(ALGORITHMS, rows // 400))
    seeds = max(1, min(SEEDS, rows // (algorithms * 50)))
    per_block = max(5, rows // (algorithms * seeds))
    n_loo = max(4, int(per_block * LOO_SHARE))
    n_all = max(1, per_block - n_loo)
    rng = np.random.default_rng(seed)
    loo_envs = [f"e{e:04d}" for e in range(n_loo)]
    all_envs = [f"e{e:04d}" for e in range(n_all)]
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        out.write("algorithm,seed,split,environment,error\n")
        for a in range(algorithms):
            for s in range(seeds):
                for split, envs in (("loo", loo_envs), ("all", all_envs)):
                    errors = rng.integers(0, 1_000_000, size=len(envs))
                    prefix = f"a{a:03d},{s},{split},"
                    pairs = zip(envs, errors, strict=True)
                    out.write("".join(f"{prefix}{e},0.{v:06d}\n" for e, v in pairs))
                    count += len(envs)
    return count


def measured(command: list[str], tree: Path | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (bytes) of one run of `command`
    in a child process."""
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(tree)) if tree is not None else None
    child = subprocess.Popen(  # run from `tree` too: `python -m` puts the cwd first on sys.path
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tree
    )
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    err = child.stderr.read().decode() if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({child.returncode}): {err[-800:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return elapsed, cpu, usage.ru_maxrss * 1024.0  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_000_000, help="rows of the synthetic file")
    parser.add_argument("--dir", type=Path, default=Path("/tmp"), help="where the file goes")
    parser.add_argument("--keep", action="store_true", help="keep the file afterwards")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command, in turn")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also run `oodeval measures FILE` from this source tree (e.g. a checkout of the "
        "code before a change), in the same run",
    )
    args = parser.parse_args()
    path = args.dir / f"oodeval-results-{args.rows}.csv"
    rows = write_results(path, args.rows)
    size = path.stat().st_size
    print(f"file: {path} ({rows:,} rows, {size / 1e6:.1f} MB)")
    measures = [sys.executable, "-m", "oodeval.cli.main", "measures", str(path)]
    runs: dict[str, tuple[list[str], Path | None]] = {"oodeval measures FILE": (measures, None)}
    if args.baseline_tree is not None:
        runs["baseline tree: oodeval measures FILE"] = (measures, args.baseline_tree.resolve())
    commands = {
        "baseline pandas.read_csv(FILE)": [
            sys.executable,
            "-c",
            "import sys, pandas; pandas.read_csv(sys.argv[1])",
            str(path),
        ],
    }
    runs.update({label: (command, None) for label, command in commands.items()})
    figures: dict[str, list[tuple[float, float, float]]] = {label: [] for label in runs}
    try:
        for _ in range(args.repeat):
            for label, (command, tree) in runs.items():
                figures[label].append(measured(command, tree))
    finally:
        if not args.keep:
            path.unlink()
    walls, peaks = {}, {}
    for label, runs_of in figures.items():
        walls[label] = statistics.median(wall for wall, _, _ in runs_of)
        cpu = statistics.median(cpu for _, cpu, _ in runs_of)
        peaks[label] = max(peak for _, _, peak in runs_of)
        print(
            f"{label}: {walls[label]:.1f} s ({cpu:.1f} s CPU), {rows / walls[label]:,.0f} rows/s, "
            f"peak RSS {peaks[label] / 2**20:,.0f} MiB = {peaks[label] / size:.2f}x the file "
            f"(median of {len(runs_of)})"
        )
    ours = "oodeval measures FILE"
    for label in runs:
        if label != ours:
            other = label.removeprefix("baseline ")
            print(f"ratio wall oodeval / {other}: {walls[ours] / walls[label]:.2f}")
            print(f"ratio peak RSS oodeval / {other}: {peaks[ours] / peaks[label]:.2f}")


if __name__ == "__main__":
    main()
