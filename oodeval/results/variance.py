"""Test variance and the oracle-leak gap from per-checkpoint results (NICO++ Section 4.4, Table 4).

Three figures per (dataset, algorithm, test environment), all in accuracy percentage points:

- ``seed_std``: std across trials (seeds) of the test accuracy picked by training-domain validation;
- ``epoch_std``: std of the test accuracy over the last `last` checkpoints of a run (NICO++ uses the
  last 10 epochs), averaged over the runs training-domain validation picked, one per trial;
- ``oracle_gap``: mean over trials of (test accuracy under test-domain validation, the oracle)
  minus (test accuracy under training-domain validation): how much a leak of test-domain knowledge
  into model selection would add. NICO++ lets the leak pick "the model from the best epoch", so
  the default oracle (``oracle="best"``) picks, per run, the checkpoint with the best test-domain
  validation accuracy and then the best hyperparameter draw; ``oracle="last"`` is DomainBed's
  test-domain validation (last checkpoint of each run, best draw), which exploits less of the leak.

The input is the tidy per-checkpoint frame of `oodeval.results.sweep.checkpoint_table` (columns
`CHECKPOINT_COLUMNS`), so any source of runs (a DomainBed folder, a study store via
`study_checkpoints`, a CSV) can feed it.
"""

from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from oodeval._names import refuse_lookalikes
from oodeval._text import read_text
from oodeval.errors import OodevalError, repeats
from oodeval.results.selection import (
    CHECKPOINT_COLUMNS,
    ORACLE_CHECKPOINTS,
    select_test_domain,
    select_training_domain,
)
from oodeval.results.sweep import SweepWarning, checkpoint_table, read_sweep

_KEYS = ["dataset", "algorithm", "environment"]
_NUMERIC = ["trial", "step", "test_acc", "train_val_acc", "oracle_val_acc"]

VARIANCE_COLUMNS = [
    *_KEYS,
    "n_trials",
    "training_domain_acc",
    "oracle_acc",
    "oracle_gap",
    "oracle_checkpoint",
    "seed_std",
    "epoch_std",
    "epoch_checkpoints",
]


class VarianceWarning(UserWarning):
    """Fewer checkpoints than asked for: the epoch std used what the runs have."""


def _check_checkpoints(checkpoints: pd.DataFrame, first_line: int | None = None) -> pd.DataFrame:
    """`checkpoints` checked and its numeric columns as numbers. A problem row is called "row
    k" (from 1), or "line k" of a file whose first data row is on line `first_line`."""
    missing = [c for c in CHECKPOINT_COLUMNS if c not in checkpoints.columns]
    if missing:
        raise OodevalError(
            f"per-checkpoint records lack column(s) {', '.join(missing)}; "
            f"expected {', '.join(CHECKPOINT_COLUMNS)}"
        )
    if checkpoints.empty:
        raise OodevalError("no per-checkpoint records (runs with a single test environment) given")
    df = checkpoints[list(CHECKPOINT_COLUMNS)].reset_index(drop=True)
    for col in ("dataset", "algorithm", "environment", "hparams"):
        if df[col].isna().any():
            raise OodevalError(f"column {col!r} has empty values; every checkpoint needs one")
    for col in _NUMERIC:
        values = pd.to_numeric(df[col], errors="coerce")
        if values.isna().any() or not np.isfinite(values.to_numpy(dtype=float)).all():
            raise OodevalError(f"column {col!r} must hold finite numbers; fix or drop those rows")
        df[col] = values
    for col in ("test_acc", "train_val_acc", "oracle_val_acc"):
        if ((df[col] < 0) | (df[col] > 1)).any():
            raise OodevalError(
                f"column {col!r} must hold accuracies as fractions in [0, 1]; "
                "divide percentages by 100"
            )
    _refuse_repeated_checkpoints(df, first_line)
    for col in _KEYS:  # two spellings of one name would make two groups
        refuse_lookalikes(pd.unique(df[col].astype(str)), col, "per-checkpoint records")
    return df


