"""Project a study's wall time on a device from a few timed training steps per algorithm.

A unit of a long protocol (the paper's: mnist_cnn at 28x28, 5001 steps, a checkpoint every 100)
costs steps x (one training step) + checkpoints x (one checkpoint evaluation) + (the final test).
Timing whole units, as `oodeval.study.estimate.estimate_study` does, pays the evaluations of every
sampled unit; here each part is timed once, in this process, on the config's device:

- per algorithm, K training steps of its unit at the smallest N (`train_models` with
  ``selection = "last"``, so nothing is evaluated): t_step(a, N_min) = train time / K, the first
  step's set-up included (slightly pessimistic);
- ERM's unit, K steps with one checkpoint (``eval_every = K``), at the smallest, a middle and the
  largest N: its step, one checkpoint evaluation and the final test, each fitted against N as a
  quadratic through the measured points (`oodeval.study.estimate._fit`);
- prediction seconds per row of ERM's and of each batch-dependent algorithm's model (ARM, MTL:
  they predict every environment of E_all apart, in batches of the training size), timed on the
  first evaluation environment. Such an algorithm's checkpoint costs ERM's times the ratio of
  the two, its final test its seconds per row times the rows it predicts (every given and every
  evaluation environment's), without predicting all of them here.

Every other N scales an algorithm's times by ERM's: t(a, N) = t(a, N_min) x t_ERM(N) /
t_ERM(N_min); evaluations of algorithms that are not batch-dependent cost what ERM's do (the same
network predicts the same rows). A unit is projected as

    t_step(a, N) x steps + t_checkpoint(a, N) x checkpoints + t_test(a, N)

(checkpoints: every ``eval_every`` steps and the last one, none with ``selection = "last"``), and
the study as the sum over its units divided by the workers: one per GPU on a GPU device, else
`workers` CPU processes, each timed here at one thread (what a study's worker runs). Building a
scenario (once per worker) is left out.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

import pandas as pd

from oodeval.errors import OodevalError
from oodeval.study.config import (
    DEFAULT_BACKEND,
    StudyConfig,
    build,
    import_backend,
    validate_config,
)
from oodeval.study.estimate import Estimate, _checkpoints, _fit
from oodeval.study.executors import _gpu_count, config_device, local_devices
from oodeval.study.runner import prepare_config

#: the algorithm whose unit is timed with its evaluations at every sampled N
REFERENCE = "ERM"


def estimate_steps(
    config: StudyConfig,
    *,
    sample_steps: int = 2,
    workers: int | None = None,
    progress: bool = False,
) -> Estimate:
    """Time `sample_steps` training steps of every algorithm and project the study (module doc).

    `workers` is the number of CPU worker processes assumed (default: the cores); on a GPU
    device it is one per GPU.
    """
    if sample_steps < 1:
        raise OodevalError(f"sample_steps must be >= 1, got {sample_steps}")
    config = prepare_config(config)
    if config.backend != DEFAULT_BACKEND:
        raise OodevalError(
            f"--sample-steps times the oodeval trainer, not backend {config.backend!r}; "
            "use --steps-fraction"
        )
    from oodeval._torch import resolve_device, single_threaded

    spec = config_device(config)
    device = resolve_device(spec)
    if spec != "cpu":
        workers = len(local_devices(spec, None, _gpu_count(spec)))
    workers = int(workers or os.cpu_count() or 1)
    backend = import_backend(config)
    validated = validate_config(config, backend)
    n_by_scenario = [len(given) for _spec, _name, given, _params in validated["scenarios"]]
    distinct = sorted(set(n_by_scenario))
    sampled = sorted({distinct[0], distinct[len(distinct) // 2], distinct[-1]})
    steps = min(sample_steps, config.steps)
    t0 = time.perf_counter()
    rows = []
    threads = single_threaded() if device == "cpu" else contextlib.nullcontext()
    with threads:
        for n in sampled:
            spec_of_n = validated["scenarios"][n_by_scenario.index(n)][0]
            scenario = build(backend, config, spec_of_n)
            names = list(dict.fromkeys([REFERENCE, *config.algorithms])) if n == sampled[0] else []
            for algorithm in names or [REFERENCE]:
                row = _time(scenario, algorithm, config, validated, steps, device)
                rows.append({"scenario": scenario.name, "n_given": n, **row})
                if progress:
                    print(
                        f"timed {algorithm} at N_given={n}: {row['step_seconds']:.3f} s/step",
                        file=sys.stderr,
                    )
    samples = pd.DataFrame(rows)
    per_n, total = _project(samples, config, n_by_scenario)
    return Estimate(
        samples=samples,
        per_n=per_n,
        workers=workers,
        steps_fraction=steps / config.steps,
        sample_wall_seconds=time.perf_counter() - t0,
        projected_seconds=total / workers,
        failed=0,
        device=device,
        sample_steps=steps,
    )


def _time(
    scenario: Any,
    algorithm: str,
    config: StudyConfig,
    validated: dict[str, Any],
    steps: int,
    device: str,
) -> dict[str, Any]:
    """One algorithm's timed steps (and, for ERM and batch-dependent ones, evaluations)."""
    from oodeval.algorithms import get_algorithm
    from oodeval.training import run_unit, train_models

    seed = config.seeds[0]
    hparams = validated["hparams"].get((algorithm, seed))
    common = {"seed": seed, "steps": steps, "hparams": hparams, "model": config.model}
    options = {**config.trainer, "device": device}
    trained = train_models(scenario, algorithm, **common, **{**options, "selection": "last"})
    row = {
        "algorithm": algorithm,
        "role": "reference" if algorithm == REFERENCE else "sample",
        "step_seconds": trained.timings["train"] / steps,
        "checkpoint_seconds": float("nan"),
        "test_seconds": float("nan"),
        "row_seconds": float("nan"),
    }
    batch_dependent = get_algorithm(algorithm).batch_dependent
    if algorithm == REFERENCE or batch_dependent:
        row["row_seconds"] = _row_seconds(trained, scenario, int(options.get("batch_size", 64)))
    if algorithm == REFERENCE:
        timings = run_unit(scenario, algorithm, **common, **{**options, "eval_every": steps})
        row["checkpoint_seconds"] = timings.timings["selection_eval"]
        row["test_seconds"] = timings.timings["test_eval"]
    elif batch_dependent:  # predicts every environment apart: rows x its seconds per row
        sizes = scenario.sizes()
        rows = sum(sizes["given"].values()) + sum(sizes["evaluation"].values())
        row["test_seconds"] = row["row_seconds"] * rows
    return row


