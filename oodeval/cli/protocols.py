"""`oodeval protocols ...`: NICO++ evaluation protocols for any ``<domain>/<class>/<image>`` tree.

- ``classic TREE --out assignment.csv [--train a,b] [--test c,d]``: named training / test domains
  (one side alone: the other is the remaining domains common to every class). With ``--oracle
  mixture`` or ``--oracle per-domain``: NICO++'s oracle baselines over the same test domains
  (App. D, a seeded 7:1:2 split), the seed recorded in ``assignment.csv.json``.
- ``flexible-random TREE --out assignment.csv``: per class 2 dominant, 12 minor, 6 test domains.
- ``flexible-compositional TREE --out assignment.csv``: 4 exclusive domains, 2 majority,
  12 minority, 4 test per class.
- ``evaluate ASSIGNMENT.csv PREDICTIONS.csv [--ddof 1|0]``: per-test-domain accuracy and
  Average / Overall / Std (ddof 1: Eq. 5; 0: the population std NICO++'s tables print).

The protocol commands write a domain assignment, a CSV (path, class, domain, role) giving every
image its role, and print a count table per role. `oodeval splits` is the deprecated old name of
the group (kept for one release, hidden, with a note on stderr).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import pandas as pd
import typer

from oodeval._files import refuse_links, write_file
from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import read_text, safe_text
from oodeval.cli._common import fraction_option, reports_errors, seed_option
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.errors import OodevalError, listing
from oodeval.measures.domain import STD_DDOFS
from oodeval.protocols import (
    ORACLE_RATIO,
    ORACLE_VARIANTS,
    classic_assignment,
    classic_domains,
    evaluate_assignment,
    flexible_compositional_assignment,
    flexible_random_assignment,
    oracle_assignment,
    read_assignment_csv,
    role_counts,
    scan_tree,
    write_assignment_csv,
)
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


def _domains_option(default: int, flag: str, help: str, *, least: int = 1) -> Any:
    """An int option `flag` counting domains (per class, or in all): `least` to 100,000."""
    return typer.Option(default, flag, min=least, max=100_000, help=help)


TREE_ARG = typer.Argument(..., help="Root of a <domain>/<class>/<image> tree.")
OUT_OPT = typer.Option(
    ..., "--out", metavar="FILE", help="Domain-assignment CSV to write (path,class,domain,role)."
)
SEED_OPT = seed_option("Seed of every random draw.")
PER_MINOR_OPT = typer.Option(
    50, "--per-minor", max=10_000_000, help="Images per minor training domain."
)
PER_TEST_OPT = typer.Option(50, "--per-test", max=10_000_000, help="Images per test domain.")
FLEXIBLE_VAL_OPT = fraction_option(0.0, "--val-fraction", "Validation share per cell.")
COMMON_OPT = typer.Option(
    None, "--common", help="Comma-separated common domains (default: NICO++'s or all shared)."
)


ORACLE_HELP = (
    "Write a NICO++ oracle baseline over the test domains instead (App. D): mixture (oracle: "
    "the test domains' images pooled, split 7:1:2 into train/val/test, one model) or "
    "per-domain (oracle*: each test domain split 7:1:2, one model per domain). The training "
    "domains are not used; the split's seed is recorded in FILE.json."
)


@app.command("classic")
@reports_errors
def classic_command(
    tree: Path = TREE_ARG,
    out: str = OUT_OPT,
    train: str | None = typer.Option(None, "--train", help="Comma-separated training domains."),
    test: str | None = typer.Option(None, "--test", help="Comma-separated test domains."),
    val_fraction: float | None = fraction_option(
        None,
        "--val-fraction",
        "Validation share per cell (default 0.2; not with --oracle, split 7:1:2).",
    ),
    oracle: str | None = typer.Option(None, "--oracle", metavar="VARIANT", help=ORACLE_HELP),
    seed: int = SEED_OPT,
) -> None:
    """Classic protocol: the same training and test domains for every class (NICO++ Sec. 4.2).

    With only --train (or only --test) the other side is the remaining domains common to every
    class; class-specific domains are used by neither, and the output lists them.

    With --oracle the assignment is one of NICO++'s oracle baselines over the test (target)
    domains: mixture pools their images and splits the pool 7:1:2 (train:val:test, counts by
    largest remainders, ties to train, then val); per-domain splits each test domain 7:1:2 on
    its own, and the domain column says which model a row is for (train one model per test
    domain). Beside FILE it writes FILE.json, the split record: variant, ratio, seed, test
    domains and the images per role.
    """
    variant = _oracle_variant(oracle)
    if variant is not None and val_fraction is not None:
        raise OodevalError("--val-fraction does not apply with --oracle: its split is 7:1:2")
    if variant is None:
        _refuse_aliases(tree, out)
    else:
        outputs: list[tuple[str, str | Path | None]] = [
            ("--out", out),
            ("the split record", _record_path(out)),
        ]
        refuse_aliases(outputs, Inputs().tree("TREE", tree))
    images = scan_tree(tree)
    train_d, test_d = classic_domains(
        images, train_domains=_names(train), test_domains=_names(test)
    )
    if variant is not None:
        rows = oracle_assignment(images, test_d, variant=variant, seed=seed)
        _finish_oracle(rows, out, _record_path(out), variant, test_d, seed)
        return
    rows = classic_assignment(
        images,
        train_domains=train_d,
        test_domains=test_d,
        val_fraction=0.2 if val_fraction is None else val_fraction,
        seed=seed,
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


def _oracle_variant(text: str | None) -> str | None:
    """The --oracle value as a key of `ORACLE_VARIANTS`, or None when not given."""
    if text is None:
        return None
    key = text.strip().lower()
    if key not in ORACLE_VARIANTS:
        raise OodevalError(
            f"unknown --oracle {text!r}; use one of "
            + ", ".join(f"{k} ({v})" for k, v in ORACLE_VARIANTS.items())
        )
    return key


def _record_path(out: str) -> Path:
    """Where the oracle's split record goes (FILE.json), checked before anything is written."""
    record = Path(out + ".json")
    refuse_links(record)
    if record.is_dir():
        raise OodevalError(
            f"{record} (the split record written beside --out) is a folder; choose another --out"
        )
    return record


