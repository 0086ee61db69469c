"""The study config itself: `StudyConfig`, and building one from a TOML file or plain data.

A study is the worst+gap paper's experiment (Sections 5-6): every algorithm is trained on every
scenario with every seed; each such *unit* yields leave-one-environment-out errors and the errors
of the model trained on all given environments, from which the analyses compute the measures.

Everything is validated before a study folder is touched, and every problem is reported at once:
`config_from_dict` checks each key's type and range (`oodeval.study.config.parsing`, the
``[trainer]`` keys by `oodeval.study.config.keys.TRAINER_OPTIONS`) and, when something is wrong,
asks the backend about the rest (`oodeval.study.config.backend.validate_config`). Several
problems raise one `ConfigError` whose one-line message counts them and shows the first
`oodeval.study.config.keys.SHOWN_PROBLEMS`; its ``problems`` attribute holds them all.

>>> cfg = config_from_dict({"scenarios": ["synthetic"], "algorithms": ["ERM"], "seeds": [0],
...                         "steps": 5, "backend": "oodeval.study.synthetic"})
>>> cfg.replace(steps=6).steps, cfg.source
(6, 'auto')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from oodeval.environments.mnist import MNIST_ENV_VAR
from oodeval.study.config.backend import backend_problems, grid_problems_of_partial
from oodeval.study.config.imports import import_problem
from oodeval.study.config.keys import (
    DEFAULT_BACKEND,
    DEFAULT_MEASURES,
    ConfigError,
    ScenarioSpec,
)
from oodeval.study.config.parsing import (
    parsed_fields,
    registered_measures,
    toml_table,
    unknown_measures,
)


@dataclass(frozen=True)
class StudyConfig:
    """A validated study configuration (see `oodeval.study.config` for the TOML form).

    Attributes
    ----------
    name : a label for the study.
    backend : a built-in backend (`BUILT_IN_BACKENDS`; default: the real trainer,
        `DEFAULT_BACKEND`), an ``oodeval.backends`` entry point, or a dotted module path whose
        source defines ``build_scenario``, ``available``, ``default_hparams``,
        ``sample_hparams`` and ``run_unit`` (checked without importing it), and optionally
        ``available_models`` (without it, ``model`` is not checked up front).
    imports : extra modules imported in the parent and in every worker before anything else
        (once per process), e.g. a module that registers your own algorithm with
        ``oodeval.algorithms.register_algorithm``: module names, or paths of ``.py`` files
        (`import_module_or_file`), stored absolute. One that registers nothing is refused.
    import_digests : {path: `code_digest`} of each ``.py`` file of ``imports``, computed when the
        config is built unless given (a stored config carries them).
    source : image source spec: ``auto`` (the default: real MNIST, resolved by
        `resolve_source` when the study runs), ``digits``, ``mnist:DIR``, .... Once resolved,
        the path is a hint: the data is identified by `source_identity`.
    source_identity : ``{"kind", "digest"}`` of the resolved source's content
        (`oodeval.environments.sources.source_identity`), computed when the config is built
        unless given (a stored config carries it); None while the source is ``auto``.
    data_seed : seed of the scenario data (colors, label noise, image split); fixed per study.
    scenarios, algorithms, seeds : the grid; a unit is one (scenario, algorithm, seed). A
        scenario with a ``source`` of its own reads it instead of the study's (`ScenarioSpec`).
    steps, model : training length and model family for every unit.
    hparams_mode : ``default`` (the algorithm's defaults) or ``random`` (``sample_hparams(name,
        seed)``); ``hparams`` then overrides single values per algorithm.
    hparams : ``{algorithm: {name: value}}``, overrides of single hyperparameters (the
        ``[hparams.ALGORITHM]`` tables), checked against the algorithm's own.
    trainer : extra keyword arguments of ``run_unit`` (selection, eval_every, holdout_fraction,
        batch_size, precision: ``"fp32"`` or ``"bf16"``, device: ``"cpu"``, ``"cuda"``,
        ``"cuda:N"`` or ``"auto"``, tf32: ``"default"`` or ``"off"``, augment: ``true`` for
        DomainBed's image training augmentation, imagenet_normalize: ``false`` to feed the
        ResNets unnormalised images (default ``true``, DomainBed's ImageNet normalisation; a
        default is never stored), pretrained: the path of a torchvision
        ``state_dict`` file for the ResNets, relative to the config file and stored absolute;
        rules in `TRAINER_OPTIONS`).
    pretrained_sha256 : the SHA-256 of the ``[trainer] pretrained`` file, computed when the
        config is built unless given (a stored config carries it); studies compare their
        weights by it, never by the path. None without pretrained weights.
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
    pretrained_sha256: str | None = None
    measures: tuple[str, ...] = DEFAULT_MEASURES
    unit_options: dict[str, Any] = field(default_factory=dict)

    def reads_source(self) -> bool:
        """Whether a scenario reads the study's ``source``: one without a ``source`` of its own
        (a study whose scenarios all name their data leaves ``source = "auto"`` unresolved)."""
        return any(spec.source is None for spec in self.scenarios)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; `config_from_dict(cfg.to_dict()) == cfg`."""
        out = asdict(self)
        out["scenarios"] = [s.to_dict() for s in self.scenarios]
        for key in ("algorithms", "seeds", "imports", "measures"):
            out[key] = list(out[key])
        if out["pretrained_sha256"] is None:  # the stored configs of studies without weights
            del out["pretrained_sha256"]
        return out

    def to_json(self) -> str:
        """Canonical JSON (sorted keys) of the config; what the store keeps and compares."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def replace(self, **changes: Any) -> StudyConfig:
        """A copy with some fields changed, re-validated; a new source gets its own identity,
        a new ``[trainer] pretrained`` file its own digest."""
        data = self.to_dict()
        if "source" in changes and changes["source"] != self.source:
            data.pop("source_identity")
        if "trainer" in changes and (changes["trainer"] or {}).get("pretrained") != (
            self.trainer.get("pretrained")
        ):
            data.pop("pretrained_sha256", None)
        data.update(changes)
        return config_from_dict(data)


