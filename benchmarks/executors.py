"""Time one tiny study on each executor (local processes, Ray, submitit) and check the stores agree.

    .venv/bin/python benchmarks/executors.py [--workers 2] [--sleep 0.5] [--real]

Three workloads, each run by every executor into a fresh folder, wall time from `run_study`'s
call to its return (executor start-up included), the fastest of ``--repeats`` runs:

- ``overhead``: 16 synthetic units of a few milliseconds (the tests' tiny study), so the time is
  the executor's own cost: starting processes or Ray, shipping units and results.
- ``sleep``: the same 16 units, each sleeping ``--sleep`` seconds (ideal: 16 x sleep / workers).
- ``real`` (with ``--real``): 4 real-trainer units (ERM, VREx x 2 seeds, SR-CMNIST 3:1 on the
  bundled digits, 100 steps), torch import and scenario build included.

The Ray executor is timed twice: starting its own local instance (as ``--executor ray`` without
``--ray-address`` does), and with an instance already running (start-up not timed).

It also times the driver's store write per unit (504 units, the paper grid's count).

Prints one line per (workload, executor) with the wall time and its ratio to the local executor
measured in the same run, and whether the store equals the local executor's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from oodeval.study import config_from_dict, load_study, run_study
from oodeval.study.executors import RayExecutor, SlurmExecutor


def synthetic(sleep: float = 0.0):
    return config_from_dict(
        {
            "name": "bench-executors",
            "backend": "oodeval.study.synthetic",
            "algorithms": ["ERM", "IRM", "GroupDRO", "VREx"],
            "seeds": [0, 1],
            "steps": 10,
            "scenarios": [
                {"family": "synthetic", "ratio": "3:1", "scale": 1},
                {"family": "synthetic", "ratio": "4:1", "scale": 2},
            ],
            "unit_options": {"sleep": sleep} if sleep else {},
        }
    )


def real():
    return config_from_dict(
        {
            "name": "bench-executors-real",
            "source": "digits",
            "algorithms": ["ERM", "VREx"],
            "seeds": [0, 1],
            "steps": 100,
            "scenarios": [{"family": "sr-cmnist", "ratio": "3:1", "scale": 1}],
            "trainer": {"eval_every": 50, "batch_size": 32},
            "hparams": {"VREx": {"vrex_penalty_anneal_iters": 20}},
        }
    )


def stored(directory: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    study = load_study(directory)
    units = study.units.drop(columns=["timings", "started", "finished", "versions"])
    units = units.assign(**{c: units[c].map(repr) for c in ("params", "hparams")})
    return units.reset_index(drop=True), study.results.reset_index(drop=True)


def same_store(a: Path, b: Path) -> bool:
    (ua, ra), (ub, rb) = stored(a), stored(b)
    return ua.equals(ub) and ra.equals(rb)


def timed_run(config, directory: Path, executor, name: str, workers: int) -> float:
    """Wall seconds of one `run_study` call into a fresh `directory`."""
    running = name.endswith("already running)")
    if running:  # connect outside the timed region
        import ray

        ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR")
    start = time.perf_counter()
    run_study(config, directory, workers=workers, executor=executor, progress=False)
    wall = time.perf_counter() - start
    if running:
        ray.shutdown()
    return wall


def store_write_seconds(directory: Path, units: int = 504, rows: int = 125) -> float:
    """Mean seconds of one `ResultStore.record_unit` call (one transaction of `rows` rows).

    It is the driver's only serial work per unit; averaged over `units` units (the paper grid's).
    """
    from oodeval.study.store import ResultStore, UnitRecord

    with ResultStore(directory, create=True) as store:
        store.bind_config({"name": "store-write-timing"})
        start = time.perf_counter()
        for i in range(units):
            record = UnitRecord(
                scenario=f"s{i // 42}", family="synthetic", params={}, algorithm=f"A{i % 14}",
                seed=i % 3, hparams={"lr": 1e-3}, steps=1, model="mlp", status="done",
                rows=[("all", f"e={k}", 0.25, 200) for k in range(rows)],
            )  # fmt: skip
            store.record_unit(record)
        return (time.perf_counter() - start) / units


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--real", action="store_true", help="also time 4 real-trainer units")
    parser.add_argument("--repeats", type=int, default=2, help="runs per cell; the fastest counts")
    args = parser.parse_args()
    workloads = {"overhead": synthetic(), "sleep": synthetic(args.sleep)}
    if args.real:
        workloads["real"] = real()
    executors = {
        "local": None,
        "ray (starts a local instance)": RayExecutor(num_cpus=args.workers),
        "ray (instance already running)": RayExecutor(),
        "submitit local (4 units/job)": SlurmExecutor(
            cluster="local", units_per_job=4, max_parallel=args.workers, poll_seconds=0.1
        ),
    }
    root = Path(tempfile.mkdtemp(prefix="bench-executors-"))
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)
    try:
        for workload, config in workloads.items():
            base = None
            for name, executor in executors.items():
                walls = []
                for _ in range(args.repeats):
                    directory = root / f"{workload}-{name.split()[0]}-{len(list(root.iterdir()))}"
                    walls.append(timed_run(config, directory, executor, name, args.workers))
                wall = min(walls)
                counts = load_study(directory).counts()
                if name == "local":
                    base, base_dir = wall, directory
                agree = "same store" if same_store(directory, base_dir) else "STORE DIFFERS"
                print(
                    f"{workload:8s} {name:30s} {counts['done']:2d} done {counts['failed']} failed "
                    f"{wall:7.2f} s  x{wall / base:5.2f} vs local  {agree}",
                    flush=True,
                )
        write = store_write_seconds(root / "store-write")
        print(
            f"store write: {1000 * write:.2f} ms per unit "
            "(504 units of 125 rows, one transaction each)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
