"""One registry rule for measures, algorithms, image-source kinds and executors
(`oodeval._registry.Registry`): the same definition again (its module executed again after an
edit, a notebook cell run again) replaces itself; any other definition under a taken name is
refused in one line naming the name, what holds it and the fix. `register_measure` and
`register_algorithm` work bare (named after the function or class) and with a name."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from oodeval._registry import Registry
from oodeval.environments.source_kinds import (
    SourceKind,
    register_source_kind,
    unregister_source_kind,
)
from oodeval.environments.sources import SOURCE_KINDS
from oodeval.errors import OodevalError
from oodeval.measures import (
    FAMILIES,
    MEASURES,
    REGISTRY,
    domain_measures,
    get_measure,
    measure_names,
    register_measure,
    register_measure_family,
)
from oodeval.study.config import import_module_or_file
from oodeval.study.executors import EXECUTOR_CLASSES, make_executor, register_executor
from tests.requires import requires_module

ERRORS = np.array([[0.1, 0.4, 0.2], [0.3, 0.3, 0.5]])


def run_as_module(source: str, module: str) -> dict[str, Any]:
    """Execute `source` as module `module`, as Python does when the module runs (again, after
    an edit): what it defines are new objects with that module and their qualified names."""
    namespace: dict[str, Any] = {"__name__": module}
    exec(compile(textwrap.dedent(source), f"<{module}>", "exec", dont_inherit=True), namespace)
    return namespace


def refusal(kind: str, name: str, holder: str) -> str:
    article = "an" if kind[0] in "aeiou" else "a"
    return f"{article} {kind} named {name!r} is already registered by {holder}; choose another name"


# --- the type ------------------------------------------------------------------------------------


def test_a_registry_is_a_read_only_live_mapping_in_registration_order() -> None:
    toys: Registry[object] = Registry("toy")
    view = toys  # every list of names is read from the registry itself
    toys.add("b", int)
    toys.add("a", str)
    assert list(view) == ["b", "a"] and view["a"] is str and len(view) == 2 and "b" in view
    with pytest.raises(TypeError):
        toys["c"] = float  # type: ignore[index]
    toys.add("b", int)  # the same definition again keeps its place
    assert list(toys) == ["b", "a"]
    toys.remove("b")
    toys.remove("b")  # removing a free name does nothing
    assert list(toys) == ["a"] and toys.holder("b") is None


def test_a_taken_name_is_refused_in_one_line_naming_holder_and_fix() -> None:
    toys: Registry[object] = Registry("toy kind")
    toys.add("x", int)
    with pytest.raises(OodevalError) as info:
        toys.add("x", float)
    assert str(info.value) == refusal("toy kind", "x", "builtins.int")
    assert toys["x"] is int


def test_the_same_definition_is_its_module_and_qualified_name() -> None:
    first = run_as_module("def f(e):\n    return e\n", "reg_same")["f"]
    again = run_as_module("def f(e):\n    return 2 * e\n", "reg_same")["f"]
    elsewhere = run_as_module("def f(e):\n    return e\n", "reg_elsewhere")["f"]
    toys: Registry[Any] = Registry("toy")
    toys.add("f", first)
    assert toys.add("f", again) is again and toys["f"] is again
    with pytest.raises(OodevalError, match="toy named 'f' is already registered by reg_same.f;"):
        toys.add("f", elsewhere)
    entries: Registry[Any] = Registry("entry", definition=type)  # entries are instances
    entries.add("e", 1)
    entries.add("e", 2)  # another instance of the same class
    with pytest.raises(OodevalError, match="by builtins.int;"):
        entries.add("e", "text")


# --- measures ------------------------------------------------------------------------------------


def test_a_bare_register_measure_names_it_after_the_function() -> None:
    @register_measure
    def reg_second_worst(errors: np.ndarray) -> np.ndarray:
        """The second-largest error."""
        return np.sort(errors, axis=-1)[..., -2]

    spec = get_measure("reg_second_worst")
    assert spec.function is reg_second_worst and spec.label == "reg_second_worst"
    assert spec.description == "The second-largest error." and "reg_second_worst" in MEASURES
    assert domain_measures(ERRORS, ["reg_second_worst"])["reg_second_worst"].tolist() == [0.2, 0.3]


def test_a_named_register_measure_takes_its_options() -> None:
    @register_measure("reg_spread", label="spread", min_envs=2, description="max - min")
    def anything(errors: np.ndarray) -> np.ndarray:
        return errors.max(axis=-1) - errors.min(axis=-1)

    spec = get_measure("spread")
    assert (spec.name, spec.label, spec.min_envs, spec.description) == (
        "reg_spread",
        "spread",
        2,
        "max - min",
    )
    assert "anything" not in REGISTRY


def test_a_bare_measure_named_against_the_rules_is_refused_by_its_name() -> None:
    def RegMax(errors: np.ndarray) -> np.ndarray:  # noqa: N802 - the name under test
        return errors.max(axis=-1)

    with pytest.raises(OodevalError) as info:
        register_measure(RegMax)
    assert str(info.value) == (
        "measure name 'RegMax' must be lower-case letters, digits and _ (e.g. my_measure)"
    )
    assert "RegMax" not in REGISTRY


OTHER_MEASURES = """
import numpy as np

