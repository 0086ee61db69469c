"""Corrupted environments: PACS-corrupted / VLCS-corrupted (Section 4.3 of the worst+gap paper).

For a source with K base domains, E_all holds every base domain clean plus each domain under each of
the 15 common corruptions of Hendrycks & Dietterich at one severity (default 3): K x 16
environments, 64 for K = 4. Names are ``"<domain>"`` (clean) and ``"<domain>/<corruption>"``.

E_given is sampled by a pattern such as ``"1-1-1-1"`` or ``"2-0-2-2"``: the k-th number is how many
distinct corruptions are drawn (seeded) for the k-th domain (in sorted domain order); 0 means the
domain contributes no given environment. Each domain's images are split once into a given pool
(80%) and a held-out pool (`eval_fraction`); a domain's given pool is divided evenly among its drawn
corruptions (disjoint images), and every evaluation environment of that domain uses its held-out
pool.

Corruption uses ``imagecorruptions`` (package imagecorruptions-imaug) on uint8 RGB images of at
least 32x32 pixels. Every image is corrupted with a seed derived from its own bytes, the corruption
and the severity (numpy's global generator is re-seeded per image and glass_blur / impulse_noise
also get ``seed=``), so results do not depend on order, blocks or processes. Results are cached on
disk as one ``.npy`` file per (block of images, corruption, severity), named by a hash of the
block's pixels, those parameters and the imagecorruptions version: a second build reads the files,
an interrupted build resumes where it stopped.
"""

from __future__ import annotations

import functools
import hashlib
import io
import multiprocessing
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from oodeval._extras import require_extra
from oodeval._files import write_file
from oodeval._npz import read_npy
from oodeval.environments._pools import check_eval_fraction, domain_pools
from oodeval.environments.base import Environment, Scenario
from oodeval.environments.source_kinds import ImageSource
from oodeval.environments.sources import as_image_source
from oodeval.errors import OodevalError

CORRUPTIONS = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
)
PATTERNS = ("1-1-1-1", "2-2-2-2", "1-0-1-1", "2-0-2-2")
SEEDED_BY_ARGUMENT = ("glass_blur", "impulse_noise")
MIN_SIDE = 32
CACHE_VERSION = "1"
DEFAULT_BLOCK = 256


