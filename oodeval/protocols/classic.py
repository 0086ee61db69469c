"""The NICO++ classic protocol: named training and test domains shared by all classes (Sec. 4.2).

Training takes every image of the training domains (minus a seeded, per-cell stratified validation
share), test every image of the test domains. With no domains named and all ten NICO++ common
domains present, the split of Table 2 (left) is used: train grass, water, rock, autumn, indoor,
dim; test sand, winter, outdoor, dark.
"""

from __future__ import annotations

from collections.abc import Sequence

from oodeval.errors import OodevalError
from oodeval.protocols.tree import (
    NICO_TEST_DOMAINS,
    NICO_TRAIN_DOMAINS,
    ImageTree,
    SplitRow,
    check_domains,
    with_validation,
)


def classic_split(
    tree: ImageTree,
    *,
    train_domains: Sequence[str] | None = None,
    test_domains: Sequence[str] | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> list[SplitRow]:
    """Return the rows of a classic split of `tree` (roles train, val, test).

    Parameters
    ----------
    tree : ImageTree
        From `scan_tree`.
    train_domains, test_domains : sequence of str, optional
        Domain names. One of them alone means "the other domains" for the other; neither means
        the NICO++ defaults (an error when the tree lacks any of them).
    val_fraction : float
        Share of every training (class, domain) cell moved to role "val", seeded.
    seed : int
        Seeds the validation draw.
    """
    if train_domains is None and test_domains is None:
        missing = [d for d in NICO_TRAIN_DOMAINS + NICO_TEST_DOMAINS if d not in tree.domains]
        if missing:
            raise OodevalError(
                f"the tree lacks the NICO++ default domains {', '.join(missing)}; name the "
                f"training and test domains (found: {', '.join(tree.domains)})"
            )
        train_domains, test_domains = NICO_TRAIN_DOMAINS, NICO_TEST_DOMAINS
    elif train_domains is None:
        test = check_domains(tree, test_domains or (), "test")
        train_domains = [d for d in tree.domains if d not in test]
    elif test_domains is None:
        train = check_domains(tree, train_domains, "training")
        test_domains = [d for d in tree.domains if d not in train]
    train = check_domains(tree, train_domains, "training")
    test = check_domains(tree, test_domains, "test")
    if not train or not test:
        raise OodevalError("the classic protocol needs at least one training and one test domain")
    overlap = sorted(set(train) & set(test))
    if overlap:
        raise OodevalError(f"domain(s) {', '.join(overlap)} named for both training and test")
    rows: list[SplitRow] = []
    for cls in tree.classes:
        n_train = 0
        for role, domains in (("train", train), ("test", test)):
            for dom in domains:
                files = tree.images(cls, dom)
                rows += [SplitRow(p, cls, dom, role) for p in files]
                n_train += len(files) if role == "train" else 0
        if n_train == 0:
            raise OodevalError(
                f"class {cls} has no images in the training domains {', '.join(train)}"
            )
    return with_validation(rows, val_fraction, seed)
