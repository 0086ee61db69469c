"""The study report: plotted numbers equal the analysis; bad studies render; Chromium loads it."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from oodeval.errors import OodevalError
from oodeval.report.build import build_report
from oodeval.report.study_report import study_sections, table6_view
from oodeval.study.analysis import analyze
from oodeval.study.runner import run_study
from oodeval.study.store import load_study
from tests.helpers.studies import ALGOS, synthetic_config

#: Two Ratio 3:1 scenarios (Scales 1 and 2) of the synthetic backend.
SCENARIOS = [
    {"family": "synthetic", "ratio": "3:1", "scale": 1},
    {"family": "synthetic", "ratio": "3:1", "scale": 2},
]


def _config(**overrides):
    return synthetic_config(**{"name": "report-test", "scenarios": SCENARIOS, **overrides})


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
    from tests.helpers.browser import check_page

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
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    report = out / "report.html"
    assert f"report: {report.resolve()}" in done.stdout
    assert "Table 1" in report.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- the verdict

VERDICT_ALGOS = ["ERM", "IRM", "GroupDRO", "VREx", "MMD", "CORAL", "Mixup", "SagNet"]
VERDICT_SCENARIOS = [
    {"family": "synthetic", "ratio": "3:1", "scale": 1},
    {"family": "synthetic", "ratio": "5:1", "scale": 1},
    {"family": "synthetic", "ratio": "3:1", "scale": 2},
]

# JavaScript run in the page: where the verdict block sits and what it shows.
VERDICT_PROBE = """
const v = document.getElementById('verdict');
const a = document.getElementById('answer');
const others = Array.from(document.querySelectorAll('main > section, main > nav'))
  .filter(e => e !== v && e !== a);
