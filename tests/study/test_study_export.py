"""A study exported to one file (`oodeval study export`) reads back as the study it came from, and
`oodeval study summary` says what a study shows, computed from its errors.

References: the export is compared with the store it came from (every unit field, every error
bit for bit, every analysis table); the summary's numbers with an independent computation
(scipy's Spearman's rho per seed, degradations from the per-unit measures by hand).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodeval.environments.mnist import TEST_SET_SHA256
from oodeval.environments.source_kinds import manifest_digest
from oodeval.study import load_study
from oodeval.study.analysis import analyze
from oodeval.study.analysis.summary import TOO_SMALL, degradation_difference, study_summary
from oodeval.study.config.parsing import tomllib  # tomli before Python 3.11
from oodeval.study.store import EXPORT_MAGIC
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.studies import finished_study

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "examples" / "paper-cpu-scale1.csv"
SHIPPED_CONFIG = ROOT / "examples" / "paper-cpu-scale1.toml"

CONFIG = """
name = "export-test"
backend = "oodeval.study.synthetic"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx", "MMD", "CORAL", "Mixup", "MLDG"]
seeds = [0, 1, 2]
steps = 5
unit_options = {fail_algorithms = ["MLDG"]}

[[scenarios]]
family = "synthetic"
ratio = "3:1"
scale = 1

