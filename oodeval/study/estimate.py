"""Project a study's wall time from a measured sample of its units.

A unit's cost grows with the number of given environments N (N + 1 models are trained on
minibatches from N - 1 or N environments, and every model is evaluated) and differs between
algorithms. `estimate_study` runs the scenarios with the smallest, a middle and the largest N, each
with a few sampled algorithms and one seed, through `run_study` with the same worker count (so the
measured per-unit times include the contention between workers). It then fits the mean per-unit
time as a quadratic in N through the measured points (a line for two distinct N, a constant for
one) and projects

    projected wall = sum over the study's units of t(N of its scenario) / workers.

Algorithms differ in cost far more than the few sampled ones show (on SR-CMNIST an ARM unit cost 12x
an ERM unit in fp32 before ARM became DomainBed-identical, and more since), so every other algorithm
of the study is also timed once, on the smallest-N scenario only: t(N) is the sampled algorithms'
fit times the ratio, at that N, of all algorithms' mean unit time to the sampled ones' (each
algorithm's share of the cost is assumed not to change with N).

When the sample ran with a fraction f of the steps, each unit's reported training time
(``timings["train"]``) is scaled by 1 / f and the rest (scenario building, evaluation) kept; without
a reported training time the whole wall time is scaled (pessimistic).

A few steps on a device (``sample_steps=K``, ``study estimate --n-sample-steps K --device D``) times
training steps and evaluations apart instead of whole units (`estimate_steps`, below), so
long protocols (the paper's 5001 steps of mnist_cnn) are projected in minutes. Either way the sample
runs on the config's device, and the summary names it; both return an `Estimate` and count a
unit's checkpoint evaluations with `unit_checkpoints`.

Timed steps (`estimate_steps`). A unit of a long protocol (the paper's: mnist_cnn at 28x28, 5001
steps, a checkpoint every 100) costs steps x (one training step) + checkpoints x (one checkpoint
evaluation) + (the final test). Timing whole units, as `estimate_study` does, pays the evaluations
of every sampled unit, which at large N cost minutes each on a CPU; here each part is timed once, in
one worker process set up for the config like a study's (`oodeval.study.worker.setup_worker`, on one
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
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodeval._text import safe_text
from oodeval._torch import resolve_device
from oodeval.errors import OodevalError, listing
from oodeval.pool import WorkerPool
from oodeval.study.config import (
    DEFAULT_BACKEND,
    StudyConfig,
    ValidatedConfig,
    build,
    import_backend,
    validate_config,
)
from oodeval.study.executors import config_device, gpu_count, local_devices
from oodeval.study.runner import prepare_config, run_study
from oodeval.study.store import load_study
from oodeval.study.worker import (
    WorkerSettings,
    scenario_at,
    setup_worker,
    trainer_options,
    worker_config,
)
from oodeval.tables import text_table


# -- the projection both estimators give ----------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """A projection: measured sample units, per-N predicted unit times, the projected total."""

    samples: pd.DataFrame  # per sampled unit: scenario, n_given, algorithm, seconds
    per_n: pd.DataFrame  # n_given, unit_seconds (predicted, full steps), units_in_study, measured
    workers: int
    steps_fraction: float
    sample_wall_seconds: float
    projected_seconds: float
    failed: int
    #: all algorithms' mean unit time over the sampled ones', at the smallest N (1 without others)
    mix_factor: float = 1.0
    #: the device the sample trained on (resolved)
    device: str = "cpu"
    #: training steps of each sampled unit when timed by `sample_steps`, else None
    sample_steps: int | None = None

    def summary(self) -> str:
        """A few human lines: the table per N and the projected total."""
        if self.sample_steps is not None:
            sampled = (
                f"timed {len(self.samples)} (algorithm, N_given) sample(s) at "
                f"{self.sample_steps} training step(s) each in {self.sample_wall_seconds:.1f} s "
                f"(in one worker process; assuming {self.workers} worker(s))"
            )
        else:
            sampled = (
                f"sampled {len(self.samples)} unit(s) at {self.steps_fraction:.0%} of the steps in "
                f"{self.sample_wall_seconds:.1f} s with {self.workers} worker(s); "
                f"{self.failed} failed"
            )
        lines = [
            f"measured on device {self.device}",
            sampled,
        ]
        cells = [
            [
                str(r.n_given),
                f"{r.unit_seconds:.1f}",
                str(r.units_in_study),
                "yes" if r.measured else "fit",
            ]
            for r in self.per_n.itertuples(index=False)
        ]
        header = ["N_given", "seconds/unit", "units", "measured"]
        lines.append(text_table(header, cells, right=[True, True, True, False]))
        if self.mix_factor != 1.0:
            n_min = int(self.per_n["n_given"].min())
            timed = sorted(set(self.samples.loc[self.samples["role"] == "sample", "algorithm"]))
            lines.append(
                safe_text(
                    f"every algorithm timed at N_given={n_min}: their mean unit costs "
                    f"{self.mix_factor:.2f}x the sampled ({', '.join(timed)}); every N is "
                    "scaled by it"
                )
            )
        hours = self.projected_seconds / 3600.0
        lines.append(
            f"projected wall time: {self.projected_seconds:.0f} s = {hours:.2f} h "
            f"with {self.workers} worker(s) on {self.device}"
        )
        lines.append(
            "seconds/unit is projected to the full number of steps; measured = timed in this "
            "sample, fit = from a quadratic fit of the timed units' seconds against N_given."
            if self.sample_steps is None
            else "seconds/unit: the mean over the study's algorithms of steps x their timed "
            "step + checkpoints x a checkpoint evaluation + the final test, scaled to each "
            "N_given like ERM's step (measured = ERM timed at that N_given, fit = power law)."
        )
        return "\n".join(lines)


def unit_checkpoints(config: StudyConfig) -> int:
    """Checkpoint evaluations of a unit of `config`: every ``eval_every`` steps (default 100, at
    most `steps`) and the last step; none with ``selection = "last"``.

    >>> from oodeval.study import preset
    >>> unit_checkpoints(preset("quick").replace(steps=250))
    3
    """
    if config.trainer.get("selection") == "last":
        return 0
    every = min(int(config.trainer.get("eval_every", 100)), config.steps)
    return config.steps // every + (config.steps % every != 0)


# -- from whole sampled units ---------------------------------------------------------------------
#: Algorithms sampled by default when the study has them (cheap, typical and expensive ones).
DEFAULT_SAMPLE = ("ERM", "MLDG", "SagNet")


def estimate_study(
    config: StudyConfig,
    *,
    workers: int = 1,
    algorithms: tuple[str, ...] | None = None,
    steps_fraction: float = 1.0,
    directory: str | Path | None = None,
    progress: bool = False,
    sample_steps: int | None = None,
) -> Estimate:
    """Measure a sample of `config`'s units and project the full study's wall time.

    Parameters
    ----------
    config : the study to project (e.g. ``preset("paper-cpu")``).
    workers : worker processes used for the sample and assumed for the full study.
    algorithms : algorithms to sample (default: those of `DEFAULT_SAMPLE` the study has, else its
        first three).
    steps_fraction : run the sample with this fraction of the steps (0 < f <= 1).
    directory : where to keep the sample's store (default: a temporary folder, removed after).
    sample_steps : time this many training steps of each algorithm and extrapolate
        (`estimate_steps`); replaces `steps_fraction`.

    The sample trains on the config's ``[trainer] device``; on a GPU device `workers` defaults to
    one per GPU (`oodeval.study.executors.local_devices`).
    """
    if not 0 < steps_fraction <= 1:
        raise OodevalError(f"steps_fraction must be in (0, 1], got {steps_fraction}")
    if sample_steps is not None:
        if algorithms is not None:
            raise OodevalError(
                "sample_steps times every algorithm of the study; `algorithms` chooses whole "
                "units to sample: give one of them (--n-sample-steps or --algorithms)"
            )

        return estimate_steps(config, sample_steps=sample_steps, workers=workers, progress=progress)
    config = prepare_config(config)
    device = config_device(config)
    if device != "cpu":
        workers = len(local_devices(device, None, gpu_count(device)))
    validated = validate_config(config, import_backend(config))
    n_by_scenario = validated.n_given()
    sample, mix = _sample_configs(config, n_by_scenario, algorithms, steps_fraction)
    if progress:  # what is timed, before the minutes it takes (after every check of the input)
        line = sampling_line(
            sample, mix, _sampled_n(n_by_scenario), workers, _measured_device(device)
        )
        print(safe_text(line), file=sys.stderr)  # algorithm names are the user's
    pool = None if device != "cpu" else workers
    units, wall = _sampled_units(sample, mix, directory, workers=pool, progress=progress)
    name_to_n = {built.name: len(built.given) for built in validated.scenarios}
    samples = _sample_times(units, name_to_n, steps_fraction)
    mix_factor = _mix_factor(samples, int(min(n_by_scenario)))
    per_n = _per_n(samples, n_by_scenario, len(config.algorithms) * len(config.seeds), mix_factor)
    total = sum(
        float(s) * int(u)
        for s, u in zip(per_n["unit_seconds"], per_n["units_in_study"], strict=True)
    )
    return Estimate(
        samples=samples,
        per_n=per_n,
        workers=workers,
        steps_fraction=steps_fraction,
        sample_wall_seconds=wall,
        projected_seconds=total / workers,
        failed=int((units["status"] == "failed").sum()),
        mix_factor=mix_factor,
        device=_measured_device(device),
    )


def _sampled_units(
    sample: StudyConfig,
    mix: StudyConfig | None,
    directory: str | Path | None,
    *,
    workers: int | None,
    progress: bool,
) -> tuple[pd.DataFrame, float]:
    """The stored units of the `sample` study (role ``sample``) and of the `mix` study (role
    ``mix``), run with `workers` into `directory` (default: a temporary folder), and the seconds
    both runs took."""
    with tempfile.TemporaryDirectory(prefix="oodeval-estimate-") as tmp:
        folder = Path(directory) if directory is not None else Path(tmp)
        t0 = time.perf_counter()
        run_study(sample, folder, workers=workers, progress=progress)
        if mix is not None:
            run_study(mix, folder / "other-algorithms", workers=workers, progress=progress)
        wall = time.perf_counter() - t0
        units = load_study(folder).units.assign(role="sample")
        if mix is not None:
            extra = load_study(folder / "other-algorithms").units.assign(role="mix")
            units = pd.concat([units, extra], ignore_index=True)
    return units, wall


def _measured_device(device: str) -> str:
    from oodeval._torch import resolve_device

    return resolve_device(device)


def _sampled_n(n_by_scenario: list[int]) -> list[int]:
    """The N_given values whole units are timed at: the smallest, the middle and the largest."""
    distinct = sorted(set(n_by_scenario))
    return sorted({distinct[0], distinct[len(distinct) // 2], distinct[-1]})


def sampling_line(
    sample: StudyConfig, mix: StudyConfig | None, sampled_n: list[int], workers: int, device: str
) -> str:
    """The line `study estimate` prints before it times whole units: what, where, how many.

    >>> from oodeval.study import preset
    >>> quick = preset("quick")
    >>> sample = quick.replace(algorithms=["ERM"], hparams={}, steps=300)
    >>> sampling_line(sample, None, [2, 4], 2, "cpu")
    'sampling: ERM at N_given=2, 4 (one seed, 300 steps per unit) with 2 worker(s) on cpu'
    """
    line = (
        f"sampling: {', '.join(sample.algorithms)} at N_given={', '.join(map(str, sampled_n))} "
        f"(one seed, {sample.steps} steps per unit)"
    )
    if mix is not None:
        line += (
            f", then the {len(mix.algorithms)} other algorithm(s) once at N_given={sampled_n[0]}"
        )
    return f"{line} with {workers} worker(s) on {device}"


def _sample_configs(
    config: StudyConfig,
    n_by_scenario: list[int],
    algorithms: tuple[str, ...] | None,
    steps_fraction: float,
) -> tuple[StudyConfig, StudyConfig | None]:
    """The sample study (smallest, middle and largest N; the sampled algorithms; one seed) and
    the study timing every other algorithm once at the smallest N (None when there are none)."""
    representatives = [n_by_scenario.index(n) for n in _sampled_n(n_by_scenario)]
    if algorithms is None:
        picked = [a for a in DEFAULT_SAMPLE if a in config.algorithms]
        algorithms = tuple(picked or config.algorithms[:3])
    unknown = [a for a in algorithms if a not in config.algorithms]
    if unknown:
        raise OodevalError(
            f"sample algorithm(s) {listing(unknown)} are not in the study; it runs "
            f"{listing(config.algorithms)}"
        )
    sample = config.replace(
        name=f"{config.name}-estimate",
        scenarios=[
            {"family": config.scenarios[i].family, **config.scenarios[i].params}
            for i in representatives
        ],
        algorithms=list(algorithms),
        hparams={a: h for a, h in config.hparams.items() if a in algorithms},
        seeds=[config.seeds[0]],
        steps=max(1, round(config.steps * steps_fraction)),
    )
    others = [a for a in config.algorithms if a not in algorithms]
    if not others:
        return sample, None
    mix = sample.replace(
        name=f"{config.name}-estimate-algorithms",
        scenarios=[sample.to_dict()["scenarios"][0]],  # the smallest N
        algorithms=others,
        hparams={a: h for a, h in config.hparams.items() if a in others},
    )
    return sample, mix


def _sample_times(
    units: pd.DataFrame,
    name_to_n: dict[str, int],
    steps_fraction: float,
) -> pd.DataFrame:
    """Per done unit: scenario, n_given, algorithm, role, measured seconds and the seconds it
    would take with all the steps (the training time scaled by 1 / steps_fraction)."""
    done = units[units["status"] == "done"]
    if not (done["role"] == "sample").any():
        reasons = "; ".join(units["failure"].astype(str).head(3))
        raise OodevalError(f"every sampled unit failed, nothing to project from: {reasons}")
    samples = pd.DataFrame(
        {
            "scenario": done["scenario"].to_numpy(),
            "n_given": done["scenario"].map(name_to_n).to_numpy(),
            "algorithm": done["algorithm"].to_numpy(),
            "role": done["role"].to_numpy(),
            "wall_seconds": done["timings"].map(lambda t: float(t.get("wall", np.nan))).to_numpy(),
            "train_seconds": done["timings"]
            .map(lambda t: float(t.get("train", np.nan)))
            .to_numpy(),
        }
    )
    train = samples["train_seconds"].fillna(samples["wall_seconds"])
    samples["full_steps_seconds"] = samples["wall_seconds"] + train * (1.0 / steps_fraction - 1.0)
    return samples


def _per_n(
    samples: pd.DataFrame, n_by_scenario: list[int], units_per_scenario: int, mix_factor: float
) -> pd.DataFrame:
    """Predicted seconds per unit (measured, else fitted) and the study's units for each N."""
    main = samples[samples["role"] == "sample"]
    measured = main.groupby("n_given")["full_steps_seconds"].mean()
    predict = _fit(measured.index.to_numpy(float), measured.to_numpy(float))
    rows = []
    for n in sorted(set(n_by_scenario)):
        seconds = (float(measured[n]) if n in measured.index else predict(n)) * mix_factor
        rows.append(
            {
                "n_given": n,
                "unit_seconds": seconds,
                "units_in_study": n_by_scenario.count(n) * units_per_scenario,
                "measured": n in measured.index,
            }
        )
    return pd.DataFrame(rows)


