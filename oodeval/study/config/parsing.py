"""Parsing a study config: from plain data (parsed TOML or stored JSON) to checked field values.

`parsed_fields` turns a table into every field of a `oodeval.study.config.schema.StudyConfig`,
reporting each problem (a wrong type, a value out of range, an unknown key, a duplicate) as one
line and putting a stand-in in its place, so that one pass finds every problem. `toml_table`
reads a config file. The rules of single values live in `oodeval.study.config.keys`; what the
backend says about the grid in `oodeval.study.config.backend`.

>>> problems = []
>>> data = {"scenarios": ["a"], "algorithms": ["ERM"], "seeds": [0], "steps": 0}
>>> values, bad = parsed_fields(data, problems, keys=set(data))
>>> problems, sorted(bad), values["steps"]
(['steps must be >= 1, got 0'], ['steps'], 1)
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

from oodeval._digest import file_sha256
from oodeval._json import MAX_DEPTH, bracket_depth, depth_problem, structure_depth
from oodeval._names import lookalike_problem
from oodeval._text import parse_problem, read_text
from oodeval.errors import OodevalError, listing
from oodeval.measures.registry import UnknownMeasure, did_you_mean, get_measure, measure_names
from oodeval.study.config.imports import import_digests, resolved_import
from oodeval.study.config.keys import (
    DEFAULT_BACKEND,
    DEFAULT_MEASURES,
    HPARAMS_MODES,
    REQUIRED_KEYS,
    SEED_LIMIT,
    STEPS_LIMIT,
    TRAINER_OPTIONS,
    UNIT_ARGUMENTS,
    Check,
    ScenarioSpec,
    integer_in,
    one_of,
    shown,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged as tomli
    import tomli as tomllib

#: What the nesting pre-scan skips: TOML strings (multi-line, basic with escapes, literal) and
#: comments, whose brackets are text.
_TOML_TEXT = re.compile(
    r'"""(?:[^\\]|\\[\s\S])*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
)

#: Bare-key characters and blanks, removed so that a dotted key (``a.b.c``) or table header
#: (``[a.b.c]``) is left as a run of dots; a run longer than `_DOTS` is refused before parsing
#: (the parser takes time quadratic in a key's parts), a shorter one measured after it.
_KEY_TEXT = re.compile(r"[A-Za-z0-9_\- \t]+")
_DOTS = 4 * MAX_DEPTH

#: Keys a config file may not write: the config computes them (a stored config carries them).
_COMPUTED_KEYS = (
    ("source_identity", "the data"),
    ("import_digests", "the imported files"),
    ("pretrained_sha256", "the [trainer] pretrained weights file"),
)
#: A SHA-256 as `oodeval._digest.file_sha256` writes it.
_SHA256 = re.compile(r"[0-9a-f]{64}")


