"""Read DomainBed sweep folders and apply DomainBed's three model-selection methods.

A DomainBed sweep folder holds one sub-folder per run; each run writes ``results.jsonl`` (one JSON
record per checkpoint: ``args`` with algorithm, dataset, test_envs, hparams_seed and trial_seed,
plus ``step`` and ``env{i}_in_acc`` / ``env{i}_out_acc``) and an empty ``done`` file when it
finishes. The selection semantics follow Gulrajani & Lopez-Paz, "In Search of Lost Domain
Generalization" (ICLR 2021), Section 3 and Appendix B.3:

- training-domain validation: per run, the checkpoint maximising the mean out-split accuracy over
  the training domains; per trial, the hyperparameter draw with the highest such value;
- leave-one-domain-out cross-validation: for test domain e, a (hyperparameters, step) pair is scored
  by the mean over the other domains v of v's in-split accuracy in the run whose test domains are
  {e, v}; the single-test-domain run at the chosen pair gives the reported accuracy;
- test-domain validation (oracle): the last checkpoint of every run; per trial, the hyperparameter
  draw with the highest out-split accuracy on the test domain.

The reported number is always the test domain's in-split accuracy. Trials aggregate as mean and
population std / sqrt(n), as DomainBed's ``collect_results`` prints them. A test domain's accuracy
is a leave-one-environment-out (LOO) accuracy in the worst+gap paper's sense: the model never saw
that domain.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodeval.errors import OodevalError
from oodeval.measures.domain import average, gap, worst, worst_plus_gap

TRAINING_DOMAIN = "training_domain"
LEAVE_ONE_DOMAIN_OUT = "leave_one_domain_out"
TEST_DOMAIN = "test_domain"

SELECTION_METHODS: dict[str, str] = {
    TRAINING_DOMAIN: "training-domain validation set",
    LEAVE_ONE_DOMAIN_OUT: "leave-one-domain-out cross-validation",
    TEST_DOMAIN: "test-domain validation set (oracle)",
}
"""Selection-method keys in the order DomainBed prints them, with DomainBed's display names."""

_SELECTION_ALIASES: dict[str, str] = {
    "training_domain": TRAINING_DOMAIN,
    "training-domain": TRAINING_DOMAIN,
    "iid": TRAINING_DOMAIN,
    "leave_one_domain_out": LEAVE_ONE_DOMAIN_OUT,
    "leave-one-domain-out": LEAVE_ONE_DOMAIN_OUT,
    "lodo": LEAVE_ONE_DOMAIN_OUT,
    "test_domain": TEST_DOMAIN,
    "test-domain": TEST_DOMAIN,
    "oracle": TEST_DOMAIN,
}

# Short environment names DomainBed prints as table columns (its datasets' ENVIRONMENTS lists).
ENVIRONMENT_NAMES: dict[str, tuple[str, ...]] = {
    "VLCS": ("C", "L", "S", "V"),
    "PACS": ("A", "C", "P", "S"),
    "OfficeHome": ("A", "C", "P", "R"),
    "TerraIncognita": ("L100", "L38", "L43", "L46"),
    "DomainNet": ("clip", "info", "paint", "quick", "real", "sketch"),
    "ColoredMNIST": ("+90%", "+80%", "-90%"),
    "RotatedMNIST": ("0", "15", "30", "45", "60", "75"),
}

CHECKPOINT_COLUMNS: tuple[str, ...] = (
    "dataset",
    "algorithm",
    "environment",
    "trial",
    "hparams",
    "step",
    "test_acc",
    "train_val_acc",
    "oracle_val_acc",
)
"""Columns of the tidy per-checkpoint frame (see `checkpoint_table`)."""


class SweepWarning(UserWarning):
    """A problem in a sweep folder that was skipped (bad JSON line, run without records)."""


