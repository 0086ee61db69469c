"""Module attributes imported on first use (PEP 562), for the package's public namespaces.

`oodeval` and `oodeval.results` name their public objects without importing the modules that
define them, so ``import oodeval`` stays light: the first ``oodeval.score`` imports
``oodeval.results.scoring`` and caches the object in the namespace.

>>> import types
>>> ns = types.ModuleType("ns")
>>> ns.__getattr__, ns.__dir__ = lazy_attributes(ns.__dict__, {"sqrt": "math"}, ["sqrt"])
>>> ns.sqrt(4.0), "sqrt" in vars(ns)
(2.0, True)
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
    defined_in : public name -> the module that defines it (imported on first access)
    public : the module's ``__all__`` (what ``dir()`` lists)
    submodules : names of submodules imported as attributes (``oodeval.measures``)
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in defined_in:
            value = getattr(importlib.import_module(defined_in[name]), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(public)

    return __getattr__, __dir__
