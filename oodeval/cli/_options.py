"""Commands taking options a registry declares, beside their function's own parameters.

``oodeval study run`` takes one option per option of every registered executor, and
``oodeval envs show`` / ``preview`` one per parameter of the registered families: options no
function parameter declares. `command_class` makes the Typer command class (``cls=`` of
``group.command``) that adds them to the parameters Typer makes of the function; the function
takes ``ctx: typer.Context`` and reads their values from ``ctx.params``. `typer_option` makes each
of them exactly as Typer makes the option of a function parameter, so that they parse, check
(``min``/``max``), show their metavar and read in ``--help`` as a declared option does, and
hold in ``ctx.params`` the value Typer would pass such a parameter.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from typer import _click
from typer.core import TyperCommand, TyperOption
from typer.main import _get_param
from typer.models import OptionInfo, ParamMeta


def typer_option(name: str, info: OptionInfo, annotation: Any) -> TyperOption:
    """The option Typer makes of the command-function parameter ``name: annotation = info``
    (`typer.main` builds every declared option, and its own shell-completion options, so)."""
    if info.callback is None:  # ctx.params then holds what the function would be passed
        info = copy.copy(info)
        info.callback = _as_passed
    option = _get_param(ParamMeta(name=name, default=info, annotation=annotation))
    if not isinstance(option, TyperOption):
        raise TypeError(f"{name}: {info!r} is not an option")
    return option


def _as_passed(value: Any) -> Any:
    """`value` as Typer passes it to a command function (and to a parameter callback, whose
    return value ``ctx.params`` keeps): a repeated option's values as a list, None when it is
    not given."""
    return value


class RegistryCommand(TyperCommand):
    """A Typer command whose parameters are those Typer makes of its function with `added`
    inserted after the parameter named `after` (at the end when None), and the help of the
    function's parameters named in `helps` replaced. Made by `command_class`.

    The function's parameters receive their values as Typer passes them; the values of `added`
    are in ``ctx.params`` (`added_values`), for a ``ctx: typer.Context`` parameter to read. An
    added parameter named or spelled like another parameter is a TypeError.
    """

    added: ClassVar[tuple[_click.Parameter, ...]] = ()
    after: ClassVar[str | None] = None
    helps: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        name: str | None,
        *,
        params: list[_click.Parameter] | None = None,
        callback: Callable[..., Any] | None = None,
        **settings: Any,
    ) -> None:
        own = [
            _with_help(p, self.helps[p.name]) if p.name in self.helps else p for p in params or []
        ]
        _refuse_clashes(own, self.added)
        names = [p.name for p in own]
        cut = names.index(self.after) + 1 if self.after is not None else len(own)
        super().__init__(
            name,
            params=[*own[:cut], *self.added, *own[cut:]],
            callback=None if callback is None else _own_values(callback, set(names)),
            **settings,
        )


def command_class(
    added: Sequence[_click.Parameter],
    *,
    after: str | None = None,
    helps: Mapping[str, str] | None = None,
) -> type[RegistryCommand]:
    """The `RegistryCommand` class (``cls=`` of ``group.command``) adding the parameters `added`
    after the function's parameter `after` (at the end when None), with the help texts `helps`
    for the function's parameters they name (texts naming what is registered now)."""
    settings = {"added": tuple(added), "after": after, "helps": dict(helps or {})}
    return type("RegistryCommand", (RegistryCommand,), settings)


def added_values(ctx: _click.Context) -> dict[str, Any]:
    """The values of the parameters the `RegistryCommand` of `ctx` added, by parameter name."""
    added = ctx.command.added if isinstance(ctx.command, RegistryCommand) else ()
    return {str(p.name): ctx.params[str(p.name)] for p in added}


def _with_help(param: _click.Parameter, text: str) -> _click.Parameter:
    """A copy of `param` (an option or an argument) with the help `text`."""
    param = copy.copy(param)
    param.help = text  # type: ignore[attr-defined]  # options and Typer's arguments have a help
    return param


def _refuse_clashes(own: Sequence[_click.Parameter], added: Sequence[_click.Parameter]) -> None:
    """TypeError when a parameter of `added` has the name or a flag of one of `own` (or of
    another one added): click would let one hide the other."""
    seen: dict[str, str] = {}
    for param in [*own, *added]:
        label = param.opts[0] if param.opts else str(param.name)
        for key in dict.fromkeys([str(param.name), *param.opts, *param.secondary_opts]):
            if key in seen:
                raise TypeError(f"option {label} clashes with {seen[key]}: both take {key!r}")
            seen[key] = label


def _own_values(callback: Callable[..., Any], names: set[str]) -> Callable[..., Any]:
    """`callback` (Typer's, which takes the function's parameters only) given every parsed
    value: it passes on those of `names`."""

    @functools.wraps(callback)
    def call(**values: Any) -> Any:
        return callback(**{k: v for k, v in values.items() if k in names})

    return call
