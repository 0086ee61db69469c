"""MkDocs hook: the three reference pages, generated from the code at build time.

- ``reference/api.md``: a mkdocstrings ``:::`` block for every name the public modules export
  (`API_MODULES`, each walked through its ``__all__``), by its public path (``oodeval.score``,
  ``oodeval.measures.worst_plus_gap``), never the private module defining it, so the page
  follows the code's exports and the docstrings render as they are written (numpy style).
- ``reference/cli.md``: every command of the Typer app (`oodeval.cli.main.app`), walked through
  ``typer.main.get_command``: its usage line, its help and every argument and option.
- ``reference/config.md``: every key of a study config, from the schema itself: the fields of
  `oodeval.study.config.StudyConfig` (types, defaults, their ``Attributes`` documentation), the
  ``[trainer]`` rules of `TRAINER_OPTIONS` with `TrainerOptions`' defaults, every scenario family's
  parameters and every registered algorithm's hyperparameters.

Nothing here is a copy of the code: rename an option or a key and the page changes with it. The
pages are generated in memory (mkdocs ``File.generated``); ``mkdocs build`` writes them to site/.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import logging
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("mkdocs.hooks.gen_reference")

#: The public modules documented in the API reference, with a sentence on each; every name in
#: their ``__all__`` is documented once, where it is first exported.
API_MODULES = (
    ("oodeval", "The top-level API: score results, read a DomainBed sweep, read a study."),
    ("oodeval.measures", "The measures, as plain functions over arrays (numpy/scipy only)."),
    ("oodeval.results", "Readers of users' files and the scoring behind `oodeval.score`."),
    ("oodeval.study", "Study configs, presets, runs and the results store."),
    (
        "oodeval.torchmetrics",
        "The OpenworldAUC suite as torchmetrics metrics (the 'torchmetrics' extra).",
    ),
)


def on_config(config: Any) -> Any:
    if str(ROOT) not in sys.path:  # the checkout being documented, not another install
        sys.path.insert(0, str(ROOT))
    return config


def on_files(files: Files, config: Any) -> Files:
    for path, content in (
        ("reference/api.md", api_page()),
        ("reference/cli.md", cli_page()),
        ("reference/config.md", config_page()),
    ):
        old = files.get_file_from_path(path)
        if old is not None:
            files.remove(old)
        files.append(File.generated(config, path, content=content))
    return files


# -- helpers -----------------------------------------------------------------------------------
def cell(text: Any) -> str:
    """`text` on one line, safe inside a markdown table cell: code spans (`x` or ``x``) kept,
    HTML and emphasis characters escaped outside them, pipes escaped everywhere."""
    parts = re.split(r"(``[^`]+``|`[^`]+`)", " ".join(str(text).split()))
    out = "".join(
        part if part.startswith("`") else html.escape(part, quote=False).replace("*", "\\*")
        for part in parts
    )
    return out.replace("|", "\\|")


def code(text: Any) -> str:
    """`text` as inline code inside a table cell."""
    return "<code>" + html.escape(str(text), quote=False).replace("|", "&#124;") + "</code>"


def paragraphs(text: str) -> str:
    """Help text with its hard line breaks reflowed, paragraphs kept, markdown escaped."""
    parts = [" ".join(p.split()) for p in re.split(r"\n\s*\n", inspect.cleandoc(text or ""))]
    return "\n\n".join(html.escape(p, quote=False).replace("*", "\\*") for p in parts if p)


def attribute_docs(doc: str | None) -> dict[str, str]:
    """{name: text} from a numpy ``Attributes`` section written ``a, b : text`` (one entry per
    name; indented lines continue the text)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes") + 2
    except StopIteration:
        return {}
    out: dict[str, str] = {}
    names: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        if not line.startswith(" ") and " : " in line:
            head, text = line.split(" : ", 1)
            names = [n.strip() for n in head.split(",")]
            for name in names:
                out[name] = text.strip()
        elif names:
            for name in names:
                out[name] += " " + line.strip()
    return out


def parameter_docs(fn: Any) -> dict[str, str]:
    """{parameter: description} of a numpy ``Parameters`` section (griffe's parser)."""
    from griffe import Docstring, DocstringSectionKind

    doc = inspect.getdoc(fn)
    if not doc:
        return {}
    parsed = Docstring(doc, parser="numpy").parse(warnings=False)
    return {
        p.name: p.description
        for section in parsed
        if section.kind is DocstringSectionKind.parameters
        for p in section.value
    }


