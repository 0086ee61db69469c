"""Hostile inputs on identity, versions and the Python API's checks.

- A study given twice under another name (a symbolic link, a hard link to its store, ``./s``
  for ``s``, a byte-identical copy, a study merged from it) is refused by ``study measures``
  and ``study merge`` in one line naming both, or left out with a note under
  ``--drop-duplicates``: pooling it would count every unit twice.
- A store written by a newer schema than this oodeval knows is refused by every command that
  opens one, naming both versions, and nothing is written.
- `oodeval.score` checks what ``oodeval measures`` checks: pandas nullable columns with
  ``pd.NA``, seeds in [0, 2**32), resample counts up to the CLI's cap, giving `OodevalError`,
  never a numpy or pandas exception.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oodeval
from oodeval.errors import OodevalError
from oodeval.limits import MAX_RESAMPLES, SEED_LIMIT
from oodeval.study.store import SCHEMA_VERSION
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import fuzz_settings
from tests.helpers.studies import finished_study

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "examples" / "results.csv"

STUDY = """\
name = "twice"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "VREx", "MMD"]
seeds = [0, 1]
steps = 5
measures = ["average", "worst_plus_gap", "worst_only", "gap_only"]
[[scenarios]]
family = "synthetic"
ratio = "3:1"
scale = 1
"""


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished synthetic study, copied by each test that changes anything around it."""
    return finished_study(tmp_path_factory.mktemp("stored"), STUDY)


@pytest.fixture
def study(stored: Path, tmp_path: Path) -> Path:
    """A private copy of the finished study, as ``tmp_path/s``."""
    shutil.copytree(stored, tmp_path / "s")
    return tmp_path / "s"


def refused(argv: list[str], *needles: str) -> str:
    """Run `argv`; assert the bad-input contract and that the line holds every needle."""
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    for needle in needles:
        assert needle in err, err
    return err


# --------------------------------------------------------------------------- the same store


def _aliases(study: Path, kind: str) -> Path:
    """Another folder that names the same store as `study`, made the way `kind` says."""
    other = study.parent / f"alias-{kind}"
    if kind == "symlink":
        other.symlink_to(study, target_is_directory=True)
    elif kind == "hardlink":
        other.mkdir()
        os.link(study / "results.sqlite", other / "results.sqlite")
    elif kind == "copy":
        shutil.copytree(study, other)
    else:  # a study merged from it holds its units exactly as stored
        code, out, err = invoke(
            ["study", "merge", str(study), "--out", str(other), "--no-progress"]
        )
        assert code == 0, out + err
    return other


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "copy", "merged"])
def test_study_measures_refuses_a_study_given_twice_under_another_name(
    study: Path, kind: str
) -> None:
    other = _aliases(study, kind)
    argv = ["study", "measures", str(study), str(other), "--bootstrap", "0"]
    refused(argv, str(study), str(other), "counted twice", "--drop-duplicates")


