"""Study configurations: what to train (scenarios x algorithms x seeds) and how, read from TOML.

A study is the worst+gap paper's experiment (Sections 5-6): every algorithm is trained on every
scenario with every seed; each such *unit* yields leave-one-environment-out errors and the errors of
the model trained on all given environments, from which the analyses compute the measures.

A config file looks like ``examples/study.toml``::

    name = "my-study"
    source = "auto"                 # auto (MNIST: $OODEVAL_MNIST, ../shared, the bundled test set)
    algorithms = ["ERM", "IRM", "GroupDRO"]
    seeds = [0, 1, 2]
    steps = 1000
    model = "mlp"

    [[scenarios]]
    family = "sr-cmnist"
    ratio = "3:1"
    scale = 1

Everything is validated before a study folder is touched, and every problem is reported at once:
`config_from_dict` checks each key's type and range (the ``[trainer]`` keys by the table
`TRAINER_OPTIONS`), `validate_config` asks the backend about algorithms, models, hyperparameters
and scenarios. Several problems raise one `ConfigError` whose one-line message counts them and
shows the first `SHOWN_PROBLEMS`; its ``problems`` attribute holds them all.

The data is named by what it is: a resolved source gets a ``source_identity`` (kind and content
digest, `oodeval.environments.sources.source_identity`) and the ``source`` path is only a hint, so
`differing_keys` and `config_changes` accept the same data at another path and refuse other data
at the same path. `config_changes` says whether a new config only grows a stored study.

``imports`` lists module names or paths of ``.py`` files (relative to the config file, stored
resolved): a file is loaded under its stem by `import_module_or_file`, in the parent and in every
worker, so no ``PYTHONPATH`` is needed; its `code_digest` is kept in ``import_digests``, and
configs compare such an import by file name and digest, not by where it lies.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from oodeval._text import read_text
from oodeval._torch import TF32_MODES
from oodeval.environments.mnist import MNIST_ENV_VAR, resolve_source
from oodeval.errors import SHOWN_ITEMS, OodevalError, listing
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
#: values of ``[trainer] precision``, the default first (the keys of
#: `oodeval.algorithms.networks.PRECISIONS`, named here without importing torch)
PRECISIONS = ("fp32", "bf16")
#: values of ``[trainer] selection`` (`oodeval.training.SELECTIONS`, named here without torch)
SELECTIONS = ("training_domain", "last")
HPARAMS_MODES = ("default", "random")
#: Largest ``steps`` (and ``eval_every``): 10 million updates is weeks of GPU time per unit.
STEPS_LIMIT = 10_000_000
#: Seeds and ``data_seed`` lie in [0, 2**32): what numpy's legacy seeding accepts, well inside
#: torch's and `numpy.random.default_rng`'s ranges.
SEED_LIMIT = 2**32
#: Largest ``[trainer] batch_size`` (rows per environment and step).
BATCH_SIZE_LIMIT = 65_536
#: How many problems a `ConfigError` message shows before "and N more".
SHOWN_PROBLEMS = SHOWN_ITEMS

_TOP_KEYS = {
    "name",
    "backend",
    "imports",
    "import_digests",
    "source",
    "source_identity",
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
_REQUIRED_KEYS = ("scenarios", "algorithms", "seeds", "steps")
_BACKEND_FUNCTIONS = (
    "build_scenario",
    "available",
    "default_hparams",
    "sample_hparams",
    "run_unit",
)
_UNIT_ARGUMENTS = ("seed", "steps", "hparams", "model")


class ConfigError(OodevalError):
    """Every problem of a study config: `problems` lists them all, one line each.

    The message is one line: the problem itself when there is one, else their count and the
    first `SHOWN_PROBLEMS`, numbered.

    >>> str(ConfigError(["steps must be >= 1, got 0", "unknown model 'x'; choose one of mlp"]))
    "2 problems in the study config: (1) steps must be >= 1, got 0; (2) unknown model 'x'; ..."
    """

    def __init__(self, problems: Sequence[str]) -> None:
        lines = [str(p).splitlines()[0] if str(p) else "invalid value" for p in problems]
        self.problems = tuple(dict.fromkeys(lines))  # the same problem once
        super().__init__(_problems_message(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))


def _problems_message(problems: Sequence[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    numbered = (f"({i}) {p}" for i, p in enumerate(problems, start=1))
    shown = listing(numbered, shown=SHOWN_PROBLEMS, sep="; ")
    tail = " (fix these first)" if len(problems) > SHOWN_PROBLEMS else ""
    return f"{len(problems)} problems in the study config: {shown}{tail}"


# -- value rules ------------------------------------------------------------------------------
#: A rule: ``check(value, table)`` is None for a good value, else what is wrong ("must be ...,
#: got ..."); `table` is the table holding the value, for rules that depend on a sibling key.
Check = Callable[[Any, Mapping[str, Any]], "str | None"]


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def integer_in(low: int, high: int) -> Check:
    """A rule accepting integers in [low, high] (never a bool).

    >>> integer_in(1, 10)(0, {})
    'must be >= 1, got 0'
    """

    def check(value: Any, _table: Mapping[str, Any]) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer in [{low:_}, {high:_}], got {_shown(value)}"
        if value < low:
            return f"must be >= {low:_}, got {value}"
        if value > high:
            return f"must be <= {high:_}, got {value}"
        return None

    return check


def one_of(choices: Sequence[str]) -> Check:
    """A rule accepting one of the strings `choices`."""

    def check(value: Any, _table: Mapping[str, Any]) -> str | None:
        if isinstance(value, str) and value in choices:
            return None
        return f"must be one of {', '.join(choices)}, got {_shown(value)}"

    return check


def _holdout_fraction(value: Any, table: Mapping[str, Any]) -> str | None:
    # selection = "last" never validates, so it may train on every row (fraction 0)
    closed = table.get("selection") == "last"
    interval = "[0, 1) with selection = 'last'" if closed else "(0, 1)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number in {interval}, got {_shown(value)}"
    if not (0 <= value < 1 if closed else 0 < value < 1):
        return f"must be in {interval}, got {value}"
    return None


def _same(value: Any) -> Any:
    return value


def _device(value: Any, _table: Mapping[str, Any]) -> str | None:
    # spelling only (no torch): whether this machine has the device is `validate_config`'s check
    from oodeval._torch import device_problem

    if device_problem(value) is None:
        return None
    return f"must be cpu, cuda, cuda:N or auto, got {_shown(value)}"


def _device_kind(value: Any) -> Any:
    """cpu and cuda units differ; cuda:0 and cuda:1 compare (the same kernels)."""
    from oodeval._torch import device_kind, device_problem

    return device_kind(value) if device_problem(value) is None else value


_NO_DEFAULT = object()


@dataclass(frozen=True)
class TrainerOption:
    """One ``[trainer]`` key: its rule, its default and what must stay equal for units to compare.

    `default` is the value ``run_unit`` uses when the key is absent; naming it is the same study,
    so it is never stored (only keys with a default here are normalised that way). `compared`
    maps a value to what must agree between a stored study and a config growing it: a device
    option would compare ``lambda d: d.partition(":")[0]`` (its kind: cuda:0 and cuda:1 agree).
    Adding a trainer key is one entry of `TRAINER_OPTIONS`.
    """

    check: Check
    default: Any = _NO_DEFAULT
    compared: Callable[[Any], Any] = _same


TRAINER_OPTIONS: dict[str, TrainerOption] = {
    "selection": TrainerOption(one_of(SELECTIONS)),
    "eval_every": TrainerOption(integer_in(1, STEPS_LIMIT)),
    "holdout_fraction": TrainerOption(_holdout_fraction),
    "batch_size": TrainerOption(integer_in(1, BATCH_SIZE_LIMIT)),
    "precision": TrainerOption(one_of(PRECISIONS), default=PRECISIONS[0]),
    "device": TrainerOption(_device, default="cpu", compared=_device_kind),
    "tf32": TrainerOption(one_of(TF32_MODES), default=TF32_MODES[0]),
}
TRAINER_KEYS = tuple(TRAINER_OPTIONS)


@dataclass(frozen=True)
class ScenarioSpec:
    """One scenario of a study: a family name and its parameters, as `build_scenario` takes them."""

    family: str
    params: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        """A readable fallback name (the built scenario's own `name` is what the store records)."""
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.family}[{inner}]" if inner else self.family

    def to_dict(self) -> dict[str, Any]:
        """The stored form: ``{"family": ..., **params}``."""
        return {"family": self.family, **self.params}


