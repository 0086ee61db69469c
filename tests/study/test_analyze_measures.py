"""Measures on the command line: ``--imports FILE`` (measures, import domainbed, study analyze,
report) and ``study analyze`` / ``report`` with ``--measures``, which compute every table for
the given measures from the stored errors, read-only, recording each measure's code digest.

The reference numbers are computed here from the store's rows with sqlite3 and scipy, not
through oodeval's analysis layer.
"""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
import stat
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.measures import measure_code_digest, unregister_measure
from oodeval.study import run_study
from tests.goldens.cases import quick_study
from tests.helpers.studies import synthetic_config
from tests.requires import DOMAINBED_SWEEP, requires_path

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()

#: A user's measure file: the mean of the two largest errors.
TOP2 = '''
import numpy as np
from oodeval.measures import register_measure


@register_measure("top2_mean", label="mean of 2 worst", min_envs=2)
def top2_mean(errors):
    """Mean of the two largest errors."""
    e = np.sort(np.asarray(errors, dtype=float), axis=-1)
    return e[..., -2:].mean(axis=-1)
'''


@pytest.fixture()
def top2_file(tmp_path):
    path = tmp_path / "top2_measures.py"
    path.write_text(TOP2, encoding="utf-8")
    yield path
    unregister_measure("top2_mean")


def fingerprint(folder: Path) -> tuple[str, int, list[str]]:
    """(sha256 of results.sqlite, its mtime in ns, the folder's files but SQLite's sidecars)."""
    store = folder / "results.sqlite"
    names = sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if not p.name.endswith(("-shm", "-wal"))
    )
    return hashlib.sha256(store.read_bytes()).hexdigest(), store.stat().st_mtime_ns, names


def reference_table1(folder: Path, measure) -> pd.Series:
    """Spearman's rho (scipy) per scenario between `measure` of each unit's LOO errors (each
    fold's error on its own held-out environment) and the ideal measure (max error of the model
    trained on all), from the store's rows; the quick study has one seed."""
    conn = sqlite3.connect(f"{(folder / 'results.sqlite').as_uri()}?mode=ro", uri=True)
    try:
        rows = pd.read_sql_query(
            "SELECT u.scenario, u.algorithm, r.fold, r.environment, r.error FROM results r "
            "JOIN units u ON u.unit_key = r.unit_key WHERE u.status = 'done'",
            conn,
        )
    finally:
        conn.close()
    rho = {}
    for scenario, grp in rows.groupby("scenario"):
        values, ideals = [], []
        for _, unit in grp.groupby("algorithm"):
            loo = unit[(unit["fold"] == unit["environment"]) & (unit["fold"] != "all")]
            values.append(measure(loo.sort_values("fold")["error"].to_numpy(dtype=np.float64)))
            ideals.append(unit.loc[unit["fold"] == "all", "error"].max())
        # oodeval ranks scores rounded to 12 decimals (meta.TIE_DECIMALS, its documented rule),
        # so floating-point noise does not break a tie; the reference does the same
        rho[scenario] = stats.spearmanr(np.round(values, 12), np.round(ideals, 12)).statistic
    return pd.Series(rho)


