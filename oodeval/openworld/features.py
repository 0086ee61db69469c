"""Frozen features for open-world experiments: the feature file format and two sources of features.

GMoP (Section 5.1 of the OpenworldAUC paper) tunes prompts of a *frozen* vision-language model, so
image features and class "text" features can be extracted once and trained on. This module holds

* `FeatureSet` and its ``.npz`` file format (read with ``allow_pickle=False``; arrays below);
* `synthetic_features`: Gaussian clusters on the unit sphere whose new-class centres can be moved
  towards the base-class centres (``overlap``), for tests;
* `digit_features`: real features without pretrained weights -- a small MLP is trained on the
  *base* classes of MNIST (or scikit-learn's digits); its normalised penultimate layer is the image
  encoder and the class "text" features are class prototypes (the normalised mean feature of a few
  held-out images per class, new classes included), the stand-in for a text encoder that knows
  every class name. The encoder never sees a new-class image during its training.

Feature file (``.npz``) arrays
------------------------------
``features``       float, (n, d): image features, one row per sample.
``labels``         int, (n,): class id of each sample, in ``0 .. C-1``.
``text_features``  float, (C, d): class text features; row ``c`` belongs to class ``c``.
``base_classes``   int, (B,), optional: base class ids (default: sorted first half).
``class_names``    str, (C,), optional: names for reports.
``logit_scale``    float scalar, optional: the encoder's temperature (CLIP: 100, the default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from oodeval._npz import read_npz, write_npz
from oodeval._torch import single_threaded
from oodeval.errors import OodevalError
from oodeval.measures._validation import as_class_ids, as_float_array, check_same_length
from oodeval.openworld.base_new import base_new_classes, few_shot_indices

#: Temperature of the encoder's cosine classifier head (unit-sphere features, as CLIP's).
_ENCODER_SCALE = 10.0

FEATURE_ARRAYS = (
    "features",
    "labels",
    "text_features",
    "base_classes",
    "class_names",
    "logit_scale",
)


@dataclass(frozen=True)
class FeatureSet:
    """Image features with labels, and the text features of every class.

    Attributes: ``features`` (n, d) float32, ``labels`` (n,) int64, ``text_features`` (C, d)
    float32, ``base_classes`` sorted tuple of base class ids, ``class_names`` tuple of C names,
    ``logit_scale`` the temperature that turns cosine similarities into logits.
    Construct through `make_feature_set`, which validates shapes and ids.
    """

    features: np.ndarray
    labels: np.ndarray
    text_features: np.ndarray
    base_classes: tuple[int, ...]
    class_names: tuple[str, ...] = field(default=())
    logit_scale: float = 100.0

    @property
    def num_classes(self) -> int:
        """Number of classes C (rows of ``text_features``)."""
        return int(self.text_features.shape[0])

    @property
    def new_classes(self) -> tuple[int, ...]:
        """Class ids that are not base classes."""
        return tuple(c for c in range(self.num_classes) if c not in set(self.base_classes))

    def subset(self, indices: Any) -> FeatureSet:
        """The same classes with only the rows `indices`."""
        idx = np.asarray(indices, dtype=np.int64)
        return FeatureSet(
            self.features[idx],
            self.labels[idx],
            self.text_features,
            self.base_classes,
            self.class_names,
            self.logit_scale,
        )


def make_feature_set(
    features: Any,
    labels: Any,
    text_features: Any,
    base_classes: Any = None,
    class_names: Any = None,
    logit_scale: Any = None,
) -> FeatureSet:
    """Validate arrays and build a `FeatureSet` (base classes default to the sorted first half).

    Examples
    --------
    >>> fs = make_feature_set(np.eye(2), [0, 1], np.eye(2))
    >>> fs.base_classes, fs.new_classes
    ((0,), (1,))
    """
    x = as_float_array(features, "features", ndim=2)
    y = as_class_ids(labels, "labels")
    t = as_float_array(text_features, "text_features", ndim=2)
    check_same_length(features=x, labels=y)
    if x.shape[0] == 0:
        raise OodevalError("features has no rows; give at least one sample")
    if x.shape[1] != t.shape[1]:
        raise OodevalError(
            f"features have dimension {x.shape[1]} but text_features have dimension {t.shape[1]}; "
            "extract both with the same encoder"
        )
    n_classes = t.shape[0]
    if n_classes < 2:
        raise OodevalError(f"text_features must have one row per class (>= 2), got {n_classes}")
    if y.max() >= n_classes:
        raise OodevalError(
            f"label {int(y.max())} has no text feature row (text_features has {n_classes} rows)"
        )
    if base_classes is None:
        base = base_new_classes(range(n_classes)).base
    else:
        b = np.unique(as_class_ids(np.atleast_1d(np.asarray(base_classes)), "base_classes"))
        if b.size == 0 or b.max() >= n_classes or b.size >= n_classes:
            raise OodevalError(
                f"base_classes must be a non-empty proper subset of 0..{n_classes - 1}, "
                f"got {b.tolist()}"
            )
        base = tuple(int(c) for c in b)
    if class_names is None or len(class_names) == 0:
        names = tuple(str(c) for c in range(n_classes))
    else:
        names = tuple(str(s) for s in np.asarray(class_names).tolist())
        if len(names) != n_classes:
            raise OodevalError(
                f"class_names has {len(names)} entries but there are {n_classes} classes"
            )
    try:
        scale = 100.0 if logit_scale is None else float(np.asarray(logit_scale, dtype=np.float64))
    except (TypeError, ValueError):
        raise OodevalError("logit_scale must be a single positive number") from None
    if not (np.isfinite(scale) and scale > 0):
        raise OodevalError(f"logit_scale must be a positive number, got {scale}")
    return FeatureSet(x.astype(np.float32), y, t.astype(np.float32), base, names, scale)


def save_features(path: str | Path, fs: FeatureSet) -> None:
    """Write `fs` to an ``.npz`` file with the arrays listed in the module docstring."""
    write_npz(
        path,
        features=fs.features,
        labels=fs.labels,
        text_features=fs.text_features,
        base_classes=np.asarray(fs.base_classes, dtype=np.int64),
        class_names=np.asarray(fs.class_names, dtype=np.str_),
        logit_scale=np.asarray(fs.logit_scale, dtype=np.float64),
    )


def load_features(path: str | Path) -> FeatureSet:
    """Read a feature ``.npz`` (never unpickles: ``allow_pickle=False``) and validate it."""
    arrays, _ = read_npz(
        path,
        what="feature file",
        example="np.savez(path, features=..., labels=..., text_features=...)",
    )
    missing = [k for k in ("features", "labels", "text_features") if k not in arrays]
    if missing:
        raise OodevalError(
            f"{path}: missing array(s) {', '.join(missing)}; a feature file needs features, "
            "labels and text_features"
        )
    return make_feature_set(
        arrays["features"],
        arrays["labels"],
        arrays["text_features"],
        arrays.get("base_classes"),
        arrays.get("class_names"),
        arrays.get("logit_scale"),
    )


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def synthetic_features(
    *,
    n_classes: int = 10,
    dim: int = 32,
    n_per_class: int = 100,
    overlap: float = 0.0,
    noise: float = 1.5,
    text_noise: float = 0.5,
    n_base: int | None = None,
    logit_scale: float = 10.0,
    seed: int = 0,
) -> FeatureSet:
    """Unit-norm Gaussian clusters with controllable base/new overlap.

    Base centres ``m_b`` are random unit vectors. New class ``j`` gets the centre
    ``normalize((1 - overlap) * u_j + overlap * m_{j mod B})`` with ``u_j`` a random unit vector, so
    ``overlap=0`` gives unrelated new classes and ``overlap=1`` puts each on top of a base class.
    A sample is ``normalize(m + noise * z / sqrt(dim))``, a text feature
    ``normalize(m + text_noise * z' / sqrt(dim))`` with standard normal ``z, z'``.

    Examples
    --------
    >>> fs = synthetic_features(n_classes=4, dim=8, n_per_class=5, seed=1)
    >>> fs.features.shape, fs.text_features.shape, fs.base_classes
    ((20, 8), (4, 8), (0, 1))
    """
    if not 0.0 <= overlap <= 1.0:
        raise OodevalError(f"overlap must be in [0, 1], got {overlap}")
    if n_classes < 2 or dim < 2 or n_per_class < 1:
        raise OodevalError("need n_classes >= 2, dim >= 2 and n_per_class >= 1")
    classes = base_new_classes(range(n_classes), n_base=n_base)
    rng = np.random.default_rng(seed)
    centres = _unit_rows(rng.standard_normal((n_classes, dim)))
    for i, c in enumerate(classes.new):
        anchor = centres[classes.base[i % len(classes.base)]]
        centres[c] = (1.0 - overlap) * centres[c] + overlap * anchor
    centres = _unit_rows(centres + 1e-12)
    labels = np.repeat(np.arange(n_classes), n_per_class)
    feats = _unit_rows(centres[labels] + noise * rng.standard_normal((labels.size, dim)) / dim**0.5)
    text = _unit_rows(centres + text_noise * rng.standard_normal((n_classes, dim)) / dim**0.5)
    return make_feature_set(feats, labels, text, classes.base, logit_scale=logit_scale)


# --- real images --------------------------------------------------------------------------------


def load_mnist(directory: str | Path, *, split: str = "t10k") -> tuple[np.ndarray, np.ndarray]:
    """MNIST images as float32 (N, 784) in [0, 1] and int64 labels, from IDX files.

    Read by `oodeval.environments.mnist.load_mnist` (plain or ``.gz`` files, checked against a
    ``SHA256SUMS`` file in `directory` when there is one), flattened to rows.
    """
    from oodeval.environments.mnist import load_mnist as load_mnist_source

    source = load_mnist_source(directory, split=split)
    return source.images.reshape(len(source), -1), source.labels


def mnist_in_digits_format(images: np.ndarray) -> np.ndarray:
    """MNIST images (N, 784) redrawn like scikit-learn's digits: (N, 64) values in [0, 1].

    The digits set was made from 32x32 binary bitmaps whose glyph fills the box, counted in 4x4
    blocks. Each MNIST digit is therefore cropped to its bounding box (pixels > 0.3), padded to a
    square (aspect kept), resized to 32x32 (bilinear), binarised at 0.5 and averaged in 4x4 blocks.
    """
    from PIL import Image

    out = np.zeros((images.shape[0], 64), dtype=np.float32)
    for i, flat in enumerate(images.reshape(-1, 28, 28)):
        rows = np.flatnonzero(flat.max(axis=1) > 0.3)
        cols = np.flatnonzero(flat.max(axis=0) > 0.3)
        if rows.size == 0:
            continue
        crop = flat[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
        h, w = crop.shape
        side = max(h, w)
        square = np.zeros((side, side), dtype=np.float32)
        square[(side - h) // 2 : (side - h) // 2 + h, (side - w) // 2 : (side - w) // 2 + w] = crop
        pil = Image.fromarray((square * 255).astype(np.uint8)).resize(
            (32, 32), Image.Resampling.BILINEAR
        )
        bitmap = np.asarray(pil, dtype=np.float32) / 255.0 > 0.5
        out[i] = bitmap.reshape(8, 4, 8, 4).mean(axis=(1, 3)).reshape(-1)
    return out


def load_digit_images(source: str) -> tuple[np.ndarray, np.ndarray]:
    """``"digits"`` (scikit-learn's 8x8 digits) or ``"mnist:DIR"`` -> (flat images, labels)."""
    if source == "digits":
        from oodeval.environments.digits import load_digits

        digits = load_digits()
        return digits.images.reshape(len(digits), -1), digits.labels
    if source.startswith("mnist:"):
        return load_mnist(source.split(":", 1)[1])
    raise OodevalError(f"unknown image source {source!r}; use 'auto', 'digits' or 'mnist:DIR'")


def _train_encoder(
    images: np.ndarray, labels: np.ndarray, base: tuple[int, ...], dim: int, steps: int, seed: int
) -> Any:
    """MLP (input -> 256 -> dim) with a cosine head over `base`, trained with cross-entropy."""
    import torch

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    encoder = torch.nn.Sequential(
        torch.nn.Linear(images.shape[1], 256), torch.nn.ReLU(), torch.nn.Linear(256, dim)
    )
    head = torch.nn.Parameter(torch.randn(len(base), dim, generator=gen))
    opt = torch.optim.Adam([*encoder.parameters(), head], lr=1e-3)
    x = torch.from_numpy(images.astype(np.float32))
    position = {c: i for i, c in enumerate(base)}
    y = torch.tensor([position[int(c)] for c in labels])
    perm, cursor = torch.randperm(len(y), generator=gen), 0
    for _ in range(steps):
        if cursor + 64 > len(y):
            perm, cursor = torch.randperm(len(y), generator=gen), 0
        batch, cursor = perm[cursor : cursor + 64], cursor + 64
        emb = torch.nn.functional.normalize(encoder(x[batch]), dim=1)
        logits = _ENCODER_SCALE * emb @ torch.nn.functional.normalize(head, dim=1).T
        loss = torch.nn.functional.cross_entropy(logits, y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return encoder.eval()


def digit_features(
    source: str = "digits",
    *,
    encoder_source: str | None = None,
    seed: int = 0,
    shots: int = 16,
    prototype_shots: int = 10,
    dim: int = 32,
    encoder_steps: int = 400,
    n_base: int | None = None,
) -> tuple[FeatureSet, FeatureSet]:
    """Few-shot training features and test features from a small network trained on base classes.

    The encoder is an MLP (input -> 256 -> `dim`, ReLU) with a cosine classifier head over the base
    classes (CLIP-like geometry: logits are scaled cosines), trained with cross-entropy for
    `encoder_steps` steps of 64 images; the L2-normalised `dim`-vector is the frozen image feature,
    and each class's text feature is the normalised mean feature of `prototype_shots` held-out
    images of that class (new classes included).

    * ``encoder_source=None``: the encoder is trained on the base-class rows of a seeded half of
      `source`; the other half is divided into prototype images, the few-shot training set (`shots`
      per base class) and the test set (the rest, all classes).
    * ``encoder_source="digits"`` with ``source="mnist:DIR"``: the encoder is trained on the
      base-class images of scikit-learn's digits (a different dataset, as CLIP's pre-training data
      differs from the downstream task) and MNIST, redrawn by `mnist_in_digits_format`, supplies
      the prototype, few-shot and test images.

    ``source="auto"`` is real MNIST (`oodeval.environments.mnist.resolve_source`).

    Returns
    -------
    (train, test) FeatureSets sharing ``text_features`` and ``base_classes``.
    """
    import torch

    from oodeval.environments.mnist import resolve_source

    source = resolve_source(source)
    images, labels = load_digit_images(source)
    n_classes = int(labels.max()) + 1
    classes = base_new_classes(range(n_classes), n_base=n_base)
    rng = np.random.default_rng(seed)
    order = rng.permutation(labels.size)
    if encoder_source is None or encoder_source == source:
        half = order[: labels.size // 2]
        enc_images, enc_labels = images[half], labels[half]
        rest = np.sort(order[labels.size // 2 :])
    elif encoder_source == "digits" and source.startswith("mnist:"):
        enc_images, enc_labels = load_digit_images("digits")
        images = mnist_in_digits_format(images)
        rest = np.arange(labels.size)
    else:
        raise OodevalError(
            f"cannot train the encoder on {encoder_source!r} for {source!r}; use the same source "
            "or encoder_source='digits' with an 'mnist:DIR' source"
        )
    keep = np.isin(enc_labels, classes.base)
    with single_threaded():
        encoder = _train_encoder(
            enc_images[keep], enc_labels[keep], classes.base, dim, encoder_steps, seed
        )
    proto_rows = rest[few_shot_indices(labels[rest], range(n_classes), prototype_shots, seed=seed)]
    rest = np.setdiff1d(rest, proto_rows)
    train_rows = rest[few_shot_indices(labels[rest], classes.base, shots, seed=seed + 1)]
    test_rows = np.setdiff1d(rest, train_rows)
    with torch.no_grad():
        feats = torch.nn.functional.normalize(encoder(torch.from_numpy(images)), dim=1).numpy()
    text = np.stack(
        [
            _unit_rows(feats[proto_rows][labels[proto_rows] == c].mean(axis=0))
            for c in range(n_classes)
        ]
    )
    names = [str(c) for c in range(n_classes)]
    train = make_feature_set(
        feats[train_rows], labels[train_rows], text, classes.base, names, _ENCODER_SCALE
    )
    test = make_feature_set(
        feats[test_rows], labels[test_rows], text, classes.base, names, _ENCODER_SCALE
    )
    return train, test