def _mix_factor(samples: pd.DataFrame, n_min: int) -> float:
    """All timed algorithms' mean unit time at `n_min` over the sampled algorithms' mean there."""
    at_min = samples[samples["n_given"] == n_min]
    per_algorithm = at_min.groupby("algorithm")["full_steps_seconds"].mean()
    sampled = at_min.loc[at_min["role"] == "sample", "algorithm"].unique()
    if not (at_min["role"] == "mix").any() or len(sampled) == 0:
        return 1.0
    return float(per_algorithm.mean() / per_algorithm[sampled].mean())


def _fit(n: np.ndarray, seconds: np.ndarray):
    """t(N) through the measured points: quadratic for 3+ distinct N, linear for 2, else flat."""
    degree = min(len(n) - 1, 2)
    coefficients = np.polyfit(n, seconds, degree) if degree > 0 else np.array([seconds[0]])
    return lambda value: max(float(np.polyval(coefficients, value)), float(seconds.min()))


# -- from a few timed training steps per algorithm ------------------------------------------------
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
    n_by_scenario = validated.n_given()
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
    backend: Any, config: StudyConfig, validated: ValidatedConfig
) -> list[dict[bool, tuple[float, float]]]:
    """Each scenario's predicted rows (`_rows`) for algorithms that do not and that do depend on
    the batch; the scenarios are built one at a time, so memory stays bounded."""
    holdout = float(config.trainer.get("holdout_fraction", 0.2))
    counts = []
    for built in validated.scenarios:
        scenario = build(backend, config, built.spec)
        counts.append({d: _rows(scenario, holdout, d) for d in (False, True)})
        del scenario
    return counts


def _sample_rows(
    config: StudyConfig,
    validated: ValidatedConfig,
    sampled: list[int],
    steps: int,
    device: str,
    progress: bool,
) -> list[dict[str, Any]]:
    """The timed rows of every algorithm at the smallest sampled N and of ERM at the others,
    timed one after another in one worker process set up for `config` on `device`."""
    n_by_scenario = validated.n_given()
    seed = config.seeds[0]
    threads = 1 if device == "cpu" else os.cpu_count() or 1
    settings = WorkerSettings(threads=threads, device=device)
    rows = []
    with WorkerPool(1, initializer=setup_worker, initargs=(config.to_json(), settings)) as pool:

        def timed(index: int, algorithm: str, steps: int, evaluate: bool) -> dict[str, Any]:
            hparams = validated.hparams.get((algorithm, seed))
            job = (index, algorithm, seed, hparams, steps, evaluate)
            return pool.submit(sample_timings, *job).result()

        for n in sampled:
            index = n_by_scenario.index(n)
            name = validated.scenarios[index].name
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
        row["row_seconds"] = _row_seconds(trained, scenario, trained.batch_size)
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