def _row_seconds(trained: Any, scenario: Any, context: int) -> float:
    """Seconds per row of the trained full model predicting the first evaluation environment."""
    from oodeval.algorithms.networks import compute_precision
    from oodeval.training import predict_labels

    env = next(iter(scenario.evaluation()))
    with compute_precision(trained.precision, trained.device):
        t0 = time.perf_counter()
        predict_labels(trained.models[-1], env.images, context=context)
        return (time.perf_counter() - t0) / max(1, len(env))


def _project(
    samples: pd.DataFrame, config: StudyConfig, n_by_scenario: list[int]
) -> tuple[pd.DataFrame, float]:
    """Per N the mean projected unit of the study's algorithms, and the study's total seconds."""
    ref = samples[samples["algorithm"] == REFERENCE].drop_duplicates("n_given")
    n_ref = ref["n_given"].to_numpy(float)
    fits = {k: _fit(n_ref, ref[k].to_numpy(float)) for k in ("step_seconds", "checkpoint_seconds",
                                                             "test_seconds")}  # fmt: skip
    n_min = int(samples["n_given"].min())
    at_min = samples[samples["n_given"] == n_min].set_index("algorithm")
    checkpoints = _checkpoints(config)
    unit_seconds: dict[tuple[str, int], float] = {}
    for algorithm in config.algorithms:
        own = at_min.loc[algorithm] if algorithm in at_min.index else None
        if own is None:
            raise OodevalError(f"{algorithm} was not timed; nothing to project it from")
        if own["checkpoint_seconds"] != own["checkpoint_seconds"]:  # not timed: like ERM's
            ratio = own["row_seconds"] / at_min.loc[REFERENCE, "row_seconds"]
            own = own.copy()
            own["checkpoint_seconds"] = at_min.loc[REFERENCE, "checkpoint_seconds"] * (
                ratio if ratio == ratio else 1.0
            )
        for n in sorted(set(n_by_scenario)):
            parts = {}
            for key, fit in fits.items():
                base = own[key] if own[key] == own[key] else at_min.loc[REFERENCE, key]
                scale = fit(n) / fit(n_min) if fit(n_min) > 0 else 1.0  # 0: nothing evaluated
                parts[key] = float(base) * scale
            unit_seconds[algorithm, n] = (
                parts["step_seconds"] * config.steps
                + parts["checkpoint_seconds"] * checkpoints
                + parts["test_seconds"]
            )
    rows, total = [], 0.0
    sampled = set(samples["n_given"])
    for n in sorted(set(n_by_scenario)):
        per_unit = [unit_seconds[a, n] for a in config.algorithms]
        units = n_by_scenario.count(n) * len(config.seeds)
        total += sum(per_unit) * units
        rows.append(
            {
                "n_given": n,
                "unit_seconds": sum(per_unit) / len(per_unit),
                "units_in_study": units * len(config.algorithms),
                "measured": n in sampled,
            }
        )
    return pd.DataFrame(rows), total
