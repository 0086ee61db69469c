"""The study report: plotted numbers equal the analysis; bad studies render; Chromium loads it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from oodeval.errors import OodevalError
from oodeval.report.build import build_report
from oodeval.report.study_report import study_sections, table6_view
from oodeval.study.analysis import analyze
from oodeval.study.config import config_from_dict
from oodeval.study.runner import run_study
from oodeval.study.store import load_study

ALGOS = ["ERM", "IRM", "GroupDRO", "VREx", "MMD"]


def _config(**overrides):
    data = {
        "name": "report-test",
        "backend": "oodeval.study.synthetic",
        "algorithms": ALGOS,
        "seeds": [0, 1],
        "steps": 10,
        "scenarios": [
            {"family": "synthetic", "ratio": "3:1", "scale": 1},
            {"family": "synthetic", "ratio": "3:1", "scale": 2},
        ],
    }
    data.update(overrides)
    return config_from_dict(data)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("study")
    run_study(_config(), directory, workers=1, progress=False)
    return directory


def _figures(sections):
    return {f.key: f for s in sections for f in s.figures}


def test_figure5_plots_each_units_ideal_and_measures(study_dir):
    units = analyze(study_dir)["units"].set_index(["scenario", "algorithm", "seed"])
    plotted = _figures(study_sections(study_dir))["figure5"].data
    assert len(plotted) == 2 * len(units)
    for row in plotted.itertuples():
        unit = units.loc[(row.scenario, row.algorithm, row.seed)]
        measure = "worst_plus_gap" if row.measure == "worst+gap" else "average"
        assert row.ideal == unit["ideal"] and row.value == unit[measure]


def test_figure6_and_figure7_plot_the_analysis_numbers(study_dir):
    results = analyze(study_dir)
    figs = _figures(study_sections(study_dir))
    f6 = figs["figure6"].data
    assert np.allclose(f6["degradation_mean"], results["figure6"]["degradation_mean"])
    f7 = results["figure7"]
    plotted = figs["figure7"].data
    for row in plotted.itertuples():
        label = {"worst+gap": "worst_plus_gap"}.get(row.measure, row.measure)
        sel = f7[(f7.scale == row.scale) & (f7.measure == label) & (f7.ratio == row.ratio)]
        assert row.normalized == pytest.approx(sel["normalized"].mean(), abs=1e-12)
    assert set(plotted.loc[plotted.scale == 1, "normalized"]) == {1.0}


def test_figure1_plots_erm_and_the_ideal_best_algorithm(study_dir):
    units = analyze(study_dir)["units"]
    plotted = _figures(study_sections(study_dir))["figure1"].data
    for scenario, group in units.groupby("scenario"):
        best = group.groupby("algorithm")["ideal"].mean().idxmin()
        for measure, column in (("ideal", "ideal"), ("average", "average")):
            mine = plotted[
                (plotted.measure == measure)
                & plotted.scenario.str.startswith(scenario.split("/", 1)[1].replace("/", " "))
            ]
            erm = mine.loc[mine.who == "ERM", "value"].item()
            top = mine.loc[mine.who == "ideal-best algorithm", "value"].item()
            assert erm == pytest.approx(group.loc[group.algorithm == "ERM", column].mean())
            assert top == pytest.approx(group.loc[group.algorithm == best, column].mean())


def test_environment_curves_are_seed_means_of_the_full_model(study_dir):
    study = load_study(study_dir)
    curves = _figures(study_sections(study_dir))["env_curves"].data
    full = study.results[study.results.fold == "all"].merge(study.units, on="unit_key")
    sample = curves.iloc[len(curves) // 2]
    scenario = next(s for s in full.scenario.unique() if s.endswith(sample.scenario.split()[-1]))
    expected = full[
        (full.scenario == scenario)
        & (full.algorithm == sample.algorithm)
        & (full.environment == sample.environment)
    ]["error"].mean()
    assert sample.error == pytest.approx(expected, abs=1e-12)
    assert curves.e.between(0, 1).all()


def test_table6_view_marks_ties_and_keeps_every_selection():
    t6 = pd.DataFrame(
        {
            "scenario": ["s"] * 3,
            "seed": [0, 0, 0],
            "measure": ["ideal", "worst_plus_gap", "average"],
            "selected": ["A", "B", "A"],
            "tied": ["A", "B|C", "A"],  # as `selected_algorithms` writes them
        }
    )
    view = table6_view(t6)
    assert view.loc[0, ["ideal", "worst+gap", "average"]].tolist() == ["A", "B*", "A"]


def test_an_empty_folder_is_refused_with_a_reason(tmp_path):
    with pytest.raises(OodevalError, match="no results.sqlite"):
        build_report(tmp_path)


def test_a_study_whose_units_all_failed_renders_and_says_so(tmp_path):
    cfg = _config(unit_options={"fail_algorithms": ALGOS})
    run_study(cfg, tmp_path, workers=1, progress=False)
    html = build_report(tmp_path)
    assert "No finished units yet" in html
    assert "Failed units" in html and "0 done, 20 failed" in html


def test_a_study_with_one_algorithm_renders_and_says_what_is_missing(tmp_path):
    run_study(_config(algorithms=["ERM"]), tmp_path, workers=1, progress=False)
    html = build_report(tmp_path)
    assert "correlations need &gt;= 2 algorithms" in html


@pytest.mark.browser
def test_study_report_loads_in_chromium_with_every_image(study_dir, tmp_path):
    from tests.browser import check_page

    page = tmp_path / "study.html"
    page.write_text(build_report(study_dir), encoding="utf-8")
    checked = check_page(page, "report-study.png")
    assert checked.console_errors == [] and checked.broken_images == []
    assert checked.images >= 5
    assert "Table 1" in checked.body_text


def test_study_run_writes_the_report_at_the_end_and_prints_its_path(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    config = tmp_path / "study.toml"
    config.write_text(
        'name = "cli-report"\nbackend = "oodeval.study.synthetic"\n'
        'algorithms = ["ERM", "IRM", "VREx"]\nseeds = [0]\nsteps = 5\n'
        '[[scenarios]]\nfamily = "synthetic"\nratio = "3:1"\nscale = 1\n',
        encoding="utf-8",
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "oodeval.cli.main",
            "study",
            "run",
            str(config),
            "--out",
            str(out),
            "--workers",
            "1",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    report = out / "report.html"
    assert f"report: {report.resolve()}" in done.stdout
    assert "Table 1" in report.read_text(encoding="utf-8")
