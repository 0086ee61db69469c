"""`oodeval envs`: list the environment families, describe a scenario, preview its images.

The options of ``show`` and ``preview`` after ``--seed`` are the families' parameters: one option
per parameter of any family in `oodeval.environments.FAMILIES` (`family_options`), typed and
described from its builder (`Family.parameter_hints`, `Family.parameter_docs`), so a new family's
parameters need no edit here. A parameter families type differently (``--given``: numbers for the
spurious families, domain names for ``domains``) is read as text and converted to the chosen
family's own type (`family_values`). `envs_app` builds the command group from the families
registered when it is called (`family_command`); the commands read the parameters from
``ctx.params``.
"""

from __future__ import annotations

import inspect
import io
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import typer
from typer.core import TyperOption

from oodeval._files import refuse_links, write_file
from oodeval._outputs import Inputs, refuse_aliases
from oodeval._text import safe_text
from oodeval.cli._common import reports_errors, seed_option
from oodeval.cli._options import RegistryCommand, added_values, command_class, typer_option
from oodeval.cli._output import FORMAT_OPT, OUTPUT_OPT, OutputFormat, check_output_path, echo_output
from oodeval.environments import FAMILIES, build_scenario
from oodeval.environments.base import Scenario
from oodeval.environments.sources import source_forms
from oodeval.errors import OodevalError
from oodeval.tables import render_frame, to_json

SOURCE_OPT = typer.Option("auto", "--source", help=f"Images: {source_forms(summaries=True)}.")
SEED_OPT = seed_option("Seed for splits, label noise and spurious features.")
FAMILY_ARG = typer.Argument(..., help="Family (see `oodeval envs list`).")
#: Types a family parameter may take on the command line (a sequence of them: a repeated option).
CLI_SCALARS = (bool, int, float, str)


def cli_type(hint: Any) -> Any:
    """The command-line type of a family parameter's type hint: ``Path`` when it allows one,
    else the first of its union members that is a `CLI_SCALARS` type or a sequence of one
    (``list[X]``, a repeated option); None when there is none (the parameter is left to Python
    and configs).

    >>> from collections.abc import Sequence
    >>> cli_type(int | None), cli_type(str | Path | None), cli_type(Sequence[float] | None)
    (<class 'int'>, <class 'pathlib.Path'>, list[float])
    """
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    members = typing.get_args(hint) if union else (hint,)
    if Path in members:
        return Path
    for member in members:
        if member in CLI_SCALARS:
            return member
        items = typing.get_args(member)
        origin = typing.get_origin(member)
        if origin in (list, tuple, Sequence) and items and items[0] in CLI_SCALARS:
            return list[items[0]]  # type: ignore[valid-type]
    return None


def family_parameters() -> dict[str, dict[Any, tuple[str, list[str]]]]:
    """Every family parameter of `FAMILIES` (in their order): per command-line type the families
    give it (`cli_type`; None: not readable there), the first description and those families.

    >>> family_parameters()["scale"]
    {<class 'int'>: ('Scale >= 1 multiplying both counts.', ['sr-cmnist'])}
    """
    found: dict[str, dict[Any, tuple[str, list[str]]]] = {}
    for fam in FAMILIES.values():
        hints, docs = fam.parameter_hints(), fam.parameter_docs()
        for name in fam.parameters():
            kinds, kind = found.setdefault(name, {}), cli_type(hints[name])
            doc, names = kinds.get(kind, ("", []))
            kinds[kind] = (doc or docs[name], [*names, fam.name])
    return found


def option_type(name: str, kinds: Sequence[Any]) -> Any:
    """The type the option of family parameter `name` is read as, the families typing it as
    `kinds` (`cli_type`s; None left out): their type when they agree, else text (a list of texts
    when any is a list), which `family_values` turns into the chosen family's own type. None: no
    option. A switch in one family and a value in another is a TypeError.

    >>> option_type("n", [int]), option_type("given", [list[float], list[str]])
    (<class 'int'>, list[str])
    """
    known = list(dict.fromkeys(k for k in kinds if k is not None))
    if len(known) <= 1:
        return known[0] if known else None
    if bool in known:
        raise TypeError(f"family parameter {name!r} is a switch in one family, not in another")
    return list[str] if any(typing.get_origin(k) is list for k in known) else str


