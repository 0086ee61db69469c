"""The synthetic study backend plus two test hooks: units that wait until a file exists, and a
trace of which process started which unit.

Used by the real-cluster tests (``backend = "tests.cluster_backend"``): a gated unit keeps its
Slurm job or Ray worker busy for as long as the test needs (to cancel the job, or to kill the
node running it), and once the test creates the gate file, the same config runs that unit in
milliseconds, so ``--retry-failed`` needs no other config. With ``trace`` set to a folder, each
unit attempt leaves a file ``<algorithm>.<seed>.<pid>`` there as it starts, holding the id of the
Ray node running it (empty outside Ray), so a test can tell which process and node ran which
unit. Everything else is
`oodeval.study.synthetic`, so the stored numbers equal that backend's.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oodeval.study import synthetic
from oodeval.study.synthetic import available, build_scenario, default_hparams, sample_hparams

__all__ = ["available", "build_scenario", "default_hparams", "sample_hparams", "run_unit"]


def run_unit(
    scenario: Any,
    algorithm: str,
    *,
    gate: str = "",
    gated_algorithms: Sequence[str] = (),
    gate_timeout: float = 600.0,
    trace: str = "",
    **options: Any,
) -> synthetic.SyntheticResult:
    """`oodeval.study.synthetic.run_unit`, after waiting for the file `gate` when `algorithm`
    is one of `gated_algorithms` (at most `gate_timeout` seconds, then it raises)."""
    if trace:
        Path(trace, f"{algorithm}.{options.get('seed')}.{os.getpid()}").write_text(_ray_node())
    if algorithm in gated_algorithms:
        deadline = time.monotonic() + float(gate_timeout)
        while not Path(gate).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate file {gate} not created within {gate_timeout:g} s")
            time.sleep(0.1)
    return synthetic.run_unit(scenario, algorithm, **options)


def _ray_node() -> str:
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return ""
    return ray.get_runtime_context().get_node_id()
