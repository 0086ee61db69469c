"""Pretrained weights: a torchvision ``state_dict`` read from a file (or given as a dict), checked
against the names and shapes a network expects, and the SHA-256 that identifies it.

A ``.pth`` / ``.pt`` file is read with ``torch.load(path, map_location="cpu", weights_only=True)``
(no code runs while it loads); a ``.safetensors`` file with ``safetensors.torch.load_file``. The
classifier of the file (``fc.*``) is ignored. Every other mismatch stops before anything trains,
in one line naming the first key that does not fit:

>>> import torch
>>> want = {"conv1.weight": (2, 3), "bn1.running_mean": (2,)}
>>> checked_weights({"conv1.weight": torch.zeros(2, 3)}, want, "resnet18")
Traceback (most recent call last):
...
oodeval.errors.OodevalError: pretrained weights (a state dict) for resnet18: missing key 'bn1.running_mean' (1 key missing); give the state_dict of a torchvision resnet18 (torchvision's names; fc.* is ignored)
"""  # noqa: E501

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oodeval._digest import file_sha256
from oodeval.errors import OodevalError

__all__ = ["WEIGHT_SUFFIXES", "checked_weights", "read_weights", "weights_label", "weights_sha256"]

#: the file types `read_weights` reads
WEIGHT_SUFFIXES = (".pth", ".pt", ".safetensors")
#: what pretrained weights are: a file or a state dict
Weights = str | Path | Mapping[str, Any]
#: the prefix of the classifier's keys, which a featurizer ignores
IGNORED_PREFIX = "fc."


def weights_label(source: Weights) -> str:
    """How messages name `source`: the file's path, or ``(a state dict)``."""
    return "(a state dict)" if isinstance(source, Mapping) else str(source)


def read_weights(source: Weights) -> dict[str, torch.Tensor]:
    """The state dict in file `source` (``.pth``, ``.pt`` or ``.safetensors``), or `source` itself
    when it is a mapping; a one-line OodevalError when it cannot be read or is not a mapping of
    names to tensors.

    >>> read_weights({"conv1.weight": torch.ones(1)})
    {'conv1.weight': tensor([1.])}
    """
    label = weights_label(source)
    loaded = source if isinstance(source, Mapping) else _load_file(Path(source))
    fix = "save one with torch.save(model.state_dict(), path)"
    if not isinstance(loaded, Mapping):
        raise OodevalError(
            f"pretrained weights {label} are not a state dict (names -> tensors) but a "
            f"{type(loaded).__name__}; {fix}"
        )
    for key, value in loaded.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise OodevalError(
                f"pretrained weights {label} are not a state dict (names -> tensors): key "
                f"{key!r} holds a {type(value).__name__}; a checkpoint's weights are often "
                f"under one of its keys: {fix}"
            )
    return dict(loaded)


def _load_file(path: Path) -> Any:
    """The object stored in weights file `path` (read on the CPU)."""
    if path.suffix not in WEIGHT_SUFFIXES:
        raise OodevalError(
            f"pretrained weights {path}: unknown file type {path.suffix or '(none)'!r}; "
            f"give a {', '.join(WEIGHT_SUFFIXES)} file"
        )
    if not path.is_file():
        raise OodevalError(f"pretrained weights {path}: no such file")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(path, device="cpu")
        except (SafetensorError, OSError, ValueError) as exc:
            raise OodevalError(
                f"pretrained weights {path}: not a readable safetensors file ({_first_line(exc)})"
            ) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many kinds (unpickling, zip, EOF, runtime)
        raise OodevalError(
            f"pretrained weights {path}: torch.load(weights_only=True) cannot read it "
            f"({_first_line(exc)}); save the weights with torch.save(model.state_dict(), path)"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def checked_weights(
    state: Mapping[str, torch.Tensor],
    shapes: Mapping[str, tuple[int, ...]],
    model: str,
    label: str = "(a state dict)",
) -> dict[str, torch.Tensor]:
    """`state` without its ``fc.*`` keys, once it has exactly the keys of `shapes` (in any
    order), each of its shape; else a one-line OodevalError naming the first mismatching key
    (a missing or misshapen key, in the order of `shapes`, then a key `shapes` lacks)."""
    fix = f"give the state_dict of a torchvision {model} (torchvision's names; fc.* is ignored)"
    kept = {k: v for k, v in state.items() if not k.startswith(IGNORED_PREFIX)}
    missing = [key for key in shapes if key not in kept]
    for key, want in shapes.items():
        if key not in kept:
            count = f"{len(missing)} key{'s' if len(missing) > 1 else ''} missing"
            raise OodevalError(
                f"pretrained weights {label} for {model}: missing key {key!r} ({count}); {fix}"
            )
        if tuple(kept[key].shape) != tuple(want):
            raise OodevalError(
                f"pretrained weights {label} for {model}: key {key!r} has shape "
                f"{tuple(kept[key].shape)}, {model} needs {tuple(want)}; {fix}"
            )
    extra = [key for key in kept if key not in shapes]
    if extra:
        count = f"{len(extra)} unexpected key{'s' if len(extra) > 1 else ''}"
        raise OodevalError(
            f"pretrained weights {label} for {model}: unexpected key {extra[0]!r} ({count}); {fix}"
        )
    return kept


def weights_sha256(source: Weights) -> str:
    """The SHA-256 (64 hex digits) identifying pretrained weights: a file's bytes; for a dict,
    every key in sorted order with its dtype, shape and bytes.

    >>> weights_sha256({"w": torch.zeros(2)})[:12]
    '5e332ddb0ee4'
    """
    if not isinstance(source, Mapping):
        return file_sha256(source)
    digest = hashlib.sha256()
    for key in sorted(source):
        value = source[key].detach().cpu().contiguous()
        digest.update(f"{key}\0{value.dtype}\0{tuple(value.shape)}\0".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
