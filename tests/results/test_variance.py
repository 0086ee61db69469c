"""Test variance across seeds and checkpoints, and the oracle gap (NICO++ Section 4.4, Table 4).

References are brute-force loops over the raw DomainBed JSON records of the real VLCS sweep.
"""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.errors import OodevalError
from oodeval.results.selection import CHECKPOINT_COLUMNS
from oodeval.results.sweep import checkpoint_table, read_sweep
from oodeval.results.variance import (
    VarianceWarning,
    average_over_environments,
    read_checkpoints,
    variance_table,
)

N_ENVS = 4

runner = CliRunner()


@pytest.fixture(scope="module")
def sweep_dir(domainbed_sweep: Path) -> Path:
    return domainbed_sweep


@pytest.fixture(scope="module")
def checkpoints(sweep_dir: Path) -> pd.DataFrame:
    return checkpoint_table(read_sweep(sweep_dir))


def _single_runs(root: Path) -> dict[tuple[int, int, int], list[dict]]:
    """(test env, trial, hparams) -> records sorted by step, for single-test-env finished runs."""
    runs = {}
    for d in sorted(root.iterdir()):
        if not (d / "done").exists():
            continue
        recs = [json.loads(x) for x in (d / "results.jsonl").read_text().splitlines() if x]
        args = recs[0]["args"]
        if len(args["test_envs"]) == 1:
            key = (args["test_envs"][0], args["trial_seed"], args["hparams_seed"])
            runs[key] = sorted(recs, key=lambda r: r["step"])
    return runs


def brute_force(
    root: Path, e: int, *, last: int = 10, ddof: int = 1, oracle: str = "best"
) -> dict[str, float]:
    runs = _single_runs(root)
    trials = sorted({t for (_, t, _) in runs})
    hps = sorted({h for (_, _, h) in runs})
    td_accs, oracle_accs, epoch_stds = [], [], []
    for t in trials:
        best = None  # (val, test acc, hparams)
        best_oracle = None
        for h in hps:
            recs = runs[(e, t, h)]
            run_best = None
            for r in recs:
                val = sum(r[f"env{i}_out_acc"] for i in range(N_ENVS) if i != e) / (N_ENVS - 1)
                if run_best is None or val > run_best[0]:
                    run_best = (val, r[f"env{e}_in_acc"], h)
            if best is None or run_best[0] > best[0]:
                best = run_best
            # the oracle's checkpoint: the last one, or the best on the test env's out split
            pick = recs[-1]
            if oracle == "best":
                for r in recs:
                    if r[f"env{e}_out_acc"] > pick[f"env{e}_out_acc"] or (
                        r[f"env{e}_out_acc"] == pick[f"env{e}_out_acc"] and r["step"] < pick["step"]
                    ):
                        pick = r
            if best_oracle is None or pick[f"env{e}_out_acc"] > best_oracle[0]:
                best_oracle = (pick[f"env{e}_out_acc"], pick[f"env{e}_in_acc"])
        td_accs.append(best[1])
        oracle_accs.append(best_oracle[1])
        tail = [r[f"env{e}_in_acc"] for r in runs[(e, t, best[2])][-last:]]
        epoch_stds.append(statistics.stdev(tail) if ddof == 1 else statistics.pstdev(tail))
    seed_std = statistics.stdev(td_accs) if ddof == 1 else statistics.pstdev(td_accs)
    return {
        "training_domain_acc": 100 * statistics.mean(td_accs),
        "oracle_acc": 100 * statistics.mean(oracle_accs),
        "oracle_gap": 100
        * statistics.mean(o - a for o, a in zip(oracle_accs, td_accs, strict=True)),
        "seed_std": 100 * seed_std,
        "epoch_std": 100 * statistics.mean(epoch_stds),
    }


@pytest.mark.parametrize("oracle", ["best", "last"])
@pytest.mark.parametrize(("last", "ddof"), [(10, 1), (3, 1), (2, 0)])
def test_variance_matches_brute_force_on_real_sweep(
    sweep_dir: Path, checkpoints: pd.DataFrame, last: int, ddof: int, oracle: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VarianceWarning)
        table = variance_table(checkpoints, last=last, ddof=ddof, oracle=oracle)
    assert len(table) == N_ENVS
    assert set(table["oracle_checkpoint"]) == {oracle}
    for e in range(N_ENVS):
        row = table[table["environment"] == e].iloc[0]
        expected = brute_force(sweep_dir, e, last=last, ddof=ddof, oracle=oracle)
        for col, value in expected.items():
            assert row[col] == pytest.approx(value, abs=1e-9), (e, col)
        assert row["n_trials"] == 2
        assert row["epoch_checkpoints"] == min(last, 5)


