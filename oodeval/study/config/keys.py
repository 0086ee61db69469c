"""The keys of a study config: their names, limits and value rules, and the ``[trainer]`` table.

This is the bottom of `oodeval.study.config`: constants every other module of the package reads,
`ConfigError` (every problem of a config, in one line), the rules that check one value
(`integer_in`, `one_of`, ...), `TRAINER_OPTIONS` (one entry per ``[trainer]`` key) and
`ScenarioSpec`. It imports nothing of the package.

>>> TRAINER_KEYS[:2]
('selection', 'eval_every')
>>> integer_in(1, STEPS_LIMIT)(0, {})
'must be >= 1, got 0'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oodeval._torch import TF32_MODES
from oodeval.errors import SHOWN_ITEMS, OodevalError, listing
from oodeval.limits import SEED_LIMIT as LIMITS_SEED
from oodeval.training.options import CHECKPOINT_SELECTIONS, PRECISIONS

#: The backend used when the config names none: real scenarios, algorithms and the trainer.
#: A dotted module path stored with every study, so the module keeps this name.
DEFAULT_BACKEND = "oodeval.study.trainer_backend"
#: The measures a config without ``measures`` analyses; any LOO measure of the registry
#: (`oodeval.measures.registry.measure_names`) may be listed.
DEFAULT_MEASURES = ("average", "worst_plus_gap", "worst_only", "gap_only")
HPARAMS_MODES = ("default", "random")
#: Largest ``steps`` (and ``eval_every``): 10 million updates is weeks of GPU time per unit.
STEPS_LIMIT = 10_000_000
#: Seeds and ``data_seed`` lie in [0, 2**32) (`oodeval.limits.SEED_LIMIT`, the bound every
#: ``--seed`` and ``seed=`` is checked against too).
SEED_LIMIT = LIMITS_SEED
#: Largest ``[trainer] batch_size`` (rows per environment and step).
BATCH_SIZE_LIMIT = 65_536
#: How many problems a `ConfigError` message shows before "and N more".
SHOWN_PROBLEMS = SHOWN_ITEMS

REQUIRED_KEYS = ("scenarios", "algorithms", "seeds", "steps")
#: Arguments of ``run_unit`` the study sets itself, never ``unit_options``.
UNIT_ARGUMENTS = ("seed", "steps", "hparams", "model")


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


def shown(value: Any) -> str:
    """A value as a problem line shows it: its type and its (shortened) repr.

    >>> shown("x" * 70)
    "str 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
    """
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def integer_in(low: int, high: int) -> Check:
    """A rule accepting integers in [low, high] (never a bool).

    >>> integer_in(1, 10)(0, {})
    'must be >= 1, got 0'
    """

    def check(value: Any, _table: Mapping[str, Any]) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer in [{low:_}, {high:_}], got {shown(value)}"
        if value < low:
            return f"must be >= {low:_}, got {value}"
        if value > high:
            return f"must be <= {high:_}, got {value}"
        return None

    return check


def one_of(choices: Sequence[str]) -> Check:
    """A rule accepting one of the strings `choices`.

    >>> one_of(("a", "b"))("c", {})
    "must be one of a, b, got str 'c'"
    """

    def check(value: Any, _table: Mapping[str, Any]) -> str | None:
        if isinstance(value, str) and value in choices:
            return None
        return f"must be one of {', '.join(choices)}, got {shown(value)}"

    return check


def _boolean(value: Any, _table: Mapping[str, Any]) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {shown(value)}"


def _holdout_fraction(value: Any, table: Mapping[str, Any]) -> str | None:
    # selection = "last" never validates, so it may train on every row (fraction 0)
    closed = table.get("selection") == "last"
    interval = "[0, 1) with selection = 'last'" if closed else "(0, 1)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number in {interval}, got {shown(value)}"
    if not (0 <= value < 1 if closed else 0 < value < 1):
        return f"must be in {interval}, got {value}"
    return None


def _weights_path(value: Any, _table: Mapping[str, Any]) -> str | None:
    # the file itself (found, its SHA-256, a state dict for the model) is checked by the config
    if isinstance(value, str) and value.strip():
        return None
    return f"must be the path of a weights file (.pth, .pt or .safetensors), got {shown(value)}"


def _same(value: Any) -> Any:
    return value


def _device(value: Any, _table: Mapping[str, Any]) -> str | None:
    # spelling only (no torch): whether this machine has the device is `validate_config`'s check
    from oodeval._torch import device_problem

    if device_problem(value) is None:
        return None
    return f"must be cpu, cuda, cuda:N or auto, got {shown(value)}"


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

    >>> TRAINER_OPTIONS["precision"].stored("fp32"), TRAINER_OPTIONS["eval_every"].stored(5)
    (False, True)
    """

    check: Check
    default: Any = _NO_DEFAULT
    compared: Callable[[Any], Any] = _same

    @property
    def has_default(self) -> bool:
        """True when the option names the value ``run_unit`` uses without it."""
        return self.default is not _NO_DEFAULT

    def stored(self, value: Any) -> bool:
        """Whether a config keeps `value` (a value equal to the default is never stored)."""
        return not self.has_default or value != self.default

    def value_or_default(self, table: Mapping[str, Any], key: str) -> Any:
        """``table[key]``, else the default (None when the option has none)."""
        return table.get(key, self.default if self.has_default else None)