# -- reference/api.md ----------------------------------------------------------------------------
def public_exports(module: Any) -> list[str]:
    """The names `module` exports: its ``__all__`` less any ``_name`` (``__version__``)."""
    return [n for n in getattr(module, "__all__", ()) if not n.startswith("_")]


def api_entries() -> list[tuple[str, list[str]]]:
    """(module, [public path, ...]) for every module of `API_MODULES`: each exported object once,
    as ``module.name`` of the first module exporting it, so no page names where it is defined
    (a private ``_module``) and mkdocstrings follows the re-export to the docstring."""
    import importlib

    seen: set[int] = set()
    entries = []
    for modname, _ in API_MODULES:
        module = importlib.import_module(modname)
        paths = []
        for name in public_exports(module):
            obj = getattr(module, name)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            paths.append(f"{modname}.{name}")
        entries.append((modname, paths))
    return entries


def api_page() -> str:
    import importlib

    out = [
        "# Python API",
        "",
        "Generated from the docstrings at build time: every name the modules below export "
        "(their `__all__`), by its public path. Each name is documented once, under the first "
        "module exporting it.",
        "",
    ]
    summaries = dict(API_MODULES)
    documented = {modname for modname, _ in API_MODULES}
    for modname, paths in api_entries():
        module = importlib.import_module(modname)
        out += [f"## `{modname}`", "", summaries[modname], ""]
        doc = inspect.getdoc(module)
        if doc:
            out += [paragraphs(doc.split("\n\n", 1)[0]), ""]
        for path in paths:
            out += [f"::: {path}", "    options:", "      heading_level: 3"]
            if path in documented:  # a sub-package with a section of its own: not its members
                out += ["      members: false"]
            out += [""]
        if not paths:
            out += ["(exports nothing of its own beyond the names documented above)", ""]
    return "\n".join(out)


# -- reference/cli.md ----------------------------------------------------------------------------
def cli_page() -> str:
    import typer.main

    from oodeval.cli.main import app

    root = typer.main.get_command(app)
    out = [
        "# Command line",
        "",
        "Generated from the `oodeval` command itself (its Typer app) at build time: every command,"
        " its usage, its help and every argument and option. `oodeval COMMAND --help` prints the "
        "same.",
        "",
        "Every command keeps the [command-line contract](../contributing.md#command-line-contract)"
        ": tables take `--format/-f table|csv|json|markdown` and `--output/-o FILE`, artefacts "
        "`--out PATH`; exit status 0 done, 1 a check found a problem, 2 bad input (one `error:` "
        "line naming the fix), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).",
        "",
    ]
    for path, command, ctx in walk_commands(root):
        out += command_section(path, command, ctx)
    return "\n".join(out)