def test_training_domain_accuracy_matches_domainbed_table(checkpoints: pd.DataFrame) -> None:
    # DomainBed prints 98.0, 64.2, 74.1, 77.1 (training-domain) and 96.9, 65.9, 71.6, 76.9 (oracle)
    table = variance_table(checkpoints, last=5, oracle="last").sort_values("environment")
    assert [round(x, 1) for x in table["training_domain_acc"]] == [98.0, 64.2, 74.1, 77.1]
    assert [round(x, 1) for x in table["oracle_acc"]] == [96.9, 65.9, 71.6, 76.9]


def test_default_oracle_picks_the_best_epoch_as_nico_describes(checkpoints: pd.DataFrame) -> None:
    # NICO++ Sec. 4.4: the leak lets one take "the model from the best epoch" by the oracle
    # validation set. Brute force on this sweep (loop over raw JSON): +0.75, +2.19, +0.51, +0.48
    # points per test env (C, L, S, V), +0.98 on average; DomainBed's last-checkpoint oracle gives
    # a negative mean gap here (-0.51), which would hide the leak.
    best = variance_table(checkpoints, last=5).sort_values("environment")
    assert [round(x, 2) for x in best["oracle_gap"]] == [0.75, 2.19, 0.51, 0.48]
    assert average_over_environments(best)["oracle_gap"].iloc[0] == pytest.approx(0.98, abs=0.005)
    last = variance_table(checkpoints, last=5, oracle="last")
    assert average_over_environments(last)["oracle_gap"].iloc[0] == pytest.approx(-0.51, abs=0.005)
    with pytest.raises(OodevalError, match="unknown oracle"):
        variance_table(checkpoints, oracle="first")


def test_too_few_checkpoints_warn_once_saying_what_was_used(checkpoints: pd.DataFrame) -> None:
    with pytest.warns(VarianceWarning) as record:
        out = variance_table(checkpoints, last=10)
    assert len(record) == 1
    assert str(record[0].message) == (
        "8 of 8 chosen runs have fewer than last=10 checkpoints (fewest 5); their epoch std "
        "uses all the checkpoints they have"
    )
    assert set(out["epoch_checkpoints"]) == {5}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        variance_table(checkpoints, last=5)


def test_hand_computed_example() -> None:
    # one env, two trials, one hparams draw, three checkpoints each
    rows = []
    for t, accs in enumerate([(0.5, 0.6, 0.7), (0.6, 0.9, 0.8)]):
        for s, (acc, val, oracle) in enumerate(
            zip(accs, (0.1, 0.3, 0.2), (0.0, 0.0, 0.0), strict=True)
        ):
            rows.append(("D", "A", "e", t, 0, s, acc, val, oracle))
    frame = pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS))
    out = variance_table(frame, last=2, oracle="last")
    row = out.iloc[0]
    # training-domain picks step 1 in both trials: 0.6 and 0.9; the oracle takes step 2: 0.7, 0.8
    assert row["training_domain_acc"] == pytest.approx(75.0)
    assert row["seed_std"] == pytest.approx(100 * np.std([0.6, 0.9], ddof=1))
    assert row["oracle_gap"] == pytest.approx(100 * ((0.7 - 0.6) + (0.8 - 0.9)) / 2)
    # the best-epoch oracle sees equal oracle scores (0.0) everywhere: earliest step, 0.5 and 0.6
    best = variance_table(frame, last=2).iloc[0]
    assert best["oracle_gap"] == pytest.approx(100 * ((0.5 - 0.6) + (0.6 - 0.9)) / 2)
    expected_epoch = 100 * (np.std([0.6, 0.7], ddof=1) + np.std([0.9, 0.8], ddof=1)) / 2
    assert row["epoch_std"] == pytest.approx(expected_epoch)


