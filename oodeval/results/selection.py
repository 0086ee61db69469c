"""Model selection over per-checkpoint records: which hyperparameters and step each trial reports.

The input is the tidy per-checkpoint frame (`CHECKPOINT_COLUMNS`): one row per checkpoint of a run
trained without one test environment, from any source (a DomainBed sweep via
`oodeval.results.sweep.checkpoint_table`, a study store via
`oodeval.results.variance.study_checkpoints`, a CSV). The semantics follow Gulrajani & Lopez-Paz,
"In Search of Lost Domain Generalization" (ICLR 2021), Section 3 and Appendix B.3:

- training-domain validation: per run, the checkpoint maximising the mean out-split accuracy over
  the training domains; per trial, the hyperparameter draw with the highest such value;
- test-domain validation (oracle): the last checkpoint of every run (or, as NICO++ lets the leak
  pick, the best one); per trial, the hyperparameter draw with the highest out-split accuracy on
  the test domain.

Leave-one-domain-out cross-validation needs the runs with two test environments of a DomainBed
sweep; it lives in `oodeval.results.domainbed`. The method names of all three are here.
"""

from __future__ import annotations

import pandas as pd

from oodeval.errors import OodevalError

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
"""Columns of the tidy per-checkpoint frame (see `oodeval.results.sweep.checkpoint_table`)."""


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


TRIAL_KEYS = ["dataset", "algorithm", "environment", "trial"]
"""What one selection is made for: a trial (trial_seed) of an algorithm on a test environment."""
SELECTED_COLUMNS = [*TRIAL_KEYS, "hparams", "step", "val_acc", "test_acc"]
"""Columns of every selection's result: the chosen hparams and step, the selection score and the
reported test accuracy."""


def best_hparams_per_trial(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, algorithm, environment, trial), the hyperparameter draw with the top val_acc.

    `per_run` holds one chosen checkpoint per run (columns `SELECTED_COLUMNS`); the result keeps
    those columns.

    Ties go to the smallest hparams seed (DomainBed's choice depends on directory listing order).
    """
    ordered = per_run.reset_index(drop=True).sort_values([*TRIAL_KEYS, "hparams"], kind="stable")
    best = ordered.loc[ordered.groupby(TRIAL_KEYS, sort=True)["val_acc"].idxmax()]
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
    df = checkpoints.reset_index(drop=True).sort_values(
        [*TRIAL_KEYS, "hparams", "step"], kind="stable"
    )
    runs = df.loc[df.groupby([*TRIAL_KEYS, "hparams"])["train_val_acc"].idxmax()]
    runs = runs.rename(columns={"train_val_acc": "val_acc"})
    return best_hparams_per_trial(runs)


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
    df = checkpoints.reset_index(drop=True).sort_values(
        [*TRIAL_KEYS, "hparams", "step"], kind="stable"
    )
    if checkpoint == "last":
        runs = df.groupby([*TRIAL_KEYS, "hparams"], sort=False).tail(1)
    else:
        runs = df.loc[df.groupby([*TRIAL_KEYS, "hparams"])["oracle_val_acc"].idxmax()]
    runs = runs.rename(columns={"oracle_val_acc": "val_acc"})
    return best_hparams_per_trial(runs)
