"""The measure leaderboard (`oodeval.measures.meta`) against brute force and scipy,
and `oodeval study measures` on the stored quick study and on DomainBed sweeps."""

from __future__ import annotations

import io
import itertools
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.measures.meta._leaderboard import (
    head_to_head,
    leaderboard_cells,
    leaderboard_sentence,
    measure_leaderboard,
    measure_rankings,
    rho_slope,
    smallest_wilcoxon_p,
)
from tests.goldens.cases import quick_study
from tests.helpers.studies import finished_study

REPO = Path(__file__).resolve().parents[2]
MEASURES = ["average", "worst_plus_gap", "m_tied", "m_const"]


def _units(seed: int, n_scen: int = 4, n_seeds: int = 3, n_alg: int = 6) -> pd.DataFrame:
    """Random units: scores drawn on a coarse grid (so ties occur), a measure tied with
    average's ranks, and one constant in the first cell (undefined rho there)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s, e in itertools.product(range(n_scen), range(n_seeds)):
        for a in range(n_alg):
            rows.append(
                {
                    "scenario": f"s{s}",
                    "seed": e,
                    "algorithm": f"A{a}",
                    "n_given": 3 + s,
                    "ideal": rng.integers(0, 5) / 10,
                    "average": rng.integers(0, 8) / 10,
                    "worst_plus_gap": rng.integers(0, 8) / 10,
                }
            )
    frame = pd.DataFrame(rows)
    frame["m_tied"] = 2 * frame["average"] + 1  # same ranks as average
    frame["m_const"] = np.where((frame["scenario"] == "s0") & (frame["seed"] == 0), 0.5, 0)
    frame.loc[frame["scenario"] != "s0", "m_const"] = rng.random((frame["scenario"] != "s0").sum())
    return frame


def _pick(values: np.ndarray, names: list[str]) -> str:
    """argmin, ties (at 12 decimals) to the first name in sorted order."""
    return min((round(v, 12), name) for v, name in zip(values, names, strict=True))[1]


def _brute_cells(frame: pd.DataFrame, measure: str) -> pd.DataFrame:
    rows = []
    for (s, e), cell in frame.groupby(["scenario", "seed"], sort=False):
        x, ideal = cell[measure].to_numpy(), cell["ideal"].to_numpy()
        names = cell["algorithm"].tolist()
        constant = np.ptp(x) == 0 or np.ptp(ideal) == 0
        rho = np.nan if constant else stats.spearmanr(x, ideal).statistic
        tau = np.nan if constant else stats.kendalltau(x, ideal, variant="b").statistic

        chosen, best = _pick(x, names), _pick(ideal, names)
        deg = abs(ideal[names.index(best)] - ideal[names.index(chosen)])
        # the ideal's choice: any algorithm at the ideal's minimum (ties share it)
        hit = round(ideal[names.index(chosen)], 12) == round(ideal.min(), 12)
        rows.append((s, e, cell["n_given"].iloc[0], rho, tau, deg, float(hit)))
    return pd.DataFrame(rows, columns=["scenario", "seed", "n_given", "rho", "tau", "deg", "match"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cells_match_scipy_and_brute_force(seed: int) -> None:
    frame = _units(seed)
    cells = pd.DataFrame(leaderboard_cells(frame, MEASURES))
    for measure in MEASURES:
        got = cells[cells["measure"] == measure].reset_index(drop=True)
        ref = _brute_cells(frame, measure)
        assert got["scenario"].tolist() == ref["scenario"].tolist()
        assert got["n_given"].tolist() == ref["n_given"].tolist()
        # float64 rank arithmetic: equal to scipy's up to a few ulps
        np.testing.assert_allclose(got["spearman"], ref["rho"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(got["kendall"], ref["tau"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(got["degradation"], ref["deg"], rtol=0, atol=1e-15)
        assert got["ideal_choice"].tolist() == ref["match"].tolist()


def _brute_board(frame: pd.DataFrame, measure: str) -> dict:
    ref = _brute_cells(frame, measure)
    defined = ref[ref["rho"].notna()]
    fit = stats.linregress(defined["n_given"].astype(float), defined["rho"])
    return {
        "spearman_mean": defined["rho"].mean(),
        "kendall_mean": ref["tau"].dropna().mean(),
        "degradation_mean": ref["deg"].mean(),
        "ideal_choice_mean": ref["match"].mean(),
        "trend_slope": fit.slope,
        "n_cells": len(ref),
    }


@pytest.mark.parametrize("seed", [0, 3])
def test_point_estimates_match_brute_force(seed: int) -> None:
    frame = _units(seed)
    board = pd.DataFrame(measure_leaderboard(frame, MEASURES, n_resamples=0)).set_index("measure")
    for measure in MEASURES:
        ref = _brute_board(frame, measure)
        for key, value in ref.items():
            assert board.loc[measure, key] == pytest.approx(value, abs=1e-12), (measure, key)
        assert np.isnan(board.loc[measure, "spearman_low"])  # no draws, no interval
    # equal ranks in every cell: the same correlations, hence the same rank on the board
    assert board.loc["m_tied", "rank"] == board.loc["average", "rank"]
    assert board.loc["m_tied", "vs_average_ties"] == len(frame.groupby(["scenario", "seed"]))
    ranks = board["rank"].to_numpy()
    assert (np.diff(board["spearman_mean"].to_numpy()) <= 1e-15).all() and ranks[0] == 1


def test_bootstrap_intervals_match_a_loop_over_the_same_draws() -> None:
    frame = _units(5)
    n, seed = 300, 7
    board = pd.DataFrame(measure_leaderboard(frame, MEASURES, n_resamples=n, seed=seed))
    board = board.set_index("measure")
    ref = {m: _brute_cells(frame, m) for m in MEASURES}
    c = len(ref["average"])
    draws = np.random.default_rng(seed).integers(0, c, size=(n, c))
    for measure in MEASURES:
        r = ref[measure]
        rho, x = r["rho"].to_numpy(), r["n_given"].to_numpy(float)
        means, slopes = [], []
        for d in draws:
            ok = ~np.isnan(rho[d])
            means.append(rho[d][ok].mean() if ok.any() else np.nan)
            xs, ys = x[d][ok], rho[d][ok]
            slopes.append(np.polyfit(xs, ys, 1)[0] if len(set(xs)) > 1 else np.nan)
        for stat, values in (("spearman", means), ("trend", slopes)):
            v = np.array(values)
            lo, hi = np.quantile(v[~np.isnan(v)], [0.025, 0.975])
            # polyfit solves least squares differently: equal up to rounding of a few ulps
            assert board.loc[measure, f"{stat}_low"] == pytest.approx(lo, abs=1e-9)
            assert board.loc[measure, f"{stat}_high"] == pytest.approx(hi, abs=1e-9)
        deg = np.array([r["deg"].to_numpy()[d].mean() for d in draws])
        lo, hi = np.quantile(deg, [0.025, 0.975])
        assert board.loc[measure, "degradation_low"] == pytest.approx(lo, abs=1e-12)
        assert board.loc[measure, "degradation_high"] == pytest.approx(hi, abs=1e-12)
    again = pd.DataFrame(measure_leaderboard(frame, MEASURES, n_resamples=n, seed=seed))
    assert again.set_index("measure").equals(board)  # same seed, same numbers
    other = pd.DataFrame(measure_leaderboard(frame, MEASURES, n_resamples=n, seed=seed + 1))
    assert not other.set_index("measure")["spearman_low"].equals(board["spearman_low"])


def _exact_wilcoxon_p(d: np.ndarray) -> float:
    """Two-sided exact signed-rank p by enumerating the 2^n sign patterns (|d| distinct)."""
    ranks = stats.rankdata(np.abs(d))
    observed = ranks[d > 0].sum()
    totals = np.array(
        [
            sum(r for r, s in zip(ranks, signs, strict=True) if s)
            for signs in itertools.product([0, 1], repeat=len(d))
        ]
    )
    low, high = (totals <= observed).mean(), (totals >= observed).mean()
    return min(1.0, 2 * min(low, high))


@pytest.mark.parametrize("seed", range(6))
def test_head_to_head_counts_and_wilcoxon_match_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 4 + seed
    ref = rng.random(n)
    rho = ref + rng.normal(0.1, 0.3, n)
    rho[0] = ref[0]  # a tie: dropped from the test
    rho[1] = np.nan  # undefined: left out of everything
    duel = head_to_head(rho, ref)
    d = (rho - ref)[2:]
    assert duel["wins"] == (d > 0).sum() and duel["losses"] == (d < 0).sum()
    assert duel["ties"] == 1 and duel["n"] == n - 2
    assert duel["p"] == pytest.approx(_exact_wilcoxon_p(d), abs=1e-12)
    assert duel["p"] >= smallest_wilcoxon_p(duel["n"]) - 1e-12


def test_head_to_head_without_a_difference_has_no_p() -> None:
    duel = head_to_head(np.array([0.3, 0.1 + 0.2]), np.array([0.1 + 0.2, 0.3]))
    assert duel == {"wins": 0, "losses": 0, "ties": 2, "n": 0, "p": duel["p"]}
    assert np.isnan(duel["p"])


def test_trend_is_undefined_with_one_n() -> None:
    draws = np.array([[0, 1, 2]])
    assert np.isnan(rho_slope(np.array([[0.1, 0.5, 0.3]]), np.array([5, 5, 5]), draws))[0, 0]
    frame = _units(1, n_scen=1)
    board = pd.DataFrame(measure_leaderboard(frame, ["average"], n_resamples=50))
    assert np.isnan(board["trend_slope"]).all() and np.isnan(board["trend_low"]).all()


def test_sentence_calls_a_clear_lead_only_when_the_test_can_and_does() -> None:
    frame = _units(0, n_scen=4, n_seeds=3)
    frame["m_ideal"] = frame["ideal"]  # tracks the ideal exactly where it is not constant
    board = measure_leaderboard(frame, ["m_ideal", "average"], n_resamples=100)
    sentence = leaderboard_sentence(board)
    assert board["measure"][0] == "m_ideal" and board["spearman_mean"][0] == pytest.approx(1)
    assert "m_ideal tracks the ideal measure best" in sentence
    assert "a clear lead at the 0.05 level" in sentence, sentence
    small = measure_leaderboard(_units(0, n_scen=3, n_seeds=1), ["average"], n_resamples=0)
    assert "no test can reach p < 0.05" in leaderboard_sentence(small)


def test_rankings_match_scipy_min_ranks_and_refuse_undefined_scores() -> None:
    frame = _units(2)
    ranks = pd.DataFrame(measure_rankings(frame, ["average", "worst_plus_gap"]))
    for _, part in ranks.groupby(["scenario", "seed", "measure"]):
        ref = stats.rankdata(part["score"], method="min")
        assert part["rank"].tolist() == ref.tolist()
        assert part["choice"].tolist() == (ref == 1).tolist()
    frame.loc[0, "average"] = np.nan
    with pytest.raises(OodevalError, match="undefined score"):
        measure_rankings(frame, ["average"])


def test_draws_in_chunks_give_the_numbers_of_all_at_once(monkeypatch) -> None:
    """Memory stays bounded at MAX_RESAMPLES by resampling DRAWS_PER_CHUNK draws at a time;
    the chunks (7 draws, the last one partial) give the same board as one pass."""
    import oodeval.measures.meta._leaderboard as board_module

    frame = _units(3)
    whole = pd.DataFrame(measure_leaderboard(frame, MEASURES, n_resamples=300, seed=2))
    monkeypatch.setattr(board_module, "DRAWS_PER_CHUNK", 7)
    chunked = pd.DataFrame(measure_leaderboard(frame, MEASURES, n_resamples=300, seed=2))
    pd.testing.assert_frame_equal(chunked, whole)
    assert np.isfinite(whole["spearman_low"].to_numpy(float)).any()


def test_options_are_checked() -> None:
    from oodeval.measures.meta import MAX_RESAMPLES, bootstrap_correlation_ci

    frame = _units(0)
    with pytest.raises(OodevalError, match="n_resamples must be 0 .off. or a number"):
        measure_leaderboard(frame, ["average"], n_resamples=-1)  # the keyword, as Python says
    with pytest.raises(OodevalError, match="at most 100,000 .the cap., got 100,001"):
        measure_leaderboard(frame, ["average"], n_resamples=MAX_RESAMPLES + 1)
    with pytest.raises(OodevalError, match="n_resamples must be at most 100,000"):
        bootstrap_correlation_ci([1, 2, 3], [1, 3, 2], n_resamples=MAX_RESAMPLES + 1)
    with pytest.raises(OodevalError, match="no measures"):
        measure_leaderboard(frame, [])


# -------------------------------------------------------------------- the command

runner = CliRunner()


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return quick_study(tmp_path_factory.mktemp("board"))


def _run(args: list[str]) -> str:
    result = runner.invoke(app, ["study", "measures", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_quick_study_leaderboard_reads_and_writes_nothing(quick: Path) -> None:
    store = quick / "results.sqlite"

    def state() -> tuple:  # SQLite's own -wal/-shm side files aside (the store's business)
        files = sorted(f for f in os.listdir(quick) if not f.endswith(("-wal", "-shm")))
        return store.read_bytes(), os.stat(store).st_mtime_ns, files

    before = state()
    text = _run([str(quick), "--measures", "average,worst_plus_gap,cvar:alpha=0.5"])
    assert text.startswith("-------- Study quick\n")
    assert "tracks the ideal measure best" in text and "CVaR_0.5" in text
    assert state() == before


def test_csv_is_the_study_leaderboard_and_json_holds_every_table(quick: Path) -> None:
    from oodeval.study import load_study
    from oodeval.study.analysis import correlatable, study_unit_measures
    from oodeval.study.analysis.leaderboard import study_leaderboard

    names = ["average", "worst_plus_gap", "median"]
    got = pd.read_csv(io.StringIO(_run([str(quick), "--measures", ",".join(names), "-f", "csv"])))
    frame = correlatable(study_unit_measures(load_study(quick), names))
    ref = study_leaderboard(frame, names)
    assert got["study"].unique().tolist() == ["quick"]
    got["same_ranks"] = got["same_ranks"].astype(object).fillna("")  # CSV reads "" as NaN
    pd.testing.assert_frame_equal(got.drop(columns="study"), ref, check_dtype=False)
    payload = json.loads(_run([str(quick), "-f", "json", "--bootstrap", "0"]))
    assert set(payload) == {"leaderboard", "rankings", "sentences", "notes"}
    assert payload["rankings"] == [] and payload["leaderboard"][0]["rank"] == 1


#: A study of the synthetic backend named like the quick study, with as many cells (3 x 1).
OTHER_QUICK = """\
name = "quick"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "VREx", "MMD"]
seeds = [0]
steps = 5
measures = ["average", "worst_plus_gap", "worst_only", "gap_only"]
scenarios = [
    {family = "synthetic", ratio = "3:1", scale = 1},
    {family = "synthetic", ratio = "4:1", scale = 1},
    {family = "synthetic", ratio = "5:1", scale = 2},
]
"""


def test_two_studies_are_pooled(quick: Path, tmp_path: Path) -> None:
    other = finished_study(tmp_path, OTHER_QUICK)  # a copy of quick would be refused
    text = _run([str(quick), str(other), "--measures", "average,worst_plus_gap"])
    assert f"Pooled over 2 studies (quick, {other})" in text
    assert "Over 6 cells (6 scenarios x 1 seed)" in text
    board = pd.read_csv(io.StringIO(_run([str(quick), str(other), "-f", "csv"])))
    assert board["study"].unique().tolist() == ["quick", str(other), "pooled"]


def test_a_domainbed_sweep_gets_rankings_and_says_no_ideal_exists() -> None:
    sweep = REPO / "examples" / "domainbed-sweep"
    text = _run([str(sweep), "--measures", "average,worst_plus_gap"])
    assert "no ideal measure exists for a DomainBed sweep" in text
    assert "VLCS, training-domain validation set" in text
    result = runner.invoke(app, ["study", "measures", str(sweep), "-f", "csv"])
    ranks = pd.read_csv(io.StringIO(result.stdout))
    assert {"measure", "algorithm", "rank", "choice"} <= set(ranks.columns)
    assert "no ideal measure exists" in result.stderr


def test_csv_refuses_studies_and_sweeps_together(quick: Path) -> None:
    sweep = REPO / "examples" / "domainbed-sweep"
    result = runner.invoke(app, ["study", "measures", str(quick), str(sweep), "-f", "csv"])
    assert result.exit_code == 2 and "csv holds one table" in result.stderr
