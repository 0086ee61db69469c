"""The trainer backend of a study: what it defines, importing it, what it says about a config.

A *backend* is a module that builds scenarios and trains units; a config names it by its dotted
path (``backend``, default `oodeval.study.config.keys.DEFAULT_BACKEND`, the real trainer in
`oodeval.study.trainer_backend`; `oodeval.study.synthetic` simulates one). What it must define is
`TrainerBackend` (a `typing.Protocol`: a module fits it structurally, nothing is subclassed).
``run_unit`` is its entry point, called once per unit by the study's worker.

A config's ``backend`` is one of `BUILT_IN_BACKENDS`, the name of an entry point of the group
`BACKEND_GROUP` (``oodeval.backends``: a package you installed declares its backend there), or
a dotted module path. Nothing is imported to refuse one (`backend_problems`): a module path must
be found on the Python path without running it (`located_spec`) and its source must define
every function of `TrainerBackend` (by ``def``, assignment or a named import), so
``backend = "os"`` is refused and ``os`` never imported.

`import_backend` imports the config's ``imports`` (once per process, `import_problem`) and then
the backend, checking that it defines every function of `TrainerBackend`; `validate_config` asks
it about the whole grid (algorithms, model, hyperparameter overrides, scenarios, the device)
before any training and reports every problem at once.

>>> BACKEND_FUNCTIONS
('build_scenario', 'available', 'default_hparams', 'sample_hparams', 'run_unit')
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from oodeval._digest import ReadFile, read_file
from oodeval.environments.mnist import resolve_source
from oodeval.errors import OodevalError, listing
from oodeval.measures.registry import get_measure, undefined_measures
from oodeval.study.config.imports import import_problem, located_spec
from oodeval.study.config.keys import DEFAULT_BACKEND, ConfigError, ScenarioSpec, shown

if TYPE_CHECKING:  # annotations only: the schema builds on this module, not the other way
    from oodeval.study.config.schema import StudyConfig


class TrainerBackend(Protocol):
    """What a study backend module defines (`typing.Protocol`: a module fits it structurally).

    A backend may also define ``available_models() -> list[str]``; without it the config's
    ``model`` is checked only by its own ``run_unit`` (`available_models`); and
    ``check_pretrained(path, model)``, raising an OodevalError when the ``[trainer] pretrained``
    file is not weights `model` loads (without it, only the file's digest is checked up
    front: `pretrained_problems`). Its ``default_hparams`` and ``sample_hparams`` may take a
    ``model`` keyword, the config's model, when the hyperparameters depend on it (the default
    backend's do: the ResNets train with DomainBed's larger-image values; `model_hparams`). A
    new backend is a
    new module with these five functions (in its source: ``def``, an assignment or a named
    import), named by ``backend = "my.module"`` in a config or by an entry point of
    `BACKEND_GROUP`.
    """

    def build_scenario(self, family: str, *, source: str, seed: int = 0, **params: Any) -> Any:
        """The scenario of `family` with `params`, its images from image source `source`."""
        ...

    def available(self) -> list[str]:
        """Names of the algorithms the backend trains."""
        ...

    def default_hparams(self, name: str) -> dict:
        """Algorithm `name`'s default hyperparameters."""
        ...

    def sample_hparams(self, name: str, seed: int) -> dict:
        """A random draw of algorithm `name`'s hyperparameters (``hparams_mode = "random"``)."""
        ...

    def run_unit(self, scenario: Any, algorithm: str, **kwargs: Any) -> Any:
        """Train one unit: the N leave-one-out models and the model on all given environments.

        The keyword arguments are ``seed``, ``steps``, ``hparams``, ``model``, the config's
        ``[trainer]`` table and its ``unit_options``; the result is shaped like
        `oodeval.training.UnitResult`.
        """
        ...


#: The functions of `TrainerBackend`, in the order a refusal lists them.
BACKEND_FUNCTIONS = tuple(
    name for name, value in vars(TrainerBackend).items() if callable(value) and name[0] != "_"
)


def import_backend(config: StudyConfig) -> TrainerBackend:
    """Import the config's extra modules, then its backend; complain clearly when one is missing.

    A backend module must define every function of `TrainerBackend` (`BACKEND_FUNCTIONS`);
    ``available_models`` is optional (`available_models`).

    Parameters
    ----------
    config : names the ``imports`` and the ``backend`` (a dotted module path).

    Returns
    -------
    TrainerBackend
        The backend module. What cannot be imported, or a missing function, raises one
        `ConfigError` naming each problem.
    """
    backend, problems = _imported(config)
    if problems or backend is None:
        raise ConfigError(problems)
    return backend


