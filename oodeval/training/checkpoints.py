"""Checkpoint selection by training-domain validation, and the per-checkpoint records.

`BestCheckpoints` keeps each model's best checkpoint so far (first best on ties); `selected_models`
gives every unit model at its selected checkpoint; `checkpoint_rows` the `CheckpointRow` of each
leave-one-out model at a checkpoint (its accuracy on the held-out environment's "in" and "out"
parts), which never change the selection.
"""

from __future__ import annotations

import math
from typing import cast

import torch

from oodeval.algorithms import Algorithm
from oodeval.training.data import TrainingRun
from oodeval.training.evaluation import predict_labels
from oodeval.training.results import CheckpointRow


class BestCheckpoints:
    """Training-domain validation: the best checkpoint so far of every model of every run.

    A model keeps a checkpoint whose mean validation accuracy beats its best (first best on ties);
    the best parameters of a run's models are kept in one state dict, model by model.
    """

    def __init__(self, runs: list[TrainingRun]) -> None:
        self.accuracy = [torch.full((len(r.models),), -math.inf, dtype=torch.float64) for r in runs]
        self.step = [[0] * len(r.models) for r in runs]
        self.state: list[dict[str, torch.Tensor] | None] = [None] * len(runs)

    def update(self, r: int, run: TrainingRun, accuracy: torch.Tensor, step: int) -> None:
        """Keep run `r`'s models whose `accuracy` at `step` beats their best."""
        improved = accuracy > self.accuracy[r]
        if not bool(improved.any()):
            return
        state = run.algorithm.state_dict()
        best = self.state[r]
        if best is None:
            self.state[r] = {k: v.detach().clone() for k, v in state.items()}
        else:
            masks: dict[
                torch.device, torch.Tensor
            ] = {}  # per device: the random streams' states stay on the CPU
            for k, v in state.items():
                mask = masks.setdefault(v.device, improved.to(v.device))
                best[k][mask] = v[mask]
        self.accuracy[r] = torch.where(improved, accuracy, self.accuracy[r])
        for i in torch.nonzero(improved).flatten().tolist():
            self.step[r][i] = step


def selected_models(
    runs: list[TrainingRun], best: BestCheckpoints, steps: int, checkpoint_selection: str
) -> tuple[list[Algorithm], list[int], list[float]]:
    """Each unit model (N LOO models, then the full one) at its selected checkpoint, in eval mode,
    with its selected step and validation accuracy (the last step and NaN for ``"last"``)."""
    m = sum(len(run.models) for run in runs)
    models: list[Algorithm | None] = [None] * m
    selected = [steps] * m
    accuracy = [math.nan] * m
    for r, run in enumerate(runs):
        state = best.state[r]
        if state is not None:
            run.algorithm.load_state_dict(state)
        for i, k in enumerate(run.models):
            models[k] = (
                run.algorithm.select_models(i) if len(run.models) > 1 else run.algorithm.eval()
            )
            if checkpoint_selection == "training_domain":
                selected[k], accuracy[k] = best.step[r][i], float(best.accuracy[r][i])
    return cast("list[Algorithm]", models), selected, accuracy  # every slot is filled above


def accuracy_matrix(
    run: TrainingRun, data: list[tuple[torch.Tensor, torch.Tensor]], envs: list[int], context: int
) -> torch.Tensor:
    """Accuracy (M, E) of each model of `run` on ``data[j]`` for j in `envs` (NaN elsewhere)."""
    acc = torch.full((len(run.models), len(data)), math.nan, dtype=torch.float64)
    for j in envs:
        x, y = data[j]
        pred = predict_labels(run.algorithm, x, context=context)
        acc[:, j] = (pred == y).double().mean(dim=1)
    return acc


def checkpoint_rows(
    run: TrainingRun,
    val_matrix: torch.Tensor,
    val_acc: torch.Tensor,
    val: list[tuple[torch.Tensor, torch.Tensor]],
    held_in: list[tuple[torch.Tensor, torch.Tensor]],
    folds: list[str],
    step: int,
    context: int,
) -> list[CheckpointRow]:
    """The `CheckpointRow` of each LOO model of `run` at `step` (none for the full model).

    Model i of the run is held out from environment k = ``run.models[i]``: its oracle accuracy is
    on ``val[k]`` (reused from `val_matrix` when the run already evaluated it) and its test
    accuracy on ``held_in[k]``, predicted by model i alone (`select_models`, as the unit's final
    test is), not by the whole stack, whose other models' predictions would be thrown away.
    """
    n = len(val)
    held = sorted({k for k in run.models if k < n})
    if not held:
        return []
    missing = [k for k in held if bool(torch.isnan(val_matrix[:, k]).any())]
    out = accuracy_matrix(run, val, missing, context) if missing else val_matrix
    test = {k: _alone_accuracy(run, i, held_in[k], context) for i, k in enumerate(run.models)
            if k < n}  # fmt: skip
    return [
        CheckpointRow(
            folds[k],
            step,
            float(val_acc[i]),
            test[k],
            float((out if k in missing else val_matrix)[i, k]),
        )
        for i, k in enumerate(run.models)
        if k < n
    ]


def _alone_accuracy(
    run: TrainingRun, i: int, data: tuple[torch.Tensor, torch.Tensor], context: int
) -> float:
    """Accuracy of model i of `run` by itself on ``data = (images, labels)``."""
    model = run.algorithm
    if len(run.models) > 1:
        with torch.random.fork_rng(devices=[]):  # building the copy draws initial weights
            model = run.algorithm.select_models(i)
    x, y = data
    return float((predict_labels(model, x, context=context)[0] == y).double().mean())
