"""The public Python API (`oodeval.score`, `Scores`, `read_domainbed`, `load_study`, `analyze`):
lazy imports, the three input kinds, every table against plain numpy/scipy, bad input."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import oodeval
from oodeval import OodevalError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "results.csv"
SWEEP = ROOT / "examples" / "domainbed-sweep"
PUBLIC = [
    "OodevalError",
    "Scores",
    "__version__",
    "analyze",
    "get_measure",
    "load_study",
    "measures",
    "read_domainbed",
    "register_measure",
    "score",
]


def test_import_oodeval_loads_neither_pandas_torch_matplotlib_nor_scipy_stats():
    code = (
        "import sys, oodeval; "
        "print(sorted(m for m in ('pandas', 'torch', 'matplotlib', 'scipy.stats', 'scipy')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_public_names_resolve_lazily_to_the_one_implementation():
    from oodeval.results.domainbed import read_domainbed
    from oodeval.results.scoring import Scores, score
    from oodeval.study.analysis import analyze
    from oodeval.study.store import load_study

    assert sorted(oodeval.__all__) == sorted(PUBLIC) == dir(oodeval)
    assert oodeval.score is score and oodeval.Scores is Scores
    assert oodeval.read_domainbed is read_domainbed
    assert oodeval.load_study is load_study and oodeval.analyze is analyze
    assert oodeval.measures.worst_plus_gap([0.1, 0.2, 0.4]) == pytest.approx(0.4 + 0.3)
    assert oodeval.register_measure is oodeval.measures.register_measure
    assert oodeval.get_measure is oodeval.measures.get_measure
    assert issubclass(oodeval.OodevalError, ValueError)
    with pytest.raises(AttributeError, match="no attribute 'scroe'"):
        oodeval.scroe  # noqa: B018


def test_version_is_one_literal_in_the_package():
    text = (ROOT / "oodeval" / "__init__.py").read_text(encoding="utf-8")
    assert re.findall(r'^__version__ = "([^"]+)"$', text, flags=re.M) == [oodeval.__version__]


def test_results_package_exports_its_readers_and_scorer():
    import oodeval.results as results

    for name in (
        "score",
        "Scores",
        "score_results",
        "read_results",
        "results_from_frame",
        "LongResults",
        "read_domainbed",
        "read_sweep",
    ):
        assert name in results.__all__ and getattr(results, name) is not None


# ----------------------------------------------------------------------------- score


def _reference(frame: pd.DataFrame) -> pd.DataFrame:
    """average, worst+gap and ideal per (seed, algorithm) with plain pandas (Eq. 2, 6, 4)."""
    loo = frame[frame.split == "loo"].groupby(["seed", "algorithm"], sort=False)["error"]
    n = frame[frame.split == "loo"].environment.nunique()
    out = pd.DataFrame({"average": loo.mean(), "worst": loo.max(), "best": loo.min()})
    out["worst_plus_gap"] = out.worst + (out.worst - out.best) / (n - 2)
    out["ideal"] = frame[frame.split == "all"].groupby(["seed", "algorithm"])["error"].max()
    return out


def test_dataframe_path_and_rows_give_the_same_scores():
    frame = pd.read_csv(EXAMPLE)
    from_path = oodeval.score(EXAMPLE)
    from_str = oodeval.score(str(EXAMPLE))
    from_frame = oodeval.score(frame)
    from_rows = oodeval.score(frame.to_dict("records"))
    for other in (from_str, from_frame, from_rows):
        pd.testing.assert_frame_equal(other.measures, from_path.measures)
        pd.testing.assert_frame_equal(other.choice, from_path.choice)
        assert other.answer == from_path.answer


def test_measures_rankings_correlation_selection_degradation_match_plain_references():
    frame = pd.read_csv(EXAMPLE)
    s = oodeval.score(frame, measures=["average", "worst_plus_gap"])
    ref = _reference(frame.assign(seed=frame.seed.astype(str)))  # seeds are labels
    got = s.measures.set_index(["seed", "algorithm"])
    for m in ("average", "worst_plus_gap", "ideal"):
        assert got[m].to_numpy() == pytest.approx(ref.loc[got.index, m].to_numpy(), abs=1e-12)
    for seed, group in s.measures.groupby("seed"):
        ranks = s.rankings[s.rankings.seed == seed]
        for m in ("average", "worst_plus_gap", "ideal"):
            want = stats.rankdata(group[m].round(12), method="min").astype(int)
            assert ranks[m].tolist() == want.tolist()
            if m == "ideal":
                continue
            corr = s.correlation[(s.correlation.seed == seed) & (s.correlation.measure == m)]
            rho = stats.spearmanr(group[m], group["ideal"]).statistic
            assert corr.spearman.item() == pytest.approx(rho, abs=1e-12)
            chosen = group.algorithm.iloc[int(np.argmin(group[m]))]
            sel = s.choice[(s.choice.seed == seed) & (s.choice.measure == m)]
            assert sel.selected.item() == chosen
            best = group.ideal.min()
            deg = s.degradation[(s.degradation.seed == seed) & (s.degradation.measure == m)]
            ideal_of = group.set_index("algorithm").ideal[chosen]
            assert deg.degradation.item() == pytest.approx(abs(ideal_of - best), abs=1e-12)
    assert "ideal" not in set(s.degradation.measure)


def test_selection_is_a_deprecated_name_of_choice():
    s = oodeval.score(EXAMPLE)
    with pytest.warns(DeprecationWarning, match="use Scores.choice"):
        old = s.selection
    pd.testing.assert_frame_equal(old, s.choice)


def test_selections_is_a_deprecated_name_of_choices():
    """`Scores.choices` is the table; the retired `Scores.selections` still returns it for one
    release, with a FutureWarning that opens with ``warning:`` and names the new attribute."""
    s = oodeval.score(EXAMPLE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns about nothing
        table = s.choices
    with pytest.warns(FutureWarning) as caught:
        old = s.selections
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("warning: Scores.selections is deprecated, use Scores.choices")
    assert caught[0].filename == __file__  # points at the caller, not at oodeval
    pd.testing.assert_frame_equal(old, table)
    frame = pd.read_csv(EXAMPLE)
    loo = frame[frame.split == "loo"]
    first = loo[loo.seed == 0].groupby("algorithm").error.mean()
    picked = table[(table.seed.astype(str) == "0") & (table.measure == "average")]
    assert picked.selected.item() == first.idxmin()


def test_without_all_rows_correlation_and_degradation_are_empty_frames():
    frame = pd.read_csv(EXAMPLE)
    s = oodeval.score(frame[frame.split == "loo"])
    assert s.correlation.empty and list(s.correlation.columns) == [
        "seed",
        "measure",
        "spearman",
        "kendall",
    ]
    assert s.degradation.empty and "degradation" in s.degradation.columns
    assert "ideal" not in s.measures.columns and "ideal" not in s.answer


def test_bootstrap_and_percent_reach_the_tables():
    frame = pd.read_csv(EXAMPLE)
    pct = frame.assign(error=frame.error * 100)
    a = oodeval.score(pct, percent=True, bootstrap=200, seed=3)
    b = oodeval.score(frame, bootstrap=200, seed=3)
    pd.testing.assert_frame_equal(a.correlation, b.correlation)
    assert {"spearman_low", "spearman_high"} <= set(a.correlation.columns)


@pytest.mark.parametrize(
    ("results", "message"),
    [
        (42, "results is a int; give a pandas DataFrame"),
        ([], "results is an empty list"),
        ([{"algorithm": "A"}, "row"], "results row 2 is a str, not a dict"),
        ("no/such/file.csv", "results file not found: no/such/file.csv"),
        (pd.DataFrame({"algorithm": ["A"], "error": [0.1]}), "the DataFrame is missing column"),
        (
            pd.DataFrame(
                {"algorithm": ["A"], "environment": ["e"], "split": ["loo"], "error": [3.0]}
            ),
            "looks like percentages",
        ),
    ],
)
def test_bad_input_is_one_oodeval_error_line(results, message):
    with pytest.raises(OodevalError) as info:
        oodeval.score(results)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_measure_is_an_oodeval_error():
    with pytest.raises(OodevalError, match="wrost"):
        oodeval.score(EXAMPLE, measures=["wrost"])


# ----------------------------------------------------------------------------- DomainBed


def test_read_domainbed_feeds_score_and_the_measures_disagree():
    rows = oodeval.read_domainbed(SWEEP)
    assert list(rows.columns) == [
        "dataset",
        "selection",
        "algorithm",
        "environment",
        "seed",
        "split",
        "accuracy",
    ]
    assert len(rows) == 5 * 4 * 3 and set(rows.selection) == {"training_domain"}
    s = oodeval.score(rows)
    assert s.answer == (
        "worst+gap picks IRM; average picks Mixup (they disagree; on each measure's mean over 3 "
        "seeds)"
    )
    oracle = oodeval.read_domainbed(SWEEP, selection="oracle")
    assert set(oracle.selection) == {"test_domain"}


def test_read_domainbed_bad_input():
    with pytest.raises(OodevalError, match="unknown selection method 'best'"):
        oodeval.read_domainbed(SWEEP, selection="best")
    with pytest.raises(OodevalError, match="leave_one_domain_out selection has no data"):
        oodeval.read_domainbed(SWEEP, selection="lodo")
    with pytest.raises(OodevalError, match="dataset 'PACS' is not in the sweep; it holds VLCS"):
        oodeval.read_domainbed(SWEEP, dataset="PACS")
    with pytest.raises(OodevalError, match="sweep folder not found"):
        oodeval.read_domainbed(SWEEP / "nothing")


def test_bootstrap_without_an_ideal_measure_says_why_there_is_no_interval():
    s = oodeval.score(oodeval.read_domainbed(SWEEP), bootstrap=10)
    assert s.correlation.empty
    assert any("only 'loo' rows, so no interval is computed" in note for note in s.notes)