def test_analyze_measures_match_a_reference_and_leave_the_store_unchanged(tmp_path, top2_file):
    study = quick_study(tmp_path)
    before = fingerprint(study)
    out = tmp_path / "analysis-out"
    result = runner.invoke(
        app,
        [
            "study", "analyze", str(study), "--imports", str(top2_file),
            "--measures", "top2_mean,cvar:alpha=0.5", "--analysis-dir", str(out), "-f", "csv",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert fingerprint(study) == before  # nothing written to the study folder or its store
    t1 = pd.read_csv(out / "table1.csv").set_index("scenario")

    def top2(e):
        return np.sort(e)[-2:].mean()

    def cvar_half(e):  # mean of the worst ceil(N/2) environments
        return np.sort(e)[::-1][: int(np.ceil(0.5 * len(e)))].mean()

    for column, measure in (("rho_top2_mean_mean", top2), ("rho_cvar:alpha=0.5_mean", cvar_half)):
        expected = reference_table1(study, measure)
        # the CSV holds 6 significant digits (float_format="%.6g"): 1e-5 absolute covers |rho|<=1
        np.testing.assert_allclose(t1.loc[expected.index, column], expected, atol=1e-5)
    for name in ("table5", "figure6", "figure7", "figure1", "figure5", "units"):
        text = (out / f"{name}.csv").read_text()
        assert "top2_mean" in text and "cvar:alpha=0.5" in text, name
    t6 = pd.read_csv(out / "table6.csv")
    assert {"top2_mean", "cvar:alpha=0.5", "ideal"} <= set(t6["measure"])
    digests = pd.read_csv(out / "measure_digests.csv").set_index("measure")
    assert digests.loc["top2_mean", "code_digest"] == measure_code_digest("top2_mean")
    assert digests.loc["top2_mean", "defined_in"] == "top2_measures"
    assert digests.loc["top2_mean", "label"] == "mean of 2 worst"
    md = (out / "analysis.md").read_text()
    assert "## Measures: code digests" in md and measure_code_digest("top2_mean") in md
    assert "rho mean of 2 worst" in md  # Table 1 has a column per added measure


def test_without_measures_nothing_about_digests_is_written(tmp_path):
    study = quick_study(tmp_path)
    result = runner.invoke(app, ["study", "analyze", str(study), "-f", "csv"])
    assert result.exit_code == 0, result.output
    assert not (study / "analysis" / "measure_digests.csv").exists()
    assert "code digests" not in (study / "analysis" / "analysis.md").read_text()


def test_a_read_only_copy_of_the_study_folder_is_analysed_and_reported(tmp_path, top2_file):
    study = quick_study(tmp_path)
    study.chmod(stat.S_IRUSR | stat.S_IXUSR)
    (study / "results.sqlite").chmod(stat.S_IRUSR)
    try:
        before = fingerprint(study)
        common = ["--imports", str(top2_file), "--measures", "top2_mean"]
        analyzed = runner.invoke(
            app, ["study", "analyze", str(study), *common, "--analysis-dir", str(tmp_path / "a")]
        )
        assert analyzed.exit_code == 0, analyzed.output
        html = tmp_path / "report.html"
        reported = runner.invoke(app, ["report", str(study), *common, "--out", str(html)])
        assert reported.exit_code == 0, reported.output
        assert fingerprint(study) == before
        page = html.read_text(encoding="utf-8")
        assert "mean of 2 worst" in page and measure_code_digest("top2_mean") in page
        if os.geteuid() != 0:  # root writes anywhere; elsewhere the folder is truly read-only
            assert not os.access(study, os.W_OK)
    finally:
        study.chmod(0o755)
        (study / "results.sqlite").chmod(0o644)


@pytest.mark.parametrize(
    "args",
    [
        ["measures", str(REPO / "examples" / "results.csv")],
        ["import", "domainbed", "no-such-sweep"],
        ["study", "analyze", "no-such-study"],
        ["report", "no-such-study"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
@pytest.mark.parametrize("problem", ["syntax", "missing"])
def test_a_bad_imports_file_is_one_error_line_and_nothing_written(tmp_path, args, problem):
    bad = tmp_path / "broken_measures.py"
    if problem == "syntax":
        bad.write_text("def oops(:\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    extra = ["--out", str(tmp_path / "r.html")] if args[0] == "report" else ["-o", str(out)]
    result = runner.invoke(app, [*args, "--imports", str(bad), *extra])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --imports") and "broken_measures.py" in line
    assert ("SyntaxError" in line) if problem == "syntax" else ("no such file" in line)
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        ["broken_measures.py"] if problem == "syntax" else []
    )


def test_measures_command_scores_a_measure_from_an_imports_file(top2_file):
    results = REPO / "examples" / "results.csv"  # columns algorithm, seed, split, env, error
    args = ["measures", str(results), "--imports", str(top2_file), "--measures", "top2_mean"]
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "top2_mean" in shown.stdout
    scored = runner.invoke(app, [*args, "-f", "csv"])
    assert scored.exit_code == 0, scored.output
    table = pd.read_csv(io.StringIO(scored.stdout))
    got = table[(table["table"] == "measures") & (table["measure"] == "top2_mean")]
    got = got.set_index(["algorithm", "seed"])["value"].sort_index()
    rows = pd.read_csv(results)
    loo = rows[rows["split"] == "loo"]
    expected = loo.groupby(["algorithm", "seed"])["error"].apply(lambda e: np.sort(e)[-2:].mean())
    np.testing.assert_allclose(got.to_numpy(), expected.sort_index().to_numpy(), rtol=1e-12)


def test_report_refuses_measures_for_a_results_file(tmp_path):
    html = tmp_path / "r.html"
    result = runner.invoke(
        app,
        ["report", str(REPO / "examples" / "results.csv"), "--measures", "median",
         "--out", str(html)],
    )  # fmt: skip
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --measures is for a study folder")
    assert not html.exists()


def test_a_bad_measure_spec_is_one_error_line(tmp_path):
    study = quick_study(tmp_path)
    before = fingerprint(study)
    result = runner.invoke(app, ["study", "analyze", str(study), "--measures", "cvar:alpha=7"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "cvar" in line
    assert fingerprint(study) == before


def test_an_analysis_warns_when_the_measure_code_differs_from_the_studys(tmp_path, top2_file):
    config = synthetic_config(imports=[str(top2_file)], seeds=[0])
    run_study(config, tmp_path / "study", workers=1, progress=False)
    unregister_measure("top2_mean")  # the edited file registers it again when loaded
    top2_file.write_text(TOP2 + "\n# edited after the study ran\n", encoding="utf-8")
    result = runner.invoke(
        app,
        ["study", "analyze", str(tmp_path / "study"), "--imports", str(top2_file),
         "--measures", "top2_mean", "--analysis-dir", str(tmp_path / "a")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.stderr.splitlines() if "mixes versions" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("warning: measure top2_mean")
    assert "mixes versions" in (tmp_path / "a" / "analysis.md").read_text()
    # the same file as the study ran it: no warning
    unregister_measure("top2_mean")
    top2_file.write_text(TOP2, encoding="utf-8")
    again = runner.invoke(
        app,
        ["study", "analyze", str(tmp_path / "study"), "--imports", str(top2_file),
         "--measures", "top2_mean", "--analysis-dir", str(tmp_path / "b")],
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    assert "mixes versions" not in again.stderr


def test_import_domainbed_adds_a_column_per_measure(top2_file):
    requires_path(DOMAINBED_SWEEP, "the DomainBed VLCS sweep fixture")
    base = ["import", "domainbed", str(DOMAINBED_SWEEP), "-s", "training_domain"]
    long_form = runner.invoke(app, [*base, "-f", "csv"])
    assert long_form.exit_code == 0, long_form.output
    rows = pd.read_csv(io.StringIO(long_form.stdout))
    # DomainBed's aggregation: per environment the mean accuracy over trials, then errors in %
    accuracy = rows.groupby(["algorithm", "environment"])["accuracy"].mean()
    expected = (100 * (1 - accuracy)).groupby("algorithm").apply(lambda e: np.sort(e)[-2:].mean())
    shown = runner.invoke(app, [*base, "--imports", str(top2_file), "--measures", "top2_mean"])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("Selection "))
    assert lines[header].rstrip().endswith("mean of 2 worst")
    for line in lines[header + 1 : header + 1 + len(expected)]:
        algorithm, value = line.split()[3], line.split()[-1]  # after the 3-word selection name
        assert value == f"{expected[algorithm]:.1f}", line


def test_a_study_whose_config_names_a_users_measure_needs_its_file(tmp_path, top2_file):
    from oodeval.study.config import DEFAULT_MEASURES

    config = synthetic_config(
        imports=[str(top2_file)], seeds=[0], measures=[*DEFAULT_MEASURES, "top2_mean"]
    )
    run_study(config, tmp_path / "study", workers=1, progress=False)
    unregister_measure("top2_mean")  # as in a fresh process that has not loaded the file
    sys.modules.pop("top2_measures", None)
    out = tmp_path / "a"
    missing = runner.invoke(app, ["study", "analyze", str(tmp_path / "study")])
    assert missing.exit_code == 2
    (line,) = missing.stderr.splitlines()
    assert "'top2_mean'" in line and "--imports FILE" in line
    given = runner.invoke(
        app,
        ["study", "analyze", str(tmp_path / "study"), "--imports", str(top2_file),
         "--analysis-dir", str(out)],
    )  # fmt: skip
    assert given.exit_code == 0, given.output
    assert "top2_mean" in pd.read_csv(out / "units.csv").columns
