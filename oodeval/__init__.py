"""oodeval: trustworthy evaluation of models under distribution shift.

The public Python API; every name is imported on first use, so ``import oodeval`` stays light
(it imports neither pandas, torch, matplotlib nor scipy.stats):

- `score`: score long-form results (a DataFrame, a file or a list of rows) -> `Scores`
- `Scores`: the measures, rankings, correlation with the ideal measure, each measure's choice,
  degradation and the one-line `Scores.answer`
- `read_domainbed`: a DomainBed sweep folder -> long-form results for `score`
- `load_study`, `analyze`: read a measure study's folder and compute the worst+gap paper's
  analyses as DataFrames
- `register_measure`, `get_measure`: add your own measure; look one up by name or spec
  (``cvar:alpha=0.25``)
- `measures`: the measures themselves (`oodeval.measures.worst_plus_gap`, ...)
- `OodevalError`: the exception raised for bad input (a `ValueError`)

>>> import oodeval
>>> oodeval.__version__
'0.1.0'
>>> rows = [{"algorithm": a, "environment": e, "split": "loo", "error": err}
...         for a, errs in {"ERM": (0.1, 0.2, 0.6), "IRM": (0.3, 0.3, 0.4)}.items()
...         for e, err in zip(("e1", "e2", "e3"), errs)]
>>> oodeval.score(rows).answer
'worst+gap picks IRM; average picks ERM (they disagree)'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oodeval._lazy import lazy_attributes
from oodeval.errors import OodevalError

__version__ = "0.1.0"

# name -> module that defines it; imported on first access (PEP 562)
_LAZY = {
    "score": "oodeval.results.scoring",
    "Scores": "oodeval.results.scoring",
    "read_domainbed": "oodeval.results.domainbed",
    "load_study": "oodeval.study.store",
    "analyze": "oodeval.study.analysis",
    "register_measure": "oodeval.measures.registry",
    "get_measure": "oodeval.measures.registry",
}
_SUBMODULES = ("measures",)

__all__ = [
    "OodevalError",
    "Scores",
    "__version__",
    "analyze",
    "get_measure",
    "load_study",
    "measures",
    "read_domainbed",
    "register_measure",
    "score",
]

if TYPE_CHECKING:  # for type checkers and documentation tools; never run
    from oodeval import measures
    from oodeval.measures import get_measure, register_measure
    from oodeval.results.domainbed import read_domainbed
    from oodeval.results.scoring import Scores, score
    from oodeval.study.analysis import analyze
    from oodeval.study.store import load_study


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY, __all__, _SUBMODULES)
