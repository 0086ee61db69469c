"""oodeval.results: read and score results produced elsewhere.

- `score`, `Scores`, `score_results` (`oodeval.results.scoring`): the meta-evaluation tables;
- `read_results`, `results_from_frame`, `LongResults` (`oodeval.results.longform`): long-form
  results files and DataFrames, validated;
- `read_domainbed` (`oodeval.results.domainbed`) and `read_sweep` (`oodeval.results.sweep`):
  DomainBed sweep folders.

Names are imported on first use (PEP 562), so importing one submodule does not import the rest.

>>> from oodeval.results import read_results
>>> read_results("examples/results.csv").algorithms  # doctest: +SKIP
('ERM', 'IRM', 'VREx', 'GroupDRO', 'Mixup')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oodeval._lazy import lazy_attributes

_LAZY = {
    "LongResults": "oodeval.results.longform",
    "read_results": "oodeval.results.longform",
    "results_from_frame": "oodeval.results.longform",
    "Scores": "oodeval.results.scoring",
    "score": "oodeval.results.scoring",
    "score_results": "oodeval.results.scoring",
    "read_domainbed": "oodeval.results.domainbed",
    "read_sweep": "oodeval.results.sweep",
}

__all__ = [
    "LongResults",
    "Scores",
    "read_domainbed",
    "read_results",
    "read_sweep",
    "results_from_frame",
    "score",
    "score_results",
]

if TYPE_CHECKING:  # for type checkers and documentation tools; never run
    from oodeval.results.domainbed import read_domainbed
    from oodeval.results.longform import LongResults, read_results, results_from_frame
    from oodeval.results.scoring import Scores, score, score_results
    from oodeval.results.sweep import read_sweep


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY, __all__)
