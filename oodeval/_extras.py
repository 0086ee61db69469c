"""oodeval's optional extras: which extra provides a module, and the line saying one is missing.

The core install scores a results CSV or a DomainBed sweep (numpy, scipy, pandas, typer, rich,
tqdm). Everything else comes with an extra of pyproject.toml's [project.optional-dependencies]:
``pip install 'oodeval[report]'`` for plots and the HTML report, ``'oodeval[train]'`` for training
(the measure study, GMoP, the shift metrics, image folders), ``'oodeval[torchmetrics]'`` for the
streaming open-world metrics of `oodeval.torchmetrics`... A command that reaches a missing
one stops with `missing_extra_message` as its only line (exit status 2): the CLI's error wrapper
(`oodeval.cli._common.reports_errors`) turns any ModuleNotFoundError of a module listed here into
that line, and `require_extra` checks up front where a command would otherwise work for a while
first.
"""

from __future__ import annotations

import importlib.util

from oodeval.errors import OodevalError

__all__ = ["EXTRAS", "MissingExtra", "extra_of", "missing_extra_message", "require_extra"]

#: The top-level module each optional extra brings, and that extra's name.
EXTRAS: dict[str, str] = {
    "torch": "train",
    "PIL": "train",
    "sklearn": "train",
    "safetensors": "train",
    "matplotlib": "report",
    "jinja2": "report",
    "imagecorruptions": "corruptions",
    "ray": "ray",
    "submitit": "slurm",
    "open_clip": "clip",
    "torchmetrics": "torchmetrics",
}


class MissingExtra(OodevalError):
    """A module of an optional extra is not installed; the message says which extra to add."""


def missing_extra_message(what: str, module: str, extra: str | None = None) -> str:
    """The one line saying that `what` needs `module`, which comes with `extra` (by default the
    extra `EXTRAS` names for the module).

    >>> print(missing_extra_message("oodeval study run", "torch"))
    oodeval study run needs the 'train' extra (torch is not installed); install it with: pip install 'oodeval[train]'
    """  # noqa: E501
    extra = extra or EXTRAS[module.split(".")[0]]
    return (
        f"{what} needs the '{extra}' extra ({module} is not installed); "
        f"install it with: pip install 'oodeval[{extra}]'"
    )


def extra_of(exc: ImportError) -> str | None:
    """The extra whose missing module raised `exc`, or None when it is not an extra's module
    (a core dependency or our own code) or not a missing package at all: a package that is not
    installed fails on its top-level name, while a missing submodule of an installed one
    (``torch.nn``) is a broken install, which stays a real error.

    >>> extra_of(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"))
    'report'
    >>> extra_of(ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None
    True
    >>> extra_of(ModuleNotFoundError("No module named 'torch.nn'", name="torch.nn")) is None
    True
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name or "." in exc.name:
        return None
    return EXTRAS.get(exc.name)


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent that is missing, or a module with no spec
        return True


def require_extra(extra: str, what: str) -> None:
    """Raise MissingExtra, naming `what`, when a module of `extra` is not installed (found
    without importing it, so the check is cheap).

    Commands call it before doing any work that would be lost: `oodeval study run` checks
    ``report`` before training when it is to write the report at the end.

    >>> require_extra("no-such-extra", "anything")
    Traceback (most recent call last):
    ...
    ValueError: unknown extra 'no-such-extra'
    """
    modules = [module for module, owner in EXTRAS.items() if owner == extra]
    if not modules:
        raise ValueError(f"unknown extra {extra!r}")
    for module in modules:
        if _absent(module):
            raise MissingExtra(missing_extra_message(what, module, extra))
