"""Names users type: a measure's label (``worst+gap``, what every output prints) names it wherever
its name does (``--measures``, a study config's ``measures``, ``oodeval.score(measures=...)``), in
any case when that stands for one measure only, and an unknown name is answered with the closest
known one, as an unknown command is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oodeval
from oodeval.errors import OodevalError
from oodeval.measures import (
    REGISTRY,
    UnknownMeasure,
    check_measures,
    get_measure,
    register_measure,
    unregister_measure,
)
from oodeval.study import config_from_dict
from oodeval.study.config import ConfigError
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import fuzz_settings

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "examples" / "results.csv"
SYNTHETIC = {
    "name": "names-test",
    "backend": "oodeval.study.synthetic",
    "algorithms": ["ERM", "IRM"],
    "seeds": [0],
    "steps": 3,
    "scenarios": [{"family": "synthetic", "ratio": "3:1", "scale": 1}],
}
#: The LOO plain measures whose label differs from their name (the ones a user types wrongly).
LABELLED = {n: s.label for n, s in REGISTRY.items() if s.split == "loo" and s.label != n}


@pytest.mark.parametrize("name", sorted(LABELLED))
def test_every_label_and_its_other_cases_name_the_measure(name: str) -> None:
    assert {"worst_plus_gap", "worst_only", "gap_only", "scaled_worst"} <= set(LABELLED)
    label = LABELLED[name]
    for typed in (label, label.upper(), label.title(), f"  {label} ", name.upper()):
        assert get_measure(typed).name == name, typed
        assert check_measures([typed]) == [name], typed


def test_a_family_name_in_another_case_is_the_family() -> None:
    assert get_measure("CVaR:alpha=0.25").name == "cvar:alpha=0.25"
    assert check_measures(["Median", "WORST+GAP", "worst_plus_gap"]) == ["median", "worst_plus_gap"]


def _command_output(measures: str) -> str:
    argv = ["measures", str(RESULTS), "--measures", measures, "--format", "csv"]
    code, out, err = invoke(argv)
    assert code == 0, err
    return out


def test_the_cli_takes_labels_and_prints_what_it_prints_for_names() -> None:
    by_label = _command_output("worst+gap,worst only,Scaled Worst")
    assert by_label == _command_output("worst_plus_gap,worst_only,scaled_worst")
    assert "worst_plus_gap" in by_label and "worst+gap" not in by_label.splitlines()[0]


def test_a_config_takes_labels_and_stores_the_names() -> None:
    config = config_from_dict({**SYNTHETIC, "measures": ["worst+gap", "Gap Only", "average"]})
    assert config.measures == ("worst_plus_gap", "gap_only", "average")


def test_the_python_api_takes_labels_and_names_columns_by_name() -> None:
    by_label = oodeval.score(RESULTS, measures=["worst+gap", "worst only"])
    by_name = oodeval.score(RESULTS, measures=["worst_plus_gap", "worst_only"])
    assert list(by_label.measures.columns) == list(by_name.measures.columns)
    assert {"worst_plus_gap", "worst_only"} <= set(by_label.measures.columns)
    assert by_label.measures.equals(by_name.measures) and by_label.answer == by_name.answer


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [("worst+gp", "'worst+gap'"), ("wrost", "'worst'"), ("scaled_wrst", "'scaled_worst'")],
)
def test_an_unknown_measure_on_the_command_line_gets_a_did_you_mean(
    typed: str, suggested: str
) -> None:
    argv = ["measures", str(RESULTS), "--measures", typed]
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    assert f"did you mean {suggested}?" in err and f"unknown measure(s) {typed}" in err


def test_an_unknown_measure_gets_a_did_you_mean_in_python_and_in_a_config() -> None:
    with pytest.raises(OodevalError, match=r"did you mean 'worst only'\?$"):
        get_measure("worst onyl")
    with pytest.raises(OodevalError, match=r"did you mean 'cvar:alpha=0\.5'\?$"):
        get_measure("cvr:alpha=0.5")
    with pytest.raises(OodevalError, match=r"did you mean 'worst\+gap'\?$"):
        oodeval.score(RESULTS, measures=["worst+gp"])
    with pytest.raises(ConfigError) as info:
        config_from_dict({**SYNTHETIC, "measures": ["average", "worst+gp"]})
    assert info.value.problems[-1].endswith("; did you mean 'worst+gap'?")
    with pytest.raises(OodevalError) as nothing_close:
        check_measures(["zzzzqq"])
    assert "did you mean" not in str(nothing_close.value)


@pytest.fixture
def shouting() -> Iterator[None]:
    """A user's measure labelled "Worst": "worst" stays the built-in, "Worst" is the user's."""

    @register_measure("shouting_worst", label="Worst")
    def shouting_worst(errors: np.ndarray) -> np.ndarray:
        """The largest error, twice."""
        return 2 * np.max(errors, axis=-1)

    yield
    unregister_measure("shouting_worst")


@pytest.mark.usefixtures("shouting")
def test_an_exact_spelling_wins_and_an_ambiguous_case_is_refused() -> None:
    assert get_measure("worst").name == "worst"
    assert get_measure("Worst").name == "shouting_worst"
    with pytest.raises(OodevalError, match=r"'WORST' may stand for worst, shouting_worst; write"):
        get_measure("WORST")


@fuzz_settings(60)
@given(data=st.data())
def test_any_case_and_spacing_of_a_name_or_label_is_the_measure(data: st.DataObject) -> None:
    """Fuzz: a name or label with each letter's case flipped at random and spaces around (and
    doubled inside) still names its measure; any other text is an unknown measure or a measure."""
    name = data.draw(st.sampled_from(sorted(n for n, s in REGISTRY.items() if s.split == "loo")))
    text = data.draw(st.sampled_from([name, REGISTRY[name].label]))
    flips = data.draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    typed = "".join(c.upper() if f else c for c, f in zip(text, flips, strict=True))
    typed = data.draw(st.sampled_from(["", " ", "  "])) + typed.replace(" ", "  ")
    assert check_measures([typed]) == [name]
    other = data.draw(st.text(st.characters(codec="ascii", categories=["L", "Zs"]), max_size=12))
    try:
        found = get_measure(other)
    except UnknownMeasure as exc:
        assert str(exc).startswith(f"unknown measure {other!r}; choose from")
    else:
        assert " ".join(other.split()).lower() in {found.name, found.label.lower()}
