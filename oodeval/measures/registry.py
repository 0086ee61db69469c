"""The one registry of evaluation measures: plain measures, parameterised families, their specs.

A measure is a function of errors over environments (LAST axis), vectorised over any leading
axes, returning one value per leading index; lower is better. Each has a name, a label (how
tables print it), a short description, the fewest environments its formula is defined for and
the errors it reads (``split``: ``loo`` or ``all``). Every built-in goes through this registry,
and so does a user's ``@register_measure``; every list of measure names in oodeval comes from
here (`measure_names`, `MEASURES`).

A *family* is a measure with parameters, written as a *spec* ``name:key=value[:key=value]``,
e.g. ``cvar:alpha=0.25`` or ``mean_plus_std:lambda=1``. `get_measure` turns a plain name or a
spec into a `MeasureSpec` whose ``name`` is the canonical spec (parameters in declared order,
numbers as Python's shortest float text without a trailing ``.0``).

Wherever a measure is named, its label names it too (``worst+gap``, ``worst only``), and a name
or label in another case (``Worst+Gap``, ``CVaR:alpha=0.25``) when it stands for one measure
only; an unknown name is refused with the closest known ones (``did you mean``).

>>> get_measure("worst_plus_gap").label
'worst+gap'
>>> get_measure("Worst+Gap").name
'worst_plus_gap'
>>> "average" in measure_names()
True
"""

from __future__ import annotations

import difflib
import inspect
import marshal
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from oodeval._digest import code_digest, short_digest
from oodeval._registry import Registry
from oodeval.errors import OodevalError, listing
from oodeval.limits import check_count

__all__ = [
    "FAMILIES",
    "MEASURES",
    "REGISTRY",
    "MeasureFamily",
    "MeasureFunction",
    "MeasureSpec",
    "UnknownMeasure",
    "check_measures",
    "freeze_built_ins",
    "get_measure",
    "measure_code_digest",
    "measure_columns",
    "measure_label",
    "measure_names",
    "register_measure",
    "register_measure_family",
    "undefined_measures",
    "unregister_measure",
]

MeasureFunction = Callable[..., "float | np.ndarray"]
#: Reads one parameter's text (``"0.25"``) into its value, raising ValueError for bad text.
ParamParser = Callable[[str], Any]

SPLITS = ("loo", "all")
_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


class UnknownMeasure(OodevalError):
    """A name that is no registered measure's name or label (a family's bad parameters, an
    ambiguous name are plain `OodevalError`)."""


