"""The worst+gap paper's theory as tools, and its printed values beside a study's.

- Theorem 3.3 (Eq. 16): `scaled_worst` = (N + 1) / N * max_n R_n, a registered measure, checked
  against a hand computation and, on uniform errors, against Lemma 3.2's expectation;
- Theorem 3.4 (Eq. 39): `bounds.csv`, the share of units with ideal <= worst+gap (and <= worst),
  checked against a count by hand on the stored quick study;
- Table 5 aggregated as the paper's rows are (C-Cats&Dogs and L-CIFAR10: Ratio 4:1 only), Table 2
  and Section 6.5's counts, each beside the paper's printed values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oodeval.measures import MEASURES, domain_measures, get_measure, meta, scaled_worst
from oodeval.report.study_report import table_sections
from oodeval.study.analysis import (
    BOUNDS_SENTENCE,
    PAPER_SELECTION_COUNTS,
    PAPER_TABLE1,
    PAPER_TABLE2,
    PAPER_TABLE5,
    analyze,
    correlation_vs_paper,
    selection_vs_paper,
    table5_vs_paper,
    write_analysis,
)
from tests.goldens.cases import quick_study

# --- Theorem 3.3: the scaled worst ------------------------------------------------------------


def test_scaled_worst_is_eq16_by_hand() -> None:
    # N = 4 given environments: (4 + 1) / 4 * 0.4 = 0.5
    assert scaled_worst([0.1, 0.2, 0.4, 0.3]) == pytest.approx(0.5, abs=1e-15)
    assert scaled_worst([0.3]) == pytest.approx(0.6, abs=1e-15)  # N = 1: twice the worst
    assert scaled_worst([90.0, 60.0], accuracy=True, percent=True) == pytest.approx(0.6)
    rng = np.random.default_rng(3)
    for n in range(1, 9):
        errors = rng.uniform(size=(4, 3, n))
        got = scaled_worst(errors)
        assert got.shape == (4, 3)
        for i in range(4):
            for j in range(3):
                want = (n + 1) / n * max(errors[i, j].tolist())
                assert got[i, j] == pytest.approx(want, abs=1e-15)


def test_scaled_worst_is_registered_everywhere_measures_are() -> None:
    assert "scaled_worst" in MEASURES
    spec = get_measure("scaled_worst")
    assert spec.min_envs == 1 and spec.split == "loo" and "Eq. 16" in spec.description
    assert domain_measures([0.1, 0.2, 0.4, 0.3])["scaled_worst"] == pytest.approx(0.5)


def test_scaled_worst_matches_lemma_3_2_on_uniform_errors() -> None:
    # Lemma 3.2: the max of N i.i.d. U(a, b) has mean (a + bN)/(N + 1), variance (b - a)^2
    # N / ((N + 2)(N + 1)^2); so E[scaled_worst] = b + a / N, the b Theorem 3.3 estimates.
    a, b, draws = 0.2, 0.7, 200_000
    rng = np.random.default_rng(0)
    for n in (3, 6, 12):
        values = scaled_worst(rng.uniform(a, b, size=(draws, n)))
        sd_max = (b - a) * np.sqrt(n / ((n + 2) * (n + 1) ** 2))
        tolerance = 5 * (n + 1) / n * sd_max / np.sqrt(draws)
        assert values.mean() == pytest.approx(b + a / n, abs=tolerance)
        assert values.std() == pytest.approx((n + 1) / n * sd_max, rel=0.02)


# --- Theorem 3.4: the bound of Eq. 39 on a study ----------------------------------------------


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    study = quick_study(tmp_path_factory.mktemp("theory"))
    write_analysis(study)
    return study


def test_bounds_csv_counts_ideal_within_worst_plus_gap_by_hand(quick: Path) -> None:
    units = pd.read_csv(quick / "analysis" / "units.csv")
    bounds = pd.read_csv(quick / "analysis" / "bounds.csv")
    assert list(bounds.columns) == [
        "scenario",
        "family",
        "ratio",
        "scale",
        "n_given",
        "n_units",
        "within_worst_plus_gap",
        "share_within_worst_plus_gap",
        "within_worst",
        "share_within_worst",
    ]
    assert sorted(bounds["scenario"]) == sorted(units["scenario"].unique())
    for row in bounds.itertuples(index=False):
        mine = [u for u in units.itertuples(index=False) if u.scenario == row.scenario]
        wg = sum(1 for u in mine if u.ideal <= u.worst_plus_gap)
        w = sum(1 for u in mine if u.ideal <= u.worst)
        assert (row.n_units, row.within_worst_plus_gap, row.within_worst) == (len(mine), wg, w)
        assert row.share_within_worst_plus_gap == pytest.approx(wg / len(mine), abs=1e-6)
        assert row.share_within_worst == pytest.approx(w / len(mine), abs=1e-6)
        assert row.n_given == mine[0].n_given


def test_ideal_bounds_counts_a_violated_bound() -> None:
    units = {
        "scenario": np.array(["a", "a", "a", "b"]),
        "ideal": np.array([0.5, 0.7, 0.6, 0.2]),
        "worst_plus_gap": np.array([0.6, 0.6, 0.6, 0.1]),  # 0.6 <= 0.6 counts as within
        "worst": np.array([0.4, 0.5, 0.6, 0.3]),
    }
    got = meta.ideal_bounds(units)
    assert got["scenario"].tolist() == ["a", "b"]
    assert got["within_worst_plus_gap"].tolist() == [2, 0]
    assert got["share_within_worst_plus_gap"].tolist() == pytest.approx([2 / 3, 0.0])
    assert got["within_worst"].tolist() == [1, 1]


def test_the_analysis_and_the_report_say_what_the_bound_means(quick: Path) -> None:
    text = (quick / "analysis" / "analysis.md").read_text()
    assert "## Theorem 3.4 (Eq. 39): how often the ideal measure is within the bound" in text
    assert BOUNDS_SENTENCE in text
    titles = [t.title for t in table_sections(analyze(quick)).tables]
    assert "Theorem 3.4 (Eq. 39): how often the ideal measure is within the bound" in titles
    assert any(t.startswith("Table 5 aggregated as the paper's rows") for t in titles)
    assert "Section 6.5: the counts beside the paper's" in titles


def test_scaled_worst_is_in_the_quick_study_units_and_leaderboard(quick: Path) -> None:
    units = pd.read_csv(quick / "analysis" / "units.csv")
    want = (units["n_given"] + 1) / units["n_given"] * units["worst"]
    assert np.allclose(units["scaled_worst"], want, atol=1e-5)
    board = pd.read_csv(quick / "analysis" / "leaderboard.csv")
    assert "scaled_worst" in set(board["measure"])


# --- The paper's values beside ours -------------------------------------------------------------


def test_the_paper_table5_rows_are_aggregated_as_the_paper_prints_them() -> None:
    # Table 5 as printed: (worst only, gap only, worst+gap)
    assert PAPER_TABLE5["SR-CMNIST"] == {"rho": (0.749, 0.694, 0.720), "tau": (0.621, 0.573, 0.594)}
    assert PAPER_TABLE5["C-Cats&Dogs"]["rho"] == (0.556, 0.662, 0.641)
    assert PAPER_TABLE5["L-CIFAR10"]["tau"] == (0.337, 0.349, 0.470)
    # SR-CMNIST's worst+gap = the mean of Table 1's 12 scenarios; the other two = Table 2's 4:1
    for k, stat in ((0, "rho"), (2, "tau")):
        mean = np.mean([v[k] for v in PAPER_TABLE1.values()])
        assert PAPER_TABLE5["SR-CMNIST"][stat][2] == pytest.approx(mean, abs=5e-4)
        assert PAPER_TABLE5["C-Cats&Dogs"][stat][2] == PAPER_TABLE2[("colored", "4:1")][k]
        assert PAPER_TABLE5["L-CIFAR10"][stat][2] == PAPER_TABLE2[("lined", "4:1")][k]
    datasets = ("SR-CMNIST", "C-Cats&Dogs", "L-CIFAR10")
    for stat in ("rho", "tau"):
        for k in range(3):
            mean = np.mean([PAPER_TABLE5[d][stat][k] for d in datasets])
            assert PAPER_TABLE5["Average"][stat][k] == pytest.approx(mean, abs=5e-4)


def _table5(rows: list[tuple[str, str, str, float]]) -> pd.DataFrame:
    """A Table 5 (`ablation_correlations`' shape) with one value for every rho and tau."""
    records = []
    for scenario, family, ratio, value in rows:
        record = {"scenario": scenario, "family": family, "ratio": ratio}
        for m in ("worst_only", "gap_only", "worst_plus_gap"):
            record.update({f"rho_{m}": value, f"tau_{m}": value / 2})
        records.append(record)
    return pd.DataFrame.from_records(records)


def test_table5_vs_paper_keeps_ratio_4_1_for_colored_and_lined() -> None:
    table5 = _table5(
        [
            ("sr-cmnist/ratio=3:1/scale=1", "sr-cmnist", "3:1", 0.2),
            ("sr-cmnist/ratio=5:1/scale=2", "sr-cmnist", "5:1", 0.6),
            ("colored/ratio=3:2", "colored", "3:2", 0.1),
            ("colored/ratio=4:1", "colored", "4:1", 0.3),
            ("colored/ratio=5:0", "colored", "5:0", 0.9),
            ("lined/ratio=4:1", "lined", "4:1", 0.5),
            ("lined/ratio=5:0", "lined", "5:0", -0.5),
            ("colored (mean)", "colored", "", 0.4333),
        ]
    )
    got = table5_vs_paper(table5).set_index("dataset")
    assert list(got.index) == ["SR-CMNIST", "C-Cats&Dogs", "L-CIFAR10", "Average"]
    assert got.loc["SR-CMNIST", "rho_worst_plus_gap"] == pytest.approx(0.4)  # every scenario
    assert got.loc["C-Cats&Dogs", "rho_gap_only"] == pytest.approx(0.3)  # 4:1 only, not 0.433
    assert got.loc["L-CIFAR10", "tau_worst_only"] == pytest.approx(0.25)
    assert got.loc["Average", "rho_worst_only"] == pytest.approx((0.4 + 0.3 + 0.5) / 3)
    assert got["n_scenarios"].tolist() == [2, 1, 1, 4]
    assert "4:1" in got.loc["C-Cats&Dogs", "aggregation"]
    assert got.loc["C-Cats&Dogs", "paper_rho_gap_only"] == 0.662
    assert got.loc["Average", "paper_tau_worst_plus_gap"] == 0.507


def test_table5_vs_paper_without_a_4_1_scenario_has_no_row() -> None:
    got = table5_vs_paper(_table5([("colored/ratio=3:2", "colored", "3:2", 0.1)]))
    assert got.empty and "paper_rho_worst_plus_gap" in got.columns


def test_table1_vs_paper_sets_table2_beside_colored_and_lined() -> None:
    table1 = pd.DataFrame(
        {
            "scenario": ["colored/ratio=4:1", "lined/ratio=5:0", "cmnist"],
            "family": ["colored", "lined", "cmnist"],
            "ratio": ["4:1", "5:0", ""],
            "scale": pd.array([pd.NA, pd.NA, pd.NA], dtype="Int64"),
            **{
                f"{s}_{m}_mean": [0.1, 0.2, 0.3]
                for s in ("rho", "tau")
                for m in ("worst_plus_gap", "average")
            },
        }
    )
    got = correlation_vs_paper(table1)
    assert got["scenario"].tolist() == ["colored/ratio=4:1", "lined/ratio=5:0"]
    assert got["paper_table"].tolist() == ["Table 2", "Table 2"]
    # Table 2 as printed: C-Cats&Dogs 4:1 average rho -0.549; L-CIFAR10 5:0 worst+gap tau 0.641
    assert got["paper_rho_average"].tolist()[0] == -0.549
    assert got["paper_tau_worst_plus_gap"].tolist()[1] == 0.641


def test_selection_counts_beside_section_6_5_count_sr_cmnist_only() -> None:
    # Section 6.5: worst+gap = ideal in 25 of 36 and 9 of 12, average in 9 of 36 and 1 of 12
    assert PAPER_SELECTION_COUNTS == {"worst_plus_gap": (25, 36, 9, 12), "average": (9, 36, 1, 12)}
    selections = pd.DataFrame(
        {
            "family": ["sr-cmnist"] * 6 + ["colored"] * 2,
            "seed": [0, 1, "mean", 0, 1, "mean", 0, "mean"],
            "measure": ["worst_plus_gap"] * 3 + ["average"] * 3 + ["worst_plus_gap"] * 2,
            "matches_ideal": [True, False, True, False, False, True, True, True],
        }
    )
    got = selection_vs_paper(selections).set_index("measure")
    assert got.loc["worst_plus_gap", ["per_seed_matches", "per_seed_total"]].tolist() == [1, 2]
    assert got.loc["worst_plus_gap", "seed_average_matches"] == 1
    assert got.loc["average", ["per_seed_matches", "seed_average_matches"]].tolist() == [0, 1]
    paper = ["paper_per_seed_matches", "paper_per_seed_total"]
    assert got.loc["worst_plus_gap", paper].tolist() == [25, 36]
    assert got.loc["average", "paper_seed_average_matches"] == 1


def test_analyze_returns_the_paper_tables(quick: Path) -> None:
    results = analyze(quick)
    for name in ("table5_vs_paper", "selection_vs_paper", "bounds"):
        assert name in results and len(results[name]) > 0
    assert (quick / "analysis" / "selection_vs_paper.csv").is_file()
