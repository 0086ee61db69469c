"""The hypothesis classes H over which the NICO++ shift metrics are estimated (torch).

Section 3.3 of the NICO++ paper estimates the metrics with deep networks (ResNet-50 for photos, a
shallow CNN for MNIST-M).  oodeval offers two small classes that train in seconds on a CPU:

- ``"cnn"``: two 3x3 convolutions (16 and 32 channels, ReLU; 2x2 max-pooling after the first,
  adaptive max-pooling to a 4x4 grid after the second) and a linear layer, for images (C, H, W);
- ``"mlp"``: one hidden layer of 128 ReLU units on the flattened input, for frozen features or
  small images.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from oodeval.errors import OodevalError, option

HYPOTHESES: tuple[str, ...] = ("cnn", "mlp")


def make_hypothesis(
    kind: str, input_shape: Sequence[int], num_classes: int, *, seed: int
) -> nn.Module:
    """Return a freshly initialised network of hypothesis class `kind` mapping inputs to logits.

    Parameters
    ----------
    kind : {"cnn", "mlp"}
        The hypothesis class (see the module docstring).
    input_shape : sequence of int
        Shape of one input without the batch axis: (C, H, W) for "cnn", anything for "mlp".
    num_classes : int
        Number of outputs (logits), at least 2.
    seed : int
        Seeds the initial weights, so equal seeds give identical networks.

    Examples
    --------
    >>> net = make_hypothesis("mlp", (1, 4, 4), 3, seed=0)
    >>> tuple(net(torch.zeros(5, 1, 4, 4)).shape)
    (5, 3)
    """
    if kind not in HYPOTHESES:
        raise OodevalError(
            f"unknown hypothesis class {kind!r}; choose one of {', '.join(HYPOTHESES)}"
        )
    if num_classes < 2:
        raise OodevalError(f"num_classes must be at least 2, got {num_classes}")
    shape = tuple(int(s) for s in input_shape)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if kind == "mlp":
            width = math.prod(shape)
            return nn.Sequential(
                nn.Flatten(), nn.Linear(width, 128), nn.ReLU(), nn.Linear(128, num_classes)
            )
        if len(shape) != 3:
            raise OodevalError(
                f"the cnn hypothesis class needs images of shape (C, H, W), got {shape}; "
                f"use {option('hypothesis', 'mlp')} for feature vectors"
            )
        return nn.Sequential(
            nn.Conv2d(shape[0], 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveMaxPool2d(4),
            nn.Flatten(),
            nn.Linear(32 * 16, num_classes),
        )
    finally:
        torch.random.set_rng_state(gen_state)


def predict_labels(model: nn.Module, x: np.ndarray, *, chunk: int = 4096) -> np.ndarray:
    """Return the argmax class of `model` for each row of `x` (float32), without gradients.

    >>> net = make_hypothesis("mlp", (3,), 2, seed=0)
    >>> predict_labels(net, np.zeros((4, 3), dtype=np.float32)).shape
    (4,)
    """
    was_training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(x), chunk):
            batch = torch.from_numpy(np.ascontiguousarray(x[start : start + chunk]))
            out.append(model(batch).argmax(dim=1).numpy())
    model.train(was_training)
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)
