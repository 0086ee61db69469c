"""`oodeval envs`: list the environment families, describe a scenario, preview its images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from oodeval.cli._common import (
    FORMAT_OPT,
    OUTPUT_OPT,
    OutputFormat,
    check_output_path,
    echo_output,
    reports_errors,
)
from oodeval.errors import OodevalError
from oodeval.tables import render_frame, to_json

app = typer.Typer(help="Many-environment datasets: SR-CMNIST, CMNIST, colored, lined, corrupted.")

FAMILY_ARG = typer.Argument(..., help="Family: sr-cmnist, cmnist, colored, lined or corrupted.")
SOURCE_OPT = typer.Option(
    "auto",
    "--source",
    help="Images: auto (real MNIST: $OODEVAL_MNIST, ../shared/data/mnist or the bundled test set), "
    "digits (scikit-learn's 8x8), mnist:DIR, folder:DIR, classfolder:DIR, cifar10:DIR.",
)
SEED_OPT = typer.Option(0, "--seed", help="Seed for splits, label noise and spurious features.")
RATIO_OPT = typer.Option(
    None, "--ratio", help="N_major:N_minor, e.g. 4:1 (sr-cmnist, colored, lined)."
)
SCALE_OPT = typer.Option(None, "--scale", help="Scale >= 1 (sr-cmnist).")
SIZE_OPT = typer.Option(
    None,
    "--size",
    help="Image side for sr-cmnist/cmnist: 14 (default on MNIST, IRM's) or 28 (DomainBed's; needs "
    "a 28x28 source such as mnist:DIR, never upsampled).",
)
PATTERN_OPT = typer.Option(None, "--pattern", help="Corrupted sampling pattern, e.g. 1-1-1-1.")
SEVERITY_OPT = typer.Option(None, "--severity", help="Corruption severity 1..5 (corrupted).")
IMAGE_SIZE_OPT = typer.Option(None, "--image-size", help="Resize folder images (corrupted).")
CACHE_OPT = typer.Option(
    None, "--cache-dir", metavar="DIR", help="Cache folder for corrupted images."
)


def _scenario(family, source, seed, ratio, scale, size, pattern, severity, image_size, cache_dir):
    from oodeval.environments import build_scenario

    given = {
        "ratio": ratio,
        "scale": scale,
        "size": size,
        "pattern": pattern,
        "severity": severity,
        "image_size": image_size,
        "cache_dir": cache_dir,
    }
    params = {k: v for k, v in given.items() if v is not None}
    return build_scenario(family, source=source, seed=seed, **params)


@app.command("list")
@reports_errors
def list_families(
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """List the environment families and their parameters (table: two lines per family; csv,
    json and markdown: one row per family with columns family, summary, parameters)."""
    import pandas as pd

    from oodeval.environments import FAMILIES

    check_output_path(output)
    rows = []
    for fam in FAMILIES.values():
        params = ", ".join(f"{k}={_short(v)}" for k, v in fam.parameters().items())
        rows.append((fam.name, fam.summary, params))
    if fmt is OutputFormat.table:
        lines = []
        for name, summary, params in rows:
            lines += [f"{name:<10} {summary}", f"{'':<10} parameters: {params}"]
        text = "\n".join(lines)
    else:
        frame = pd.DataFrame(rows, columns=["family", "summary", "parameters"])
        text = render_frame(frame, fmt.value)
    echo_output(text, output)


def _short(value: object) -> str:
    """repr of a default, with long tuples (the corruption list) summarised."""
    if isinstance(value, tuple) and len(value) > 4:
        return f"<{len(value)} names: {value[0]}, ..., {value[-1]}>"
    return repr(value)


@app.command("show")
@reports_errors
def show(
    family: str = FAMILY_ARG,
    source: str = SOURCE_OPT,
    seed: int = SEED_OPT,
    ratio: str | None = RATIO_OPT,
    scale: int | None = SCALE_OPT,
    size: int | None = SIZE_OPT,
    pattern: str | None = PATTERN_OPT,
    severity: int | None = SEVERITY_OPT,
    image_size: int | None = IMAGE_SIZE_OPT,
    cache_dir: str | None = CACHE_OPT,
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print a scenario's E_given, the size of E_all and the image counts.

    csv gives the given environments (environment, images); json every field; markdown the
    header lines and the given environments as a table.
    """
    import pandas as pd

    check_output_path(output)
    sc = _scenario(
        family, source, seed, ratio, scale, size, pattern, severity, image_size, cache_dir
    )
    sizes = sc.sizes()
    eval_counts = sorted(set(sizes["evaluation"].values()))
    given = pd.DataFrame(
        {
            "environment": list(sc.given_names),
            "images": [sizes["given"][name] for name in sc.given_names],
        }
    )
    if fmt is OutputFormat.csv:
        echo_output(render_frame(given, "csv"), output)
        return
    if fmt is OutputFormat.json:
        payload = {
            "scenario": sc.name,
            "params": dict(sc.params),
            "classes": sc.num_classes,
            "input_shape": list(sc.input_shape),
            "given": {name: sizes["given"][name] for name in sc.given_names},
            "all": list(sc.all_names),
            "held_out_images": {name: sizes["evaluation"][name] for name in sc.all_names},
        }
        echo_output(to_json(payload), output)
        return
    lines = [
        f"scenario: {sc.name}",
        f"params: {', '.join(f'{k}={v}' for k, v in sc.params.items())}",
        f"classes: {sc.num_classes}   input shape: {'x'.join(str(d) for d in sc.input_shape)}",
        f"E_given ({len(sc.given_names)} environments):",
    ]
    e_all = (
        f"E_all: {len(sc.all_names)} environments ({sc.all_names[0]} ... {sc.all_names[-1]}), "
        f"{'/'.join(str(c) for c in eval_counts)} held-out images each"
    )
    if fmt is OutputFormat.markdown:
        text = "  \n".join(lines) + "\n\n" + render_frame(given, "markdown") + "\n\n" + e_all
    else:
        lines += [f"  {name:<24} {sizes['given'][name]:>7} images" for name in sc.given_names]
        text = "\n".join([*lines, e_all])
    echo_output(text, output)


