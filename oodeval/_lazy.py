"""Module attributes imported on first use (PEP 562), for the package's public namespaces.

`oodeval` and `oodeval.results` name their public objects without importing the modules that
define them, so ``import oodeval`` stays light: the first ``oodeval.score`` imports
``oodeval.results.scoring`` and caches the object in the namespace.

>>> import types
>>> ns = types.ModuleType("ns")
>>> ns.__getattr__, ns.__dir__ = lazy_attributes(ns.__dict__, {"sqrt": "math"}, ["sqrt"])
>>> ns.sqrt(4.0), "sqrt" in vars(ns)
(2.0, True)

A package whose public names are all defined in its modules lists them by module with
`lazy_package`, which also gives its ``__all__``:

>>> ns = types.ModuleType("ns")
>>> ns.__all__, ns.__getattr__, ns.__dir__ = lazy_package(ns.__dict__, {"math": ("pi", "e")})
>>> ns.__all__, round(ns.pi, 2)
(['e', 'pi'], 3.14)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any


def lazy_attributes(
    namespace: MutableMapping[str, Any],
    defined_in: Mapping[str, str],
    public: Sequence[str],
    submodules: Sequence[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a module whose names import on first use.

    Parameters
    ----------
    namespace : the module's ``globals()``; a resolved name is stored there, so later lookups
        skip ``__getattr__``
    defined_in : public name -> the module that defines it (imported on first access); a
        relative name (``".scoring"``) is relative to the module
    public : the module's ``__all__`` (what ``dir()`` lists)
    submodules : names of submodules imported as attributes (``oodeval.measures``)
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in defined_in:
            value = getattr(importlib.import_module(defined_in[name], package), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(public)

    return __getattr__, __dir__


def lazy_package(
    namespace: MutableMapping[str, Any], defined_in: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__all__``, ``__getattr__`` and ``__dir__`` of a package that exports the names of its
    modules, each imported on first use.

    Parameters
    ----------
    namespace : the package's ``globals()`` (see `lazy_attributes`)
    defined_in : module -> the public names it defines; a relative module name (``".concept"``) is
        relative to the package. ``__all__`` is every name, sorted.
    """
    homes = {name: module for module, names in defined_in.items() for name in names}
    public = sorted(homes)
    return (public, *lazy_attributes(namespace, homes, public))