#: What names one checkpoint: a run (dataset, algorithm, environment, trial, draw) and its step.
_CHECKPOINT_KEY = [*_KEYS, "trial", "hparams", "step"]


def _refuse_repeated_checkpoints(df: pd.DataFrame, first_line: int | None) -> None:
    """Refuse a checkpoint listed twice (same run and step), whatever its accuracies: it would
    count twice in the epoch std and could be picked as two checkpoints."""
    twice = df.duplicated(_CHECKPOINT_KEY, keep=False).to_numpy()
    if not twice.any():
        return
    first = int(np.flatnonzero(twice)[0])
    same = (df[_CHECKPOINT_KEY] == df.loc[first, _CHECKPOINT_KEY]).all(axis=1).to_numpy()
    a, b = (int(k) for k in np.flatnonzero(same)[:2])
    where = "rows" if first_line is None else "lines"
    base = 1 if first_line is None else first_line
    what = ", ".join(f"{c} {df.at[first, c]}" for c in _CHECKPOINT_KEY)
    raise OodevalError(
        f"per-checkpoint records list one checkpoint twice ({where} {a + base} and {b + base}: "
        f"{what}); keep one row per run and step"
    )


def variance_table(
    checkpoints: pd.DataFrame, *, last: int = 10, ddof: int = 1, oracle: str = "best"
) -> pd.DataFrame:
    """Seed std, last-checkpoint std and the oracle gap per (dataset, algorithm, environment).

    seed_std = 100 * std_t(a_t) with a_t the training-domain-validation test accuracy of trial t;
    epoch_std = 100 * mean_t std(test_acc over the last `last` checkpoints of trial t's chosen run);
    oracle_gap = 100 * mean_t(o_t - a_t) with o_t the test-domain-validation (oracle) accuracy
    (NICO++ Section 4.4, Table 4 "Gap"). std uses `ddof` (1: sample std; NaN when there are not
    more than `ddof` values). A `VarianceWarning` says how many chosen runs have fewer than `last`
    checkpoints.

    Parameters
    ----------
    checkpoints : DataFrame
        One row per checkpoint with columns dataset, algorithm, environment, trial, hparams (any
        id of the hyperparameter draw), step, test_acc, train_val_acc, oracle_val_acc
        (accuracies as fractions in [0, 1]).
    last : int
        Number of final checkpoints per run for epoch_std (NICO++ Table 4 uses 10); runs with fewer
        checkpoints use all of theirs (``epoch_checkpoints`` reports the smallest count used).
    ddof : int
        Delta degrees of freedom of both stds.
    oracle : {"best", "last"}
        Which checkpoint of each run the oracle may pick: "best" (default) the one with the highest
        test-domain validation accuracy (earliest on ties), as NICO++ Section 4.4 describes the
        leak; "last" the final one (DomainBed's test-domain validation). Either way the oracle
        then picks the hyperparameter draw with the best such accuracy per trial.

    Returns
    -------
    DataFrame with columns `VARIANCE_COLUMNS`, one row per (dataset, algorithm, environment).

    Examples
    --------
    >>> rows = [("D", "ERM", 0, t, 0, s, acc, val, val)
    ...         for t, accs in enumerate([(0.5, 0.6), (0.7, 0.8)])
    ...         for s, (acc, val) in enumerate(zip(accs, (0.1, 0.2)))]
    >>> df = pd.DataFrame(rows, columns=list(CHECKPOINT_COLUMNS))
    >>> out = variance_table(df, last=2)
    >>> round(float(out.seed_std[0]), 4), round(float(out.epoch_std[0]), 4)
    (14.1421, 7.0711)
    """
    if oracle not in ORACLE_CHECKPOINTS:
        raise OodevalError(f"unknown oracle {oracle!r}; use one of {', '.join(ORACLE_CHECKPOINTS)}")
    if last < 1:
        raise OodevalError(f"last must be a positive number of checkpoints, got {last}")
    if ddof < 0:
        raise OodevalError(f"ddof must be >= 0, got {ddof}")
    df = _check_checkpoints(checkpoints)
    td = select_training_domain(df)
    chosen_oracle = select_test_domain(df, checkpoint=oracle)
    both = td.merge(
        chosen_oracle[[*_KEYS, "trial", "test_acc"]],
        on=[*_KEYS, "trial"],
        suffixes=("", "_oracle"),
    )
    per_run = _epoch_stds(df, td, last=last, ddof=ddof)
    rows = []
    for key, grp in both.groupby(_KEYS, sort=True):
        a = grp["test_acc"].to_numpy(dtype=float)
        o = grp["test_acc_oracle"].to_numpy(dtype=float)
        runs = per_run.loc[key]
        rows.append(
            {
                **dict(zip(_KEYS, key, strict=True)),
                "n_trials": len(grp),
                "training_domain_acc": 100 * float(a.mean()),
                "oracle_acc": 100 * float(o.mean()),
                "oracle_gap": 100 * float(np.mean(o - a)),
                "oracle_checkpoint": oracle,
                "seed_std": 100 * _std(a, ddof),
                "epoch_std": 100 * float(runs["epoch_std"].mean()),
                "epoch_checkpoints": int(runs["n_ckpt"].min()),
            }
        )
    return pd.DataFrame(rows, columns=VARIANCE_COLUMNS)