@dataclass(frozen=True)
class MeasureSpec:
    """One measure: what to call, what it needs, and how reports name it.

    For a family member (``cvar:alpha=0.25``) ``name`` is the canonical spec and ``params`` the
    parsed parameters; for a plain measure ``params`` is empty.
    """

    name: str
    function: MeasureFunction
    label: str
    """How tables and figures print it ("worst+gap")."""
    description: str = ""
    """One line: what it computes."""
    min_envs: int = 1
    """Fewest environments its formula is defined for (Eq. 6 divides by N - 2: 3)."""
    split: str = "loo"
    """Errors it reads: ``loo`` (each LOO model on its held-out given environment) or ``all``
    (the model trained on all given environments, on every environment of E_all)."""
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The parameters of a family member, in declared order (empty for a plain measure)."""


@dataclass(frozen=True)
class MeasureFamily:
    """A parameterised measure: `factory` takes the parameters as keywords, returns the function."""

    name: str
    factory: Callable[..., MeasureFunction]
    params: Mapping[str, type | ParamParser]
    label: str
    """Label template: ``{key}`` is replaced by the parameter's text; without braces the
    parameters are appended as ``label(key=value)``."""
    description: str = ""
    min_envs: int = 1
    split: str = "loo"


REGISTRY: Registry[MeasureSpec] = Registry("measure", definition=lambda spec: spec.function)
"""Every plain measure by name (built-ins and ``@register_measure``), in registration order."""

FAMILIES: Registry[MeasureFamily] = Registry("measure", definition=lambda fam: fam.factory)
"""Every parameterised family by name (``cvar``, ``quantile``); a name is a measure or a family."""

MEASURES: dict[str, MeasureFunction] = {}
"""Name -> function of the plain LOO measures: what "all measures" means by default (lower is
better for all of them). Families are asked for by spec; they are not in this default set."""

_SPECS: dict[str, MeasureSpec] = {}  # canonical spec -> family member, built once
_BUILT_IN: set[str] = set()  # names oodeval itself registers (`freeze_built_ins`)
_DIGESTS: dict[str, str] = {}  # name -> code digest at registration (`measure_code_digest`)


def _check_name(name: str, split: str, min_envs: int) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise OodevalError(
            f"measure name {name!r} must be lower-case letters, digits and _ (e.g. my_measure)"
        )
    if isinstance(min_envs, bool) or not isinstance(min_envs, int) or min_envs < 1:
        raise OodevalError(f"min_envs of {name} must be an integer >= 1, got {min_envs!r}")
    if split not in SPLITS:
        raise OodevalError(f"split must be 'loo' or 'all', not {split!r}")


def _claim(name: str, function: Callable[..., Any]) -> None:
    """Refuse a name another definition holds, plain or family (one namespace); the same
    definition again (its module run again after an edit) replaces its old self."""
    REGISTRY.check_free(name, function)
    FAMILIES.check_free(name, function)
    _drop(name)


def _drop(name: str) -> None:
    """Forget measure or family `name` and what was derived from it."""
    REGISTRY.remove(name)
    FAMILIES.remove(name)
    MEASURES.pop(name, None)
    _DIGESTS.pop(name, None)
    for spec in [s for s in _SPECS if s.split(":", 1)[0] == name]:
        del _SPECS[spec]


def _first_line(function: Callable[..., Any]) -> str:
    return ((inspect.getdoc(function) or "").strip().splitlines() or [""])[0]


@overload
def register_measure(name: MeasureFunction, /) -> MeasureFunction: ...
@overload
def register_measure(
    name: str | None = None,
    *,
    label: str | None = None,
    description: str | None = None,
    min_envs: int = 1,
    split: str = "loo",
) -> Callable[[MeasureFunction], MeasureFunction]: ...
def register_measure(
    name: str | MeasureFunction | None = None,
    *,
    label: str | None = None,
    description: str | None = None,
    min_envs: int = 1,
    split: str = "loo",
) -> MeasureFunction | Callable[[MeasureFunction], MeasureFunction]:
    """Decorator adding a plain measure to `REGISTRY` (and, when ``split="loo"``, to `MEASURES`).

    Bare (``@register_measure``) it is named after the function. The function takes errors of
    shape ``(..., n_envs)`` (float64 error fractions, environments on the last axis) and returns
    one value per leading index; lower must be better. Once registered, the measure is accepted
    wherever measure names are (``--measures``, a study config's ``measures``, `domain_measures`,
    `oodeval.score`). A name another definition holds is refused; the same function again (its
    module run again after an edit) replaces itself. `label` defaults to the name,
    `description` to the first line of the docstring.

    >>> @register_measure("doc_median", label="median", min_envs=1)
    ... def doc_median(errors):
    ...     return np.median(errors, axis=-1)
    >>> @register_measure
    ... def doc_max(errors):
    ...     return np.max(errors, axis=-1)
    >>> get_measure("doc_median").label, get_measure("doc_max").label
    ('median', 'doc_max')
    >>> unregister_measure("doc_median"), unregister_measure("doc_max")
    (None, None)
    """
    if callable(name):  # bare: @register_measure
        return register_measure(name.__name__)(name)
    if name is not None:
        _check_name(name, split, min_envs)

    def add(function: MeasureFunction) -> MeasureFunction:
        key = function.__name__ if name is None else name
        _check_name(key, split, min_envs)
        _claim(key, function)
        desc = _first_line(function) if description is None else description
        REGISTRY.add(key, MeasureSpec(key, function, label or key, desc, min_envs, split))
        _DIGESTS[key] = _code_digest(function)
        if split == "loo":
            MEASURES[key] = function
        return function

    return add


def register_measure_family(
    name: str,
    *,
    params: Mapping[str, type | ParamParser],
    label: str | None = None,
    description: str | None = None,
    min_envs: int = 1,
    split: str = "loo",
) -> Callable[[Callable[..., MeasureFunction]], Callable[..., MeasureFunction]]:
    """Decorator adding a parameterised measure: the factory takes `params` as keywords.

    `params` maps each parameter to ``float``, ``int`` or a parser of its text; the decorated
    factory returns the vectorised measure function and raises OodevalError for values out of
    range. Members are written ``name:key=value[:key=value]`` (every parameter given). A taken
    name is refused as a plain measure's is (`register_measure`).

    >>> @register_measure_family("doc_power_mean", params={"p": float}, label="M_{p}")
    ... def doc_power_mean(p):
    ...     return lambda errors: np.mean(np.asarray(errors) ** p, axis=-1) ** (1 / p)
    >>> spec = get_measure("doc_power_mean:p=2.0")
    >>> spec.name, spec.label, round(float(spec.function([0.3, 0.4])), 12)
    ('doc_power_mean:p=2', 'M_2', 0.353553390593)
    >>> unregister_measure("doc_power_mean")
    """
    _check_name(name, split, min_envs)
    for key in params:
        if not isinstance(key, str) or not _NAME.match(key):
            raise OodevalError(f"parameter name {key!r} of {name} must be lower-case letters")

    def add(factory: Callable[..., MeasureFunction]) -> Callable[..., MeasureFunction]:
        _claim(name, factory)
        desc = _first_line(factory) if description is None else description
        family = MeasureFamily(name, factory, dict(params), label or name, desc, min_envs, split)
        FAMILIES.add(name, family)
        _DIGESTS[name] = _code_digest(factory)
        return factory

    return add


def freeze_built_ins() -> None:
    """Mark every measure registered so far as built-in (`oodeval.measures` calls it once)."""
    _BUILT_IN.update(REGISTRY, FAMILIES)


def unregister_measure(name: str) -> None:
    """Remove a measure or family added by a user (built-in measures cannot be removed)."""
    if name in _BUILT_IN:
        raise OodevalError(f"{name!r} is a built-in measure; it cannot be removed")
    _drop(name)


def _family_template(family: MeasureFamily) -> str:
    keys = ":".join(f"{k}=<{getattr(p, '__name__', 'value')}>" for k, p in family.params.items())
    return f"{family.name}:{keys}" if keys else family.name


def measure_names(*, split: str | None = "loo", families: bool = True) -> list[str]:
    """Every registered measure: plain names, then families as templates (``cvar:alpha=<float>``).

    By default the ones a user may ask for (``split="loo"``: what ``--measures`` and a config's
    ``measures`` accept); ``split=None`` adds the ``all``-split ones (the ideal measure).

    >>> ", ".join(measure_names(families=False)[:3])
    'average, worst, best'
    """
    names = [n for n, s in REGISTRY.items() if split is None or s.split == split]
    if families:
        names += [
            _family_template(f) for f in FAMILIES.values() if split is None or f.split == split
        ]
    return names


def _number_text(value: Any) -> str:
    """Canonical text of a parameter value: 1.0 -> '1', 0.25 -> '0.25', 1e-05 -> '1e-05'."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _parse_value(family: str, key: str, parser: type | ParamParser, text: str) -> Any:
    example = f"e.g. {family}:{key}=0.5"
    try:
        value = parser(text)
    except OodevalError:
        raise
    except (TypeError, ValueError):
        kind = getattr(parser, "__name__", "value")
        raise OodevalError(
            f"measure {family}: {key}={text!r} is not a valid {kind}; write a number, {example}"
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise OodevalError(f"measure {family}: {key} must be finite, got {text}; {example}")
    return value


def _family_member(family: MeasureFamily, parts: Sequence[str], spec: str) -> MeasureSpec:
    given: dict[str, str] = {}
    for part in parts:
        key, eq, text = (s.strip() for s in part.partition("="))
        if not eq or not key or not text:
            raise OodevalError(
                f"measure spec {spec!r}: {part!r} is not key=value; write it as "
                f"{_family_template(family)}"
            )
        if key not in family.params:
            raise OodevalError(
                f"measure {family.name} has no parameter {key!r}; write it as "
                f"{_family_template(family)}"
            )
        if key in given:
            raise OodevalError(f"measure spec {spec!r} gives {key} twice; give it once")
        given[key] = text
    missing = [k for k in family.params if k not in given]
    if missing:
        raise OodevalError(
            f"measure {family.name} needs {listing(missing)}; write it as "
            f"{_family_template(family)}"
        )
    values = {k: _parse_value(family.name, k, p, given[k]) for k, p in family.params.items()}
    texts = {k: _number_text(v) for k, v in values.items()}
    name = ":".join([family.name, *(f"{k}={t}" for k, t in texts.items())])
    if name in _SPECS:
        return _SPECS[name]
    function = family.factory(**values)
    if "{" in family.label:
        label = family.label.format(**texts)
    elif texts:
        label = f"{family.label}({', '.join(f'{k}={t}' for k, t in texts.items())})"
    else:
        label = family.label
    member = MeasureSpec(
        name, function, label, family.description, family.min_envs, family.split, values
    )
    _SPECS[name] = member
    return member


def get_measure(spec: str | MeasureSpec) -> MeasureSpec:
    """The measure a plain name or a spec ``name:key=value[:key=value]`` stands for.

    A plain measure's label names it too (``worst+gap``), and a name or label in another case
    when it stands for one measure only. Raises `UnknownMeasure` for an unknown name (with the
    closest known ones), OodevalError (one line naming the fix) for an ambiguous name, a
    missing, unknown or repeated parameter, or a value the family refuses. The result's
    ``name`` is canonical.

    >>> get_measure("cvar: alpha=.250").name
    'cvar:alpha=0.25'
    >>> get_measure("mean_plus_std:lambda=1.0").params
    {'lambda': 1.0}
    >>> get_measure("worst only").name, get_measure("CVaR:alpha=0.5").name
    ('worst_only', 'cvar:alpha=0.5')
    """
    if isinstance(spec, MeasureSpec):
        return spec
    if not isinstance(spec, str):
        raise OodevalError(f"a measure is named by text, not {type(spec).__name__}")
    head, *parts = (p.strip() for p in spec.strip().split(":"))
    name = _registered_name(head)
    if name is not None and name in REGISTRY:
        if parts:
            raise OodevalError(f"measure {name} takes no parameters; write {name}")
        return REGISTRY[name]
    if name is not None and name in FAMILIES:
        return _family_member(FAMILIES[name], parts, spec)
    raise UnknownMeasure(
        f"unknown measure {spec!r}; choose from {', '.join(measure_names())} (or register it "
        f"with @register_measure and load its file with imports){did_you_mean([spec])}"
    )


def _spellings() -> dict[str, list[str]]:
    """Every text that names a measure -> the names it stands for: names and labels of plain
    measures, names of families (and the label of a family without parameters)."""
    out: dict[str, list[str]] = {}
    texts = [(n, n) for n in [*REGISTRY, *FAMILIES]] + [(s.label, n) for n, s in REGISTRY.items()]
    texts += [(f.label, n) for n, f in FAMILIES.items() if not f.params]
    for text, name in texts:
        names = out.setdefault(" ".join(text.split()), [])
        if name not in names:
            names.append(name)
    return out


def _registered_name(head: str) -> str | None:
    """The registered name `head` stands for: a name, else a label, else either of them in
    another case; None when it names none. Refused when it stands for more than one.

    >>> _registered_name("worst only"), _registered_name("SCALED WORST"), _registered_name("x")
    ('worst_only', 'scaled_worst', None)
    """
    if head in REGISTRY or head in FAMILIES:
        return head
    text = " ".join(head.split())
    spellings = _spellings()
    names = spellings.get(text) or list(
        dict.fromkeys(n for t, ns in spellings.items() if t.lower() == text.lower() for n in ns)
    )
    if len(names) > 1:
        raise OodevalError(
            f"measure {head!r} may stand for {listing(names)}; write the one you mean by its name"
        )
    return names[0] if names else None


def did_you_mean(unknown: Sequence[object]) -> str:
    """``"; did you mean ...?"``: the name or label of a LOO measure closest to each of `unknown`
    (by `difflib.get_close_matches`, as an unknown command is answered), ``""`` when none is.

    >>> did_you_mean(["medain"]), did_you_mean(["zz"])
    ("; did you mean 'median'?", '')
    >>> print(did_you_mean(["wrost", "cvr:alpha=0.5"]))
    ; did you mean 'worst' for 'wrost', 'cvar:alpha=0.5' for 'cvr:alpha=0.5'?
    """
    loo = {n for n, s in REGISTRY.items() if s.split == "loo"}
    loo |= {n for n, f in FAMILIES.items() if f.split == "loo"}
    spellings = {t.lower(): t for t, ns in _spellings().items() if set(ns) <= loo}
    close: list[tuple[str, str]] = []
    for typed in unknown:
        head, colon, params = str(typed).strip().partition(":")
        text = " ".join(head.split()).lower()
        found = difflib.get_close_matches(text, spellings, n=1)
        if found and found[0] != text:
            close.append((repr(f"{spellings[found[0]]}{colon}{params}"), repr(str(typed))))
    if not close:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {close[0][0]}?"
    return f"; did you mean {listing(f'{m} for {t}' for m, t in close)}?"


def measure_label(name: str) -> str:
    """How reports print measure `name` (the name itself when it is not registered).

    >>> measure_label("worst_plus_gap"), measure_label("cvar:alpha=0.5"), measure_label("x")
    ('worst+gap', 'CVaR_0.5', 'x')
    """
    try:
        return get_measure(name).label
    except OodevalError:
        return name


def check_measures(names: Sequence[str] | None = None) -> list[str]:
    """`names` as canonical LOO measure specs, each once (default: every measure of `MEASURES`).

    Raises OodevalError for an unknown name, a bad spec or an ``all``-split measure.

    >>> check_measures(["average", "cvar:alpha=.5"])
    ['average', 'cvar:alpha=0.5']
    """
    if names is None:
        return list(MEASURES)
    out = []
    unknown = []
    for n in names:
        try:
            spec = get_measure(n)
        except UnknownMeasure:  # (a known one with bad parameters raises its own message)
            unknown.append(n)
            continue
        if spec.split != "loo":
            unknown.append(n)
        else:
            out.append(spec.name)
    if unknown:
        raise OodevalError(
            f"unknown measure(s) {listing(unknown)}; choose from {', '.join(measure_names())}"
            f"{did_you_mean(unknown)}"
        )
    return list(dict.fromkeys(out))  # a measure asked for twice (or spelt two ways) is one


def measure_columns(columns: Sequence[Any]) -> list[str]:
    """The entries of `columns` that name a LOO measure: plain ones in `MEASURES` order, then
    family members and the rest in the order given.

    >>> measure_columns(["seed", "cvar:alpha=0.5", "worst", "average", "ideal"])
    ['average', 'worst', 'cvar:alpha=0.5']
    """
    given = [c for c in columns if isinstance(c, str)]
    plain = [m for m in MEASURES if m in given]
    rest = []
    for c in given:
        if c in MEASURES or c.split(":", 1)[0] not in FAMILIES:
            continue
        try:
            if get_measure(c).split == "loo":
                rest.append(c)
        except OodevalError:
            continue
    return plain + rest


def measure_values(spec: str | MeasureSpec, values: np.ndarray) -> np.ndarray:
    """Measure `spec` on validated error fractions `values` (shape ``(..., N)``), checked: the
    measure's minimum N, one value per leading index, and a failing function reported in one
    line naming the measure (a user's measure must not end a command in a traceback).

    >>> measure_values("worst", np.array([[0.1, 0.3], [0.2, 0.2]])).tolist()
    [0.3, 0.2]
    """
    spec = get_measure(spec)
    n = values.shape[-1]
    if spec.min_envs > n:
        raise OodevalError(
            f"measure {spec.label} needs >= {spec.min_envs} environments, got N={n}; drop it "
            "or give more environments"
        )
    try:
        out = np.asarray(spec.function(values), dtype=np.float64)
    except Exception as exc:  # the measure's own code (often a user's) failed
        raise OodevalError(
            f"measure {spec.name} failed on errors of shape {values.shape} "
            f"({type(exc).__name__}: {exc}); fix its function"
        ) from exc
    if out.shape != values.shape[:-1]:
        raise OodevalError(
            f"measure {spec.name} returned shape {out.shape} for errors of shape {values.shape}; "
            f"it must return one value per leading index (shape {values.shape[:-1]})"
        )
    return out


def undefined_measures(names: Sequence[str], n_envs: int) -> list[str]:
    """The measures of `names` whose formula needs more than `n_envs` environments.

    >>> undefined_measures(["average", "worst_plus_gap", "gap_only"], 2)
    ['worst_plus_gap', 'gap_only']
    """
    check_count(n_envs, "n_envs", what="environments")
    return [n for n in names if get_measure(n).min_envs > n_envs]


def _code_digest(function: Callable[..., Any]) -> str:
    """`oodeval._digest.code_digest` of the file defining `function` (as a config's imports are
    digested), else the short digest of its own source, else of its bytecode."""
    function = inspect.unwrap(function)
    try:
        path = inspect.getsourcefile(function)
        if path and Path(path).is_file():
            return code_digest(path)
    except (OSError, TypeError):
        pass  # no file: defined in a session or built at run time
    try:
        data = inspect.getsource(function).encode("utf-8")
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        data = marshal.dumps(code) if code is not None else repr(function).encode("utf-8")
    return short_digest(data)


def measure_code_digest(spec: str | MeasureSpec) -> str:
    """16 hex digits of the SHA-256 of the source file defining the measure, read when it was
    registered (so an edit of the file after its import does not change what is reported).

    For a plain measure that is the file of its function, for a family member the file of its
    factory (the parameters are in the spec's name, not in the digest). The bytes are hashed
    as a study config hashes its ``imports`` files, so a measure from such a file has the
    digest the config records for the file. A function without a source file (typed at a
    prompt) is digested by its own source, or else its bytecode.

    >>> len(measure_code_digest("average"))
    16
    """
    measure = get_measure(spec)
    head = measure.name.split(":", 1)[0]
    if head in _DIGESTS and (head in REGISTRY or head in FAMILIES):
        return _DIGESTS[head]
    family = FAMILIES.get(head) if head not in REGISTRY else None
    return _code_digest(family.factory if family is not None else measure.function)
