"""Running a function on several torch.distributed processes (gloo, on the CPU) for the tests of
metrics synced across processes.

`run_on_ranks` starts the processes (torch.multiprocessing, forkserver), each joining one
process group on a free local port with a timeout on every collective, and waits for them
through `wait_until`, so a hang fails the test instead of stalling the suite; each rank's result
comes back through a JSON file.
`openworld_metrics_on_rank` is the rank function of tests/torchmetrics: the new processes import
the function by name, so it lives here rather than in a test module.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers.waiting import wait_until


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(
    rank: int, world_size: int, port: int, fn: Callable, args: tuple, out_dir: str
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )
    try:
        result = fn(rank, world_size, *args)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def run_on_ranks(
    fn: Callable, args: tuple, out_dir: Path, *, world_size: int = 2, seconds: float = 120.0
) -> list[Any]:
    """``fn(rank, world_size, *args)`` on `world_size` new processes in one gloo group; the
    JSON-able value each returns, by rank. A process that raises fails the test with its
    traceback; one that does not end within `seconds` is killed and fails it."""
    import torch.multiprocessing as mp

    # forkserver: a fresh server process imports torch and the metrics once, and forks the ranks
    # from it; spawning each rank would import them once per rank (seconds each), and forking
    # pytest itself would copy its threads' state
    mp.get_context("forkserver").set_forkserver_preload(["torch", "oodeval.torchmetrics"])
    context = mp.start_processes(
        _rank_main,
        args=(world_size, free_port(), fn, args, str(out_dir)),
        nprocs=world_size,
        join=False,
        start_method="forkserver",
    )
    try:
        wait_until(lambda: context.join(timeout=0.2), "the ranks to finish", seconds=seconds)
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world_size)]


def openworld_metrics_on_rank(
    rank: int,
    world_size: int,
    data: dict[str, np.ndarray],
    base_classes: list[int],
    num_classes: int,
    batch: int,
) -> dict[str, Any]:
    """This rank's share of `data` (a contiguous slice, the last rank's the longest) fed in
    batches of `batch` to `OpenworldAUC` and `OpenworldSummary`; their synced values, and the
    number of samples this rank saw."""
    import torch

    from oodeval.torchmetrics import OpenworldAUC, OpenworldSummary

    n = len(data["labels"])
    bounds = [n * r // world_size for r in range(world_size)] + [n]
    part = {k: torch.from_numpy(v[bounds[rank] : bounds[rank + 1]]) for k, v in data.items()}
    auc = OpenworldAUC()
    summary = OpenworldSummary(base_classes, num_classes)
    for start in range(0, len(part["labels"]), batch):
        piece = {k: v[start : start + batch] for k, v in part.items()}
        auc.update(piece["scores"], piece["is_base"], piece["correct"])
        summary.update(
            piece["scores"],
            piece["labels"],
            piece["base_predictions"],
            piece["new_predictions"],
            piece["predictions"],
        )
    values = {k: v.item() for k, v in summary.compute().items()}
    return {"auc": auc.compute().item(), "summary": values, "seen": len(part["labels"])}
