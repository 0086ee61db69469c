"""The NICO++ oracle baselines: models trained on the target domains themselves (App. D).

NICO++ reports two oracles beside the classic protocol's algorithms (Appendix D, Table 5):

- *oracle* (`ORACLE_VARIANTS` ``"mixture"``): all images of the target (test) domains are pooled
  and split at random 7:1:2 into train, validation and test; one ERM model is trained on the
  mixture of target domains (the Oracle row of Tables 2 and 3).
- *oracle\\** (``"per-domain"``): every target domain is split 7:1:2 on its own and one model is
  trained per target domain, so training and test data come from a single domain.

`oracle_assignment` returns either as a domain assignment (rows path, class, domain, role) over
the target domains only: the source domains are not used. With ``"per-domain"`` the domain of a
row says which of the K models it belongs to: train model k on the train rows of domain k and
predict the test rows of domain k with it. `oodeval.protocols.evaluate_assignment` scores both.

The 7:1:2 counts of a pool of n images are `split_counts` (largest remainders); the images are
drawn by one permutation seeded by (seed, variant[, domain]), of the pool sorted by path, so the
assignment depends only on the seed and the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from oodeval.errors import OodevalError, listing
from oodeval.protocols.tree import AssignmentRow, ImageTree, check_domains, class_rng

#: NICO++ App. D's split of the target data: train : validation : test.
ORACLE_RATIO: tuple[int, int, int] = (7, 1, 2)
#: The two oracles of NICO++ App. D: variant name -> the paper's name and what is trained.
ORACLE_VARIANTS: dict[str, str] = {
    "mixture": "oracle: one model on the pooled target domains",
    "per-domain": "oracle*: one model per target domain",
}


def split_counts(n: int, ratio: Sequence[int] = ORACLE_RATIO) -> tuple[int, ...]:
    """How many of `n` images go to train, validation and test for the ratio (default 7:1:2).

    The largest-remainder rule: every part first gets floor(n * r_i / sum(r)); the images left
    over go one each to the parts with the largest fractional remainders, ties going to the
    earlier part (train before validation before test). The counts sum to n and each is within
    one image of its exact share.

    >>> split_counts(10), split_counts(15), split_counts(3)
    ((7, 1, 2), (11, 1, 3), (2, 0, 1))
    """
    if n < 0:
        raise OodevalError(f"cannot split {n} images")
    total = sum(ratio)
    quotas = [Fraction(n * r, total) for r in ratio]
    counts = [int(q) for q in quotas]
    left = n - sum(counts)
    order = sorted(range(len(ratio)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[:left]:
        counts[i] += 1
    return tuple(counts)


def oracle_assignment(
    tree: ImageTree,
    target_domains: Sequence[str],
    *,
    variant: str = "mixture",
    seed: int = 0,
) -> list[AssignmentRow]:
    """Return the rows of a NICO++ oracle assignment over `target_domains` (App. D).

    Parameters
    ----------
    tree : ImageTree
        From `scan_tree`.
    target_domains : sequence of str
        The test domains of the classic setting the oracle belongs to.
    variant : {"mixture", "per-domain"}
        ``"mixture"``: NICO++'s *oracle* (the target images pooled, one 7:1:2 split);
        ``"per-domain"``: *oracle\\** (a 7:1:2 split of every target domain on its own).
    seed : int
        Seeds the split.

    Raises OodevalError when a target domain is left without a test image (per domain: one with
    fewer than 3 images; pooled: a small domain the seeded draw gave no test image).

    >>> from pathlib import Path
    >>> cells = {("x", d): tuple(f"{d}/x/{i}.jpg" for i in range(10)) for d in ("a", "b")}
    >>> rows = oracle_assignment(ImageTree(Path("."), cells), ["a", "b"], variant="per-domain")
    >>> [sum(r.role == role and r.domain == "a" for r in rows) for role in ("train", "val", "test")]
    [7, 1, 2]
    """
    if variant not in ORACLE_VARIANTS:
        raise OodevalError(
            f"unknown oracle variant {variant!r}; use one of {', '.join(ORACLE_VARIANTS)}"
        )
    targets = check_domains(tree, target_domains, "target")
    if not targets:
        raise OodevalError("the oracle needs at least one target domain")
    by_domain = {d: sorted(p for c in tree.classes for p in tree.images(c, d)) for d in targets}
    if variant == "mixture":
        pools = [(f"\0oracle/{variant}", sorted(p for d in targets for p in by_domain[d]))]
    else:
        pools = [(f"\0oracle/{variant}/{d}", by_domain[d]) for d in targets]
    roles: dict[str, str] = {}
    for stream, pool in pools:
        order = class_rng(seed, stream).permutation(len(pool))
        n_train, n_val, _ = split_counts(len(pool))
        for rank, i in enumerate(order):
            role = "train" if rank < n_train else "val" if rank < n_train + n_val else "test"
            roles[pool[i]] = role
    rows = [
        AssignmentRow(p, cls, dom, roles[p])
        for cls in tree.classes
        for dom in targets
        for p in tree.images(cls, dom)
    ]
    untested = [d for d in targets if not any(r.domain == d and r.role == "test" for r in rows)]
    if untested:
        fix = (
            "give each target domain at least 3 images"
            if variant == "per-domain"
            else f"the pooled split of seed {seed} drew none of their images for test; give "
            "those domains more images or choose another seed"
        )
        raise OodevalError(
            f"the 7:1:2 split leaves target domain(s) {listing(untested)} without a test "
            f"image; {fix}"
        )
    return rows
