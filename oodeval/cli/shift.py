"""`oodeval shift --train SPEC --test SPEC`: covariate and concept shift of a dataset pair.

Prints M_cov, M_cpt^min, M_cpt^max (next to the two classifiers' held-out fit errors, the noise
floor M_cpt is read against) and M_cpt^max - M_cov (NICO++ Section 3, Theorem 3.3) as
mean +- std over seeds, with one line on what the sign of the last suggests. SPEC syntax: see
`oodeval.shift.specs` (e.g. ``sr-cmnist:e=0.1``, ``mnist:DIR``, ``folder:DIR:domain=photo``).
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import pandas as pd
import typer

from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import reports_errors, stops_on_ctrl_c
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.errors import OodevalError
from oodeval.study.config.keys import BATCH_SIZE_LIMIT, STEPS_LIMIT
from oodeval.tables import render_frame, to_json

__all__ = ["register", "shift_command", "explanation"]


class Hypothesis(str, Enum):
    mlp = "mlp"
    cnn = "cnn"


def explanation(gap: float) -> str:
    """One line on what the sign of the estimated M_cpt^max - M_cov suggests (NICO++ Thm. 3.3).

    Theorem 3.3 (eps_te(h) >= M_cpt^max - M_cov - eps_tr(h)) holds for the true values. The
    estimate of M_cov, a supremum over H found by training, can only fall short of it, and M_cpt^max
    carries the fit errors of f_tr and f_te; so the line says what the estimate suggests, not what
    the theorem proves.

    >>> explanation(0.3).startswith("M_cpt^max - M_cov = 0.300 > 0")
    True
    """
    if gap > 0:
        return (
            f"M_cpt^max - M_cov = {gap:.3f} > 0 suggests the label rules disagree more than the "
            "inputs differ (a weak DG pair), but it is not proof: Theorem 3.3's bound "
            "eps_te(h) >= M_cpt^max - M_cov - eps_tr(h) holds for the true values, and this M_cov "
            "is estimated from below (the true one may be larger) while M_cpt^max includes the fit "
            "errors above."
        )
    return (
        f"M_cpt^max - M_cov = {gap:.3f} <= 0 suggests the shift is mostly in P(X) with shared "
        "labelling (a useful DG pair): the estimate gives Theorem 3.3 no positive bound on target "
        "error, and the true M_cov, which this estimate approaches from below, can only be larger."
    )


def _set_option(flag: str, role: str, example: str) -> Any:
    """The option naming the SPEC of the training or the test set (required; no default)."""
    return typer.Option(
        None, flag, metavar="SPEC", help=f"SPEC of the {role} set (required), e.g. {example}."
    )


def renamed_option(value: str | None, old_value: str | None, flag: str, old_flag: str) -> str:
    """The value of the required option `flag`, also accepted under its deprecated `old_flag`.

    The old spelling prints one ``note:`` line on stderr; neither or both given is bad input.
    """
    if old_value is not None:
        if value is not None:
            raise OodevalError(f"{old_flag} is the deprecated spelling of {flag}; give only {flag}")
        typer.echo(f"note: {old_flag} is deprecated, use {flag}", err=True)
        return old_value
    if value is None:
        raise OodevalError(f"missing option {flag} SPEC; see 'oodeval shift --help'")
    return value


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


def metrics_frame(result: object) -> pd.DataFrame:
    """One row per reported metric: metric, mean, std over seeds (NaN for one seed), description."""
    from oodeval.shift.metrics import DESCRIPTIONS, REPORTED

    return pd.DataFrame(
        {
            "metric": list(REPORTED),
            "mean": [result.mean(m) for m in REPORTED],  # type: ignore[attr-defined]
            "std": [result.std(m) for m in REPORTED],  # type: ignore[attr-defined]
            "description": [DESCRIPTIONS[m] for m in REPORTED],
        }
    )


def render_report(names: tuple[str, str], result: object, counts: tuple[int, int], fmt: str) -> str:
    """The human-readable report (table or markdown format) of one `shift_metrics` result."""
    opts = result.options  # type: ignore[attr-defined]
    seeds = result.seeds  # type: ignore[attr-defined]
    lines = [
        safe_text(f"train set: {names[0]} ({counts[0]} images)"),
        safe_text(f"test set: {names[1]} ({counts[1]} images)"),
        f"hypothesis {opts['hypothesis']}, {opts['steps']} steps, {len(seeds)} seed(s) "
        f"{list(seeds)}; held-out halves, 0-1 disagreement; mean and std (ddof=1) over seeds",
    ]
    if fmt == "markdown":
        lines = [f"{line}  " for line in lines]  # markdown line breaks
    lines += [
        "",
        render_frame(metrics_frame(result), fmt, digits=3, right=[False, True, True, False]),
        "",
        "Read M_cpt against the fit errors: f_tr and f_te can disagree on up to their sum of "
        "the inputs with no concept shift at all (the i.i.d. noise floor).",
        explanation(result.mean("cpt_minus_cov")),  # type: ignore[attr-defined]
    ]
    return "\n".join(lines)


@reports_errors
def shift_command(
    train: str | None = _set_option("--train", "training", "sr-cmnist:e=0.1"),
    test: str | None = _set_option("--test", "test", "sr-cmnist:e=0.9"),
    source: str = typer.Option(
        "auto",
        "--source",
        help="Images the scenario SPECs draw from: auto (real MNIST, as a study's source), "
        "digits, mnist:DIR, folder:DIR, ...",
    ),
    n_seeds: int = typer.Option(3, "--n-seeds", max=1000, help="Number of seeds: seeds 0..N-1."),
    steps: int = typer.Option(
        300, "--n-steps", max=STEPS_LIMIT, help="Training steps per network."
    ),
    hypothesis: Hypothesis = typer.Option(
        Hypothesis.mlp, "--hypothesis", help="Hypothesis class H."
    ),
    batch_size: int = typer.Option(128, "--batch-size", max=BATCH_SIZE_LIMIT),
    lr: float = typer.Option(1e-3, "--lr", min=0.0, max=100.0, help="Adam learning rate."),
    max_samples: int = typer.Option(
        4000,
        "--max-samples",
        max=10_000_000,
        help="Subsample each set to at most this many images.",
    ),
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
    old_train: str | None = typer.Option(
        None, "--scenario", hidden=True, help="Deprecated: use --train."
    ),
    old_test: str | None = typer.Option(
        None, "--target", hidden=True, help="Deprecated: use --test."
    ),
) -> None:
    """Estimate covariate shift M_cov and concept shift M_cpt between two sets (NICO++ Sec. 3).

    The training set (--train) and the test set (--test) are each a dataset SPEC: an image source
    (digits, mnist:DIR, cifar10:DIR, classfolder:DIR, npz:FEATURES.npz,
    folder:DIR:domain=NAME[+NAME]) or one environment of a scenario family
    (sr-cmnist:e=0.1, cmnist:e=0.9:images=mnist:DIR); a scenario SPEC takes the evaluation
    environment of that name unless role=given asks for the given (training) one
    (sr-cmnist:e=0.1:role=given). The same SPEC twice gives an i.i.d. split. Scenario SPECs
    draw their images from --source.

    csv gives the metrics table (metric, mean, std, description); json the per-seed values too.
    """
    from oodeval.shift.metrics import REPORTED, shift_metrics
    from oodeval.shift.specs import disjoint_pair, load_spec

    train = renamed_option(train, old_train, "--train", "--scenario")
    test = renamed_option(test, old_test, "--test", "--target")
    # Checked here rather than with typer's min=, whose usage errors span several lines.
    for flag, value, low in (
        ("--n-seeds", n_seeds, 1),
        ("--n-steps", steps, 1),
        ("--batch-size", batch_size, 1),
        ("--max-samples", max_samples, 2),
    ):
        if value < low:
            raise OodevalError(f"{flag} must be at least {low}, got {value}")
    check_output_path(output)  # before minutes of training, not after
    read = Inputs().spec("--train", train).spec("--test", test).spec("--source", source)
    refuse_aliases([("--output", output)], read)
    src = load_spec(train, images=source, max_samples=max_samples)
    tgt = load_spec(test, images=source, max_samples=max_samples)
    src, tgt = disjoint_pair(src, tgt, seed=0)
    if src.images.shape[1:] != tgt.images.shape[1:]:
        raise OodevalError(
            f"--train images {src.images.shape[1:]} and --test images {tgt.images.shape[1:]} "
            "differ in shape; add size=N to both SPECs"
        )
    with stops_on_ctrl_c("nothing is kept (the networks train in memory); run it again"):
        result = shift_metrics(
            src.images,
            src.labels,
            tgt.images,
            tgt.labels,
            seeds=range(n_seeds),
            num_classes=max(src.num_classes, tgt.num_classes),
            hypothesis=hypothesis.value,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
        )
    if fmt is OutputFormat.json:
        payload = {
            "train": train,
            "test": test,
            "source": source,
            "n_train": len(src),
            "n_test": len(tgt),
            "options": result.options,
            "seeds": list(result.seeds),
            "per_seed": list(result.per_seed),
            "summary": {
                m: {"mean": result.mean(m), "std": _finite_or_none(result.std(m))} for m in REPORTED
            },
            "explanation": explanation(result.mean("cpt_minus_cov")),
        }
        text = to_json(payload)
    elif fmt is OutputFormat.csv:
        text = render_frame(metrics_frame(result), "csv")
    else:
        text = render_report((train, test), result, (len(src), len(tgt)), fmt.value)
    echo_output(text, output)


def register(app: typer.Typer) -> None:
    """Add the top-level `shift` command to `app`."""
    app.command(name="shift")(shift_command)
