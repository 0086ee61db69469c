"""The measure study of the worst+gap paper: configs, resumable runs, the results store, analyses.

>>> from oodeval.study import preset
>>> cfg = preset("quick")
>>> len(cfg.algorithms), len(cfg.scenarios), cfg.seeds
(8, 3, (0,))
"""

from oodeval.study.config import StudyConfig, config_from_dict, load_config, validate_config
from oodeval.study.presets import preset, preset_names
from oodeval.study.read_model import Study, load_study
from oodeval.study.runner import RunSummary, StudyInterrupted, run_study
from oodeval.study.store import ResultStore, unit_key

__all__ = [
    "ResultStore",
    "RunSummary",
    "Study",
    "StudyConfig",
    "StudyInterrupted",
    "config_from_dict",
    "load_config",
    "load_study",
    "preset",
    "preset_names",
    "run_study",
    "unit_key",
    "validate_config",
]