def _epoch_stds(df: pd.DataFrame, chosen: pd.DataFrame, *, last: int, ddof: int) -> pd.DataFrame:
    """Per (dataset, algorithm, environment, trial): std of test_acc over the last `last`
    checkpoints of the chosen run (``epoch_std``) and how many there were (``n_ckpt``); a
    `VarianceWarning` says how many chosen runs have fewer than `last`."""
    ordered = df.sort_values([*_KEYS, "trial", "hparams", "step"], kind="stable")
    tails = ordered.groupby([*_KEYS, "trial", "hparams"], sort=False).tail(last)
    keys = [*_KEYS, "trial", "hparams"]
    chosen_tails = tails.merge(chosen[keys], on=keys)
    per_run = chosen_tails.groupby([*_KEYS, "trial"]).agg(
        epoch_std=("test_acc", lambda a: _std(a.to_numpy(dtype=float), ddof)),
        n_ckpt=("test_acc", "size"),
    )
    short = per_run[per_run["n_ckpt"] < last]
    if len(short):
        warnings.warn(
            f"{len(short)} of {len(per_run)} chosen runs have fewer than last={last} "
            f"checkpoints (fewest {int(short['n_ckpt'].min())}); their epoch std uses all "
            "the checkpoints they have",
            VarianceWarning,
            stacklevel=3,  # the caller of variance_table
        )
    return per_run


def _std(values: np.ndarray, ddof: int) -> float:
    if values.size <= ddof:
        return float("nan")
    return float(np.std(values, ddof=ddof))


def average_over_environments(table: pd.DataFrame) -> pd.DataFrame:
    """Mean of each `variance_table` figure over the test environments, per (dataset, algorithm).

    The environment column becomes ``"mean"``; n_trials and epoch_checkpoints become the minimum;
    oracle_checkpoint is kept (all rows of one `variance_table` share it).
    """
    rows = []
    for (dataset, algorithm), grp in table.groupby(["dataset", "algorithm"], sort=True):
        row = {"dataset": dataset, "algorithm": algorithm, "environment": "mean"}
        for col in ("training_domain_acc", "oracle_acc", "oracle_gap", "seed_std", "epoch_std"):
            row[col] = float(grp[col].mean())
        row["n_trials"] = int(grp["n_trials"].min())
        row["epoch_checkpoints"] = int(grp["epoch_checkpoints"].min())
        row["oracle_checkpoint"] = "+".join(sorted(set(grp["oracle_checkpoint"])))
        rows.append(row)
    return pd.DataFrame(rows, columns=VARIANCE_COLUMNS)


