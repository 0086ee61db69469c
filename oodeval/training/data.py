"""A unit's training data as tensors on its device, and the model runs that consume it.

`prepare_data` splits each given environment by the seeded holdout and gathers the parts as
tensors on the unit's device once (`UnitData`); `UnitData.minibatches` draws a step's minibatches
and `TrainingRun.minibatches` hands each algorithm instance its share. `on_device` keeps numpy
evaluation images on a GPU once per process.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from oodeval.algorithms import Algorithm
from oodeval.algorithms.networks import compute_dtype
from oodeval.environments.base import Environment, Scenario
from oodeval.errors import OodevalError
from oodeval.training.options import TrainerOptions


@dataclass
class TrainingRun:
    """One algorithm instance and the unit models it holds.

    ``envs[i, j]`` is the given environment in training slot j of its model i.
    """

    algorithm: Algorithm
    envs: torch.Tensor
    models: list[int]
    #: the slots' index on the device of the minibatches (moved there once), or None for all
    #: slots in order (the minibatches as they are)
    _index: dict[torch.device, torch.Tensor | None] = field(default_factory=dict)

    def minibatches(self, xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This run's share of a step's minibatches: shared (E, B, ...) for a single model, else
        per model (M, E, B, ...)."""
        if xb.device not in self._index:
            rows = self.envs[0] if len(self.models) == 1 else self.envs
            whole = rows.dim() == 1 and torch.equal(rows, torch.arange(len(xb)))
            self._index[xb.device] = None if whole else rows.to(xb.device)
        index = self._index[xb.device]
        if index is None:
            return xb, yb
        return xb[index], yb[index]


@dataclass
class UnitData:
    """A unit's data as tensors: the training parts of the N given environments, concatenated
    (environment k's rows at ``offsets[k]:offsets[k] + sizes[k]``), and their validation parts."""

    x: torch.Tensor  # on the unit's device, as are y and the validation images
    y: torch.Tensor
    sizes: torch.Tensor  # float64: a uniform draw in [0, 1) times a size is a row index
    offsets: torch.Tensor
    val: list[tuple[torch.Tensor, torch.Tensor]]
    #: the "in" part of each given environment (its training rows), for the checkpoint records
    held_in: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def minibatches(
        self, generator: torch.Generator, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step's minibatches (N, B, ...): B rows drawn with replacement per environment."""
        sizes = self.sizes
        draw = torch.rand(len(sizes), batch_size, generator=generator, dtype=torch.float64)
        idx = self.offsets[:, None] + (draw * sizes[:, None]).long().clamp_max(
            sizes.long()[:, None] - 1
        )
        # drawn on the CPU: the same minibatches on every device; copied without waiting for it
        idx = idx.to(self.x.device, non_blocking=True)
        return self.x[idx], self.y[idx]


def prepare_data(
    scenario: Scenario,
    given: Sequence[Environment],
    seed: int,
    options: TrainerOptions,
    device: str = "cpu",
) -> UnitData:
    """Split each given environment (seeded holdout) and gather the parts as tensors on `device`
    (moved there once); check them."""
    parts = [env.split(options.holdout_fraction, seed) for env in given]
    for env, (train, held_out) in zip(given, parts, strict=True):
        if len(train) == 0 or (options.selection == "training_domain" and len(held_out) == 0):
            raise OodevalError(
                f"environment {env.name!r} ({len(env)} rows) leaves an empty training or "
                f"validation part with holdout_fraction={options.holdout_fraction}; give it "
                "more data"
            )
    train_x = torch.from_numpy(np.concatenate([t.images for t, _ in parts]).astype(np.float32))
    train_y = torch.from_numpy(np.concatenate([t.labels for t, _ in parts]).astype(np.int64))
    on_cpu = torch.device(device).type == "cpu"
    if options.precision != "fp32" and on_cpu:  # the first product rounds them: half the bytes
        train_x = train_x.to(compute_dtype(options.precision))
    sizes = torch.tensor([len(t) for t, _ in parts], dtype=torch.float64)
    offsets = torch.cumsum(sizes, 0).long() - sizes.long()
    val = [
        (torch.from_numpy(v.images.astype(np.float32)).to(device), torch.from_numpy(v.labels))
        for _, v in parts
    ]  # labels stay on the CPU, where the predictions come back
    labels = train_y
    train_x, train_y = train_x.to(device), train_y.to(device)
    held_in = [
        (train_x[o : o + s], labels[o : o + s])
        for o, s in zip(offsets.tolist(), sizes.long().tolist(), strict=True)
    ]
    input_shape = tuple(train_x.shape[1:])
    if input_shape != tuple(scenario.input_shape):
        raise OodevalError(
            f"scenario {scenario.name!r} declares input_shape {tuple(scenario.input_shape)} but "
            f"its images have shape {input_shape}; make them agree"
        )
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < scenario.num_classes:
        raise OodevalError(
            f"labels must lie in [0, {scenario.num_classes}) for scenario {scenario.name!r}, got "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    return UnitData(train_x, train_y, sizes, offsets, val, held_in)


#: float32 copies of numpy images on a GPU, by (id of the array, device); an entry leaves with
#: its array (a weak reference), so a worker keeps its scenario's evaluation images there once
_ON_DEVICE: dict[tuple[int, str], tuple[weakref.ref, torch.Tensor]] = {}


def on_device(images: np.ndarray, device: torch.device | str) -> torch.Tensor:
    """`images` as a float32 tensor on `device`: on the CPU as before (no copy for float32 images),
    elsewhere copied once per process and array and kept while the array lives."""
    device = torch.device(device)
    if device.type == "cpu":
        return torch.as_tensor(images, dtype=torch.float32)
    key = (id(images), str(device))
    hit = _ON_DEVICE.get(key)
    if hit is not None and hit[0]() is images:
        return hit[1]
    tensor = torch.as_tensor(images, dtype=torch.float32).to(device)
    try:
        ref = weakref.ref(images, lambda _ref, key=key: _ON_DEVICE.pop(key, None))  # type: ignore[misc]  # mypy cannot type a lambda with a default
    except TypeError:  # not weak-referenceable (a subclass without slots): no caching
        return tensor
    _ON_DEVICE[key] = (ref, tensor)
    return tensor
