"""The base:new ratios of the OpenworldAUC paper: Table 3's Fwd and Bwd, Tables 11-12's sweep."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oodeval.openworld.base_new import RATIO_PRESETS, parse_ratio, resample_to_ratio

#: Table 3's caption (App. C.2 says the same: "Forward (Fwd) means base domain number is 5 times
#: the new domain number, while Backward (Bwd) means the opposite").
TABLE_3_CAPTION = (
    "Fwd means base domain number is 5x larger than new domain, and Bwd means the opposite."
)


def test_fwd_has_five_times_more_base_samples_and_bwd_five_times_more_new_ones():
    assert "base domain number is 5x larger than new domain" in TABLE_3_CAPTION
    labels = np.repeat(np.arange(4), 60)  # base classes 0, 1; new classes 2, 3
    base = [0, 1]
    fwd = np.isin(labels[resample_to_ratio(labels, base, "Fwd", seed=0)], base)
    assert fwd.sum() == 5 * (~fwd).sum() == 120
    bwd = np.isin(labels[resample_to_ratio(labels, base, "Bwd", seed=0)], base)
    assert (~bwd).sum() == 5 * bwd.sum() == 120
    assert parse_ratio("Fwd") == parse_ratio("fwd") == (5.0, 1.0) == RATIO_PRESETS["fwd"]
    assert parse_ratio("BWD") == (1.0, 5.0) == RATIO_PRESETS["bwd"]


@pytest.mark.parametrize(("name", "base_new"), [("Fwd", "5:1"), ("Bwd", "1:5")])
def test_fwd_and_bwd_are_the_base_new_ratios_of_table_3(name, base_new):
    assert parse_ratio(name) == parse_ratio(base_new)


# --------------------------------------------------------------------------------------------
# Tables 11-12: the ten new/base ratios, and each metric's mean and variance (ddof = 1) over them
# --------------------------------------------------------------------------------------------

#: The paper's new/base ratios, in its order (first column of Tables 11 and 12).
TABLE_RATIOS = [10, 5, 3, 2, 1, 0.7, 0.5, 0.3, 0.2, 0.1]
COLUMNS = ["base_acc", "new_acc", "hm", "auroc", "overall_acc", "openworld_auc"]
#: Table 11 (TCP on DTD): BaseAcc, NewAcc, HM, AUROC, OverallAcc, OpenworldAUC per ratio, in %,
#: then its printed Mean and Variance rows.
TABLE_11 = [
    [83.06, 55.80, 66.75, 80.42, 40.94, 38.62],
    [81.43, 55.80, 66.22, 78.61, 43.72, 37.75],
    [81.09, 55.80, 66.11, 78.84, 45.45, 37.85],
    [82.31, 55.80, 66.51, 78.62, 49.76, 38.24],
    [81.85, 55.80, 66.36, 78.47, 54.61, 37.92],
    [81.85, 55.72, 66.30, 78.03, 57.40, 37.62],
    [81.85, 55.46, 66.12, 78.47, 59.77, 37.86],
    [81.85, 53.04, 64.37, 78.90, 63.33, 36.21],
    [81.85, 56.02, 66.52, 78.68, 64.94, 38.18],
    [81.85, 52.46, 63.94, 77.69, 67.74, 35.43],
]
TABLE_11_MEAN = [81.90, 55.17, 65.92, 78.67, 54.77, 37.57]
TABLE_11_VARIANCE = [0.27, 1.66, 0.92, 0.51, 89.13, 0.96]
#: Table 12 (TCP on Flowers102), the same layout.
TABLE_12 = [
    [96.15, 75.76, 84.75, 92.84, 72.77, 67.78],
    [97.47, 75.76, 85.25, 94.00, 74.25, 69.34],
    [96.17, 75.76, 84.75, 93.53, 75.18, 68.39],
    [97.67, 75.76, 85.33, 94.40, 77.59, 69.67],
    [97.19, 75.76, 85.15, 94.05, 80.97, 69.19],
    [97.19, 75.86, 85.21, 94.09, 83.16, 69.34],
    [97.19, 75.47, 84.96, 94.17, 84.81, 69.01],
    [97.19, 76.07, 85.34, 94.67, 87.71, 69.97],
    [97.19, 76.26, 85.46, 94.39, 89.31, 70.08],
    [97.19, 75.52, 85.00, 94.78, 91.33, 69.59],
]
TABLE_12_MEAN = [97.06, 75.80, 85.12, 94.09, 81.71, 69.24]
TABLE_12_VARIANCE = [0.25, 0.05, 0.06, 0.32, 43.75, 0.50]
#: Half a unit of the tables' last printed digit: every printed value is within it of the true one.
HALF_UNIT = 0.005


def test_the_default_ratios_are_the_ten_new_base_ratios_of_tables_11_and_12():
    from oodeval.openworld.base_new import DEFAULT_RATIOS, PAPER_RATIOS, new_per_base

    assert DEFAULT_RATIOS == PAPER_RATIOS
    assert [new_per_base(r) for r in PAPER_RATIOS] == pytest.approx(TABLE_RATIOS, rel=1e-15)
    # The paper's ratio is new/base: 10 is ten new samples per base sample (base:new 1:10).
    assert parse_ratio(PAPER_RATIOS[0]) == (1.0, 10.0) and parse_ratio(PAPER_RATIOS[-1]) == (10, 1)


@pytest.mark.parametrize(
    ("table", "mean", "variance"),
    [(TABLE_11, TABLE_11_MEAN, TABLE_11_VARIANCE), (TABLE_12, TABLE_12_MEAN, TABLE_12_VARIANCE)],
    ids=["table-11", "table-12"],
)
def test_ratio_summary_recomputes_the_mean_and_variance_rows_of_the_paper(table, mean, variance):
    from oodeval.openworld.ratio_study import ratio_summary

    rows = [dict(zip(COLUMNS, values, strict=True)) for values in table]
    ours = ratio_summary(rows)
    population = ratio_summary(rows, ddof=0)
    values = np.array(table)
    k = values.shape[0]
    for j, metric in enumerate(COLUMNS):
        # The rows are rounded to HALF_UNIT; moving each by that much moves the mean by at most
        # HALF_UNIT and the sample variance by at most sum_i 2 |x_i - mean| HALF_UNIT / (k - 1)
        # (to first order; the second-order term k HALF_UNIT^2 / (k - 1) is added too).
        deviations = np.abs(values[:, j] - values[:, j].mean()).sum()
        var_slack = 2 * deviations * HALF_UNIT / (k - 1) + k * HALF_UNIT**2 / (k - 1)
        assert abs(ours["mean"][metric] - mean[j]) <= 2 * HALF_UNIT, metric
        assert abs(ours["variance"][metric] - variance[j]) <= HALF_UNIT + var_slack, metric
    # The printed OverallAcc variance is the sample variance (ddof = 1), not the population one.
    overall = COLUMNS.index("overall_acc")
    assert abs(population["variance"]["overall_acc"] - variance[overall]) > 4.0
    assert ours["variance"]["overall_acc"] == pytest.approx(
        np.var(values[:, overall], ddof=1), rel=1e-12
    )


def _run(argv: list[str]) -> tuple[int, str, str]:
    from tests.helpers.cli import invoke

    return invoke(argv)


EXAMPLE = ["examples/openworld_predictions.csv", "--base-classes", "0-2"]


@pytest.fixture
def example(monkeypatch):
    from tests.requires import REPO

    monkeypatch.chdir(REPO)
    return EXAMPLE


def test_ratio_study_cli_defaults_to_the_papers_ratios_with_mean_and_sample_variance(example):
    import io

    import pandas as pd

    code, out, err = _run(["openworld", "ratio-study", *example, "--n-repeats", "2", "-f", "csv"])
    assert code == 0, err
    frame = pd.read_csv(io.StringIO(out))
    per_ratio = frame.iloc[:-2]
    assert per_ratio["new_per_base"].tolist() == pytest.approx(TABLE_RATIOS, rel=1e-15)
    # The largest subsample at each ratio of the file's 18 base and 14 new samples: s =
    # min(18 / base, 14 / new) and floor(base * s), floor(new * s) samples (1:10 is 1 and 14).
    for r, n_base, n_new in zip(TABLE_RATIOS, per_ratio["n_base"], per_ratio["n_new"], strict=True):
        base, new = (1.0, r) if r >= 1 else (1.0 / r, 1.0)
        s = min(18 / base, 14 / new)
        assert (n_base, n_new) == (math.floor(base * s + 1e-9), math.floor(new * s + 1e-9)), r
    assert frame["ratio"].tolist()[-2:] == ["mean", "variance (ddof=1)"]
    for metric in ("overall_acc", "hm", "auroc", "openworld_auc"):
        values = per_ratio[metric].to_numpy(dtype=np.float64)
        assert frame[metric].iloc[-2] == pytest.approx(values.mean(), rel=1e-12)
        assert frame[metric].iloc[-1] == pytest.approx(np.var(values, ddof=1), rel=1e-12)
    code, out, err = _run(["openworld", "ratio-study", *example, "--n-repeats", "2"])
    assert code == 0, err
    assert "ddof = 1" in out and "Tables 11-12" in out
    assert out.split()[:2] == ["base:new", "new/base"]


def test_ratio_study_cli_reads_fwd_and_bwd_as_table_3(example):
    import io

    import pandas as pd

    argv = ["openworld", "ratio-study", *example, "--ratios", "Fwd,Bwd", "-f", "csv"]
    code, out, err = _run(argv)
    assert code == 0, err
    frame = pd.read_csv(io.StringIO(out)).iloc[:2]
    assert frame["ratio"].tolist() == ["5:1", "1:5"]
    fwd, bwd = frame.to_dict("records")
    # 18 base, 14 new: Fwd keeps the 18 base and floor(18 / 5) = 3 new, Bwd floor(14 / 5) = 2
    # base and the 14 new.
    assert (fwd["n_base"], fwd["n_new"], bwd["n_base"], bwd["n_new"]) == (18, 3, 2, 14)
    code, out, _ = _run(["openworld", "ratio-study", "--help"])
    assert code == 0
    text = " ".join(out.split())
    assert "Fwd = 5:1" in text and "Bwd = 1:5" in text and "Fwd = 1:5" not in text


@pytest.mark.parametrize(
    ("ratios", "says"),
    [
        ("5", "bare number, which is ambiguous"),
        ("0.7", "is 1:0.7"),
        ("papers", "not of the form BASE:NEW"),
        ("1:0", "ratio parts must be positive numbers"),
        ("1:x", "must hold two numbers"),
        (",", "give at least one ratio"),
        ("1:2:3", "not of the form BASE:NEW"),
    ],
)
def test_a_bad_ratio_is_one_error_line_naming_the_accepted_forms(example, tmp_path, ratios, says):
    from tests.helpers.cli import assert_refused

    out_file = tmp_path / "ratios.csv"
    argv = ["openworld", "ratio-study", *example, "--ratios", ratios, "-o", str(out_file)]
    code, out, err = _run(argv)
    assert_refused(code, out, err, argv)
    assert says in err
    for accepted in ("BASE:NEW", "Fwd (= 5:1)", "Bwd (= 1:5)", "paper"):
        assert accepted in err, err
    assert not out_file.exists()


def test_the_report_sweeps_the_papers_ratios_and_gives_their_mean_and_variance():
    from oodeval.openworld.ratio_study import ratio_study
    from oodeval.report.openworld_report import openworld_sections
    from tests.requires import REPO

    path = REPO / "examples" / "openworld_predictions.csv"
    sections = openworld_sections(path, base_classes="0-2")
    sweep = next(s for s in sections if s.title == "Sensitivity to the base:new ratio")
    per_ratio, stats = sweep.tables
    assert per_ratio.frame["new/base"].tolist() == pytest.approx(TABLE_RATIOS, rel=1e-15)
    assert stats.frame["statistic"].tolist() == ["mean", "variance (ddof=1)"]
    import pandas as pd

    raw = pd.read_csv(path)
    probs = raw[[c for c in raw.columns if c.startswith("prob_")]].to_numpy()
    rows = ratio_study(probs, raw["label"].to_numpy(), [0, 1, 2], repeats=5, seed=0)
    values = np.array([r["overall_acc"] for r in rows])
    assert stats.frame["overall_acc"].tolist() == pytest.approx(
        [values.mean(), np.var(values, ddof=1)], rel=1e-12
    )
    assert "ddof = 1" in sweep.intro
