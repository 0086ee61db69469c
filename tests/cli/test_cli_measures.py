"""`oodeval measures RESULTS` on the shipped example (numbers checked against a plain-Python
recomputation and hand arithmetic) and on every kind of bad input (one line, exit 2)."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from scipy import stats
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.measures import bootstrap_correlation_ci

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "results.csv"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["measures", *map(str, args)])


def plain_python_reference(path: Path):
    """Recompute worst+gap, average and ideal from the CSV with the csv module only."""
    loo, full = defaultdict(dict), defaultdict(dict)
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["seed"], row["algorithm"])
            target = loo if row["split"] == "loo" else full
            target[key][row["environment"]] = float(row["error"])
    ref = {}
    for key, envs in loo.items():
        e = list(envs.values())
        hi, lo = max(e), min(e)
        ref[key] = {
            "average": sum(e) / len(e),
            "worst_plus_gap": hi + (hi - lo) / (len(e) - 2),
            "ideal": max(full[key].values()),
        }
    return ref


def write(tmp_path: Path, text: str, name: str = "results.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- the example file -------------------------------------------------------------------------


def test_example_table_shows_hand_computed_numbers():
    result = run(EXAMPLE)
    assert result.exit_code == 0, result.output
    out = result.stdout
    # ERM, seed 0, loo errors 0.9013 0.2039 0.1695 0.1608 0.1871 0.1249 (N = 6):
    # worst 0.9013, best 0.1249, gap 0.7764, worst+gap = 0.9013 + 0.7764 / 4 = 1.0954,
    # average = 1.7475 / 6 = 0.29125; scaled worst = 7 / 6 * 0.9013 = 1.05152 (Eq. 16);
    # ideal = max of its all rows = 0.8334
    erm0 = next(line for line in out.splitlines() if line.split()[:2] == ["0", "ERM"])
    assert erm0.split()[2:] == [
        "0.2913", "0.9013", "0.1249", "0.7764", "1.0954", "0.9013", "0.1941", "1.0515", "0.8334"
    ]  # fmt: skip
    assert "5 algorithms, 2 seeds, N=6 given environments (loo), 11 environments in E_all" in out
    for title in ("Rank correlation", "over seeds", "Selected algorithm", "degradation"):
        assert title in out
    # seed 0: average selects Mixup (ideal 0.9133); the truly best is IRM (ideal 0.5562)
    avg0 = next(line for line in out.splitlines() if line.split()[:3] == ["0", "average", "Mixup"])
    assert avg0.split()[-2:] == ["0.9133", "0.3571"]


def test_example_json_matches_an_independent_recomputation():
    result = run(EXAMPLE, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    ref = plain_python_reference(EXAMPLE)
    assert len(data["measures"]) == 10
    for rec in data["measures"]:
        want = ref[(rec["seed"], rec["algorithm"])]
        for key, value in want.items():
            assert rec[key] == pytest.approx(value, abs=1e-12), (rec["algorithm"], key)
    erm0 = next(r for r in data["measures"] if r["seed"] == "0" and r["algorithm"] == "ERM")
    assert erm0["worst_plus_gap"] == pytest.approx(0.9013 + (0.9013 - 0.1249) / 4, abs=1e-12)
    assert erm0["average"] == pytest.approx(0.29125, abs=1e-12)

    algs = data["info"]["algorithms"]
    for seed in ("0", "1"):
        ideal = [ref[(seed, a)]["ideal"] for a in algs]
        for measure in ("average", "worst_plus_gap"):
            scores = [ref[(seed, a)][measure] for a in algs]
            corr = next(
                r for r in data["correlations"] if r["seed"] == seed and r["measure"] == measure
            )
            assert corr["spearman"] == pytest.approx(stats.spearmanr(scores, ideal).statistic)
            assert corr["kendall"] == pytest.approx(stats.kendalltau(scores, ideal).statistic)
            sel = next(
                r for r in data["selections"] if r["seed"] == seed and r["measure"] == measure
            )
            picked = algs[scores.index(min(scores))]
            assert sel["selected"] == picked
            assert sel["degradation"] == pytest.approx(
                abs(min(ideal) - ideal[algs.index(picked)]), abs=1e-12
            )
    summary = {r["measure"]: r for r in data["correlation_summary"]}
    per_seed = [r["spearman"] for r in data["correlations"] if r["measure"] == "worst_plus_gap"]
    assert summary["worst_plus_gap"]["spearman_mean"] == pytest.approx(sum(per_seed) / 2)
    assert summary["worst_plus_gap"]["spearman_std"] == pytest.approx(
        abs(per_seed[0] - per_seed[1]) / 2**0.5
    )  # ddof = 1 with two seeds
    assert data["notes"] == []


def test_example_csv_markdown_and_output_file(tmp_path):
    res = run(EXAMPLE, "--format", "csv")
    assert res.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert set(rows[0]) == {"table", "seed", "measure", "algorithm", "statistic", "value"}
    wg = next(
        r
        for r in rows
        if r["table"] == "measures"
        and r["seed"] == "0"
        and r["algorithm"] == "ERM"
        and r["measure"] == "worst_plus_gap"
    )
    assert float(wg["value"]) == pytest.approx(1.0954, abs=1e-12)
    md = run(EXAMPLE, "--format", "markdown")
    assert md.exit_code == 0 and "### Measures per algorithm" in md.stdout
    assert "| seed | algorithm | average |" in md.stdout
    target = tmp_path / "out.json"
    res = run(EXAMPLE, "--format", "json", "--output", target)
    assert res.exit_code == 0 and res.stdout == ""
    assert json.loads(target.read_text())["info"]["n_given"] == 6


def test_bootstrap_option_adds_seeded_intervals():
    args = (EXAMPLE, "--format", "json", "--bootstrap", "300", "--seed", "5")
    data = json.loads(run(*args).stdout)
    assert json.loads(run(*args).stdout) == data  # same seed, same numbers
    ref = plain_python_reference(EXAMPLE)
    algs = data["info"]["algorithms"]
    corr = next(
        r for r in data["correlations"] if r["seed"] == "1" and r["measure"] == "worst_plus_gap"
    )
    ci = bootstrap_correlation_ci(
        [ref[("1", a)]["worst_plus_gap"] for a in algs],
        [ref[("1", a)]["ideal"] for a in algs],
        n_resamples=300,
        seed=5,
    )
    assert (corr["spearman_low"], corr["spearman_high"]) == pytest.approx(ci["spearman"])
    assert (corr["kendall_low"], corr["kendall_high"]) == pytest.approx(ci["kendall"])
    assert corr["n_valid"] == ci["n_valid"]
    res = run(EXAMPLE, "--bootstrap", "100", "--confidence", "1")
    assert res.exit_code == 2 and "confidence must lie strictly between 0 and 1" in res.stderr


def test_json_lines_accuracy_and_percent_inputs_give_the_same_numbers(tmp_path):
    base = json.loads(run(EXAMPLE, "--format", "json").stdout)
    with open(EXAMPLE, newline="") as fh:
        rows = list(csv.DictReader(fh))
    jsonl = "\n".join(json.dumps({**r, "error": float(r["error"])}) for r in rows)
    as_jsonl = json.loads(run(write(tmp_path, jsonl, "r.jsonl"), "--format", "json").stdout)
    # a JSON list of the same rows, as `--format json` prints a results table
    listed = json.dumps([{**r, "error": float(r["error"])} for r in rows])
    as_list = json.loads(run(write(tmp_path, listed, "r.json"), "--format", "json").stdout)
    acc_pct = "algorithm,seed,split,environment,accuracy\n" + "".join(
        f"{r['algorithm']},{r['seed']},{r['split']},{r['environment']},"
        f"{100 * (1 - float(r['error'])):.2f}\n"
        for r in rows
    )
    res = run(write(tmp_path, acc_pct), "--percent", "--format", "json")
    assert res.exit_code == 0, res.output
    as_acc = json.loads(res.stdout)
    for other in (as_jsonl, as_list, as_acc):
        for a, b in zip(base["measures"], other["measures"], strict=True):
            for key, value in a.items():
                assert b[key] == pytest.approx(value, abs=1e-12)


def test_measures_option_and_no_seed_column(tmp_path):
    text = "algorithm,environment,error,split\n" + "".join(
        f"{a},e{k},{v},loo\n"
        for a, vals in {"ERM": (0.1, 0.2, 0.4, 0.3), "IRM": (0.3, 0.3, 0.35, 0.3)}.items()
        for k, v in enumerate(vals)
    )
    res = run(write(tmp_path, text), "--measures", "average,worst_plus_gap", "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["measures"][0] == {"algorithm": "ERM", "average": 0.25, "worst_plus_gap": 0.55}
    assert data["measures"][1]["worst_plus_gap"] == pytest.approx(0.35 + 0.05 / 2)
    # without all rows: selections but no ideal, correlations or degradation
    assert "correlations" not in data
    assert data["selections"][1] == {
        "measure": "worst_plus_gap", "selected": "IRM", "tied": "", "score": 0.375
    }  # fmt: skip


def test_single_algorithm_prints_the_table_and_notes_skipped_correlations(tmp_path):
    text = "algorithm,environment,error,split\n" + "".join(
        f"ERM,e{k},{v},{s}\n" for s in ("loo", "all") for k, v in enumerate((0.1, 0.2, 0.4, 0.3))
    )
    res = run(write(tmp_path, text))
    assert res.exit_code == 0
    assert "ERM" in res.stdout and "0.5500" in res.stdout  # worst+gap still printed
    assert "Rank correlation" not in res.stdout
    assert "note: correlations with the ideal measure need >= 2 algorithms, got 1 (ERM)" in (
        res.stderr
    )
    data = json.loads(run(write(tmp_path, text), "--format", "json").stdout)
    assert any("need >= 2 algorithms" in n for n in data["notes"])


def test_constant_measure_and_ties_are_reported_as_notes(tmp_path):
    rows = {"ERM": (0.1, 0.2, 0.3), "IRM": (0.2, 0.3, 0.4), "VREx": (0.1, 0.2, 0.3)}
    ideal = {"ERM": 0.5, "IRM": 0.4, "VREx": 0.6}
    text = "algorithm,environment,error,split\n"
    for a, vals in rows.items():
        text += "".join(f"{a},e{k},{v},loo\n" for k, v in enumerate(vals))
        text += f"{a},e0,{ideal[a]},all\n"
    res = run(write(tmp_path, text), "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    gap = next(r for r in data["correlations"] if r["measure"] == "gap")
    assert gap["spearman"] is None  # gap is 0.2 for every algorithm
    assert any("correlation of gap with the ideal is undefined" in n for n in data["notes"])
    wg = next(r for r in data["selections"] if r["measure"] == "worst_plus_gap")
    assert wg["selected"] == "ERM" and wg["tied"] == "ERM|VREx"  # TIE_SEPARATOR
    assert wg["degradation"] == pytest.approx(0.1)


# --- bad input: one line on stderr, exit 2, no traceback ------------------------------------

GOOD_HEADER = "algorithm,environment,error,split\n"


def rows_for(algs=("ERM", "IRM"), envs=("e1", "e2", "e3"), split="loo", value=0.2):
    return "".join(f"{a},{e},{value},{split}\n" for a in algs for e in envs)


BAD_INPUTS = {
    "missing_column": (
        "algorithm,environment,split\nERM,e1,loo\n",
        r"missing column\(s\) error \(or accuracy\)",
    ),
    "unknown_split": (
        GOOD_HEADER + rows_for() + "ERM,e1,0.3,test\n",
        "line 8: unknown split 'test'; split must be 'loo'",
    ),
    "percentages": (
        GOOD_HEADER + "ERM,e1,25.0,loo\n",
        "line 2: error 25 > 1 looks like percentages; pass --percent or divide by 100",
    ),
    "nan": (GOOD_HEADER + rows_for().replace("IRM,e2,0.2", "IRM,e2,NaN"), "line 6: error is NaN"),
    "missing_environment": (
        GOOD_HEADER + rows_for() + "IRM,e4,0.3,loo\n",
        "algorithm ERM has no loo row for environment e4, which algorithm IRM has",
    ),
    "duplicate": (
        GOOD_HEADER + rows_for() + "ERM,e2,0.3,loo\n",
        "duplicate rows for algorithm ERM, split loo, environment e2 \\(lines 3 and 8\\)",
    ),
    "two_environments": (
        GOOD_HEADER + rows_for(envs=("e1", "e2")),
        r"worst\+gap \(Eq. 6\) is undefined for N=2 .*needs >= 3 environments.*--measures",
    ),
    "empty_file": ("", "is empty; expected a CSV header"),
    "header_only": (GOOD_HEADER, "has a header but no rows"),
    "non_numeric": (
        GOOD_HEADER + rows_for().replace("ERM,e3,0.2", "ERM,e3,low"),
        "line 4: error 'low' is not a number",
    ),
    "both_value_columns": (
        "algorithm,environment,error,accuracy,split\nERM,e1,0.2,0.8,loo\n",
        "both an error and an accuracy column",
    ),
    "negative": (GOOD_HEADER + "ERM,e1,-0.1,loo\n", "negative"),
    "empty_cell": (GOOD_HEADER + "ERM,,0.2,loo\n", "line 2: environment is empty"),
    "no_loo_rows": (GOOD_HEADER + rows_for(split="all"), "has no loo rows"),
    "ragged_csv": (GOOD_HEADER + "ERM,e1,0.2,loo,extra,more\n", "not a readable CSV"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gives_one_line_and_exit_2(tmp_path, case):
    text, pattern = BAD_INPUTS[case]
    res = run(write(tmp_path, text))
    assert res.exit_code == 2, (case, res.output)
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize(
    "text, pattern",
    [
        ('{"algorithm": "ERM", "environment": "e1", "error": 0.2, "split": "loo"}\n{"algorithm": ',
         "line 2 is not valid JSON"),
        ('[1, 2, 3]\n', "row 1 is a JSON int, not an object"),
        ('[]\n', "holds no rows"),
        ('[{"algorithm": "ERM"},\n', "is not valid JSON"),
        ('[{"algorithm": "ERM", "environment": "e1", "error": NaN, "split": "loo"}]\n',
         "row 1: error is NaN"),
        ('{"algorithm": "ERM", "environment": "e1", "error": NaN, "split": "loo"}\n',
         "line 1: error is NaN"),
        ('{"algorithm": "ERM", "environment": "e1", "error": true, "split": "loo"}\n',
         "line 1: error 'true' is not a number"),
        ("\n\n", "is empty"),
    ],
)  # fmt: skip
def test_bad_json_lines(tmp_path, text, pattern):
    res = run(write(tmp_path, text, "results.jsonl"))
    assert res.exit_code == 2
    assert pattern in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_other_usage_errors(tmp_path):
    res = run(tmp_path / "nope.csv")
    assert res.exit_code == 2 and "file not found" in res.stderr
    res = run(EXAMPLE, "--measures", "average,wrost")
    assert res.exit_code == 2 and "unknown measure(s) wrost" in res.stderr
    pct = write(tmp_path, GOOD_HEADER + "ERM,e1,250,loo\n")
    res = run(pct, "--percent")
    assert res.exit_code == 2 and "> 100 is not a percentage" in res.stderr


def test_missing_seed_for_one_algorithm_is_named(tmp_path):
    text = "algorithm,seed,environment,error,split\n" + "".join(
        f"{a},{s},{e},0.2,loo\n"
        for a in ("ERM", "IRM")
        for s in (0, 1)
        for e in ("e1", "e2", "e3")
        if not (a == "IRM" and s == 1)
    )
    res = run(write(tmp_path, text))
    assert res.exit_code == 2
    assert "algorithm IRM (seed 1) has no loo row for environment e1, which algorithm ERM has" in (
        res.stderr
    )


def test_subprocess_bad_input_exits_2_without_traceback(tmp_path):
    bad = write(tmp_path, GOOD_HEADER + "ERM,e1,42,loo\n")
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "measures", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "error: results.csv line 2: error 42 > 1 looks like percentages; pass --percent or "
        "divide by 100"
    )


def test_header_counts_a_single_seed_in_the_singular(tmp_path):
    text = "algorithm,environment,error,split,seed\n" + "".join(
        f"{a},e{k},0.{k + 1},loo,7\n" for a in ("ERM", "IRM") for k in range(3)
    )
    res = run(write(tmp_path, text))
    assert res.exit_code == 0, res.output
    assert "2 algorithms, 1 seed, N=3 given environments" in res.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bootstrap", "-1"], "--bootstrap must be 0 (off) or a number of resamples"),
        (["--bootstrap", "10", "--confidence", "1.5"], "confidence must lie strictly between"),
    ],
)
def test_out_of_range_options_give_one_line(args, message):
    res = run(EXAMPLE, *args)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
