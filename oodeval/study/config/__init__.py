"""Study configurations: what to train (scenarios x algorithms x seeds) and how, read from TOML.

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

A scenario may read data of its own: ``source = "folder:DIR"`` in its table (identified by its
content like the study's source) and ``dataset = "PACS-corrupted"``, a name that leads the
scenario's name; the image presets (`oodeval.study.presets`) give each dataset's scenarios
their folder this way::

    [[scenarios]]
    family = "corrupted"
    pattern = "1-1-1-1"
    dataset = "PACS-corrupted"
    source = "folder:/data/PACS"

The package, one responsibility per module, each importing only the ones above it:

- `keys`: the keys' names, limits and value rules, `ConfigError`, the ``[trainer]`` table
  (`TRAINER_OPTIONS`) and `ScenarioSpec`;
- `imports`: the config's user ``imports`` (modules or ``.py`` files) and their code digests;
- `parsing`: plain data (TOML, stored JSON) to checked field values, every problem at once;
- `backend`: `TrainerBackend` (what a study backend defines), importing it, and its checks
  of the whole grid (`validate_config`);
- `schema`: `StudyConfig` itself, `config_from_dict` and `load_config`;
- `growth`: how a new config differs from a stored study's (`config_changes`).

Every public name is importable from ``oodeval.study.config`` itself.

>>> from oodeval.study.config import StudyConfig, config_from_dict
>>> config_from_dict({"scenarios": ["synthetic"], "algorithms": ["ERM"], "seeds": [0],
...                   "steps": 5, "backend": "oodeval.study.synthetic"}).name
'study'
"""

from oodeval.study.config.backend import (
    BACKEND_FUNCTIONS,
    BuiltScenario,
    TrainerBackend,
    ValidatedConfig,
    available_models,
    build,
    import_backend,
    pretrained_problems,
    resolved_hparams,
    study_weights,
    validate_config,
    weights_change,
)
from oodeval.study.config.growth import (
    ConfigChanges,
    config_changes,
    differing_keys,
    scenario_key,
    stored_meaning,
)
from oodeval.study.config.imports import (
    IMPORT_VERSION_PREFIX,
    code_digest,
    import_module_or_file,
    is_path_import,
    resolved_import,
)
from oodeval.study.config.keys import (
    BATCH_SIZE_LIMIT,
    CHECKPOINT_SELECTIONS,
    DEFAULT_BACKEND,
    DEFAULT_MEASURES,
    HPARAMS_MODES,
    PRECISIONS,
    SEED_LIMIT,
    SHOWN_PROBLEMS,
    STEPS_LIMIT,
    TRAINER_KEYS,
    TRAINER_OPTIONS,
    ConfigError,
    ScenarioSpec,
    TrainerOption,
    integer_in,
    one_of,
)
from oodeval.study.config.schema import StudyConfig, config_from_dict, data_note, load_config

__all__ = [
    "BACKEND_FUNCTIONS",
    "BuiltScenario",
    "BATCH_SIZE_LIMIT",
    "CHECKPOINT_SELECTIONS",
    "DEFAULT_BACKEND",
    "DEFAULT_MEASURES",
    "HPARAMS_MODES",
    "IMPORT_VERSION_PREFIX",
    "PRECISIONS",
    "SEED_LIMIT",
    "SHOWN_PROBLEMS",
    "STEPS_LIMIT",
    "TRAINER_KEYS",
    "TRAINER_OPTIONS",
    "ConfigChanges",
    "ConfigError",
    "ScenarioSpec",
    "StudyConfig",
    "TrainerBackend",
    "ValidatedConfig",
    "TrainerOption",
    "available_models",
    "build",
    "code_digest",
    "config_changes",
    "config_from_dict",
    "data_note",
    "differing_keys",
    "import_backend",
    "import_module_or_file",
    "integer_in",
    "is_path_import",
    "load_config",
    "one_of",
    "pretrained_problems",
    "resolved_hparams",
    "resolved_import",
    "scenario_key",
    "stored_meaning",
    "study_weights",
    "validate_config",
    "weights_change",
]
