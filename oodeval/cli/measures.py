"""`oodeval measures RESULTS`: score a long-form results file (CSV or JSON lines).

Prints every measure per algorithm (and seed); with `all` rows also the ideal measure, rank
correlations with it, the algorithm each measure selects and the selection degradation. Notes
(e.g. correlations skipped for a single algorithm) go to stderr as ``note: ...`` lines and are
included in JSON output; the exit status stays 0. Bad input: one ``error: ...`` line, exit 2.
"""

from __future__ import annotations

import json
from enum import Enum

import pandas as pd
import typer

from oodeval.cli._common import echo_output, reports_errors
from oodeval.errors import OodevalError
from oodeval.measures.domain import MEASURES
from oodeval.results.longform import read_results
from oodeval.results.scoring import ScoreTables, score_results

__all__ = ["register", "render", "measures_command"]


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


def _header(source: str, tables: ScoreTables) -> str:
    info = tables.info
    n_seeds, n_algs = len(info["seeds"]), len(info["algorithms"])
    seeds = f", {n_seeds} seed{'s' if n_seeds != 1 else ''}" if n_seeds else ""
    text = (
        f"{source}: {n_algs} algorithm{'s' if n_algs != 1 else ''}{seeds}, "
        f"N={info['n_given']} given environments (loo)"
    )
    if info["n_all"]:
        text += f", {info['n_all']} environments in E_all (all)"
    return text + "; errors as fractions"


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4f}"
    return str(v)


def _as_text_table(df: pd.DataFrame) -> str:
    return df.to_string(index=False, na_rep="nan", float_format=lambda v: f"{v:.4f}")


def _as_markdown_table(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---:" if df[c].dtype.kind == "f" else "---" for c in df.columns) + "|"
    body = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def _as_long_csv(tables: ScoreTables) -> str:
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
    return out.to_csv(index=False, lineterminator="\n")  # shortest round-trip floats


def render(tables: ScoreTables, fmt: str, source: str = "results") -> str:
    """The text `oodeval measures` prints for `tables` in format `fmt`."""
    if fmt == "json":
        return json.dumps({"source": source, **tables.to_dict()}, indent=2, allow_nan=False)
    if fmt == "csv":
        return _as_long_csv(tables)
    parts = []
    if fmt == "markdown":
        parts.append(f"_{_header(source, tables)}_")
        for _, title, df in tables.sections():
            parts.append(f"### {title}\n\n{_as_markdown_table(df)}")
    else:
        parts.append(_header(source, tables))
        for _, title, df in tables.sections():
            parts.append(f"{title}\n{_as_text_table(df)}")
    return "\n\n".join(parts) + "\n"


@reports_errors
def measures_command(
    results: str = typer.Argument(
        ...,
        help="Long-form CSV or JSON lines: algorithm, environment, error|accuracy, split "
        "(loo|all), optional seed.",
        show_default=False,
    ),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="Output format."),
    output: str | None = typer.Option(None, "--output", "-o", help="Write to this file."),
    percent: bool = typer.Option(
        False, "--percent", help="Values are percentages in [0, 100] (divided by 100)."
    ),
    measures: str | None = typer.Option(
        None,
        "--measures",
        help=f"Comma-separated subset of: {', '.join(MEASURES)} (default: all).",
    ),
    bootstrap: int = typer.Option(
        0,
        "--bootstrap",
        help="Add percentile bootstrap intervals to the correlations (resampling algorithms; "
        "this many resamples, e.g. 2000). 0 = off.",
    ),
    confidence: float = typer.Option(
        0.95, "--confidence", help="Level of the --bootstrap intervals, in (0, 1)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the --bootstrap resampling."),
) -> None:
    """Score a results file: every measure per algorithm and seed, checked against the ideal.

    With `all` rows it also prints the ideal measure, each measure's correlations with it, the
    algorithm each measure selects and that choice's degradation.

    Values are errors unless the column is called `accuracy`. Output numbers are error fractions.
    """
    # Range checks here rather than typer's min=/max=, whose usage errors span several lines.
    if bootstrap < 0:
        raise OodevalError(f"--bootstrap must be 0 (off) or a number of resamples, got {bootstrap}")
    if not 0 < confidence < 1:
        raise OodevalError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    names = None
    if measures is not None:
        names = [m.strip() for m in measures.split(",") if m.strip()]
        if not names:
            raise OodevalError(f"--measures is empty; choose from {', '.join(MEASURES)}")
    data = read_results(results, percent=percent)
    tables = score_results(
        data, measures=names, bootstrap=bootstrap, confidence=confidence, bootstrap_seed=seed
    )
    echo_output(render(tables, fmt.value, source=results), output)
    for note in tables.notes:
        typer.echo(f"note: {note}", err=True)


def register(app: typer.Typer) -> None:
    """Add `measures` as a top-level command of `app`."""
    app.command("measures")(measures_command)
