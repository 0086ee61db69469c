"""The registry of environment families and `build_scenario`, the one way to build a scenario.

A new family is one module with a builder (keyword-only parameters ``source``, ``seed`` and its
own, each with a default and a numpy ``Parameters`` entry) and one `Family` entry in `FAMILIES`
below: `build_scenario`, study configs, ``oodeval envs`` (one option per parameter) and
``oodeval shift`` SPECs take it from there.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oodeval.environments.base import Scenario
from oodeval.environments.colored import build_colored
from oodeval.environments.corrupted import build_corrupted
from oodeval.environments.domains import build_domains
from oodeval.environments.lined import build_lined
from oodeval.environments.source_kinds import ImageSource
from oodeval.environments.srcmnist import build_cmnist, build_srcmnist
from oodeval.errors import OodevalError


@dataclass(frozen=True)
class Family:
    """A family of scenarios: its builder and a one-line description for `oodeval envs list`.

    The family's parameters are the builder's keyword-only arguments other than ``source`` and
    ``seed``: their defaults (`parameters`), type hints (`parameter_hints`) and the texts of the
    builder's numpy ``Parameters`` section (`parameter_docs`) are all that `build_scenario`, the
    study config and ``oodeval envs`` (one option per parameter) know of them.
    """

    name: str
    builder: Callable[..., Scenario]
    summary: str

    def parameters(self) -> dict[str, object]:
        """The builder's keyword parameters (other than source and seed) with their defaults.

        >>> FAMILIES["lined"].parameters()["ratio"]
        '4:1'
        """
        sig = inspect.signature(self.builder)
        return {
            n: p.default
            for n, p in sig.parameters.items()
            if n not in ("source", "seed") and p.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def parameter_hints(self) -> dict[str, Any]:
        """The type hint of each of `parameters`, resolved (``int | None``, ``Sequence[float]``).

        >>> FAMILIES["sr-cmnist"].parameter_hints()["scale"]
        <class 'int'>
        """
        hints = typing.get_type_hints(self.builder)
        return {name: hints.get(name, Any) for name in self.parameters()}

    def parameter_docs(self) -> dict[str, str]:
        """The description of each of `parameters` in the builder's numpy ``Parameters``
        section, on one line ("" when it has none). An entry "As in `Name`." (parameters
        shared with an object of the builder's module, documented there once) takes that
        object's description of the same parameter, following such entries `MAX_SHARED_HOPS`
        deep.

        >>> FAMILIES["sr-cmnist"].parameter_docs()["scale"]
        'Scale >= 1 multiplying both counts.'
        >>> FAMILIES["cmnist"].parameter_docs()["n_eval"]  # cmnist -> sr-cmnist -> SpuriousScenario
        'Images per evaluation environment (default: the whole held-out pool).'
        """
        docs = numpy_parameter_docs(inspect.getdoc(self.builder) or "")
        module = inspect.getmodule(self.builder)
        for name, text in docs.items():
            for _ in range(MAX_SHARED_HOPS):
                shared = _SHARED_DOC.fullmatch(text)
                if shared is None or not hasattr(module, shared[1]):
                    break
                owner = numpy_parameter_docs(inspect.getdoc(getattr(module, shared[1])) or "")
                if name not in owner:
                    break
                text = owner[name]
            docs[name] = text
        return {name: docs.get(name, "") for name in self.parameters()}


#: How many "As in `Name`." entries `Family.parameter_docs` follows in a row.
MAX_SHARED_HOPS = 4
_SHARED_DOC = re.compile(r"As in `(\w+)`\.")


def numpy_parameter_docs(doc: str) -> dict[str, str]:
    """{name: description} of the ``Parameters`` section of a numpy docstring, each description
    on one line; ``a, b : type`` documents both names.

    >>> numpy_parameter_docs("Parameters\\n----------\\na, b : int\\n    Two\\n    counts.\\n")
    {'a': 'Two counts.', 'b': 'Two counts.'}
    """
    lines = doc.splitlines()
    heads = [i for i, line in enumerate(lines[:-1]) if _is_heading(lines, i)]
    start = next((i + 2 for i in heads if lines[i].strip() == "Parameters"), None)
    if start is None:
        return {}
    end = next((i for i in heads if i >= start), len(lines))
    out: dict[str, list[str]] = {}
    names: list[str] = []
    for line in lines[start:end]:
        if line.strip().startswith(">>>"):
            break
        if line and not line[0].isspace():
            names = [n.strip() for n in line.split(" : ")[0].split(",") if n.strip()]
            for name in names:
                out[name] = []
        elif line.strip():
            for name in names:
                out[name].append(line.strip())
    return {name: " ".join(words) for name, words in out.items()}


def _is_heading(lines: list[str], i: int) -> bool:
    """Whether line `i` is a numpy section heading: a word underlined by dashes."""
    under = lines[i + 1].strip()
    return bool(lines[i].strip()) and len(under) >= 3 and set(under) == {"-"}


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "sr-cmnist",
            build_srcmnist,
            "SR-CMNIST: red/green digits, E_given from Ratio x Scale, 101 environments (Sec. 4.1)",
        ),
        Family("cmnist", build_cmnist, "CMNIST: E_given {0.1, 0.2, 0.9}, 101 evaluation envs"),
        Family(
            "colored",
            build_colored,
            "C-Cats&Dogs style: color tint vs binary label, 101 environments (Sec. 4.2.1)",
        ),
        Family(
            "lined",
            build_lined,
            "L-CIFAR10 style: class-colored line vs K-class label, 101 environments (Sec. 4.2.2)",
        ),
        Family(
            "corrupted",
            build_corrupted,
            "PACS/VLCS-corrupted style: K domains x (clean + 15 corruptions) (Sec. 4.3)",
        ),
        Family(
            "domains",
            build_domains,
            "NICO++ classic DG: E_given the given domains, E_all every domain (NICO++ Sec. 4.2)",
        ),
    )
}


def build_scenario(
    family: str, *, source: str | ImageSource = "digits", seed: int = 0, **params: object
) -> Scenario:
    """Build the scenario of `family` over `source` with family parameters `params`.

    >>> sc = build_scenario("sr-cmnist", source="digits", ratio="4:1", scale=2)
    >>> sc.name, len(sc.given_names), len(sc.all_names), sc.params["scale"]
    ('sr-cmnist/ratio=4:1/scale=2', 10, 101, 2)
    """
    fam = FAMILIES.get(str(family).lower())
    if fam is None:
        raise OodevalError(f"unknown dataset family {family!r}; use one of: {', '.join(FAMILIES)}")
    allowed = fam.parameters()
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise OodevalError(
            f"{fam.name} has no parameter {unknown[0]!r}; its parameters are: {', '.join(allowed)}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise OodevalError(f"seed must be a non-negative integer, got {seed!r}")
    return fam.builder(source=source, seed=seed, **params)