def family_options(taken: Sequence[str] = ()) -> list[TyperOption]:
    """One option per family parameter of a type `cli_type` can read (the union over
    `FAMILIES`, in their order): a Typer option ``--<name>`` (dashes for underscores) of type
    `option_type`, default None (the family's own default), described by the first family
    documenting it (by type, when families type it differently), naming the families that take
    it. A parameter called like one of `taken` (the command's own) is a TypeError.
    """
    out = []
    for name, kinds in family_parameters().items():
        kind = option_type(name, list(kinds))
        if kind is None:
            continue
        if name in taken:
            first = next(names[0] for _, names in kinds.values())
            raise TypeError(f"family parameter {name!r} of {first} clashes with an option")
        out.append(_family_option(name, kind, [v for k, v in kinds.items() if k is not None]))
    return out


def _family_option(name: str, kind: Any, docs: list[tuple[str, list[str]]]) -> TyperOption:
    """The option of `family_options` for the family parameter `name`, read as `kind`, with the
    descriptions `docs` (one per type the families give it, with those families)."""
    flag = "--" + name.replace("_", "-")
    decls, metavar, repeat = [flag], None, ""
    if kind is bool:
        decls = [f"{flag}/--no-{flag[2:]}"]
    elif kind is Path:
        metavar = "DIR" if name.endswith("_dir") else "FILE"
    elif typing.get_origin(kind) is list:
        metavar = f"<{typing.get_args(kind)[0].__name__}>"
        repeat = " Repeat the option for several values."
    if len(docs) == 1:
        doc, names = docs[0]
        text = f"{doc.replace('`', '')}{repeat} ({', '.join(names)})"
    else:  # families typing it differently: each description after its families
        text = " ".join(f"{', '.join(names)}: {doc.replace('`', '')}" for doc, names in docs)
        text += repeat
    option = typer.Option(None, *decls, metavar=metavar, help=text.strip(), show_default=False)
    annotation = typing.Optional[kind]  # noqa: UP045 (typer reads Optional of a list alias)
    return typer_option(name, option, annotation)


def family_command(command: Callable[..., None]) -> type[RegistryCommand]:
    """The command class of `command` (which reads the family parameters from ``ctx.params``):
    `family_options` after ``--seed``, the family argument's help listing the families."""
    extra = family_options(list(inspect.signature(command).parameters))
    return command_class(extra, after="seed", helps={"family": f"Family: {', '.join(FAMILIES)}."})


def family_values(ctx: typer.Context, family: str) -> dict[str, Any]:
    """The family parameters on the command line (`added_values`), each in the type `family`
    gives it: an option read as text because families type it differently (`option_type`) is
    converted as Typer converts an option of that type, a bad value refused in one line."""
    values = added_values(ctx)
    fam = FAMILIES.get(str(family).lower())
    if fam is None:  # build_scenario names the families
        return values
    hints, parameters = fam.parameter_hints(), family_parameters()
    options = {str(p.name): p for p in ctx.command.params}
    for name, value in values.items():
        own = cli_type(hints[name]) if name in hints else None
        if value is None or own is None or own == option_type(name, list(parameters[name])):
            continue
        values[name] = _converted(value, own, options[name], ctx, fam.name)
    return values


def _converted(value: Any, kind: Any, option: Any, ctx: typer.Context, family: str) -> Any:
    """`value` (text, or a list of texts) as an option of the command-line type `kind` reads it:
    Typer's own conversion, so a bad value is the usage error (one line) such an option gives."""
    if typing.get_origin(kind) is not list and isinstance(value, list):
        if len(value) != 1:
            raise OodevalError(f"{option.opts[0]} takes one value for {family}, got {len(value)}")
        value = value[0]
    annotation = typing.Optional[kind]  # noqa: UP045 (as `_family_option` declares it)
    typed = typer_option(str(option.name), typer.Option(None, *option.opts), annotation)
    return typed.process_value(ctx, value)


def scenario_of(family: str, source: str, seed: int, params: dict[str, Any]) -> Scenario:
    """The scenario the command line names: the family parameters given (not None, not an empty
    list) passed to `build_scenario`."""
    given = {k: v for k, v in params.items() if v is not None and v != []}
    return build_scenario(family, source=source, seed=seed, **given)