def default_cache_dir() -> Path:
    """``$OODEVAL_CACHE/corrupted``, or ``~/.cache/oodeval/corrupted``."""
    root = os.environ.get("OODEVAL_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "oodeval"
    return base / "corrupted"


def parse_pattern(pattern: str, n_domains: int | None) -> tuple[int, ...]:
    """Parse a sampling pattern such as ``"2-0-2-2"`` into per-domain counts.

    With ``n_domains=None`` only the syntax is checked (before the source's images are looked at,
    so a malformed pattern is the error reported, not the source).

    >>> parse_pattern("2-0-2-2", 4)
    (2, 0, 2, 2)
    """
    if not isinstance(pattern, str) or not re.fullmatch(r"\d+(-\d+)*", pattern.strip()):
        shown = repr(pattern) if len(repr(pattern)) <= 40 else repr(pattern)[:37] + "..."
        raise OodevalError(f"malformed pattern {shown}; write one count per domain, e.g. '1-1-1-1'")
    counts = tuple(int(p) for p in pattern.strip().split("-"))
    if n_domains is not None and len(counts) != n_domains:
        raise OodevalError(
            f"pattern {pattern!r} has {len(counts)} counts but the source has {n_domains} "
            f"domain(s); give one count per domain, e.g. {'-'.join(['1'] * n_domains)!r}"
        )
    if sum(counts) == 0:
        raise OodevalError(f"pattern {pattern!r} selects no given environment")
    return counts


def check_corruptions(names: Sequence[str]) -> tuple[str, ...]:
    """Validate corruption names against the 15 common corruptions."""
    names = tuple(names)
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown:
        raise OodevalError(
            f"unknown corruption {unknown[0]!r}; use names from: {', '.join(CORRUPTIONS)}"
        )
    if not names or len(set(names)) != len(names):
        raise OodevalError("corruptions must be a non-empty list of distinct names")
    return names


def image_seed(image: np.ndarray, corruption: str, severity: int) -> int:
    """A 32-bit seed from the image's bytes, the corruption and the severity."""
    digest = hashlib.sha256(image.tobytes())
    digest.update(f"|{corruption}|{severity}".encode())
    return int.from_bytes(digest.digest()[:4], "little")


def corrupt_image(image: np.ndarray, corruption: str, severity: int) -> np.ndarray:
    """`image` (uint8 H x W x 3, H, W >= 32) under `corruption` at `severity`, deterministically.

    Calls the corruption function of ``imagecorruptions`` directly and clips to [0, 255] before
    converting to uint8 (its ``corrupt`` wrapper casts without clipping, which could wrap around).
    numpy's global generator is left as the caller had it.
    """
    from imagecorruptions import corruption_dict
    from PIL import Image

    seed = image_seed(image, corruption, severity)
    kwargs = {"seed": seed} if corruption in SEEDED_BY_ARGUMENT else {}
    # imagecorruptions draws from numpy's global generator: seed it for this image, then give the
    # caller's generator back its state.
    caller_state = np.random.get_state()
    np.random.seed(seed)
    try:
        out = corruption_dict[corruption](Image.fromarray(image), severity, **kwargs)
    finally:
        np.random.set_state(caller_state)
    clipped = np.clip(np.asarray(out, dtype=np.float64), 0.0, 255.0).astype(np.uint8)
    return clipped.reshape(image.shape)


def corrupt_block(images: np.ndarray, corruption: str, severity: int) -> np.ndarray:
    """Corrupt a block of uint8 (n, H, W, 3) images one by one (run in worker processes)."""
    return np.stack([corrupt_image(img, corruption, severity) for img in images])


def to_uint8_hwc(images: np.ndarray) -> np.ndarray:
    """float32 (n, 3, H, W) in [0, 1] -> uint8 (n, H, W, 3), rounding to nearest."""
    return np.clip(np.rint(images.transpose(0, 2, 3, 1) * 255.0), 0, 255).astype(np.uint8)


@functools.cache
def corruption_library() -> str:
    """The installed distribution(s) providing ``imagecorruptions``, with versions.

    Part of every cache key: another version may corrupt differently, and its results must not
    be mixed with cached ones.
    """
    from importlib.metadata import packages_distributions, version

    names = sorted(packages_distributions().get("imagecorruptions", []))
    return ",".join(f"{name}=={version(name)}" for name in names) or "imagecorruptions==unknown"


class CorruptionCache:
    """On-disk store of corrupted blocks: ``<dir>/<sha256 key>.npy`` written atomically."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    @staticmethod
    def key(block: np.ndarray, corruption: str, severity: int) -> str:
        """SHA-256 of the block's pixels, the corruption, the severity and the library version."""
        text = f"v{CACHE_VERSION}|{corruption_library()}|{corruption}|{severity}|{block.shape}"
        digest = hashlib.sha256(text.encode())
        digest.update(np.ascontiguousarray(block).tobytes())
        return digest.hexdigest()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.npy"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def load(self, key: str) -> np.ndarray:
        try:
            return read_npy(self.path(key), what="corrupted cache file")
        except (OSError, ValueError) as exc:
            raise OodevalError(
                f"corrupted cache file {self.path(key)} is unreadable ({exc}); "
                "delete it and rebuild"
            ) from None

    def save(self, key: str, array: np.ndarray) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        write_file(self.path(key), buffer.getvalue())  # atomic, never through a link


class CorruptedScenario(Scenario):
    """Base domains clean and corrupted; E_given drawn by `pattern`. See the module docstring.

    Parameters
    ----------
    source : ImageSource
        RGB images of at least 32x32 with `domains` (a ``folder:`` source); a source without
        domains counts as one domain named ``"all"``.
    pattern : str
        Corruptions drawn per domain for E_given, e.g. "1-1-1-1".
    severity : int
        1..5 (default 3).
    corruptions : sequence of str
        Which corruptions make up E_all (default: the 15 common ones).
    cache_dir : path, optional
        Where corrupted blocks are cached (default `default_cache_dir()`).
    workers : int
        Processes used to fill the cache (default 2; 1 runs in this process).
    """

    def __init__(
        self,
        source: ImageSource,
        *,
        pattern: str = "1-1-1-1",
        severity: int = 3,
        seed: int = 0,
        corruptions: Sequence[str] = CORRUPTIONS,
        cache_dir: str | Path | None = None,
        workers: int = 2,
        eval_fraction: float = 0.2,
        block: int = DEFAULT_BLOCK,
        progress: bool = True,
    ) -> None:
        if isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= 5:
            raise OodevalError(f"severity must be an integer from 1 to 5, got {severity!r}")
        if not isinstance(workers, int) or workers < 1:
            raise OodevalError(f"workers must be a positive integer, got {workers!r}")
        parse_pattern(pattern, None)
        eval_fraction = check_eval_fraction(eval_fraction)
        require_extra("corruptions", "the corrupted family")
        images = source.images
        if images.ndim != 4 or images.shape[1] not in (1, 3):
            raise OodevalError(f"corrupted needs (N, 1 or 3, H, W) images, got {images.shape}")
        if min(images.shape[2:]) < MIN_SIDE:
            raise OodevalError(
                f"corruptions need images of at least {MIN_SIDE}x{MIN_SIDE}, source {source.name} "
                f"has {images.shape[2]}x{images.shape[3]}; use a source of larger images, e.g. a "
                f"folder:DIR source loaded at image size >= {MIN_SIDE}"
            )
        self.source = source
        self.corruptions = check_corruptions(corruptions)
        self.severity = severity
        self.seed = int(seed)
        self.workers = workers
        self.block = int(block)
        self.progress = progress
        self.cache = CorruptionCache(cache_dir if cache_dir is not None else default_cache_dir())
        self.domains = source.domain_names if source.domains is not None else ("all",)
        domain_ids = source.domains if source.domains is not None else np.zeros(len(source), int)
        self.counts = parse_pattern(pattern, len(self.domains))
        if max(self.counts) > len(self.corruptions):
            raise OodevalError(
                f"pattern {pattern!r} asks for {max(self.counts)} corruptions of one domain but "
                f"only {len(self.corruptions)} are available"
            )
        self.name = f"corrupted/pattern={pattern}/severity={severity}"
        self.num_classes = source.num_classes
        self.input_shape = (3, int(images.shape[2]), int(images.shape[3]))
        self.params = {"pattern": pattern, "severity": severity, "source": source.name}
        self._uint8 = to_uint8_hwc(images if images.shape[1] == 3 else np.repeat(images, 3, 1))
        self._split(np.asarray(domain_ids), eval_fraction)
        self._prepared = False

    def _split(self, domain_ids: np.ndarray, eval_fraction: float) -> None:
        draw = np.random.default_rng([self.seed, 1])
        self.domain_indices: list[np.ndarray] = []
        self.eval_indices: list[np.ndarray] = []
        self.given_plan: list[tuple[int, str, np.ndarray]] = []
        pools = domain_pools(domain_ids, len(self.domains), eval_fraction, self.seed)
        for j, (eval_pool, given_pool) in enumerate(pools):
            domain, idx = self.domains[j], np.flatnonzero(domain_ids == j)
            count = self.counts[j]
            chosen = [self.corruptions[c] for c in draw.permutation(len(self.corruptions))[:count]]
            if len(eval_pool) < 1 or (count and len(given_pool) // count < 1):
                raise OodevalError(
                    f"domain {domain!r} has too few images ({len(idx)}) for a held-out pool and "
                    f"{count} given environment(s); add images or lower the pattern's count"
                )
            per = len(given_pool) // count if count else 0
            for k, corruption in enumerate(chosen):
                part = np.sort(given_pool[k * per : (k + 1) * per])
                self.given_plan.append((j, corruption, part))
            self.domain_indices.append(np.sort(idx))
            self.eval_indices.append(eval_pool)

    @property
    def given_names(self) -> list[str]:
        return [f"{self.domains[j]}/{c}" for j, c, _ in self.given_plan]

    @property
    def all_names(self) -> list[str]:
        names = []
        for domain in self.domains:
            names.append(domain)
            names += [f"{domain}/{c}" for c in self.corruptions]
        return names

    def sizes(self) -> dict[str, dict[str, int]]:
        """Images per environment: {"given": {name: n}, "evaluation": {name: n}}."""
        given = {f"{self.domains[j]}/{c}": len(p) for j, c, p in self.given_plan}
        evaluation = {}
        for j, domain in enumerate(self.domains):
            evaluation[domain] = len(self.eval_indices[j])
            for c in self.corruptions:
                evaluation[f"{domain}/{c}"] = len(self.eval_indices[j])
        return {"given": given, "evaluation": evaluation}

    def _blocks(self, j: int) -> list[np.ndarray]:
        idx = self.domain_indices[j]
        return [idx[s : s + self.block] for s in range(0, len(idx), self.block)]

    def prepare(self) -> int:
        """Fill the cache with every (domain block, corruption); return the number computed.

        Blocks already cached are skipped (a second build, or a resumed one, computes nothing).
        """
        tasks = []
        for j in range(len(self.domains)):
            for rows in self._blocks(j):
                block = self._uint8[rows]
                for corruption in self.corruptions:
                    key = self.cache.key(block, corruption, self.severity)
                    if not self.cache.has(key):
                        tasks.append((key, block, corruption))
        if tasks:
            self._run(tasks)
        self._prepared = True
        return len(tasks)

    def _run(self, tasks: list[tuple[str, np.ndarray, str]]) -> None:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(tasks),
            desc="corrupting",
            unit="block",
            disable=not self.progress,
            leave=False,
        )
        try:
            if self.workers == 1 or len(tasks) == 1:
                for key, block, corruption in tasks:
                    self.cache.save(key, corrupt_block(block, corruption, self.severity))
                    bar.update(1)
                return
            # "spawn": workers start clean, which stays safe when the caller has torch (and its
            # OpenMP threads) loaded; the start-up cost is small next to a corruption pass.
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=self.workers, mp_context=context) as pool:
                futures = {
                    pool.submit(corrupt_block, block, corruption, self.severity): key
                    for key, block, corruption in tasks
                }
                for future in as_completed(futures):
                    self.cache.save(futures[future], future.result())
                    bar.update(1)
        finally:
            bar.close()

    def _corrupted(self, j: int, corruption: str | None, rows: np.ndarray) -> np.ndarray:
        """float32 (n, 3, H, W) images of domain `j`, rows `rows` (source indices)."""
        if corruption is None:
            data = self._uint8[rows]
        else:
            if not self._prepared:
                self.prepare()
            position = {int(r): p for p, r in enumerate(self.domain_indices[j])}
            wanted = np.asarray([position[int(r)] for r in rows], dtype=np.int64)
            parts = []
            for rows_block in self._blocks(j):
                key = self.cache.key(self._uint8[rows_block], corruption, self.severity)
                parts.append(self.cache.load(key))
            data = np.concatenate(parts)[wanted]
        return data.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)

    def given(self) -> list[Environment]:
        """The sampled given environments (disjoint images), in `given_names` order."""
        out = []
        for (j, corruption, rows), name in zip(self.given_plan, self.given_names, strict=True):
            images = self._corrupted(j, corruption, rows)
            meta = {
                "domain": self.domains[j],
                "corruption": corruption,
                "role": "given",
                "indices": rows,
            }
            out.append(Environment(name, images, self.source.labels[rows], meta))
        return out

    def evaluation(self) -> Iterator[Environment]:
        """Every domain clean, then under each corruption, on its held-out images."""
        for j, domain in enumerate(self.domains):
            rows = self.eval_indices[j]
            labels = self.source.labels[rows]
            for corruption in (None, *self.corruptions):
                name = domain if corruption is None else f"{domain}/{corruption}"
                meta = {
                    "domain": domain,
                    "corruption": corruption,
                    "role": "evaluation",
                    "indices": rows.copy(),
                }
                yield Environment(name, self._corrupted(j, corruption, rows), labels, meta)


