"""Wall time of one short command (default `oodeval measures examples/results.csv`), run from
each given source tree in turn, against a baseline tree measured in the same run.

    .venv/bin/python benchmarks/cli_startup.py --baseline /path/to/main --tree . [--runs 10]

Each run is a fresh interpreter (`python -m oodeval.cli.main ...` with PYTHONPATH set to the
tree), so the figure is what a user waits for: start-up, imports and the work. The trees are
run alternately (baseline, tree, baseline, tree, ...) so a change of machine load hits both.
Prints the median and minimum wall time and the median CPU time (user + system, steadier
under load) per tree and the ratio of medians to the baseline; also
`python -c pass` (the interpreter alone) for scale.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def wall_time(command: list[str], tree: Path | None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of `command`, with PYTHONPATH set to
    `tree` (output discarded)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=tree or Path.cwd(), capture_output=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed in {tree}: {done.stderr.decode()[-500:]}")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="source tree to compare to")
    parser.add_argument("--tree", type=Path, default=Path("."), help="source tree to time")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "args", nargs="*", default=["measures", "examples/results.csv"], help="oodeval arguments"
    )
    args = parser.parse_args()
    command = [sys.executable, "-m", "oodeval.cli.main", *args.args]
    trees = {"baseline": args.baseline.resolve(), "tree": args.tree.resolve()}
    times: dict[str, list[tuple[float, float]]] = {"python -c pass": [], "baseline": [], "tree": []}
    for tree in trees.values():  # one untimed warm-up each (file cache)
        wall_time(command, tree)
    for _ in range(args.runs):
        times["python -c pass"].append(wall_time([sys.executable, "-c", "pass"], None))
        for name, tree in trees.items():
            times[name].append(wall_time(command, tree))
    print(f"command: oodeval {' '.join(args.args)}  ({args.runs} runs each, alternating)")
    print(f"load average before the last run: {os.getloadavg()[0]:.2f}")
    base = statistics.median(wall for wall, _ in times["baseline"])
    for name, values in times.items():
        label = f"{name} ({trees[name]})" if name in trees else name
        walls = [wall for wall, _ in values]
        median = statistics.median(walls)
        cpu = statistics.median(cpu for _, cpu in values)
        print(
            f"{label}: wall median {median:.3f} s, min {min(walls):.3f} s, "
            f"CPU median {cpu:.3f} s; wall ratio to baseline {median / base:.2f}"
        )


if __name__ == "__main__":
    main()