def study_checkpoints(directory: str | Path) -> pd.DataFrame:
    """The tidy per-checkpoint frame (`CHECKPOINT_COLUMNS`) of a study folder (its results.sqlite).

    One row per checkpoint of each leave-one-out model of each finished unit: dataset = the
    scenario name, algorithm, environment = the held-out given environment (the fold), trial = the
    seed, hparams = the unit's hyperparameters as JSON (one draw per unit), step, and the three
    accuracies of `oodeval.training.CheckpointRow`. Raises OodevalError when the study holds no
    checkpoint records (run before they were stored, or by a backend that does not record them).
    """
    from oodeval.study.store import current_checkpoints

    stored = current_checkpoints(directory)  # the current config's units
    if stored.empty:
        raise OodevalError(
            f"{directory} holds no per-checkpoint records (the study was run before they were "
            "stored, or by a backend that does not record them); re-run it with `oodeval study "
            "run` into a new folder"
        )
    return pd.DataFrame(
        {
            "dataset": stored["scenario"].astype(str),
            "algorithm": stored["algorithm"].astype(str),
            "environment": stored["fold"].astype(str),
            "trial": stored["seed"].astype(int),
            "hparams": stored["hparams"].astype(str),
            "step": stored["step"].astype(int),
            "test_acc": stored["test_acc"].astype(float),
            "train_val_acc": stored["train_val_acc"].astype(float),
            "oracle_val_acc": stored["oracle_val_acc"].astype(float),
        },
        columns=list(CHECKPOINT_COLUMNS),
    )


def read_checkpoints(source: str | Path) -> pd.DataFrame:
    """Per-checkpoint records from `source`: a study folder, a DomainBed sweep folder or a CSV.

    A folder holding ``results.sqlite`` is a study (`study_checkpoints`; environment = the
    held-out environment's name, trial = the seed); another folder is read with
    `oodeval.results.sweep.read_sweep` (environment = test env index); a CSV must have the
    columns of `CHECKPOINT_COLUMNS` (extra columns are ignored).
    """
    from oodeval.study.store import STORE_NAME

    path = Path(source)
    if not path.exists():
        raise OodevalError(
            f"source not found: {path}; pass a study folder, a DomainBed sweep folder or a CSV"
        )
    if path.is_dir() and (path / STORE_NAME).is_file():
        return _check_checkpoints(study_checkpoints(path))
    if path.is_dir():
        sweep = read_sweep(path)
        if sweep.unfinished_runs:
            warnings.warn(
                f"skipped {sweep.unfinished_runs} unfinished run(s) without a `done` file",
                SweepWarning,
                stacklevel=2,
            )
        ckpts = checkpoint_table(sweep)
        if ckpts.empty:
            raise OodevalError(
                f"{path} has no runs with a single test environment; variance needs them"
            )
        return ckpts
    text = read_text(path, what="checkpoint records", save_as="a UTF-8 CSV file")
    try:
        with warnings.catch_warnings():
            # a row with more fields than the header would otherwise shift into an index
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(io.StringIO(text), index_col=False)
    except pd.errors.EmptyDataError:
        raise OodevalError(
            f"{path} is empty; expected a CSV header {','.join(CHECKPOINT_COLUMNS)} and rows"
        ) from None
    except pd.errors.ParserWarning:
        raise OodevalError(
            f"cannot read {path} as CSV: a row has more fields than the header; every row "
            "needs the header's columns"
        ) from None
    except pd.errors.ParserError as exc:
        raise OodevalError(f"cannot read {path} as CSV: {str(exc).splitlines()[0]}") from None
    header = [c.strip() for c in next(csv.reader(io.StringIO(text)), [])]
    repeated = repeats(header)
    if repeated:  # pandas would rename the second one and read only the first
        raise OodevalError(f"{path}: column {repeated[0]!r} appears more than once; keep one")
    return _check_checkpoints(frame, first_line=2)
