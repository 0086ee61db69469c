"""Colored environments, C-Cats&Dogs style (Section 4.2.1 of the worst+gap paper).

A binary task (a two-class source such as Cats&Dogs, or any source with classes split in halves)
with 25% label noise and a color tint as the spurious feature: in environment e the tint label is
the final label flipped with probability e, and the image is multiplied by a reddish tint (tint 0)
or a greenish tint (tint 1). E_all is the 101-grid {0.00, ..., 1.00}; the paper's E_given is
{0.05, 0.10, 0.15, 0.20, 0.50} (Ratio 4:1).

Ratio variants (Table 2 of the paper names 3:2, 4:1 and 5:0 without listing their sets): oodeval
takes the N_major values 0.05, 0.10, ... (strong correlation) and the N_minor values 0.50, 0.55, ...
(weak correlation), so 4:1 gives the paper's set, 3:2 gives {0.05, 0.10, 0.15, 0.50, 0.55} and 5:0
gives {0.05, ..., 0.25}. Pass `given=` for any other set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oodeval.environments.source_kinds import ImageSource
from oodeval.environments.sources import as_image_source
from oodeval.environments.spurious import (
    PoolSplit,
    SpuriousScenario,
    flipped_by_e,
    parse_ratio,
    ratio_or_given_identity,
    spurious_scenario,
    to_rgb,
)

DEFAULT_RATIO = "4:1"
TINTS = np.asarray([[1.0, 0.45, 0.45], [0.45, 1.0, 0.45]], dtype=np.float32)


def colored_given_values(ratio: str = DEFAULT_RATIO) -> tuple[float, ...]:
    """E_given of a Colored Ratio: N_major values 0.05, 0.10, ..., N_minor values 0.50, 0.55, ...

    >>> colored_given_values("4:1")
    (0.05, 0.1, 0.15, 0.2, 0.5)
    >>> colored_given_values("3:2")
    (0.05, 0.1, 0.15, 0.5, 0.55)
    """
    major, minor = parse_ratio(ratio)
    return tuple(round(0.05 * (k + 1), 12) for k in range(major)) + tuple(
        round(0.5 + 0.05 * k, 12) for k in range(minor)
    )


def tinted(images: np.ndarray, tints: np.ndarray) -> np.ndarray:
    """RGB images multiplied channel-wise by TINTS[tints[i]].

    >>> tinted(np.ones((1, 3, 1, 1), np.float32), np.array([1]))[0, :, 0, 0].tolist()
    [0.44999998807907104, 1.0, 0.44999998807907104]
    """
    return images * TINTS[tints][:, :, None, None]


def build_colored(
    *,
    source: str | ImageSource = "digits",
    seed: int = 0,
    ratio: str = DEFAULT_RATIO,
    given: Sequence[float] | None = None,
    eval_fraction: float = 0.2,
    n_per_given: int | None = None,
    n_eval: int | None = None,
) -> SpuriousScenario:
    """Colored environments over any source (binary labels: lower half of classes -> 0).

    Parameters
    ----------
    source : spec or ImageSource
        The images to tint; labels below num_classes // 2 map to class 0.
    seed : int
        Seed of the pool split, the label noise and the tints.
    ratio : str
        N_major:N_minor, e.g. "4:1" (the paper's), "3:2" or "5:0" (`colored_given_values`).
    given : sequence of float, optional
        Explicit E_given, overriding the ratio.
    eval_fraction, n_per_given, n_eval
        As in `SpuriousScenario`.

    >>> sc = build_colored(source="digits")
    >>> sc.given_names, sc.input_shape
    (['e=0.05', 'e=0.10', 'e=0.15', 'e=0.20', 'e=0.50'], (3, 8, 8))
    """
    src = as_image_source(source)
    name, values, params = ratio_or_given_identity("colored", ratio, given, colored_given_values)
    return spurious_scenario(
        src,
        name=name,
        params=params,
        base=to_rgb(src.images),
        given_values=values,
        render=tinted,
        spurious=flipped_by_e,
        channels=3,
        split=PoolSplit(seed, eval_fraction, n_per_given, n_eval),
    )
