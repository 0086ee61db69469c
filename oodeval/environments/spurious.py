"""Environments that differ only in how strongly a spurious feature tracks a noisy label.

SR-CMNIST, Colored and Lined (Section 4 of the worst+gap paper) share one recipe, implemented once
in `SpuriousScenario`:

1. a *preliminary* label per base image (e.g. digit 0-4 -> 0, 5-9 -> 1);
2. a *final* label: the preliminary label replaced, with probability 0.25, by a uniformly chosen
   other class (for two classes: flipped), so a model using only the invariant content errs 25%;
3. per environment with parameter e, a *spurious* label derived from the final label (e.g. the color
   label is the final label flipped with probability e), rendered into the image (color, line).

The source is split once, by a permutation drawn from the seed, into a given pool and a held-out
evaluation pool (`eval_fraction`, default 0.2). Given environments take disjoint slices of the given
pool (each its own label noise and spurious labels). Evaluation environments (E_all) all use the
same held-out images with fixed final labels, re-rendered per e with fresh spurious labels, and are
generated one at a time, so only the base images are kept in memory: as uint8 when every pixel is
exactly k/255 (MNIST, 8-bit photos; `compact_pixels`), a quarter of float32's bytes, turned back
into the identical float32 values when an environment is rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from oodeval.environments._pools import check_eval_fraction
from oodeval.environments.base import Environment, Scenario, SharedEvaluation
from oodeval.environments.source_kinds import ImageSource
from oodeval.errors import OodevalError, listing, repeats

LABEL_NOISE = 0.25
MIN_IMAGES_PER_ENV = 10
E_ALL = tuple(round(k / 100, 2) for k in range(101))

Renderer = Callable[[np.ndarray, np.ndarray], np.ndarray]
SpuriousLabels = Callable[[np.ndarray, float, np.random.Generator], np.ndarray]


class PoolSplit(NamedTuple):
    """How a spurious family splits its source: the seed, the share held out for E_all and the
    images per environment, as `SpuriousScenario` takes them.

    >>> PoolSplit(seed=3)
    PoolSplit(seed=3, eval_fraction=0.2, n_per_given=None, n_eval=None)
    """

    seed: int = 0
    eval_fraction: float = 0.2
    n_per_given: int | None = None
    n_eval: int | None = None


def environment_name(e: float) -> str:
    """The name of the environment with parameter `e`: ``"e=0.10"``, 2 to 4 decimals as needed.

    Two decimals name the E_all grid; values such as 0.8 + 0.1/3 get four, which keeps every
    SR-CMNIST E_given set (at most 20 values 0.1/19 apart) free of clashes.

    >>> environment_name(0.1), environment_name(0.85), environment_name(0.8 + 0.1 / 3)
    ('e=0.10', 'e=0.85', 'e=0.8333')
    """
    text = f"{e:.4f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"e={whole}.{frac.ljust(2, '0')}"


def replaced_labels(
    labels: np.ndarray, p: float, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """`labels` where each entry, with probability `p`, becomes a uniformly chosen *other* class.

    For two classes this is flipping with probability `p`.

    >>> replaced_labels(np.array([0, 1, 1]), 1.0, 2, np.random.default_rng(0)).tolist()
    [1, 0, 0]
    """
    n = labels.shape[0]
    change = rng.random(n) < p
    offset = rng.integers(1, num_classes, size=n) if num_classes > 2 else np.ones(n, np.int64)
    return np.where(change, (labels + offset) % num_classes, labels).astype(np.int64)


def parse_ratio(ratio: str | tuple[int, int], *, allow_zero_minor: bool = True) -> tuple[int, int]:
    """Parse ``"N_major:N_minor"`` (e.g. ``"4:1"``) into two integers with N_major >= N_minor.

    >>> parse_ratio("4:1")
    (4, 1)
    """
    if isinstance(ratio, tuple) and len(ratio) == 2:
        parts = [str(p) for p in ratio]
    elif isinstance(ratio, str):
        parts = ratio.strip().split(":")
    else:
        parts = []
    try:
        if len(parts) != 2:
            raise ValueError
        major, minor = int(parts[0]), int(parts[1])
    except ValueError:
        raise OodevalError(
            f"malformed ratio {ratio!r}; write it as N_major:N_minor, e.g. '4:1'"
        ) from None
    low = 0 if allow_zero_minor else 1
    if major < 1 or minor < low or major < minor:
        raise OodevalError(
            f"ratio {ratio!r} must have N_major >= N_minor >= {low} and N_major >= 1, e.g. '4:1'"
        )
    return major, minor


def check_values(values: Sequence[float], what: str) -> tuple[float, ...]:
    """Validate environment parameters: a non-empty list of distinct numbers in [0, 1]."""
    try:
        out = tuple(round(float(v), 12) for v in values)
    except (TypeError, ValueError):
        raise OodevalError(f"{what} must be numbers in [0, 1], got {listing(values)}") from None
    if not out:
        raise OodevalError(f"{what} must list at least one environment")
    if any(not (0.0 <= v <= 1.0) for v in out):
        outside = [v for v in out if not 0.0 <= v <= 1.0]
        raise OodevalError(f"{what} must lie in [0, 1], got {listing(outside)}")
    names = [environment_name(v) for v in out]
    if len(set(names)) != len(names):
        repeated = repeats(names)
        raise OodevalError(
            f"{what} has duplicate environments: {len(names) - len(set(names))} of {len(names)} "
            f"repeat a name ({listing(repeated)})"
        )
    return out


def ratio_or_given_identity(
    family: str,
    ratio: str,
    given: Sequence[float] | None,
    values_of_ratio: Callable[[str], tuple[float, ...]],
) -> tuple[str, tuple[float, ...], dict]:
    """Return (scenario name, E_given values, params) of a family set by `ratio` or by `given`.

    Without `given` the values are ``values_of_ratio(ratio)`` and the name ends in
    ``/ratio=<ratio>``; an explicit `given` overrides the ratio, names the scenario ``/custom``
    and is recorded in the params.

    >>> ratio_or_given_identity("colored", "4:1", None, lambda r: (0.05, 0.5))
    ('colored/ratio=4:1', (0.05, 0.5), {'ratio': '4:1'})
    >>> ratio_or_given_identity("colored", "4:1", [0.3, 0.7], lambda r: (0.05, 0.5))
    ('colored/custom', (0.3, 0.7), {'given': [0.3, 0.7]})
    """
    if given is None:
        return f"{family}/ratio={ratio}", values_of_ratio(ratio), {"ratio": ratio}
    values = tuple(given)
    return f"{family}/custom", values, {"given": list(values)}


class SpuriousScenario(Scenario):
    """A scenario whose environments differ in the parameter e of a spurious feature.

    Parameters
    ----------
    name : str
        Scenario name, e.g. ``"sr-cmnist/ratio=3:1/scale=1"``.
    base : ndarray of shape (N, ...)
        Base images in [0, 1] (kept once, as uint8 when exact: `compact_pixels`; rendered per
        environment by `render`, which always receives float32).
    preliminary : int array of shape (N,)
        Preliminary labels in ``0..num_classes-1``.
    num_classes : int
    given_values, all_values : sequences of float
        The parameters e of E_given and E_all.
    render : callable(base_subset, spurious_labels) -> float32 (n, C, H, W)
        Must render each row from its own image and label alone (all built-in renderers do):
        the full model is tested on E_all once per spurious value (`shared_evaluation`).
    spurious : callable(final_labels, e, rng) -> spurious labels
    input_shape : tuple of int
        Shape (C, H, W) of one rendered image.
    seed : int
        Everything (pool split, label noise, spurious labels) derives from it.
    eval_fraction : float
        Share of the source held out for the evaluation environments E_all (default 0.2).
    n_per_given : int, optional
        Images per given environment (default: the given pool split evenly).
    n_eval : int, optional
        Images per evaluation environment (default: the whole held-out pool).
    """

    def __init__(
        self,
        *,
        name: str,
        base: np.ndarray,
        preliminary: np.ndarray,
        num_classes: int,
        given_values: Sequence[float],
        all_values: Sequence[float],
        render: Renderer,
        spurious: SpuriousLabels,
        input_shape: tuple[int, int, int],
        seed: int = 0,
        eval_fraction: float = 0.2,
        n_per_given: int | None = None,
        n_eval: int | None = None,
        params: dict | None = None,
        source_name: str = "",
    ) -> None:
        self.name = name
        self.num_classes = num_classes
        self.input_shape = input_shape
        self.params = dict(params or {})
        self.seed = int(seed)
        self.given_values = check_values(given_values, "given environments")
        self.all_values = check_values(all_values, "evaluation environments")
        self._base = compact_pixels(base)
        self._preliminary = np.asarray(preliminary, dtype=np.int64)
        self._render = render
        self._spurious = spurious
        self._split_pools(eval_fraction, n_per_given, n_eval, source_name or name)

    def _split_pools(
        self, eval_fraction: float, n_per_given: int | None, n_eval: int | None, source: str
    ) -> None:
        eval_fraction = check_eval_fraction(eval_fraction)
        total = self._preliminary.shape[0]
        n_given_envs = len(self.given_values)
        order = np.random.default_rng([self.seed, 0]).permutation(total)
        n_pool_eval = int(round(eval_fraction * total))
        eval_pool, given_pool = order[:n_pool_eval], order[n_pool_eval:]
        for what, value in (("n_per_given", n_per_given), ("n_eval", n_eval)):
            whole = isinstance(value, int | np.integer | float) and float(value).is_integer()
            if value is not None and (
                isinstance(value, bool) or not whole or value < MIN_IMAGES_PER_ENV
            ):
                raise OodevalError(
                    f"{what} must be an integer >= {MIN_IMAGES_PER_ENV}, got {value!r}"
                )
        per_env = len(given_pool) // n_given_envs if n_per_given is None else int(n_per_given)
        if per_env < MIN_IMAGES_PER_ENV or per_env * n_given_envs > len(given_pool):
            raise OodevalError(
                f"source {source} has too few images: {len(given_pool)} in the given pool for "
                f"{n_given_envs} given environments x {max(per_env, MIN_IMAGES_PER_ENV)} images; "
                "use a larger source, lower n_per_given, or fewer environments"
            )
        n_eval_env = len(eval_pool) if n_eval is None else int(n_eval)
        if n_eval_env < MIN_IMAGES_PER_ENV or n_eval_env > len(eval_pool):
            raise OodevalError(
                f"source {source} has too few images: {len(eval_pool)} held out, "
                f"{max(n_eval_env, MIN_IMAGES_PER_ENV)} requested per evaluation environment; "
                "use a larger source, raise eval_fraction or lower n_eval"
            )
        self.given_indices = [
            np.sort(given_pool[i * per_env : (i + 1) * per_env]) for i in range(n_given_envs)
        ]
        self.eval_indices = np.sort(eval_pool[:n_eval_env])
        rng = np.random.default_rng([self.seed, 2])
        self._eval_preliminary = self._preliminary[self.eval_indices]
        self._eval_final = replaced_labels(
            self._eval_preliminary, LABEL_NOISE, self.num_classes, rng
        )
        self._eval_base = self._base[self.eval_indices]

    @property
    def given_names(self) -> list[str]:
        return [environment_name(e) for e in self.given_values]

    @property
    def all_names(self) -> list[str]:
        return [environment_name(e) for e in self.all_values]

    def sizes(self) -> dict[str, dict[str, int]]:
        """Images per environment: {"given": {name: n}, "evaluation": {name: n}}."""
        return {
            "given": {n: len(i) for n, i in zip(self.given_names, self.given_indices, strict=True)},
            "evaluation": {n: len(self.eval_indices) for n in self.all_names},
        }

    def given(self) -> list[Environment]:
        """The given environments, on disjoint slices of the given pool, in `given_names` order."""
        out = []
        for i, (e, idx) in enumerate(zip(self.given_values, self.given_indices, strict=True)):
            rng = np.random.default_rng([self.seed, 1, i])
            prelim = self._preliminary[idx]
            final = replaced_labels(prelim, LABEL_NOISE, self.num_classes, rng)
            spur = self._spurious(final, e, rng)
            images = self._render(unit_pixels(self._base[idx]), spur)
            out.append(self._environment(e, images, final, prelim, spur, idx, "given"))
        return out

    def evaluation(self) -> Iterator[Environment]:
        """E_all, one environment at a time: the held-out images re-rendered per e."""
        for j, e in enumerate(self.all_values):
            yield self.evaluation_environment(j, e)

    def evaluation_environment(self, j: int, e: float) -> Environment:
        """The `j`-th evaluation environment (parameter `e`), independent of the others."""
        spur = self._eval_spurious(j, e)
        images = self._render(unit_pixels(self._eval_base), spur)
        # Copies: the held-out labels are shared by all 101 environments and must stay intact
        # whatever a consumer does with one environment's arrays.
        return self._environment(
            e,
            images,
            self._eval_final.copy(),
            self._eval_preliminary.copy(),
            spur,
            self.eval_indices.copy(),
            "evaluation",
        )

    def _eval_spurious(self, j: int, e: float) -> np.ndarray:
        return self._spurious(self._eval_final, e, np.random.default_rng([self.seed, 3, j]))

    def shared_evaluation(self) -> SharedEvaluation:
        """E_all as the held-out images rendered per spurious label: environment j shows image i
        with its own spurious label ``s_j[i]``, so each image needs testing once per label value.

        >>> from oodeval.environments import build_scenario
        >>> shared = build_scenario("sr-cmnist", source="digits").shared_evaluation()
        >>> len(shared.names), shared.values()
        (101, [0, 1])
        """
        variants = tuple(
            self._eval_spurious(j, e).astype(np.int64) for j, e in enumerate(self.all_values)
        )
        return SharedEvaluation(
            names=tuple(self.all_names),
            labels=self._eval_final.copy(),
            variants=variants,
            render=self._render_all,
        )

    def _render_all(self, value: int) -> np.ndarray:
        """Every held-out image rendered with spurious label `value`."""
        n = len(self._eval_final)
        return self._render(unit_pixels(self._eval_base), np.full(n, int(value), dtype=np.int64))

    def _environment(
        self,
        e: float,
        images: np.ndarray,
        final: np.ndarray,
        prelim: np.ndarray,
        spur: np.ndarray,
        idx: np.ndarray,
        role: str,
    ) -> Environment:
        meta = {"e": e, "role": role, "preliminary": prelim, "spurious": spur, "indices": idx}
        return Environment(environment_name(e), images, final, meta)


def spurious_scenario(
    source: ImageSource,
    *,
    name: str,
    params: dict,
    base: np.ndarray,
    given_values: Sequence[float],
    render: Renderer,
    spurious: SpuriousLabels,
    channels: int,
    binary: bool = True,
    split: PoolSplit = PoolSplit(),
) -> SpuriousScenario:
    """The scenario of a spurious family over `source`: E_given `given_values`, E_all the
    101-grid `E_ALL`, images `base` rendered by `render` into `channels` x H x W.

    The one builder of the SR-CMNIST, Colored and Lined families. The task is binary
    (`binary_preliminary`: lower half of the source's classes -> 0) when `binary`, else the
    source's own K classes; ``params`` (the family's parameters) gains ``source``, the source's
    name. `split` gives `SpuriousScenario`'s seed, eval_fraction, n_per_given and n_eval.

    >>> from oodeval.environments.sources import load_source
    >>> src = load_source("digits")
    >>> sc = spurious_scenario(
    ...     src, name="toy", params={}, base=to_rgb(src.images), given_values=(0.1, 0.9),
    ...     render=lambda images, spur: images, spurious=flipped_by_e, channels=3,
    ... )
    >>> sc.num_classes, sc.input_shape, len(sc.all_names), sc.params
    (2, (3, 8, 8), 101, {'source': 'digits'})
    """
    if binary:
        preliminary, num_classes = binary_preliminary(source.labels, source.num_classes), 2
    else:
        preliminary, num_classes = source.labels, source.num_classes
    return SpuriousScenario(
        name=name,
        base=base,
        preliminary=preliminary,
        num_classes=num_classes,
        given_values=given_values,
        all_values=E_ALL,
        render=render,
        spurious=spurious,
        input_shape=(channels, base.shape[-2], base.shape[-1]),
        **split._asdict(),
        params={**params, "source": source.name},
        source_name=source.name,
    )


def compact_pixels(images: np.ndarray, *, block: int = 1024) -> np.ndarray:
    """`images` as uint8 k when every value is exactly the float32 k / 255 (MNIST, 8-bit photos),
    else `images` unchanged; `unit_pixels` restores the identical float32 values.

    Checked `block` rows at a time, so the check needs little memory beyond the uint8 result.

    >>> compact_pixels(np.float32([0, 255, 128]) / np.float32(255)).tolist()
    [0, 255, 128]
    >>> compact_pixels(np.float32([0.5])).dtype.name
    'float32'
    """
    if images.dtype != np.float32 or images.ndim == 0:
        return images
    codes = np.empty(images.shape, dtype=np.uint8)
    for start in range(0, images.shape[0], block):
        part = images[start : start + block]
        scaled = np.rint(part * np.float32(255))
        if not np.all((scaled >= 0) & (scaled <= 255)):
            return images
        codes[start : start + block] = scaled
        if not np.array_equal(unit_pixels(codes[start : start + block]), part):
            return images
    return codes


def unit_pixels(images: np.ndarray) -> np.ndarray:
    """float32 pixels in [0, 1]: uint8 codes k -> k / 255 (float32 division), float32 unchanged."""
    if images.dtype == np.uint8:
        return images.astype(np.float32) / np.float32(255)
    return images


def to_gray(images: np.ndarray) -> np.ndarray:
    """Luminance (N, H, W) of (N, C, H, W) images: channel 0 if C = 1, ITU-R 601 weights for RGB."""
    if images.shape[1] == 1:
        return images[:, 0]
    if images.shape[1] != 3:
        raise OodevalError(f"images must have 1 or 3 channels, got {images.shape[1]}")
    weights = np.asarray([0.299, 0.587, 0.114], dtype=np.float32)
    return np.einsum("nchw,c->nhw", images, weights).astype(np.float32)


def to_rgb(images: np.ndarray) -> np.ndarray:
    """(N, 3, H, W) images: grayscale ones repeated over three channels, RGB ones unchanged."""
    if images.shape[1] == 3:
        return images
    if images.shape[1] != 1:
        raise OodevalError(f"images must have 1 or 3 channels, got {images.shape[1]}")
    return np.repeat(images, 3, axis=1)


def binary_preliminary(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Class k -> 0 for k < num_classes // 2, else 1 (digits 0-4 -> 0, 5-9 -> 1; Section 4.1).

    >>> binary_preliminary(np.arange(10), 10).tolist()
    [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    """
    if num_classes < 2:
        raise OodevalError(
            f"a binary task needs a source with at least 2 classes, got {num_classes}"
        )
    return (np.asarray(labels) >= num_classes // 2).astype(np.int64)


def flipped_by_e(final: np.ndarray, e: float, rng: np.random.Generator) -> np.ndarray:
    """Spurious labels for two classes: the final label flipped with probability e.

    A module-level function (not a closure) so that scenarios pickle into worker processes.
    """
    return replaced_labels(final, e, 2, rng)
