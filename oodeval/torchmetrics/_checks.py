"""Checks of the tensors the streaming metrics receive, each failure one OodevalError line.

Shape and dtype checks cost nothing and always run. Checks of the values (finite scores, class
ids in range) read the tensor back from its device, a synchronisation point on a GPU; the metrics
run them unless built with ``validate_args=False``, as torchmetrics' own metrics do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from oodeval.errors import OodevalError, listing


def as_vector(x: Any, name: str) -> torch.Tensor:
    """`x` as a 1-D tensor (a tensor as it is, anything else through `torch.as_tensor`).

    >>> as_vector([1, 2], "labels").tolist()
    [1, 2]
    """
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise OodevalError(
                f"{name} must be a 1-D tensor, got {type(x).__name__}: {exc}"
            ) from None
    if x.ndim != 1:
        raise OodevalError(
            f"{name} must be a 1-D tensor (one value per sample), got shape {tuple(x.shape)}"
        )
    return x


def checked_scores(x: Any, name: str, *, validate: bool) -> torch.Tensor:
    """Detector scores as float64 (floats of any width convert exactly) or int64 (integers).

    >>> checked_scores(torch.tensor([0.5, 0.25], dtype=torch.float32), "score", validate=True)
    tensor([0.5000, 0.2500], dtype=torch.float64)
    """
    scores = as_vector(x, name)
    if scores.dtype == torch.bool or scores.is_complex():
        raise OodevalError(f"{name} must hold real numbers, got dtype {scores.dtype}")
    if scores.is_floating_point():
        scores = scores.to(torch.float64)
        if validate and not bool(torch.isfinite(scores).all()):
            bad = int((~torch.isfinite(scores)).sum())
            raise OodevalError(
                f"{name} contains {bad} NaN or infinite value(s); remove or fix them"
            )
        return scores
    if str(scores.dtype) == "torch.uint64":  # torch.uint64 exists from torch 2.3 on
        raise OodevalError(f"{name} must fit in int64, got dtype {scores.dtype}")
    return scores.to(torch.int64)


def checked_mask(x: Any, name: str) -> torch.Tensor:
    """A bool 1-D tensor, or raise (0/1 integers are refused: a mask is a bool tensor).

    >>> checked_mask(torch.tensor([True, False]), "is_base").tolist()
    [True, False]
    """
    mask = as_vector(x, name)
    if mask.dtype != torch.bool:
        raise OodevalError(
            f"{name} must be a bool tensor (True/False per sample), got dtype "
            f"{mask.dtype}; compare it first, e.g. {name}=(x == 1)"
        )
    return mask


def checked_ids(x: Any, name: str, num_classes: int, *, validate: bool) -> torch.Tensor:
    """Class ids as int64 in [0, num_classes), or raise.

    >>> checked_ids(torch.tensor([0, 2]), "labels", 3, validate=True).tolist()
    [0, 2]
    """
    ids = as_vector(x, name)
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise OodevalError(f"{name} must hold integer class ids, got dtype {ids.dtype}")
    ids = ids.to(torch.int64)
    if validate and ids.numel():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= num_classes:
            found = low if low < 0 else high
            raise OodevalError(
                f"{name} must hold class ids in 0..{num_classes - 1} (num_classes={num_classes}), "
                f"found {found}"
            )
    return ids


def same_length(**tensors: torch.Tensor) -> int:
    """The common length of `tensors`, or raise naming each length.

    >>> same_length(score=torch.zeros(2), is_base=torch.zeros(2))
    2
    """
    lengths = {name: int(t.shape[0]) for name, t in tensors.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise OodevalError(f"inputs must have the same length (one value per sample), got {desc}")
    return next(iter(lengths.values()), 0)


def checked_label_space(base_classes: Iterable[int], num_classes: int) -> list[int]:
    """The sorted base-class ids: non-empty, distinct, in 0..num_classes-1, not every class.

    >>> checked_label_space([2, 0], 4)
    [0, 2]
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise OodevalError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    try:
        ids = [int(c) for c in base_classes]
    except (TypeError, ValueError):
        raise OodevalError(
            f"base_classes must be an iterable of integer class ids, got {base_classes!r}"
        ) from None
    if not ids:
        raise OodevalError("base_classes is empty; name at least one base class id")
    outside = [c for c in ids if not 0 <= c < num_classes]
    if outside:
        raise OodevalError(
            f"base_classes must be class ids in 0..{num_classes - 1}, found {listing(outside)}"
        )
    if len(set(ids)) != len(ids):
        raise OodevalError("base_classes lists a class more than once; list each id once")
    if len(ids) == num_classes:
        raise OodevalError(
            f"base_classes lists all {num_classes} classes; at least one class must be new"
        )
    return sorted(ids)
