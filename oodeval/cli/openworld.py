"""`oodeval openworld`: the OpenworldAUC suite on a predictions file a user already has.

`oodeval openworld PREDICTIONS` (short for `oodeval openworld score PREDICTIONS`) reads an .npz
file (loaded with allow_pickle=False: object arrays are refused, nothing is unpickled) or a CSV
file in one of these forms. Array names are for .npz, column names for CSV:

1. Outputs over all classes (Algorithm 1 of the OpenworldAUC paper):
   .npz  `probs` or `logits` (n x C), `labels` (n,), `base_classes` (k,) or --base-classes
   CSV   `label`, and `prob_0` .. `prob_{C-1}` or `logit_0` .. `logit_{C-1}`; --base-classes
   Optional, from separate models, replacing the detector / base / new classifier:
   .npz  `scores`, `base_predictions`, `new_predictions`    CSV `score`, `base_prediction`,
   `new_prediction` (class ids; larger scores mean "more base-like").
2. Separate models without outputs: `labels`/`label`, `scores`/`score`,
   `base_predictions`/`base_prediction`, `new_predictions`/`new_prediction`, and the base classes.
   OverallAcc is not reported (it needs outputs over all classes).
3. Already scored, one row per sample: `scores`/`score` (detector score), `is_base` (bool or 0/1:
   the sample belongs to a base class) and `correct` (bool or 0/1: its domain classifier, g for
   base samples and h for new samples, got it right).

`oodeval openworld ratio-study PREDICTIONS` resamples the same file to base:new test ratios (by
default the ten new/base ratios of Tables 11-12 of the OpenworldAUC paper) and prints every
metric per ratio, then each metric's mean and variance (ddof = 1) over the ratios.

Printed: n_base, n_new, base_acc, new_acc, hm, overall_acc (form 1 only), auroc, openworld_auc
(see oodeval.measures.openworld for the definitions). `--curve FILE` also writes the
MissRate_b/HitRate_n curve (threshold, miss_rate_b, hit_rate_n); with logits the thresholds are
log-probabilities. Example:

    oodeval openworld examples/openworld_predictions.csv --base-classes 0-2 --format json
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd
import typer

from oodeval._files import refuse_links, write_file
from oodeval._outputs import Inputs, refuse_aliases
from oodeval.cli._common import DefaultCommandGroup, reports_errors, seed_option
from oodeval.cli._output import (
    FORMAT_OPT,
    OUTPUT_OPT,
    OutputFormat,
    check_output_path,
    echo_metrics_and_file,
    echo_output,
)
from oodeval.errors import OodevalError
from oodeval.measures.openworld import openworld_curve
from oodeval.openworld.ratio_study import MAX_REPEATS
from oodeval.results.predictions import parse_class_ids, read_predictions, score_predictions
from oodeval.tables import render_frame, render_rows

app = typer.Typer(
    cls=DefaultCommandGroup,
    help="Open-world evaluation (OpenworldAUC). `oodeval openworld FILE` runs `score`.",
    no_args_is_help=True,
)


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------


def _write_curve(samples: tuple[np.ndarray, ...], path: str) -> Path:
    miss, hit, thresholds = openworld_curve(*samples, return_thresholds=True)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["threshold", "miss_rate_b", "hit_rate_n"])
    for row in zip(thresholds.tolist(), miss.tolist(), hit.tolist(), strict=True):
        writer.writerow(repr(v) for v in row)
    return write_file(path, text.getvalue(), named_by_user=True)


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------


@app.command("score")
@reports_errors
def score(
    predictions: Path = typer.Argument(
        ...,
        help=(
            "An .npz or CSV file. Outputs form: probs|logits (n x C), labels, base_classes "
            "(CSV: label, prob_<j>|logit_<j>, with --base-classes). Separate models: scores, "
            "base_predictions, new_predictions, labels (CSV: score, base_prediction, "
            "new_prediction, label). Already scored: scores, is_base, correct (CSV: score, "
            "is_base, correct)."
        ),
    ),
    base_classes: str | None = typer.Option(
        None, "--base-classes", help="Base class ids, e.g. 0,1,2 or 0-49 (inclusive ranges)."
    ),
    tie: float = typer.Option(
        0.5,
        "--tie",
        help="Credit for a base/new pair with equal scores (0 = strict).",
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
    curve: str | None = typer.Option(
        None,
        "--curve",
        metavar="FILE",
        help="Also write the MissRate_b/HitRate_n curve to this CSV file.",
    ),
) -> None:
    """Print BaseAcc, NewAcc, HM, OverallAcc, AUROC and OpenworldAUC for PREDICTIONS.

    Detector r: max softmax probability over the base classes, softmax over ALL classes
    (Algorithm 1 of the OpenworldAUC paper). g / h: argmax over the base / the new classes.
    A base/new pair with equal scores counts --tie (0.5 by default).
    Example: oodeval openworld examples/openworld_predictions.csv --base-classes 0-2
    """
    if curve is not None:
        refuse_links(curve, named_by_user=True)
    check_output_path(output)
    refuse_aliases(
        [("--curve", curve), ("--output", output)], Inputs().file("PREDICTIONS", predictions)
    )
    ids = parse_class_ids(base_classes) if base_classes is not None else None
    arrays = read_predictions(predictions)
    metrics, samples = score_predictions(arrays, ids, tie)
    echo_metrics_and_file(metrics, fmt, output, curve, lambda path: _write_curve(samples, path))


def ratio_study_command(
    predictions: Path = typer.Argument(..., help="Predictions .npz/.csv with labels (see score)."),
    base_classes: str | None = typer.Option(
        None, "--base-classes", help="Base class ids, e.g. 0-4 or 0,1,2 (else from the file)."
    ),
    ratios: str = typer.Option(
        "paper",
        "--ratios",
        metavar="RATIOS",
        help="Comma-separated base:new sample ratios, BASE:NEW each (1:5 = five new samples per "
        "base sample); Fwd = 5:1 and Bwd = 1:5 (Table 3 of the OpenworldAUC paper); paper = the "
        "ten new/base ratios 10,5,3,2,1,0.7,0.5,0.3,0.2,0.1 of its Tables 11-12 "
        "(base:new 1:10 ... 10:1). A bare number is refused as ambiguous.",
    ),
    repeats: int = typer.Option(
        5, "--n-repeats", min=1, max=MAX_REPEATS, help="Seeded resamples per ratio."
    ),
    seed: int = seed_option("Seed of the first resample."),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print every metric against the base:new test ratio, then its mean and variance.

    One line per ratio (mean+-std over --n-repeats seeded resamples), then each metric's mean
    and variance over the ratios, the variance with ddof = 1 (sample variance) as the "Mean" and
    "Variance" rows of Tables 11-12 of the OpenworldAUC paper. By default the ratios are those
    tables' new/base ratios 10 ... 0.1. OverallAcc moves with the ratio; HM, AUROC and
    OpenworldAUC should not (property P3). CSV/JSON: one row per ratio (ratio = base:new,
    new_per_base = new/base), then rows "mean" and "variance (ddof=1)".
    Example: oodeval openworld ratio-study examples/openworld_predictions.csv --base-classes 0-2
    """
    from oodeval.openworld.base_new import parse_ratios
    from oodeval.openworld.ratio_study import (
        ratio_frame_rows,
        ratio_study_of_arrays,
        ratio_table_cells,
        summary_note,
    )

    check_output_path(output)
    refuse_aliases([("--output", output)], Inputs().file("PREDICTIONS", predictions))
    wanted = parse_ratios(ratios)
    arrays = read_predictions(predictions)
    if "labels" not in arrays:
        raise OodevalError(
            f"{predictions}: the ratio study resamples by class, so it needs 'labels' "
            "(CSV column label)"
        )
    if base_classes is not None:
        ids = parse_class_ids(base_classes)
    elif "base_classes" in arrays:
        ids = [int(c) for c in np.ravel(arrays["base_classes"])]
    else:
        raise OodevalError("which classes are base? pass --base-classes (e.g. 0-4)")
    outputs = "probs" in arrays or "logits" in arrays
    separate = ("scores", "base_predictions", "new_predictions")
    if not outputs and not all(k in arrays for k in separate):
        raise OodevalError(
            f"{predictions} has labels but no model outputs (probs or logits, or scores, "
            "base_predictions and new_predictions); for a feature file write predictions first "
            "with oodeval openworld evaluate FEATURES --predictions FILE"
        )
    rows = ratio_study_of_arrays(arrays, ids, wanted, repeats=repeats, seed=seed)
    if fmt.value in ("csv", "json"):
        frame = pd.DataFrame(ratio_frame_rows(rows))
        frame[["n_base", "n_new"]] = frame[["n_base", "n_new"]].astype("Int64")
        text = render_frame(frame, fmt.value)
    else:
        header, cells = ratio_table_cells(rows)
        table = render_rows(header, cells, fmt.value, right=[True] * len(header))
        text = f"{table.rstrip()}\n\n{summary_note(len(rows), repeats)}"
    echo_output(text, output)


app.command("ratio-study")(reports_errors(ratio_study_command))

# GMoP subcommands live in their own module (oodeval/cli/openworld_gmop.py).
from oodeval.cli import openworld_gmop  # noqa: E402

openworld_gmop.register(app)


def register(parent: typer.Typer) -> None:
    """Add the `openworld` group to `parent` (the `oodeval` app)."""
    parent.add_typer(app, name="openworld")
