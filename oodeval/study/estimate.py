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
training steps and evaluations apart instead of whole units (`oodeval.study.estimate_steps`), so
long protocols (the paper's 5001 steps of mnist_cnn) are projected in minutes. Either way the sample
runs on the config's device, and the summary names it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from oodeval._text import safe_text
from oodeval.errors import OodevalError, listing
from oodeval.study.config import StudyConfig, import_backend, validate_config
from oodeval.study.estimate_steps import estimate_steps
from oodeval.study.executors import config_device, gpu_count, local_devices
from oodeval.study.projection import Estimate
from oodeval.study.read_model import load_study
from oodeval.study.runner import prepare_config, run_study

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
        (`oodeval.study.estimate_steps.estimate_steps`); replaces `steps_fraction`.

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
    n_by_scenario = [len(given) for _spec, _name, given, _params in validated["scenarios"]]
    sample, mix = _sample_configs(config, n_by_scenario, algorithms, steps_fraction)
    if progress:  # what is timed, before the minutes it takes (after every check of the input)
        line = sampling_line(
            sample, mix, _sampled_n(n_by_scenario), workers, _measured_device(device)
        )
        print(safe_text(line), file=sys.stderr)  # algorithm names are the user's
    pool = None if device != "cpu" else workers
    units, wall = _sampled_units(sample, mix, directory, workers=pool, progress=progress)
    name_to_n = {name: len(given) for _spec, name, given, _params in validated["scenarios"]}
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