def _finish_oracle(
    rows: list, out: str, record: Path, variant: str, test_d: tuple, seed: int
) -> None:
    """Write the oracle assignment and its split record; print the header, notes and counts."""
    ratio = ":".join(map(str, ORACLE_RATIO))
    per_role = {role: sum(r.role == role for r in rows) for role in ("train", "val", "test")}
    payload = {
        "protocol": "NICO++ oracle baseline (App. D)",
        "variant": variant,
        "trains": ORACLE_VARIANTS[variant],
        "test_domains": list(test_d),
        "ratio": ratio,
        "rounding": "largest remainder, ties to train, then val",
        "seed": seed,
        "assignment": Path(out).name,
        "images": per_role,
    }
    n = write_assignment_csv(rows, out)
    header = (
        f"{ORACLE_VARIANTS[variant]} (--oracle {variant}): test {','.join(test_d)}; "
        f"{ratio} split, seed {seed}; wrote {n} rows to {out}"
    )
    typer.echo(safe_text(header))
    write_file(record, to_json(payload) + "\n")
    typer.echo(safe_text(f"split record: {record}"))
    if variant == "per-domain":
        typer.echo("train one model per test domain: the domain column says which")
    typer.echo(render_counts(rows))


def _listing(names: list[str], shown: int = 8) -> str:
    """Up to `shown` names, then how many more."""
    return listing(names, shown=shown)


@app.command("flexible-random")
@reports_errors
def flexible_random_command(
    tree: Path = TREE_ARG,
    out: str = OUT_OPT,
    n_dominant: int = _domains_option(2, "--n-dominant", "Dominant domains per class."),
    n_minor: int = _domains_option(12, "--n-minor", "Minor training domains per class.", least=0),
    n_test: int = _domains_option(6, "--n-test", "Test domains per class."),
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
    n_exclusive: int = _domains_option(4, "--n-exclusive", "Exclusive domains to draw.", least=0),
    n_majority: int = _domains_option(2, "--n-majority", "Majority domains per class."),
    n_minority: int = _domains_option(12, "--n-minority", "Minority domains per class.", least=0),
    n_test: int = _domains_option(4, "--n-test", "Test domains per class."),
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
    ddof_text: str = typer.Option(
        "1",
        "--ddof",
        metavar="0|1",
        help="Std's delta degrees of freedom: 1 (sample std, NICO++ Eq. 5) or 0 (population "
        "std, what NICO++'s tables print).",
    ),
) -> None:
    """Per-test-domain accuracy and NICO++ Average / Overall / Std (Eq. 5).

    table and markdown: the per-domain table and the Average / Overall / Std line, which says
    the ddof Std used; csv: the per-domain table (domain, images, accuracy); json: every number
    of the summary by name, std_ddof among them. Eq. 5 divides by K-1 (--ddof 1, the default),
    but the paper's tables are the population std: use --ddof 0 to compare with them.
    """
    ddof = {str(k): k for k in STD_DDOFS}.get(ddof_text.strip())
    if ddof is None:
        raise OodevalError(
            f"--ddof must be 0 or 1, got {ddof_text!r}; use "
            + " or ".join(f"{k} ({v})" for k, v in STD_DDOFS.items())
        )
    if as_json:
        typer.echo("note: --json is deprecated; use --format json", err=True)
        fmt = OutputFormat.json
    check_output_path(output)
    read = Inputs().file("ASSIGNMENT", assignment).file("PREDICTIONS", predictions)
    refuse_aliases([("--output", output)], read)
    summary = evaluate_assignment(
        read_assignment_csv(assignment), read_predictions(predictions), ddof=ddof
    )
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
        f"(NICO++ Eq. 5, over {len(domains)} test domain(s); Std with ddof={ddof}: "
        f"{STD_DDOFS[ddof]})"
    )
    echo_output(render_frame(frame, fmt.value) + "\n\n" + line, output)


def _old_name_note() -> None:
    """Runs before any `oodeval splits ...` command: the group's name until this release."""
    typer.echo("note: oodeval splits is deprecated, use oodeval protocols", err=True)


def register(parent: typer.Typer) -> None:
    """Add the `protocols` group to `parent`, and `splits`, its deprecated name, hidden."""
    parent.add_typer(app, name="protocols")
    parent.add_typer(app, name="splits", hidden=True, callback=_old_name_note)