@dataclass(frozen=True)
class Sweep:
    """The finished runs of a DomainBed sweep folder, one row of `records` per checkpoint.

    `records` columns: run (sub-folder name), line (1-based line in results.jsonl), dataset,
    algorithm, test_envs (tuple of ints), hparams, trial, step, n_envs, and env{i}_in_acc /
    env{i}_out_acc for i < the dataset's number of environments (NaN beyond it).
    """

    path: Path
    records: pd.DataFrame
    n_runs: int
    unfinished_runs: int
    warnings: tuple[str, ...]
    env_counts: dict[str, int]

    @property
    def datasets(self) -> list[str]:
        """Dataset names in sorted order."""
        return sorted(self.env_counts)

    def n_envs(self, dataset: str) -> int:
        """Number of environments of `dataset` (from its records' env{i}_out_acc keys)."""
        return self.env_counts[dataset]


def selection_method(name: str) -> str:
    """Return the canonical selection key for `name` (accepts DomainBed-ish aliases).

    >>> selection_method("oracle")
    'test_domain'
    """
    key = _SELECTION_ALIASES.get(name.strip().lower())
    if key is None:
        raise OodevalError(
            f"unknown selection method {name!r}; use one of {', '.join(SELECTION_METHODS)}"
        )
    return key


def environment_names(dataset: str, n_envs: int) -> list[str]:
    """Column names DomainBed uses for `dataset`'s environments, else ``env0``, ``env1``, ...

    >>> environment_names("VLCS", 4)
    ['C', 'L', 'S', 'V']
    >>> environment_names("MyData", 2)
    ['env0', 'env1']
    """
    names = ENVIRONMENT_NAMES.get(dataset)
    if names is not None and len(names) == n_envs:
        return list(names)
    return [f"env{i}" for i in range(n_envs)]


# ----------------------------------------------------------------------------- reading


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_accuracy(x: Any) -> bool:
    return (
        isinstance(x, (int, float))
        and not isinstance(x, bool)
        and math.isfinite(x)
        and 0.0 <= x <= 1.0
    )


