"""Pretrained weights: a torchvision ``state_dict`` read from a file (or given as a dict), checked
against the names and shapes a network expects, and the SHA-256 that identifies it.

A file is read once (`load_weights`: `oodeval._digest.read_file`), and its SHA-256 and its state
dict both come from those bytes: a ``.pth`` / ``.pt`` file's through ``torch.load(...,
map_location="cpu", weights_only=True)`` (no code runs while it loads), a ``.safetensors``
file's through ``safetensors.torch.load``. The `LoadedWeights` it gives go to every network that
loads them, so a unit reads its weights file once whatever number of ResNets it holds. The
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
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from oodeval._digest import ReadFile, read_file
from oodeval.errors import OodevalError

__all__ = [
    "WEIGHT_SUFFIXES",
    "LoadedWeights",
    "checked_weights",
    "load_weights",
    "read_weights",
    "weights_label",
    "weights_sha256",
]

#: the file types `read_weights` reads
WEIGHT_SUFFIXES = (".pth", ".pt", ".safetensors")
#: the prefix of the classifier's keys, which a featurizer ignores
IGNORED_PREFIX = "fc."


@dataclass(frozen=True)
class LoadedWeights:
    """Pretrained weights read once: the state dict (names -> tensors, on the CPU), its SHA-256
    (`weights_sha256`: a file's bytes', or a dict's) and how messages name it (`label`)."""

    state: dict[str, torch.Tensor]
    sha256: str
    label: str


#: what pretrained weights are: a file, a state dict, or either read already
Weights = str | Path | Mapping[str, Any] | LoadedWeights


def weights_label(source: Weights) -> str:
    """How messages name `source`: the file's path, or ``(a state dict)``."""
    if isinstance(source, LoadedWeights):
        return source.label
    return "(a state dict)" if isinstance(source, Mapping) else str(source)


def load_weights(source: Weights) -> LoadedWeights:
    """`source` read once: its state dict (`read_weights`' checks and messages) with its
    SHA-256 (`weights_sha256`) and label; a file's bytes are read once for both (none when
    `source` is an `oodeval._digest.ReadFile`, which carries them), `LoadedWeights` are given
    back as they are.

    >>> loaded = load_weights({"w": torch.zeros(2)})
    >>> list(loaded.state), loaded.sha256[:12], loaded.label
    (['w'], '5e332ddb0ee4', '(a state dict)')
    """
    if isinstance(source, LoadedWeights):
        return source
    label = weights_label(source)
    if isinstance(source, Mapping):
        state = _state_dict(source, label)
        return LoadedWeights(state, weights_sha256(state), label)
    read = _read_file(source)
    return LoadedWeights(_state_dict(_parsed(read), label), read.sha256, label)


def read_weights(source: Weights) -> dict[str, torch.Tensor]:
    """The state dict in file `source` (``.pth``, ``.pt`` or ``.safetensors``), or `source` itself
    when it is a mapping; a one-line OodevalError when it cannot be read or is not a mapping of
    names to tensors.

    >>> read_weights({"conv1.weight": torch.ones(1)})
    {'conv1.weight': tensor([1.])}
    """
    return load_weights(source).state


def _state_dict(loaded: Any, label: str) -> dict[str, torch.Tensor]:
    """`loaded` as a state dict, once it is a mapping of names to tensors (else one line)."""
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


def _read_file(source: str | Path) -> ReadFile:
    """Weights file `source` read once (`oodeval._digest.read_file`), once its type is known."""
    path = Path(source)
    if path.suffix not in WEIGHT_SUFFIXES:
        raise OodevalError(
            f"pretrained weights {path}: unknown file type {path.suffix or '(none)'!r}; "
            f"give a {', '.join(WEIGHT_SUFFIXES)} file"
        )
    if isinstance(source, ReadFile):
        return source
    if not path.is_file():
        raise OodevalError(f"pretrained weights {path}: no such file")
    try:
        return read_file(path)
    except OSError as exc:
        raise OodevalError(
            f"pretrained weights {path}: cannot be read ({exc.strerror or exc})"
        ) from None


def _parsed(read: ReadFile) -> Any:
    """The object stored in the bytes of weights file `read` (tensors on the CPU)."""
    path = Path(read)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load

        try:
            return load(read.data)
        except (SafetensorError, OSError, ValueError) as exc:
            raise OodevalError(
                f"pretrained weights {path}: not a readable safetensors file ({_first_line(exc)})"
            ) from None
    try:
        return torch.load(io.BytesIO(read.data), map_location="cpu", weights_only=True)
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
    every key in sorted order with its dtype, shape and bytes; `LoadedWeights`' own.

    >>> weights_sha256({"w": torch.zeros(2)})[:12]
    '5e332ddb0ee4'
    """
    if isinstance(source, LoadedWeights):
        return source.sha256
    if not isinstance(source, Mapping):
        return read_file(source).sha256
    digest = hashlib.sha256()
    for key in sorted(source):
        value = source[key].detach().cpu().contiguous()
        digest.update(f"{key}\0{value.dtype}\0{tuple(value.shape)}\0".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
