"""User code of a study config: its imports, found and run once per process, and their digests.

``imports`` lists module names or paths of ``.py`` files (relative to the config file, stored
resolved, `resolved_import`): a file is loaded under its stem by `import_module_or_file`, in the
parent and in every worker, so no ``PYTHONPATH`` is needed. Each file's `code_digest` is kept in
the config's ``import_digests`` (`import_digests`), and configs compare such an import by file
name and digest, not by where it lies.

User code runs only when needed and once per process: a module name is first found without
running anything (`located_spec`: no package ``__init__`` executes), and `import_problem` imports
an entry once per process (again only when its file changed), refusing a module that registers
nothing (no algorithm, measure, source kind or executor: `registered_objects`).

>>> is_path_import("my_algorithm.py"), is_path_import("my_package.algorithms")
(True, False)
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from oodeval._digest import code_digest
from oodeval.study.config.keys import shown

#: Prefix of the keys of a unit's ``versions`` holding the code digest of each of ``imports``
#: (``"import:my_algorithm"``; `oodeval.study.worker.import_versions`).
IMPORT_VERSION_PREFIX = "import:"
#: {path: digest} of the files `import_module_or_file` executed in this process
_LOADED_FILES: dict[Path, str] = {}
#: {(entry, file digest or ""): (the module, `import_problem`'s answer)} of this process
_IMPORTED: dict[tuple[str, str], tuple[ModuleType | None, str | None]] = {}
#: The registries a user module may fill: (kind, the registry's module). A module that
#: registers something has imported the registry, so one not loaded yet holds nothing.
_REGISTRIES = (
    ("algorithm", "oodeval.algorithms.registry"),
    ("measure", "oodeval.measures.registry"),
    ("source kind", "oodeval.environments.source_kinds"),
    ("executor", "oodeval.study.executors.base"),
)


def is_path_import(entry: str) -> bool:
    """True when an ``imports`` entry names a ``.py`` file rather than a module.

    >>> is_path_import("my_algorithm.py"), is_path_import("my_package.algorithms")
    (True, False)
    """
    return entry.endswith(".py")


def resolved_import(entry: Any, base: Path) -> Any:
    """An ``imports`` entry with a ``.py`` path made absolute (relative to `base`); anything
    else unchanged (a module name, or a bad value for the parser to report).

    >>> resolved_import("my_package.algorithms", Path("/tmp"))
    'my_package.algorithms'
    """
    if not isinstance(entry, str) or not is_path_import(entry):
        return entry
    path = Path(entry).expanduser()
    return str((path if path.is_absolute() else base / path).resolve())


def import_digests(
    imports: Sequence[str], data: Mapping[str, Any], problems: list[str]
) -> dict[str, str]:
    """{path: `code_digest`} of the ``.py`` files of `imports`: given by `data` (a stored
    config's ``import_digests``), else read from the files; a missing file, a module not found
    (`module_problem`: nothing is imported here) or a bad table is added to `problems`.

    >>> import_digests(["pkg.mod"], {}, [])
    {}
    """
    given = data.get("import_digests") or {}
    if not isinstance(given, Mapping):
        problems.append(f"import_digests must be a table, got {shown(given)}")
        given = {}
    out = {}
    for entry in imports:
        if not is_path_import(entry):
            problem = module_problem(entry, "imports")
            if problem is not None:
                problems.append(problem)
            continue
        if isinstance(given.get(entry), str):
            out[entry] = given[entry]
        elif Path(entry).is_file():
            out[entry] = code_digest(entry)
        else:
            problems.append(
                f"imports: file {entry} not found; a .py path is relative to the config file"
            )
    return out


def import_module_or_file(entry: str) -> ModuleType:
    """Import an ``imports`` entry: a module by name, or a ``.py`` file as the module named by
    its stem (`importlib.util.spec_from_file_location`), executed again when the file changed.

    A file whose stem names another module already imported is refused (it would shadow it).
    """
    if not is_path_import(entry):
        return importlib.import_module(entry)
    path = Path(entry)
    if not path.is_file():
        raise ImportError(f"file {entry} not found")
    name, digest = path.stem, code_digest(path)
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        mine = where is not None and Path(where) in _LOADED_FILES  # a file loaded here before
        if not mine and (where is None or Path(where).resolve() != path.resolve()):
            raise ImportError(
                f"{path.name} would be imported as {name!r}, the name of the module {where or ''}"
                " already imported; rename the file"
            )
        if where is not None and Path(where) == path and _LOADED_FILES.get(path) == digest:
            return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{entry} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _LOADED_FILES[path] = digest
    return module


def located_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where module `name` would be imported from, found without running anything: each parent
    package is looked up in its folder (`importlib.machinery.PathFinder`), never executed (a
    module already imported gives its own spec). None when there is no such module.

    >>> located_spec("json.decoder").name, located_spec("no_such_module_x") is None
    ('json.decoder', True)
    """
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    spec, path = None, None
    for i in range(len(parts)):
        full = ".".join(parts[: i + 1])
        loaded = sys.modules.get(full)
        try:
            if loaded is not None and getattr(loaded, "__spec__", None) is not None:
                spec = loaded.__spec__
            elif i == 0:  # a top-level name: finding it runs nothing
                spec = importlib.util.find_spec(full)
            else:
                spec = importlib.machinery.PathFinder.find_spec(full, path)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        path = spec.submodule_search_locations
        if path is None and i < len(parts) - 1:
            return None  # a module, not a package: it has no submodules
    return spec


def module_problem(name: str, key: str) -> str | None:
    """Why the module name `name` (an entry of config key `key`) cannot be imported, found
    without importing it (`located_spec`); None when it can be found.

    >>> module_problem("no_such_module_x", "imports")
    "imports: cannot import module 'no_such_module_x' (no such module on the Python path)"
    """
    if not all(part.isidentifier() for part in name.split(".")):
        return f"{key}: {name!r} is not a module name (dotted Python names) or a .py path"
    if located_spec(name) is None:
        return f"{key}: cannot import module {name!r} (no such module on the Python path)"
    return None


def registered_objects() -> dict[tuple[str, str], Any]:
    """{(kind, name): the registered class or function} of every registry loaded in this process
    (`_REGISTRIES`): what user modules and oodeval have registered so far."""
    out: dict[tuple[str, str], Any] = {}
    for kind, where in _REGISTRIES:
        module = sys.modules.get(where)
        if module is None:
            continue
        if kind == "algorithm":
            entries = {n: module.get_algorithm(n) for n in module.available()}
        elif kind == "measure":
            entries = {n: s.function for n, s in module.REGISTRY.items()}
            entries.update({n: f.factory for n, f in module.FAMILIES.items()})
        elif kind == "source kind":
            entries = {n: type(k) for n, k in module.registered_source_kinds().items()}
        else:
            entries = dict(module.EXECUTOR_CLASSES)
        out.update({(kind, name): obj for name, obj in entries.items()})
    return out


def _registered_by(module: ModuleType, before: Mapping[tuple[str, str], Any]) -> list[str]:
    """What importing `module` registered: entries new since `before`, or defined in the module
    or its submodules (a module imported earlier, or run again after an edit, adds no name)."""
    prefix = module.__name__
    found = []
    for (kind, name), obj in registered_objects().items():
        home = getattr(obj, "__module__", None) or ""
        if before.get((kind, name)) is not obj or home == prefix or home.startswith(prefix + "."):
            found.append(f"{kind} {name}")
    return found


def import_problem(name: str, key: str) -> str | None:
    """Why importing the user module `name` (an entry of config key `key`) fails, in one line;
    None if it works.

    Each entry is imported once per process (a ``.py`` file again when its code changed); later
    calls give the first answer. A module that registers nothing (no algorithm, measure, source
    kind or executor: `registered_objects`) is refused: ``imports`` lists the code a study
    needs, not any module.

    >>> import_problem("json", "imports")  # doctest: +ELLIPSIS
    "imports: module 'json' registers nothing (no algorithm, measure, source kind or executor);..."
    """
    path = Path(name)
    digest = code_digest(path) if is_path_import(name) and path.is_file() else ""
    module = _IMPORTED[(name, digest)][0] if (name, digest) in _IMPORTED else None
    if (name, digest) not in _IMPORTED or (
        module is not None and sys.modules.get(module.__name__) is not module
    ):  # imported again only when its module was unloaded or replaced since
        _IMPORTED[(name, digest)] = _first_import(name)
    reason = _IMPORTED[(name, digest)][1]
    return None if reason is None else f"{key}: {reason}"


def _first_import(name: str) -> tuple[ModuleType | None, str | None]:
    """Import `name`: the module (None when it failed) and why it is refused (None if not)."""
    before = registered_objects()
    try:
        module = import_module_or_file(name)
    except ImportError as exc:
        return None, f"cannot import module {name!r} ({exc})"
    except Exception as exc:  # a user's module failing at import time is a config problem too
        line = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"cannot import module {name!r} ({type(exc).__name__}: {line})"
    if not _registered_by(module, before):
        return module, (
            f"module {name!r} registers nothing (no algorithm, measure, source kind or "
            "executor); give only modules that register what you use"
        )
    return module, None