def _parse_record(obj: Any) -> dict[str, Any] | str:
    """Return the fields we use from one checkpoint record, or a reason why it is unusable."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    args = obj.get("args")
    if not isinstance(args, dict):
        return "no 'args' object"
    for key in ("algorithm", "dataset"):
        if not isinstance(args.get(key), str) or not args[key]:
            return f"args.{key} missing or not a string"
    for key in ("hparams_seed", "trial_seed"):
        if not _is_int(args.get(key)):
            return f"args.{key} missing or not an integer"
    test_envs = args.get("test_envs")
    if (
        not isinstance(test_envs, list)
        or not test_envs
        or not all(_is_int(e) and e >= 0 for e in test_envs)
    ):
        return "args.test_envs missing or not a list of environment indices"
    step = obj.get("step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if not _is_int(step):
        return "'step' missing or not an integer"
    n_envs = 0
    while f"env{n_envs}_out_acc" in obj:
        n_envs += 1
    if n_envs < 2:
        return "fewer than two env{i}_out_acc entries"
    accs: dict[str, float] = {}
    for i in range(n_envs):
        for split in ("in", "out"):
            key = f"env{i}_{split}_acc"
            if not _is_accuracy(obj.get(key)):
                return f"{key} missing or not an accuracy in [0, 1]"
            accs[key] = float(obj[key])
    if max(test_envs) >= n_envs:
        return f"test_envs {test_envs} name an environment beyond the {n_envs} recorded"
    return {
        "dataset": args["dataset"],
        "algorithm": args["algorithm"],
        "test_envs": tuple(test_envs),
        "hparams": args["hparams_seed"],
        "trial": args["trial_seed"],
        "step": step,
        "n_envs": n_envs,
        **accs,
    }


def _read_run(results: Path, notes: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with open(results, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                notes.append(f"skipped {results} line {lineno}: not valid JSON (truncated?)")
                continue
            parsed = _parse_record(obj)
            if isinstance(parsed, str):
                notes.append(f"skipped {results} line {lineno}: {parsed}")
                continue
            parsed["run"] = results.parent.name
            parsed["line"] = lineno
            rows.append(parsed)
    return rows


def read_sweep(path: str | Path) -> Sweep:
    """Read the finished runs of a DomainBed sweep folder into a `Sweep`.

    Runs (sub-folders) without a ``done`` file are unfinished and skipped (counted in
    `Sweep.unfinished_runs`). Unreadable lines are skipped with a `SweepWarning` naming the file
    and line; the messages are also kept in `Sweep.warnings`.

    Parameters
    ----------
    path : str or Path
        The sweep's output folder (DomainBed's ``--output_dir``).

    Returns
    -------
    Sweep
    """
    root = Path(path)
    if not root.exists():
        raise OodevalError(f"sweep folder not found: {root}; check the path")
    if not root.is_dir():
        raise OodevalError(f"{root} is a file; pass the DomainBed sweep folder that holds the runs")
    if (root / "results.jsonl").is_file():
        raise OodevalError(
            f"{root} looks like a single run (it holds results.jsonl); pass the sweep folder "
            "that holds the run folders"
        )
    run_dirs = sorted(d for d in root.iterdir() if d.is_dir() and (d / "results.jsonl").is_file())
    if not run_dirs:
        raise OodevalError(
            f"no DomainBed runs in {root}: expected sub-folders holding results.jsonl"
        )
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    finished = 0
    unfinished = 0
    for run_dir in run_dirs:
        if not (run_dir / "done").exists():
            unfinished += 1
            continue
        finished += 1
        run_rows = _read_run(run_dir / "results.jsonl", notes)
        if not run_rows:
            notes.append(f"skipped run {run_dir.name}: no usable records in results.jsonl")
        rows.extend(run_rows)
    if not rows:
        reason = (
            f"all {unfinished} runs are unfinished (no `done` file)"
            if finished == 0
            else "no usable checkpoint records"
        )
        raise OodevalError(f"no finished DomainBed runs to read in {root}: {reason}")
    rows = _drop_inconsistent_env_counts(rows, notes)
    for note in notes:
        warnings.warn(note, SweepWarning, stacklevel=2)
    records = pd.DataFrame(rows)
    lead = [
        "run",
        "line",
        "dataset",
        "algorithm",
        "test_envs",
        "hparams",
        "trial",
        "step",
        "n_envs",
    ]
    acc_cols = sorted(
        (c for c in records.columns if c.startswith("env")),
        key=lambda c: (int(c[3 : c.index("_")]), c),
    )
    records = records[lead + acc_cols].sort_values(["run", "line"], ignore_index=True)
    return Sweep(
        path=root,
        records=records,
        n_runs=int(records["run"].nunique()),
        unfinished_runs=unfinished,
        warnings=tuple(notes),
        env_counts={
            str(d): int(n) for d, n in records.groupby("dataset")["n_envs"].first().items()
        },
    )


def _drop_inconsistent_env_counts(
    rows: list[dict[str, Any]], notes: list[str]
) -> list[dict[str, Any]]:
    """Keep, per dataset, only records with the dataset's most common number of environments."""
    counts: dict[str, Counter] = {}
    for r in rows:
        counts.setdefault(r["dataset"], Counter())[r["n_envs"]] += 1
    expected = {d: c.most_common(1)[0][0] for d, c in counts.items()}
    kept = []
    for r in rows:
        if r["n_envs"] != expected[r["dataset"]]:
            notes.append(
                f"skipped run {r['run']} line {r['line']}: {r['n_envs']} environments where "
                f"other {r['dataset']} records have {expected[r['dataset']]}"
            )
            continue
        kept.append(r)
    return kept


# ----------------------------------------------------------------------------- selection


def checkpoint_table(sweep: Sweep) -> pd.DataFrame:
    """Tidy per-checkpoint frame of the runs with a single test environment.

    One row per (run, checkpoint) with columns `CHECKPOINT_COLUMNS`: dataset, algorithm,
    environment (the test environment's index), trial (trial_seed), hparams (hparams_seed), step,
    test_acc (test env in-split accuracy, the reported number), train_val_acc (mean out-split
    accuracy over the training environments, what training-domain validation maximises) and
    oracle_val_acc (test env out-split accuracy, what test-domain validation maximises).
    Studies can build the same frame and reuse the selection and variance functions.
    """
    recs = sweep.records[sweep.records["test_envs"].map(len) == 1]
    rows = []
    for r in recs.itertuples(index=False):
        rec = r._asdict()
        e = rec["test_envs"][0]
        train_outs = [rec[f"env{i}_out_acc"] for i in range(rec["n_envs"]) if i != e]
        # plain mean over the N - 1 training environments (DomainBed's np.mean of the same values)
        rows.append(
            {
                "dataset": rec["dataset"],
                "algorithm": rec["algorithm"],
                "environment": e,
                "trial": rec["trial"],
                "hparams": rec["hparams"],
                "step": rec["step"],
                "test_acc": rec[f"env{e}_in_acc"],
                "train_val_acc": sum(train_outs) / len(train_outs),
                "oracle_val_acc": rec[f"env{e}_out_acc"],
            }
        )
    return pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS))


