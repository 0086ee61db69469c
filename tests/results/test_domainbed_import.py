"""`oodeval import domainbed`: DomainBed's three selection methods on a real VLCS sweep.

Expected numbers come from a brute-force loop over the raw JSON written here from DomainBed's
published definitions, and from the table DomainBed's own collect_results prints for this very
sweep (its domainbed/misc/test_sweep_results.txt).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.results.domainbed import domain_measures_table, long_form, results_table, select
from oodeval.results.selection import (
    CHECKPOINT_COLUMNS,
    SELECTION_METHODS,
    select_training_domain,
    selection_method,
)
from oodeval.results.sweep import SweepWarning, checkpoint_table, read_sweep

ENVS = ["C", "L", "S", "V"]

# DomainBed's collect_results output for this sweep (mean +/- err per test env, then Avg).
DOMAINBED_PRINTED = {
    "training_domain": ["98.0 +/- 0.2", "64.2 +/- 0.8", "74.1 +/- 0.4", "77.1 +/- 0.2", "78.3"],
    "leave_one_domain_out": [
        "96.9 +/- 1.0",
        "64.4 +/- 0.9",
        "70.5 +/- 0.5",
        "76.7 +/- 0.1",
        "77.1",
    ],
    "test_domain": ["96.9 +/- 1.0", "65.9 +/- 0.5", "71.6 +/- 1.3", "76.9 +/- 0.3", "77.8"],
}

runner = CliRunner()


@pytest.fixture(scope="module")
def sweep_dir(domainbed_sweep: Path) -> Path:
    return domainbed_sweep


@pytest.fixture
def sweep_copy(sweep_dir: Path, tmp_path: Path) -> Path:
    """A writable copy of the fixture to damage."""
    dst = tmp_path / "sweep"
    shutil.copytree(sweep_dir, dst, copy_function=shutil.copyfile)
    for root, dirs, _ in os.walk(dst):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    os.chmod(dst, 0o755)
    return dst


def _quiet_read(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SweepWarning)
        return read_sweep(path)


# ----------------------------------------------------------------------------- brute force


def _load_runs(root: Path) -> list[list[dict]]:
    runs = []
    for d in sorted(root.iterdir()):
        if (d / "done").exists() and (d / "results.jsonl").exists():
            lines = (d / "results.jsonl").read_text().splitlines()
            runs.append([json.loads(line) for line in lines if line.strip()])
    return runs


def _runs_with(runs, algorithm, test_envs, trial, hp):
    return [
        run
        for run in runs
        if run[0]["args"]["algorithm"] == algorithm
        and sorted(run[0]["args"]["test_envs"]) == sorted(test_envs)
        and run[0]["args"]["trial_seed"] == trial
        and run[0]["args"]["hparams_seed"] == hp
    ]


def brute_force_choice(runs, method, algorithm, e, trial, n_envs=4):
    """(val, test acc) chosen for test env e and trial, by plain loops over the raw records."""
    hps = sorted({r[0]["args"]["hparams_seed"] for r in runs})
    best = None
    for hp in hps:
        single = _runs_with(runs, algorithm, [e], trial, hp)
        if len(single) != 1:
            continue
        run_best = None
        if method == "training_domain":
            for rec in sorted(single[0], key=lambda r: r["step"]):
                val = sum(rec[f"env{i}_out_acc"] for i in range(n_envs) if i != e) / (n_envs - 1)
                if run_best is None or val > run_best[0]:
                    run_best = (val, rec[f"env{e}_in_acc"])
        elif method == "test_domain":
            rec = max(single[0], key=lambda r: r["step"])
            run_best = (rec[f"env{e}_out_acc"], rec[f"env{e}_in_acc"])
        else:  # leave-one-domain-out: score step s by the paired runs' held-out in-split accs
            for rec in sorted(single[0], key=lambda r: r["step"]):
                vals = []
                for v in range(n_envs):
                    if v == e:
                        continue
                    pair = _runs_with(runs, algorithm, [e, v], trial, hp)
                    at_step = [r for run in pair for r in run if r["step"] == rec["step"]]
                    if at_step:
                        vals.append(at_step[-1][f"env{v}_in_acc"])
                if len(vals) == n_envs - 1:
                    val = sum(vals) / (n_envs - 1)
                    if run_best is None or val > run_best[0]:
                        run_best = (val, rec[f"env{e}_in_acc"])
        if run_best is not None and (best is None or run_best[0] > best[0]):
            best = run_best
    return best


def brute_force_cell(runs, method, algorithm, e):
    trials = sorted({r[0]["args"]["trial_seed"] for r in runs})
    accs = [brute_force_choice(runs, method, algorithm, e, t) for t in trials]
    accs = [a[1] for a in accs if a is not None]
    return 100 * statistics.mean(accs), 100 * statistics.pstdev(accs) / math.sqrt(len(accs))


# ----------------------------------------------------------------------------- reading


def test_reads_all_forty_finished_runs(sweep_dir: Path) -> None:
    sweep = read_sweep(sweep_dir)
    assert sweep.n_runs == 40
    assert len(sweep.records) == 200  # DomainBed reports "Total records: 200" for this sweep
    assert sweep.unfinished_runs == 0 and sweep.warnings == ()
    assert sweep.datasets == ["VLCS"] and sweep.n_envs("VLCS") == 4
    ckpts = checkpoint_table(sweep)
    assert len(ckpts) == 16 * 5  # 4 single-test-env runs x 2 trials x 2 hparams, 5 checkpoints


@pytest.mark.parametrize("method", list(SELECTION_METHODS))
def test_table_matches_brute_force_and_domainbed_print(sweep_dir: Path, method: str) -> None:
    sweep = read_sweep(sweep_dir)
    table = results_table(select(sweep, method), sweep)
    runs = _load_runs(sweep_dir)
    means = []
    for e, name in enumerate(ENVS):
        cell = table[table["environment"] == e].iloc[0]
        mean, err = brute_force_cell(runs, method, "ERM", e)
        assert cell["environment_name"] == name and cell["n_trials"] == 2
        assert cell["mean"] == pytest.approx(mean, abs=1e-9)
        assert cell["err"] == pytest.approx(err, abs=1e-9)
        assert f"{cell['mean']:.1f} +/- {cell['err']:.1f}" == DOMAINBED_PRINTED[method][e]
        means.append(cell["mean"])
    assert f"{sum(means) / 4:.1f}" == DOMAINBED_PRINTED[method][4]


def test_training_domain_selection_is_argmax_over_checkpoints_then_hparams() -> None:
    rows = [
        # env 0, trial 0: hparams 0 peaks at step 1 (val .9), hparams 1 peaks at .8
        ("D", "A", 0, 0, 0, 0, 0.50, 0.70, 0.1),
        ("D", "A", 0, 0, 0, 1, 0.60, 0.90, 0.1),
        ("D", "A", 0, 0, 0, 2, 0.70, 0.80, 0.9),
        ("D", "A", 0, 0, 1, 0, 0.99, 0.80, 0.1),
        ("D", "A", 0, 0, 1, 1, 0.98, 0.80, 0.1),  # tie with step 0: the earliest step wins
    ]
    chosen = select_training_domain(pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS)))
    assert chosen[["hparams", "step", "test_acc"]].values.tolist() == [[0, 1, 0.60]]


def test_unknown_selection_method_names_the_choices() -> None:
    assert selection_method("LODO") == "leave_one_domain_out"
    with pytest.raises(OodevalError, match="training_domain"):
        selection_method("best")


# ----------------------------------------------------------------------------- measures


def test_measures_are_worst_gap_over_test_envs(sweep_dir: Path) -> None:
    sweep = read_sweep(sweep_dir)
    sel = pd.concat([select(sweep, m) for m in SELECTION_METHODS])
    table = results_table(sel, sweep)
    measures = domain_measures_table(table, sweep)
    runs = _load_runs(sweep_dir)
    for method in SELECTION_METHODS:
        errors = [100 - brute_force_cell(runs, method, "ERM", e)[0] for e in range(4)]
        row = measures[measures["selection"] == method].iloc[0]
        assert row["average"] == pytest.approx(sum(errors) / 4)
        assert row["worst"] == pytest.approx(max(errors))
        assert row["gap"] == pytest.approx(max(errors) - min(errors))
        assert row["worst_plus_gap"] == pytest.approx(
            max(errors) + (max(errors) - min(errors)) / (4 - 2)
        )


def _add_algorithm(root: Path, name: str) -> None:
    """Copy every run as algorithm `name`: env 1 (L) in-acc x0.8, the others +0.08 (capped at 1)."""
    for run in sorted(p for p in root.iterdir() if p.is_dir()):
        new = root / f"{run.name}-{name}"
        new.mkdir()
        (new / "done").touch()
        out = []
        for line in (run / "results.jsonl").read_text().splitlines():
            rec = json.loads(line)
            rec["args"]["algorithm"] = name
            for i in range(4):
                acc = rec[f"env{i}_in_acc"]
                rec[f"env{i}_in_acc"] = acc * 0.8 if i == 1 else min(1.0, acc + 0.08)
            out.append(json.dumps(rec))
        (new / "results.jsonl").write_text("\n".join(out) + "\n")


def test_rankings_under_average_and_worst_plus_gap_disagree_when_they_should(
    sweep_copy: Path,
) -> None:
    _add_algorithm(sweep_copy, "Uneven")
    sweep = read_sweep(sweep_copy)
    sel = select(sweep, "training_domain")
    table = results_table(sel, sweep)
    measures = domain_measures_table(table, sweep).set_index("algorithm")
    # brute-force ranking from the brute-force cells
    runs = _load_runs(sweep_copy)
    scores = {}
    for alg in ("ERM", "Uneven"):
        errs = [100 - brute_force_cell(runs, "training_domain", alg, e)[0] for e in range(4)]
        scores[alg] = (sum(errs) / 4, max(errs) + (max(errs) - min(errs)) / 2)
    best_avg = min(scores, key=lambda a: scores[a][0])
    best_wg = min(scores, key=lambda a: scores[a][1])
    assert (best_avg, best_wg) == ("Uneven", "ERM")
    assert measures.loc[best_avg, "rank_average"] == 1
    assert measures.loc[best_wg, "rank_worst_plus_gap"] == 1
    assert measures.loc["ERM", "rank_average"] == 2
    assert measures.loc["Uneven", "rank_worst_plus_gap"] == 2
    result = runner.invoke(app, ["import", "domainbed", str(sweep_copy), "-s", "training_domain"])
    assert result.exit_code == 0, result.output
    assert "Uneven" in result.stdout and "Rank (worst+gap)" in result.stdout


# ----------------------------------------------------------------------------- export


def test_long_form_rows_are_per_trial_loo_accuracies(sweep_dir: Path) -> None:
    sweep = read_sweep(sweep_dir)
    sel = select(sweep, "test_domain")
    lf = long_form(sel, sweep)
    assert list(lf.columns) == [
        "dataset",
        "selection",
        "algorithm",
        "environment",
        "seed",
        "split",
        "accuracy",
    ]
    assert len(lf) == 8 and set(lf["split"]) == {"loo"} and set(lf["seed"]) == {0, 1}
    runs = _load_runs(sweep_dir)
    for r in lf.itertuples(index=False):
        e = ENVS.index(r.environment)
        expected = brute_force_choice(runs, "test_domain", "ERM", e, r.seed)[1]
        assert r.accuracy == pytest.approx(expected, abs=1e-12)


def test_csv_export_feeds_oodeval_measures(sweep_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "td.csv"
    result = runner.invoke(
        app,
        [
            "import",
            "domainbed",
            str(sweep_dir),
            "-s",
            "training_domain",
            "-f",
            "csv",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert len(frame) == 8
    measured = runner.invoke(app, ["measures", str(out)])
    assert measured.exit_code == 0, measured.output
    assert "ERM" in measured.stdout


def test_json_export_is_a_list_of_records(sweep_dir: Path) -> None:
    result = runner.invoke(app, ["import", "domainbed", str(sweep_dir), "-f", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 3 * 8
    assert {r["selection"] for r in rows} == set(SELECTION_METHODS)
    assert "needs one" in result.stderr  # three selections in one export: say how to feed measures


def test_table_and_markdown_output(sweep_dir: Path) -> None:
    result = runner.invoke(app, ["import", "domainbed", str(sweep_dir)])
    assert result.exit_code == 0, result.output
    assert "98.0 +/- 0.2" in result.stdout and "77.8" in result.stdout
    for name in SELECTION_METHODS.values():
        assert name in result.stdout
    md = runner.invoke(app, ["import", "domainbed", str(sweep_dir), "-f", "markdown"])
    assert md.exit_code == 0
    assert "| ERM | 98.0 +/- 0.2 | 64.2 +/- 0.8 | 74.1 +/- 0.4 | 77.1 +/- 0.2 | 78.3 |" in md.stdout


# ----------------------------------------------------------------------------- bad input


def test_folder_without_runs_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(OodevalError, match="no DomainBed runs"):
        read_sweep(tmp_path)
    result = runner.invoke(app, ["import", "domainbed", str(tmp_path)])
    assert result.exit_code == 2
    assert "no DomainBed runs" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_missing_folder_and_single_run_folder(sweep_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(OodevalError, match="not found"):
        read_sweep(tmp_path / "nope")
    one_run = next(p for p in sweep_dir.iterdir() if p.is_dir())
    with pytest.raises(OodevalError, match="single run"):
        read_sweep(one_run)


def test_truncated_line_is_skipped_with_file_and_line(sweep_copy: Path) -> None:
    run = sorted(p for p in sweep_copy.iterdir() if p.is_dir())[0]
    results = run / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines[:2] + [lines[2][:57]] + lines[3:]) + "\n")
    with pytest.warns(SweepWarning, match=rf"{run.name}.results\.jsonl line 3: not valid JSON"):
        sweep = read_sweep(sweep_copy)
    assert len(sweep.records) == 199 and sweep.n_runs == 40
    result = runner.invoke(app, ["import", "domainbed", str(sweep_copy)])
    assert result.exit_code == 0
    assert "line 3" in result.stderr and "results.jsonl" in result.stderr


def test_record_missing_fields_is_skipped(sweep_copy: Path) -> None:
    run = sorted(p for p in sweep_copy.iterdir() if p.is_dir())[1]
    results = run / "results.jsonl"
    lines = results.read_text().splitlines()
    rec = json.loads(lines[0])
    del rec["env2_in_acc"]
    lines[0] = json.dumps(rec)
    results.write_text("\n".join(lines) + "\n")
    with pytest.warns(SweepWarning, match="line 1: env2_in_acc missing"):
        sweep = read_sweep(sweep_copy)
    assert len(sweep.records) == 199


def test_runs_without_done_are_skipped_and_counted(sweep_copy: Path) -> None:
    runs = sorted(p for p in sweep_copy.iterdir() if p.is_dir())
    for run in runs[:3]:
        (run / "done").unlink()
    sweep = _quiet_read(sweep_copy)
    assert sweep.unfinished_runs == 3 and sweep.n_runs == 37
    result = runner.invoke(app, ["import", "domainbed", str(sweep_copy)])
    assert result.exit_code == 0
    assert "skipped 3 unfinished run(s)" in result.stderr
    for run in runs[3:]:
        (run / "done").unlink()
    with pytest.raises(OodevalError, match="all 40 runs are unfinished"):
        read_sweep(sweep_copy)


def test_mixed_datasets_give_one_table_each(sweep_copy: Path) -> None:
    for run in sorted(p for p in sweep_copy.iterdir() if p.is_dir()):
        clone = sweep_copy / f"{run.name}-other"
        clone.mkdir()
        (clone / "done").touch()
        text = (run / "results.jsonl").read_text().replace('"VLCS"', '"OtherSet"')
        (clone / "results.jsonl").write_text(text)
    sweep = read_sweep(sweep_copy)
    assert sweep.datasets == ["OtherSet", "VLCS"]
    table = results_table(select(sweep, "training_domain"), sweep)
    vlcs = table[table["dataset"] == "VLCS"]["mean"].to_numpy()
    other = table[table["dataset"] == "OtherSet"]["mean"].to_numpy()
    assert vlcs == pytest.approx(other)  # same runs, separate tables
    result = runner.invoke(app, ["import", "domainbed", str(sweep_copy), "-s", "training_domain"])
    assert result.exit_code == 0
    assert "Dataset: VLCS, model selection" in result.stdout
    assert "Dataset: OtherSet, model selection" in result.stdout
    assert "env0" in result.stdout  # unknown dataset: generic environment names


def test_selection_without_data_says_which(sweep_copy: Path) -> None:
    for run in sorted(p for p in sweep_copy.iterdir() if p.is_dir()):
        args = json.loads((run / "results.jsonl").read_text().splitlines()[0])["args"]
        if len(args["test_envs"]) == 2:
            shutil.rmtree(run)
    sweep = read_sweep(sweep_copy)
    assert select(sweep, "leave_one_domain_out").empty
    result = runner.invoke(app, ["import", "domainbed", str(sweep_copy), "-s", "lodo"])
    assert result.exit_code == 2
    assert "leave-one-domain-out cross-validation has no data for VLCS" in result.stderr
    assert "pair of test environments" in result.stderr
    both = runner.invoke(app, ["import", "domainbed", str(sweep_copy)])
    assert both.exit_code == 0
    assert "no data: this selection method needs" in both.stdout
    assert "98.0 +/- 0.2" in both.stdout  # the other methods still print


def test_bad_options_exit_2(sweep_dir: Path) -> None:
    bad_sel = runner.invoke(app, ["import", "domainbed", str(sweep_dir), "-s", "best"])
    assert bad_sel.exit_code == 2 and "unknown selection method" in bad_sel.stderr
    bad_fmt = runner.invoke(app, ["import", "domainbed", str(sweep_dir), "-f", "xml"])
    assert bad_fmt.exit_code == 2 and "'xml' is not one of" in bad_fmt.stderr


def test_real_process_exits_2_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "import", "domainbed", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "no DomainBed runs" in proc.stderr


@pytest.mark.parametrize("where", ["missing_folder", "a_folder"])
def test_bad_output_path_is_one_stderr_line(sweep_dir: Path, tmp_path: Path, where: str) -> None:
    # csv of all three selections warns about the mix; a bad --output must still be one line
    out = tmp_path / "nope" / "r.csv" if where == "missing_folder" else tmp_path
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "import", "domainbed", str(sweep_dir)]
        + ["-f", "csv", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: --output")


def test_warnings_come_only_with_a_report(sweep_copy: Path) -> None:
    # a skipped broken line is a warning when the report is printed, but a failing run shows
    # only its error line
    runs = sorted(p for p in sweep_copy.iterdir() if p.is_dir())
    run = next(
        p
        for p in runs
        if len(json.loads((p / "results.jsonl").read_text().splitlines()[0])["args"]["test_envs"])
        == 1
    )
    with open(run / "results.jsonl", "a") as fh:
        fh.write('{"truncated": \n')
    ok = runner.invoke(app, ["import", "domainbed", str(sweep_copy), "-s", "training_domain"])
    assert ok.exit_code == 0 and "not valid JSON" in ok.stderr
    for other in runs:
        args = json.loads((other / "results.jsonl").read_text().splitlines()[0])["args"]
        if len(args["test_envs"]) == 2:
            shutil.rmtree(other)
    bad = runner.invoke(app, ["import", "domainbed", str(sweep_copy), "-s", "lodo"])
    assert bad.exit_code == 2
    assert len(bad.stderr.splitlines()) == 1 and bad.stderr.startswith("error: ")
    assert "leave-one-domain-out cross-validation has no data" in bad.stderr


def test_a_run_log_cut_mid_write_keeps_its_good_lines(tmp_path, domainbed_sweep):
    import shutil

    from oodeval.results.sweep import SweepWarning, read_sweep

    clean = read_sweep(domainbed_sweep)
    copy = tmp_path / "sweep"
    shutil.copytree(domainbed_sweep, copy)
    log = sorted(copy.glob("*/results.jsonl"))[0]
    log.write_bytes(log.read_bytes() + b'{"acc": 0.\xff' + b"\x00" * 64)  # killed mid-write
    with pytest.warns(SweepWarning, match="line 6: not valid JSON"):
        damaged = read_sweep(copy)
    assert damaged.n_runs == clean.n_runs
    assert len(damaged.records) == len(clean.records)
