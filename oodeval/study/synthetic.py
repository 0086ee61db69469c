"""A synthetic study backend: the full study pipeline in milliseconds, without images or torch.

Use it to try the study machinery (store, resume, analyses) or to test it: set
``backend = "oodeval.study.synthetic"`` in a study config. Its scenarios mimic SR-CMNIST's layout
(Section 4.1 of the worst+gap paper): environments are spurious-correlation strengths e in
[0, 1], E_all is an evenly spaced grid and E_given comes from Ratio and Scale (or is listed).

Errors are simulated, not learned: an algorithm ``A`` has a fixed robustness ``r_A`` in [0, 1]
(from a hash of its name); a model trained on environments S and tested on environment e errs

    0.25 + (1 - r_A) * 0.7 * |e - mean(S)| + noise,   noise ~ N(0, 0.02^2) seeded by the unit,

clipped to [0, 1]. It is a caricature of a colored-MNIST learner (0.25 is the label-noise floor),
enough for rank correlations and selections to mean something.
"""

from __future__ import annotations

import os
import time
import warnings
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oodeval.errors import OodevalError
from oodeval.paper_grid import PAPER_ALGORITHMS

#: The 14 DomainBed algorithm names of the paper, used as the synthetic registry.
ALGORITHMS = PAPER_ALGORITHMS
#: Model names a synthetic unit accepts; it simulates errors, so the name changes nothing.
MODELS = ("mlp", "cnn")
_DEFAULTS = {"lr": 1e-3, "noise": 0.02, "penalty_weight": 1.0}
_COUNT = 200


class SyntheticFailure(RuntimeError):
    """The failure `run_unit` raises for algorithms listed in ``fail_algorithms``."""


@dataclass(frozen=True)
class SyntheticRow:
    """One (fold, environment) error, as `oodeval.training.ResultRow`."""

    fold: str
    environment: str
    error: float
    count: int


@dataclass
class SyntheticResult:
    """What `run_unit` returns, shaped like `oodeval.training.UnitResult`."""

    algorithm: str
    seed: int
    scenario_name: str
    rows: list[SyntheticRow]
    hparams: dict
    steps: int
    timings: dict[str, float] = field(default_factory=dict)


class SyntheticScenario:
    """A scenario made of environment names only (``e=0.10`` ...); it holds no images.

    It has the naming half of `oodeval.environments.base.Scenario` (name, params, given_names,
    all_names) and no data: the synthetic `run_unit` simulates errors from the names alone.
    """

    def __init__(self, name: str, given: Sequence[float], all_values: Iterable[float], params):
        self.name = name
        self.params = dict(params)
        self.given_values = [float(v) for v in given]
        self.all_values = [float(v) for v in all_values]

    @property
    def given_names(self) -> list[str]:
        return [_env_name(v) for v in self.given_values]

    @property
    def all_names(self) -> list[str]:
        return [_env_name(v) for v in self.all_values]


def build_scenario(
    family: str,
    *,
    source: Any = "digits",
    seed: int = 0,
    ratio: str = "3:1",
    scale: int = 1,
    given: Sequence[float] | None = None,
    n_all: int = 101,
) -> SyntheticScenario:
    """A synthetic scenario: E_given from Ratio/Scale (paper Section 4.1) or an explicit list.

    >>> s = build_scenario("synthetic", ratio="3:1", scale=1)
    >>> s.given_names
    ['e=0.800', 'e=0.850', 'e=0.900', 'e=0.100']
    """
    if family != "synthetic":
        raise OodevalError(
            f"unknown scenario family {family!r}; the synthetic backend has 'synthetic'"
        )
    all_values = np.linspace(0.0, 1.0, int(n_all))
    if given is not None:
        values = [float(v) for v in given]
        params: dict[str, Any] = {"given": values}
        name = "synthetic/given=" + ",".join(f"{v:g}" for v in values)
    else:
        try:
            major, minor = (int(p) for p in str(ratio).split(":"))
        except ValueError:
            raise OodevalError(f"ratio must look like '3:1', got {ratio!r}") from None
        if scale < 1 or major < 1 or minor < 1:
            raise OodevalError(f"ratio parts and scale must be >= 1, got {ratio!r}, {scale!r}")
        values = _spread(0.8, 0.9, major * scale) + _spread(0.1, 0.2, minor * scale)
        params = {"ratio": str(ratio), "scale": int(scale)}
        name = f"synthetic/ratio={ratio}/scale={scale}"
    return SyntheticScenario(name, values, all_values, params)


