"""The NICO++ classic protocol: named training and test domains shared by all classes (Sec. 4.2).

Training takes every image of the training domains (minus a seeded, per-cell stratified validation
share), test every image of the test domains. With no domains named and all ten NICO++ common
domains present, the domains of Table 2 (left) are used: train grass, water, rock, autumn, indoor,
dim; test sand, winter, outdoor, dark. With one side named, the other is the remaining domains
common to every class: a class-specific (unique) domain is on neither side.
"""

from __future__ import annotations

from collections.abc import Sequence

from oodeval.errors import OodevalError, listing
from oodeval.protocols.tree import (
    NICO_TEST_DOMAINS,
    NICO_TRAIN_DOMAINS,
    AssignmentRow,
    ImageTree,
    check_domains,
    with_validation,
)


def classic_domains(
    tree: ImageTree,
    *,
    train_domains: Sequence[str] | None = None,
    test_domains: Sequence[str] | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Return the (training, test) domains of a classic domain assignment of `tree`.

    Both named: those. One named: the other side is every domain common to all classes
    (`ImageTree.common_domains`) not named, so every class gets the same training and test
    domains; class-specific domains (NICO++'s unique domains) are used by neither side. Neither
    named: NICO++'s Table 2 domains (an error when the tree lacks any of its domains).

    >>> from pathlib import Path
    >>> cells = {(c, d): (f"{d}/{c}/1.jpg",) for c in ("cat", "dog") for d in ("a", "b", "c")}
    >>> cells[("cat", "cat_only")] = ("cat_only/cat/1.jpg",)
    >>> classic_domains(ImageTree(Path("."), cells), test_domains=["b"])
    (('a', 'c'), ('b',))
    """
    if train_domains is None and test_domains is None:
        missing = [d for d in NICO_TRAIN_DOMAINS + NICO_TEST_DOMAINS if d not in tree.domains]
        if missing:
            raise OodevalError(
                f"the tree lacks the NICO++ default domains {listing(missing)}; name the "
                f"training and test domains (found: {listing(tree.domains)})"
            )
        return NICO_TRAIN_DOMAINS, NICO_TEST_DOMAINS
    if train_domains is None:
        test = check_domains(tree, test_domains or (), "test")
        return _remaining_common(tree, test, "test", "training"), test
    train = check_domains(tree, train_domains, "training")
    if test_domains is None:
        return train, _remaining_common(tree, train, "training", "test")
    return train, check_domains(tree, test_domains, "test")


def classic_assignment(
    tree: ImageTree,
    *,
    train_domains: Sequence[str] | None = None,
    test_domains: Sequence[str] | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> list[AssignmentRow]:
    """Return the rows of a classic domain assignment of `tree` (roles train, val, test).

    Parameters
    ----------
    tree : ImageTree
        From `scan_tree`.
    train_domains, test_domains : sequence of str, optional
        Domain names. One of them alone means "the other domains common to every class" for the
        other side (class-specific domains are left out); neither means the NICO++ defaults (an
        error when the tree lacks any of them). See `classic_domains`.
    val_fraction : float
        Share of every training (class, domain) cell moved to role "val", seeded.
    seed : int
        Seeds the validation draw.
    """
    train, test = classic_domains(tree, train_domains=train_domains, test_domains=test_domains)
    if not train or not test:
        raise OodevalError("the classic protocol needs at least one training and one test domain")
    overlap = sorted(set(train) & set(test))
    if overlap:
        raise OodevalError(f"domain(s) {listing(overlap)} named for both training and test")
    rows: list[AssignmentRow] = []
    for cls in tree.classes:
        n_train = 0
        for role, domains in (("train", train), ("test", test)):
            for dom in domains:
                files = tree.images(cls, dom)
                rows += [AssignmentRow(p, cls, dom, role) for p in files]
                n_train += len(files) if role == "train" else 0
        if n_train == 0:
            raise OodevalError(
                f"class {cls} has no images in the training domains {listing(train)}"
            )
    return with_validation(rows, val_fraction, seed)


def _remaining_common(
    tree: ImageTree, named: tuple[str, ...], named_role: str, role: str
) -> tuple[str, ...]:
    """The domains common to every class that are not `named` (the other side of the assignment)."""
    rest = tuple(d for d in tree.common_domains() if d not in named)
    if not rest:
        raise OodevalError(
            f"no domain common to every class is left for {role} besides the {named_role} "
            f"domains {listing(named)}; name the {role} domains too"
        )
    return rest