_GROUP = ["dataset", "algorithm", "environment", "trial"]
SELECTED_COLUMNS = [*_GROUP, "hparams", "step", "val_acc", "test_acc"]


def _best_hparams(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, algorithm, environment, trial), the hyperparameter draw with the top val_acc.

    Ties go to the smallest hparams seed (DomainBed's choice depends on directory listing order).
    """
    ordered = per_run.reset_index(drop=True).sort_values([*_GROUP, "hparams"], kind="stable")
    best = ordered.loc[ordered.groupby(_GROUP, sort=True)["val_acc"].idxmax()]
    return best[SELECTED_COLUMNS].reset_index(drop=True)


def select_training_domain(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """Training-domain validation: DomainBed's default model selection.

    Per run (dataset, algorithm, environment, trial, hparams): the checkpoint with the highest
    train_val_acc (earliest step on ties); per trial: the hparams with the highest such value.

    Parameters
    ----------
    checkpoints : DataFrame with columns `CHECKPOINT_COLUMNS` (see `checkpoint_table`).

    Returns
    -------
    DataFrame with one row per (dataset, algorithm, environment, trial): the chosen hparams and
    step, val_acc (the selection score) and test_acc (the reported accuracy).
    """
    df = checkpoints.reset_index(drop=True).sort_values([*_GROUP, "hparams", "step"], kind="stable")
    runs = df.loc[df.groupby([*_GROUP, "hparams"])["train_val_acc"].idxmax()]
    runs = runs.rename(columns={"train_val_acc": "val_acc"})
    return _best_hparams(runs)


ORACLE_CHECKPOINTS: dict[str, str] = {
    "best": "the checkpoint with the best test-domain validation accuracy (NICO++'s best epoch)",
    "last": "the last checkpoint (as DomainBed's test-domain validation does)",
}
"""Which checkpoint of a run test-domain validation (the oracle) may pick, with a description."""


def select_test_domain(checkpoints: pd.DataFrame, *, checkpoint: str = "last") -> pd.DataFrame:
    """Test-domain validation (oracle): hparams (and step) chosen by the test env's out split.

    Per run: the checkpoint with the largest step (``checkpoint="last"``, DomainBed's oracle) or
    the one with the highest oracle_val_acc, earliest step on ties (``checkpoint="best"``, the
    best-epoch oracle of NICO++ Section 4.4); per trial: the hparams whose chosen checkpoint has
    the highest oracle_val_acc. Same input and output as `select_training_domain`.
    """
    if checkpoint not in ORACLE_CHECKPOINTS:
        raise OodevalError(
            f"unknown oracle checkpoint {checkpoint!r}; use one of {', '.join(ORACLE_CHECKPOINTS)}"
        )
    df = checkpoints.reset_index(drop=True).sort_values([*_GROUP, "hparams", "step"], kind="stable")
    if checkpoint == "last":
        runs = df.groupby([*_GROUP, "hparams"], sort=False).tail(1)
    else:
        runs = df.loc[df.groupby([*_GROUP, "hparams"])["oracle_val_acc"].idxmax()]
    runs = runs.rename(columns={"oracle_val_acc": "val_acc"})
    return _best_hparams(runs)


def select_leave_one_domain_out(sweep: Sweep) -> pd.DataFrame:
    """Leave-one-domain-out cross-validation (DomainBed's LOO-CV selection).

    For test environment e, trial t, hparams h and step s, the validation score is
    (1 / (N - 1)) * sum over v != e of acc_in(v) in the run with test_envs {e, v} at step s; every
    one of the N - 1 paired runs must have a record at s, and exactly one single-test-env run
    (test_envs [e]) must have one, whose env e in-split accuracy is reported. Argmax over steps
    (earliest on ties) per hparams, then over hparams (smallest seed on ties) per trial.
    """
    recs = sweep.records
    key = ["dataset", "algorithm", "trial", "hparams", "step"]
    singles = recs[recs["test_envs"].map(len) == 1]
    single_rows = [
        {
            **{k: getattr(r, k) for k in key},
            "environment": r.test_envs[0],
            "test_acc": getattr(r, f"env{r.test_envs[0]}_in_acc"),
        }
        for r in singles.itertuples(index=False)
    ]
    pair_rows = []
    for r in recs[recs["test_envs"].map(lambda t: len(set(t)) == 2)].itertuples(index=False):
        a, b = sorted(set(r.test_envs))
        for e, v in ((a, b), (b, a)):
            pair_rows.append(
                {
                    **{k: getattr(r, k) for k in key},
                    "environment": e,
                    "val_env": v,
                    "val_in_acc": getattr(r, f"env{v}_in_acc"),
                    "n_envs": r.n_envs,
                }
            )
    if not single_rows or not pair_rows:
        return pd.DataFrame(columns=SELECTED_COLUMNS)
    grp = [*key, "environment"]
    single = pd.DataFrame(single_rows)
    counts = single.groupby(grp)["test_acc"].transform("size")
    single = single[counts == 1]  # DomainBed skips steps with two single-test-env records
    pairs = pd.DataFrame(pair_rows).drop_duplicates([*grp, "val_env"], keep="last")
    val = pairs.groupby(grp).agg(
        val_sum=("val_in_acc", "sum"), n_val=("val_env", "size"), n_envs=("n_envs", "first")
    )
    val = val[val["n_val"] == val["n_envs"] - 1].reset_index()
    val["val_acc"] = val["val_sum"] / (val["n_envs"] - 1)
    steps = single.merge(val[[*grp, "val_acc"]], on=grp, how="inner")
    if steps.empty:
        return pd.DataFrame(columns=SELECTED_COLUMNS)
    steps = steps.sort_values([*_GROUP, "hparams", "step"], kind="stable")
    runs = steps.loc[steps.groupby([*_GROUP, "hparams"])["val_acc"].idxmax()]
    return _best_hparams(runs)


_NEEDS = {
    TRAINING_DOMAIN: "runs with a single test environment",
    TEST_DOMAIN: "runs with a single test environment",
    LEAVE_ONE_DOMAIN_OUT: (
        "runs with a single test environment plus, for the same trials and hyperparameter draws, "
        "runs with every pair of test environments (DomainBed's sweep launches them unless "
        "--single_test_envs is given)"
    ),
}


def selection_requirement(method: str) -> str:
    """What a selection method needs from a sweep (used in 'no data' messages)."""
    return _NEEDS[selection_method(method)]


def select(sweep: Sweep, method: str) -> pd.DataFrame:
    """Apply selection `method` to `sweep`; one row per (dataset, algorithm, environment, trial).

    Returns the columns of `select_training_domain` plus `selection`. An empty frame means the
    sweep has no data for that method (see `selection_requirement`).
    """
    method = selection_method(method)
    if method == LEAVE_ONE_DOMAIN_OUT:
        chosen = select_leave_one_domain_out(sweep)
    else:
        ckpts = checkpoint_table(sweep)
        if ckpts.empty:
            chosen = pd.DataFrame(columns=SELECTED_COLUMNS)
        elif method == TRAINING_DOMAIN:
            chosen = select_training_domain(ckpts)
        else:
            chosen = select_test_domain(ckpts)
    chosen = chosen.copy()
    chosen.insert(0, "selection", method)
    return chosen


# ----------------------------------------------------------------------------- summaries


def trial_summary(accuracies: Any) -> tuple[float, float]:
    """Mean and standard error of trial accuracies, in percent, as DomainBed prints them.

    mean = 100 * mean(a); err = 100 * std(a) / sqrt(n) with the population std (ddof=0).

    >>> mean, err = trial_summary([0.1, 0.2, 0.3])
    >>> f"{mean:.1f} +/- {err:.1f}"
    '20.0 +/- 4.7'
    """
    a = np.asarray(accuracies, dtype=float)
    if a.size == 0:
        raise OodevalError("no trial accuracies to summarise")
    return float(100 * a.mean()), float(100 * a.std() / np.sqrt(a.size))


def results_table(selected: pd.DataFrame, sweep: Sweep) -> pd.DataFrame:
    """DomainBed's per-test-environment table in long form, one row per table cell.

    Columns: selection, dataset, algorithm, environment (index), environment_name, n_trials, mean,
    err (percent; see `trial_summary`). Cells without any trial are absent.
    """
    rows = []
    for (method, dataset, algorithm, env), grp in selected.groupby(
        ["selection", "dataset", "algorithm", "environment"], sort=True
    ):
        mean, err = trial_summary(grp["test_acc"].to_numpy(dtype=float))
        rows.append(
            {
                "selection": method,
                "dataset": dataset,
                "algorithm": algorithm,
                "environment": int(env),
                "environment_name": environment_names(dataset, sweep.n_envs(dataset))[int(env)],
                "n_trials": len(grp),
                "mean": mean,
                "err": err,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "selection",
            "dataset",
            "algorithm",
            "environment",
            "environment_name",
            "n_trials",
            "mean",
            "err",
        ],
    )


def domain_measures_table(table: pd.DataFrame, sweep: Sweep) -> pd.DataFrame:
    """Worst, gap and worst+gap over test environments, with rankings under average and worst+gap.

    Per (selection, dataset, algorithm), the trial-mean test accuracy of every test environment
    (the cells of `results_table`) is turned into errors, and the worst+gap paper's measures are
    taken over the environments: average (Eq. 2), worst (max error), gap (max - min error) and
    worst+gap (Eq. 6: worst + gap / (N - 2); NaN when N <= 2). All in error percent, lower is
    better. Rows of an algorithm that lacks a test environment get NaN measures and no rank.
    Ranks (1 = best, ties share the smaller rank) are within (selection, dataset).
    """
    rows = []
    for (method, dataset, algorithm), grp in table.groupby(
        ["selection", "dataset", "algorithm"], sort=True
    ):
        n = sweep.n_envs(dataset)
        row: dict[str, Any] = {"selection": method, "dataset": dataset, "algorithm": algorithm}
        if len(grp) == n:
            acc = grp.sort_values("environment")["mean"].to_numpy(dtype=float)
            row["average"] = 100 * float(average(acc, accuracy=True, percent=True))
            row["worst"] = 100 * float(worst(acc, accuracy=True, percent=True))
            row["gap"] = 100 * float(gap(acc, accuracy=True, percent=True))
            row["worst_plus_gap"] = (
                100 * float(worst_plus_gap(acc, accuracy=True, percent=True))
                if n > 2
                else float("nan")
            )
        else:
            row.update(average=np.nan, worst=np.nan, gap=np.nan, worst_plus_gap=np.nan)
        rows.append(row)
    cols = ["selection", "dataset", "algorithm", "average", "worst", "gap", "worst_plus_gap"]
    out = pd.DataFrame(rows, columns=cols)
    by = out.groupby(["selection", "dataset"], sort=False)
    out["rank_average"] = by["average"].rank(method="min").astype("Int64")
    out["rank_worst_plus_gap"] = by["worst_plus_gap"].rank(method="min").astype("Int64")
    return out


LONG_FORM_COLUMNS = [
    "dataset",
    "selection",
    "algorithm",
    "environment",
    "seed",
    "split",
    "accuracy",
]


def long_form(selected: pd.DataFrame, sweep: Sweep) -> pd.DataFrame:
    """Selected accuracies in the long form `oodeval measures` reads.

    One row per (dataset, selection, algorithm, test environment, trial): environment is the
    DomainBed environment name, seed the trial_seed, split ``loo`` (a DomainBed test environment
    was held out of training, so its accuracy is a leave-one-environment-out accuracy) and
    accuracy a fraction in [0, 1]. Filter one dataset and selection before feeding `measures`.
    """
    rows = [
        {
            "dataset": r.dataset,
            "selection": r.selection,
            "algorithm": r.algorithm,
            "environment": environment_names(r.dataset, sweep.n_envs(r.dataset))[
                int(r.environment)
            ],
            "seed": int(r.trial),
            "split": "loo",
            "accuracy": float(r.test_acc),
        }
        for r in selected.itertuples(index=False)
    ]
    return pd.DataFrame(rows, columns=LONG_FORM_COLUMNS)
