"""The measure study of the worst+gap paper: configs, resumable runs, the results store, analyses.

Every name is imported on first use (`oodeval._lazy`), so importing a submodule
(``oodeval.study.executors``, which the command line reads for its options) does not import the
whole study stack.

>>> from oodeval.study import preset
>>> cfg = preset("quick")
>>> len(cfg.algorithms), len(cfg.scenarios), cfg.seeds
(8, 3, (0,))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oodeval._lazy import lazy_attributes

# name -> module that defines it; imported on first access (PEP 562)
_LAZY = {
    "StudyConfig": "oodeval.study.config",
    "config_from_dict": "oodeval.study.config",
    "load_config": "oodeval.study.config",
    "validate_config": "oodeval.study.config",
    "preset": "oodeval.study.presets",
    "preset_names": "oodeval.study.presets",
    "RunSummary": "oodeval.study.runner",
    "StudyInterrupted": "oodeval.study.runner",
    "run_study": "oodeval.study.runner",
    "ResultStore": "oodeval.study.store",
    "Study": "oodeval.study.store",
    "load_study": "oodeval.study.store",
    "unit_key": "oodeval.study.store",
}

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

if TYPE_CHECKING:  # for type checkers and documentation tools; never run
    from oodeval.study.config import StudyConfig, config_from_dict, load_config, validate_config
    from oodeval.study.presets import preset, preset_names
    from oodeval.study.runner import RunSummary, StudyInterrupted, run_study
    from oodeval.study.store import ResultStore, Study, load_study, unit_key


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY, __all__)