def reg_edited(errors):
    return np.max(errors, axis=-1)

def reg_edited_power(p):
    return lambda errors: errors.max(axis=-1)
"""

MEASURE_MODULE = """
import numpy as np
from oodeval.measures import register_measure, register_measure_family

@register_measure(label="{label}")
def reg_edited(errors):
    return np.max(errors, axis=-1) * {factor}

@register_measure_family("reg_edited_power", params={{"p": float}})
def reg_edited_power(p):
    return lambda errors: np.mean(errors ** p, axis=-1) * {factor}
"""


def test_a_measure_module_run_again_after_an_edit_replaces_its_measures() -> None:
    run_as_module(MEASURE_MODULE.format(label="max", factor=1), "reg_measures")
    assert get_measure("reg_edited_power:p=1").function(ERRORS).tolist() == pytest.approx(
        [0.7 / 3, 1.1 / 3], abs=1e-15
    )
    run_as_module(MEASURE_MODULE.format(label="max x2", factor=2), "reg_measures")
    assert get_measure("reg_edited").label == "max x2"
    assert domain_measures(ERRORS, ["reg_edited"])["reg_edited"].tolist() == [0.8, 1.0]
    # the family's members built before the edit are built again from the new factory
    assert get_measure("reg_edited_power:p=1").function(ERRORS).tolist() == pytest.approx(
        [1.4 / 3, 2.2 / 3], abs=1e-15
    )
    assert measure_names(families=False).count("reg_edited") == 1


def test_a_measure_name_another_definition_holds_is_refused() -> None:
    run_as_module(MEASURE_MODULE.format(label="max", factor=1), "reg_measures")
    other = run_as_module(OTHER_MEASURES, "reg_other_measures")
    with pytest.raises(OodevalError) as info:
        register_measure("reg_edited")(other["reg_edited"])
    assert str(info.value) == refusal("measure", "reg_edited", "reg_measures.reg_edited")
    # plain measures and families share one namespace, built-ins included
    with pytest.raises(OodevalError) as info:
        register_measure("cvar")(other["reg_edited"])
    cvar = FAMILIES["cvar"].factory
    assert str(info.value) == refusal("measure", "cvar", f"{cvar.__module__}.{cvar.__qualname__}")
    with pytest.raises(OodevalError, match="measure named 'average' is already registered by "):
        register_measure_family("average", params={"p": float})(other["reg_edited_power"])
    with pytest.raises(OodevalError, match="by reg_measures.reg_edited;"):  # same code elsewhere
        run_as_module(MEASURE_MODULE.format(label="max", factor=1), "reg_copied_measures")
    assert get_measure("reg_edited").function.__module__ == "reg_measures"


# --- algorithms ----------------------------------------------------------------------------------


@pytest.fixture
def algorithms() -> Iterator[Any]:
    """`oodeval.algorithms` (needs torch); the algorithms a test registers are removed after it."""
    requires_module("torch")
    import oodeval.algorithms as alg

    before = dict(alg.registry._REGISTRY)
    yield alg
    for name in set(alg.available()) - set(before):
        alg.registry._REGISTRY.remove(name)
    assert {n: alg.get_algorithm(n) for n in alg.available()} == before


ALGORITHM_MODULE = """
from oodeval.algorithms import HParam, register_algorithm
from oodeval.algorithms.erm import ERM

@register_algorithm
class RegEdited(ERM):
    HPARAMS = {{"reg_weight": HParam({weight}, lambda rng: 1.0, "a weight")}}

@register_algorithm("RegEditedNamed")
class RegEditedClass(ERM):
    pass