def test_study_measures_refuses_dot_slash_spelling_of_the_same_folder(
    study: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(study.parent)
    refused(["study", "measures", "s", "./s", "--bootstrap", "0"], "s is given twice")


@pytest.mark.parametrize("kind", ["symlink", "copy"])
def test_drop_duplicates_leaves_the_repeat_out_with_a_note(study: Path, kind: str) -> None:
    other = _aliases(study, kind)
    code, once, _ = invoke(["study", "measures", str(study), "--bootstrap", "0", "-f", "csv"])
    assert code == 0
    argv = ["study", "measures", str(study), str(other), "--bootstrap", "0", "-f", "csv"]
    code, out, err = invoke([*argv, "--drop-duplicates"])
    assert code == 0, err
    assert out == once  # the same leaderboard as the study alone: nothing pooled twice
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and str(other) in notes[0] and str(study) in notes[0], err


def test_a_study_sharing_units_is_refused_even_with_drop_duplicates(
    study: Path, tmp_path: Path
) -> None:
    """A study merged from `study` and another one shares `study`'s units without being a
    copy: pooling would count the shared cells twice, and merging is the way out."""
    (tmp_path / "x").mkdir()
    extra = finished_study(tmp_path / "x", STUDY.replace('"MMD"]', '"MMD", "CORAL"]'))
    merged = tmp_path / "merged"
    code, out, err = invoke(
        ["study", "merge", str(study), str(extra), "--out", str(merged), "--no-progress"]
    )
    assert code == 0, out + err
    argv = ["study", "measures", str(study), str(merged), "--bootstrap", "0"]
    refused([*argv, "--drop-duplicates"], "shares 8 stored unit(s)", "oodeval study merge")


@pytest.mark.parametrize("kind", ["hardlink", "copy"])
def test_study_merge_refuses_an_input_that_is_the_same_store(
    study: Path, tmp_path: Path, kind: str
) -> None:
    other = _aliases(study, kind)
    out = tmp_path / "c"
    refused(
        ["study", "merge", str(study), str(other), "--out", str(out), "--no-progress"],
        str(study),
        str(other),
    )
    assert not out.exists()


def test_study_merge_drop_duplicates_copies_the_first_once(study: Path, tmp_path: Path) -> None:
    other = _aliases(study, "copy")
    argv = ["study", "merge", str(study), str(other), "--out", str(tmp_path / "c")]
    code, out, err = invoke([*argv, "--no-progress", "--drop-duplicates"])
    assert code == 0, err
    assert f"8 units copied (8 from {study})" in out
    assert f"note: {other} left out" in err


def test_study_merge_refuses_an_out_that_is_an_input_by_a_hard_link(
    study: Path, tmp_path: Path
) -> None:
    other = _aliases(study, "hardlink")
    before = (study / "results.sqlite").read_bytes()
    refused(
        ["study", "merge", str(study), "--out", str(other), "--no-progress"],
        f"{other}/results.sqlite is the same file as the study store",
    )
    assert (study / "results.sqlite").read_bytes() == before


# ---------------------------------------------------------------------------- store versions


def _set_schema(study: Path, value: str) -> bytes:
    conn = sqlite3.connect(study / "results.sqlite")
    try:
        with conn:
            conn.execute("UPDATE study SET value = ? WHERE key = 'schema'", (value,))
    finally:
        conn.close()
    return (study / "results.sqlite").read_bytes()


NEWER = str(int(SCHEMA_VERSION) + 1)

#: Every command that opens a store: `{s}` is the study, `{t}` a fresh folder.
OPENERS = {
    "status": ["study", "status", "{s}"],
    "analyze": ["study", "analyze", "{s}"],
    "verify": ["study", "verify", "{s}"],
    "measures": ["study", "measures", "{s}", "--bootstrap", "0"],
    "merge": ["study", "merge", "{s}", "--out", "{t}/m", "--no-progress"],
    "merge into": ["study", "merge", "{t}/other", "--out", "{s}", "--no-progress"],
    "run": ["study", "run", "{t}/study.toml", "--out", "{s}", "--no-progress", "--no-report"],
    "report": ["report", "{s}", "--out", "{t}/r.html"],
}


@pytest.mark.parametrize("command", sorted(OPENERS))
def test_a_store_of_a_newer_schema_is_refused_by_every_command(
    stored: Path, study: Path, tmp_path: Path, command: str
) -> None:
    (tmp_path / "study.toml").write_text(STUDY.replace('"MMD"]', '"MMD", "CORAL"]'))
    shutil.copytree(stored, tmp_path / "other")
    before = _set_schema(study, NEWER)
    argv = [a.format(s=study, t=tmp_path) for a in OPENERS[command]]
    refused(argv, f"store schema {NEWER}", f"reads schema {SCHEMA_VERSION}", "upgrade oodeval")
    assert (study / "results.sqlite").read_bytes() == before  # nothing written, not migrated
    assert not any(p.exists() for p in (study / "analysis", tmp_path / "m", tmp_path / "r.html"))


def test_a_schema_that_is_no_version_number_is_damage(study: Path) -> None:
    _set_schema(study, "3; DROP")
    code, out, err = invoke(["study", "verify", str(study)])
    assert code == 1 and "verdict: DAMAGED" in out and "no version number" in out, out + err
    refused(["study", "status", str(study)], "no version number")


# ----------------------------------------------------------------- the Python API's checks


def _with_na(dtype: str, column: str) -> pd.DataFrame:
    frame = pd.read_csv(RESULTS)
    values = frame[column] > 0 if dtype == "boolean" else frame[column]
    frame[column] = values.astype(dtype)
    frame.loc[3, column] = pd.NA
    return frame


@pytest.mark.parametrize(
    ("column", "dtype"),
    [
        ("error", "Float64"),
        ("environment", "Float64"),
        ("seed", "Int64"),
        ("seed", "UInt8"),
        ("seed", "boolean"),
    ],
)
def test_score_refuses_na_in_a_nullable_column_as_the_cli_does(column: str, dtype: str) -> None:
    with pytest.raises(OodevalError, match=f"row 4: {column} is empty or missing"):
        oodeval.score(_with_na(dtype, column))


@pytest.mark.parametrize(
    "keywords",
    [
        {"seed": -1, "bootstrap": 10},  # numpy's ValueError before
        {"seed": SEED_LIMIT},  # the CLI refuses it
        {"seed": 1.5},
        {"seed": "1"},
        {"bootstrap": -1},  # no intervals, silently, before
        {"bootstrap": True},
    ],
    ids=repr,
)
def test_score_refuses_keywords_out_of_the_clis_range(keywords: dict) -> None:
    with pytest.raises(OodevalError) as caught:
        oodeval.score(RESULTS, **keywords)
    assert type(caught.value) is OodevalError


def test_score_and_the_cli_refuse_the_same_resample_count_with_the_same_line() -> None:
    """The same line, naming the option as each caller sets it (keyword, flag)."""
    count = MAX_RESAMPLES + 1
    code, out, err = invoke(["measures", str(RESULTS), "--bootstrap", str(count)])
    assert_refused(code, out, err, ["measures"])
    with pytest.raises(OodevalError) as caught:
        oodeval.score(RESULTS, bootstrap=count)
    assert str(caught.value).startswith("bootstrap must be at most")
    assert err.strip() == f"error: --{caught.value}"


_A, _B, _C = [0.1, 0.3, 0.2, 0.5], [0.2, 0.25, 0.3, 0.6], [0.15, 0.2, 0.35, 0.4]
_UNITS = {
    "scenario": np.array(["s"] * 4, object),
    "seed": np.zeros(4, int),
    "algorithm": np.arange(4),
    "average": np.array(_A),
    "worst_plus_gap": np.array(_B),
    "ideal": np.array(_C),
    "n_given": np.full(4, 3),
}

#: Calls of `oodeval.measures` with a keyword out of its range, each a numpy or Python
#: exception (or a silent run) before: name -> call.
MEASURE_CALLS = {
    "bootstrap_correlation_ci seed=-1": lambda m: m.bootstrap_correlation_ci(_A, _B, seed=-1),
    "paired_spearman_ci seed=2**32": lambda m: m.paired_spearman_ci(_A, _B, _C, seed=SEED_LIMIT),
    "ideal_correlations bootstrap=-1": lambda m: m.ideal_correlations(
        _UNITS, ["average"], bootstrap=-1
    ),
    "ideal_correlations confidence=None": lambda m: m.ideal_correlations(
        _UNITS, ["average"], bootstrap=5, confidence=None
    ),
    "correlation_verdicts bootstrap_seed=-1": lambda m: m.correlation_verdicts(
        _UNITS, n_resamples=5, bootstrap_seed=-1
    ),
    "correlation_verdicts min_algorithms=None": lambda m: m.correlation_verdicts(
        _UNITS, n_resamples=5, min_algorithms=None
    ),
    "verdict_sentence confidence='x'": lambda m: m.verdict_sentence(
        m.correlation_verdicts(_UNITS, n_resamples=5), confidence="x"
    ),
    "mean_std ddof='1'": lambda m: m.mean_std(_A, ddof="1"),
    "spearman_critical_value alpha=None": lambda m: m.spearman_critical_value(10, None),
    "interval_warning nan": lambda m: m.interval_warning(float("nan")),
    "undefined_measures n_envs=None": lambda m: m.undefined_measures(["average"], None),
    "tracks_ideal rho=None": lambda m: m.tracks_ideal(None, 0.1),
}


@pytest.mark.parametrize("call", sorted(MEASURE_CALLS))
def test_the_measures_functions_refuse_keywords_out_of_range_as_oodeval_errors(call: str) -> None:
    with pytest.raises(OodevalError) as caught:
        MEASURE_CALLS[call](oodeval.measures)
    assert type(caught.value) is OodevalError and "\n" not in str(caught.value)


NULLABLE = ["Float64", "Int64", "UInt16", "boolean", "string[python]", "category", "object"]
KEYWORD_VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.sampled_from([0, 1, 3, SEED_LIMIT - 1, SEED_LIMIT, MAX_RESAMPLES, MAX_RESAMPLES + 1]),
)


