"""Base/new open-world test sets: base and new classes, few-shot sets and base:new resampling.

The open-world prompt-tuning setting of the OpenworldAUC paper (Sections 3-4) trains on a few shots
of the *base* classes and tests on a mixture of base and *new* classes whose base:new sample ratio
is unknown. Property P3 of that paper asks that a metric does not move when only that ratio changes;
`resample_to_ratio` builds test sets that differ only in it (per-class proportional subsampling, so
the class mix *within* each domain stays as in the original set).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oodeval._text import safe_text
from oodeval.errors import OodevalError, option
from oodeval.measures._validation import as_class_ids

#: Named base:new ratios of the OpenworldAUC paper's imbalance benchmarks (Table 3's caption and
#: App. C.2: "Fwd means base domain number is 5x larger than new domain, and Bwd means the
#: opposite"): Fwd = base:new 5:1, Bwd = base:new 1:5.
RATIO_PRESETS: dict[str, tuple[float, float]] = {"fwd": (5.0, 1.0), "bwd": (1.0, 5.0)}

#: The new/base sample ratios of the OpenworldAUC paper's Tables 11-12 (App. D.3), in its order:
#: 10 means ten new samples per base sample, 0.1 ten base samples per new one.
PAPER_NEW_PER_BASE: tuple[float, ...] = (10.0, 5.0, 3.0, 2.0, 1.0, 0.7, 0.5, 0.3, 0.2, 0.1)

#: The same ten ratios written base:new, as `parse_ratio` reads them (new/base 0.7 is 10:7).
PAPER_RATIOS: tuple[str, ...] = (
    "1:10", "1:5", "1:3", "1:2", "1:1", "10:7", "2:1", "10:3", "5:1", "10:1"
)  # fmt: skip

#: Default sweep of base:new ratios: the paper's ten, from new-dominated to base-dominated.
DEFAULT_RATIOS: tuple[str, ...] = PAPER_RATIOS

#: What a ratio may be written as, for the messages that refuse one.
ACCEPTED_RATIOS = (
    "BASE:NEW with two positive numbers (e.g. 1:5 = five new samples per base sample), "
    "Fwd (= 5:1), Bwd (= 1:5), or in a list paper (the ten ratios of the paper's Tables 11-12)"
)


class TooFewToResample(OodevalError):
    """A test set too small (or without base or new samples) to resample to a base:new ratio:
    a report leaves its ratio sweep out for it; every other error still stops it."""


@dataclass(frozen=True)
class BaseNewClasses:
    """Sorted base and new class ids (disjoint; together they are every class)."""

    base: tuple[int, ...]
    new: tuple[int, ...]


def base_new_classes(
    classes: Iterable[int], *, n_base: int | None = None, seed: int | None = None
) -> BaseNewClasses:
    """Return the base and the new classes among `classes`.

    Default (``seed=None``): sort the ids and take the first ``ceil(C / 2)`` as base, the rest as
    new -- the base-to-new setting of CoOp/CoCoOp that DeCoOp and the OpenworldAUC paper use.
    With a seed, a seeded random permutation picks the base classes instead.

    Parameters
    ----------
    classes : iterable of int
        Class ids (duplicates are ignored, so a label array works too).
    n_base : int, optional
        Number of base classes; default ``ceil(C / 2)``. Must leave at least one new class.
    seed : int, optional
        ``None`` for the sorted choice; an int for a reproducible random choice of base classes.

    Examples
    --------
    >>> base_new_classes(range(10))
    BaseNewClasses(base=(0, 1, 2, 3, 4), new=(5, 6, 7, 8, 9))
    >>> base_new_classes([3, 1, 2])
    BaseNewClasses(base=(1, 2), new=(3,))
    """
    ids = np.unique(as_class_ids(np.fromiter(classes, dtype=np.int64), "classes"))
    if ids.size < 2:
        raise OodevalError(f"need at least 2 classes to divide into base and new, got {ids.size}")
    k = math.ceil(ids.size / 2) if n_base is None else int(n_base)
    if not 1 <= k < ids.size:
        raise OodevalError(
            f"n_base must be between 1 and {ids.size - 1} for {ids.size} classes, got {k}"
        )
    if seed is None:
        base = ids[:k]
    else:
        base = np.sort(np.random.default_rng(seed).permutation(ids)[:k])
    new = np.setdiff1d(ids, base)
    return BaseNewClasses(tuple(int(c) for c in base), tuple(int(c) for c in new))


def few_shot_indices(
    labels: Any, classes: Iterable[int], shots: int, *, seed: int = 0
) -> np.ndarray:
    """Indices of a k-shot training set: `shots` samples of each class in `classes`, seeded.

    Parameters
    ----------
    labels : array-like of shape (n,)
        Class id of every sample.
    classes : iterable of int
        Classes to draw from (usually the base classes).
    shots : int
        Samples per class; every class must have at least this many.

    Returns
    -------
    ndarray of shape (len(classes) * shots,), sorted row indices into `labels`.

    Examples
    --------
    >>> few_shot_indices([0, 0, 1, 1, 1, 2], [0, 1], 2).size
    4
    """
    y = as_class_ids(labels, "labels")
    if shots < 1:
        raise OodevalError(f"shots must be at least 1, got {shots}")
    rng = np.random.default_rng(seed)
    chosen = []
    for c in sorted({int(c) for c in classes}):
        rows = np.flatnonzero(y == c)
        if rows.size < shots:
            raise OodevalError(
                f"class {c} has {rows.size} sample(s), fewer than shots={shots}; lower "
                f"{option('shots')}"
            )
        chosen.append(rng.choice(rows, size=shots, replace=False))
    if not chosen:
        raise OodevalError("no classes given to draw few-shot samples from")
    return np.sort(np.concatenate(chosen))


def parse_ratio(ratio: str | Sequence[float]) -> tuple[float, float]:
    """Parse a base:new ratio such as ``"1:5"``, ``"Fwd"`` (5:1), ``"Bwd"`` (1:5) or ``(1, 5)``.

    The text form is always BASE:NEW; Fwd and Bwd are the OpenworldAUC paper's Table 3 settings
    (Fwd: 5 times more base samples than new ones; Bwd: the opposite). A bare number is refused:
    the paper's tables give new/base (5 there is 1:5 here), so it would be ambiguous.

    Examples
    --------
    >>> parse_ratio("1:5"), parse_ratio("Fwd"), parse_ratio("Bwd"), parse_ratio((2, 1))
    ((1.0, 5.0), (5.0, 1.0), (1.0, 5.0), (2.0, 1.0))
    """
    shown = safe_text(repr(ratio))
    if isinstance(ratio, str):
        text = ratio.strip().lower()
        if text in RATIO_PRESETS:
            return RATIO_PRESETS[text]
        parts = text.split(":")
        if len(parts) == 1 and _is_number(text):
            raise OodevalError(
                f"ratio {shown} is a bare number, which is ambiguous; write it BASE:NEW (a "
                f"new/base ratio of {safe_text(text)} as in the paper's Tables 11-12 is "
                f"1:{safe_text(text)}); accepted: {ACCEPTED_RATIOS}"
            )
        if len(parts) != 2:
            raise OodevalError(
                f"ratio {shown} is not of the form BASE:NEW; accepted: {ACCEPTED_RATIOS}"
            )
        try:
            a, b = float(parts[0]), float(parts[1])
        except ValueError:
            raise OodevalError(
                f"ratio {shown} must hold two numbers; accepted: {ACCEPTED_RATIOS}"
            ) from None
    else:
        values = list(ratio)
        if len(values) != 2:
            raise OodevalError(f"ratio must have two parts (base, new), got {values!r}")
        a, b = float(values[0]), float(values[1])
    if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
        raise OodevalError(
            f"ratio parts must be positive numbers, got {a:g}:{b:g}; accepted: {ACCEPTED_RATIOS}"
        )
    return a, b


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_ratios(text: str) -> list[str]:
    """The base:new ratios of a comma-separated list; ``paper`` stands for the paper's ten.

    Each item is read by `parse_ratio` and returned in `format_ratio`'s spelling; ``paper``
    (any case) expands to `PAPER_RATIOS`, the new/base ratios 10 ... 0.1 of the OpenworldAUC
    paper's Tables 11-12.

    Examples
    --------
    >>> parse_ratios("Fwd, 1:1 ,Bwd")
    ['5:1', '1:1', '1:5']
    >>> len(parse_ratios("paper"))
    10
    """
    out: list[str] = []
    for item in text.split(","):
        if item.strip().lower() == "paper":
            out.extend(PAPER_RATIOS)
        elif item.strip():
            out.append(format_ratio(parse_ratio(item)))
    if not out:
        raise OodevalError(f"give at least one ratio; accepted: {ACCEPTED_RATIOS}")
    return out


def new_per_base(ratio: str | Sequence[float]) -> float:
    """New samples per base sample of a base:new ratio: the number the paper's Tables 11-12 give.

    Examples
    --------
    >>> new_per_base("1:10"), new_per_base("10:7"), new_per_base("Fwd")
    (10.0, 0.7, 0.2)
    """
    a, b = parse_ratio(ratio)
    return b / a


def format_ratio(ratio: tuple[float, float]) -> str:
    """``(1.0, 5.0)`` -> ``"1:5"`` (integers without a trailing .0)."""
    return ":".join(f"{v:g}" for v in ratio)


def _proportional_counts(available: np.ndarray, total: int) -> np.ndarray:
    """Split `total` across classes in proportion to `available` (largest remainder, capped)."""
    if total >= available.sum():
        return available.copy()
    exact = available * (total / available.sum())
    counts = np.floor(exact).astype(np.int64)
    remainder = total - int(counts.sum())
    # Largest fractional parts first; ties go to the lower class position (stable sort).
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:remainder]] += 1
    return counts


def resample_to_ratio(
    labels: Any,
    base_classes: Iterable[int],
    ratio: str | Sequence[float],
    *,
    seed: int = 0,
    n_total: int | None = None,
) -> np.ndarray:
    """Row indices of a subsample whose base:new sample ratio is `ratio`.

    The largest subsample with ``n_base / n_new = a / b`` is taken (or one of about `n_total` rows):
    ``n_base = floor(a * s)``, ``n_new = floor(b * s)`` with ``s = min(N_base / a, N_new / b)``.
    Each domain's quota is split over its classes in proportion to their counts (largest
    remainder), and each class's rows are drawn without replacement with a seeded generator, so
    only the base:new ratio changes -- the setting of the paper's Figure 2 (property P3).

    Parameters
    ----------
    labels : array-like of shape (n,)
        Class ids of the test set.
    base_classes : iterable of int
        Base class ids; every other label is new.
    ratio : str or (float, float)
        Base:new ratio, e.g. ``"1:5"``, ``"Fwd"`` (5:1), ``"Bwd"`` (1:5) or ``(5, 1)``.
    seed : int
        Seed of the draw.
    n_total : int, optional
        Target size (at most the largest feasible size).

    Returns
    -------
    ndarray of sorted row indices.

    Examples
    --------
    >>> y = [0] * 50 + [1] * 50
    >>> idx = resample_to_ratio(y, [0], "1:5")
    >>> int((np.asarray(y)[idx] == 0).sum()), int((np.asarray(y)[idx] == 1).sum())
    (10, 50)
    """
    y = as_class_ids(labels, "labels")
    a, b = parse_ratio(ratio)
    base = np.asarray(sorted({int(c) for c in base_classes}), dtype=np.int64)
    is_base = np.isin(y, base)
    n_b_avail, n_n_avail = int(is_base.sum()), int((~is_base).sum())
    if n_b_avail == 0 or n_n_avail == 0:
        raise TooFewToResample(
            f"need samples of both base and new classes to resample, got {n_b_avail} base and "
            f"{n_n_avail} new"
        )
    scale = min(n_b_avail / a, n_n_avail / b)
    if n_total is not None:
        if n_total < 2:
            raise OodevalError(f"n_total must be at least 2, got {n_total}")
        scale = min(scale, n_total / (a + b))
    n_b, n_n = int(math.floor(a * scale + 1e-9)), int(math.floor(b * scale + 1e-9))
    if n_b == 0 or n_n == 0:
        raise TooFewToResample(
            f"ratio {format_ratio((a, b))} leaves no base or no new samples from {n_b_avail} base "
            f"and {n_n_avail} new; use a less extreme ratio"
        )
    rng = np.random.default_rng(seed)
    chosen = []
    for mask, quota in ((is_base, n_b), (~is_base, n_n)):
        classes = np.unique(y[mask])
        available = np.array([np.count_nonzero(y == c) for c in classes], dtype=np.int64)
        for c, k in zip(classes, _proportional_counts(available, quota), strict=True):
            if k:
                chosen.append(rng.choice(np.flatnonzero(y == c), size=int(k), replace=False))
    return np.sort(np.concatenate(chosen))


def ratio_sweep(
    labels: Any,
    base_classes: Iterable[int],
    ratios: Iterable[str | Sequence[float]] = DEFAULT_RATIOS,
    *,
    seed: int = 0,
    n_total: int | None = None,
) -> list[tuple[str, np.ndarray]]:
    """``[(ratio_text, indices), ...]`` of `resample_to_ratio` for each ratio (same seed each).

    Examples
    --------
    >>> [(name, idx.size) for name, idx in ratio_sweep([0] * 10 + [1] * 10, [0], ["1:1", "Fwd"])]
    [('1:1', 20), ('5:1', 12)]
    """
    base = [int(c) for c in base_classes]
    return [
        (
            format_ratio(parse_ratio(r)),
            resample_to_ratio(labels, base, r, seed=seed, n_total=n_total),
        )
        for r in ratios
    ]