def available() -> list[str]:
    """The synthetic registry: the paper's 14 algorithm names."""
    return list(ALGORITHMS)


def available_models() -> list[str]:
    """The synthetic models: `MODELS`."""
    return list(MODELS)


def default_hparams(name: str) -> dict:
    """Default hyperparameters (``noise`` is the simulated error noise's standard deviation)."""
    _check(name)
    return dict(_DEFAULTS)


def sample_hparams(name: str, seed: int) -> dict:
    """A seeded random draw: lr = 10^U(-4.5, -2.5), the rest at their defaults."""
    _check(name)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return {**_DEFAULTS, "lr": float(10 ** rng.uniform(-4.5, -2.5))}


def run_unit(
    scenario: SyntheticScenario,
    algorithm: str,
    *,
    seed: int,
    steps: int,
    hparams: dict | None = None,
    model: str = "mlp",
    fail_algorithms: Sequence[str] = (),
    crash_algorithms: Sequence[str] = (),
    warn_algorithms: Sequence[str] = (),
    sleep: float = 0.0,
    slow_algorithms: Mapping[str, float] | None = None,
    **trainer: Any,
) -> SyntheticResult:
    """Simulated leave-one-out errors and all-environment errors of one unit (see module doc).

    Test hooks: algorithms in ``fail_algorithms`` raise `SyntheticFailure`; those in
    ``crash_algorithms`` end the worker process abruptly; those in ``warn_algorithms`` raise a
    `UserWarning` naming the algorithm; ``sleep`` delays every unit (seconds), ``slow_algorithms``
    ({name: seconds}) delays that algorithm's units further.
    """
    start = time.perf_counter()
    _check(algorithm)
    if model not in MODELS:
        raise OodevalError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    hp = {**_DEFAULTS, **(hparams or {})}
    if algorithm in fail_algorithms:
        raise SyntheticFailure(f"synthetic failure of {algorithm} (seed {seed}, fail_algorithms)")
    if algorithm in crash_algorithms:
        os._exit(3)  # simulates a worker killed mid-unit (e.g. by the out-of-memory killer)
    if algorithm in warn_algorithms:
        warnings.warn(f"synthetic warning of {algorithm} (warn_algorithms)", UserWarning, 2)
    delay = float(sleep) + float((slow_algorithms or {}).get(algorithm, 0.0))
    if delay:
        time.sleep(delay)
    robustness = (zlib.crc32(algorithm.encode()) % 1000) / 999.0
    given = scenario.given_values
    rows: list[SyntheticRow] = []

    def error(train: Sequence[float], env: float, fold: str) -> float:
        rng = np.random.default_rng(
            [seed, zlib.crc32(f"{scenario.name}|{algorithm}|{fold}|{env:.6f}".encode())]
        )
        shift = abs(env - float(np.mean(train)))
        value = 0.25 + (1.0 - robustness) * 0.7 * shift + rng.normal(0.0, hp["noise"])
        return float(np.clip(value, 0.0, 1.0))

    for k, held in enumerate(given):
        train = given[:k] + given[k + 1 :]
        fold = _env_name(held)
        rows.append(SyntheticRow(fold, fold, error(train, held, fold), _COUNT))
    for env in scenario.all_values:
        rows.append(SyntheticRow("all", _env_name(env), error(given, env, "all"), _COUNT))
    return SyntheticResult(
        algorithm=algorithm,
        seed=seed,
        scenario_name=scenario.name,
        rows=rows,
        hparams=hp,
        steps=steps,
        timings={"total": time.perf_counter() - start},
    )


def _check(name: str) -> None:
    if name not in ALGORITHMS:
        raise OodevalError(f"unknown algorithm {name!r}; available: {sorted(ALGORITHMS)}")


def _spread(low: float, high: float, n: int) -> list[float]:
    if n == 1:
        return [low]
    return [float(v) for v in np.linspace(low, high, n)]


def _env_name(value: float) -> str:
    return f"e={value:.3f}"
