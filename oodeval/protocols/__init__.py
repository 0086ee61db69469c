"""Domain-split protocols of the NICO++ paper (Section 4) for any ``<domain>/<class>/<image>`` tree.

`scan_tree` lists a tree; `classic_split` (its domains: `classic_domains`), `flexible_random_split`
and `flexible_compositional_split` return split rows (path, class, domain, role); `write_split_csv`,
`read_split_csv` and `role_counts` handle the split files; `evaluate_split` scores predictions on
the test domains with NICO++'s Average / Overall / Std.
"""

from oodeval.protocols.classic import classic_domains, classic_split
from oodeval.protocols.evaluate import domain_accuracies, evaluate_split
from oodeval.protocols.flexible import (
    default_common_domains,
    flexible_compositional_split,
    flexible_random_split,
)
from oodeval.protocols.tree import (
    NICO_COMMON_DOMAINS,
    NICO_TEST_DOMAINS,
    NICO_TRAIN_DOMAINS,
    ImageTree,
    SplitRow,
    read_split_csv,
    role_counts,
    scan_tree,
    write_split_csv,
)

__all__ = [
    "NICO_COMMON_DOMAINS",
    "NICO_TEST_DOMAINS",
    "NICO_TRAIN_DOMAINS",
    "ImageTree",
    "SplitRow",
    "classic_domains",
    "classic_split",
    "default_common_domains",
    "evaluate_split",
    "flexible_compositional_split",
    "flexible_random_split",
    "read_split_csv",
    "role_counts",
    "scan_tree",
    "domain_accuracies",
    "write_split_csv",
]