@dataclass(frozen=True)
class StudyConfig:
    """A validated study configuration (see the module docstring for the TOML form).

    Attributes
    ----------
    name : a label for the study.
    backend : dotted module path providing ``build_scenario``, ``available``, ``default_hparams``,
        ``sample_hparams`` and ``run_unit`` (default: the real trainer, `DEFAULT_BACKEND`), and
        optionally ``available_models`` (without it, ``model`` is not checked up front).
    imports : extra modules imported in the parent and in every worker before anything else, e.g.
        a module that registers your own algorithm with ``oodeval.algorithms.register_algorithm``:
        module names, or paths of ``.py`` files (`import_module_or_file`), stored absolute.
    import_digests : {path: `code_digest`} of each ``.py`` file of ``imports``, computed when the
        config is built unless given (a stored config carries them).
    source : image source spec: ``auto`` (the default: real MNIST, resolved by
        `resolve_source` when the study runs), ``digits``, ``mnist:DIR``, .... Once resolved,
        the path is a hint: the data is identified by `source_identity`.
    source_identity : ``{"kind", "digest"}`` of the resolved source's content
        (`oodeval.environments.sources.source_identity`), computed when the config is built
        unless given (a stored config carries it); None while the source is ``auto``.
    data_seed : seed of the scenario data (colors, label noise, image split); fixed per study.
    scenarios, algorithms, seeds : the grid; a unit is one (scenario, algorithm, seed).
    steps, model : training length and model family for every unit.
    hparams_mode : ``default`` (the algorithm's defaults) or ``random`` (``sample_hparams(name,
        seed)``); ``hparams`` then overrides single values per algorithm.
    hparams : ``{algorithm: {name: value}}``, overrides of single hyperparameters (the
        ``[hparams.ALGORITHM]`` tables), checked against the algorithm's own.
    trainer : extra keyword arguments of ``run_unit`` (selection, eval_every, holdout_fraction,
        batch_size, precision: ``"fp32"`` or ``"bf16"``, device: ``"cpu"``, ``"cuda"``,
        ``"cuda:N"`` or ``"auto"``, tf32: ``"default"`` or ``"off"``; rules in
        `TRAINER_OPTIONS`).
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
    source: str = "auto"
    source_identity: dict[str, str] | None = None
    data_seed: int = 0
    backend: str = DEFAULT_BACKEND
    imports: tuple[str, ...] = ()
    import_digests: dict[str, str] = field(default_factory=dict)
    hparams_mode: str = "default"
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    measures: tuple[str, ...] = DEFAULT_MEASURES
    unit_options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; `config_from_dict(cfg.to_dict()) == cfg`."""
        out = asdict(self)
        out["scenarios"] = [s.to_dict() for s in self.scenarios]
        for key in ("algorithms", "seeds", "imports", "measures"):
            out[key] = list(out[key])
        return out

    def to_json(self) -> str:
        """Canonical JSON (sorted keys) of the config; what the store keeps and compares."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def replace(self, **changes: Any) -> StudyConfig:
        """A copy with some fields changed, re-validated; a new source gets its own identity."""
        data = self.to_dict()
        if "source" in changes and changes["source"] != self.source:
            data.pop("source_identity")
        data.update(changes)
        return config_from_dict(data)


def data_note(config: StudyConfig | Mapping[str, Any]) -> str | None:
    """What every output of a study's numbers says about its data, or None.

    A study trained on MNIST's test set alone (the bundled copy, or the same two files
    anywhere: `oodeval.environments.mnist.is_test_set_only` on its ``source_identity``) drew
    from 1/7 of the 70,000 images DomainBed's ColoredMNIST uses; `study run`, `study status`,
    `study analyze` and the study report say so with this sentence.

    >>> data_note({"source": "digits", "source_identity": {"kind": "digits", "digest": "x"}})
    """
    from oodeval.environments.mnist import ALL_IMAGES, TEST_SET_IMAGES, is_test_set_only

    data = config.to_dict() if isinstance(config, StudyConfig) else config
    if not is_test_set_only(data.get("source_identity")):
        return None
    return (
        f"the data is MNIST's test set alone ({TEST_SET_IMAGES:,} images), "
        f"1/{ALL_IMAGES // TEST_SET_IMAGES} of the {ALL_IMAGES:,} (train + test) that "
        f"DomainBed's ColoredMNIST draws from; for all {ALL_IMAGES:,}, set {MNIST_ENV_VAR} to a "
        "folder holding MNIST's four IDX files (docs/howto/data.md)"
    )


def load_config(path: str | Path) -> StudyConfig:
    """Read a TOML study config and check every key (`config_from_dict`)."""
    path = Path(path)
    if not path.exists():
        raise OodevalError(f"study config {path} not found; pass a TOML file or --preset NAME")
    text = read_text(path, what="study config", save_as="UTF-8 TOML")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise OodevalError(f"study config {path} is not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    problems = []
    for key, what in (("source_identity", "the data"), ("import_digests", "the imported files")):
        if key in data:
            problems.append(f"{key} is computed from {what}, not written in a config; remove it")
            del data[key]
    imports = data.get("imports")
    if isinstance(imports, list):  # a .py file is named relative to the config file
        data["imports"] = [resolved_import(i, path.parent) for i in imports]
    return _checked_config(data, problems)


def config_from_dict(data: Mapping[str, Any]) -> StudyConfig:
    """Build a StudyConfig from plain data (parsed TOML or stored JSON), checking every key.

    Checks every key's type and range and, for a concrete source, computes its identity (and the
    digest of every ``.py`` file of ``imports``, a relative path being relative to the working
    directory, unless ``import_digests`` gives it). When
    anything is wrong, the backend is asked about the rest too (`validate_config`'s checks) and
    one `ConfigError` lists every problem found.
    """
    return _checked_config(data, [])


def _checked_config(data: Any, problems: list[str]) -> StudyConfig:
    if not isinstance(data, Mapping):
        raise ConfigError(["a study config must be a table of keys"])
    values, bad = _parsed(data, problems)
    if problems:
        problems += _grid_problems_of_partial(values, bad)
        raise ConfigError(problems)
    return StudyConfig(**values)


def _parsed(data: Mapping[str, Any], problems: list[str]) -> tuple[dict[str, Any], set[str]]:
    """Every field of a StudyConfig from `data`, with a stand-in for each bad value; and the
    names of the fields that were bad."""
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        allowed = sorted(_TOP_KEYS - {"source_identity"})
        problems.append(
            f"unknown study config key(s) {listing(map(repr, unknown))}; allowed keys are "
            f"{', '.join(allowed)}"
        )
    for key in _REQUIRED_KEYS:
        if key not in data:
            problems.append(f"study config is missing {key!r}; see examples/study.toml")
    bad: set[str] = set()

    def checked(key: str, value: Any, problem: str | None, stand_in: Any) -> Any:
        if problem is None:
            return value
        problems.append(problem)
        bad.add(key)
        return stand_in

    values: dict[str, Any] = {}
    for key, default in (("name", "study"), ("model", "mlp"), ("backend", DEFAULT_BACKEND)):
        value = data.get(key, default)
        values[key] = checked(key, value, _nonempty(key, value), default)
    steps = data.get("steps", 1)
    values["steps"] = checked("steps", steps, _ruled("steps", integer_in(1, STEPS_LIMIT), steps), 1)
    data_seed = data.get("data_seed", 0)
    rule = integer_in(0, SEED_LIMIT - 1)
    values["data_seed"] = checked("data_seed", data_seed, _ruled("data_seed", rule, data_seed), 0)
    mode = data.get("hparams_mode", "default")
    problem = _ruled("hparams_mode", one_of(HPARAMS_MODES), mode)
    values["hparams_mode"] = checked("hparams_mode", mode, problem, "default")
    # a missing required list is reported once, above, not again as empty
    values["scenarios"] = (
        _scenarios(data.get("scenarios", ()), problems) if "scenarios" in data else ()
    )
    values["algorithms"] = _names(data, "algorithms", (), problems) if "algorithms" in data else ()
    values["imports"] = _names(data, "imports", (), problems, may_be_empty=True)
    values["imports"] = tuple(resolved_import(i, Path.cwd()) for i in values["imports"])
    count = len(problems)
    values["import_digests"] = _import_digests(values["imports"], data, problems)
    if len(problems) > count:
        bad.add("imports")
    values["measures"] = _names(data, "measures", DEFAULT_MEASURES, problems)
    unknown_measures = sorted(set(values["measures"]) - set(KNOWN_MEASURES))
    if unknown_measures:
        problems.append(
            f"unknown measure(s) {listing(map(repr, unknown_measures))}; choose from "
            f"{', '.join(KNOWN_MEASURES)}"
        )
    values["seeds"] = _seeds(data["seeds"], problems) if "seeds" in data else ()
    values["hparams"] = _hparams_table(data.get("hparams", {}), problems)
    values["trainer"] = _trainer_table(data.get("trainer", {}), problems)
    values["unit_options"] = _unit_options(data.get("unit_options", {}), problems)
    count = len(problems)
    values["source"], values["source_identity"] = _source(data, problems)
    if len(problems) > count:
        bad.add("source")
    return values, bad


def _ruled(
    label: str, rule: Check, value: Any, table: Mapping[str, Any] | None = None
) -> str | None:
    problem = rule(value, table or {})
    return None if problem is None else f"{label} {problem}"


def _nonempty(label: str, value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return None
    return f"{label} must be a non-empty string, got {_shown(value)}"


def _sequence(value: Any, label: str, problems: list[str]) -> list | None:
    if isinstance(value, str) or not isinstance(value, Sequence):
        problems.append(f"{label} must be a list, got {_shown(value)}")
        return None
    return list(value)


def _distinct(
    values: Sequence[Any], label: str, problems: list[str], *, may_be_empty: bool
) -> None:
    if not values and not may_be_empty:
        problems.append(f"study config {label!r} is empty; list at least one")
    seen: set[str] = set()
    for value in values:
        if repr(value) in seen:
            problems.append(
                f"study config {label!r} lists a value twice ({value!r}); remove the duplicate"
            )
        seen.add(repr(value))


def _names(
    data: Mapping[str, Any],
    key: str,
    default: Sequence[str],
    problems: list[str],
    *,
    may_be_empty: bool = False,
) -> tuple[str, ...]:
    items = _sequence(data.get(key, default), key, problems)
    if items is None:
        return ()
    good = []
    for i, item in enumerate(items):
        problem = _nonempty(f"{key}[{i}]", item)
        if problem is None:
            good.append(item)
        else:
            problems.append(problem)
    _distinct(good, key, problems, may_be_empty=may_be_empty or len(good) < len(items))
    return tuple(good)


def _seeds(value: Any, problems: list[str]) -> tuple[int, ...]:
    items = _sequence(value, "seeds", problems)
    if items is None:
        return ()
    rule = integer_in(0, SEED_LIMIT - 1)
    good = []
    for i, item in enumerate(items):
        problem = _ruled(f"seeds[{i}]", rule, item)
        if problem is None:
            good.append(item)
        else:
            problems.append(problem)
    _distinct(good, "seeds", problems, may_be_empty=len(good) < len(items))
    return tuple(good)


def _scenarios(value: Any, problems: list[str]) -> tuple[ScenarioSpec, ...]:
    items = _sequence(value, "scenarios", problems)
    if items is None:
        return ()
    specs = []
    for index, item in enumerate(items):
        if isinstance(item, str) and item:
            specs.append(ScenarioSpec(item, {}))
        elif isinstance(item, Mapping) and _nonempty("family", item.get("family")) is None:
            params = {str(k): copy.deepcopy(v) for k, v in item.items() if k != "family"}
            specs.append(ScenarioSpec(item["family"], params))
        else:
            problems.append(
                f"scenarios[{index}] must be a table with a 'family' string, e.g. "
                f'{{ family = "sr-cmnist", ratio = "3:1", scale = 1 }}, got {_shown(item)}'
            )
    _distinct(specs, "scenarios", problems, may_be_empty=len(specs) < len(items))
    return tuple(specs)


def _hparams_table(value: Any, problems: list[str]) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        problems.append(
            f"hparams must be a table of tables, e.g. [hparams.IRM], got {_shown(value)}"
        )
        return {}
    out = {}
    for algorithm, overrides in value.items():
        if isinstance(overrides, Mapping):
            out[str(algorithm)] = copy.deepcopy(dict(overrides))
        else:
            problems.append(
                f"hparams.{algorithm} must be a table, e.g. [hparams.{algorithm}] lr = 0.001, "
                f"got {_shown(overrides)}"
            )
    return out


def _trainer_table(value: Any, problems: list[str]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        problems.append(f"[trainer] must be a table, got {_shown(value)}")
        return {}
    unknown = sorted(set(value) - set(TRAINER_OPTIONS))
    if unknown:
        problems.append(
            f"unknown [trainer] key(s) {listing(map(repr, unknown))}; allowed: "
            f"{', '.join(TRAINER_OPTIONS)}"
        )
    out = {}
    for key, option in TRAINER_OPTIONS.items():
        if key not in value:
            continue
        problem = _ruled(f"[trainer] {key}", option.check, value[key], value)
        if problem is not None:
            problems.append(problem)
        elif option.default is _NO_DEFAULT or value[key] != option.default:
            out[key] = value[key]  # the default is never stored: naming it is the same study
    return out


def _unit_options(value: Any, problems: list[str]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        problems.append(f"unit_options must be a table, got {_shown(value)}")
        return {}
    for key in value:
        if key in _UNIT_ARGUMENTS:
            problems.append(f"unit_options.{key} is set by the study itself; remove it")
        elif key in TRAINER_OPTIONS:
            problems.append(f"unit_options.{key} is a trainer setting; move it to [trainer]")
    return copy.deepcopy(dict(value))


def is_path_import(entry: str) -> bool:
    """True when an ``imports`` entry names a ``.py`` file rather than a module.

    >>> is_path_import("my_algorithm.py"), is_path_import("my_package.algorithms")
    (True, False)
    """
    return entry.endswith(".py")


def resolved_import(entry: Any, base: Path) -> Any:
    """An ``imports`` entry with a ``.py`` path made absolute (relative to `base`); anything
    else unchanged (a module name, or a bad value for `_names` to report)."""
    if not isinstance(entry, str) or not is_path_import(entry):
        return entry
    path = Path(entry).expanduser()
    return str((path if path.is_absolute() else base / path).resolve())


def code_digest(path: str | Path) -> str:
    """SHA-256 (first 16 hex digits) of Python code: a file's bytes, or for a folder every
    ``*.py`` below it (relative path and bytes, in sorted order)."""
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_dir():
        for file in sorted(path.rglob("*.py")):
            digest.update(file.relative_to(path).as_posix().encode())
            digest.update(file.read_bytes())
    else:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _import_digests(
    imports: Sequence[str], data: Mapping[str, Any], problems: list[str]
) -> dict[str, str]:
    """{path: code_digest} of the ``.py`` files of `imports`: given by `data` (a stored config),
    else read from the files."""
    given = data.get("import_digests") or {}
    if not isinstance(given, Mapping):
        problems.append(f"import_digests must be a table, got {_shown(given)}")
        given = {}
    out = {}
    for entry in imports:
        if not is_path_import(entry):
            continue
        if isinstance(given.get(entry), str):
            out[entry] = given[entry]
        elif Path(entry).is_file():
            out[entry] = code_digest(entry)
        else:
            problems.append(
                f"imports: file {entry} not found; a .py path is relative to the config file"
            )
    return out


#: Prefix of the keys of a unit's ``versions`` holding the code digest of each of ``imports``
#: (``"import:my_algorithm"``; `oodeval.study.worker.import_versions`).
IMPORT_VERSION_PREFIX = "import:"
#: {path: digest} of the files `import_module_or_file` executed in this process
_LOADED_FILES: dict[Path, str] = {}


def import_module_or_file(entry: str) -> ModuleType:
    """Import an ``imports`` entry: a module by name, or a ``.py`` file as the module named by
    its stem (`importlib.util.spec_from_file_location`), executed again when the file changed.

    A file whose stem names another module already imported is refused (it would shadow it).
    """
    if not is_path_import(entry):
        return importlib.import_module(entry)
    path = Path(entry)
    if not path.is_file():
        raise ImportError(f"file {entry} not found")
    name, digest = path.stem, code_digest(path)
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        mine = where is not None and Path(where) in _LOADED_FILES  # a file loaded here before
        if not mine and (where is None or Path(where).resolve() != path.resolve()):
            raise ImportError(
                f"{path.name} would be imported as {name!r}, the name of the module {where or ''}"
                " already imported; rename the file"
            )
        if Path(where) == path and _LOADED_FILES.get(path) == digest:
            return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{entry} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _LOADED_FILES[path] = digest
    return module


def _source(data: Mapping[str, Any], problems: list[str]) -> tuple[str, dict[str, str] | None]:
    """The source spec and its identity: the one `data` carries, else computed from the data."""
    source = data.get("source", "auto")
    problem = _nonempty("source", source)
    if problem is not None:
        problems.append(problem)
        return "digits", None
    given = data.get("source_identity")
    if given is not None:
        if not (
            isinstance(given, Mapping)
            and set(given) == {"kind", "digest"}
            and all(isinstance(v, str) and v for v in given.values())
        ):
            problems.append(
                f"source_identity must be {{kind, digest}} strings, got {_shown(given)}"
            )
            return source, None
        if given["kind"] != source.partition(":")[0].strip().lower():
            problems.append(
                f"source_identity names a {given['kind']!r} source but source is {source!r}"
            )
        return source, dict(given)
    if source == "auto":
        return source, None
    from oodeval.environments.sources import source_identity

    try:
        return source, source_identity(source).as_dict()
    except OodevalError as exc:
        problems.append(str(exc))
        return source, None


# -- the backend's part -------------------------------------------------------------------------
def import_backend(config: StudyConfig) -> ModuleType:
    """Import the config's extra modules, then its backend; complain clearly when one is missing.

    A backend module must define ``build_scenario``, ``available``, ``default_hparams``,
    ``sample_hparams`` and ``run_unit``; ``available_models`` is optional (`available_models`).
    """
    backend, problems = _imported(config)
    if problems or backend is None:
        raise ConfigError(problems)
    return backend


def _imported(config: StudyConfig) -> tuple[ModuleType | None, list[str]]:
    problems = []
    for name in config.imports:
        problem = _import_problem(name, "imports")
        if problem:
            problems.append(problem)
    problem = _import_problem(config.backend, "backend")
    if problem:
        return None, [*problems, problem]
    backend = importlib.import_module(config.backend)
    missing = [a for a in _BACKEND_FUNCTIONS if not callable(getattr(backend, a, None))]
    if missing:
        problems.append(
            f"backend {config.backend!r} lacks {missing}; a backend module must define "
            + ", ".join(_BACKEND_FUNCTIONS)
        )
        return None, problems
    return backend, problems


def _import_problem(name: str, key: str) -> str | None:
    try:
        import_module_or_file(name)
    except ImportError as exc:
        return f"{key}: cannot import module {name!r} ({exc})"
    except Exception as exc:  # a user's module failing at import time is a config problem too
        line = str(exc).splitlines()[0] if str(exc) else ""
        return f"{key}: cannot import module {name!r} ({type(exc).__name__}: {line})"
    return None


def available_models(backend: ModuleType) -> list[str] | None:
    """The model names the backend trains (its ``available_models()``), or None when it does
    not say: a backend without ``available_models`` gets its ``model`` checked by its own
    ``run_unit`` only."""
    names = getattr(backend, "available_models", None)
    return None if not callable(names) else [str(n) for n in names()]


def resolved_hparams(config: StudyConfig, backend: ModuleType, algorithm: str, seed: int) -> dict:
    """The hyperparameters a unit trains with: defaults (or a seeded random draw) plus overrides.

    Overrides must name hyperparameters the algorithm declares and keep their type (an int may
    stand for a float; a bool never stands for a number; a float must be finite).
    """
    defaults = dict(backend.default_hparams(algorithm))
    overrides = config.hparams.get(algorithm, {})
    problems = _override_problems(algorithm, overrides, defaults)
    if problems:
        raise ConfigError(problems)
    if config.hparams_mode == "random":
        base = dict(backend.sample_hparams(algorithm, seed))
    else:
        base = dict(defaults)
    for key, value in overrides.items():
        base[key] = float(value) if isinstance(defaults[key], float) else value
    return base


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
                f"{defaults[key]!r}, got {_shown(value)}"
            )
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{label} must be a finite number, got {value}")
    return problems


def validate_config(
    config: StudyConfig, backend: ModuleType | None = None, *, device_here: bool = True
) -> dict[str, Any]:
    """Check the whole grid before any training; return the built scenario names per spec.

    Asks the backend about every algorithm (known?), the model (`available_models`), every
    hyperparameter override (name, type), every scenario (family, parameters, at least two given
    environments, three when a measure needs them: worst+gap, Eq. 6) and raises one
    `ConfigError` listing all problems.

    Returns a dict with ``"scenarios"``: a list of (spec, scenario name, given names, the
    scenario's own parameters) and
    ``"hparams"``: {(algorithm, seed): hparams}. With ``device_here=False`` (units train on
    other machines: a Ray cluster, Slurm nodes) the device's spelling is checked but not whether
    this machine has it; the workers check that.
    """
    backend = import_backend(config) if backend is None else backend
    skip = frozenset() if device_here else frozenset({"device"})
    problems, validated = _grid_problems(config, backend, skip=skip)
    if problems:
        raise ConfigError(problems)
    return validated


def _grid_problems_of_partial(values: dict[str, Any], bad: set[str]) -> list[str]:
    """The backend's complaints about the good parts of a config that has bad ones."""
    partial = StudyConfig(**values)
    if "backend" in bad or "imports" in bad:  # a missing import may register an algorithm
        return []
    backend, problems = _imported(partial)
    if backend is None or problems:
        return problems  # a missing import may be what registers an algorithm
    source = resolve_source(partial.source)
    if source != partial.source:
        partial = StudyConfig(**{**values, "source": source})
    skip = {"model"} & bad
    if "source" in bad:
        skip.add("scenarios")
    return _grid_problems(partial, backend, skip=frozenset(skip))[0]


def _grid_problems(
    config: StudyConfig, backend: ModuleType, *, skip: frozenset[str] = frozenset()
) -> tuple[list[str], dict[str, Any]]:
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
            found = _override_problems(algorithm, overrides, backend.default_hparams(algorithm))
            problems += found
            if found:
                clean.remove(algorithm)
    hparams = {(a, s): resolved_hparams(config, backend, a, s) for a in clean for s in config.seeds}
    built = [] if "scenarios" in skip else _scenario_problems(config, backend, problems)
    return problems, {"scenarios": built, "hparams": hparams}


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


def _scenario_problems(config: StudyConfig, backend: ModuleType, problems: list[str]) -> list:
    """Build every scenario, adding what is wrong to `problems`; the built ones' descriptions."""
    built = []
    names: set[str] = set()
    needing = [m for m in config.measures if m in NEEDS_THREE_ENVS]
    for spec in config.scenarios:
        try:
            scenario = build(backend, config, spec)
        except OodevalError as exc:
            problems.append(str(exc))
            continue
        given = list(scenario.given_names)
        if needing and len(given) < 3:
            problems.append(
                f"scenario {scenario.name} has {len(given)} given environments but "
                f"{', '.join(needing)} need{'s' if len(needing) == 1 else ''} at least 3 "
                "(Eq. 6 divides by N - 2); add "
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
        built.append((spec, scenario.name, given, params))
    return built


def build(backend: ModuleType, config: StudyConfig, spec: ScenarioSpec) -> Any:
    """Build one scenario through the backend, turning its complaints into one clear line."""
    try:
        return backend.build_scenario(
            spec.family, source=config.source, seed=config.data_seed, **spec.params
        )
    except OodevalError as exc:
        raise OodevalError(f"scenario {spec.label()}: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, MemoryError) as exc:
        line = str(exc).splitlines()[0] if str(exc) else ""
        raise OodevalError(
            f"scenario {spec.label()}: {type(exc).__name__}: {line}; check its parameters"
        ) from None


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


# -- growing a study --------------------------------------------------------------------------
#: Keys only analyses and reports read: changing them keeps every stored unit comparable.
_LABEL_KEYS = ("name", "measures")
#: The axes a study grows along (or shrinks: a removed value's units stay in the store).
_GROWING_KEYS = ("algorithms", "seeds", "scenarios", "imports")


def scenario_key(spec: ScenarioSpec | Mapping[str, Any]) -> str:
    """The canonical JSON of a scenario spec (family and parameters), to match specs by.

    >>> scenario_key({"scale": 1, "family": "sr-cmnist", "ratio": "3:1"})
    '{"family": "sr-cmnist", "ratio": "3:1", "scale": 1}'
    """
    data = spec.to_dict() if isinstance(spec, ScenarioSpec) else dict(spec)
    return json.dumps(data, sort_keys=True)


def _plain(config: StudyConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A config as stored JSON gives it back, absent keys at their StudyConfig default."""
    data = config.to_dict() if isinstance(config, StudyConfig) else dict(config)
    defaults = StudyConfig(name="", scenarios=(), algorithms=(), seeds=(), steps=1).to_dict()
    return json.loads(json.dumps({**defaults, **stored_meaning(data)}, sort_keys=True))


def stored_meaning(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config with the keys it omitted at the default of the time it was written: a
    config without ``source`` predates ``"auto"`` as the default and meant the digits.

    >>> stored_meaning({"name": "old"})["source"], stored_meaning({"source": "auto"})["source"]
    ('digits', 'auto')
    """
    return {"source": "digits", **config}


def _by_identity(stored: dict[str, Any], new: dict[str, Any]) -> None:
    """Compare the source by what it is when both configs know it (by path for older stores),
    and a ``.py`` import by its file name and digest (``my_algorithm.py@<digest>``)."""
    mine, theirs = stored.pop("source_identity", None), new.pop("source_identity", None)
    if mine and theirs:
        stored["source"], new["source"] = mine, theirs
    for config in (stored, new):
        digests = config.pop("import_digests", None)
        digests = digests if isinstance(digests, dict) else {}
        config["imports"] = [
            f"{Path(i).name}@{digests[i]}" if isinstance(i, str) and i in digests else i
            for i in config.get("imports") or ()
        ]


def differing_keys(
    stored: StudyConfig | Mapping[str, Any], new: StudyConfig | Mapping[str, Any]
) -> list[str]:
    """The top-level keys in which two configs differ, the source compared by identity.

    The same data at another path (a moved study, another checkout) differs in nothing; other
    data at the same path differs in ``source``. A stored config without an identity (written
    before identities existed) is compared by its source path.
    """
    a, b = _plain(stored), _plain(new)
    _by_identity(a, b)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


@dataclass(frozen=True)
class ConfigChanges:
    """How a new config differs from the one a study was stored with (`config_changes`).

    ``added_*`` / ``removed_*`` list the values of each growing axis that only the new / only
    the stored config has (scenarios as their stored dicts); ``incompatible`` lists (key, stored
    value, new value) for every change that would make stored units incomparable with new ones.
    """

    added_algorithms: tuple[str, ...] = ()
    added_seeds: tuple[int, ...] = ()
    added_scenarios: tuple[dict[str, Any], ...] = ()
    added_imports: tuple[str, ...] = ()
    removed_algorithms: tuple[str, ...] = ()
    removed_seeds: tuple[int, ...] = ()
    removed_scenarios: tuple[dict[str, Any], ...] = ()
    removed_imports: tuple[str, ...] = ()
    incompatible: tuple[tuple[str, Any, Any], ...] = ()

    @property
    def compatible(self) -> bool:
        """True when every stored unit stays comparable with the new config's units."""
        return not self.incompatible

    @property
    def grows(self) -> bool:
        """True when the new config adds an algorithm, seed, scenario or import."""
        return bool(
            self.added_algorithms or self.added_seeds or self.added_scenarios or self.added_imports
        )

    def describe(self) -> str:
        """What changed along the growing axes, in one line ('' when nothing did).

        >>> ConfigChanges(added_algorithms=("VREx",), removed_seeds=(2,)).describe()
        'added algorithm VREx; removed seed 2'
        """
        parts = []
        for verb in ("added", "removed"):
            for axis in ("algorithms", "seeds", "scenarios", "imports"):
                values = getattr(self, f"{verb}_{axis}")
                if values:
                    shown = ", ".join(_axis_label(v) for v in values)
                    parts.append(f"{verb} {axis[:-1] if len(values) == 1 else axis} {shown}")
        return "; ".join(parts)

    def refusal(self, directory: str | Path) -> str:
        """The one-line error for an incompatible config: the differing keys and the way out."""
        parts = [f"{k} ({_brief(old)} -> {_brief(new)})" for k, old, new in self.incompatible]
        listed = listing(parts, shown=SHOWN_PROBLEMS)
        digits = any(
            k == "source" and isinstance(old, Mapping) and old.get("kind") == "digits"
            for k, old, _ in self.incompatible
        )
        hint = (
            ' (the stored study is on the 8x8 digits: a config without `source` now means "auto",'
            ' real MNIST; write source = "digits" to resume it)'
            if digits
            else ""
        )
        return (
            f"{directory} holds a study whose units would not compare with this config's: "
            f"{listed}{hint}; a stored study grows only by new algorithms, seeds, scenarios or "
            "imports: keep these values, or use a new --out folder"
        )


def _axis_label(value: Any) -> str:
    """A value of a growing axis as shown: a scenario spec by `ScenarioSpec.label`."""
    if isinstance(value, Mapping) and "family" in value:
        return ScenarioSpec(
            value["family"], {k: v for k, v in value.items() if k != "family"}
        ).label()
    return str(value)


def _brief(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


def config_changes(
    stored: StudyConfig | Mapping[str, Any],
    new: StudyConfig | Mapping[str, Any],
    *,
    scenario_names: Mapping[str, str] | None = None,
) -> ConfigChanges:
    """Compare the config a study was stored with and a new one meant to grow it.

    Compatible: adding (or removing) algorithms, seeds, scenarios and imports; changing ``name``
    or ``measures`` (only analyses read them); the source at another path with the same
    identity. Incompatible (listed as (key, stored, new)): ``steps``, ``model``, ``backend``,
    ``data_seed``, the source's identity, ``unit_options``, any ``[trainer]`` option (by its
    `TrainerOption.compared` value, absent = its default), the ``hparams`` of an algorithm both
    configs run and ``hparams_mode`` when both run an algorithm, a scenario whose parameters
    changed, and any key this function does not know.

    A scenario is matched by its spec (`scenario_key`); `scenario_names` ({scenario_key: built
    scenario name}, for the added and removed specs) tells a re-parametrised scenario (same name,
    other parameters: its stored units would be reused for other data) from a new one. Without
    it such a change shows as one removed and one added scenario.

    >>> old = {"algorithms": ["ERM"], "seeds": [0], "steps": 5, "scenarios": ["a"]}
    >>> changes = config_changes(old, {**old, "algorithms": ["ERM", "IRM"], "steps": 6})
    >>> changes.added_algorithms, changes.incompatible
    (('IRM',), (('steps', 5, 6),))
    """
    a, b = _plain(stored), _plain(new)
    _by_identity(a, b)
    kept = [x for x in b["algorithms"] if x in a["algorithms"]]
    incompatible: list[tuple[str, Any, Any]] = []
    for key in sorted(a.keys() | b.keys()):
        old, now = a.get(key), b.get(key)
        if key in _LABEL_KEYS or key in _GROWING_KEYS or old == now:
            continue
        if key == "trainer":
            incompatible += _trainer_changes(old or {}, now or {})
        elif key == "hparams":
            incompatible += [
                (f"hparams.{x}", (old or {}).get(x, {}), (now or {}).get(x, {}))
                for x in kept
                if (old or {}).get(x, {}) != (now or {}).get(x, {})
            ]
        elif key != "hparams_mode" or kept:
            incompatible.append((key, old, now))
    grown = {k: _added_removed(a[k], b[k]) for k in ("algorithms", "seeds", "imports")}
    added, removed = _added_removed(
        [_spec_dict(s) for s in a["scenarios"]], [_spec_dict(s) for s in b["scenarios"]]
    )
    if scenario_names:
        named = {scenario_names.get(scenario_key(s)): s for s in removed}
        for spec in list(added):
            old_spec = named.get(scenario_names.get(scenario_key(spec)))
            if old_spec is not None:
                name = scenario_names[scenario_key(spec)]
                incompatible.append((f"scenarios[{name}]", old_spec, spec))
                added.remove(spec)
                removed.remove(old_spec)
    return ConfigChanges(
        added_algorithms=tuple(grown["algorithms"][0]),
        added_seeds=tuple(grown["seeds"][0]),
        added_scenarios=tuple(added),
        added_imports=tuple(grown["imports"][0]),
        removed_algorithms=tuple(grown["algorithms"][1]),
        removed_seeds=tuple(grown["seeds"][1]),
        removed_scenarios=tuple(removed),
        removed_imports=tuple(grown["imports"][1]),
        incompatible=tuple(incompatible),
    )


def _spec_dict(spec: Any) -> dict[str, Any]:
    return {"family": spec} if isinstance(spec, str) else dict(spec)


def _added_removed(old: Sequence[Any], new: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """The values only `new` has and those only `old` has, each in its list's order."""
    old_keys = {json.dumps(v, sort_keys=True) for v in old}
    new_keys = {json.dumps(v, sort_keys=True) for v in new}
    added = [v for v in new if json.dumps(v, sort_keys=True) not in old_keys]
    removed = [v for v in old if json.dumps(v, sort_keys=True) not in new_keys]
    return added, removed


#: a trainer key this version does not know (a newer store's): compared as it is
_UNKNOWN_OPTION = TrainerOption(lambda _value, _table: None)


def _trainer_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    out = []
    for key in sorted(old.keys() | new.keys()):
        option = TRAINER_OPTIONS.get(key, _UNKNOWN_OPTION)
        default = None if option.default is _NO_DEFAULT else option.default
        before, after = old.get(key, default), new.get(key, default)
        if option.compared(before) != option.compared(after):
            out.append((f"trainer.{key}", before, after))
    return out