@app.command("preview")
@reports_errors
def preview(
    family: str = FAMILY_ARG,
    out: Path = typer.Option(..., "--out", metavar="FILE", help="PNG file to write the grid to."),
    source: str = SOURCE_OPT,
    seed: int = SEED_OPT,
    ratio: str | None = RATIO_OPT,
    scale: int | None = SCALE_OPT,
    size: int | None = SIZE_OPT,
    pattern: str | None = PATTERN_OPT,
    severity: int | None = SEVERITY_OPT,
    image_size: int | None = IMAGE_SIZE_OPT,
    cache_dir: str | None = CACHE_OPT,
    per_env: int = typer.Option(8, "--per-env", help="Samples shown per environment."),
    max_eval: int = typer.Option(5, "--max-eval", help="Evaluation environments shown (spread)."),
) -> None:
    """Write a labelled grid: one row per given environment and a spread of E_all, with labels."""
    if per_env < 1 or max_eval < 0:
        raise OodevalError("--per-env must be >= 1 and --max-eval >= 0")
    if out.is_dir():  # matplotlib would write OUT.png beside it and say nothing
        raise OodevalError(f"--out {out} is a folder; give a PNG file name, e.g. {out}/grid.png")
    sc = _scenario(
        family, source, seed, ratio, scale, size, pattern, severity, image_size, cache_dir
    )
    rows = [(f"given {env.name}", env) for env in sc.given()]
    n_all = len(sc.all_names)
    picks = (
        set(np.linspace(0, n_all - 1, max_eval).round().astype(int).tolist()) if max_eval else set()
    )
    for j, env in enumerate(sc.evaluation()):
        if j in picks:
            rows.append((f"eval {env.name}", env))
    save_grid(rows, per_env, out, title=sc.name)
    typer.echo(f"wrote {out} ({len(rows)} environments x {per_env} samples)", err=True)


def as_rgb(image: np.ndarray) -> np.ndarray:
    """(C, H, W) in [0, 1] -> (H, W, 3) for display; two channels become red and green."""
    c = image.shape[0]
    if c == 3:
        rgb = image
    elif c == 2:
        rgb = np.concatenate([image, np.zeros_like(image[:1])])
    else:
        rgb = np.repeat(image[:1], 3, axis=0)
    return np.clip(rgb.transpose(1, 2, 0), 0.0, 1.0)


def save_grid(rows, per_env: int, out: Path, *, title: str) -> None:
    """Draw `rows` [(label, Environment)] as a grid with each sample's label, save to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(rows), per_env, figsize=(1.1 * per_env + 1.6, 1.15 * len(rows) + 0.5), squeeze=False
    )
    for r, (label, env) in enumerate(rows):
        for c in range(per_env):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c < len(env):
                ax.imshow(as_rgb(env.images[c]), interpolation="nearest")
                ax.set_title(f"y={int(env.labels[c])}", fontsize=7, pad=2)
            else:
                ax.axis("off")
        axes[r][0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=80)
    except OSError as exc:
        raise OodevalError(f"cannot write {out}: {exc.strerror}; check the folder") from None
    finally:
        plt.close(fig)


def register(parent: typer.Typer) -> None:
    """Add the `envs` group to `parent` (the `oodeval` app)."""
    parent.add_typer(app, name="envs")