@fuzz_settings(60)
@given(
    column=st.sampled_from(["algorithm", "environment", "split", "seed", "error"]),
    dtype=st.sampled_from(NULLABLE),
    missing=st.lists(st.integers(0, 79), max_size=3),
    keyword=st.sampled_from(["seed", "bootstrap", "percent", None]),
    value=KEYWORD_VALUES,
)
def test_score_gives_an_answer_or_oodeval_error_on_nullable_dtypes_and_any_keyword(
    column: str, dtype: str, missing: list[int], keyword: str | None, value: object
) -> None:
    frame = pd.read_csv(RESULTS)
    try:
        cells = frame[column] > 0.5 if dtype == "boolean" else frame[column]
        frame[column] = cells.astype(dtype)
    except (TypeError, ValueError):  # a text column has no Float64 form: not the case here
        return
    for row in missing:
        frame.loc[row, column] = pd.NA if dtype != "category" else np.nan
    keywords = {} if keyword is None else {keyword: value}
    if keyword == "bootstrap" and isinstance(value, int) and value > 20:
        keywords[keyword] = value if value > MAX_RESAMPLES else 20  # refused, or quick
    try:
        oodeval.score(frame, **keywords)
    except OodevalError as exc:
        assert type(exc) is OodevalError and "\n" not in str(exc)


# ------------------------------------------------------------------------ openworld class ids


@pytest.mark.parametrize("ids", ["²", "0,¹", "٣"])
def test_base_classes_take_ascii_digits_only(ids: str) -> None:
    argv = ["openworld", "score", str(ROOT / "examples" / "openworld_predictions.csv")]
    refused([*argv, "--base-classes", ids], "--base-classes must list class ids")
