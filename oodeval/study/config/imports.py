"""User imports of a study config and the code digests that identify them.

``imports`` lists module names or paths of ``.py`` files (relative to the config file, stored
resolved, `resolved_import`): a file is loaded under its stem by `import_module_or_file`, in the
parent and in every worker, so no ``PYTHONPATH`` is needed. Each file's `code_digest` is kept in
the config's ``import_digests`` (`import_digests`), and configs compare such an import by file
name and digest, not by where it lies.

>>> is_path_import("my_algorithm.py"), is_path_import("my_package.algorithms")
(True, False)
"""

from __future__ import annotations

import importlib
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
    config's ``import_digests``), else read from the files; a missing file or a bad table is
    added to `problems`.

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
        if Path(where) == path and _LOADED_FILES.get(path) == digest:
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


def import_problem(name: str, key: str) -> str | None:
    """Why importing `name` (an entry of config key `key`) fails, in one line; None if it works.

    >>> import_problem("json", "imports") is None
    True
    """
    try:
        import_module_or_file(name)
    except ImportError as exc:
        return f"{key}: cannot import module {name!r} ({exc})"
    except Exception as exc:  # a user's module failing at import time is a config problem too
        line = str(exc).splitlines()[0] if str(exc) else ""
        return f"{key}: cannot import module {name!r} ({type(exc).__name__}: {line})"
    return None