"""


def test_register_algorithm_works_bare_and_with_a_name(algorithms: Any) -> None:
    module = run_as_module(ALGORITHM_MODULE.format(weight=1.0), "reg_algorithms")
    assert algorithms.get_algorithm("RegEdited") is module["RegEdited"]
    assert algorithms.get_algorithm("RegEditedNamed") is module["RegEditedClass"]
    assert (module["RegEdited"].name, module["RegEditedClass"].name) == (
        "RegEdited",
        "RegEditedNamed",
    )
    assert algorithms.available()[-2:] == ["RegEdited", "RegEditedNamed"]


def test_an_algorithm_module_run_again_after_an_edit_replaces_its_classes(
    algorithms: Any,
) -> None:
    run_as_module(ALGORITHM_MODULE.format(weight=1.0), "reg_algorithms")
    order = algorithms.available()
    edited = run_as_module(ALGORITHM_MODULE.format(weight=2.0), "reg_algorithms")
    assert algorithms.get_algorithm("RegEdited") is edited["RegEdited"]
    assert algorithms.default_hparams("RegEdited")["reg_weight"] == 2.0
    assert algorithms.available() == order  # replaced in place


def test_an_edited_algorithm_file_imported_again_replaces_its_class(
    algorithms: Any, tmp_path: Path
) -> None:
    path = tmp_path / "reg_algorithm_file.py"
    try:
        path.write_text(ALGORITHM_MODULE.format(weight=1.0), encoding="utf-8")
        import_module_or_file(str(path))
        path.write_text(ALGORITHM_MODULE.format(weight=3.0), encoding="utf-8")
        import_module_or_file(str(path))  # as a worker or a later command does
        assert algorithms.default_hparams("RegEdited")["reg_weight"] == 3.0
    finally:
        sys.modules.pop("reg_algorithm_file", None)


def test_an_algorithm_name_another_class_holds_is_refused(algorithms: Any) -> None:
    run_as_module(ALGORITHM_MODULE.format(weight=1.0), "reg_algorithms")
    from oodeval.algorithms.erm import ERM

    class RegEdited(ERM):
        pass

    with pytest.raises(OodevalError) as info:
        algorithms.register_algorithm(RegEdited)
    assert str(info.value) == refusal("algorithm", "RegEdited", "reg_algorithms.RegEdited")
    with pytest.raises(OodevalError) as info:
        algorithms.register_algorithm("ERM")(RegEdited)
    assert str(info.value) == refusal("algorithm", "ERM", "oodeval.algorithms.erm.ERM")
    assert "name" not in vars(RegEdited)  # a refused class is left as it was
    assert algorithms.get_algorithm("RegEdited").__module__ == "reg_algorithms"


# --- image-source kinds --------------------------------------------------------------------------

KIND_MODULE = """
from oodeval.environments.source_kinds import SourceKind, register_source_kind

@register_source_kind
class RegKind(SourceKind):
    name = "reg-kind"
    summary = "{summary}"

    def load(self, root, *, size):
        raise NotImplementedError

    def files(self, root):
        yield from ()
"""


@pytest.fixture
def no_reg_kind() -> Iterator[None]:
    yield
    unregister_source_kind("reg-kind")


def test_a_source_kind_module_run_again_after_an_edit_replaces_its_kind(no_reg_kind) -> None:
    run_as_module(KIND_MODULE.format(summary="first"), "reg_kinds")
    order = list(SOURCE_KINDS)
    run_as_module(KIND_MODULE.format(summary="edited"), "reg_kinds")
    assert SOURCE_KINDS["reg-kind"].summary == "edited" and list(SOURCE_KINDS) == order


def test_a_source_kind_name_another_class_holds_is_refused(no_reg_kind) -> None:
    run_as_module(KIND_MODULE.format(summary="first"), "reg_kinds")

    class Other(SourceKind):
        name = "reg-kind"

        def load(self, root, *, size):  # pragma: no cover - never registered
            raise NotImplementedError

        def files(self, root):  # pragma: no cover - never registered
            yield from ()

    with pytest.raises(OodevalError) as info:
        register_source_kind(Other)
    assert str(info.value) == refusal("source kind", "reg-kind", "reg_kinds.RegKind")
    assert SOURCE_KINDS["reg-kind"].summary == "first"
    with pytest.raises(OodevalError, match="source kind named 'digits' is already registered by"):
        register_source_kind(type("Digits", (Other,), {"name": "digits"}))


# --- executors -----------------------------------------------------------------------------------

EXECUTOR_MODULE = """
from dataclasses import dataclass
from typing import ClassVar
from oodeval.study.executors import Executor, register_executor

@register_executor
@dataclass(frozen=True)
class RegExecutor(Executor):
    workers: int | None = {workers}
    name: ClassVar[str] = "reg-inline"

    def run(self, config, tasks, directory):
        yield from ()
"""


@pytest.fixture
def no_reg_executor() -> Iterator[None]:
    yield
    EXECUTOR_CLASSES.remove("reg-inline")


def test_an_executor_module_run_again_after_an_edit_replaces_its_class(no_reg_executor) -> None:
    run_as_module(EXECUTOR_MODULE.format(workers=1), "reg_executors")
    order = list(EXECUTOR_CLASSES)
    edited = run_as_module(EXECUTOR_MODULE.format(workers=2), "reg_executors")
    assert EXECUTOR_CLASSES["reg-inline"] is edited["RegExecutor"]
    assert make_executor("reg-inline").workers == 2 and list(EXECUTOR_CLASSES) == order


def test_an_executor_name_another_class_holds_is_refused(no_reg_executor) -> None:
    first = run_as_module(EXECUTOR_MODULE.format(workers=1), "reg_executors")["RegExecutor"]
    with pytest.raises(OodevalError) as info:  # the same code in another module
        run_as_module(EXECUTOR_MODULE.format(workers=1), "reg_other_executors")
    assert str(info.value) == refusal("executor", "reg-inline", "reg_executors.RegExecutor")
    assert EXECUTOR_CLASSES["reg-inline"] is first
    with pytest.raises(OodevalError) as info:
        register_executor(type("LocalAgain", (first,), {"name": "local"}))
    holder = EXECUTOR_CLASSES["local"]
    assert str(info.value) == refusal(
        "executor", "local", f"{holder.__module__}.{holder.__qualname__}"
    )