const rows = Array.from(v.querySelectorAll('tbody tr'));
return {
  first: document.querySelector('main').firstElementChild.id,
  top: v.getBoundingClientRect().top,
  others: others.map(e => e.getBoundingClientRect().top),
  header: document.querySelector('header').innerText,
  sentence: v.querySelector('p.intro').innerText,
  answer: Array.from(a.querySelectorAll('ul.items li')).map(li => li.innerText),
  answerTop: a.getBoundingClientRect().top,
  facts: v.querySelector('dl.facts').innerText,
  cells: rows.map(r => Array.from(r.cells).map(c => c.innerText)),
};
"""


@pytest.fixture(scope="module")
def verdict_study(tmp_path_factory):
    directory = tmp_path_factory.mktemp("verdict")
    config = _config(algorithms=VERDICT_ALGOS, scenarios=VERDICT_SCENARIOS)
    run_study(config, directory, workers=1, progress=False)
    return directory


@pytest.fixture(scope="module")
def partial_study(tmp_path_factory):
    """Scenario 1 done (MMD failing both seeds), scenario 2 with ERM only, scenario 3 not begun."""
    directory = tmp_path_factory.mktemp("partial")
    config = _config(
        algorithms=VERDICT_ALGOS,
        scenarios=VERDICT_SCENARIOS,
        unit_options={"fail_algorithms": ["MMD"]},
    )
    stored = []

    def stop_after_17(record):
        stored.append(record)
        if len(stored) == 17:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(config, directory, workers=1, progress=False, on_unit=stop_after_17)
    return directory


def _verdict_page(directory, tmp_path, name):
    from oodeval.study.analysis import verdict_view
    from tests.helpers.browser import check_page

    page = tmp_path / f"{name}.html"
    page.write_text(build_report(directory), encoding="utf-8")
    checked = check_page(page, f"{name}.png", probe=VERDICT_PROBE)
    assert checked.console_errors == [] and checked.broken_images == []
    seen = checked.probed
    assert seen["first"] == "answer"  # the answer line, then the verdict, then the rest
    assert seen["answerTop"] < seen["top"] < min(seen["others"])
    assert seen["header"].splitlines()[0] == "oodeval study report"
    assert "units" not in seen["header"] and "Generated" not in seen["header"]
    results = analyze(directory)
    view = verdict_view(results["verdict"])
    assert seen["cells"] == [[str(v) for v in row] for row in view.itertuples(index=False)]
    return seen, results


def _shown_numbers(cell):
    return [float(x) for x in re.findall(r"-?\d+\.\d+", cell)]


@pytest.mark.browser
def test_the_verdict_opens_the_report_of_a_complete_study(verdict_study, tmp_path):
    from oodeval.measures.meta import answer_parts, verdict_sentence

    seen, results = _verdict_page(verdict_study, tmp_path, "report-verdict-complete")
    verdicts, table1 = results["verdict"], results["table1"]
    assert seen["sentence"] == verdict_sentence(verdicts)
    clear = (verdicts["verdict"] == "clearly ahead").sum()
    assert (
        f"over 3 scenarios: worst+gap tracks the ideal measure clearly better in {clear},"
        in (seen["sentence"])
    )
    parts = answer_parts(results["units"], ["worst_plus_gap", "average"])
    assert seen["answer"] == [f"{scenario}: {text}" for scenario, text in parts]
    assert len(seen["answer"]) == 3 and all(a.startswith("synthetic/") for a in seen["answer"])
    assert seen["facts"].split("\n")[-1] == "All 48 units done."
    for cells, v, t1 in zip(seen["cells"], verdicts.itertuples(), table1.itertuples(), strict=True):
        assert cells[0] == v.scenario == t1.scenario
        rho_wg, rho_avg, diff = (_shown_numbers(c) for c in cells[3:6])
        # printed to 3 decimals: within 5e-4 of the analysis, and Table 1's seed mean
        assert rho_wg == pytest.approx(
            [v.rho_worst_plus_gap, v.rho_worst_plus_gap_low, v.rho_worst_plus_gap_high], abs=5e-4
        )
        assert rho_avg == pytest.approx(
            [v.rho_average, v.rho_average_low, v.rho_average_high], abs=5e-4
        )
        assert diff == pytest.approx([v.difference, v.difference_low, v.difference_high], abs=5e-4)
        assert v.rho_worst_plus_gap == pytest.approx(t1.rho_worst_plus_gap_mean, abs=1e-12)
        assert v.rho_average == pytest.approx(t1.rho_average_mean, abs=1e-12)
        assert cells[-1] == v.verdict and v.verdict != "undefined"


@pytest.mark.browser
def test_the_verdict_of_a_partial_study_says_what_is_missing(partial_study, tmp_path):
    study = load_study(partial_study)
    assert study.counts() == {"done": 15, "failed": 2, "damaged": 0, "pending": 31, "planned": 48}
    seen, results = _verdict_page(partial_study, tmp_path, "report-verdict-partial")
    assert seen["facts"].split("\n")[-1] == (
        "15 of 48 units done; 33 missing (31 pending, 2 failed): the verdict uses the 15."
    )
    verdicts = results["verdict"]
    assert len(verdicts) == 2  # the third scenario has no finished unit
    done, started = verdicts.iloc[0], verdicts.iloc[1]
    assert (done.n_seeds, done.n_algorithms, done.verdict != "undefined") == (2, 7, True)
    assert started.verdict == "undefined" and started.n_algorithms == 1
    assert seen["cells"][1][-1] == "undefined: fewer than 3 algorithms in every seed"
    assert seen["sentence"].startswith("worst+gap vs average over 2 scenarios: ")
    assert "; no verdict in 1 (fewer than 3 algorithms in every seed). " in seen["sentence"]
    assert len(results["table1"]) == 1  # a seed with one algorithm has no correlation


def test_study_analyze_prints_the_verdict_first_and_writes_it(partial_study):
    from typer.testing import CliRunner

    from oodeval.cli.main import app

    result = CliRunner().invoke(app, ["study", "analyze", str(partial_study)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    from oodeval.measures.meta import verdict_sentence

    assert lines[0] == f"Verdict: {verdict_sentence(analyze(partial_study)['verdict'])}"
    assert lines[0].startswith("Verdict: worst+gap vs average over 2 scenarios: ")
    assert lines[2] == (
        "15 of 48 units done; 33 missing (31 pending, 2 failed): the verdict uses the 15."
    )
    assert (  # the one scenario with a verdict has 7 algorithms: too few for a clear interval
        "Warning: only 7 algorithms: with fewer than 8, a rank correlation with the ideal measure "
        "says little (only |rho| >= 0.786 differs from 0 at the 5% level;" in result.output
    )
    written = pd.read_csv(partial_study / "analysis" / "verdict.csv")
    expected = analyze(partial_study)["verdict"]
    assert list(written["scenario"]) == list(expected["scenario"])
    assert np.allclose(
        written["rho_worst_plus_gap"], expected["rho_worst_plus_gap"], rtol=1e-5, equal_nan=True
    )  # the CSV keeps 6 significant digits
    markdown = (partial_study / "analysis" / "analysis.md").read_text(encoding="utf-8")
    assert markdown.split("\n\n")[1] == lines[0]
