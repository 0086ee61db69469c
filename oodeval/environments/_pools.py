"""The seeded split of a multi-domain source's images into given and held-out pools, per domain.

Shared by the families that hold out part of every domain for E_all (`corrupted`, `domains`):
with the same seed and `eval_fraction`, both hold out the same images of a domain.
"""

from __future__ import annotations

import numpy as np

from oodeval.errors import OodevalError


def check_eval_fraction(eval_fraction: float) -> float:
    """`eval_fraction` as a float after checking it lies strictly between 0 and 1.

    >>> check_eval_fraction(0.25)
    0.25
    """
    if not (0.0 < float(eval_fraction) < 1.0):
        raise OodevalError(f"eval_fraction must be in (0, 1), got {eval_fraction!r}")
    return float(eval_fraction)


def domain_pools(
    domain_ids: np.ndarray, n_domains: int, eval_fraction: float, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per domain j (0 .. `n_domains` - 1): (held-out rows, given rows) of its images.

    Domain j's rows (those with ``domain_ids == j``) are permuted by a generator seeded with
    ``[seed, 0, j]``; the first round(`eval_fraction` x n_j) are held out (returned sorted), the
    rest form the given pool (returned in the permuted order, for a caller to divide).

    >>> held, given = domain_pools(np.array([0, 0, 0, 0, 1, 1]), 2, 0.25, seed=0)[0]
    >>> len(held), len(given), sorted([*held.tolist(), *given.tolist()])
    (1, 3, [0, 1, 2, 3])
    """
    pools = []
    for j in range(n_domains):
        idx = np.flatnonzero(domain_ids == j)
        order = np.random.default_rng([seed, 0, j]).permutation(idx)
        n_eval = int(round(eval_fraction * len(idx)))
        pools.append((np.sort(order[:n_eval]), order[n_eval:]))
    return pools
