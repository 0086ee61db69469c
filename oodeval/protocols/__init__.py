"""The evaluation protocols of the NICO++ paper (Sec. 4) for any ``<domain>/<class>/<image>`` tree.

A protocol assigns every image of the tree a role (train, val or test) by its domain: the result is
a *domain assignment*, one `AssignmentRow` (path, class, domain, role) per image. `scan_tree` lists
a tree; `classic_assignment` (its domains: `classic_domains`), `flexible_random_assignment` and
`flexible_compositional_assignment` return the assignments of the three protocols, and
`oracle_assignment` those of NICO++'s two oracle baselines (App. D, 7:1:2 splits: `split_counts`);
`write_assignment_csv`, `read_assignment_csv` and `role_counts` handle the assignment files;
`evaluate_assignment` scores predictions on the test domains with NICO++'s Average / Overall / Std.
"""

from oodeval.protocols.classic import classic_assignment, classic_domains
from oodeval.protocols.evaluate import domain_accuracies, evaluate_assignment
from oodeval.protocols.flexible import (
    default_common_domains,
    flexible_compositional_assignment,
    flexible_random_assignment,
)
from oodeval.protocols.oracle import (
    ORACLE_RATIO,
    ORACLE_VARIANTS,
    oracle_assignment,
    split_counts,
)
from oodeval.protocols.tree import (
    NICO_COMMON_DOMAINS,
    NICO_TEST_DOMAINS,
    NICO_TRAIN_DOMAINS,
    AssignmentRow,
    ImageTree,
    read_assignment_csv,
    role_counts,
    scan_tree,
    write_assignment_csv,
)

__all__ = [
    "NICO_COMMON_DOMAINS",
    "NICO_TEST_DOMAINS",
    "NICO_TRAIN_DOMAINS",
    "ORACLE_RATIO",
    "ORACLE_VARIANTS",
    "ImageTree",
    "AssignmentRow",
    "classic_domains",
    "classic_assignment",
    "default_common_domains",
    "evaluate_assignment",
    "flexible_compositional_assignment",
    "flexible_random_assignment",
    "oracle_assignment",
    "read_assignment_csv",
    "role_counts",
    "scan_tree",
    "split_counts",
    "domain_accuracies",
    "write_assignment_csv",
]
