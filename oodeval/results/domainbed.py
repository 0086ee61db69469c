"""DomainBed sweeps scored as DomainBed prints them, plus the worst+gap paper's measures.

`select` applies DomainBed's three model-selection methods to a sweep (`oodeval.results.sweep`):
training-domain and test-domain validation through `oodeval.results.selection`, and here
leave-one-domain-out cross-validation, which needs the sweep's runs with two test environments:
for test domain e, a (hyperparameters, step) pair is scored by the mean over the other domains v
of v's in-split accuracy in the run whose test domains are {e, v}; the single-test-domain run at
the chosen pair gives the reported accuracy (Gulrajani & Lopez-Paz, ICLR 2021, Appendix B.3).

The reported number is always the test domain's in-split accuracy. Trials aggregate as mean and
population std / sqrt(n), as DomainBed's ``collect_results`` prints them (`results_table`);
`domain_measures_table` adds worst, gap and worst+gap over the test environments, and `long_form`
exports the selected accuracies for `oodeval measures`. A test domain's accuracy is a
leave-one-environment-out (LOO) accuracy in the worst+gap paper's sense: the model never saw that
domain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodeval.errors import OodevalError
from oodeval.measures import domain_measures, get_measure
from oodeval.measures.domain import REGISTRY
from oodeval.measures.meta import algorithm_ranks, answer_line
from oodeval.results.selection import (
    LEAVE_ONE_DOMAIN_OUT,
    SELECTED_COLUMNS,
    TEST_DOMAIN,
    TRAINING_DOMAIN,
    TRIAL_KEYS,
    best_hparams_per_trial,
    select_test_domain,
    select_training_domain,
    selection_method,
)
from oodeval.results.sweep import Sweep, checkpoint_table, read_sweep

__all__ = [
    "DOMAINBED_MEASURES",
    "ENVIRONMENT_NAMES",
    "LONG_FORM_COLUMNS",
    "domain_measures_table",
    "environment_names",
    "long_form",
    "MIN_TRIALS",
    "read_domainbed",
    "results_table",
    "select",
    "select_leave_one_domain_out",
    "selection_requirement",
    "sweep_answer",
    "trial_summary",
    "trials_warning",
]

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
    steps = steps.sort_values([*TRIAL_KEYS, "hparams", "step"], kind="stable")
    runs = steps.loc[steps.groupby([*TRIAL_KEYS, "hparams"])["val_acc"].idxmax()]
    return best_hparams_per_trial(runs)


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


DOMAINBED_MEASURES = ("average", "worst", "gap", "worst_plus_gap")
"""The measures `domain_measures_table` takes over a sweep's test environments."""


