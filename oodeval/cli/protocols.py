"""`oodeval protocols ...`: NICO++ evaluation protocols for any ``<domain>/<class>/<image>`` tree.

- ``classic TREE --out assignment.csv [--train a,b] [--test c,d]``: named training / test domains
  (one side alone: the other is the remaining domains common to every class).
- ``flexible-random TREE --out assignment.csv``: per class 2 dominant, 12 minor, 6 test domains.
- ``flexible-compositional TREE --out assignment.csv``: 4 exclusive domains, 2 majority,
  12 minority, 4 test per class.
- ``evaluate ASSIGNMENT.csv PREDICTIONS.csv``: per-test-domain accuracy and Average / Overall / Std.

The protocol commands write a domain assignment, a CSV (path, class, domain, role) giving every
image its role, and print a count table per role. `oodeval splits` is the deprecated old name of
the group (kept for one release, hidden, with a note on stderr).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pandas as pd
import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import read_text, safe_text
from oodeval.cli._common import (
    FORMAT_OPT,
    OUTPUT_OPT,
    OutputFormat,
    check_output_path,
    echo_output,
    reports_errors,
)
from oodeval.errors import OodevalError, listing
from oodeval.protocols import (
    classic_assignment,
    classic_domains,
    evaluate_assignment,
    flexible_compositional_assignment,
    flexible_random_assignment,
    read_assignment_csv,
    role_counts,
    scan_tree,
    write_assignment_csv,
)
from oodeval.study.config.keys import SEED_LIMIT
from oodeval.tables import render_frame, text_table, to_json

app = typer.Typer(
    help="NICO++ evaluation protocols (classic, flexible): domain assignments, their evaluation.",
    no_args_is_help=True,
)

__all__ = ["app", "register", "render_counts", "read_predictions"]


def _names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise OodevalError(f"expected comma-separated domain names, got {text!r}")
    return names


def render_counts(rows: list) -> str:
    """The summary table: images, classes, domains and cells per role, then the total.

    >>> from oodeval.protocols import AssignmentRow
    >>> print(render_counts([AssignmentRow("a/x/1.png", "x", "a", "train")]))
    role   images  classes  domains  cells
    train       1        1        1      1
    total       1        1        1      1
    """
    cols = ["role", "images", "classes", "domains", "cells"]
    cells = [[str(r[c]) for c in cols] for r in role_counts(rows)]
    return text_table(cols, cells, right=[c != "role" for c in cols])


def _refuse_aliases(tree: Path, out: str) -> None:
    """Before the tree is scanned: --out must not be a file of the tree (an image)."""
    refuse_aliases([("--out", out)], Inputs().tree("TREE", tree))


def _finish(rows: list, out: str, header: str, notes: list[str] | None = None) -> None:
    n = write_assignment_csv(rows, out)
    typer.echo(safe_text(f"{header}; wrote {n} rows to {out}"))
    for note in notes or []:
        typer.echo(safe_text(note))
    typer.echo(render_counts(rows))


TREE_ARG = typer.Argument(..., help="Root of a <domain>/<class>/<image> tree.")
OUT_OPT = typer.Option(
    ..., "--out", metavar="FILE", help="Domain-assignment CSV to write (path,class,domain,role)."
)
SEED_OPT = typer.Option(0, "--seed", min=0, max=SEED_LIMIT - 1, help="Seed of every random draw.")
PER_MINOR_OPT = typer.Option(
    50, "--per-minor", max=10_000_000, help="Images per minor training domain."
)
PER_TEST_OPT = typer.Option(50, "--per-test", max=10_000_000, help="Images per test domain.")
FLEXIBLE_VAL_OPT = typer.Option(
    0.0, "--val-fraction", min=0.0, max=1.0, help="Validation share per cell."
)
COMMON_OPT = typer.Option(
    None, "--common", help="Comma-separated common domains (default: NICO++'s or all shared)."
)


@app.command("classic")
@reports_errors
def classic_command(
    tree: Path = TREE_ARG,
    out: str = OUT_OPT,
    train: str | None = typer.Option(None, "--train", help="Comma-separated training domains."),
    test: str | None = typer.Option(None, "--test", help="Comma-separated test domains."),
    val_fraction: float = typer.Option(
        0.2, "--val-fraction", min=0.0, max=1.0, help="Validation share per cell."
    ),
    seed: int = SEED_OPT,
) -> None:
    """Classic protocol: the same training and test domains for every class (NICO++ Sec. 4.2).

    With only --train (or only --test) the other side is the remaining domains common to every
    class; class-specific domains are used by neither, and the output lists them.
    """
    _refuse_aliases(tree, out)
    images = scan_tree(tree)
    train_d, test_d = classic_domains(
        images, train_domains=_names(train), test_domains=_names(test)
    )
    rows = classic_assignment(
        images, train_domains=train_d, test_domains=test_d, val_fraction=val_fraction, seed=seed
    )
    header = f"classic: train {','.join(train_d)}; test {','.join(test_d)}"
    common = set(images.common_domains())
    unused = [d for d in images.domains if d not in train_d + test_d]
    specific = [d for d in unused if d not in common]
    shared = [d for d in unused if d in common]
    notes = []
    if specific:
        notes.append(
            f"not used: {len(specific)} class-specific domain(s) (missing for some classes): "
            f"{_listing(specific)}"
        )
    if shared:
        notes.append(f"not used: {len(shared)} domain(s) common to every class: {_listing(shared)}")
    _finish(rows, out, header, notes)


def _listing(names: list[str], shown: int = 8) -> str:
    """Up to `shown` names, then how many more."""
    return listing(names, shown=shown)


@app.command("flexible-random")
@reports_errors
def flexible_random_command(
    tree: Path = TREE_ARG,
    out: str = OUT_OPT,
    n_dominant: int = typer.Option(
        2, "--n-dominant", min=1, max=100_000, help="Dominant domains per class."
    ),
    n_minor: int = typer.Option(
        12, "--n-minor", min=0, max=100_000, help="Minor training domains per class."
    ),
    n_test: int = typer.Option(6, "--n-test", min=1, max=100_000, help="Test domains per class."),
    per_minor: int = PER_MINOR_OPT,
    per_test: int = PER_TEST_OPT,
    common: str | None = COMMON_OPT,
    val_fraction: float = FLEXIBLE_VAL_OPT,
    seed: int = SEED_OPT,
) -> None:
    """Flexible random protocol: per class 2 dominant, 12 minor and 6 test domains (Sec. 4.3)."""
    _refuse_aliases(tree, out)
    rows = flexible_random_assignment(
        scan_tree(tree),
        common_domains=_names(common),
        n_dominant=n_dominant,
        n_minor=n_minor,
        n_test=n_test,
        per_minor=per_minor,
        per_test=per_test,
        val_fraction=val_fraction,
        seed=seed,
    )
    _finish(rows, out, f"flexible random (seed {seed})")


@app.command("flexible-compositional")
@reports_errors
def flexible_compositional_command(
    tree: Path = TREE_ARG,
    out: str = OUT_OPT,
    exclusive: str | None = typer.Option(
        None, "--exclusive", help="Comma-separated exclusive domains (default: drawn)."
    ),
    n_exclusive: int = typer.Option(
        4, "--n-exclusive", min=0, max=100_000, help="Exclusive domains to draw."
    ),
    n_majority: int = typer.Option(
        2, "--n-majority", min=1, max=100_000, help="Majority domains per class."
    ),
    n_minority: int = typer.Option(
        12, "--n-minority", min=0, max=100_000, help="Minority domains per class."
    ),
    n_test: int = typer.Option(4, "--n-test", min=1, max=100_000, help="Test domains per class."),
    per_minor: int = PER_MINOR_OPT,
    per_test: int = PER_TEST_OPT,
    common: str | None = COMMON_OPT,
    val_fraction: float = FLEXIBLE_VAL_OPT,
    seed: int = SEED_OPT,
) -> None:
    """Flexible compositional protocol: exclusive training-only domains (NICO++ Sec. 4.3)."""
    _refuse_aliases(tree, out)
    rows = flexible_compositional_assignment(
        scan_tree(tree),
        exclusive_domains=_names(exclusive),
        common_domains=_names(common),
        n_exclusive=n_exclusive,
        n_majority=n_majority,
        n_minority=n_minority,
        n_test=n_test,
        per_minor=per_minor,
        per_test=per_test,
        val_fraction=val_fraction,
        seed=seed,
    )
    _finish(rows, out, f"flexible compositional (seed {seed})")


def read_predictions(path: str | Path) -> dict[str, str]:
    """Read a predictions CSV with columns path,prediction (predicted class name) into a dict."""
    text = read_text(path, what="predictions CSV", save_as="a UTF-8 CSV file")
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        fields = [f.strip() for f in (reader.fieldnames or [])]
        if "path" not in fields or "prediction" not in fields:
            raise OodevalError(
                f"{path}: needs columns path,prediction (predicted class name), got "
                f"{listing(fields, sep=',') or 'nothing'}"
            )
        out: dict[str, str] = {}
        for line_no, rec in enumerate(reader, start=2):
            rec = {k.strip(): (v or "").strip() for k, v in rec.items() if k is not None}
            if rec["path"] in out:
                raise OodevalError(f"{path}: line {line_no} repeats the path {rec['path']}")
            out[rec["path"]] = rec["prediction"]
    return out


@app.command("evaluate")
@reports_errors
def evaluate_command(
    assignment: Path = typer.Argument(
        ..., help="Domain-assignment CSV written by `oodeval protocols`."
    ),
    predictions: Path = typer.Argument(..., help="CSV with columns path,prediction."),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
    as_json: bool = typer.Option(
        False, "--json", hidden=True, help="Deprecated: use --format json."
    ),
) -> None:
    """Per-test-domain accuracy and NICO++ Average / Overall / Std (Eq. 5).

    table and markdown: the per-domain table and the Average / Overall / Std line; csv: the
    per-domain table (domain, images, accuracy); json: every number of the summary by name.
    """
    if as_json:
        typer.echo("note: --json is deprecated; use --format json", err=True)
        fmt = OutputFormat.json
    check_output_path(output)
    read = Inputs().file("ASSIGNMENT", assignment).file("PREDICTIONS", predictions)
    refuse_aliases([("--output", output)], read)
    summary = evaluate_assignment(read_assignment_csv(assignment), read_predictions(predictions))
    if fmt is OutputFormat.json:
        echo_output(to_json(summary), output)
        return
    domains = [k[len("count_") :] for k in summary if k.startswith("count_")]
    frame = pd.DataFrame(
        {
            "domain": domains,
            "images": [summary["count_" + d] for d in domains],
            "accuracy": [summary["acc_" + d] for d in domains],
        }
    )
    if fmt is OutputFormat.csv:
        echo_output(render_frame(frame, "csv"), output)
        return
    std = summary["acc_std"]
    line = (
        f"Average {summary['acc_avg']:.4f}  Overall {summary['acc_overall']:.4f}  "
        f"Std {'n/a (one domain)' if math.isnan(std) else f'{std:.4f}'}  "
        f"(NICO++ Eq. 5, over {len(domains)} test domain(s))"
    )
    echo_output(render_frame(frame, fmt.value) + "\n\n" + line, output)


def _old_name_note() -> None:
    """Runs before any `oodeval splits ...` command: the group's name until this release."""
    typer.echo("note: oodeval splits is deprecated, use oodeval protocols", err=True)


def register(parent: typer.Typer) -> None:
    """Add the `protocols` group to `parent`, and `splits`, its deprecated name, hidden."""
    parent.add_typer(app, name="protocols")
    parent.add_typer(app, name="splits", hidden=True, callback=_old_name_note)
