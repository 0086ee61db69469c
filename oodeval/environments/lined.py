"""Lined environments, L-CIFAR10 style (Section 4.2.2 of the worst+gap paper).

A K-class task (e.g. CIFAR-10) with 25% label noise (a noisy label is a uniformly chosen other
class) and a class-specific colored line as the spurious feature: in environment e the line shows
the final label's color with probability e and another class's color (uniformly chosen) otherwise,
so e is the strength of the spurious correlation. The line is a horizontal band across the top of
the image, max(1, H // 10) rows thick. E_all is the 101-grid; the paper's E_given is
{0.50, 0.80, 0.85, 0.90, 0.95} (Ratio 4:1).

Ratio variants (3:2, 4:1, 5:0 in Table 2, sets not listed in the paper): oodeval takes N_major
values 0.95, 0.90, ... (strong correlation) and N_minor values 0.50, 0.45, ... (weak), so 4:1 gives
the paper's set, 3:2 gives {0.45, 0.50, 0.85, 0.90, 0.95}, 5:0 gives {0.75, ..., 0.95}.
"""

from __future__ import annotations

import colorsys
from collections.abc import Sequence

import numpy as np

from oodeval.environments.source_kinds import ImageSource
from oodeval.environments.sources import as_image_source
from oodeval.environments.spurious import (
    PoolSplit,
    SpuriousScenario,
    parse_ratio,
    ratio_or_given_identity,
    replaced_labels,
    spurious_scenario,
    to_rgb,
)
from oodeval.errors import OodevalError

DEFAULT_RATIO = "4:1"
# Ten well-separated colors (RGB in [0, 1]), none black or white, so a line shows on the black
# background of digits and on bright photos alike; more classes get evenly spaced hues.
TEN_COLORS = (
    (0.90, 0.10, 0.10),
    (0.10, 0.70, 0.10),
    (0.10, 0.30, 0.95),
    (0.95, 0.85, 0.10),
    (0.80, 0.10, 0.85),
    (0.10, 0.85, 0.85),
    (1.00, 0.55, 0.00),
    (0.55, 0.30, 0.10),
    (1.00, 0.60, 0.80),
    (0.50, 0.50, 0.50),
)


def line_colors(num_classes: int) -> np.ndarray:
    """One RGB color per class, float32 (num_classes, 3)."""
    if num_classes <= len(TEN_COLORS):
        return np.asarray(TEN_COLORS[:num_classes], dtype=np.float32)
    hues = [colorsys.hsv_to_rgb(k / num_classes, 0.9, 0.95) for k in range(num_classes)]
    return np.asarray(hues, dtype=np.float32)


def lined_given_values(ratio: str = DEFAULT_RATIO) -> tuple[float, ...]:
    """E_given of a Lined Ratio: N_minor values ..., 0.45, 0.50 then N_major values ..., 0.90, 0.95.

    >>> lined_given_values("4:1")
    (0.5, 0.8, 0.85, 0.9, 0.95)
    >>> lined_given_values("3:2")
    (0.45, 0.5, 0.85, 0.9, 0.95)
    """
    major, minor = parse_ratio(ratio)
    minors = sorted(round(0.5 - 0.05 * k, 12) for k in range(minor))
    majors = sorted(round(0.95 - 0.05 * k, 12) for k in range(major))
    if majors and majors[0] < 0:
        raise OodevalError(f"ratio {ratio!r} has too many major environments (at most 19)")
    return tuple(minors) + tuple(majors)


class LineDrawer:
    """Paints a band of rows 0..thickness-1 in the color of each image's line class.

    A class rather than a closure so that scenarios pickle into worker processes.
    """

    def __init__(self, num_classes: int, height: int) -> None:
        self.colors = line_colors(num_classes)
        self.thickness = max(1, height // 10)

    def __call__(self, images: np.ndarray, line_classes: np.ndarray) -> np.ndarray:
        out = np.array(images, dtype=np.float32, copy=True)
        out[:, :, : self.thickness, :] = self.colors[line_classes][:, :, None, None]
        return out


class KeptWithProbabilityE:
    """Spurious line classes for K classes: the final label kept with probability e."""

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes

    def __call__(self, final: np.ndarray, e: float, rng: np.random.Generator) -> np.ndarray:
        return replaced_labels(final, 1.0 - e, self.num_classes, rng)


def build_lined(
    *,
    source: str | ImageSource = "digits",
    seed: int = 0,
    ratio: str = DEFAULT_RATIO,
    given: Sequence[float] | None = None,
    eval_fraction: float = 0.2,
    n_per_given: int | None = None,
    n_eval: int | None = None,
) -> SpuriousScenario:
    """Lined environments over any source with K >= 2 classes (the source labels are the task).

    Parameters
    ----------
    source : spec or ImageSource
        The images to draw a line on; its K classes are the task.
    seed : int
        Seed of the pool split, the label noise and the line colors.
    ratio : str
        N_major:N_minor, e.g. "4:1" (the paper's), "3:2" or "5:0" (`lined_given_values`).
    given : sequence of float, optional
        Explicit E_given, overriding the ratio.
    eval_fraction, n_per_given, n_eval
        As in `SpuriousScenario`.

    >>> sc = build_lined(source="digits")
    >>> sc.num_classes, sc.given_names
    (10, ['e=0.50', 'e=0.80', 'e=0.85', 'e=0.90', 'e=0.95'])
    """
    src = as_image_source(source)
    k = src.num_classes
    if k < 2:
        raise OodevalError(f"the lined family needs at least 2 classes, source has {k}")
    name, values, params = ratio_or_given_identity("lined", ratio, given, lined_given_values)
    return spurious_scenario(
        src,
        name=name,
        params=params,
        base=to_rgb(src.images),
        given_values=values,
        render=LineDrawer(k, src.images.shape[-2]),
        spurious=KeptWithProbabilityE(k),
        channels=3,
        binary=False,
        split=PoolSplit(seed, eval_fraction, n_per_given, n_eval),
    )
