"""Growing a stored study: how a new config differs from the one a study was stored with.

A stored study may only grow: new algorithms, seeds, scenarios or imports add units, and changing
a label (``name``, ``measures``) is harmless; anything that would make stored units incomparable
with new ones (``steps``, the model, the data, a ``[trainer]`` option, ...) is refused.
`config_changes` sorts the differences into those two kinds (`ConfigChanges`), `differing_keys`
lists the keys that differ at all.

The data is compared by what it is: a resolved source carries a ``source_identity`` (kind and
content digest) and its path is only a hint, so the same data at another path differs in
nothing and other data at the same path differs in ``source``. A ``.py`` import is compared by
its file name and code digest (``my_algorithm.py@<digest>``), and ``[trainer] pretrained`` by
the SHA-256 of its weights file alone (``sha256:<digest>``): the same weights at another path
differ in nothing, other weights at the same path differ. A stored config is read with the
defaults of the time it was written (`stored_meaning`).

>>> old = {"algorithms": ["ERM"], "seeds": [0], "steps": 5, "scenarios": ["a"]}
>>> config_changes(old, {**old, "seeds": [0, 1]}).describe()
'added seed 1'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oodeval.errors import listing, option
from oodeval.study.config.keys import SHOWN_PROBLEMS, TRAINER_OPTIONS, ScenarioSpec, TrainerOption
from oodeval.study.config.schema import StudyConfig

#: Keys only analyses and reports read: changing them keeps every stored unit comparable.
_LABEL_KEYS = ("name", "measures")
#: The axes a study grows along (or shrinks: a removed value's units stay in the store).
_GROWING_KEYS = ("algorithms", "seeds", "scenarios", "imports")


def scenario_key(spec: ScenarioSpec | Mapping[str, Any]) -> str:
    """The canonical JSON of a scenario spec (family and parameters), to match specs by; a
    scenario's own source is matched by its identity, not its path.

    >>> scenario_key({"scale": 1, "family": "sr-cmnist", "ratio": "3:1"})
    '{"family": "sr-cmnist", "ratio": "3:1", "scale": 1}'
    """
    data = spec.to_dict() if isinstance(spec, ScenarioSpec) else dict(spec)
    return json.dumps(_scenario_by_identity(data), sort_keys=True)


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
    a ``.py`` import by its file name and digest (``my_algorithm.py@<digest>``) and the
    pretrained weights by their SHA-256 (``sha256:<digest>``)."""
    mine, theirs = stored.pop("source_identity", None), new.pop("source_identity", None)
    if mine and theirs:
        stored["source"], new["source"] = mine, theirs
    for config in (stored, new):  # a scenario's own source: its identity alone, when it has one
        if isinstance(config.get("scenarios"), list):
            config["scenarios"] = [_scenario_by_identity(s) for s in config["scenarios"]]
    for config in (stored, new):
        digests = config.pop("import_digests", None)
        digests = digests if isinstance(digests, dict) else {}
        config["imports"] = [
            f"{Path(i).name}@{digests[i]}" if isinstance(i, str) and i in digests else i
            for i in config.get("imports") or ()
        ]
        weights = config.pop("pretrained_sha256", None)
        trainer = config.get("trainer")
        if isinstance(weights, str) and isinstance(trainer, dict) and "pretrained" in trainer:
            config["trainer"] = {**trainer, "pretrained": f"sha256:{weights}"}


def _scenario_by_identity(scenario: Any) -> Any:
    """A stored scenario whose own source has an identity, with that identity as its source."""
    if isinstance(scenario, dict) and isinstance(scenario.get("source_identity"), dict):
        identity = scenario["source_identity"]
        scenario = {k: v for k, v in scenario.items() if k != "source_identity"}
        scenario["source"] = identity
    return scenario


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
            f"imports: keep these values, or use a new {option('directory')} folder"
        )


def _axis_label(value: Any) -> str:
    """A value of a growing axis as shown: a scenario spec by `ScenarioSpec.label`."""
    if isinstance(value, Mapping) and "family" in value:
        return ScenarioSpec.from_dict(value).label()
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
    incompatible = _incompatible(a, b)
    grown = {k: _added_removed(a[k], b[k]) for k in ("algorithms", "seeds", "imports")}
    added, removed = _added_removed(
        [_spec_dict(s) for s in a["scenarios"]], [_spec_dict(s) for s in b["scenarios"]]
    )
    if scenario_names:
        incompatible += _reparametrised(added, removed, scenario_names)
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


def _incompatible(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, stored, new) of every change of a key other than a growing axis or a label."""
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
    return incompatible


def _reparametrised(
    added: list[dict[str, Any]], removed: list[dict[str, Any]], scenario_names: Mapping[str, str]
) -> list[tuple[str, Any, Any]]:
    """Pairs of a removed and an added spec building the same scenario name: each becomes one
    incompatible change and leaves `added` and `removed` (edited in place)."""
    out = []
    named = {scenario_names.get(scenario_key(s)): s for s in removed}
    named.pop(None, None)  # a spec whose name is not known matches nothing
    for spec in list(added):
        old_spec = named.get(scenario_names.get(scenario_key(spec)))
        if old_spec is not None:
            name = scenario_names[scenario_key(spec)]
            out.append((f"scenarios[{name}]", old_spec, spec))
            added.remove(spec)
            removed.remove(old_spec)
    return out


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
        before, after = option.value_or_default(old, key), option.value_or_default(new, key)
        if option.compared(before) != option.compared(after):
            out.append((f"trainer.{key}", before, after))
    return out
