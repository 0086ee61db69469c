"""The NICO++ flexible protocols: training and test domains chosen per class (Section 4.3).

Random: for every class, `n_dominant` dominant domains are drawn from the common domains,
`n_minor` minor domains from the class's remaining domains, and `n_test` of the rest are test
domains (NICO++: 2, 12, 6 of 20). A domain may then be seen with class A in training and with
class B at test time, so domain-label correlations can be spurious.

Compositional: `n_exclusive` exclusive domains (drawn once from the common domains, or named) are
used for training only; every class takes `n_majority` majority domains from them, `n_minority`
minority domains from its sharing (non-exclusive) domains and `n_test` of the remaining sharing
domains for test (NICO++: 4, 2, 12, 4), so no majority domain ever appears at test time.

Both take all images of dominant/majority domains, `per_minor` images per minor/minority domain
and `per_test` per test domain (NICO++: 50 and 50), drawn with a generator seeded by (seed, class).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from oodeval.errors import OodevalError, listing, option
from oodeval.protocols.tree import (
    NICO_COMMON_DOMAINS,
    AssignmentRow,
    ImageTree,
    check_domains,
    class_rng,
    sample_cell,
    with_validation,
)


def default_common_domains(tree: ImageTree) -> tuple[str, ...]:
    """NICO++'s ten common domains when the tree has them all, else the domains of every class."""
    if all(d in tree.domains for d in NICO_COMMON_DOMAINS):
        return NICO_COMMON_DOMAINS
    return tree.common_domains()


def flexible_random_assignment(
    tree: ImageTree,
    *,
    common_domains: Sequence[str] | None = None,
    n_dominant: int = 2,
    n_minor: int = 12,
    n_test: int = 6,
    per_minor: int = 50,
    per_test: int = 50,
    val_fraction: float = 0.0,
    seed: int = 0,
) -> list[AssignmentRow]:
    """Return the rows of a flexible random domain assignment (roles train, val, test).

    Parameters
    ----------
    tree : ImageTree
    common_domains : sequence of str, optional
        Domains dominant ones are drawn from (default: `default_common_domains`).
    n_dominant, n_minor, n_test : int
        Domains per class in each group.
    per_minor, per_test : int
        Images drawn per minor training domain and per test domain.
    val_fraction : float
        Share of every training cell moved to role "val" (default 0: the NICO++ counts).
    seed : int
    """
    _check_counts(
        n_dominant=n_dominant,
        n_minor=n_minor,
        n_test=n_test,
        per_minor=per_minor,
        per_test=per_test,
    )
    rows = _rows_by_class(
        tree,
        _common(tree, common_domains),
        (),
        (n_dominant, n_minor, n_test, per_minor, per_test),
        seed,
        _RANDOM_WORDS,
        lambda cls, pool: (
            f"class {cls} has {len(pool)} common domain(s) with images ({listing(pool)}) but "
            f"{n_dominant} dominant domains are needed; lower {option('n_dominant')}"
        ),
    )
    return with_validation(rows, val_fraction, seed)


def flexible_compositional_assignment(
    tree: ImageTree,
    *,
    exclusive_domains: Sequence[str] | None = None,
    common_domains: Sequence[str] | None = None,
    n_exclusive: int = 4,
    n_majority: int = 2,
    n_minority: int = 12,
    n_test: int = 4,
    per_minor: int = 50,
    per_test: int = 50,
    val_fraction: float = 0.0,
    seed: int = 0,
) -> list[AssignmentRow]:
    """Return the rows of a flexible compositional domain assignment (roles train, val, test).

    Parameters
    ----------
    tree : ImageTree
    exclusive_domains : sequence of str, optional
        The training-only domains; by default `n_exclusive` drawn (seeded) from the common domains.
    common_domains : sequence of str, optional
        Where exclusive domains are drawn from (default: `default_common_domains`).
    n_exclusive, n_majority, n_minority, n_test : int
        Group sizes (NICO++: 4, 2, 12, 4).
    per_minor, per_test, val_fraction, seed : as in `flexible_random_assignment`.
    """
    _check_counts(
        n_dominant=n_majority,
        n_minor=n_minority,
        n_test=n_test,
        per_minor=per_minor,
        per_test=per_test,
    )
    if exclusive_domains is not None:
        exclusive = check_domains(tree, exclusive_domains, "exclusive")
    else:
        common = _common(tree, common_domains)
        if n_exclusive < n_majority or len(common) < n_exclusive:
            raise OodevalError(
                f"cannot draw {n_exclusive} exclusive domains holding {n_majority} majority ones "
                f"from {len(common)} common domain(s); adjust {option('n_exclusive')}"
            )
        rng = class_rng(seed, "\0exclusive")
        exclusive = tuple(
            sorted(common[i] for i in rng.choice(len(common), n_exclusive, replace=False))
        )
    rows = _rows_by_class(
        tree,
        exclusive,
        exclusive,
        (n_majority, n_minority, n_test, per_minor, per_test),
        seed,
        _COMP_WORDS,
        lambda cls, pool: (
            f"class {cls} has images in {len(pool)} exclusive domain(s) "
            f"({listing(pool) or 'none'}) but {n_majority} majority domains are needed"
        ),
    )
    return with_validation(rows, val_fraction, seed)


