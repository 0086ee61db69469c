"""The code behind an analysis's measures: each measure's code digest (`measure_digests`) and
the warnings when an analysis mixes versions of a measure's code (`measure_version_notes`).

A measure's digest is `oodeval.measures.measure_code_digest`: 16 hex digits of the SHA-256 of
the source of the module that defines it. An analysis records it (``measure_digests.csv`` and a
section of ``analysis.md``), so two analyses can be told apart by the code that computed them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from oodeval.measures import get_measure, measure_code_digest
from oodeval.study.config import IMPORT_VERSION_PREFIX, code_digest
from oodeval.study.store import Study

__all__ = ["measure_digests", "measure_version_notes"]

#: Columns of `measure_digests`.
DIGEST_COLUMNS = ("measure", "label", "code_digest", "defined_in")


def measure_digests(names: Sequence[str]) -> pd.DataFrame:
    """One row per measure of `names`: its canonical name, label, code digest and the module
    that defines it (``defined_in``: a module name, the stem of a user's ``.py`` file).

    >>> measure_digests(["average"])[["measure", "defined_in"]].to_dict("records")
    [{'measure': 'average', 'defined_in': 'oodeval.measures.domain'}]
    """
    rows = []
    for name in dict.fromkeys(names):
        spec = get_measure(name)
        rows.append((spec.name, spec.label, measure_code_digest(spec), _module_of(spec.function)))
    return pd.DataFrame.from_records(rows, columns=list(DIGEST_COLUMNS))


def measure_version_notes(study: Study, digests: pd.DataFrame) -> list[str]:
    """Warnings for measures whose code differs from the version the study recorded.

    A measure defined in a module the study imported (its config's ``imports``) mixes versions
    when the module's file now has another `oodeval.study.config.code_digest` than the one the
    config's ``import_digests`` or the units' ``versions`` recorded: the units ran with one
    version, the measure is computed with another. Empty when nothing differs.
    """
    recorded = _recorded_digests(study)
    notes = []
    for row in digests.itertuples(index=False):
        module = sys.modules.get(row.defined_in)
        where = getattr(module, "__file__", None)
        if where is None or row.defined_in not in recorded:
            continue
        package = getattr(module, "__path__", None) is not None  # digested as its folder
        now = code_digest(Path(where).parent if package else where)
        before = sorted(recorded[row.defined_in] - {now})
        if before:
            notes.append(
                f"measure {row.measure} is computed with the code of {Path(where).name} as it "
                f"is now (digest {now}), not the version the study recorded "
                f"({', '.join(before)}): this analysis mixes versions; restore that file or "
                "run the study again to compare like with like"
            )
    return notes


def _recorded_digests(study: Study) -> dict[str, set[str]]:
    """{module name: the digests the study's config and units recorded for it}."""
    seen: dict[str, set[str]] = {}
    for path, digest in (study.config.get("import_digests") or {}).items():
        seen.setdefault(Path(str(path)).stem, set()).add(str(digest))
    for versions in study.units.get("versions", []):
        for key, digest in (versions or {}).items():
            if key.startswith(IMPORT_VERSION_PREFIX):
                seen.setdefault(key[len(IMPORT_VERSION_PREFIX) :], set()).add(str(digest))
    return seen


def _module_of(function: object) -> str:
    return str(getattr(function, "__module__", None) or "?")