TRAINER_OPTIONS: dict[str, TrainerOption] = {
    "selection": TrainerOption(one_of(CHECKPOINT_SELECTIONS)),
    "eval_every": TrainerOption(integer_in(1, STEPS_LIMIT)),
    "holdout_fraction": TrainerOption(_holdout_fraction),
    "batch_size": TrainerOption(integer_in(1, BATCH_SIZE_LIMIT)),
    "precision": TrainerOption(one_of(PRECISIONS), default=PRECISIONS[0]),
    "device": TrainerOption(_device, default="cpu", compared=_device_kind),
    "tf32": TrainerOption(one_of(TF32_MODES), default=TF32_MODES[0]),
    "augment": TrainerOption(_boolean, default=False),
    "imagenet_normalize": TrainerOption(_boolean, default=True),
    # compared by the file's SHA-256 (the config's ``pretrained_sha256``), never by its path
    "pretrained": TrainerOption(_weights_path),
}
TRAINER_KEYS = tuple(TRAINER_OPTIONS)


#: The keys of a scenario table that belong to the study, not to the family's builder: the
#: scenario's own image source (its ``source_identity`` computed like the study's) and the
#: ``dataset`` label that prefixes its name (``"PACS-corrupted/corrupted/pattern=1-1-1-1/..."``).
SCENARIO_KEYS = ("source", "source_identity", "dataset")


@dataclass(frozen=True)
class ScenarioSpec:
    """One scenario of a study: a family name and its parameters, as `build_scenario` takes them.

    ``source`` (with its ``source_identity``) is the scenario's own data, for a study whose
    scenarios read different folders (the image presets); None reads the study's ``source``.
    ``dataset`` names that data in the scenario's name and in the stored parameters.

    >>> ScenarioSpec("sr-cmnist", {"scale": 1, "ratio": "3:1"}).label()
    'sr-cmnist[ratio=3:1,scale=1]'
    >>> ScenarioSpec.from_dict({"family": "corrupted", "pattern": "1-1-1-1",
    ...                         "dataset": "PACS-corrupted"}).label()
    'PACS-corrupted/corrupted[pattern=1-1-1-1]'
    """

    family: str
    params: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    source_identity: dict[str, str] | None = None
    dataset: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | str) -> ScenarioSpec:
        """The spec of a stored scenario (`to_dict`'s form, or a bare family name)."""
        if isinstance(data, str):
            return cls(data)
        params = {k: v for k, v in data.items() if k != "family" and k not in SCENARIO_KEYS}
        identity = data.get("source_identity")
        return cls(
            data["family"],
            params,
            data.get("source"),
            dict(identity) if isinstance(identity, Mapping) else None,
            data.get("dataset"),
        )

    def label(self) -> str:
        """A readable fallback name (the built scenario's own `name` is what the store records)."""
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        label = f"{self.family}[{inner}]" if inner else self.family
        return f"{self.dataset}/{label}" if self.dataset else label

    def to_dict(self) -> dict[str, Any]:
        """The stored form: ``{"family": ..., **params}``, with ``source``, ``source_identity``
        and ``dataset`` when set."""
        own = {k: getattr(self, k) for k in SCENARIO_KEYS if getattr(self, k) is not None}
        return {"family": self.family, **self.params, **own}