def walk_commands(root: Any):
    """(path, command, context) of the app and every command below it, depth first."""
    from typer._click.core import Context

    def visit(command: Any, path: list[str], parent: Any):
        ctx = Context(command, info_name=path[-1], parent=parent)
        yield path, command, ctx
        for name in getattr(command, "list_commands", lambda _c: [])(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from visit(sub, [*path, name], ctx)

    yield from visit(root, ["oodeval"], None)


def command_section(path: list[str], command: Any, ctx: Any) -> list[str]:
    title = " ".join(path)
    level = "#" * min(2 + len(path) - 1, 4) if len(path) > 1 else "##"
    out = [f"{level} `{title}`", "", "```text", command.get_usage(ctx), "```", ""]
    if command.help:
        out += [paragraphs(command.help), ""]
    subs = getattr(command, "list_commands", lambda _c: [])(ctx)
    if subs:
        out += ["| command | what it does |", "| --- | --- |"]
        for name in subs:
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                first = re.split(r"\n\s*\n", inspect.cleandoc(sub.help or ""))[0]
                out.append(f"| {code(title + ' ' + name)} | {cell(first)} |")
        out.append("")
    panels: dict[str | None, list[str]] = {}
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:  # an argument without help: its name and type
            record = (f"{param.name} {param.display_type(ctx)}", "")
        kind = "argument" if type(param).__name__.endswith("Argument") else "option"
        if param.name == "help":
            continue
        panels.setdefault(getattr(param, "rich_help_panel", None), []).append(
            f"| {code(record[0])} | {kind} | {cell(record[1])} |"
        )
    for panel, rows in panels.items():
        if panel:
            out += [f"**{panel}**", ""]
        out += ["| name | kind | help |", "| --- | --- | --- |", *rows, ""]
    return out


# -- reference/config.md -------------------------------------------------------------------------
class _Anything:
    def __repr__(self) -> str:
        return "?"


def rule_text(check: Any) -> str:
    """What a ``[trainer]`` rule accepts, in its own words: its message for a value no rule
    accepts, without the "got ..." part."""
    message = check(_Anything(), {}) or ""
    return re.sub(r"^must be |,? got .*$", "", message)


def default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return repr(field.default_factory())  # type: ignore[misc]
    return "required"


def config_page() -> str:
    from oodeval.study import config as schema

    out = [
        "# Study config",
        "",
        "Generated from the config schema at build time (`oodeval.study.config`): the fields of "
        "`StudyConfig` with their types, defaults and documentation; the `[trainer]` table's "
        "rules; each scenario family's parameters; each algorithm's hyperparameters. A config is "
        "TOML, e.g. `examples/study.toml`; `oodeval study run CONFIG.toml` checks every key before "
        "touching the output folder and reports every problem in one `error:` line.",
        "",
        "## Top-level keys",
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    docs = attribute_docs(schema.StudyConfig.__doc__)
    for field in dataclasses.fields(schema.StudyConfig):
        out.append(
            f"| {code(field.name)} | {code(field.type)} | {code(default_text(field))} | "
            f"{cell(docs.get(field.name, ''))} |"
        )
    out += [
        "",
        "`source_identity`, `import_digests` and `pretrained_sha256` are computed from the data, "
        "the imported files and the `[trainer] pretrained` weights file, never written in a "
        "config; a stored study carries them.",
        "",
    ]
    out += trainer_section(schema)
    out += families_section()
    out += hparams_section()
    return "\n".join(out)


def trainer_section(schema: Any) -> list[str]:
    from oodeval.training.options import TrainerOptions

    defaults = {f.name: f.default for f in dataclasses.fields(TrainerOptions)}
    docs = attribute_docs(TrainerOptions.__doc__)
    out = [
        "## `[trainer]`",
        "",
        "How every unit trains (keyword options of `oodeval.training.run_unit`).",
        "",
        "| key | accepts | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for key, option in schema.TRAINER_OPTIONS.items():
        out.append(
            f"| {code(key)} | {cell(rule_text(option.check))} | {code(repr(defaults.get(key)))} "
            f"| {cell(docs.get(key, ''))} |"
        )
    return [*out, ""]


def families_section() -> list[str]:
    from oodeval.environments.families import FAMILIES

    out = [
        "## `[[scenarios]]`",
        "",
        "Each scenario is a table with a `family` and that family's parameters "
        '(`{ family = "sr-cmnist", ratio = "3:1", scale = 1 }`); `oodeval envs list` and '
        "`oodeval envs show` show the datasets.",
        "",
    ]
    for name, family in FAMILIES.items():
        docs = parameter_docs(family.builder)
        out += [
            f"### `{name}`",
            "",
            cell(family.summary),
            "",
            "| parameter | default | meaning |",
            "| --- | --- | --- |",
        ]
        for param, default in family.parameters().items():
            out.append(f"| {code(param)} | {code(repr(default))} | {cell(docs.get(param, ''))} |")
        out.append("")
    return out


def hparams_section() -> list[str]:
    try:
        from oodeval.algorithms import available, get_algorithm
    except ModuleNotFoundError as exc:
        log.warning(
            "the hyperparameter table needs the 'train' extra (%s is not installed); install it "
            "with: pip install 'oodeval[docs,train]'",
            exc.name,
        )
        return []
    from oodeval.algorithms.hparams import FEATURIZER_HPARAMS, MODEL_HPARAM_CHANGES

    out = [
        "## `[hparams.ALGORITHM]`",
        "",
        "Overrides of an algorithm's hyperparameters (`hparams_mode = \"random\"` draws them from "
        "each one's search distribution instead). Defaults are DomainBed's small-image values; "
        "the models below change or add some.",
        "",
        "| algorithm | key | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name in available():
        for key, hp in get_algorithm(name).hparam_space().items():
            out.append(f"| {name} | {code(key)} | {code(repr(hp.default))} | {cell(hp.doc)} |")
    out += [
        "",
        "With these models, these keys replace the algorithm's own of that name where it has "
        "one (DomainBed's values for its larger images), or are added to every algorithm's "
        "(the featurizer's own):",
        "",
        "| model | key | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for model in sorted(set(MODEL_HPARAM_CHANGES) | set(FEATURIZER_HPARAMS)):
        extra = {**MODEL_HPARAM_CHANGES.get(model, {}), **FEATURIZER_HPARAMS.get(model, {})}
        for key, hp in extra.items():
            out.append(f"| {model} | {code(key)} | {code(repr(hp.default))} | {cell(hp.doc)} |")
    return [*out, ""]


__all__ = ["api_entries", "on_config", "on_files", "public_exports"]
