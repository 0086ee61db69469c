"""Project a study's wall time on a device from a few timed training steps per algorithm.

A unit of a long protocol (the paper's: mnist_cnn at 28x28, 5001 steps, a checkpoint every 100)
costs steps x (one training step) + checkpoints x (one checkpoint evaluation) + (the final test).
Timing whole units, as `oodeval.study.estimate.estimate_study` does, pays the evaluations of every
sampled unit, which at large N cost minutes each on a CPU; here each part is timed once, in one
worker process set up for the config like a study's (`oodeval.study.worker.setup_worker`, on one
thread on a CPU), on the config's device (`sample_timings` runs there):

- every algorithm: K training steps of its unit at the smallest N (`train_models` with
  ``selection = "last"``, so nothing is evaluated): t_step(a, N_min) = train time / K, after
  one untimed ERM step at each timed N (the kernels' set-up); ERM's steps also at the median N
  (not the largest: its unit may need more memory than a sample should take; it is not run);
- ERM's unit at the smallest N with one checkpoint (``eval_every = K``): one checkpoint
  evaluation and the final test, turned into seconds per predicted row. A checkpoint predicts
  every given row with the N stacked LOO models and the validation rows with the full model,
  (N + holdout_fraction) x G rows for G given rows; the final test predicts the G given rows and
  E_all (once per distinct variant of its shared images, `Scenario.shared_evaluation`);
- each batch-dependent algorithm (ARM, MTL): seconds per row of its full model on the first
  evaluation environment; it predicts every environment of E_all apart, and its checkpoints cost
  ERM's times the ratio of the two per-row times.

Other N scale an algorithm's step by ERM's: t_step(a, N) = t_step(a, N_min) x (N / N_min)^p. A
step trains N LOO models on N - 1 minibatches each and the full model on N, N^2 minibatches in
all, so p = 2 when only one N is timed; else p = log(t_ERM(N_med) / t_ERM(N_min)) /
log(N_med / N_min) from ERM's two timed N (measured on a CPU for mnist_cnn: p = 2.29 between N = 4
and 12). The evaluations scale with each scenario's row counts. A unit is projected as

    t_step(a, N) x steps + checkpoints x t_checkpoint(a, scenario) + t_test(a, scenario)

(checkpoints: every ``eval_every`` steps and the last one, none with ``selection = "last"``), and
the study as the sum over its units divided by the workers: one per GPU on a GPU device, else
`workers` CPU processes, each timed here at one thread (what a study's worker runs). Building a
scenario (once per worker) is left out.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

import pandas as pd

from oodeval._text import safe_text
from oodeval._torch import resolve_device
from oodeval.errors import OodevalError
from oodeval.pool import WorkerPool
from oodeval.study.config import (
    DEFAULT_BACKEND,
    StudyConfig,
    build,
    import_backend,
    validate_config,
)
from oodeval.study.executors import config_device, gpu_count, local_devices
from oodeval.study.projection import Estimate, unit_checkpoints
from oodeval.study.runner import prepare_config
from oodeval.study.worker import (
    WorkerSettings,
    scenario_at,
    setup_worker,
    trainer_options,
    worker_config,
)

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
            f"--n-sample-steps times the oodeval trainer, not backend {config.backend!r}; "
            "use --steps-fraction"
        )
    spec = config_device(config)
    device = resolve_device(spec)
    if spec != "cpu":
        workers = len(local_devices(spec, None, gpu_count(spec)))
    workers = int(workers or os.cpu_count() or 1)
    backend = import_backend(config)
    validated = validate_config(config, backend)
    n_by_scenario = [len(given) for _spec, _name, given, _params in validated["scenarios"]]
    distinct = sorted(set(n_by_scenario))
    sampled = sorted({distinct[0], distinct[len(distinct) // 2]})
    steps = min(sample_steps, config.steps)
    if progress:  # what is timed, before the minutes it takes (after every check of the input)
        reference = f" and {REFERENCE}'s at N_given={sampled[1]}" if len(sampled) > 1 else ""
        print(
            f"sampling: {steps} training step(s) of each of the {len(config.algorithms)} "
            f"algorithm(s) at N_given={sampled[0]}{reference}, on {device} (projected for "
            f"{workers} worker(s))",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    counts = _row_counts(backend, config, validated)
    samples = pd.DataFrame(_sample_rows(config, validated, sampled, steps, device, progress))
    per_n, total = _project(samples, config, counts, n_by_scenario)
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


def _row_counts(
    backend: Any, config: StudyConfig, validated: dict[str, Any]
) -> list[dict[bool, tuple[float, float]]]:
    """Each scenario's predicted rows (`_rows`) for algorithms that do not and that do depend on
    the batch; the scenarios are built one at a time, so memory stays bounded."""
    holdout = float(config.trainer.get("holdout_fraction", 0.2))
    counts = []
    for spec, *_ in validated["scenarios"]:
        scenario = build(backend, config, spec)
        counts.append({d: _rows(scenario, holdout, d) for d in (False, True)})
        del scenario
    return counts


def _sample_rows(
    config: StudyConfig,
    validated: dict[str, Any],
    sampled: list[int],
    steps: int,
    device: str,
    progress: bool,
) -> list[dict[str, Any]]:
    """The timed rows of every algorithm at the smallest sampled N and of ERM at the others,
    timed one after another in one worker process set up for `config` on `device`."""
    n_by_scenario = [len(given) for _spec, _name, given, _params in validated["scenarios"]]
    seed = config.seeds[0]
    threads = 1 if device == "cpu" else os.cpu_count() or 1
    settings = WorkerSettings(threads=threads, device=device)
    rows = []
    with WorkerPool(1, initializer=setup_worker, initargs=(config.to_json(), settings)) as pool:

        def timed(index: int, algorithm: str, steps: int, evaluate: bool) -> dict[str, Any]:
            hparams = validated["hparams"].get((algorithm, seed))
            job = (index, algorithm, seed, hparams, steps, evaluate)
            return pool.submit(sample_timings, *job).result()

        for n in sampled:
            index = n_by_scenario.index(n)
            name = validated["scenarios"][index][1]
            # one untimed step first: the kernels' one-time set-up for these shapes is not a step
            timed(index, REFERENCE, 1, False)
            names = list(dict.fromkeys([REFERENCE, *config.algorithms])) if n == sampled[0] else []
            for algorithm in names or [REFERENCE]:
                row = timed(index, algorithm, steps, n == sampled[0])
                rows.append({"scenario": name, "n_given": n, **row})
                if progress:
                    print(
                        safe_text(
                            f"timed {algorithm} at N_given={n}: {row['step_seconds']:.3f} s/step"
                        ),
                        file=sys.stderr,
                    )
    return rows


def sample_timings(
    index: int,
    algorithm: str,
    seed: int,
    hparams: dict | None,
    steps: int,
    evaluate: bool,
) -> dict[str, Any]:
    """One algorithm's timed steps on scenario `index` and, with `evaluate`, its evaluation
    costs (module doc); runs in a worker set up by `oodeval.study.worker.setup_worker`."""
    from oodeval.algorithms import get_algorithm
    from oodeval.training import run_unit, train_models

    scenario = scenario_at(index)
    config = worker_config()
    common = {"seed": seed, "steps": steps, "hparams": hparams, "model": config.model}
    options = trainer_options()
    trained = train_models(scenario, algorithm, **common, **{**options, "selection": "last"})
    row = {
        "algorithm": algorithm,
        "step_seconds": trained.timings["steps"] / steps,
        "checkpoint_seconds": float("nan"),
        "test_seconds": float("nan"),
        "row_seconds": float("nan"),
    }
    batch_dependent = get_algorithm(algorithm).batch_dependent
    if evaluate and (algorithm == REFERENCE or batch_dependent):
        row["row_seconds"] = _row_seconds(trained, scenario, int(options.get("batch_size", 64)))
    if evaluate and algorithm == REFERENCE:
        timings = run_unit(scenario, algorithm, **common, **{**options, "eval_every": steps})
        row["checkpoint_seconds"] = timings.timings["selection_eval"]
        row["test_seconds"] = timings.timings["test_eval"]
    return row


def _power(n: Any, seconds: Any) -> float:
    """The exponent p of t(N) = t(N_min) (N / N_min)^p through two timed N; 2 with one.

    >>> _power([4.0, 12.0], [1.0, 9.0])
    2.0
    """
    if len(n) < 2 or n[0] == n[-1]:
        return 2.0
    return float(math.log(seconds[-1] / seconds[0]) / math.log(n[-1] / n[0]))


def _row_seconds(trained: Any, scenario: Any, context: int) -> float:
    """Seconds per row of the trained full model predicting the first evaluation environment."""
    from oodeval.algorithms.networks import compute_precision
    from oodeval.training import predict_labels

    env = next(iter(scenario.evaluation()))
    with compute_precision(trained.precision, trained.device):
        t0 = time.perf_counter()
        predict_labels(trained.models[-1], env.images, context=context)
        return (time.perf_counter() - t0) / max(1, len(env))


def _rows(scenario: Any, holdout: float, batch_dependent: bool) -> tuple[float, float]:
    """Rows predicted by one checkpoint evaluation and by the final test of a unit (module doc)."""
    sizes = scenario.sizes()
    given = sum(sizes["given"].values())
    n = len(sizes["given"])
    shared = None if batch_dependent else scenario.shared_evaluation()
    if shared is None:
        evaluation = sum(sizes["evaluation"].values())
    else:
        evaluation = len(shared.values()) * len(shared.labels)
    return (n + holdout) * given, given + evaluation


def _project(
    samples: pd.DataFrame,
    config: StudyConfig,
    counts: list[dict[bool, tuple[float, float]]],
    n_by_scenario: list[int],
) -> tuple[pd.DataFrame, float]:
    """Per N the mean projected unit of the study's algorithms, and the study's total seconds."""
    from oodeval.algorithms import get_algorithm

    ref = samples[samples["algorithm"] == REFERENCE].drop_duplicates("n_given")
    n_min = int(samples["n_given"].min())
    power = _power(ref["n_given"].to_numpy(float), ref["step_seconds"].to_numpy(float))
    at_min = samples[samples["n_given"] == n_min].set_index("algorithm")
    erm = at_min.loc[REFERENCE]
    checkpoint_rows, test_rows = counts[n_by_scenario.index(n_min)][False]
    per_checkpoint_row = erm["checkpoint_seconds"] / checkpoint_rows
    per_test_row = erm["test_seconds"] / test_rows
    checkpoints = unit_checkpoints(config)
    units: dict[int, list[float]] = {}
    total = 0.0
    for rows, n in zip(counts, n_by_scenario, strict=True):
        for algorithm in config.algorithms:
            own = at_min.loc[algorithm]
            step = own["step_seconds"] * (n / n_min) ** power
            dependent = get_algorithm(algorithm).batch_dependent
            ck_rows, t_rows = rows[dependent]
            ratio = own["row_seconds"] / erm["row_seconds"] if dependent else 1.0
            test = own["row_seconds"] * t_rows if dependent else per_test_row * t_rows
            unit = step * config.steps + checkpoints * per_checkpoint_row * ratio * ck_rows + test
            units.setdefault(n, []).append(unit)
            total += unit * len(config.seeds)
    sampled = set(samples["n_given"])
    per_n = pd.DataFrame(
        [
            {
                "n_given": n,
                "unit_seconds": sum(v) / len(v),
                "units_in_study": len(v) * len(config.seeds),
                "measured": n in sampled,
            }
            for n, v in sorted(units.items())
        ]
    )
    return per_n, total
