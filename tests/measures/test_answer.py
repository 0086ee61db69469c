"""The answer first: `answer_line` (one function for every output), the few-algorithm warning,
and how `oodeval measures` and `oodeval import domainbed` print them (the answer opens table
output; csv and json stay machine-readable)."""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.measures.meta import (
    MIN_INTERVAL_ALGORITHMS,
    MIN_PICK_ENVIRONMENTS,
    answer_line,
    choices,
    environment_warning,
    interval_warning,
    seed_means,
    spearman_critical_value,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "results.csv"
SWEEP = ROOT / "examples" / "domainbed-sweep"
runner = CliRunner()


def _units(average, worst_plus_gap, algorithms=("A", "B", "C"), **extra):
    return {
        "algorithm": list(algorithms),
        "average": average,
        "worst_plus_gap": worst_plus_gap,
        **extra,
    }


# ----------------------------------------------------------------------------- answer_line


def test_disagreement_agreement_and_ties():
    assert answer_line(_units([0.2, 0.1, 0.3], [0.5, 0.6, 0.4])) == (
        "worst+gap picks C; average picks B (they disagree)"
    )
    assert answer_line(_units([0.2, 0.1, 0.3], [0.5, 0.4, 0.6])) == (
        "worst+gap picks B; average picks B (they agree)"
    )
    # a tie is named in full with one separator, and compared as a set
    assert answer_line(_units([0.1, 0.3, 0.1], [0.3 - 0.1, 0.5, 0.4 - 0.2])) == (
        "worst+gap picks A|C (tied); average picks A|C (tied) (they agree)"
    )
    assert answer_line(_units([0.1, 0.3, 0.1], [0.2, 0.5, 0.4])) == (
        "worst+gap picks A; average picks A|C (tied) (they disagree)"
    )


def test_seeds_are_aggregated_by_each_measures_mean_not_by_the_most_frequent_pick():
    """Per seed average picks A, A, B (A most often); on the mean over seeds B (0.11 < 0.2)."""
    units = {
        "seed": [0] * 3 + [1] * 3 + [2] * 3,
        "algorithm": ["A", "B", "C"] * 3,
        "average": [0.10, 0.11, 0.5, 0.10, 0.11, 0.5, 0.40, 0.11, 0.5],
        "worst_plus_gap": [0.3, 0.4, 0.2] * 3,
    }
    per_seed = choices({**units, "scenario": [""] * 9}, ["average"])["selected"]
    assert per_seed.tolist() == ["A", "A", "B"]
    means = seed_means({**units, "scenario": [""] * 9}, ["average"])
    assert dict(zip(means["algorithm"], means["average"].round(12), strict=True)) == {
        "A": 0.2,
        "B": 0.11,
        "C": 0.5,
    }
    assert answer_line(units) == (
        "worst+gap picks C; average picks B (they disagree; on each measure's mean over 3 seeds)"
    )


def test_the_ideal_measure_says_who_picks_its_choice():
    base = _units([0.2, 0.1, 0.3], [0.5, 0.6, 0.4])
    assert answer_line({**base, "ideal": [0.9, 0.8, 0.3]}) == (
        "worst+gap picks C; average picks B; the ideal measure picks C (they disagree; "
        "worst+gap picks the ideal's choice)"
    )
    assert answer_line({**base, "ideal": [0.1, 0.8, 0.9]}).endswith(
        "the ideal measure picks A (they disagree; neither picks the ideal's choice)"
    )
    agree = _units([0.2, 0.1, 0.3], [0.5, 0.4, 0.6], ideal=[0.9, 0.1, 0.3])
    assert answer_line(agree).endswith("(they agree; both pick the ideal's choice)")


def test_scenarios_one_algorithm_chosen_measures_and_the_callers_wording():
    units = {
        "scenario": ["s1"] * 2 + ["s2"],
        "algorithm": ["A", "B", "A"],
        "average": [0.1, 0.2, 0.3],
        "worst_plus_gap": [0.5, 0.4, 0.3],
    }
    assert answer_line(units) == (
        "s1: worst+gap picks B; average picks A (they disagree). "
        "s2: only one algorithm (A), so nothing to choose"
    )
    # without both worst+gap and average, the line names the measures there are
    assert answer_line({"algorithm": ["A", "B"], "worst": [0.3, 0.2], "gap": [0.1, 0.2]}) == (
        "worst picks B; gap picks A (they disagree)"
    )
    assert answer_line({"algorithm": ["A", "B"], "gap": [0.1, 0.2], "average": [0.3, 0.2]}) == (
        "average picks B; gap picks A (they disagree)"
    )
    assert answer_line(_units([0.2, 0.1, 0.3], [0.5, 0.6, 0.4]), ["average"], how="x") == (
        "average picks B (x)"
    )
    with pytest.raises(OodevalError, match="no measure column"):
        answer_line({"algorithm": ["A"], "error": [0.1]})


# ----------------------------------------------------------------------------- few algorithms


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
def test_critical_value_is_the_exact_permutation_tail(n):
    """Brute force with scipy: every ordering of n ranks, P(|rho| >= c) <= 5% at the smallest c."""
    rhos = np.array(
        [stats.spearmanr(np.arange(n), p).statistic for p in itertools.permutations(range(n))]
    )
    values = np.unique(np.round(np.abs(rhos), 9))
    ok = [v for v in values if np.mean(np.abs(rhos) >= v - 1e-9) <= 0.05]
    want = min(ok) if ok else np.nan
    assert spearman_critical_value(n) == pytest.approx(want, abs=1e-9, nan_ok=True)


def test_interval_warning_rule():
    assert MIN_INTERVAL_ALGORITHMS == 8
    assert interval_warning(8) == interval_warning(14) == ""
    five = interval_warning(5)
    assert five.startswith("only 5 algorithms: with fewer than 8, a rank correlation")
    assert "only a perfect ordering (|rho| = 1) differs from 0 at the 5% level" in five
    assert "only |rho| >= 0.786 differs from 0" in interval_warning(7)
    assert "no rho, not even 1, differs from 0 at the 5% level with 4" in interval_warning(4)


# ----------------------------------------------------------------------------- oodeval measures


def test_environment_warning_below_four_environments():
    assert MIN_PICK_ENVIRONMENTS == 4 and environment_warning(4) == environment_warning(101) == ""
    assert "scored on 3 leave-one-out errors" in environment_warning(3)
    assert "weighs its gap by 1/(N - 2) = 1)" in environment_warning(3)
    assert "worst+gap needs at least 3" in environment_warning(2)


def test_measures_warns_about_three_environments(tmp_path):
    rows = [
        {"algorithm": a, "environment": e, "split": "loo", "error": err}
        for a, errs in {"A": (0.1, 0.2, 0.3), "B": (0.2, 0.2, 0.25)}.items()
        for e, err in zip(("e1", "e2", "e3"), errs, strict=True)
    ]
    path = tmp_path / "three.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    res = _measures(path)
    assert res.exit_code == 0, res.output
    assert f"warning: {environment_warning(3)}" in res.stderr.splitlines()


def _measures(*args):
    return runner.invoke(app, ["measures", *map(str, args)])


def test_measures_table_opens_with_the_answer_and_warns_once():
    res = _measures(EXAMPLE)
    assert res.exit_code == 0, res.output
    from oodeval import score

    answer = score(EXAMPLE).answer
    assert res.stdout.splitlines()[0] == answer
    assert answer.startswith("worst+gap picks ") and "(they disagree" in answer
    warnings = [x for x in res.stderr.splitlines() if x.startswith("warning: ")]
    assert warnings == [f"warning: {interval_warning(5)}"]
    md = _measures(EXAMPLE, "-f", "markdown")
    assert md.stdout.splitlines()[0] == answer


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_machine_readable_output_keeps_the_answer_on_stderr(fmt):
    res = _measures(EXAMPLE, "-f", fmt)
    assert res.exit_code == 0
    from oodeval import score

    answer = score(EXAMPLE).answer
    assert answer not in res.stdout
    assert f"answer: {answer}" in res.stderr.splitlines()
    if fmt == "json":
        assert json.loads(res.stdout)["source"] == str(EXAMPLE)
    else:
        frame = pd.read_csv(io.StringIO(res.stdout))
        assert list(frame.columns) == [
            "table",
            "seed",
            "measure",
            "algorithm",
            "statistic",
            "value",
        ]


def test_no_warning_with_enough_algorithms_or_without_correlations(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for a in range(MIN_INTERVAL_ALGORITHMS):
        for e in range(4):
            rows.append((f"alg{a}", "loo", f"e{e}", rng.uniform(0.1, 0.9)))
        for e in range(5):
            rows.append((f"alg{a}", "all", f"x{e}", rng.uniform(0.1, 0.9)))
    path = tmp_path / "eight.csv"
    pd.DataFrame(rows, columns=["algorithm", "split", "environment", "error"]).to_csv(
        path, index=False
    )
    res = _measures(path, "--bootstrap", "100")
    assert res.exit_code == 0 and "warning:" not in res.stderr
    loo_only = tmp_path / "loo.csv"
    raw = pd.read_csv(EXAMPLE)
    raw[raw.split == "loo"].to_csv(loo_only, index=False)
    res = _measures(loo_only)
    assert res.exit_code == 0 and "warning:" not in res.stderr


# ----------------------------------------------------------------------------- DomainBed


def test_import_domainbed_opens_with_the_disagreement_under_training_domain_selection():
    res = runner.invoke(app, ["import", "domainbed", str(SWEEP), "-s", "training_domain"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == (
        "VLCS, training-domain validation set: worst+gap picks IRM; average picks Mixup (they "
        "disagree; on accuracies averaged over 3 trials, as in the tables)"
    )
    # the line agrees with the table's rank columns below it
    table = [line.split() for line in res.stdout.splitlines() if "validation set " in line]
    ranks = {row[3]: (int(row[-2]), int(row[-1])) for row in table if len(row) > 8}
    assert ranks["Mixup"][0] == 1 and ranks["IRM"][1] == 1
    assert "warning:" not in res.stderr  # 3 trials per cell


def test_import_domainbed_csv_stays_the_long_form_and_feeds_measures(tmp_path):
    out = tmp_path / "td.csv"
    res = runner.invoke(
        app, ["import", "domainbed", str(SWEEP), "-s", "training_domain", "-f", "csv", "-o", out]
    )
    assert res.exit_code == 0
    assert res.stderr.splitlines()[0].startswith("answer: VLCS, training-domain validation set:")
    frame = pd.read_csv(out)
    assert list(frame.columns)[:3] == ["dataset", "selection", "algorithm"]
    measured = _measures(out)
    assert measured.stdout.splitlines()[0] == (
        "worst+gap picks IRM; average picks Mixup (they disagree; on each measure's mean over 3 "
        "seeds)"
    )


def test_import_domainbed_warns_when_cells_have_few_trials(domainbed_sweep):
    res = runner.invoke(app, ["import", "domainbed", str(domainbed_sweep), "-s", "training_domain"])
    assert res.exit_code == 0
    assert res.stdout.splitlines()[0] == (
        "VLCS, training-domain validation set: only one algorithm (ERM), so nothing to choose"
    )
    assert "warning: 4 of 4 table cells have fewer than 3 trials (as few as 2)" in res.stderr


# ----------------------------------------------------------------------------- the fixture


def test_the_committed_sweep_is_what_the_script_writes(tmp_path):
    out = tmp_path / "sweep"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_domainbed_sweep.py"), str(out)],
        check=True,
        capture_output=True,
    )
    made = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert made == sorted(p.relative_to(SWEEP) for p in SWEEP.rglob("*"))
    for rel in made:
        if (out / rel).is_file():
            assert (out / rel).read_bytes() == (SWEEP / rel).read_bytes(), rel
    assert len(list(out.iterdir())) == 5 * 4 * 3 * 2


def test_the_sweep_has_domainbeds_record_format(domainbed_sweep):
    """Same keys as the real DomainBed sweep fixture, in the same order, and a `done` per run."""
    real = json.loads(next(domainbed_sweep.glob("*/results.jsonl")).read_text().splitlines()[0])
    for run in SWEEP.iterdir():
        assert (run / "done").is_file() and (run / "done").read_bytes() == b""
        for line in (run / "results.jsonl").read_text().splitlines():
            record = json.loads(line)
            assert list(record) == list(real) and list(record["args"]) == list(real["args"])
            assert record["args"]["output_dir"].endswith(run.name)


# ----------------------------------------------------------------------------- the reports


def test_results_report_opens_with_the_answer_and_warns_in_the_correlation_section():
    from oodeval import score
    from oodeval.report.results_report import results_sections

    sections = results_sections(EXAMPLE)
    first = sections[0]
    assert (first.title, first.lead, first.anchor) == ("Answer", True, "answer")
    assert first.intro == score(EXAMPLE).answer  # short names: shown as they are
    notes = [n for s in sections for n in s.notes]
    assert f"Warning: {interval_warning(5)}." in notes


def test_study_report_answer_is_the_seed_mean_pick_per_scenario():
    from oodeval.report.study_report import answer_section

    units = pd.DataFrame(
        {
            "scenario": ["s/1"] * 6 + ["s/2"] * 3,
            "seed": [0, 0, 0, 1, 1, 1, 0, 0, 0],
            "algorithm": ["A", "B", "C"] * 3,
            "worst_plus_gap": [0.3, 0.2, 0.4, 0.3, 0.2, 0.4, 0.1, 0.2, 0.3],
            "average": [0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.3, 0.2, 0.1],
            "ideal": [0.5, 0.4, 0.6, 0.5, 0.4, 0.6, 0.2, 0.3, 0.4],
            "worst_only": 0.0,  # other measure columns are not named
        }
    )
    section = answer_section({"units": units})
    assert section.lead and section.anchor == "answer"
    # one line per scenario, the scenario first: a list to scan, not one paragraph
    assert section.intro == "Which algorithm each measure picks, per scenario:"
    assert section.items == [
        (
            "s/1",
            "worst+gap picks B; average picks A; the ideal measure picks B (they disagree; "
            "worst+gap picks the ideal's choice; on each measure's mean over 2 seeds)",
        ),
        (
            "s/2",
            "worst+gap picks A; average picks C; the ideal measure picks A (they disagree; "
            "worst+gap picks the ideal's choice)",
        ),
    ]
    # the same words as the one-line answer the CLI prints
    assert ". ".join(f"{h}: {t}" for h, t in section.items) == answer_line(units)


def test_verdict_warning_counts_only_scenarios_with_a_verdict():
    from oodeval.study.analysis import verdict_warning

    table = pd.DataFrame({"verdict": ["ahead, not clearly", "undefined"], "n_algorithms": [7, 1]})
    assert verdict_warning(table) == interval_warning(7)
    assert verdict_warning(table.assign(n_algorithms=[9, 1])) == ""
    assert verdict_warning(table.iloc[1:]) == ""
