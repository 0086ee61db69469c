"""CIFAR-10's python batches, read without ever executing code from the file.

The batches (``data_batch_1`` ... ``data_batch_5``, ``test_batch``, ``batches.meta``) are pickles:
dicts of bytes, lists, ints and one numpy uint8 array. Unpickling is code execution, so
`SafeBatchUnpickler.find_class` never returns a real importable object: it refuses every global
except the handful numpy and Python use to pickle an array, and for those it returns inert stand-ins
defined here that only record shapes, dtype codes and raw bytes. The recorded arrays are rebuilt
afterwards with ``np.frombuffer`` for plain numeric dtypes only.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from oodeval.environments.source_kinds import ImageSource, SourceKind, register_source_kind
from oodeval.errors import OodevalError

TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META_FILE = "batches.meta"
CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
_NUMERIC_KINDS = "biuf"


class UnsafePickleError(OodevalError):
    """A pickle asked for something other than plain data (a class or function to call)."""


class _DType:
    """Stand-in for ``numpy.dtype(code, align, copy)``: records the type code only."""

    def __init__(self, code: Any, *_: Any) -> None:
        if isinstance(code, bytes):
            code = code.decode("ascii", "replace")
        if not isinstance(code, str):
            raise UnsafePickleError("pickled dtype code is not a string")
        self.code = code
        self.byteorder = "|"

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1:
            order = state[1]
            self.byteorder = order.decode("ascii") if isinstance(order, bytes) else str(order)

    def to_numpy(self) -> np.dtype:
        try:
            dtype = np.dtype(self.code)
        except TypeError:
            raise UnsafePickleError(f"pickled dtype {self.code!r} is not a numeric type") from None
        if dtype.kind not in _NUMERIC_KINDS:
            raise UnsafePickleError(f"pickled dtype {self.code!r} is not a numeric type")
        if self.byteorder in ("<", ">"):
            dtype = dtype.newbyteorder(cast(Literal["<", ">"], self.byteorder))
        return dtype


class _NDArrayMarker:
    """Stand-in for the ``numpy.ndarray`` class argument of ``_reconstruct``."""


class _ArraySpec:
    """Stand-in for a pickled ndarray: shape, dtype and raw bytes, rebuilt by `to_numpy`."""

    def __init__(self, *_: Any) -> None:
        self.shape: tuple[int, ...] = (0,)
        self.dtype: _DType | None = None
        self.fortran = False
        self.raw: bytes = b""

    def __setstate__(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) == 5):
            raise UnsafePickleError("pickled array state has an unexpected form")
        _, shape, dtype, fortran, raw = state
        if not isinstance(dtype, _DType) or not isinstance(raw, (bytes, bytearray, str)):
            raise UnsafePickleError("pickled array holds objects, not plain numbers")
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.fortran = bool(fortran)
        self.raw = raw.encode("latin1") if isinstance(raw, str) else bytes(raw)

    def to_numpy(self) -> np.ndarray:
        if self.dtype is None:
            raise UnsafePickleError("pickled array has no dtype")
        dtype = self.dtype.to_numpy()
        count = int(np.prod(self.shape, dtype=np.int64))
        if count * dtype.itemsize != len(self.raw):
            raise UnsafePickleError("pickled array's byte count does not match its shape")
        flat = np.frombuffer(self.raw, dtype=dtype, count=count)
        return flat.reshape(self.shape, order="F" if self.fortran else "C")


def _reconstruct(cls: Any, shape: Any, typecode: Any) -> _ArraySpec:
    if cls is not _NDArrayMarker:
        raise UnsafePickleError("pickled array reconstruction names a class other than ndarray")
    return _ArraySpec()


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> _ArraySpec:
    if not isinstance(dtype, _DType) or not isinstance(buf, (bytes, bytearray)):
        raise UnsafePickleError("pickled buffer holds objects, not plain numbers")
    spec = _ArraySpec()
    spec.__setstate__((1, tuple(shape), dtype, order == "F", bytes(buf)))
    return spec


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError("pickled _codecs.encode call is not a plain latin-1 string")
    return text.encode("latin1")


_STAND_INS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): _NDArrayMarker,
    ("numpy", "dtype"): _DType,
    ("_codecs", "encode"): _codecs_encode,
}


class SafeBatchUnpickler(pickle.Unpickler):
    """An unpickler that loads only plain data: containers, numbers, strings and numeric arrays.

    `find_class` refuses every global; the few names numpy uses to pickle an array map to inert
    stand-ins of this module, so no code named by the file ever runs.
    """

    def find_class(self, module: str, name: str) -> Any:
        stand_in = _STAND_INS.get((module, name))
        if stand_in is None:
            raise UnsafePickleError(
                f"refusing to load {module}.{name} from a pickle: only plain data is accepted"
            )
        return stand_in

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("refusing a pickle with persistent references")


def safe_load_batch(data: bytes) -> Any:
    """Unpickle `data` as plain data (see `SafeBatchUnpickler`); arrays come back as numpy arrays.

    >>> safe_load_batch(pickle.dumps({"labels": [1, 2]}))
    {'labels': [1, 2]}
    """
    try:
        obj = SafeBatchUnpickler(io.BytesIO(data), encoding="bytes").load()
    except UnsafePickleError:
        raise
    except Exception as exc:  # malformed streams raise many types (UnpicklingError, EOFError...)
        raise OodevalError(f"not a readable CIFAR-10 batch: {type(exc).__name__}: {exc}") from None
    return _materialise(obj)


def _materialise(obj: Any) -> Any:
    if isinstance(obj, _ArraySpec):
        return obj.to_numpy()
    if isinstance(obj, dict):
        return {_materialise(k): _materialise(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_materialise(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_materialise(v) for v in obj)
    if isinstance(obj, _DType) or obj is _NDArrayMarker:
        raise UnsafePickleError("pickle holds a bare numpy type instead of data")
    return obj


#: The largest CIFAR-10 file read: a batch is 10,000 images of 3,072 bytes, about 31 MB.
MAX_BATCH_BYTES = 1 << 28


def _batch_bytes(path: Path) -> bytes:
    """The bytes of one CIFAR-10 file, refused unread past `MAX_BATCH_BYTES`."""
    size = path.stat().st_size
    if size > MAX_BATCH_BYTES:
        raise OodevalError(
            f"{path} holds {size:,} bytes, over the {MAX_BATCH_BYTES >> 20} MiB bound on a "
            "CIFAR-10 batch (about 31 MB); it is not a CIFAR-10 batch, replace it"
        )
    return path.read_bytes()


def load_cifar10(root: str | Path, *, split: str | None = None) -> ImageSource:
    """Load CIFAR-10 python batches from `root` (or `root`/cifar-10-batches-py).

    Reads the training batches then ``test_batch`` (or only `split` = "train" / "test"), returning
    float32 (N, 3, 32, 32) images in [0, 1]. Class names come from ``batches.meta`` when present.
    """
    root = Path(root)
    if (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    if split not in (None, "train", "test"):
        raise OodevalError(f"unknown CIFAR-10 split {split!r}; use 'train' or 'test'")
    names = {"train": TRAIN_BATCHES, "test": (TEST_BATCH,)}.get(
        split or "", TRAIN_BATCHES + (TEST_BATCH,)
    )
    files = [root / n for n in names if (root / n).is_file()]
    if not files:
        raise OodevalError(
            f"no CIFAR-10 batches in {root}; expected data_batch_1..5 and/or test_batch"
        )
    images, labels = [], []
    for path in files:
        batch = safe_load_batch(_batch_bytes(path))
        x, y = _batch_arrays(batch, path)
        images.append(x)
        labels.append(y)
    class_names: tuple[str, ...] = CIFAR10_CLASSES
    meta_path = root / META_FILE
    if meta_path.is_file():
        meta = safe_load_batch(_batch_bytes(meta_path))
        raw = _get(meta, "label_names") if isinstance(meta, dict) else None
        if isinstance(raw, list) and all(isinstance(n, (bytes, str)) for n in raw):
            class_names = tuple(n.decode("utf-8") if isinstance(n, bytes) else n for n in raw)
    y = np.concatenate(labels)
    if y.size and y.max() >= len(class_names):
        raise OodevalError(f"CIFAR-10 labels in {root} exceed the {len(class_names)} class names")
    x = np.concatenate(images)
    return ImageSource(f"cifar10:{root}", x, y, class_names)


@register_source_kind
class Cifar10Kind(SourceKind):
    """``cifar10:DIR``: `load_cifar10`, identified by the batches present and ``batches.meta``."""

    name = "cifar10"
    summary = "CIFAR-10's python batches"

    def load(self, root: Path | None, *, size: int | None) -> ImageSource:
        return load_cifar10(self.folder(root))

    def files(self, root: Path | None) -> Iterator[tuple[str, Path, bool]]:
        base = self.folder(root)
        if (base / "cifar-10-batches-py").is_dir():
            base = base / "cifar-10-batches-py"
        names = [n for n in (*TRAIN_BATCHES, TEST_BATCH) if (base / n).is_file()]
        if not names:
            raise OodevalError(
                f"no CIFAR-10 batches in {base}; expected data_batch_1..5 and/or test_batch"
            )
        if (base / META_FILE).is_file():
            names.append(META_FILE)
        for name in names:
            yield name, base / name, False


def _get(batch: dict, key: str) -> Any:
    if key.encode() in batch:
        return batch[key.encode()]
    return batch.get(key)


def _batch_arrays(batch: Any, path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(batch, dict):
        raise OodevalError(f"{path} is not a CIFAR-10 batch (not a dict); check the folder")
    data, labels = _get(batch, "data"), _get(batch, "labels")
    if data is None or labels is None:
        raise OodevalError(f"{path} lacks 'data' or 'labels'; is it a CIFAR-10 python batch?")
    if isinstance(data, (bytes, bytearray)):
        data = np.frombuffer(data, dtype=np.uint8)
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.size % 3072:
        raise OodevalError(f"{path} data must be uint8 rows of 3072 values (3x32x32)")
    try:
        y = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise OodevalError(f"{path} labels must be integers") from None
    x = data.reshape(-1, 3, 32, 32)
    if x.shape[0] != y.shape[0] or (y.size and y.min() < 0):
        raise OodevalError(f"{path} has {x.shape[0]} images but {y.shape[0]} valid labels")
    return x.astype(np.float32) / np.float32(255.0), y