def domain_measures_table(
    table: pd.DataFrame, sweep: Sweep, extra: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Worst, gap and worst+gap over test environments, with rankings under average and worst+gap.

    Per (selection, dataset, algorithm), the trial-mean test accuracy of every test environment
    (the cells of `results_table`) is turned into errors, and the worst+gap paper's measures are
    taken over the environments: average (Eq. 2), worst (max error), gap (max - min error) and
    worst+gap (Eq. 6: worst + gap / (N - 2); NaN when N <= 2). All in error percent, lower is
    better. Rows of an algorithm that lacks a test environment get NaN measures and no rank.
    Ranks (1 = best, ties share the smaller rank; `oodeval.measures.meta.algorithm_ranks` on the
    values as they are) are within (selection, dataset). `extra`: more measures (names or specs
    of `oodeval.measures.get_measure`, ``--measures``), one column each, in error percent.
    """
    extra = tuple(m for m in dict.fromkeys(extra) if m not in DOMAINBED_MEASURES)  # once each
    rows = []
    for (method, dataset, algorithm), grp in table.groupby(
        ["selection", "dataset", "algorithm"], sort=True
    ):
        n = sweep.n_envs(dataset)
        row: dict[str, Any] = {"selection": method, "dataset": dataset, "algorithm": algorithm}
        acc = grp.sort_values("environment")["mean"].to_numpy(dtype=float)
        for name in DOMAINBED_MEASURES:
            spec = REGISTRY[name]
            complete = len(grp) == n and n >= spec.min_envs
            value = spec.function(acc, accuracy=True, percent=True) if complete else np.nan
            row[name] = 100 * float(value)
        for name in extra:
            if len(grp) == n and n >= get_measure(name).min_envs:  # else NaN, as above
                values = domain_measures(acc, [name], accuracy=True, percent=True)
                row[name] = 100 * float(values[name])
            else:
                row[name] = np.nan
        rows.append(row)
    cols = ["selection", "dataset", "algorithm", *DOMAINBED_MEASURES, *extra]
    out = pd.DataFrame(rows, columns=cols)
    by = [out["selection"], out["dataset"]]
    for name in ("average", "worst_plus_gap"):
        # compared as computed (no rounding to TIE_DECIMALS): this table's rule, kept
        ranks = algorithm_ranks(out[name].to_numpy(dtype=float), by, decimals=None)
        out[f"rank_{name}"] = pd.Series(ranks, index=out.index).astype("Int64")
    return out


def sweep_answer(table: pd.DataFrame, measures: pd.DataFrame, labels: dict[str, str]) -> str:
    """The answer line (`oodeval.measures.meta.answer_line`) for the tables `oodeval
    import domainbed` prints: per (dataset, selection), which algorithm worst+gap and average
    pick, on the same numbers as the table's rank columns (measures of each environment's
    trial-mean accuracy, as DomainBed aggregates trials).

    Parameters
    ----------
    table : `results_table`'s output (for the number of trials)
    measures : `domain_measures_table`'s output; algorithms without every environment are left
        out
    labels : selection key -> how to print it (e.g. ``SELECTION_METHODS``)

    >>> m = pd.DataFrame({"selection": "training_domain", "dataset": "VLCS",
    ...                   "algorithm": ["ERM", "IRM"], "average": [21.0, 22.0],
    ...                   "worst_plus_gap": [50.0, 45.0]})
    >>> t = pd.DataFrame({"n_trials": [3, 3]})
    >>> sweep_answer(t, m, {"training_domain": "training-domain validation"})
    'VLCS, training-domain validation: worst+gap picks IRM; average picks ERM (they disagree; \
on accuracies averaged over 3 trials, as in the tables)'
    """
    complete = measures.dropna(subset=["average", "worst_plus_gap"])
    if complete.empty:
        return "no algorithm has every test environment, so there is no pick"
    order = {key: k for k, key in enumerate(labels)}
    complete = complete.assign(_order=complete["selection"].map(order)).sort_values(
        ["dataset", "_order"], kind="stable"
    )
    trials = sorted({int(n) for n in table["n_trials"]})
    span = f"{trials[0]}" if len(trials) == 1 else f"{trials[0]}-{trials[-1]}"
    how = f"on accuracies averaged over {span} trials, as in the tables" if trials[-1] > 1 else ""
    units = {
        "scenario": [
            f"{d}, {labels.get(m, m)}"
            for d, m in zip(complete["dataset"], complete["selection"], strict=True)
        ],
        "algorithm": complete["algorithm"].to_numpy(),
        "average": complete["average"].to_numpy(dtype=float),
        "worst_plus_gap": complete["worst_plus_gap"].to_numpy(dtype=float),
    }
    return answer_line(units, how=how or None)


MIN_TRIALS = 3
"""DomainBed's +/- is std / sqrt(trials) over the trials of a cell: with one trial it is 0, with
two it rests on one difference; below this many trials `trials_warning` says so."""


def trials_warning(table: pd.DataFrame) -> str:
    """A one-line warning when some cell of `results_table` has fewer than `MIN_TRIALS` trials
    (its +/- interval then says little), else ``""``.

    >>> trials_warning(pd.DataFrame({"n_trials": [2, 3, 3]}))[:53]
    '1 of 3 table cells has fewer than 3 trials (as few as'
    >>> trials_warning(pd.DataFrame({"n_trials": [3, 5]}))
    ''
    """
    n = table["n_trials"].to_numpy()
    few = int((n < MIN_TRIALS).sum())
    if not few:
        return ""
    return (
        f"{few} of {len(n)} table cells {'has' if few == 1 else 'have'} fewer than {MIN_TRIALS} "
        f"trials (as few as {int(n.min())}): "
        "their +/- (std/sqrt(trials)) says little about how much the means would move; run more "
        "trials (the n_trials option of DomainBed's sweep)"
    )


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


def read_domainbed(
    sweep_dir: str | Path, *, selection: str = "training_domain", dataset: str | None = None
) -> pd.DataFrame:
    """Read a DomainBed sweep folder and apply one model-selection method: the long form that
    `oodeval.score` takes.

    The sweep folder holds one sub-folder per run, each with DomainBed's ``results.jsonl`` and,
    once finished, ``done`` (runs without it are skipped; unreadable lines are skipped with an
    `oodeval.results.sweep.SweepWarning`). Each selected test-environment accuracy is a
    leave-one-environment-out accuracy: the model never saw that domain.

    Parameters
    ----------
    sweep_dir : str or Path
        DomainBed's ``--output_dir``.
    selection : str, default "training_domain"
        ``training_domain``, ``leave_one_domain_out`` (``lodo``) or ``test_domain``
        (``oracle``), as DomainBed's ``collect_results`` names them.
    dataset : str, optional
        Which dataset to keep; needed only when the sweep holds several.

    Returns
    -------
    pandas.DataFrame
        Columns dataset, selection, algorithm, environment (DomainBed's name, e.g. ``C``),
        seed (the trial_seed), split (``loo``) and accuracy (a fraction); one row per
        (algorithm, test environment, trial).

    Raises
    ------
    OodevalError
        A missing or malformed folder, an unknown selection or dataset, or no data for the
        selection (e.g. leave-one-domain-out without the runs with two test environments).

    Examples
    --------
    >>> from pathlib import Path
    >>> import oodeval
    >>> sweep = Path(oodeval.__file__).parents[1] / "examples" / "domainbed-sweep"
    >>> rows = read_domainbed(sweep)
    >>> rows[["algorithm", "environment", "seed", "split"]].drop_duplicates().shape[0]
    60
    >>> oodeval.score(rows).answer
    "worst+gap picks IRM; average picks Mixup (they disagree; on each measure's mean over 3 seeds)"
    """
    method = selection_method(selection)
    sweep = read_sweep(sweep_dir)
    if dataset is not None and dataset not in sweep.datasets:
        raise OodevalError(
            f"dataset {dataset!r} is not in the sweep; it holds {', '.join(sweep.datasets)}"
        )
    if dataset is None and len(sweep.datasets) > 1:
        raise OodevalError(
            f"the sweep holds {len(sweep.datasets)} datasets ({', '.join(sweep.datasets)}); "
            "pass dataset= to choose one"
        )
    chosen = select(sweep, method)
    name = dataset or sweep.datasets[0]
    chosen = chosen[chosen["dataset"] == name]
    if chosen.empty:
        raise OodevalError(
            f"{method} selection has no data for {name} in {sweep_dir}: it needs "
            f"{selection_requirement(method)}; choose another selection"
        )
    return long_form(chosen, sweep)
