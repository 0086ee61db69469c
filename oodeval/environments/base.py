"""The one environment interface every dataset family implements.

A scenario names its given environments (E_given, used for training and leave-one-out testing) and
all environments (E_all, used by the ideal measure), and yields each environment's data on demand so
that 101 environments never need to sit in memory as full image copies at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from oodeval.errors import OodevalError, listing


@dataclass(frozen=True)
class Environment:
    """One environment's data: float32 images (N x C x H x W, values in [0, 1]), int64 labels.

    Every family's `meta` holds ``role`` ("given" or "evaluation") and ``indices`` (int64 (N,),
    the source row each image was made from, so environments sharing images can be told apart).
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    meta: dict = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def split(self, holdout_fraction: float, seed: int) -> tuple[Environment, Environment]:
        """Return (train, validation) parts; `holdout_fraction` of the rows go to validation.

        The permutation depends only on `seed` and the environment name, so it is reproducible.
        Per-row arrays in `meta` (length N, e.g. color labels) are split along with the rows.
        """
        n = len(self)
        rng = np.random.default_rng([seed, _stable_hash(self.name)])
        order = rng.permutation(n)
        n_val = int(round(holdout_fraction * n))
        val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
        return (
            Environment(self.name, self.images[train], self.labels[train], self._meta_rows(train)),
            Environment(self.name, self.images[val], self.labels[val], self._meta_rows(val)),
        )

    def _meta_rows(self, rows: np.ndarray) -> dict:
        n = len(self)
        return {
            k: v[rows] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v
            for k, v in self.meta.items()
        }


@dataclass(frozen=True)
class SharedEvaluation:
    """E_all as variants of one set of held-out images, for testing a model once per variant.

    Environment ``names[j]`` holds, at row i, image i rendered in variant ``variants[j][i]`` with
    label ``labels[i]``; ``render(v)`` gives all images rendered in variant v. A model whose
    predictions do not depend on the rest of the batch is therefore tested on all of E_all by
    predicting ``render(v)`` for each of the few distinct variants v (two colors for SR-CMNIST)
    instead of 101 environments' images, with identical results.
    """

    names: tuple[str, ...]
    labels: np.ndarray
    variants: tuple[np.ndarray, ...]
    render: Callable[[int], np.ndarray]

    def __post_init__(self) -> None:
        n = np.shape(self.labels)
        if not self.names or len(self.variants) != len(self.names):
            raise OodevalError(
                f"a shared evaluation needs one variant array per environment, got "
                f"{len(self.variants)} for {len(self.names)} environment name(s)"
            )
        bad = [nm for nm, v in zip(self.names, self.variants, strict=True) if np.shape(v) != n]
        if bad:
            raise OodevalError(
                f"variants of {listing(bad)} do not have one entry per image ({n[0]} labels)"
            )

    def values(self) -> list[int]:
        """The distinct variants used by any environment, ascending."""
        return np.unique(np.concatenate(self.variants)).tolist()


class Scenario(ABC):
    """A named choice of E_given and E_all over one data family.

    Subclasses implement `given()` and `evaluation()`; both are deterministic given the scenario's
    seed. Names are strings such as ``"e=0.10"`` and are unique within a scenario.
    """

    name: str = "scenario"
    num_classes: int = 2
    input_shape: tuple[int, int, int] = (2, 14, 14)
    #: The family parameters the scenario was built with, e.g. {"ratio": "3:1", "scale": 1}.
    params: dict = {}

    @property
    @abstractmethod
    def given_names(self) -> Sequence[str]:
        """Names of E_given, in training order."""

    @property
    @abstractmethod
    def all_names(self) -> Sequence[str]:
        """Names of E_all, in evaluation order."""

    @abstractmethod
    def given(self) -> list[Environment]:
        """The given environments' training data (disjoint images), in `given_names` order."""

    @abstractmethod
    def evaluation(self) -> Iterator[Environment]:
        """The environments of E_all built from held-out images, in `all_names` order."""

    def shared_evaluation(self) -> SharedEvaluation | None:
        """E_all as variants of shared images (`SharedEvaluation`), or None (the default) when
        its environments must be tested one by one."""
        return None

    def sizes(self) -> dict[str, dict[str, int]]:
        """Images per environment: {"given": {name: n}, "evaluation": {name: n}}.

        This default builds every environment; families override it with a cheap count.
        """
        return {
            "given": {env.name: len(env) for env in self.given()},
            "evaluation": {env.name: len(env) for env in self.evaluation()},
        }


def _stable_hash(text: str) -> int:
    """A process-independent 32-bit hash of `text` (Python's hash() is salted per process)."""
    import zlib

    return zlib.crc32(text.encode("utf-8"))