[[scenarios]]
family = "synthetic"
ratio = "5:1"
scale = 1
"""


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_study(tmp_path_factory.mktemp("export"), CONFIG)


@pytest.fixture(scope="module")
def exported(study_dir: Path) -> Path:
    out = study_dir.parent / "study.csv"
    code, stdout, stderr = invoke(["study", "export", str(study_dir), "--out", str(out)])
    assert code == 0, stdout + stderr
    return out


def test_an_export_reads_back_as_the_study(study_dir: Path, exported: Path) -> None:
    store, back = load_study(study_dir), load_study(exported)
    assert back.config["algorithms"] == store.config["algorithms"]
    assert back.counts() == store.counts()
    assert set(back.units["status"]) == {"done", "failed"}  # the failed MLDG units travel too
    units = store.units.sort_values("unit_key", ignore_index=True)
    for column in units.columns:
        assert list(back.units[column]) == list(units[column]), column
    results = store.results.sort_values(["unit_key", "fold", "environment"], ignore_index=True)
    pd.testing.assert_frame_equal(back.results, results, check_dtype=False, check_exact=True)
    # the same study to the identity check: its store and it are not pooled twice
    assert back.fingerprint == store.fingerprint


def test_every_analysis_table_of_an_export_equals_the_store_s(
    study_dir: Path, exported: Path
) -> None:
    ours, theirs = analyze(load_study(study_dir)), analyze(load_study(exported))
    assert ours.keys() == theirs.keys()
    for name, table in ours.items():
        if isinstance(table, pd.DataFrame):
            pd.testing.assert_frame_equal(theirs[name], table, check_exact=True, obj=name)


def test_an_export_names_its_data_by_digest_not_path(study_dir: Path, exported: Path) -> None:
    text = exported.read_text(encoding="utf-8")
    assert text.startswith(EXPORT_MAGIC + "\n")
    assert str(study_dir) not in text
    head = [line for line in text.splitlines() if line.startswith("# ")]
    assert any(line.startswith("# oodeval: ") for line in head)
    assert any(line.startswith("# data: ") for line in head)


def test_the_commands_read_an_export(exported: Path, tmp_path: Path) -> None:
    code, out, err = invoke(
        ["study", "analyze", str(exported), "--analysis-dir", str(tmp_path / "a")]
    )
    assert code == 0, out + err
    assert (tmp_path / "a" / "table1.csv").is_file()
    code, out, err = invoke(["report", str(exported), "--out", str(tmp_path / "r.html")])
    assert code == 0, out + err
    assert "Exported study" in (tmp_path / "r.html").read_text(encoding="utf-8")
    code, out, err = invoke(["study", "measures", str(exported), "--bootstrap", "50"])
    assert code == 0, out + err


def test_analyze_asks_where_an_export_s_analysis_goes(exported: Path) -> None:
    argv = ["study", "analyze", str(exported)]
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    assert "--analysis-dir DIR" in err


def test_an_export_and_its_store_are_not_pooled(study_dir: Path, exported: Path) -> None:
    argv = ["study", "measures", str(study_dir), str(exported)]
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    assert "counted twice" in err


def _edited(exported: Path, tmp_path: Path, edit) -> Path:
    lines = exported.read_text(encoding="utf-8").split("\n")
    path = tmp_path / "edited.csv"
    path.write_text("\n".join(edit(lines)), encoding="utf-8")
    return path


def _table_start(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if not line.startswith("#"))


def _row_edit(change):
    def edit(lines: list[str]) -> list[str]:
        start = _table_start(lines)
        return [*lines[: start + 1], change(lines[start + 1]), *lines[start + 2 :]]

    return edit


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_row_edit(lambda row: row.replace(",0,", ",99,", 1)), "belongs to no unit"),
        (_row_edit(lambda row: re.sub(r",[0-9.e-]+,(\d+)$", r",1.5,\1", row)), "in [0, 1]"),
        (_row_edit(lambda row: re.sub(r",[0-9.e-]+,(\d+)$", r",nan,\1", row)), "in [0, 1]"),
        (_row_edit(lambda row: row + "\n" + row), "a second row for this unit"),
        (lambda lines: [ln for ln in lines if not ln.startswith("# config: ")], "no config"),
        (
            lambda lines: [
                "# unit: {not json" if ln.startswith("# unit: ") else ln for ln in lines
            ],
            "not valid JSON",
        ),
        (
            lambda lines: [*lines[:6], lines[5], *lines[6:]],  # the first unit line twice
            "again (first at line",
        ),
        (
            lambda lines: [ln.replace('"seed": 0', '"seed": -1', 1) for ln in lines],
            "integer in [0, 2^32)",
        ),
        (
            lambda lines: [ln.replace("fold,environment", "fold,env", 1) for ln in lines],
            "header must be",
        ),
    ],
)
def test_a_damaged_export_is_one_error_line(exported: Path, tmp_path: Path, edit, expected):
    path = _edited(exported, tmp_path, edit)
    argv = ["study", "summary", str(path)]
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    assert expected in err, err


def _units(study_dir: Path) -> pd.DataFrame:
    from oodeval.study.analysis import study_unit_measures

    frame = study_unit_measures(load_study(study_dir), ["worst_plus_gap", "average"])
    return frame[frame["algorithm"] != "MLDG"]


def test_the_summary_s_rhos_are_scipy_s_means_over_seeds(study_dir: Path) -> None:
    line = study_summary(load_study(study_dir), n_resamples=200)
    frame = _units(study_dir)
    for ratio, part in frame.groupby("ratio"):
        rho = {
            m: np.mean(
                [stats.spearmanr(s[m], s["ideal"]).statistic for _, s in part.groupby("seed")]
            )
            for m in ("worst_plus_gap", "average")
        }
        assert f"{ratio} {rho['worst_plus_gap']:+.2f} vs {rho['average']:+.2f}" in line, line
    assert line.startswith("7 algorithms, 2 scenarios x 3 seeds: ")


def test_the_summary_s_degradations_are_the_cells_means(study_dir: Path) -> None:
    line = study_summary(load_study(study_dir), n_resamples=200)
    frame = _units(study_dir)
    deg = {m: [] for m in ("worst_plus_gap", "average")}
    picks = []
    for _, cell in frame.groupby(["scenario", "seed"]):
        best = cell.sort_values(["ideal", "algorithm"]).iloc[0]
        picks.append(best["algorithm"])
        for m in deg:
            chosen = cell.sort_values([m, "algorithm"]).iloc[0]
            deg[m].append(abs(chosen["ideal"] - best["ideal"]))
    wg, avg = np.mean(deg["worst_plus_gap"]), np.mean(deg["average"])
    assert f"over 6 cells, worst+gap {wg:.2f} vs average {avg:.2f}" in line, line
    assert f"(difference {wg - avg:+.2f} [" in line, line
    favourite = pd.Series(picks).value_counts().index[0]
    assert f"{favourite} is the ideal measure's choice in" in line, line


def test_the_degradation_interval_is_a_percentile_bootstrap_of_the_cell_differences() -> None:
    cells = pd.DataFrame({"worst_plus_gap": [0.3, 0.1, 0.2, 0.0], "average": [0.0] * 4})
    mean, low, high = degradation_difference(cells, n_resamples=4000, seed=1)
    assert mean == pytest.approx(0.15, abs=1e-12)
    # brute force: every one of the 4^4 equally likely draws, weighted alike
    draws = np.array(np.meshgrid(*[range(4)] * 4)).reshape(4, -1).T
    means = np.sort(cells["worst_plus_gap"].to_numpy()[draws].mean(axis=1))
    exact_low, exact_high = np.quantile(means, [0.025, 0.975])
    # 4,000 draws estimate each quantile within a few hundredths of the exact one
    assert abs(low - exact_low) < 0.03 and abs(high - exact_high) < 0.03


def test_a_tiny_study_is_too_small_to_separate_the_measures(tmp_path: Path) -> None:
    config = CONFIG.replace("seeds = [0, 1, 2]", "seeds = [0]").replace(
        '"Mixup", "MLDG"]', '"Mixup"]'
    )
    config = config.replace(
        '["ERM", "IRM", "GroupDRO", "VREx", "MMD", "CORAL", "Mixup"]', '["ERM", "IRM", "GroupDRO"]'
    )
    line = study_summary(load_study(finished_study(tmp_path, config)), n_resamples=200)
    assert f": {TOO_SMALL} (2 cells, fewer than 6): " in line, line
    assert "fewer than 6 cells, too few to tell" in line, line


def test_one_seed_is_too_small_whatever_the_intervals_over_algorithms_say(tmp_path: Path) -> None:
    """Three scenarios of one seed: 3 cells, too small even where a scenario's interval over
    the algorithms excludes 0 (the synthetic backend separates its 8 algorithms sharply)."""
    config = CONFIG.replace("seeds = [0, 1, 2]", "seeds = [0]").replace(
        '[[scenarios]]\nfamily = "synthetic"\nratio = "5:1"',
        '[[scenarios]]\nfamily = "synthetic"\nratio = "4:1"\nscale = 1\n\n'
        '[[scenarios]]\nfamily = "synthetic"\nratio = "5:1"',
    )
    line = study_summary(load_study(finished_study(tmp_path, config)), n_resamples=200)
    assert line.startswith(f"7 algorithms, 3 scenarios x 1 seed: {TOO_SMALL} (3 cells, "), line


def test_summary_prints_one_line_per_study(study_dir: Path, exported: Path) -> None:
    code, out, err = invoke(
        ["study", "summary", str(study_dir), str(exported), "--bootstrap", "99"]
    )
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{study_dir}: ") and lines[1].startswith(f"{exported}: ")
    assert lines[0].split(": ", 1)[1] == lines[1].split(": ", 1)[1]  # the same study


# --- the shipped run ---------------------------------------------------------------------------


def _head(path: Path) -> dict[str, str]:
    head = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        head.setdefault(key, value)
    return head


def test_the_shipped_run_carries_its_config_version_and_data_digest() -> None:
    import json

    head = _head(SHIPPED)
    config = json.loads(head["config"])
    wanted = tomllib.loads(SHIPPED_CONFIG.read_text(encoding="utf-8"))
    for key in ("name", "algorithms", "seeds", "steps", "model", "scenarios", "hparams"):
        assert config[key] == wanted[key], key
    assert config["trainer"]["eval_every"] == wanted["trainer"]["eval_every"]
    assert re.fullmatch(r"\d+\.\d+\S* \(source [0-9a-f]{16}\)", head["oodeval"]), head["oodeval"]
    # the data is the MNIST test set, the one bundled with oodeval: its manifest digest
    assert head["data"] == f"mnist {manifest_digest(TEST_SET_SHA256)}"
    study = load_study(SHIPPED)
    assert study.counts() == {"done": 126, "failed": 0, "damaged": 0, "pending": 0, "planned": 126}


def test_the_demo_s_summary_is_computed_from_the_shipped_file(tmp_path: Path) -> None:
    demo = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    assert "study summary" in demo and "examples/paper-cpu-scale1.csv" in demo
    line = study_summary(load_study(SHIPPED), n_resamples=200)
    assert "ARM" in line  # the ideal measure's favourite in the shipped run, named by the line
    # change one algorithm's errors in a copy: the summary follows the file
    lines = SHIPPED.read_text(encoding="utf-8").split("\n")
    start = _table_start(lines)
    moved = [
        re.sub(r",([0-9.e-]+),(\d+)$", r",0.999,\2", row) if ",ARM," in row else row
        for row in lines[start + 1 :]
    ]
    copy = tmp_path / "changed.csv"
    copy.write_text("\n".join([*lines[: start + 1], *moved]), encoding="utf-8")
    assert study_summary(load_study(copy), n_resamples=200) != line


def test_the_reproduce_page_shows_the_shipped_run_s_tables_beside_the_paper_s() -> None:
    """The page's tables are the analysis of the shipped file as the report shows them, so they
    cannot go stale when the file is made again."""
    from oodeval.report.columns import beside_paper_view
    from oodeval.tables import render_frame

    page = (ROOT / "docs" / "paper" / "reproduce.md").read_text(encoding="utf-8")
    results = analyze(load_study(SHIPPED))
    for name in ("table1_vs_paper", "table5_vs_paper", "selection_vs_paper"):
        assert render_frame(beside_paper_view(results[name]), "markdown") in page, name
