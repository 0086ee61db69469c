"""Peak memory and time of the leaderboard's bootstrap, `oodeval study measures DIR --bootstrap
N`, on a synthetic study of 8 algorithms x 10 seeds x 4 scenarios (320 units), against the same
command from a baseline source tree (e.g. the code before a change), in the same run.

    PYTHONPATH=. .venv/bin/python benchmarks/bootstrap_memory.py [--bootstrap 100000]
        [--baseline-tree DIR]

The study is built with the synthetic backend (milliseconds a unit, nothing trained) in a
temporary folder. Each command runs in a fresh interpreter; its peak resident memory is the
child's ``ru_maxrss`` (`results_memory.measured`). Prints wall and CPU seconds, peak RSS, and
the ratio of the peaks.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from results_memory import measured  # this folder is sys.path[0] when run as a script

ALGORITHMS = ["ERM", "IRM", "GroupDRO", "Mixup", "CORAL", "MMD", "VREx", "RSC"]
CONFIG = f"""name = "bootstrap-memory"
backend = "oodeval.study.synthetic"
algorithms = {ALGORITHMS!r}
seeds = {list(range(10))!r}
steps = 10
scenarios = [
{{ family = "synthetic", ratio = "3:1", scale = 1 }},
{{ family = "synthetic", ratio = "4:1", scale = 2 }},
{{ family = "synthetic", ratio = "5:1", scale = 1 }},
{{ family = "synthetic", ratio = "9:1", scale = 3 }},
]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", type=int, default=100_000, help="resamples")
    parser.add_argument("--baseline-tree", type=Path, help="also run the command from this tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        config, study = Path(scratch) / "study.toml", Path(scratch) / "study"
        config.write_text(CONFIG, encoding="utf-8")
        run = [sys.executable, "-m", "oodeval.cli.main", "study", "run", str(config)]
        subprocess.run(
            [*run, "--out", str(study), "--no-progress", "--no-report", "--workers", "1"],
            check=True,
            capture_output=True,
        )
        command = [sys.executable, "-m", "oodeval.cli.main", "study", "measures", str(study)]
        command += ["--bootstrap", str(args.bootstrap)]
        trees = {"oodeval study measures": None}
        if args.baseline_tree is not None:
            trees["baseline tree"] = args.baseline_tree.resolve()
        peaks = {}
        for label, tree in trees.items():
            seconds, cpu, peak = measured(command, tree)
            peaks[label] = peak
            print(
                f"{label} --bootstrap {args.bootstrap}: {seconds:.1f} s ({cpu:.1f} s CPU), "
                f"peak RSS {peak / 2**20:,.0f} MiB"
            )
        if len(peaks) == 2:
            ours, base = peaks.values()
            print(f"ratio peak RSS this tree / baseline tree: {ours / base:.2f}")


if __name__ == "__main__":
    main()