def list_families(
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """List the environment families and their parameters (table: two lines per family; csv,
    json and markdown: one row per family with columns family, summary, parameters)."""
    import pandas as pd

    check_output_path(output)
    refuse_aliases([("--output", output)])  # reads nothing; one output: never an alias
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


def show(
    ctx: typer.Context,
    family: str = FAMILY_ARG,
    source: str = SOURCE_OPT,
    seed: int = SEED_OPT,
    fmt: OutputFormat = FORMAT_OPT,
    output: str | None = OUTPUT_OPT,
) -> None:
    """Print a scenario's E_given, the size of E_all and the image counts.

    csv gives the given environments (environment, images); json every field; markdown the
    header lines and the given environments as a table.
    """
    import pandas as pd

    check_output_path(output)
    refuse_aliases([("--output", output)], Inputs().spec("--source", source))
    sc = scenario_of(family, source, seed, family_values(ctx, family))
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
    lines, e_all = [safe_text(line) for line in lines], safe_text(e_all)
    if fmt is OutputFormat.markdown:
        text = "  \n".join(lines) + "\n\n" + render_frame(given, "markdown") + "\n\n" + e_all
    else:
        lines += [
            f"  {safe_text(name):<24} {sizes['given'][name]:>7} images" for name in sc.given_names
        ]
        text = "\n".join([*lines, e_all])
    echo_output(text, output)


def preview(
    ctx: typer.Context,
    family: str = FAMILY_ARG,
    out: Path = typer.Option(..., "--out", metavar="FILE", help="PNG file to write the grid to."),
    source: str = SOURCE_OPT,
    seed: int = SEED_OPT,
    per_env: int = typer.Option(
        8, "--per-env", min=1, max=1000, help="Samples shown per environment."
    ),
    max_eval: int = typer.Option(
        5, "--max-eval", min=0, max=1000, help="Evaluation environments shown (spread)."
    ),
) -> None:
    """Write a labelled grid: one row per given environment and a spread of E_all, with labels."""
    refuse_links(out, named_by_user=True)  # never through a link to a file (`oodeval._files`)
    refuse_aliases([("--out", out)], Inputs().spec("--source", source))
    if out.is_dir():  # matplotlib would write OUT.png beside it and say nothing
        raise OodevalError(f"--out {out} is a folder; give a PNG file name, e.g. {out}/grid.png")
    sc = scenario_of(family, source, seed, family_values(ctx, family))
    rows = [(f"given {env.name}", env) for env in sc.given()]
    n_all = len(sc.all_names)
    picks = (
        set(np.linspace(0, n_all - 1, max_eval).round().astype(int).tolist()) if max_eval else set()
    )
    for j, env in enumerate(sc.evaluation()):
        if j in picks:
            rows.append((f"eval {env.name}", env))
    save_grid(rows, per_env, out, title=sc.name)
    typer.echo(safe_text(f"wrote {out} ({len(rows)} environments x {per_env} samples)"), err=True)


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
    # drawn in memory, written to `out` as given (never through a link: `oodeval._files`), in
    # the format its suffix names, PNG for a name without a known one (/dev/stdout, grid)
    kind = Path(out).suffix[1:].lower()
    if kind not in fig.canvas.get_supported_filetypes():
        kind = "png"
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, dpi=80, format=kind)
    finally:
        plt.close(fig)
    write_file(out, buffer.getvalue(), named_by_user=True)  # a failure names the file


def envs_app() -> typer.Typer:
    """The ``oodeval envs`` command group, with an option per parameter of the families
    registered now (`family_command`)."""
    group = typer.Typer(
        help=f"Many-environment datasets: {', '.join(FAMILIES)}.",
        rich_markup_mode=None,  # plain help, as `oodeval` itself (cli/main.py says why)
    )
    group.command("list")(reports_errors(list_families))
    group.command("show", cls=family_command(show))(reports_errors(show))
    group.command("preview", cls=family_command(preview))(reports_errors(preview))
    return group


def register(parent: typer.Typer) -> None:
    """Add the `envs` group to `parent` (the `oodeval` app), built from the families registered
    now."""
    parent.add_typer(envs_app(), name="envs")
