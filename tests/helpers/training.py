"""Tiny synthetic scenarios for the leave-one-environment-out trainer (numpy data, no files)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from oodeval.environments.base import Environment, Scenario

SHAPE = (2, 14, 14)


def synthetic_env(
    name: str, n: int, seed: int, spurious: float, num_classes: int = 2
) -> Environment:
    """Class y brightens channel 0 (invariant); channel 1 agrees with y with prob. `spurious`."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, n)
    x = rng.random((n, *SHAPE), dtype=np.float32) * 0.5
    x[:, 0] += 0.25 * y[:, None, None]
    agree = rng.random(n) < spurious
    x[:, 1] += 0.25 * np.where(agree, y, 1 - y)[:, None, None]
    return Environment(name, x.astype(np.float32), y.astype(np.int64))


class TinyScenario(Scenario):
    """Three given environments and five evaluation environments of synthetic 2x14x14 images."""

    name = "tiny"
    num_classes = 2
    input_shape = SHAPE

    def __init__(self, n: int = 40, replace: dict[int, Environment] | None = None) -> None:
        self.n, self.replace = n, replace or {}
        self.params = {}

    @property
    def given_names(self) -> list[str]:
        return ["e=0.9", "e=0.8", "e=0.1"]

    @property
    def all_names(self) -> list[str]:
        return [f"t{i}" for i in range(5)]

    def given(self) -> list[Environment]:
        envs = [
            synthetic_env(nm, self.n, i, float(nm[2:])) for i, nm in enumerate(self.given_names)
        ]
        return [self.replace.get(i, env) for i, env in enumerate(envs)]

    def evaluation(self) -> Iterator[Environment]:
        for i, nm in enumerate(self.all_names):
            yield synthetic_env(nm, 30 + i, 100 + i, i / 4)


class TwoGiven(TinyScenario):
    @property
    def given_names(self) -> list[str]:
        return ["e=0.9", "e=0.1"]


def counted_file_reads(monkeypatch) -> list[str]:
    """The paths `oodeval._digest.file_bytes` reads from now on, in order (it still reads them):
    how the tests count the reads of a weights file."""
    from oodeval import _digest

    reads: list[str] = []
    real = _digest.file_bytes

    def counted(where):
        reads.append(str(where))
        return real(where)

    monkeypatch.setattr(_digest, "file_bytes", counted)
    return reads
