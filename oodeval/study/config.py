"""Study configurations: what to train (scenarios x algorithms x seeds) and how, read from TOML.

A study is the worst+gap paper's experiment (Sections 5-6): every algorithm is trained on every
scenario with every seed; each such *unit* yields leave-one-environment-out errors and the errors of
the model trained on all given environments, from which the analyses compute the measures.

A config file looks like ``examples/study.toml``::

    name = "my-study"
    source = "auto"                 # digits | mnist:DIR | auto (real MNIST when found, else digits)
    algorithms = ["ERM", "IRM", "GroupDRO"]
    seeds = [0, 1, 2]
    steps = 1000
    model = "mlp"

    [[scenarios]]
    family = "sr-cmnist"
    ratio = "3:1"
    scale = 1

Everything is validated up front (`validate_config`), so a typo costs one clear error line, not an
hour of training.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from oodeval.errors import OodevalError
from oodeval.measures.domain import MEASURES, undefined_measures

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged as tomli
    import tomli as tomllib

#: The backend used when the config names none: real scenarios, algorithms and the trainer.
DEFAULT_BACKEND = "oodeval.study.trainer_backend"
#: Measures the analyses can be asked for: the LOO measures of `oodeval.measures.REGISTRY`.
KNOWN_MEASURES = tuple(MEASURES)
#: Measures that need at least three given environments (Eq. 6 divides by N - 2).
NEEDS_THREE_ENVS = tuple(undefined_measures(KNOWN_MEASURES, 2))
DEFAULT_MEASURES = ("average", "worst_plus_gap", "worst_only", "gap_only")
TRAINER_KEYS = ("selection", "eval_every", "holdout_fraction", "batch_size", "precision")
#: values of ``[trainer] precision``, the default first (the keys of
#: `oodeval.algorithms.networks.PRECISIONS`, named here without importing torch)
PRECISIONS = ("fp32", "bf16")
HPARAMS_MODES = ("default", "random")
#: Environment variable naming an MNIST folder for ``source = "auto"``.
MNIST_ENV_VAR = "OODEVAL_MNIST"

_TOP_KEYS = {
    "name",
    "backend",
    "imports",
    "source",
    "data_seed",
    "scenarios",
    "algorithms",
    "seeds",
    "steps",
    "model",
    "hparams_mode",
    "hparams",
    "trainer",
    "measures",
    "unit_options",
}


@dataclass(frozen=True)
class ScenarioSpec:
    """One scenario of a study: a family name and its parameters, as `build_scenario` takes them."""

    family: str
    params: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        """A readable fallback name (the built scenario's own `name` is what the store records)."""
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.family}[{inner}]" if inner else self.family


@dataclass(frozen=True)
class StudyConfig:
    """A validated study configuration (see the module docstring for the TOML form).

    Attributes
    ----------
    name : a label for the study.
    backend : dotted module path providing ``build_scenario``, ``available``, ``default_hparams``,
        ``sample_hparams`` and ``run_unit`` (default: the real trainer, `DEFAULT_BACKEND`).
    imports : extra modules imported in the parent and in every worker before anything else, e.g.
        a module that registers your own algorithm with ``oodeval.algorithms.register_algorithm``.
    source : image source spec (``digits``, ``mnist:DIR``, ...); ``auto`` is resolved by
        `resolve_source` when the config is loaded, so the stored config names the real source.
    data_seed : seed of the scenario data (colors, label noise, image split); fixed per study.
    scenarios, algorithms, seeds : the grid; a unit is one (scenario, algorithm, seed).
    steps, model : training length and model family for every unit.
    hparams_mode : ``default`` (the algorithm's defaults) or ``random`` (``sample_hparams(name,
        seed)``); ``hparams`` then overrides single values per algorithm.
    trainer : extra keyword arguments of ``run_unit`` (selection, eval_every, holdout_fraction,
        batch_size, precision: ``"fp32"`` or ``"bf16"``).
    measures : the measures the analyses use; ``worst_plus_gap`` requires >= 3 given environments.
    unit_options : extra keyword arguments for the backend's ``run_unit`` that are not trainer
        settings (used by the synthetic backend, e.g. ``fail_algorithms``).
    """

    name: str
    scenarios: tuple[ScenarioSpec, ...]
    algorithms: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: int
    model: str = "mlp"
    source: str = "digits"
    data_seed: int = 0
    backend: str = DEFAULT_BACKEND
    imports: tuple[str, ...] = ()
    hparams_mode: str = "default"
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    measures: tuple[str, ...] = DEFAULT_MEASURES
    unit_options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; `config_from_dict(cfg.to_dict()) == cfg`."""
        out = asdict(self)
        out["scenarios"] = [{"family": s.family, **s.params} for s in self.scenarios]
        for key in ("algorithms", "seeds", "imports", "measures"):
            out[key] = list(out[key])
        return out

    def to_json(self) -> str:
        """Canonical JSON (sorted keys) of the config; what the store keeps and compares."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def replace(self, **changes: Any) -> StudyConfig:
        """A copy with some fields changed, re-validated for types."""
        data = self.to_dict()
        data.update(changes)
        return config_from_dict(data)


