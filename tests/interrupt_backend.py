"""A study backend for the interrupt tests: the synthetic backend plus two hooks.

With ``started_dir`` set (a unit option), a unit writes the file ``<pid>-<algorithm>-<seed>``
there as it starts, so a test waits for *that* unit to be running instead of guessing a delay.
The algorithm named in the environment variable ``OODEVAL_TEST_HANG`` stands for a long training:
it runs ten minutes, so it is still in flight when the test stops the driver (the test then kills
it; ten minutes, not forever, so a leaked process cannot outlive the test run for long).
Everything else is `oodeval.study.synthetic`, so the stored numbers equal that backend's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from oodeval.study import synthetic
from oodeval.study.synthetic import available, build_scenario, default_hparams, sample_hparams

__all__ = ["available", "build_scenario", "default_hparams", "sample_hparams", "run_unit"]

#: How long a hanging unit runs: far longer than any test waits for it.
HANG_SECONDS = 600


def run_unit(
    scenario: Any,
    algorithm: str,
    *,
    started_dir: str = "",
    hang_then_crash: bool = False,
    **kwargs: Any,
) -> Any:
    """`oodeval.study.synthetic.run_unit`, announced in `started_dir` and, for the algorithm in
    ``OODEVAL_TEST_HANG``, after running `HANG_SECONDS`.

    With `hang_then_crash` (and `started_dir`), the study's first unit to start hangs
    (`HANG_SECONDS`, its PID in the file ``hanging``) and the second ends its worker abruptly
    (``os._exit``) while the first still runs; the other units, and these two when run again,
    run normally."""
    if started_dir:
        Path(started_dir, f"{os.getpid()}-{algorithm}-{kwargs['seed']}").touch()
    if hang_then_crash and _first(Path(started_dir, "hanging")):
        time.sleep(HANG_SECONDS)
    elif hang_then_crash and _first(Path(started_dir, "crashed")):
        os._exit(3)
    if os.environ.get("OODEVAL_TEST_HANG") == algorithm:
        time.sleep(HANG_SECONDS)
    return synthetic.run_unit(scenario, algorithm, **kwargs)


def _first(path: Path) -> bool:
    """Create the file `path` holding this process's PID; False when it exists already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    return True
