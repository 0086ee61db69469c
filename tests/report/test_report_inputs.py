"""Reports on a results file and on open-world predictions: plotted numbers equal the analysis."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import rankdata

from oodeval.errors import OodevalError
from oodeval.measures.openworld import openworld_scores
from oodeval.report.build import build_report, input_kind
from oodeval.report.openworld_report import openworld_sections
from oodeval.report.results_report import results_sections

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "examples" / "results.csv"
PREDICTIONS = ROOT / "examples" / "openworld_predictions.csv"


def _figures(sections):
    return {f.key: f for s in sections for f in s.figures}


def _reference_measures() -> pd.DataFrame:
    raw = pd.read_csv(RESULTS)
    loo = raw[raw.split == "loo"]
    per = loo.groupby(["seed", "algorithm"])["error"]
    n = loo.environment.nunique()
    m = pd.DataFrame({"average": per.mean(), "worst": per.max(), "best": per.min()})
    m["worst_plus_gap"] = m.worst + (m.worst - m.best) / (n - 2)
    return m.groupby("algorithm").mean()


def test_bump_chart_plots_the_ranks_of_average_and_worst_plus_gap():
    ref = _reference_measures()
    bump = _figures(results_sections(RESULTS))["bump"].data.set_index("algorithm")
    for measure in ("average", "worst_plus_gap"):
        expected = rankdata(ref[measure].round(12), method="min").astype(int)
        got = bump.loc[ref.index, measure].to_numpy()
        assert got.tolist() == expected.tolist()


def test_heat_map_and_environment_curve_plot_seed_mean_errors():
    raw = pd.read_csv(RESULTS)
    figs = _figures(results_sections(RESULTS))
    heat = figs["heat_loo"].data.set_index("algorithm")
    loo = raw[raw.split == "loo"].groupby(["algorithm", "environment"])["error"].mean()
    for (alg, env), value in loo.items():
        assert heat.loc[alg, f"{env:.3f}"] == pytest.approx(value, abs=1e-12)
    curve = figs["env_curve"].data
    full = raw[raw.split == "all"].groupby(["algorithm", "environment"])["error"].mean()
    for row in curve.itertuples():
        assert row.error == pytest.approx(full[(row.algorithm, row.position)], abs=1e-12)


def test_one_algorithm_renders_and_says_what_is_missing(tmp_path):
    raw = pd.read_csv(RESULTS)
    one = tmp_path / "one.csv"
    raw[raw.algorithm == "ERM"].to_csv(one, index=False)
    sections = results_sections(one)
    notes = " ".join(n for s in sections for n in s.notes)
    assert "Only one algorithm (ERM)" in notes
    assert "bump" not in _figures(sections)
    assert "ERM" in build_report(one)


def test_openworld_curve_area_and_roc_area_equal_the_metrics():
    raw = pd.read_csv(PREDICTIONS)
    probs = raw[[c for c in raw.columns if c.startswith("prob_")]].to_numpy()
    metrics = openworld_scores(probs, raw["label"].to_numpy(), [0, 1, 2])
    figs = _figures(openworld_sections(PREDICTIONS, base_classes="0-2"))
    curve = figs["owauc_curve"].data
    assert np.trapezoid(curve.y, curve.x) == pytest.approx(metrics["openworld_auc"], abs=1e-12)
    roc = figs["roc"].data
    assert np.trapezoid(roc.y, roc.x) == pytest.approx(metrics["auroc"], abs=1e-12)


def test_roc_points_match_scikit_learn():
    from sklearn.metrics import roc_curve

    from oodeval.report.openworld_report import roc_points

    rng = np.random.default_rng(4)
    for decimals in (1, 2, 6):  # many ties, some, none
        base = np.round(rng.uniform(0.2, 1.0, size=57), decimals)
        new = np.round(rng.uniform(0.0, 0.8, size=31), decimals)
        y = np.r_[np.ones(base.size), np.zeros(new.size)]
        fpr, tpr, _ = roc_curve(y, np.r_[base, new], drop_intermediate=False)
        ours = roc_points(base, new)
        # counts divided by the same totals: equal to the last bit
        np.testing.assert_array_equal(ours[0], fpr)
        np.testing.assert_array_equal(ours[1], tpr)


def test_ratio_sweep_moves_base_share_and_plots_the_study_numbers():
    from oodeval.openworld.ratio_study import ratio_study
    from oodeval.report.openworld_report import SWEEP_RATIOS

    raw = pd.read_csv(PREDICTIONS)
    probs = raw[[c for c in raw.columns if c.startswith("prob_")]].to_numpy()
    rows = ratio_study(probs, raw["label"].to_numpy(), [0, 1, 2], SWEEP_RATIOS, repeats=5, seed=0)
    plotted = _figures(openworld_sections(PREDICTIONS, base_classes="0-2"))["ratio_sweep"].data
    for row in rows:
        for metric in ("overall_acc", "openworld_auc"):
            value = plotted[(plotted.ratio == row["ratio"]) & (plotted.metric == metric)].value
            assert value.item() == pytest.approx(row[metric], abs=1e-12)
    shares = plotted.drop_duplicates("ratio").base_share.to_numpy()
    assert shares[0] < 0.5 < shares[-1]


def test_too_few_samples_leave_only_the_ratio_sweep_out(tmp_path):
    """One base and one new sample cannot be resampled to 1:5: the report says so and keeps the
    rest."""
    path = tmp_path / "p.csv"
    path.write_text("label,prob_0,prob_1\n0,0.9,0.1\n1,0.2,0.8\n", encoding="utf-8")
    (overview,) = openworld_sections(path, base_classes="0")
    assert any(n.startswith("No ratio sweep: too few samples to resample") for n in overview.notes)
    assert overview.tables


def test_another_error_of_the_ratio_sweep_stops_the_report(monkeypatch):
    """Only a test set too small to resample leaves the sweep out; any other problem is the
    usual one-line error, not blamed on too few samples."""
    import oodeval.openworld.ratio_study as ratio_study_module

    def refuse(*args, **kwargs):
        raise OodevalError("outputs must be finite numbers, got NaN in row 3")

    monkeypatch.setattr(ratio_study_module, "ratio_study", refuse)
    with pytest.raises(OodevalError, match=r"^outputs must be finite numbers, got NaN in row 3$"):
        openworld_sections(PREDICTIONS, base_classes="0-2")


def test_source_kind_tells_the_three_sources_apart(tmp_path):
    assert input_kind(tmp_path) == "study"
    assert input_kind(RESULTS) == "results"
    assert input_kind(PREDICTIONS) == "openworld"


def test_cli_report_writes_a_page_and_rejects_unknown_files(tmp_path):
    out = tmp_path / "r.html"
    ok = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "report", str(RESULTS), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert ok.returncode == 0, ok.stderr
    assert Path(ok.stdout.strip()) == out.resolve() and out.stat().st_size > 10_000
    weird = tmp_path / "x.bin"
    weird.write_bytes(b"\0")
    bad = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "report", str(weird), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1


@pytest.mark.browser
def test_results_report_in_chromium_escapes_hostile_names(tmp_path):
    from tests.helpers.browser import check_page

    raw = pd.read_csv(RESULTS)
    evil = "<img src=x onerror=alert(1)>"
    raw["algorithm"] = raw["algorithm"].replace("ERM", evil)
    raw["environment"] = raw["environment"].astype(str)
    raw.loc[raw.environment == "0.1", "environment"] = "<script>alert(2)</script>"
    src = tmp_path / "hostile.csv"
    raw.to_csv(src, index=False)
    page_path = tmp_path / "hostile.html"
    page_path.write_text(build_report(src), encoding="utf-8")
    page = check_page(page_path, "report-results-hostile.png")
    assert page.alerts == 0 and page.console_errors == []
    assert page.images >= 3 and page.broken_images == []
    assert evil in page.body_text


@pytest.mark.browser
def test_openworld_report_in_chromium(tmp_path):
    from tests.helpers.browser import check_page

    page_path = tmp_path / "ow.html"
    page_path.write_text(build_report(PREDICTIONS, base_classes="0-2"), encoding="utf-8")
    page = check_page(page_path, "report-openworld.png")
    assert page.console_errors == [] and page.broken_images == [] and page.images == 3
    assert "OpenworldAUC" in page.body_text
