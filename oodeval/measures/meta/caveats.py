"""The warnings every output gives when its numbers rest on too little: too few algorithms for a
rank correlation, too few environments for a measure's pick."""

from __future__ import annotations

import numpy as np

from oodeval.limits import check_count
from oodeval.measures.meta._correlation import spearman_critical_value

__all__ = [
    "MIN_INTERVAL_ALGORITHMS",
    "MIN_PICK_ENVIRONMENTS",
    "environment_warning",
    "interval_warning",
]

MIN_INTERVAL_ALGORITHMS = 8
"""Rank correlations over fewer algorithms get a warning (`interval_warning`): below 8, an exact
two-sided 5% test of Spearman's rho needs |rho| >= 0.786 (7 algorithms), 0.886 (6), 1 (5) or
cannot reject at all (4 or fewer), so only near-perfect orderings can be told from no relation,
and a percentile bootstrap interval over the algorithms spans about half of [-1, 1] or more."""


MIN_PICK_ENVIRONMENTS = 4
"""Picks over fewer LOO environments get a warning (`environment_warning`): the worst+gap paper's
smallest scenario has N = 4; at N = 3 each algorithm's worst and best come from three errors and
worst+gap weighs its gap by 1/(N - 2) = 1."""


def environment_warning(n_environments: int) -> str:
    """A one-line warning when `n_environments` (N, the given environments of the LOO errors)
    are too few for a measure's pick to say much (fewer than `MIN_PICK_ENVIRONMENTS`), else ``""``.

    >>> environment_warning(3)[:52]
    'only 3 environments: each algorithm is scored on 3 l'
    >>> environment_warning(4)
    ''
    """
    n = int(n_environments)
    if n >= MIN_PICK_ENVIRONMENTS:
        return ""
    gap = (
        f"worst+gap weighs its gap by 1/(N - 2) = {1 / (n - 2):g}"
        if n >= 3
        else "worst+gap needs at least 3"
    )
    return (
        f"only {n} environments: each algorithm is scored on {n} leave-one-out errors, so one "
        f"environment can decide every pick ({gap}); compare the picks over seeds, or add "
        "environments, before trusting one"
    )


def interval_warning(n_algorithms: int) -> str:
    """A one-line warning when `n_algorithms` are too few for a meaningful rank correlation
    (fewer than `MIN_INTERVAL_ALGORITHMS`), else ``""``.

    The rule: with n algorithms, a rank correlation (and any interval around it, bootstrap over
    algorithms included) can only tell an ordering from no relation when |rho| reaches the exact
    5% critical value (`oodeval.measures.meta.spearman_critical_value`); below 8 algorithms that
    value is 0.786 or more, so the warning is given.

    >>> interval_warning(5)[:69]
    'only 5 algorithms: with fewer than 8, a rank correlation with the ide'
    >>> interval_warning(14)
    ''
    """
    n = check_count(n_algorithms, "n_algorithms")
    if n >= MIN_INTERVAL_ALGORITHMS:
        return ""
    if n < 2:
        return f"only {n} algorithm: there is no rank correlation to compute; add algorithms"
    critical = spearman_critical_value(n)
    need = (
        f"no rho, not even 1, differs from 0 at the 5% level with {n}"
        if np.isnan(critical)
        else "only a perfect ordering (|rho| = 1) differs from 0 at the 5% level"
        if critical >= 1
        else f"only |rho| >= {critical:.3f} differs from 0 at the 5% level"
    )
    return (
        f"only {n} algorithms: with fewer than {MIN_INTERVAL_ALGORITHMS}, a rank correlation with "
        f"the ideal measure says little ({need}; bootstrap intervals over algorithms span most "
        "of [-1, 1]); add algorithms before trusting the correlations"
    )
