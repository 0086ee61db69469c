"""A study backend for the report tests: the synthetic backend under names of any length.

Algorithm ``name(k, length)`` behaves as the k-th synthetic algorithm; a scenario given a
``label`` is the synthetic scenario of its Ratio and Scale, named ``label``. So two studies that
differ only in the length of their names hold the same numbers, and their reports differ only in
how the names are shown.
"""

from __future__ import annotations

from typing import Any

from oodeval.study import synthetic

LENGTHS = (12, 40, 5000)
"""The name lengths the backend knows: short, the report's clip width, and the issue's 5,000."""


def name(k: int, length: int, *, kind: str = "algorithm") -> str:
    """A deterministic name of exactly `length` characters, distinct in its first characters."""
    head = f"{kind}{k}-"
    body = "<b>&" + "".join(chr(ord("a") + (i * 7 + k) % 26) for i in range(length))
    return (head + body)[:length] if length > len(head) + 4 else (head + "x" * length)[:length]


def _synthetic(algorithm: str) -> str:
    for length in LENGTHS:
        for k, base in enumerate(synthetic.ALGORITHMS):
            if algorithm == name(k, length):
                return base
    return algorithm


def available() -> list[str]:
    return [*synthetic.available()] + [
        name(k, n) for n in LENGTHS for k in range(len(synthetic.ALGORITHMS))
    ]


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
    result = synthetic.run_unit(scenario, _synthetic(algorithm), **options)
    result.algorithm = algorithm
    return result