class _RoleWords(NamedTuple):
    """How a protocol names its main and minor training domains and the pool of the minor ones."""

    main: str
    minor: str
    rest: str


_RANDOM_WORDS = _RoleWords("dominant", "minor", "non-dominant")
_COMP_WORDS = _RoleWords("majority", "minority", "sharing")


def _rows_by_class(
    tree: ImageTree,
    candidates: Sequence[str],
    reserved: Sequence[str],
    counts: tuple[int, int, int, int, int],
    seed: int,
    words: _RoleWords,
    shortage: Callable[[str, list[str]], str],
) -> list[AssignmentRow]:
    """Rows of every class, each drawn with the generator seeded by (seed, class).

    A class's main domains are `counts[0]` drawn from its `candidates` (too few: the error
    ``shortage(cls, pool)``); its minor and test domains come from its other domains outside
    `reserved`. `counts` is (n_main, n_minor, n_test, per_minor, per_test).
    """
    n_main, n_minor, n_test, per_minor, per_test = counts
    rows: list[AssignmentRow] = []
    for cls in tree.classes:
        rng = class_rng(seed, cls)
        own = tree.domains_of(cls)
        pool = [d for d in candidates if d in own]
        if len(pool) < n_main:
            raise OodevalError(shortage(cls, pool))
        main = [pool[i] for i in sorted(rng.choice(len(pool), n_main, replace=False))]
        rest = [d for d in own if d not in main and d not in reserved]
        rows += _class_rows(tree, cls, main, rest, n_minor, n_test, per_minor, per_test, rng, words)
    return rows


def _class_rows(
    tree: ImageTree,
    cls: str,
    main: Sequence[str],
    rest: Sequence[str],
    n_minor: int,
    n_test: int,
    per_minor: int,
    per_test: int,
    rng: np.random.Generator,
    words: _RoleWords,
) -> list[AssignmentRow]:
    """Rows of one class: all images of `main`, then `n_minor` minor and `n_test` test domains.

    The minor and test domains are drawn without overlap from `rest` (one permutation by `rng`);
    `per_minor` images are sampled per minor domain and `per_test` per test domain.
    """
    if len(rest) < n_minor + n_test:
        raise OodevalError(
            f"class {cls} has {len(rest)} {words.rest} domain(s) but {n_minor} {words.minor} + "
            f"{n_test} test are needed; lower {option(f'n_{words.minor}')} or {option('n_test')}"
        )
    order = rng.permutation(len(rest))
    minor = sorted(rest[i] for i in order[:n_minor])
    test = sorted(rest[i] for i in order[n_minor : n_minor + n_test])
    rows = []
    for dom in main:
        files = sample_cell(tree, cls, dom, None, rng, f"a {words.main} training domain")
        rows += [AssignmentRow(p, cls, dom, "train") for p in files]
    for dom in minor:
        files = sample_cell(tree, cls, dom, per_minor, rng, f"a {words.minor} training domain")
        rows += [AssignmentRow(p, cls, dom, "train") for p in files]
    for dom in test:
        files = sample_cell(tree, cls, dom, per_test, rng, "a test domain")
        rows += [AssignmentRow(p, cls, dom, "test") for p in files]
    return rows


def _common(tree: ImageTree, common_domains: Sequence[str] | None) -> tuple[str, ...]:
    if common_domains is not None:
        return check_domains(tree, common_domains, "common")
    common = default_common_domains(tree)
    if not common:
        raise OodevalError("no domain holds images of every class; name the common domains")
    return common


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        low = 0 if name == "n_minor" else 1
        if int(value) < low:
            raise OodevalError(f"{name} must be at least {low}, got {value}")