def build_corrupted(
    *,
    source: str | ImageSource,
    seed: int = 0,
    pattern: str = "1-1-1-1",
    severity: int = 3,
    corruptions: Sequence[str] = CORRUPTIONS,
    cache_dir: str | Path | None = None,
    workers: int = 2,
    eval_fraction: float = 0.2,
    image_size: int | None = None,
    progress: bool = True,
) -> CorruptedScenario:
    """PACS/VLCS-corrupted style environments over a multi-domain source (see module docstring).

    Parameters
    ----------
    source : spec or ImageSource
        RGB images of at least 32x32 with domains (a ``folder:DIR`` source); a source without
        domains counts as one domain named ``"all"``.
    seed : int
        Seed of the pool split and of the corruptions drawn for E_given.
    pattern : str
        Corruptions drawn per domain for E_given, e.g. 1-1-1-1 or 2-0-2-2.
    severity : int
        Corruption severity 1..5.
    corruptions : sequence of str
        Which corruptions make up E_all (default: the 15 common ones, `CORRUPTIONS`).
    cache_dir : str or Path, optional
        Cache folder for corrupted images (default ``$OODEVAL_CACHE/corrupted``, else
        ``~/.cache/oodeval/corrupted``).
    workers : int
        Processes used to fill the cache (1 runs in this process).
    eval_fraction : float
        Share of each domain's images held out for the evaluation environments E_all.
    image_size : int, optional
        Side the source's images are resized to (folder sources: default 64).
    progress : bool
        Show a progress bar while corrupting images.

    >>> import numpy as np
    >>> from oodeval.environments import ImageSource
    >>> imgs = np.zeros((8, 3, 32, 32), np.float32)
    >>> doms = np.repeat([0, 1], 4)
    >>> src = ImageSource("toy", imgs, np.zeros(8, np.int64), ("a",), doms, ("A", "B"))
    >>> sc = build_corrupted(source=src, pattern="1-0")
    >>> len(sc.all_names), sc.given_names
    (32, ['A/snow'])
    """
    src = as_image_source(source, size=image_size)
    return CorruptedScenario(
        src,
        pattern=pattern,
        severity=severity,
        seed=seed,
        corruptions=corruptions,
        cache_dir=cache_dir,
        workers=workers,
        eval_fraction=eval_fraction,
        progress=progress,
    )
