"""Adding a dataset family is one builder and one `FAMILIES` entry: a toy family registered here
is listed by `oodeval envs list`, and `oodeval envs show` takes its parameters as options typed
and described from its builder."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from typer.testing import CliRunner

from oodeval.cli.envs import envs_app
from oodeval.cli.main import app
from oodeval.environments import FAMILIES, build_scenario
from oodeval.environments.colored import build_colored
from oodeval.environments.families import Family
from oodeval.environments.spurious import SpuriousScenario

runner = CliRunner()


def build_toy(
    *,
    source: str = "digits",
    seed: int = 0,
    width: int = 2,
    tags: Sequence[str] = (),
    loud: bool = False,
) -> SpuriousScenario:
    """Colored environments with E_given {width / 10, 0.9}.

    Parameters
    ----------
    source : spec
        The images.
    seed : int
        The seed.
    width : int
        Tenths of the first given environment's e.
    tags : sequence of str
        Labels recorded in the params.
    loud : bool
        A switch recorded in the params.
    """
    sc = build_colored(source=source, seed=seed, given=[width / 10, 0.9])
    sc.name = f"toy/width={width}"
    sc.params.update(width=width, tags=list(tags), loud=loud)
    return sc


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FAMILIES, "toy", Family("toy", build_toy, "a toy family for tests"))


def test_a_registered_family_is_listed(toy: None) -> None:
    result = runner.invoke(app, ["envs", "list"])
    assert result.exit_code == 0, result.output
    assert "toy        a toy family for tests" in result.output
    assert "parameters: width=2, tags=(), loud=False" in result.output


def test_a_registered_family_takes_its_parameters_as_options(toy: None) -> None:
    args = ["show", "toy", "--source", "digits", "--width", "3", "--tags", "x", "--tags", "y"]
    result = runner.invoke(envs_app(), [*args, "--loud", "-f", "json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["scenario"] == "toy/width=3"
    assert list(shown["given"]) == ["e=0.30", "e=0.90"]
    assert {k: shown["params"][k] for k in ("width", "tags", "loud")} == {
        "width": 3,
        "tags": ["x", "y"],
        "loud": True,
    }
    help_text = runner.invoke(envs_app(), ["show", "--help"]).output
    assert "--width <int>" in help_text and "Tenths of the first given" in help_text
    assert "--loud / --no-loud" in help_text
    assert runner.invoke(envs_app(), ["show", "toy", "--width", "three"]).exit_code == 2
    assert build_scenario("toy", source="digits", width=4).given_names == ["e=0.40", "e=0.90"]


def test_every_built_in_parameter_is_an_option() -> None:
    help_text = runner.invoke(app, ["envs", "show", "--help"]).output
    for family in FAMILIES.values():
        for name in family.parameters():
            assert f"--{name.replace('_', '-')} " in help_text, (family.name, name)


def test_a_parameter_named_like_an_option_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def build_clash(*, source: str = "digits", seed: int = 0, output: str = "x") -> None:
        """A family whose parameter would hide --output."""

    monkeypatch.setitem(FAMILIES, "clash", Family("clash", build_clash, "clashes"))
    with pytest.raises(TypeError, match="family parameter 'output' of clash clashes"):
        envs_app()


def build_named(*, source: str = "digits", seed: int = 0, width: str = "wide") -> SpuriousScenario:
    """A family whose `width` is a word, where the toy family's is a number.

    Parameters
    ----------
    source : spec
        The images.
    seed : int
        The seed.
    width : str
        A word recorded in the name.
    """
    sc = build_colored(source=source, seed=seed, given=[0.1, 0.9])
    sc.name = f"named/width={width}"
    return sc


def test_a_parameter_families_type_differently_is_read_as_text_then_typed(
    toy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(FAMILIES, "named", Family("named", build_named, "width is a word"))
    args = ["--source", "digits", "--width", "3", "-f", "json"]
    shown = runner.invoke(envs_app(), ["show", "toy", *args])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["params"]["width"] == 3  # the number toy's builder takes
    named = runner.invoke(envs_app(), ["show", "named", *args])
    assert named.exit_code == 0 and json.loads(named.output)["scenario"] == "named/width=3"
    help_text = " ".join(runner.invoke(envs_app(), ["show", "--help"]).output.split())
    assert "--width <str>" in help_text and "--width <int>" not in help_text
    assert "toy: Tenths of the first given environment's e. named: A word recorded" in help_text
    bad = runner.invoke(envs_app(), ["show", "toy", "--source", "digits", "--width", "three"])
    assert bad.exit_code == 2 and "Invalid value for '--width'" in bad.output  # as an int option


def test_a_switch_in_one_family_and_a_value_in_another_is_refused(
    toy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def build_quiet(*, source: str = "digits", seed: int = 0, loud: str = "no") -> None:
        """A family whose `loud` takes a value, where the toy family's is a switch."""

    monkeypatch.setitem(FAMILIES, "quiet", Family("quiet", build_quiet, "loud takes a value"))
    with pytest.raises(TypeError, match="family parameter 'loud' is a switch in one family"):
        envs_app()