#: The top-level keys a config may hold: the fields of StudyConfig (``source_identity``,
#: ``import_digests`` and ``pretrained_sha256`` are computed; only a stored config writes them).
CONFIG_KEYS = frozenset(f.name for f in fields(StudyConfig))


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
    """Read a TOML study config and check every key (`config_from_dict`).

    Parameters
    ----------
    path : the TOML file; ``name`` defaults to its stem, and a ``.py`` path of ``imports`` is
        relative to its folder.

    Returns
    -------
    StudyConfig
        The checked config. A missing or unreadable file raises `OodevalError`; every problem of
        its keys, one `ConfigError`.
    """
    data, problems = toml_table(Path(path))
    return _checked_config(data, problems)


def config_from_dict(data: Mapping[str, Any], *, run_user_code: bool = True) -> StudyConfig:
    """Build a StudyConfig from plain data (parsed TOML or stored JSON), checking every key.

    Checks every key's type and range and, for a concrete source, computes its identity (and the
    digest of every ``.py`` file of ``imports``, a relative path being relative to the working
    directory, unless ``import_digests`` gives it). When
    anything is wrong, the backend is asked about the rest too (`validate_config`'s checks) and
    one `ConfigError` lists every problem found.

    No user code runs unless every other key is good and a measure name is unknown yet: only
    the config's ``imports`` can register it, so they are imported then (once per process,
    `import_problem`); the backend is never imported here (`import_backend` does it).

    Parameters
    ----------
    data : a table of config keys, as TOML parses it or `StudyConfig.to_dict` writes it.
    run_user_code : False keeps a measure name unknown yet as written instead of importing the
        ``imports``, and the backend unchecked (`study merge` combines stored configs without
        running their code, on a machine that need not have their backend installed).

    Returns
    -------
    StudyConfig
        The checked config; `config_from_dict(cfg.to_dict()) == cfg`.
    """
    return _checked_config(data, [], run_user_code=run_user_code)


def _checked_config(data: Any, problems: list[str], *, run_user_code: bool = True) -> StudyConfig:
    """Every key checked without running user code; then, only when a measure name is unknown
    yet, the config's ``imports`` imported (once per process) and the names looked up again."""
    if not isinstance(data, Mapping):
        raise ConfigError(["a study config must be a table of keys"])
    values, bad = parsed_fields(data, problems, CONFIG_KEYS)
    if run_user_code and "backend" not in bad:  # a merge keeps the stored name as written
        found = backend_problems(values["backend"])  # nothing imported to refuse it
        problems += found
        bad.update({"backend"} if found else ())
    if problems:
        problems += grid_problems_of_partial(StudyConfig(**values), bad)
        raise ConfigError(problems)
    if run_user_code and unknown_measures(values["measures"]):  # only imports register them
        problems += [p for p in (import_problem(i, "imports") for i in values["imports"]) if p]
        if not problems:
            values["measures"] = registered_measures(values["measures"], (), problems)
        if problems:
            raise ConfigError(problems)
    return StudyConfig(**values)
