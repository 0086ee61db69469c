"""`oodeval openworld` subcommands for GMoP on frozen features.

Registered onto the `oodeval openworld` group by `register(app)`:

* ``make-features`` -- write train/test feature files (`oodeval.openworld.features` format) from
  MNIST or digits through a small base-class encoder, or synthetic clusters.
* ``train-gmop FEATURES --out MODEL`` -- train GMoP (or the single-context reference) on the
  base-class rows of a feature file; the model is an ``.npz`` of plain arrays. ``--lambda`` is
  the paper's λ (the cross-entropy regulariser's weight), ``--ranking-weight`` the gated AUC
  term's, ``--gate`` the gate of Table 17; the old ``--auc-weight`` and ``--detector-weight``
  still work, with a ``warning:`` line.
* ``evaluate FEATURES [--model MODEL]`` -- the OpenworldAUC suite of a trained model, or of the
  zero-shot reference without --model.

torch is imported only inside the commands that train or evaluate.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import numpy as np
import typer

from oodeval._files import all_or_nothing, refuse_links
from oodeval._npz import npz_path, write_npz
from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import fraction_option, reports_errors, seed_option, stops_on_ctrl_c
from oodeval.cli._output import (
    FORMAT_OPT,
    OUTPUT_OPT,
    OutputFormat,
    check_output_path,
    echo_metrics_and_file,
)
from oodeval.errors import OodevalError
from oodeval.study.config.keys import STEPS_LIMIT


def npz_outputs(flag: str, given: Path | None) -> list[tuple[str, Path | None]]:
    """The outputs to check for an .npz option: the file written (`npz_path`), and the name
    given when it differs (a hard link to an input named ``x`` is refused too)."""
    if given is None:
        return [(flag, None)]
    written = npz_path(given)
    return [(flag, written)] if written == given else [(flag, given), (flag, written)]


class Method(str, Enum):
    gmop = "gmop"
    single_context = "single-context"


class Gate(str, Enum):
    """The gates of Table 17 (`oodeval.openworld.objective.GATES`)."""

    sigmoid = "sigmoid"
    hard = "hard"
    none = "none"


def make_features_command(
    train_out: Path = typer.Option(
        ..., "--train-out", metavar="FILE", help="Few-shot training features (.npz)."
    ),
    test_out: Path = typer.Option(..., "--test-out", metavar="FILE", help="Test features (.npz)."),
    source: str = typer.Option(
        "auto",
        "--source",
        help="auto (real MNIST, as a study's source), digits, mnist:DIR, or synthetic (Gaussian "
        "clusters).",
    ),
    encoder_source: str | None = typer.Option(
        None,
        "--encoder-source",
        help="Train the encoder on this source's base classes (digits, for an mnist:DIR source).",
    ),
    shots: int = typer.Option(
        16, "--n-shots", min=1, max=100_000, help="Training samples per base class."
    ),
    overlap: float = fraction_option(
        0.5, "--overlap", "synthetic only: move new-class centres towards base ones (0..1)."
    ),
    seed: int = seed_option(
        "Seed of every draw (features, encoder images, shots) and of the encoder."
    ),
) -> None:
    """Write few-shot training and test feature files for train-gmop / evaluate."""
    from oodeval.openworld.base_new import few_shot_indices
    from oodeval.openworld.features import digit_features, save_features, synthetic_features

    # the files written: .npz is added to a name without it (as np.savez does)
    refuse_links(train_out, test_out)  # both before either is written
    outputs = [*npz_outputs("--train-out", train_out), *npz_outputs("--test-out", test_out)]
    train_out, test_out = npz_path(train_out), npz_path(test_out)
    refuse_links(train_out, test_out)
    read = Inputs().spec("--source", source).spec("--encoder-source", encoder_source)
    refuse_aliases(outputs, read)
    if source == "synthetic":
        fs = synthetic_features(overlap=overlap, seed=seed, n_per_class=shots + 100)
        train_idx = few_shot_indices(fs.labels, fs.base_classes, shots, seed=seed)
        train = fs.subset(train_idx)
        test = fs.subset(np.setdiff1d(np.arange(fs.labels.size), train_idx))
    else:
        train, test = digit_features(source, encoder_source=encoder_source, seed=seed, shots=shots)
    with all_or_nothing() as written:  # a failed --test-out takes the --train-out file with it
        save_features(train_out, train)
        written.append(train_out)
        save_features(test_out, test)
    typer.echo(
        safe_text(
            f"wrote {train_out} ({train.labels.size} rows) and {test_out} ({test.labels.size} rows)"
        ),
        err=True,
    )


def train_gmop_command(
    features: Path = typer.Argument(..., help="Training feature file (.npz); base rows are used."),
    out: Path = typer.Option(
        ..., "--out", metavar="FILE", help="Where to write the trained model (.npz)."
    ),
    method: Method = typer.Option(Method.gmop, "--method", help="gmop or single-context (CE)."),
    partitions: int = typer.Option(
        3, "--n-partitions", min=1, max=100, help="K pseudo base/new partitions."
    ),
    ce_weight: float | None = typer.Option(
        None,
        "--lambda",
        "--ce-weight",
        min=0.0,
        max=1e6,
        help="λ (lambda): weight of the cross-entropy regulariser l_ce(r_k) on the K "
        "sub-detectors (Sec. 6.3; the paper finds λ in [1/2, 1] best). Default 1. "
        "Formerly --detector-weight.",
    ),
    ranking_weight: float | None = typer.Option(
        None,
        "--ranking-weight",
        min=0.0,
        max=1e6,
        help="Weight of the gated AUC ranking term (1/K) sum_k R_k: 1 in the paper's OP_fin, "
        "0 drops the term. Default 1. Formerly --auc-weight (it is not λ).",
    ),
    gate: Gate = typer.Option(
        Gate.sigmoid,
        "--gate",
        help="Gate of the ranking pairs (Tab. 17): sigmoid (the paper's; of the true class's "
        "probability), hard (0-1: correctly classified samples only) or none.",
    ),
    auc_weight: float | None = typer.Option(
        None, "--auc-weight", min=0.0, max=1e6, hidden=True, help="Old name of --ranking-weight."
    ),
    detector_weight: float | None = typer.Option(
        None, "--detector-weight", min=0.0, max=1e6, hidden=True, help="Old name of --lambda."
    ),
    steps: int = typer.Option(200, "--n-steps", min=1, max=STEPS_LIMIT, help="Optimizer steps."),
    lr: float = typer.Option(1e-2, "--lr", min=0.0, max=100.0, help="Adam learning rate."),
    weight_decay: float = typer.Option(
        1e-3, "--weight-decay", min=0.0, max=1e6, help="Pull towards zero-shot."
    ),
    batch_size: int | None = typer.Option(
        None, "--batch-size", min=1, max=10_000_000, help="Default: full batch."
    ),
    logit_scale: float | None = typer.Option(
        None,
        "--logit-scale",
        min=0.0,
        max=1e6,
        help="Cosine-to-logit scale (default: from the feature file).",
    ),
    seed: int = seed_option("Seed (same seed -> same model)."),
    device: str = typer.Option(
        "cpu", "--device", help="Train on cpu, cuda, cuda:N or auto (cuda when available)."
    ),
) -> None:
    """Train GMoP (Section 5.1 of the OpenworldAUC paper) on frozen features and save it.

    Objective: L = l_ce(g) + w_rank * (1/K) sum_k R_k + λ * (1/K) sum_k l_ce(r_k), with R_k the
    gated AUC ranking term of sub-detector r_k on pseudo partition k (w_rank is
    --ranking-weight, λ is --lambda). The objective trained is printed on stderr at the end.
    """
    from oodeval._torch import resolve_device
    from oodeval.openworld.features import load_features
    from oodeval.openworld.gmop import (
        GMoPConfig,
        check_config,
        objective_text,
        save_model,
        train_gmop,
        train_single_context,
    )

    notes: list[str] = []
    config = GMoPConfig(
        n_partitions=partitions,
        ce_weight=renamed_weight(ce_weight, detector_weight, "--lambda", notes),
        ranking_weight=renamed_weight(ranking_weight, auc_weight, "--ranking-weight", notes),
        gate=gate.value,
        steps=steps,
        lr=lr,
        weight_decay=weight_decay,
        batch_size=batch_size,
        logit_scale=logit_scale,
        seed=seed,
    )
    check_config(config)
    refuse_links(out)  # before minutes of training, not after
    refuse_aliases(npz_outputs("--out", out), Inputs().file("FEATURES", features))
    out = npz_path(out)  # the file written: .npz is added to a name without it
    refuse_links(out)
    where = resolve_device(device)  # a misspelt or missing device fails before any reading
    if device == "auto":
        typer.echo(f"device: auto -> {where}", err=True)
    train = load_features(features)
    n_new = int(np.count_nonzero(~np.isin(train.labels, train.base_classes)))
    if n_new:
        typer.echo(f"note: ignoring {n_new} new-class row(s); training uses base classes", err=True)
    gmop = method is Method.gmop
    trainer = train_gmop if gmop else train_single_context
    with stops_on_ctrl_c(
        f"nothing was written to {out} (the model is saved at the end); run it again"
    ):
        model = trainer(train, config, device=where)
    save_model(out, model, config)
    # After training, so that bad input stays one error: line: the old spellings' warnings and
    # the objective the model was trained with, in the paper's symbols.
    for note in notes:
        typer.echo(note, err=True)
    shown = objective_text(config) if gmop else "L = l_ce(g) (one context, cross-entropy only)"
    typer.echo(f"objective: {shown}", err=True)
    typer.echo(safe_text(f"wrote {out}"), err=True)


#: What each old option of train-gmop became, as its warning says it.
RENAMED_OPTIONS = {
    "--auc-weight": (
        "warning: --auc-weight is now --ranking-weight: it scales the gated AUC ranking term "
        "and is not the paper's λ; λ, the weight of the cross-entropy regulariser, is --lambda "
        "(formerly --detector-weight). --auc-weight goes in the next release."
    ),
    "--detector-weight": (
        "warning: --detector-weight is now --lambda (also --ce-weight): it is the paper's λ, "
        "the weight of the cross-entropy regulariser on the sub-detectors (formerly labelled "
        "alpha). --detector-weight goes in the next release."
    ),
}


def renamed_weight(
    value: float | None, old_value: float | None, flag: str, notes: list[str]
) -> float:
    """The value of `flag` (default 1), also accepted under its old spelling, which adds its
    warning (`RENAMED_OPTIONS`) to `notes`; both given is bad input."""
    old_flag = {"--lambda": "--detector-weight", "--ranking-weight": "--auc-weight"}[flag]
    if old_value is not None:
        if value is not None:
            raise OodevalError(f"{old_flag} is the old spelling of {flag}; give only {flag}")
        notes.append(RENAMED_OPTIONS[old_flag])
        return old_value
    return 1.0 if value is None else value


def evaluate_command(
    features: Path = typer.Argument(..., help="Test feature file (.npz)."),
    model_path: Path | None = typer.Option(
        None,
        "--model",
        metavar="FILE",
        help="Model from train-gmop; omit for the zero-shot reference.",
    ),
    predictions: Path | None = typer.Option(
        None,
        "--predictions",
        metavar="FILE",
        help="Also write per-sample predictions (.npz) for ratio-study.",
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print BaseAcc, NewAcc, HM, OverallAcc, AUROC and OpenworldAUC of a model on FEATURES."""
    from oodeval.openworld.features import load_features
    from oodeval.openworld.gmop import evaluate_model, load_model, zero_shot_model

    outputs = [*npz_outputs("--predictions", predictions), ("--output", output)]
    if predictions is not None:
        refuse_links(predictions)
        predictions = npz_path(predictions)  # the file written: .npz added to a name without it
        refuse_links(predictions)
    check_output_path(output)
    refuse_aliases(outputs, Inputs().file("FEATURES", features).file("--model", model_path))
    test = load_features(features)
    model = zero_shot_model(test) if model_path is None else load_model(model_path)
    metrics = evaluate_model(model, test)

    def write_predictions(path: Path) -> Path:
        out = model.predict(test.features)
        return write_npz(
            path,
            probs=out["outputs"],
            labels=test.labels,
            base_classes=np.asarray(test.base_classes, dtype=np.int64),
            scores=out["detector_scores"],
            base_predictions=out["base_predictions"],
            new_predictions=out["new_predictions"],
        )

    echo_metrics_and_file(metrics, fmt, output, predictions, write_predictions)


def register(app: typer.Typer) -> None:
    """Add make-features, train-gmop and evaluate to the `openworld` group."""
    app.command("make-features")(reports_errors(make_features_command))
    app.command("train-gmop")(reports_errors(train_gmop_command))
    app.command("evaluate")(reports_errors(evaluate_command))