def _imported(config: StudyConfig) -> tuple[TrainerBackend | None, list[str]]:
    problems = [p for p in (import_problem(name, "imports") for name in config.imports) if p]
    backend, problem = _loaded_backend(config.backend)
    if problem is not None:
        return None, [*problems, problem]
    return backend, problems


#: The backends of oodeval itself: the real trainer and the synthetic one (milliseconds a unit).
BUILT_IN_BACKENDS = (DEFAULT_BACKEND, "oodeval.study.synthetic")
#: The entry-point group naming installed backends: ``[project.entry-points."oodeval.backends"]
#: mine = "my_package.backend"`` lets a config say ``backend = "mine"``.
BACKEND_GROUP = "oodeval.backends"


def backend_entry_points() -> dict[str, EntryPoint]:
    """{name: entry point} of the installed distributions' `BACKEND_GROUP` entry points."""
    return {point.name: point for point in entry_points(group=BACKEND_GROUP)}


def backend_problems(name: str) -> list[str]:
    """Why `name` cannot be a config's backend, found without importing anything.

    A built-in name or an entry point of `BACKEND_GROUP` is trusted (installed code); a dotted
    module path must be found (`located_spec`) and its Python source must define every function
    of `TrainerBackend` (`_defined_names`).

    >>> backend_problems("oodeval.study.synthetic"), backend_problems("json")[0][:30]
    ([], "backend 'json' lacks ['build_s")
    """
    if name in BUILT_IN_BACKENDS or name in backend_entry_points():
        return []
    spec = located_spec(name)
    if spec is None:
        return [
            f"backend: cannot import module {name!r} (no such module on the Python path); name "
            f"one of {', '.join(BUILT_IN_BACKENDS)}, an {BACKEND_GROUP} entry point or a module"
        ]
    origin = _source_file(spec)
    if origin is None:
        return [f"backend {name!r} is not a Python source module; a backend is a .py module"]
    try:
        tree = ast.parse(origin.read_bytes(), filename=str(origin))
    except (SyntaxError, ValueError, OSError) as exc:
        return [f"backend {name!r}: cannot read {origin} ({type(exc).__name__}: {exc})"]
    defined = set(_defined_names(tree.body))
    missing = [f for f in BACKEND_FUNCTIONS if f not in defined]
    if missing:
        return [_lacks(name, missing)]
    return []


def _source_file(spec: ModuleSpec) -> Path | None:
    """The ``.py`` file of a module's spec (a frozen standard module's too), None without one."""
    where = spec.origin if spec.has_location else getattr(spec.loader_state, "filename", None)
    path = Path(where) if isinstance(where, str) else None
    return path if path is not None and path.suffix == ".py" and path.is_file() else None


def _lacks(name: str, missing: list[str]) -> str:
    return f"backend {name!r} lacks {missing}; a backend module must define " + ", ".join(
        BACKEND_FUNCTIONS
    )


