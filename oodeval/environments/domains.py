"""Domain environments: NICO++'s classic domain-generalization setting as a scenario.

NICO++ (Zhang et al., 2023, Section 4.2 and Table 2) trains on a fixed set of domains shared by
all classes and tests on the others, one accuracy per target domain. Over a multi-domain source
(a ``folder:DIR`` tree, ``<domain>/<class>/<image>``) the ``domains`` family makes that a
leave-one-environment-out scenario: each *given* domain is a given environment, every other domain
of the source a *target* domain.

- E_given: one environment per given domain (sorted by name, named by the domain): its images
  minus a held-out share `eval_fraction` (default 0.2), drawn per domain with the seed (the split
  the ``corrupted`` family draws: both hold out the same images of a domain).
- E_all: every domain of the source, sorted by name: a given domain's held-out images, and *all*
  images of a target domain, so no target image is ever trained on. With every domain given
  (no target left) E_all is the given domains' held-out parts: an in-distribution check, allowed.

The default given domains are NICO++'s first split of Table 2, `NICO_TRAIN_DOMAINS` (grass, water,
rock, autumn, indoor, dim; targets sand, winter, outdoor, dark): a source without all six names
its own. The scenario is named ``domains/given=<the given domains, sorted, comma-separated>``, e.g.
``domains/given=autumn,dim,grass,indoor,rock,water``: the same split by any order of writing it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from oodeval._text import shortened
from oodeval.environments._pools import check_eval_fraction, domain_pools
from oodeval.environments.base import Environment, Scenario
from oodeval.environments.source_kinds import ImageSource
from oodeval.environments.sources import as_image_source
from oodeval.errors import OodevalError, listing, repeats

# NICO++'s ten common domains and its first classic assignment (Section 4.2, Table 2, left half).
NICO_TRAIN_DOMAINS: tuple[str, ...] = ("grass", "water", "rock", "autumn", "indoor", "dim")
NICO_TEST_DOMAINS: tuple[str, ...] = ("sand", "winter", "outdoor", "dark")
NICO_COMMON_DOMAINS: tuple[str, ...] = NICO_TRAIN_DOMAINS + NICO_TEST_DOMAINS

#: What separates the given domains in a scenario name, hence refused inside a given domain's name.
NAME_SEPARATOR = ","


def check_domain_names(
    names: Sequence[str], available: Sequence[str], what: str, *, where: str = "the source"
) -> tuple[str, ...]:
    """`names` as a tuple after checking they are distinct names of `available` (domains of
    `where`); `what` says which side they are ("given", "test").

    >>> check_domain_names(["b", "a"], ("a", "b", "c"), "given")
    ('b', 'a')
    >>> check_domain_names(["a", "x"], ("a", "b"), "given")
    Traceback (most recent call last):
    ...
    oodeval.errors.OodevalError: given domain(s) x not in the source; available: a, b
    """
    names = tuple(names)
    unknown = [d for d in names if d not in available]
    if unknown:
        raise OodevalError(
            f"{what} domain(s) {listing(unknown)} not in {where}; available: {listing(available)}"
        )
    if len(set(names)) != len(names):
        raise OodevalError(f"{what} domains repeat a name: {listing(repeats(names))}")
    return names


def given_domains(given: Sequence[str] | str, available: Sequence[str]) -> tuple[str, ...]:
    """The given domains `given` names, sorted, after checking them against `available`.

    `given` is a list of domain names or one string joining them with ``+`` (as SPECs write
    lists: ``given=grass+water``). At least two are needed (leave-one-environment-out needs
    N >= 2 given environments).

    >>> given_domains("water+grass", ("grass", "sand", "water"))
    ('grass', 'water')
    """
    if isinstance(given, str):
        names = tuple(given.split("+"))
    elif isinstance(given, Sequence) and all(isinstance(n, str) for n in given):
        names = tuple(given)
    else:
        raise OodevalError(
            "given must be a list of domain names, e.g. ['grass', 'water'], got "
            f"{type(given).__name__} {shortened(repr(given), longest=60)}"
        )
    if names == NICO_TRAIN_DOMAINS and not set(names) <= set(available):
        missing = [d for d in names if d not in available]
        raise OodevalError(
            f"the source lacks {listing(missing)} of the default given domains (NICO++'s Table 2 "
            f"split: {', '.join(NICO_TRAIN_DOMAINS)}); name the given domains, e.g. "
            f"given={list(available[:2])!r} (available: {listing(available)})"
        )
    check_domain_names(names, available, "given")
    if len(names) < 2:
        raise OodevalError(
            f"given names {len(names)} domain(s) but leave-one-environment-out needs at least 2; "
            f"add given domains (available: {listing(available)})"
        )
    commas = [n for n in names if NAME_SEPARATOR in n]
    if commas:
        raise OodevalError(
            f"given domain {commas[0]!r} has a {NAME_SEPARATOR!r}, which separates the given "
            "domains in the scenario's name; rename its folder"
        )
    return tuple(sorted(names))


class DomainScenario(Scenario):
    """Given domains trained on, every domain evaluated; see the module docstring.

    Each environment's `meta` holds ``domain`` (its name), ``domain_role`` (``"given"`` or
    ``"target"``), ``role`` (``"given"`` in E_given, ``"evaluation"`` in E_all) and ``indices``
    (the source rows of its images).

    Parameters
    ----------
    source : ImageSource
        Images with `domains` (a ``folder:`` source).
    given : sequence of str or str
        The given domains (`given_domains`); every other domain is a target domain.
    seed : int
        Seed of each given domain's held-out share.
    eval_fraction : float
        Share of each given domain's images held out for E_all.
    """

    def __init__(
        self,
        source: ImageSource,
        *,
        given: Sequence[str] | str = NICO_TRAIN_DOMAINS,
        seed: int = 0,
        eval_fraction: float = 0.2,
    ) -> None:
        eval_fraction = check_eval_fraction(eval_fraction)
        if source.domains is None:
            raise OodevalError(
                f"the domains family needs a source with domains, such as folder:DIR (a "
                f"<domain>/<class>/<image> tree); {source.name} has none"
            )
        self.source = source
        self.seed = int(seed)
        self.domains = tuple(sorted(source.domain_names))
        self.given_domains = given_domains(given, self.domains)
        self.target_domains = tuple(d for d in self.domains if d not in self.given_domains)
        self.name = f"domains/given={NAME_SEPARATOR.join(self.given_domains)}"
        self.num_classes = source.num_classes
        if source.images.ndim != 4:
            raise OodevalError(f"domains needs (N, C, H, W) images, got {source.images.shape}")
        channels, height, width = (int(d) for d in source.images.shape[1:])
        self.input_shape = (channels, height, width)
        self.params = {"given": list(self.given_domains), "source": source.name}
        self._split(np.asarray(source.domains), eval_fraction)

    def _split(self, domain_ids: np.ndarray, eval_fraction: float) -> None:
        """Per domain name: its given rows (given domains) and its E_all rows (all domains)."""
        names = self.source.domain_names
        pools = domain_pools(domain_ids, len(names), eval_fraction, self.seed)
        self.given_rows: dict[str, np.ndarray] = {}
        self.eval_rows: dict[str, np.ndarray] = {}
        for j, (domain, (held_out, rest)) in enumerate(zip(names, pools, strict=True)):
            if domain in self.target_domains:
                rows = np.flatnonzero(domain_ids == j)
                if len(rows) < 1:
                    raise OodevalError(f"target domain {domain!r} has no images; add some")
                self.eval_rows[domain] = rows
                continue
            if len(held_out) < 1 or len(rest) < 1:
                raise OodevalError(
                    f"given domain {domain!r} has too few images ({len(held_out) + len(rest)}) "
                    f"to hold out eval_fraction={eval_fraction} of them and train on the rest; "
                    "add images or change eval_fraction"
                )
            self.given_rows[domain], self.eval_rows[domain] = np.sort(rest), held_out

    @property
    def given_names(self) -> list[str]:
        return list(self.given_domains)

    @property
    def all_names(self) -> list[str]:
        return list(self.domains)

    def sizes(self) -> dict[str, dict[str, int]]:
        """Images per environment: {"given": {name: n}, "evaluation": {name: n}}."""
        return {
            "given": {d: len(self.given_rows[d]) for d in self.given_names},
            "evaluation": {d: len(self.eval_rows[d]) for d in self.all_names},
        }

    def _environment(self, domain: str, rows: np.ndarray, role: str) -> Environment:
        kind = "given" if domain in self.given_rows else "target"
        meta = {"domain": domain, "domain_role": kind, "role": role, "indices": rows.copy()}
        return Environment(domain, self.source.images[rows], self.source.labels[rows], meta)

    def given(self) -> list[Environment]:
        """One environment per given domain (its images not held out), in `given_names` order."""
        return [self._environment(d, self.given_rows[d], "given") for d in self.given_names]

    def evaluation(self) -> Iterator[Environment]:
        """Every domain in `all_names` order: a given domain's held-out images, a target
        domain's images all."""
        for domain in self.all_names:
            yield self._environment(domain, self.eval_rows[domain], "evaluation")


