"""The ranges of oodeval's numeric options and keywords, and the one check of each.

The command line and the Python API take the same numbers (a seed, a count of bootstrap
resamples, an interval level); each is checked here, against one bound constant, so both refuse
the same values with the same `OodevalError` line (naming the keyword, or on the command line the
flag: `oodeval.errors.option`) instead of a numpy or pandas exception (a
negative seed reaching `numpy.random.default_rng` raises its own ``ValueError``). Plain Python:
every layer may import it (`oodeval.measures` included).

>>> check_seed(7)
7
>>> check_resamples(0)
0
>>> try:
...     check_seed(-1, "seed")
... except OodevalError as exc:
...     print(exc)
seed must be an integer in [0, 4,294,967,295] (same seed, same draws), got -1
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from oodeval.errors import OodevalError, option

__all__ = [
    "MAX_RESAMPLES",
    "SEED_LIMIT",
    "check_confidence",
    "check_count",
    "check_flag",
    "check_resamples",
    "check_seed",
]

#: Seeds lie in [0, 2**32): what numpy's legacy seeding accepts, well inside torch's and
#: `numpy.random.default_rng`'s ranges (study seeds and ``data_seed`` too).
SEED_LIMIT = 2**32
#: Most bootstrap resamples any function or command (``--bootstrap``) draws: far more than a
#: percentile interval needs (2,000 is the default), few enough that a mistyped count is refused
#: instead of running for hours.
MAX_RESAMPLES = 100_000


def _whole(value: Any) -> bool:
    """An integer (Python's or numpy's), never a bool, a float or a string."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_seed(value: Any, name: str = "seed") -> int:
    """`value` as an int when it is an integer in [0, `SEED_LIMIT`); else OodevalError.

    >>> check_seed(2**32 - 1)
    4294967295
    """
    if not _whole(value) or not 0 <= value < SEED_LIMIT:
        raise OodevalError(
            f"{option(name)} must be an integer in [0, {SEED_LIMIT - 1:,}] (same seed, same "
            f"draws), got {value!r}"
        )
    return int(value)


def check_resamples(value: Any, name: str = "bootstrap", *, minimum: int = 0) -> int:
    """`value` as an int when it is a whole number of resamples in [`minimum`,
    `MAX_RESAMPLES`] (0 means no intervals where `minimum` is 0); else OodevalError.

    >>> check_resamples(2000, "n_resamples", minimum=1)
    2000
    """
    if not _whole(value):
        raise OodevalError(f"{option(name)} must be a whole number of resamples, got {value!r}")
    if value > MAX_RESAMPLES:
        raise OodevalError(
            f"{option(name)} must be at most {MAX_RESAMPLES:,} (the cap), got {value:,}"
        )
    if value < minimum:
        if minimum == 0:
            raise OodevalError(
                f"{option(name)} must be 0 (off) or a number of resamples up to "
                f"{MAX_RESAMPLES:,} (the cap), got {value:,}"
            )
        raise OodevalError(f"{option(name)} must be a positive integer, got {value!r}")
    return int(value)


def check_count(value: Any, name: str, *, minimum: int = 0, what: str = "") -> int:
    """`value` as an int when it is an integer >= `minimum` (a count: environments,
    algorithms, degrees of freedom); else OodevalError, `what` saying what it counts.

    >>> check_count(3, "n_envs")
    3
    """
    if not _whole(value) or value < minimum:
        counts = f" ({what})" if what else ""
        raise OodevalError(f"{option(name)} must be an integer >= {minimum}{counts}, got {value!r}")
    return int(value)


def check_confidence(value: Any, name: str = "confidence") -> float:
    """`value` as a float when it is a real number strictly between 0 and 1 (an interval's
    level); else OodevalError.

    >>> check_confidence(0.95)
    0.95
    """
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not real or math.isnan(value) or not 0 < value < 1:
        raise OodevalError(f"{option(name)} must lie strictly between 0 and 1, got {value!r}")
    return float(value)


def check_flag(value: Any, name: str) -> bool:
    """`value` as a bool when it is True or False (numpy's bools too); else OodevalError: a
    string such as ``"no"`` would otherwise count as True.

    >>> import numpy as np
    >>> check_flag(False, "percent"), check_flag(np.bool_(True), "percent")
    (False, True)
    """
    kind = type(value)
    numpy_bool = kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    if not isinstance(value, bool) and not numpy_bool:
        raise OodevalError(f"{name} must be True or False, got {value!r}")
    return bool(value)
