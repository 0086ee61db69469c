"""A study backend for the safe-text tests: the synthetic backend under hostile names.

Algorithm ``HOSTILE[k]`` behaves as the k-th synthetic algorithm; its name holds a newline, a
tab, a bidi override (U+202E), a pipe or a backslash, as a user's registered name may. A
scenario given a ``label`` is named ``label``. The synthetic backend's test hooks
(``fail_algorithms``, ``warn_algorithms``) take the hostile names.
"""

from __future__ import annotations

from typing import Any

from oodeval.study import synthetic

HOSTILE = ("ERM\nnew", "IRM\there", "V\u202eREx", "Group|DRO", "Mix\\nup")
"""One name per synthetic algorithm, each with a character a terminal must not print raw."""


def _synthetic(algorithm: str) -> str:
    return dict(zip(HOSTILE, synthetic.ALGORITHMS, strict=False)).get(algorithm, algorithm)


def available() -> list[str]:
    return [*synthetic.available(), *HOSTILE]


def default_hparams(algorithm: str) -> dict:
    return synthetic.default_hparams(_synthetic(algorithm))


def sample_hparams(algorithm: str, seed: int) -> dict:
    return synthetic.sample_hparams(_synthetic(algorithm), seed)


def build_scenario(family: str, *, label: str = "", **params: Any) -> Any:
    scenario = synthetic.build_scenario(family, **params)
    if label:
        scenario.name = label
    return scenario


def run_unit(scenario: Any, algorithm: str, **options: Any) -> Any:
    for hook in ("fail_algorithms", "warn_algorithms"):  # the test hooks name hostile names
        if hook in options:
            options[hook] = [_synthetic(a) for a in options[hook]]
    result = synthetic.run_unit(scenario, _synthetic(algorithm), **options)
    result.algorithm = algorithm
    return result
