"""Scoring predictions on the test domains of a domain assignment: Average, Overall, Std.

Per test domain k, acc_k is the share of its test images predicted correctly; then
Average = (1/K) sum_k acc_k, Overall = sum_k N_k acc_k / sum_k N_k and
Std = sqrt(sum_k (acc_k - Average)^2 / (K - ddof)) (`oodeval.measures.domain.domain_std`): ddof=1
is NICO++ Eq. 5, ddof=0 the population std its tables print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oodeval.errors import OodevalError
from oodeval.measures.domain import check_std_ddof, domain_std, per_domain_summary
from oodeval.protocols.tree import AssignmentRow, refuse_repeated_images


def domain_accuracies(
    rows: Sequence[AssignmentRow], predictions: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, int]]:
    """Per-test-domain accuracy and image count from predicted class names keyed by image path.

    Raises OodevalError when a test image has no prediction (naming the first one).

    >>> rows = [AssignmentRow("a/x/1", "x", "a", "test"), AssignmentRow("a/y/2", "y", "a", "test")]
    >>> domain_accuracies(rows, {"a/x/1": "x", "a/y/2": "x"})
    ({'a': 0.5}, {'a': 2})
    """
    correct: dict[str, int] = {}
    counts: dict[str, int] = {}
    missing = []
    for row in rows:
        if row.role != "test":
            continue
        if row.path not in predictions:
            missing.append(row.path)
            continue
        counts[row.domain] = counts.get(row.domain, 0) + 1
        correct[row.domain] = correct.get(row.domain, 0) + int(predictions[row.path] == row.cls)
    if missing:
        raise OodevalError(
            f"{len(missing)} test image(s) have no prediction, e.g. {missing[0]}; predict every "
            "test row of the domain assignment"
        )
    if not counts:
        raise OodevalError("the domain assignment has no test rows")
    names = sorted(counts)
    return {d: correct[d] / counts[d] for d in names}, {d: counts[d] for d in names}


def evaluate_assignment(
    rows: Sequence[AssignmentRow], predictions: Mapping[str, str], *, ddof: int = 1
) -> dict[str, float | int]:
    """Per-domain accuracy plus Average (acc_avg), Overall (acc_overall), Std (acc_std).

    Keys follow `oodeval.measures.domain.per_domain_summary` (acc_<domain>, count_<domain>,
    acc_avg, acc_overall, acc_wg, acc_gap) plus acc_std (NaN with a single test domain) and
    std_ddof, the `ddof` acc_std used (1: NICO++ Eq. 5; 0: the population std of its tables).

    >>> rows = [AssignmentRow("a/x/1", "x", "a", "test"), AssignmentRow("b/x/2", "x", "b", "test"),
    ...         AssignmentRow("b/x/3", "x", "b", "test")]
    >>> out = evaluate_assignment(rows, {"a/x/1": "x", "b/x/2": "x", "b/x/3": "y"})
    >>> out["acc_avg"], round(out["acc_overall"], 4), round(out["acc_std"], 4)
    (0.75, 0.6667, 0.3536)
    """
    ddof = check_std_ddof(ddof)
    refuse_repeated_images(rows)
    acc, counts = domain_accuracies(rows, predictions)
    summary = per_domain_summary(acc, counts)
    values = list(acc.values())
    summary["acc_std"] = float(domain_std(values, ddof=ddof)) if len(acc) > 1 else float("nan")
    summary["std_ddof"] = ddof
    return summary
