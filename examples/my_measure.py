"""Your own evaluation measure in oodeval: two examples to copy, and how to judge them.

A measure is a function of errors over environments: it gets a float64 array of shape
``(..., N)`` (error fractions, environments on the LAST axis, any leading axes for algorithms
and seeds) and returns one value per leading index. Lower must be better. This file registers:

- ``second_worst`` (plain, ``@register_measure``): the worst error once the single worst
  environment is dropped, R_(N-1) with R_(1) <= ... <= R_(N) sorted; needs N >= 2.
- ``entropic:t=T`` (a family, ``@register_measure_family``): the entropic risk over
  environments, (1/t) log((1/N) sum_n exp(t R_n)), t > 0. It lies between the average
  (t -> 0) and the worst (t -> infinity); computed as m + (1/t) log mean exp(t (R_n - m)),
  m = max_n R_n, so that exp never overflows.

Use it (from the repository root):

- in Python: ``import`` this file (or define the functions in your session), then any
  measure-taking function accepts the names: ``oodeval.score(rows, measures=["entropic:t=10"])``;
- in a study config: ``imports = ["my_measure.py"]`` (relative to the config) and
  ``measures = ["worst_plus_gap", "entropic:t=10"]``;
- on the command line: ``oodeval measures examples/results.csv --imports examples/my_measure.py
  --measures second_worst,entropic:t=10,worst_plus_gap`` (also ``study analyze`` and
  ``report``), or run this file: ``python examples/my_measure.py [STUDY_FOLDER]`` scores
  examples/results.csv, and with a finished study's folder compares the measures' rank
  correlation with the ideal measure per scenario, from the stored errors (nothing is trained).

>>> second_worst(np.array([[0.1, 0.4, 0.2, 0.3]]))
array([0.3])
>>> round(float(entropic(t=1e-9)(np.array([0.1, 0.3]))), 6)  # ~ the average
0.2
>>> round(float(entropic(t=1e4)(np.array([0.1, 0.3]))), 3)  # ~ the worst
0.3
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import oodeval
from oodeval.measures import register_measure, register_measure_family

HERE = Path(__file__).resolve().parent
COMPARED = ["second_worst", "entropic:t=10", "worst_plus_gap", "average"]


@register_measure(
    "second_worst",
    label="2nd worst",
    description="the worst LOO error once the single worst environment is dropped",
    min_envs=2,
)
def second_worst(errors: np.ndarray) -> np.ndarray:
    """R_(N-1): the second largest error over environments (last axis)."""
    return np.sort(errors, axis=-1)[..., -2]


@register_measure_family(
    "entropic",
    params={"t": float},
    label="entropic_{t}",
    description="entropic risk (1/t) log mean exp(t R) over environments",
)
def entropic(t: float):
    """The entropic risk with temperature `t` > 0, as a function of errors (..., N)."""
    if t <= 0:
        raise oodeval.OodevalError(
            f"measure entropic: t must be > 0, got {t:g}; e.g. entropic:t=10"
        )

    def entropic_risk(errors: np.ndarray) -> np.ndarray:
        errors = np.asarray(errors, dtype=np.float64)
        m = errors.max(axis=-1)
        return m + np.log(np.mean(np.exp(t * (errors - m[..., None])), axis=-1)) / t

    return entropic_risk


def study_comparison(folder: str) -> str:
    """Per scenario, the mean Spearman rho with the ideal measure of each compared measure."""
    from oodeval.study import load_study
    from oodeval.study.analysis import correlation_with_ideal, study_unit_measures

    frame = study_unit_measures(load_study(folder), COMPARED)
    table = correlation_with_ideal(frame, COMPARED)
    columns = ["scenario", *(f"rho_{m}_mean" for m in COMPARED)]
    return table[columns].round(3).to_string(index=False)


def main(argv: list[str]) -> int:
    scores = oodeval.score(HERE / "results.csv", measures=COMPARED)
    print(scores.answer)
    print(scores.measures.round(4).to_string(index=False))
    if scores.correlations is not None:
        print(scores.correlations.round(3).to_string(index=False))
    for folder in argv:
        print(f"\n{folder}: rank correlation with the ideal measure (Spearman, mean over seeds)")
        print(study_comparison(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