def resolve_source(source: str, *, cwd: Path | None = None) -> str:
    """Resolve ``source = "auto"``: real MNIST when found, else the bundled ``digits``.

    Looks, in order, at the ``OODEVAL_MNIST`` environment variable and at ``../shared/data/mnist``
    relative to the working directory; a folder counts when it holds ``t10k-images-idx3-ubyte``
    (optionally ``.gz``). Any other source string is returned unchanged.

    >>> resolve_source("digits")
    'digits'
    """
    if source != "auto":
        return source
    base = Path.cwd() if cwd is None else cwd
    candidates = []
    if os.environ.get(MNIST_ENV_VAR):
        candidates.append(Path(os.environ[MNIST_ENV_VAR]))
    candidates.append(base / ".." / "shared" / "data" / "mnist")
    for folder in candidates:
        if any((folder / f"t10k-images-idx3-ubyte{ext}").is_file() for ext in ("", ".gz")):
            return f"mnist:{folder.resolve()}"
    return "digits"


def load_config(path: str | Path) -> StudyConfig:
    """Read and validate the types of a TOML study config (the grid itself: `validate_config`)."""
    path = Path(path)
    if not path.is_file():
        raise OodevalError(f"study config {path} not found; pass a TOML file or --preset NAME")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise OodevalError(f"study config {path} is not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    return config_from_dict(data)


def config_from_dict(data: Mapping[str, Any]) -> StudyConfig:
    """Build a StudyConfig from plain data (parsed TOML or stored JSON), checking every type."""
    if not isinstance(data, Mapping):
        raise OodevalError("a study config must be a table of keys")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise OodevalError(
            f"unknown study config key(s) {unknown}; allowed keys are {sorted(_TOP_KEYS)}"
        )
    for key in ("scenarios", "algorithms", "seeds", "steps"):
        if key not in data:
            raise OodevalError(f"study config is missing {key!r}; see examples/study.toml")
    scenarios = tuple(_scenario_spec(s, i) for i, s in enumerate(_list(data, "scenarios")))
    algorithms = tuple(_str(a, "algorithms[]") for a in _list(data, "algorithms"))
    seeds = tuple(_int(s, "seeds[]") for s in _list(data, "seeds"))
    for key, values in (("scenarios", scenarios), ("algorithms", algorithms), ("seeds", seeds)):
        if not values:
            raise OodevalError(f"study config {key!r} is empty; list at least one")
        if len(set(map(repr, values))) != len(values):
            raise OodevalError(f"study config {key!r} lists a value twice; remove the duplicate")
    steps = _int(data["steps"], "steps")
    if steps < 1:
        raise OodevalError(f"steps must be >= 1, got {steps}")
    hparams_mode = _str(data.get("hparams_mode", "default"), "hparams_mode")
    if hparams_mode not in HPARAMS_MODES:
        raise OodevalError(
            f"hparams_mode must be one of {list(HPARAMS_MODES)}, got {hparams_mode!r}"
        )
    hparams = data.get("hparams", {})
    if not isinstance(hparams, Mapping) or not all(
        isinstance(v, Mapping) for v in hparams.values()
    ):
        raise OodevalError("hparams must be a table of tables, e.g. [hparams.IRM] lambda = 100")
    trainer = dict(data.get("trainer", {}))
    bad = sorted(set(trainer) - set(TRAINER_KEYS))
    if bad:
        raise OodevalError(f"unknown [trainer] key(s) {bad}; allowed: {list(TRAINER_KEYS)}")
    if "precision" in trainer and trainer["precision"] not in PRECISIONS:
        raise OodevalError(
            f"unknown [trainer] precision {trainer['precision']!r}; choose one of "
            f"{', '.join(PRECISIONS)}"
        )
    if trainer.get("precision") == PRECISIONS[0]:  # the default: stored configs never name it
        del trainer["precision"]
    measures = tuple(_str(m, "measures[]") for m in _list(data, "measures", DEFAULT_MEASURES))
    unknown_measures = sorted(set(measures) - set(KNOWN_MEASURES))
    if unknown_measures:
        raise OodevalError(
            f"unknown measure(s) {unknown_measures}; choose from {list(KNOWN_MEASURES)}"
        )
    unit_options = data.get("unit_options", {})
    if not isinstance(unit_options, Mapping):
        raise OodevalError("unit_options must be a table")
    return StudyConfig(
        name=_str(data.get("name", "study"), "name"),
        scenarios=scenarios,
        algorithms=algorithms,
        seeds=seeds,
        steps=steps,
        model=_str(data.get("model", "mlp"), "model"),
        source=_str(data.get("source", "digits"), "source"),
        data_seed=_int(data.get("data_seed", 0), "data_seed"),
        backend=_str(data.get("backend", DEFAULT_BACKEND), "backend"),
        imports=tuple(_str(m, "imports[]") for m in _list(data, "imports", ())),
        hparams_mode=hparams_mode,
        hparams={str(k): copy.deepcopy(dict(v)) for k, v in hparams.items()},
        trainer=trainer,
        measures=measures,
        unit_options=copy.deepcopy(dict(unit_options)),
    )


def import_backend(config: StudyConfig) -> ModuleType:
    """Import the config's extra modules, then its backend; complain clearly when one is missing."""
    for name in config.imports:
        _import(name, "imports")
    backend = _import(config.backend, "backend")
    missing = [
        attr
        for attr in ("build_scenario", "available", "default_hparams", "sample_hparams", "run_unit")
        if not callable(getattr(backend, attr, None))
    ]
    if missing:
        raise OodevalError(
            f"backend {config.backend!r} lacks {missing}; a backend module must define "
            "build_scenario, available, default_hparams, sample_hparams and run_unit"
        )
    return backend


def resolved_hparams(config: StudyConfig, backend: ModuleType, algorithm: str, seed: int) -> dict:
    """The hyperparameters a unit trains with: defaults (or a seeded random draw) plus overrides.

    Overrides must name hyperparameters the algorithm declares and keep their type (an int may
    stand for a float; a bool never stands for a number).
    """
    if config.hparams_mode == "random":
        base = dict(backend.sample_hparams(algorithm, seed))
    else:
        base = dict(backend.default_hparams(algorithm))
    defaults = dict(backend.default_hparams(algorithm))
    for key, value in config.hparams.get(algorithm, {}).items():
        if key not in defaults:
            raise OodevalError(
                f"hparams.{algorithm}.{key}: {algorithm} has no hyperparameter {key!r}; "
                f"it has {sorted(defaults)}"
            )
        if not _same_kind(defaults[key], value):
            raise OodevalError(
                f"hparams.{algorithm}.{key} must be {type(defaults[key]).__name__} like its "
                f"default {defaults[key]!r}, got {type(value).__name__} {value!r}"
            )
        base[key] = float(value) if isinstance(defaults[key], float) else value
    return base


def validate_config(config: StudyConfig, backend: ModuleType | None = None) -> dict[str, Any]:
    """Check the whole grid before any training; return the built scenario names per spec.

    Raises OodevalError for an unknown algorithm, a hyperparameter override of the wrong name or
    type, an unknown scenario family or parameter, or a scenario with fewer than three given
    environments when a measure that needs three (worst+gap, Eq. 6) is asked for.

    Returns a dict with ``"scenarios"``: a list of (spec, scenario name, given names, the
    scenario's own parameters) and
    ``"hparams"``: {(algorithm, seed): hparams}.
    """
    backend = import_backend(config) if backend is None else backend
    known = list(backend.available())
    unknown = [a for a in config.algorithms if a not in known]
    if unknown:
        raise OodevalError(f"unknown algorithm(s) {unknown}; available: {sorted(known)}")
    for algorithm in config.hparams:
        if algorithm not in config.algorithms:
            raise OodevalError(
                f"[hparams.{algorithm}] names an algorithm the study does not run; "
                f"the study runs {list(config.algorithms)}"
            )
    hparams = {
        (a, s): resolved_hparams(config, backend, a, s)
        for a in config.algorithms
        for s in config.seeds
    }
    built = []
    names: set[str] = set()
    for spec in config.scenarios:
        scenario = build(backend, config, spec)
        given = list(scenario.given_names)
        needing = [m for m in config.measures if m in NEEDS_THREE_ENVS]
        if needing and len(given) < 3:
            raise OodevalError(
                f"scenario {scenario.name} has {len(given)} given environments but {needing} "
                "needs at least 3 (Eq. 6 divides by N - 2); add environments or drop the measure"
            )
        if len(given) < 2:
            raise OodevalError(
                f"scenario {scenario.name} has {len(given)} given environment(s); "
                "leave-one-environment-out needs at least 2"
            )
        if scenario.name in names:
            raise OodevalError(f"scenario {scenario.name} is listed twice; remove the duplicate")
        names.add(scenario.name)
        params = dict(getattr(scenario, "params", None) or spec.params)
        built.append((spec, scenario.name, given, params))
    return {"scenarios": built, "hparams": hparams}


def build(backend: ModuleType, config: StudyConfig, spec: ScenarioSpec) -> Any:
    """Build one scenario through the backend, turning its complaints into one clear line."""
    try:
        return backend.build_scenario(
            spec.family, source=config.source, seed=config.data_seed, **spec.params
        )
    except OodevalError:
        raise
    except TypeError as exc:
        raise OodevalError(f"scenario {spec.label()}: {exc}; check its parameters") from None


def _import(name: str, key: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise OodevalError(f"{key}: cannot import module {name!r} ({exc})") from None


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    if isinstance(default, int):
        return isinstance(value, int)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, Sequence):
        return isinstance(value, Sequence) and not isinstance(value, str)
    return isinstance(value, type(default))


def _scenario_spec(item: Any, index: int) -> ScenarioSpec:
    if isinstance(item, str):
        return ScenarioSpec(item, {})
    if not isinstance(item, Mapping) or "family" not in item:
        raise OodevalError(
            f"scenarios[{index}] must be a table with a 'family' key, e.g. "
            '{ family = "sr-cmnist", ratio = "3:1", scale = 1 }'
        )
    params = {str(k): v for k, v in item.items() if k != "family"}
    return ScenarioSpec(_str(item["family"], f"scenarios[{index}].family"), params)


def _list(data: Mapping[str, Any], key: str, default: Any = None) -> list:
    value = data.get(key, default)
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise OodevalError(f"{key} must be a list, got {type(value).__name__} {value!r}")
    return list(value)


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise OodevalError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OodevalError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    return value