def toml_table(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The table of a TOML config file, ready for `parsed_fields`, and its problems so far.

    ``name`` defaults to the file's stem; a computed key (``source_identity``,
    ``import_digests``, ``pretrained_sha256``) is a problem and dropped; a ``.py`` import and
    ``[trainer] pretrained`` are made absolute relative to the file's folder. A missing or
    unreadable file raises `OodevalError`.
    """
    if not path.exists():
        raise OodevalError(f"study config {path} not found; pass a TOML file or --preset NAME")
    text = read_text(path, what="study config", save_as="UTF-8 TOML")
    _check_nesting(path, text)  # before the recursive parser
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise OodevalError(f"study config {path} is not valid TOML: {exc}") from None
    except ValueError as exc:  # int() refuses a number of over 4300 digits
        raise OodevalError(
            f"study config {path} is not valid TOML: {parse_problem(exc)}; write a shorter number"
        ) from None
    _check_depth(path, structure_depth(data, root=False))  # dotted keys, [a.b.c] headers
    data.setdefault("name", path.stem)
    problems = []
    for key, what in _COMPUTED_KEYS:
        if key in data:
            problems.append(f"{key} is computed from {what}, not written in a config; remove it")
            del data[key]
    imports = data.get("imports")
    if isinstance(imports, list):  # a .py file is named relative to the config file
        data["imports"] = [resolved_import(i, path.parent) for i in imports]
    trainer = data.get("trainer")
    if isinstance(trainer, dict) and "pretrained" in trainer:  # relative to the config file too
        trainer["pretrained"] = resolved_path(trainer["pretrained"], path.parent)
    return data, problems


def resolved_path(value: Any, base: Path) -> Any:
    """A path string made absolute (relative to `base`, ``~`` expanded); anything else
    unchanged, for the parser to report.

    >>> resolved_path("w/resnet18.pth", Path("/data"))
    '/data/w/resnet18.pth'
    """
    if not isinstance(value, str) or not value.strip():
        return value
    path = Path(value).expanduser()
    return str((path if path.is_absolute() else base / path).resolve())


def _check_depth(path: Path, depth: int, *, at_least: bool = False) -> None:
    if depth > MAX_DEPTH:
        problem = depth_problem(depth, "TOML", at_least=at_least)
        raise OodevalError(f"study config {path}: {problem}; flatten the config")


def _check_nesting(path: Path, text: str) -> None:
    """Refuse, before parsing, inline arrays and tables nested over `MAX_DEPTH` levels and a
    dotted key or table header of over `_DOTS` parts (both only counted outside strings and
    comments, and only when the text holds enough brackets or dots to need it)."""
    brackets = text.count("[") + text.count("{") > MAX_DEPTH
    if not brackets and text.count(".") <= _DOTS:
        return
    skeleton = _TOML_TEXT.sub("", text)
    if brackets:
        _check_depth(path, bracket_depth(skeleton))
    longest = max(map(len, re.findall(r"\.+", _KEY_TEXT.sub("", skeleton))), default=0)
    if longest > _DOTS:  # a key of n dots opens at least n tables
        _check_depth(path, longest, at_least=True)


def parsed_fields(
    data: Mapping[str, Any], problems: list[str], keys: Set[str]
) -> tuple[dict[str, Any], set[str]]:
    """Every field of a StudyConfig from `data`, with a stand-in for each bad value; and the
    names of the fields that were bad. Each problem is appended to `problems`; a key of `data`
    not in `keys` (the fields of StudyConfig) is one."""
    unknown = sorted(set(data) - keys)
    if unknown:
        allowed = sorted(keys - {"source_identity"})
        problems.append(
            f"unknown study config key(s) {listing(map(repr, unknown))}; allowed keys are "
            f"{', '.join(allowed)}"
        )
    for key in REQUIRED_KEYS:
        if key not in data:
            problems.append(f"study config is missing {key!r}; see examples/study.toml")
    bad: set[str] = set()
    values = _scalar_fields(data, problems, bad)
    values.update(_grid_fields(data, problems, bad))
    values["hparams"] = _hparams_table(data.get("hparams", {}), problems)
    values["trainer"] = _trainer_table(data.get("trainer", {}), problems)
    values["pretrained_sha256"] = _pretrained_sha256(data, values["trainer"], problems)
    values["unit_options"] = _unit_options(data.get("unit_options", {}), problems)
    count = len(problems)
    values["source"], values["source_identity"] = _source(data, problems)
    if len(problems) > count:
        bad.add("source")
    return values, bad


def _scalar_fields(data: Mapping[str, Any], problems: list[str], bad: set[str]) -> dict[str, Any]:
    """name, model, backend, steps, data_seed and hparams_mode (a bad one at its default)."""
    rules: list[tuple[str, Any, Check | None]] = [
        ("name", "study", None),
        ("model", "mlp", None),
        ("backend", DEFAULT_BACKEND, None),
        ("steps", 1, integer_in(1, STEPS_LIMIT)),
        ("data_seed", 0, integer_in(0, SEED_LIMIT - 1)),
        ("hparams_mode", "default", one_of(HPARAMS_MODES)),
    ]
    values: dict[str, Any] = {}
    for key, default, rule in rules:
        value = data.get(key, default)
        problem = _nonempty(key, value) if rule is None else _ruled(key, rule, value)
        if problem is None:
            values[key] = value
        else:
            problems.append(problem)
            bad.add(key)
            values[key] = default
    return values


def _grid_fields(data: Mapping[str, Any], problems: list[str], bad: set[str]) -> dict[str, Any]:
    """scenarios, algorithms, seeds, imports (with their digests) and measures."""
    values: dict[str, Any] = {}
    # a missing required list is reported once, by `parsed_fields`, not again as empty
    values["scenarios"] = (
        _scenarios(data.get("scenarios", ()), problems) if "scenarios" in data else ()
    )
    values["algorithms"] = _names(data, "algorithms", (), problems) if "algorithms" in data else ()
    lookalike = lookalike_problem(values["algorithms"], "algorithm")
    if lookalike is not None:
        problems.append(f"study config 'algorithms': {lookalike}")
    imports = _names(data, "imports", (), problems, may_be_empty=True)
    values["imports"] = tuple(resolved_import(i, Path.cwd()) for i in imports)
    count = len(problems)
    values["import_digests"] = import_digests(values["imports"], data, problems)
    if len(problems) > count:
        bad.add("imports")
    names = _names(data, "measures", DEFAULT_MEASURES, problems)
    values["measures"] = registered_measures(names, values["imports"], problems)
    values["seeds"] = _seeds(data["seeds"], problems) if "seeds" in data else ()
    return values


def registered_measures(
    names: Sequence[str], imports: Sequence[Any], problems: list[str]
) -> tuple[str, ...]:
    """`names` as canonical specs of LOO measures of the registry (``cvar:alpha=0.25``).

    A name the registry does not know yet may come from the config's own ``imports``, which are
    not imported here: with ``imports``, such a name is kept as written (`unknown_measures`), and
    `oodeval.study.config.schema` imports them once every other key is good, then calls this
    again without `imports`. Without them it is a problem, as is a family's bad parameter.

    >>> registered_measures(["average", "cvar:alpha=.25"], (), [])
    ('average', 'cvar:alpha=0.25')
    """
    found = _looked_up(names, problems)
    unknown = [name for name, spec in found if spec is None]
    if unknown and not imports:
        problems.append(
            f"unknown measure(s) {listing(map(repr, sorted(unknown)))}; choose from "
            f"{', '.join(measure_names())}{did_you_mean(sorted(unknown))}"
        )
    return tuple(name if spec is None else spec for name, spec in found if spec or imports)


def unknown_measures(names: Sequence[str]) -> list[str]:
    """The names of `names` the measure registry does not know (yet), in order.

    >>> unknown_measures(["average", "my_measure"])
    ['my_measure']
    """
    return [name for name, spec in _looked_up(names, []) if spec is None]


def _looked_up(names: Sequence[str], problems: list[str]) -> list[tuple[str, str | None]]:
    """(name, canonical spec) of each of `names`: None for an unknown name or a measure that is
    not LOO; a family with bad parameters is a problem and left out."""
    out: list[tuple[str, str | None]] = []
    for name in names:
        try:
            spec = get_measure(name)
        except UnknownMeasure:
            out.append((name, None))
            continue
        except OodevalError as exc:  # a family with bad parameters, an ambiguous name
            problems.append(f"measures: {exc}")
            continue
        out.append((name, spec.name if spec.split == "loo" else None))
    return out


def _ruled(
    label: str, rule: Check, value: Any, table: Mapping[str, Any] | None = None
) -> str | None:
    problem = rule(value, table or {})
    return None if problem is None else f"{label} {problem}"


def _nonempty(label: str, value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return None
    return f"{label} must be a non-empty string, got {shown(value)}"


def _sequence(value: Any, label: str, problems: list[str]) -> list | None:
    if isinstance(value, str) or not isinstance(value, Sequence):
        problems.append(f"{label} must be a list, got {shown(value)}")
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
            spec = ScenarioSpec.from_dict(
                {str(k): copy.deepcopy(v) for k, v in item.items() if k != "source_identity"}
            )
            specs.append(_own_data(spec, item, f"scenarios[{index}]", problems))
        else:
            problems.append(
                f"scenarios[{index}] must be a table with a 'family' string, e.g. "
                f'{{ family = "sr-cmnist", ratio = "3:1", scale = 1 }}, got {shown(item)}'
            )
    _distinct(specs, "scenarios", problems, may_be_empty=len(specs) < len(items))
    return tuple(specs)


def _own_data(
    spec: ScenarioSpec, item: Mapping[str, Any], label: str, problems: list[str]
) -> ScenarioSpec:
    """`spec` with its own ``source`` identified (the one `item` carries, else computed) and its
    ``dataset`` label checked: a name without ``/`` (it prefixes the scenario's name)."""
    dataset = spec.dataset
    if dataset is not None and (
        not isinstance(dataset, str) or not dataset.strip() or "/" in dataset
    ):
        problems.append(
            f"{label}.dataset must be a name without '/', e.g. \"PACS-corrupted\", "
            f"got {shown(dataset)}"
        )
        dataset = None
    if spec.source is None:
        return dataclasses.replace(spec, dataset=dataset)
    if isinstance(spec.source, str) and spec.source.strip().lower() == "auto":
        problems.append(f"{label}.source must name its data, e.g. \"folder:DIR\", not \"auto\"")
        return dataclasses.replace(spec, source=None, dataset=dataset)
    source, identity = _identified(spec.source, item.get("source_identity"), label, problems)
    return dataclasses.replace(spec, source=source, source_identity=identity, dataset=dataset)


def _hparams_table(value: Any, problems: list[str]) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        problems.append(
            f"hparams must be a table of tables, e.g. [hparams.IRM], got {shown(value)}"
        )
        return {}
    out = {}
    for algorithm, overrides in value.items():
        if isinstance(overrides, Mapping):
            out[str(algorithm)] = copy.deepcopy(dict(overrides))
        else:
            problems.append(
                f"hparams.{algorithm} must be a table, e.g. [hparams.{algorithm}] lr = 0.001, "
                f"got {shown(overrides)}"
            )
    return out


def _trainer_table(value: Any, problems: list[str]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        problems.append(f"[trainer] must be a table, got {shown(value)}")
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
        elif option.stored(value[key]):
            out[key] = value[key]  # the default is never stored: naming it is the same study
    if "pretrained" in out:  # stored absolute: a relative path is relative to the working folder
        out["pretrained"] = resolved_path(out["pretrained"], Path.cwd())
    return out


def _pretrained_sha256(
    data: Mapping[str, Any], trainer: Mapping[str, Any], problems: list[str]
) -> str | None:
    """The SHA-256 of the ``[trainer] pretrained`` file: the one `data` carries (a stored
    config's ``pretrained_sha256``), else read from the file; None without the key."""
    given = data.get("pretrained_sha256")
    path = trainer.get("pretrained")
    if path is None:
        if given is not None:
            problems.append("pretrained_sha256 is given without a [trainer] pretrained file")
        return None
    if given is not None:
        if isinstance(given, str) and _SHA256.fullmatch(given):
            return given
        problems.append(f"pretrained_sha256 must be 64 hex digits, got {shown(given)}")
        return None
    try:
        return file_sha256(path)
    except OSError as exc:
        reason = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror or exc
        problems.append(
            f"[trainer] pretrained: cannot read {path} ({reason}); a relative path is relative "
            "to the config file"
        )
        return None


def _unit_options(value: Any, problems: list[str]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        problems.append(f"unit_options must be a table, got {shown(value)}")
        return {}
    for key in value:
        if key in UNIT_ARGUMENTS:
            problems.append(f"unit_options.{key} is set by the study itself; remove it")
        elif key in TRAINER_OPTIONS:
            problems.append(f"unit_options.{key} is a trainer setting; move it to [trainer]")
    return copy.deepcopy(dict(value))


def _source(data: Mapping[str, Any], problems: list[str]) -> tuple[str, dict[str, str] | None]:
    """The source spec and its identity: the one `data` carries, else computed from the data."""
    return _identified(data.get("source", "auto"), data.get("source_identity"), "", problems)


def _identified(
    source: Any, given: Any, label: str, problems: list[str]
) -> tuple[str, dict[str, str] | None]:
    """`source` and its identity: `given` when it is one, else computed from the data (none for
    ``auto``). `label` prefixes the keys named in problems (``scenarios[2].``; empty for the
    study's own source)."""
    prefix = f"{label}." if label else ""
    problem = _nonempty(f"{prefix}source", source)
    if problem is not None:
        problems.append(problem)
        return "digits", None
    if given is not None:
        if not (
            isinstance(given, Mapping)
            and set(given) == {"kind", "digest"}
            and all(isinstance(v, str) and v for v in given.values())
        ):
            problems.append(
                f"{prefix}source_identity must be {{kind, digest}} strings, got {shown(given)}"
            )
            return source, None
        if given["kind"] != source.partition(":")[0].strip().lower():
            problems.append(
                f"{prefix}source_identity names a {given['kind']!r} source but {prefix}source is "
                f"{source!r}"
            )
        return source, dict(given)
    if source == "auto":
        return source, None
    from oodeval.environments.sources import source_identity

    try:
        return source, source_identity(source).as_dict()
    except OodevalError as exc:
        problems.append(f"{label}: {exc}" if label else str(exc))
        return source, None
