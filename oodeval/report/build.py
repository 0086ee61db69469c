"""Build the one-page HTML report for any input oodeval reads: a study folder, a results file, or an
open-world predictions file."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from oodeval._files import make_folder, refuse_links, write_file
from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import STDIN, input_name, read_text, stream_bytes
from oodeval.errors import OodevalError, option
from oodeval.report.page import Section, render_page
from oodeval.study.store import is_export


def input_kind(path: Path) -> str:
    """'study', 'results' or 'openworld', decided from what the path holds (a folder or a study
    export is a study; standard input, ``-``,
    and pipes from their content, read once: JSON or a CSV with algorithm and environment
    columns is a results file, any other CSV predictions)."""
    if path.is_dir() or is_export(path):
        return "study"
    if str(path) == STDIN or (
        path.exists() and stream_bytes(path, what="report input") is not None
    ):
        text = read_text(path, what="report input", save_as="a UTF-8 CSV file").lstrip()
        if text[:1] in ("[", "{"):
            return "results"
        header = [h.strip().lower() for h in next(csv.reader(io.StringIO(text)), [])]
        return "results" if {"algorithm", "environment"} <= set(header) else "openworld"
    if not path.exists():
        raise OodevalError(
            f"{path} does not exist; give a study folder, a results CSV or an "
            "open-world predictions file"
        )
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return "openworld"
    if suffix in {".jsonl", ".ndjson", ".json"}:
        return "results"
    if suffix == ".csv":
        text = read_text(path, what="report input", save_as="a UTF-8 CSV file")
        header = [h.strip().lower() for h in next(csv.reader(io.StringIO(text)), [])]
        if "algorithm" in header and "environment" in header:
            return "results"
        return "openworld"
    raise OodevalError(
        f"{path}: cannot tell what this is from its suffix {suffix!r}; give a study folder, a "
        "results .csv/.jsonl (algorithm, environment, error|accuracy, split) or an open-world "
        ".npz/.csv"
    )


def build_report(
    input_path: str | Path,
    *,
    base_classes: str | None = None,
    percent: bool = False,
    exclude_damaged: bool = False,
    measures: list[str] | None = None,
) -> str:
    """Return the report on `input_path` (a study folder, a results or a predictions file) as one
    self-contained HTML string.

    ``exclude_damaged`` (study folders only) reports on a damaged store without its damaged
    units, saying so, instead of refusing it. `measures` (study folders only): more measures for
    every table and figure, computed from the stored errors (`oodeval.study.analysis.analyze`).
    """
    path = Path(input_path)
    kind = input_kind(path)
    if measures is not None and kind != "study":
        raise OodevalError(
            f"{option('measures')} is for a study folder, and {path} is a {kind} file; its "
            f"report shows the built-in measures (leave {option('measures')} out)"
        )
    sections: list[Section]
    if kind == "study":
        from oodeval.report.study_report import study_sections

        sections = study_sections(path, exclude_damaged=exclude_damaged, measures=measures)
        where = "Exported study" if path.is_file() else "Study folder"
        title, subtitle = "oodeval study report", f"{where} {path}"
    elif kind == "results":
        from oodeval.report.results_report import results_sections

        sections = results_sections(path, percent=percent)
        title, subtitle = "oodeval measures report", f"Results file {input_name(path)}"
    else:
        from oodeval.report.openworld_report import openworld_sections

        sections = openworld_sections(path, base_classes=base_classes)
        title, subtitle = "oodeval open-world report", f"Predictions file {input_name(path)}"
    return render_page(title, subtitle, sections)


def write_report(
    input_path: str | Path, out: str | Path, *, named_by_user: bool = False, **kwargs: object
) -> Path:
    """Build the report on `input_path` and write it to `out`; return the written path.

    `out` must not be a symbolic link (refused before the report is built; `oodeval._files`),
    unless `named_by_user` (``report --out``) and it leads to a device or pipe (/dev/stdout),
    nor a file the report reads (the results file, the study's store: `oodeval._outputs`).
    """
    out = Path(out)
    refuse_links(out, named_by_user=named_by_user)
    refuse_aliases([("the report", out)], Inputs().source("its input", input_path))
    if out.is_dir():
        raise OodevalError(
            f"{option('out', str(out))} is a folder; give the HTML file's name, e.g. "
            f"{out}/report.html"
        )
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise OodevalError(
            f"{option('out', str(out))}: {above} is a file, not a folder; choose another path"
        )
    html = build_report(input_path, **kwargs)  # type: ignore[arg-type]
    if out.parent and not out.parent.exists():  # the folder above is the user's: may be a link
        make_folder(out.parent, what="report's folder", named_by_user=True)
    return write_file(out, html, named_by_user=named_by_user)
