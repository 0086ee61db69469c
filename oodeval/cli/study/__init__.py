"""`oodeval study`: run the worst+gap measure study, check on it, analyse it, estimate its cost.

One module per subcommand (run, status, analyze, summary, measures, merge, verify, estimate,
export); each defines ``register(group)``, which adds its command to the `study` group, as
every command module of `oodeval.cli` adds its commands to the one above it. `options` holds
what several share.
"""

from __future__ import annotations

import typer

from oodeval.cli.study import (
    analyze,
    estimate,
    export,
    measures,
    merge,
    run,
    status,
    summary,
    verify,
)

#: The subcommands, in the order `oodeval study --help` lists them.
SUBCOMMANDS = (run, status, analyze, summary, measures, merge, verify, estimate, export)


def register(parent: typer.Typer) -> None:
    """Add the `study` group to `parent` (the `oodeval` app), built now: `run` takes the options
    of the executors registered at this moment."""
    group = typer.Typer(
        help="Run the worst+gap paper's measure study resumably and analyse it.",
        no_args_is_help=True,
    )
    for subcommand in SUBCOMMANDS:
        subcommand.register(group)
    parent.add_typer(group, name="study")