def _defined_names(body: list[ast.stmt]) -> Iterator[str]:
    """The names a module's top-level statements bind (``def``, ``class``, assignments, named
    imports), looking inside ``if``/``try``/``with`` blocks; a star import binds none known."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Import | ast.ImportFrom):
            yield from ((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    yield from _defined_names(block)


def _loaded_backend(name: str) -> tuple[TrainerBackend | None, str | None]:
    """The backend `name` imported (an entry point loaded), once `backend_problems` finds
    nothing against it; else None and the problem."""
    problems = backend_problems(name)
    if problems:
        return None, problems[0]
    point = None if name in BUILT_IN_BACKENDS else backend_entry_points().get(name)
    try:
        backend = importlib.import_module(name) if point is None else point.load()
    except Exception as exc:  # a user's module failing at import time is a config problem
        line = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"backend: cannot import module {name!r} ({type(exc).__name__}: {line})"
    missing = [a for a in BACKEND_FUNCTIONS if not callable(getattr(backend, a, None))]
    if missing:
        return None, _lacks(name, missing)
    return cast(TrainerBackend, backend), None


def available_models(backend: TrainerBackend) -> list[str] | None:
    """The model names the backend trains (its ``available_models()``), or None when it does
    not say: a backend without ``available_models`` gets its ``model`` checked by its own
    ``run_unit`` only."""
    names = getattr(backend, "available_models", None)
    return None if not callable(names) else [str(n) for n in names()]


def resolved_hparams(
    config: StudyConfig, backend: TrainerBackend, algorithm: str, seed: int
) -> dict:
    """The hyperparameters a unit trains with: defaults (or a seeded random draw) plus overrides.

    Overrides must name hyperparameters the algorithm declares and keep their type (an int may
    stand for a float; a bool never stands for a number; a float must be finite).

    Parameters
    ----------
    config : its ``hparams_mode`` and ``hparams`` overrides are applied.
    backend : gives the defaults (``default_hparams``) and random draws (``sample_hparams``),
        for the config's ``model`` where they take it (`model_hparams`).
    algorithm, seed : the unit's algorithm and seed (the seed only matters for a random draw).

    Returns
    -------
    dict
        ``{**base, **overrides}``, base being the defaults or ``sample_hparams(algorithm,
        seed)``; an override of a float default is made a float.
    """
    defaults = dict(model_hparams(backend.default_hparams, config.model)(algorithm))
    overrides = config.hparams.get(algorithm, {})
    problems = _override_problems(algorithm, overrides, defaults)
    if problems:
        raise ConfigError(problems)
    if config.hparams_mode == "random":
        base = dict(model_hparams(backend.sample_hparams, config.model)(algorithm, seed))
    else:
        base = dict(defaults)
    for key, value in overrides.items():
        base[key] = float(value) if isinstance(defaults[key], float) else value
    return base


def model_hparams(function: Callable[..., dict], model: str) -> Callable[..., dict]:
    """The backend's ``default_hparams`` or ``sample_hparams`` `function` for the config's
    `model`: given ``model=model`` when it takes that keyword, else as it is (a backend whose
    hyperparameters do not depend on the model).

    >>> def default_hparams(name, *, model=None):
    ...     return {"lr": 5e-5 if model == "resnet18" else 1e-3}
    >>> model_hparams(default_hparams, "resnet18")("ERM"), model_hparams(len, "resnet18")("ab")
    ({'lr': 5e-05}, 2)
    """
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): called as it is
        return function
    if any(p.name == "model" or p.kind is p.VAR_KEYWORD for p in parameters):
        return functools.partial(function, model=model)
    return function


def _override_problems(algorithm: str, overrides: Mapping[str, Any], defaults: dict) -> list[str]:
    problems = []
    for key, value in overrides.items():
        label = f"hparams.{algorithm}.{key}"
        if key not in defaults:
            problems.append(
                f"{label}: {algorithm} has no hyperparameter {key!r}; it has {sorted(defaults)}"
            )
        elif not _same_kind(defaults[key], value):
            problems.append(
                f"{label} must be {type(defaults[key]).__name__} like its default "
                f"{defaults[key]!r}, got {shown(value)}"
            )
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{label} must be a finite number, got {value}")
    return problems


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


@dataclass(frozen=True)
class BuiltScenario:
    """One scenario of a validated config: its `spec`, the `name` and `given` environment names
    of the scenario it builds, and the scenario's own parameters (`params`, defaults included)."""

    spec: ScenarioSpec
    name: str
    given: tuple[str, ...]
    params: Mapping[str, Any]


@dataclass(frozen=True)
class ValidatedConfig:
    """What `validate_config` found good: the built `scenarios` (`BuiltScenario`, in the config's
    order) and the `hparams` each unit trains with, by (algorithm, seed)."""

    scenarios: tuple[BuiltScenario, ...]
    hparams: Mapping[tuple[str, int], dict]

    def n_given(self) -> list[int]:
        """The number of given environments of each scenario, in order."""
        return [len(s.given) for s in self.scenarios]

    def __getitem__(self, key: str) -> Any:
        """The dict `validate_config` returned before (``["scenarios"]``: (spec, name, given,
        params) tuples; ``["hparams"]``), with a FutureWarning: read the attributes instead."""
        warnings.warn(
            f"validate_config(...)[{key!r}] is deprecated; validate_config returns a "
            f"ValidatedConfig: read .{key}",
            FutureWarning,
            stacklevel=2,
        )
        if key == "scenarios":
            return [(s.spec, s.name, list(s.given), dict(s.params)) for s in self.scenarios]
        if key == "hparams":
            return dict(self.hparams)
        raise KeyError(key)


