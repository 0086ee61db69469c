"""`oodeval measures RESULTS`: score a long-form results file (CSV or JSON lines).

Prints the answer first (`oodeval.measures.meta.answer_line`: which algorithm each measure
picks and whether they disagree), then every measure per algorithm (and seed); with `all` rows
also the ideal measure, rank correlations with it, the algorithm each measure selects and the
selection degradation. With ``--format csv`` or ``json`` the answer goes to stderr as
``answer: ...``, so stdout stays machine-readable. Notes (e.g. correlations skipped for a single
algorithm) go to stderr as ``note: ...`` lines and are included in JSON output; correlations over
too few algorithms get one ``warning: ...`` line (`interval_warning`), picks over too few
environments another (`environment_warning`); the exit status stays 0.
Bad input: one ``error: ...`` line, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import (
    IMPORTS_OPT,
    load_imports,
    measure_specs,
    reports_errors,
    seed_option,
)
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.limits import MAX_RESAMPLES, check_confidence, check_resamples
from oodeval.measures.meta import BOOTSTRAP_RESAMPLES, CONFIDENCE
from oodeval.measures.registry import MEASURES, measure_names
from oodeval.results.longform import read_results
from oodeval.results.scoring import Scores, score_results
from oodeval.tables import render_frame, to_json

__all__ = ["MEASURES_OPT", "measures_help", "register", "render", "measures_command"]


def measures_help() -> str:
    """The ``--measures`` help: every measure registered when the app is built (`register`).

    >>> "cvar:alpha=<float>" in measures_help()
    True
    """
    return (
        "Comma-separated measures, each a name, a label (worst+gap, in any case) or a "
        f"parameterised spec such as cvar:alpha=0.25. Registered: {', '.join(measure_names())} "
        f"(default: {', '.join(MEASURES)}). Your own: @register_measure in a module you import."
    )


#: ``--measures``; its help is written by `register`, so it lists the measures of that moment.
MEASURES_OPT = typer.Option(None, "--measures", help=measures_help())


def _as_long_csv(tables: Scores) -> str:
    """Tidy CSV, one number per row: table, seed, measure, algorithm, statistic, value."""
    rows = []
    for key, _, df in tables.sections():
        for rec in df.to_dict("records"):
            seed = rec.get("seed", "")
            if key == "measures":
                for m, v in rec.items():
                    if m not in ("seed", "algorithm"):
                        rows.append((key, seed, m, rec["algorithm"], "value", v))
            elif key == "selections":
                for stat in ("score", "ideal_of_selected", "degradation"):
                    if stat in rec:
                        rows.append((key, seed, rec["measure"], rec["selected"], stat, rec[stat]))
            else:
                for stat, v in rec.items():
                    if stat not in ("seed", "measure"):
                        rows.append((key, seed, rec["measure"], "", stat, v))
    out = pd.DataFrame(
        rows, columns=["table", "seed", "measure", "algorithm", "statistic", "value"]
    )
    return render_frame(out, "csv")  # shortest round-trip floats


def render(tables: Scores, fmt: str, source: str = "results") -> str:
    """The text `oodeval measures` prints for `tables` in format `fmt`."""
    if fmt == "json":
        return to_json({"source": source, **tables.to_dict()})
    if fmt == "csv":
        return _as_long_csv(tables)
    return tables.render(fmt, source)


@reports_errors
def measures_command(
    results: Path = typer.Argument(
        ...,
        help="Long-form CSV or JSON lines: algorithm, environment, error|accuracy, split "
        "(loo|all), optional seed.",
        show_default=False,
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
    percent: bool = typer.Option(
        False, "--percent", help="Values are percentages in [0, 100] (divided by 100)."
    ),
    measures: str | None = MEASURES_OPT,
    bootstrap: int = typer.Option(
        0,
        "--bootstrap",
        help="Add percentile bootstrap intervals to the correlations (resampling algorithms; "
        f"this many resamples, e.g. {BOOTSTRAP_RESAMPLES}, at most {MAX_RESAMPLES:,}). 0 = off.",
    ),
    confidence: float = typer.Option(
        CONFIDENCE,
        "--confidence",
        help="Level of the --bootstrap intervals, in (0, 1).",
    ),
    seed: int = seed_option("Seed of the --bootstrap resampling."),
    imports: list[str] = IMPORTS_OPT,
) -> None:
    """Score a results file: every measure per algorithm and seed, checked against the ideal.

    With `all` rows it also prints the ideal measure, each measure's correlations with it, the
    algorithm each measure selects and that choice's degradation.

    Values are errors unless the column is called `accuracy`. Output numbers are error fractions.
    """
    # The API's checks (`oodeval.limits`), not typer's min=/max=, whose errors span lines.
    check_resamples(bootstrap, "bootstrap")
    check_confidence(confidence)
    check_output_path(output)
    refuse_aliases([("--output", output)], Inputs().file("RESULTS", results).imports(imports))
    load_imports(imports)
    names = measure_specs(measures)
    data = read_results(results, percent=percent)
    tables = score_results(
        data, measures=names, bootstrap=bootstrap, confidence=confidence, bootstrap_seed=seed
    )
    echo_output(render(tables, fmt.value, source=str(results)), output)
    if fmt.value in ("csv", "json"):
        typer.echo(safe_text(f"answer: {tables.answer}"), err=True)
    for note in tables.notes:
        typer.echo(safe_text(f"note: {note}"), err=True)
    for warning in tables.warning_lines():
        typer.echo(safe_text(f"warning: {warning}"), err=True)


def register(app: typer.Typer) -> None:
    """Add `measures` as a top-level command of `app` (its help lists the measures so far)."""
    MEASURES_OPT.help = measures_help()
    app.command("measures")(measures_command)