def test_single_trial_seed_std_is_nan_not_zero() -> None:
    rows = [("D", "A", 0, 0, 0, s, 0.5 + 0.1 * s, 0.5, 0.5) for s in range(3)]
    out = variance_table(pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS)), last=3)
    assert np.isnan(out["seed_std"].iloc[0])
    assert out["epoch_std"].iloc[0] == pytest.approx(100 * np.std([0.5, 0.6, 0.7], ddof=1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_row_order_does_not_matter(checkpoints: pd.DataFrame, seed: int) -> None:
    base = variance_table(checkpoints)
    shuffled = variance_table(checkpoints.sample(frac=1.0, random_state=seed))
    pd.testing.assert_frame_equal(base, shuffled)


def test_duplicate_index_and_string_hparams_ids(checkpoints: pd.DataFrame) -> None:
    base = variance_table(checkpoints)
    relabelled = checkpoints.set_axis([0] * len(checkpoints)).assign(
        hparams=[f"draw-{h}" for h in checkpoints["hparams"]]
    )
    pd.testing.assert_frame_equal(base, variance_table(relabelled))


def test_average_over_environments(checkpoints: pd.DataFrame) -> None:
    table = variance_table(checkpoints)
    mean = average_over_environments(table).iloc[0]
    assert mean["environment"] == "mean"
    for col in ("seed_std", "epoch_std", "oracle_gap"):
        assert mean[col] == pytest.approx(table[col].mean())


def test_bad_checkpoint_frames() -> None:
    with pytest.raises(OodevalError, match="lack column"):
        variance_table(pd.DataFrame({"dataset": ["D"]}))
    rows = [("D", "A", 0, 0, 0, 0, 55.0, 0.5, 0.5)]
    with pytest.raises(OodevalError, match="fractions in \\[0, 1\\]"):
        variance_table(pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS)))
    with pytest.raises(OodevalError, match="positive"):
        variance_table(pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS)), last=0)


def test_cli_on_folder_and_on_csv_agree(
    sweep_dir: Path, checkpoints: pd.DataFrame, tmp_path: Path
) -> None:
    csv_in = tmp_path / "ckpts.csv"
    checkpoints.to_csv(csv_in, index=False)
    from_folder = runner.invoke(app, ["variance", str(sweep_dir), "-f", "csv"])
    from_csv = runner.invoke(app, ["variance", str(csv_in), "-f", "csv"])
    assert from_folder.exit_code == 0 and from_csv.exit_code == 0, from_folder.output
    assert from_folder.stdout == from_csv.stdout
    assert len(read_checkpoints(csv_in)) == len(checkpoints)
    text = runner.invoke(app, ["variance", str(sweep_dir)])
    assert text.exit_code == 0
    assert "Dataset: VLCS, test variance and oracle gap" in text.stdout
    lines = [ln for ln in text.stdout.splitlines() if ln.startswith("ERM")]
    assert [ln.split()[1] for ln in lines] == ["C", "L", "S", "V", "mean"]


def test_cli_oracle_option_warning_and_footer(sweep_dir: Path, tmp_path: Path) -> None:
    best = runner.invoke(app, ["variance", str(sweep_dir)])
    assert best.exit_code == 0
    assert best.stderr == (
        "warning: 8 of 8 chosen runs have fewer than last=10 checkpoints (fewest 5); their "
        "epoch std uses all the checkpoints they have\n"
    )
    assert "--oracle best: per run the oracle takes the checkpoint with the best" in best.stdout
    mean_gap = [ln.split()[5] for ln in best.stdout.splitlines() if ln.startswith("ERM  ")][-1]
    assert mean_gap == "0.98"
    last = runner.invoke(app, ["variance", str(sweep_dir), "--oracle", "last", "--last", "5"])
    assert last.exit_code == 0 and last.stderr == ""
    assert "--oracle last: per run the oracle takes the last checkpoint" in last.stdout
    as_csv = runner.invoke(app, ["variance", str(sweep_dir), "--last", "5", "-f", "csv"])
    assert set(pd.read_csv(io.StringIO(as_csv.stdout))["oracle_checkpoint"]) == {"best"}
    bad = runner.invoke(app, ["variance", str(sweep_dir), "--oracle", "first"])
    assert bad.exit_code == 2 and bad.stderr == (
        "error: unknown --oracle 'first'; use one of best, last\n"
    )


def test_cli_bad_output_path_is_the_only_line(sweep_dir: Path, tmp_path: Path) -> None:
    # the input warns (5 < 10 checkpoints), but a bad --output must be the one line shown
    out = str(tmp_path / "missing" / "v.csv")
    result = runner.invoke(app, ["variance", str(sweep_dir), "-f", "csv", "-o", out])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: --output")
    assert "does not exist" in result.stderr


def test_cli_bad_sources_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("dataset,algorithm\nD,A\n")
    result = runner.invoke(app, ["variance", str(bad)])
    assert result.exit_code == 2 and "lack column" in result.stderr
    missing = runner.invoke(app, ["variance", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not found" in missing.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "variance", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "no DomainBed runs" in proc.stderr