def validate_config(
    config: StudyConfig, backend: TrainerBackend | None = None, *, device_here: bool = True
) -> ValidatedConfig:
    """Check the whole grid before any training; return the built scenarios and hyperparameters.

    Asks the backend about every algorithm (known?), the model (`available_models`), every
    hyperparameter override (name, type), every scenario (family, parameters, at least two given
    environments, three when a measure needs them: worst+gap, Eq. 6) and raises one
    `ConfigError` listing all problems.

    Returns a `ValidatedConfig`: each scenario built (`BuiltScenario`) and the hyperparameters
    of every (algorithm, seed). With ``device_here=False`` (units train on other machines: a Ray
    cluster, Slurm nodes) the device's spelling is checked but not whether this machine has it;
    the workers check that.

    >>> from oodeval.study.config import config_from_dict
    >>> toy = {"name": "toy", "backend": "oodeval.study.synthetic", "algorithms": ["ERM"],
    ...        "seeds": [0], "steps": 5, "scenarios": ["synthetic"]}
    >>> validated = validate_config(config_from_dict(toy))
    >>> validated.scenarios[0].name, validated.n_given(), validated.hparams[("ERM", 0)].get("lr")
    ('synthetic/ratio=3:1/scale=1', [4], 0.001)
    """
    backend = import_backend(config) if backend is None else backend
    skip = frozenset() if device_here else frozenset({"device"})
    problems, validated = _grid_problems(config, backend, skip=skip)
    if problems:
        raise ConfigError(problems)
    return validated


def grid_problems_of_partial(partial: StudyConfig, bad: set[str]) -> list[str]:
    """The built-in backend's complaints about the good parts of a config that has bad ones.

    `partial` holds a stand-in for every field named in `bad` (`parsed_fields`); the parts that
    depend on a bad field are not checked. No user code runs for a config that is refused: a
    config with ``imports`` (they may register algorithms) or a backend of its own gets its grid
    checked once every other key is good (`validate_config`).
    """
    if bad & {"backend", "imports"} or partial.imports or partial.backend not in BUILT_IN_BACKENDS:
        return []
    backend, problem = _loaded_backend(partial.backend)  # oodeval's own code
    if backend is None:
        return [problem] if problem else []
    if partial.reads_source():
        source = resolve_source(partial.source)
        if source != partial.source:
            partial = dataclasses.replace(partial, source=source)
    skip = {"model"} & bad
    if "source" in bad:
        skip.add("scenarios")
    return _grid_problems(partial, backend, skip=frozenset(skip))[0]


def _grid_problems(
    config: StudyConfig, backend: TrainerBackend, *, skip: frozenset[str] = frozenset()
) -> tuple[list[str], ValidatedConfig]:
    """Every problem the backend finds in `config` (except the `skip` parts: "model",
    "scenarios", "device"), and `validate_config`'s answer for the good parts."""
    problems: list[str] = [] if "device" in skip else _device_problems(config)
    known = list(backend.available())
    unknown = [a for a in config.algorithms if a not in known]
    if unknown:
        problems.append(
            f"unknown algorithm(s) {listing(unknown)}; available: {', '.join(sorted(known))}"
        )
    models = None if "model" in skip else available_models(backend)
    if models is not None and config.model not in models:
        problems.append(f"unknown model {config.model!r}; choose one of {', '.join(models)}")
    clean = [a for a in config.algorithms if a in known]
    for algorithm, overrides in config.hparams.items():
        if algorithm not in config.algorithms:
            problems.append(
                f"[hparams.{algorithm}] names an algorithm the study does not run; "
                f"the study runs {list(config.algorithms)}"
            )
        elif algorithm in known:
            defaults = model_hparams(backend.default_hparams, config.model)(algorithm)
            found = _override_problems(algorithm, overrides, defaults)
            problems += found
            if found:
                clean.remove(algorithm)
    if "model" not in skip:
        problems += pretrained_problems(config, backend)
    hparams = {(a, s): resolved_hparams(config, backend, a, s) for a in clean for s in config.seeds}
    built = () if "scenarios" in skip else _scenario_problems(config, backend, problems)
    return problems, ValidatedConfig(scenarios=built, hparams=hparams)


def pretrained_problems(config: StudyConfig, backend: TrainerBackend | None = None) -> list[str]:
    """What is wrong with the config's ``[trainer] pretrained`` file: gone, changed since its
    ``pretrained_sha256`` was taken (`weights_change`), or (asked of the backend's optional
    ``check_pretrained``) not weights the config's model loads. The file is read once for all
    (`study_weights`: the backend is given the `oodeval._digest.ReadFile`)."""
    path = config.trainer.get("pretrained")
    if path is None or config.pretrained_sha256 is None:
        return []  # no weights, or a file the parser could not read (reported there)
    try:
        weights = study_weights(path, config.pretrained_sha256)
    except OodevalError as exc:
        return [str(exc)]
    check = getattr(backend, "check_pretrained", None)
    if not callable(check):
        return []
    try:
        check(weights, config.model)
    except OodevalError as exc:
        return [f"[trainer] pretrained: {str(exc).splitlines()[0]}"]
    return []


