"""`oodeval study analyze`: the verdict and the paper's tables and figures of a stored study."""

from __future__ import annotations

from pathlib import Path

import typer

from oodeval._files import all_or_nothing
from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import (
    IMPORTS_OPT,
    check_folder_path,
    check_writable_folder,
    load_imports,
    measure_specs,
    measures_option,
    reports_errors,
)
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.tables import render_frame

_EXCLUDE_HELP = (
    "Compute without the units that fail verification (damaged store) instead of refusing; "
    "every output then names the units left out."
)
ANALYSIS_DIR_HELP = (
    "Folder to write the analysis files to (default: DIR/analysis), e.g. for a study folder "
    "you may not write to."
)


def analyze_command(
    directory: Path = typer.Argument(..., help="Study folder."),
    exclude_damaged: bool = typer.Option(False, "--exclude-damaged", help=_EXCLUDE_HELP),
    measures: str | None = measures_option(
        "to add to every table, computed from the stored errors: no unit runs and the store is "
        "only read. The analysis then records each measure's code digest (measure_digests.csv)."
    ),
    imports: list[str] = IMPORTS_OPT,
    analysis_dir: Path | None = typer.Option(
        None, "--analysis-dir", metavar="DIR", help=ANALYSIS_DIR_HELP
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print the verdict, then write it, Table 1/5/6 and the Figure 1/5/6/7 numbers as CSV +
    markdown to DIR/analysis/.

    Also the paper's values beside the study's (table1_vs_paper, table5_vs_paper,
    selection_vs_paper; table3_vs_paper for PACS-/VLCS-corrupted scenarios, Tables 3-4 per
    seed; nico_vs_paper for NICO++ ones, the NICO++ paper's Table 2 or 5 after the model) and
    bounds.csv (how often ideal <= worst+gap, Theorem 3.4's Eq. 39).

    table and markdown print the verdict section of analysis.md and the files written; csv and
    json the verdict table (one row per measure). A store that fails verification is refused,
    naming the damaged units, unless --exclude-damaged is given.

    --measures adds measures (yours too, registered by a file given with --imports) to every
    table, computed again from the stored errors without training anything.
    """
    from oodeval.study.store import STORE_NAME

    check_output_path(output)
    read = Inputs().source("DIR", directory).imports(imports)
    refuse_aliases([("--output", output), ("--analysis-dir", analysis_dir)], read)
    if analysis_dir is not None:
        check_folder_path(analysis_dir, "--analysis-dir")
        check_writable_folder(
            analysis_dir, f"--analysis-dir {analysis_dir}", "choose a folder you may write"
        )
    elif (directory / STORE_NAME).is_file():
        # a study the user may only read: say how to write the analysis elsewhere
        check_writable_folder(
            directory / "analysis",
            f"cannot write the analysis to {directory / 'analysis'}",
            "pass --analysis-dir DIR to write it elsewhere (the study itself is only read)",
        )
    load_imports(imports)
    specs = measure_specs(measures)
    print_analysis(directory, specs, exclude_damaged, analysis_dir, fmt.value, output, read)


def print_analysis(
    directory: Path,
    specs: list[str] | None = None,
    exclude_damaged: bool = False,
    analysis_dir: Path | None = None,
    fmt: str = "table",
    output: str | None = None,
    read: Inputs | None = None,
) -> None:
    """Write the analysis of the study in `directory` and print what `study analyze` prints:
    the verdict block (which says the data note) and the files written, or the verdict table
    (csv, json; the note then on stderr), then the warnings. `study run --analyze` prints
    the same. No analysis file nor `output` may be one of `read` (default: the study's
    store)."""
    from oodeval.study import load_study
    from oodeval.study.analysis import (
        analysis_files,
        analyze,
        measure_version_notes,
        verdict_markdown,
        write_analysis,
    )

    study = load_study(directory, exclude_damaged=exclude_damaged)  # read-only
    results = analyze(study, specs)
    # the analysis files' names are known now: none may be an input or the --output either
    files = analysis_files(results, analysis_dir or Path(study.directory) / "analysis")
    named = [("the analysis file", f) for f in files.values()]
    refuse_aliases([("--output", output), *named], read or Inputs().source("DIR", directory))
    with all_or_nothing() as done:  # a failed --output takes the analysis files with it
        folder = analysis_dir or Path(study.directory) / "analysis"
        if not folder.exists():
            done.append(folder)  # made for them: removed with them
        written = write_analysis(study, results=results, out_dir=analysis_dir)
        done += written.values()
        if fmt in ("csv", "json"):
            text = render_frame(results["verdict"], fmt)
        else:
            paths = [safe_text(f"{name}: {path}") for name, path in written.items()]
            text = "\n".join([verdict_markdown(study, results), *paths])
        echo_output(text, output)
    versions = []
    if "measure_digests" in results:
        versions = measure_version_notes(study, results["measure_digests"])
    for note in [*study.integrity_notes(), *study.code_notes(), *versions]:
        typer.echo(safe_text(f"warning: {note}"), err=True)
    if study.outside_note():
        typer.echo(safe_text(f"note: {study.outside_note()}"), err=True)
    if study.data_note() and fmt in ("csv", "json"):  # the verdict block has it otherwise
        typer.echo(safe_text(f"note: {study.data_note()}"), err=True)


def register(group: typer.Typer) -> None:
    """Add `analyze` to the `study` group."""
    group.command("analyze")(reports_errors(analyze_command))