def build_domains(
    *,
    source: str | ImageSource,
    seed: int = 0,
    given: Sequence[str] = NICO_TRAIN_DOMAINS,
    eval_fraction: float = 0.2,
    image_size: int | None = None,
) -> DomainScenario:
    """NICO++'s classic DG setting (Sec. 4.2): given domains vs target domains (module docstring).

    Parameters
    ----------
    source : spec or ImageSource
        Images with domains: a ``folder:DIR`` source (``<domain>/<class>/<image>``).
    seed : int
        Seed of each given domain's held-out share.
    given : sequence of str
        The given (training) domains, at least 2 (one string joining them with + also works);
        every other domain of the source is a target domain. Default: NICO++'s Table 2 split,
        grass, water, rock, autumn, indoor, dim.
    eval_fraction : float
        Share of each given domain's images held out for E_all (target domains: all their images).
    image_size : int, optional
        Side the source's images are resized to (folder sources: default 64).

    >>> import numpy as np
    >>> from oodeval.environments import ImageSource
    >>> doms = np.repeat([0, 1, 2], 5)
    >>> src = ImageSource("toy", np.zeros((15, 3, 8, 8), np.float32), doms % 2, ("a", "b"),
    ...                   doms, ("photo", "art", "sketch"))
    >>> sc = build_domains(source=src, given=["photo", "art"])
    >>> sc.name, sc.given_names, sc.all_names
    ('domains/given=art,photo', ['art', 'photo'], ['art', 'photo', 'sketch'])
    >>> sc.sizes()["given"], sc.sizes()["evaluation"]
    ({'art': 4, 'photo': 4}, {'art': 1, 'photo': 1, 'sketch': 5})
    """
    src = as_image_source(source, size=image_size)
    return DomainScenario(src, given=given, seed=seed, eval_fraction=eval_fraction)