def study_weights(path: str, sha256: str) -> ReadFile:
    """Weights file `path` read once (`oodeval._digest.read_file`), when it still is the one
    whose SHA-256 a study recorded (`sha256`); else an OodevalError saying why (unreadable, or
    other bytes: `weights_change`'s reasons). What it gives is the path, carrying its bytes, for
    the trainer to load without reading the file again."""
    try:
        weights = read_file(path)
    except OSError as exc:
        reason = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror or exc
        raise OodevalError(
            f"pretrained weights {path} cannot be read ({reason}); the study was made with the "
            f"file of SHA-256 {sha256[:16]}...: put it back there"
        ) from None
    if weights.sha256 != sha256:
        raise OodevalError(
            f"pretrained weights {path} changed since the study was made (SHA-256 "
            f"{weights.sha256[:16]}..., the study's {sha256[:16]}...); put the study's file back, "
            "or start a new study"
        )
    return weights


def weights_change(path: str, sha256: str) -> str | None:
    """Why weights file `path` is no longer the one whose SHA-256 a study recorded (`sha256`):
    unreadable, or other bytes (`study_weights`); None when it is the same file.

    >>> weights_change("/no/such/weights.pth", "0" * 64)  # doctest: +ELLIPSIS
    'pretrained weights /no/such/weights.pth cannot be read (no such file); the study was made...'
    """
    try:
        study_weights(path, sha256)
    except OodevalError as exc:
        return str(exc)
    return None


def _device_problems(config: StudyConfig) -> list[str]:
    """Whether this machine has the config's ``[trainer] device`` (`resolve_device`)."""
    from oodeval._torch import device_problem, resolve_device

    device = config.trainer.get("device", "cpu")
    if device == "cpu" or device_problem(device) is not None:
        return []  # the CPU is always there; a misspelling was reported with the table
    try:
        resolve_device(device)
    except OodevalError as exc:
        return [f"[trainer] {exc}"]
    return []


def _scenario_problems(
    config: StudyConfig, backend: TrainerBackend, problems: list[str]
) -> tuple[BuiltScenario, ...]:
    """Build every scenario, adding what is wrong to `problems`; the built ones' descriptions."""
    built = []
    names: set[str] = set()
    for spec in config.scenarios:
        try:
            scenario = build(backend, config, spec)
        except OodevalError as exc:
            problems.append(str(exc))
            continue
        given = list(scenario.given_names)
        needing = undefined_measures(config.measures, len(given))
        if needing:
            least = max(get_measure(m).min_envs for m in needing)
            problems.append(
                f"scenario {scenario.name} has {len(given)} given environments but "
                f"{', '.join(needing)} need{'s' if len(needing) == 1 else ''} at least {least} "
                "(their formulas are undefined for fewer, e.g. Eq. 6 divides by N - 2); add "
                "environments or drop the measure"
            )
        elif len(given) < 2:
            problems.append(
                f"scenario {scenario.name} has {len(given)} given environment(s); "
                "leave-one-environment-out needs at least 2"
            )
        if scenario.name in names:
            problems.append(f"scenario {scenario.name} is listed twice; remove the duplicate")
        names.add(scenario.name)
        params = dict(getattr(scenario, "params", None) or spec.params)
        built.append(BuiltScenario(spec, scenario.name, tuple(given), params))
    return tuple(built)


def build(backend: TrainerBackend, config: StudyConfig, spec: ScenarioSpec) -> Any:
    """Build one scenario through the backend, turning its complaints into one clear line."""
    try:
        scenario = backend.build_scenario(
            spec.family, source=spec.source or config.source, seed=config.data_seed, **spec.params
        )
    except OodevalError as exc:
        raise OodevalError(f"scenario {spec.label()}: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, MemoryError) as exc:
        line = str(exc).splitlines()[0] if str(exc) else ""
        raise OodevalError(
            f"scenario {spec.label()}: {type(exc).__name__}: {line}; check its parameters"
        ) from None
    prefix = f"{spec.dataset}/" if spec.dataset else ""
    if prefix and not scenario.name.startswith(prefix):  # a backend may hand out one object
        # the data's name leads: "PACS-corrupted/corrupted/pattern=1-1-1-1/severity=3"
        params = getattr(scenario, "params", None) or spec.params
        try:
            scenario.name = prefix + scenario.name
            scenario.params = {**params, "dataset": spec.dataset}
        except (AttributeError, TypeError):  # a read-only scenario of a backend of one's own
            raise OodevalError(
                f"scenario {spec.label()}: the backend's scenarios cannot be renamed for "
                "dataset; drop dataset from the scenario"
            ) from None
    return scenario
