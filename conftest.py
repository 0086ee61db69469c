"""Collection rule for modules that import an optional extra at import time.

pytest imports every module of `oodeval/` for its doctests (pyproject: --doctest-modules) and every
test module. One that imports an optional extra (torch for the `train` extra...) cannot be imported
without it: it is then reported skipped with a reason naming the extra, instead of a collection
error. Any other import error (our own code broken), or a missing extra when running as CI
(CI=true, where every extra is installed), stays a collection error. This file sits at the
repository root because hooks in tests/conftest.py do not reach the collection of `oodeval/`.
"""

from __future__ import annotations

import pytest

from tests.requires import in_ci, missing_extra


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    call = getattr(report, "call", None)
    if not (report.failed and isinstance(collector, pytest.Module) and call and call.excinfo):
        return report
    cause = call.excinfo.value.__cause__
    extra = missing_extra(cause) if isinstance(cause, ModuleNotFoundError) else None
    if extra is None or in_ci():
        return report
    reason = (
        f"Skipped: the optional extra '{extra}' is not installed (no module {cause.name!r}; "
        f"pip install 'oodeval[{extra}]')"
    )
    skipped = pytest.CollectReport(report.nodeid, "skipped", (str(collector.path), 0, reason), None)
    skipped.call = call  # type: ignore[attr-defined]  # pytest's collect_one_node reads it
    return skipped
