"""What a command prints and where: the ``--format/-f`` and ``--output/-o FILE`` options, the
output path checked before any work, the text written to the file or stdout, and dicts of
metrics and report lines rendered in a format.

The command-line contract (CONTRIBUTING.md): a command that prints a table takes
``--format/-f`` (`FORMAT_OPT`, one of `oodeval.tables.FORMATS`) and ``--output/-o FILE``
(`OUTPUT_OPT`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import typer

from oodeval._files import all_or_nothing, names_the_file, refuse_links, write_file
from oodeval._text import safe_text
from oodeval.errors import OodevalError
from oodeval.tables import render_frame, render_rows, to_json


class OutputFormat(str, Enum):
    """The four output formats of every table-printing command (`oodeval.tables.FORMATS`)."""

    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


FORMAT_OPT: Any = typer.Option(
    OutputFormat.table,
    "--format",
    "-f",
    case_sensitive=False,
    help="Output format: table (aligned text), csv, json or markdown.",
)
OUTPUT_OPT: Any = typer.Option(
    None, "--output", "-o", metavar="FILE", help="Write the output to this file instead of stdout."
)


def check_output_path(output: str | None) -> None:
    """Raise OodevalError now if `output` cannot be written (a symbolic link, a folder, or no
    such parent folder).

    Commands call it before they read or compute anything, so a bad --output is the only line a
    user sees, not warnings about the input followed by the error.
    """
    if output is None:
        return
    path = Path(output)
    # a file the user names is never written through a link either, unless it leads to a
    # device or pipe (/dev/stdout, >(...)): `oodeval._files`
    refuse_links(path, named_by_user=True)
    if path.is_dir():
        raise OodevalError(f"--output {output} is a folder; give a file name inside it")
    parent = path.parent
    if not parent.is_dir():
        raise OodevalError(
            f"--output {output}: folder {parent} does not exist; create it or choose another path"
        )
    if not os.access(parent, os.W_OK) and not _writable_file(path):
        raise OodevalError(f"--output {output}: folder {parent} is not writable")


def _writable_file(path: Path) -> bool:
    """`path` is a regular file (not a link) this user may write: rewritten in place when its
    folder may not be written (`oodeval._files.write_file`). Opened to write and closed (not
    truncated: nothing changes), as `os.access` answers for the real user, not this one."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC))
    except OSError:
        return False
    return True


def echo_output(text: str, output: str | None, *, say_wrote: bool = True) -> None:
    """Write `text` to the file `output` (never through a link: `oodeval._files.write_file`),
    or to stdout when it is None. ``wrote FILE`` goes to stderr then, unless not `say_wrote`
    (a command that prints lines about the result first says it itself, after them)."""
    if output is None:
        with names_the_file("the standard output"):  # a full disk there is named too
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
    else:
        write_file(output, text if text.endswith("\n") else text + "\n", named_by_user=True)
        if say_wrote:
            typer.echo(safe_text(f"wrote {output}"), err=True)


def render_metrics(metrics: dict[str, Any], fmt: OutputFormat) -> str:
    """A dict of named numbers as text: json an object, csv one row (a column per metric, floats
    at full precision), table and markdown one ``metric | value`` row per metric (6 decimals).

    >>> print(render_metrics({"hm": 0.5, "n_base": 3}, OutputFormat.table))
    metric     value
    hm      0.500000
    n_base         3
    """
    import pandas as pd

    if fmt is OutputFormat.json:
        return to_json(metrics)
    if fmt is OutputFormat.csv:
        return render_frame(pd.DataFrame([metrics]), "csv")
    rows = [[k, f"{v:.6f}" if isinstance(v, float) else str(v)] for k, v in metrics.items()]
    return render_rows(["metric", "value"], rows, fmt.value, right=[False, True])


_P = TypeVar("_P", str, Path)


def echo_metrics_and_file(
    metrics: dict[str, Any],
    fmt: OutputFormat,
    output: str | None,
    side_file: _P | None,
    write_side_file: Callable[[_P], Path],
) -> None:
    """Write ``write_side_file(side_file)`` (nothing when `side_file` is None), then
    `render_metrics` of `metrics` with `echo_output`, all or nothing
    (`oodeval._files.all_or_nothing`: a failed --output takes the side file with it);
    ``wrote SIDE_FILE`` goes to stderr once both are written."""
    with all_or_nothing() as written:
        if side_file is not None:
            written.append(write_side_file(side_file))
        echo_output(render_metrics(metrics, fmt), output)
    if side_file is not None:
        typer.echo(safe_text(f"wrote {side_file}"), err=True)


def lines_frame(lines: list[str]) -> Any:
    """Report lines ``item: detail`` as a two-column DataFrame (item, detail); an indented line
    continues the item above it (its item is empty)."""
    import pandas as pd

    rows = []
    for line in lines:
        item, sep, detail = line.partition(": ")
        if line.startswith(" ") or not sep:
            rows.append(("", line.strip()))
        else:
            rows.append((item, detail))
    return pd.DataFrame(rows, columns=["item", "detail"])


def render_lines(lines: list[str], fmt: OutputFormat) -> str:
    """A report of ``item: detail`` lines: as written for ``table``, else as the (item, detail)
    table of `lines_frame` in csv, json (records) or markdown."""
    if fmt is OutputFormat.table:
        return "\n".join(safe_text(line) for line in lines)
    return render_frame(lines_frame(lines), fmt.value)
