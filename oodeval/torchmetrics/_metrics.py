"""OpenworldAUC and the open-world summary as torchmetrics metrics, for batched and multi-GPU
evaluation.

Both keep one entry per sample in list states synced by concatenation (``dist_reduce_fx="cat"``:
the detector score, whether the sample is a base-class one, whether the classifier of its domain
was right) and `OpenworldSummary` its OverallAcc counts in sum states. ``compute()`` joins the
states of every process and calls the numpy functions of `oodeval.measures.openworld` on them, so
its values are exactly theirs on all the data, ties and integer scores included: a ranking metric
counts (base, new) pairs across batches and processes, which no per-batch summary can do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from oodeval.errors import OodevalError
from oodeval.measures.openworld import openworld_auc, openworld_summary
from oodeval.measures.openworld.ranking import checked_tie
from oodeval.torchmetrics._checks import (
    as_vector,
    checked_ids,
    checked_label_space,
    checked_mask,
    checked_scores,
    same_length,
)

__all__ = ["OpenworldAUC", "OpenworldSummary"]


class _PerSample(Metric):
    """A metric keeping, per sample, its detector score, whether it is a base-class sample and
    whether the classifier of its domain was right: list states concatenated across processes.

    Scores are float64 (from floats of any width, exactly) or int64 (from integers), one kind
    per metric: concatenating int64 with float64 would round integers beyond 2**53.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    score: list[torch.Tensor]
    is_base: list[torch.Tensor]
    correct: list[torch.Tensor]

    def __init__(self, *, tie: float, validate_args: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tie = checked_tie(tie)
        self.validate_args = bool(validate_args)
        self.add_state("score", default=[], dist_reduce_fx="cat")
        self.add_state("is_base", default=[], dist_reduce_fx="cat")
        self.add_state("correct", default=[], dist_reduce_fx="cat")

    def forward(self, *args: Any, **kwargs: Any) -> None:
        """Add a batch, as ``update``, and return None: no value of the batch alone is computed
        (a batch may lack base or new samples, and its pairs are only part of the total).

        torchmetrics' own ``forward`` would compute the batch's value on its states swapped
        out, and an error there would leave the metric holding that batch only.
        """
        self.update(*args, **kwargs)
        self._forward_cache = None

    def _append(self, scores: torch.Tensor, base: torch.Tensor, right: torch.Tensor) -> None:
        """Add a checked batch to the states, refusing a score kind unlike the earlier ones."""
        if self.score and self.score[0].dtype != scores.dtype:
            raise OodevalError(
                f"the scores are {scores.dtype} but earlier batches gave {self.score[0].dtype}; "
                "give scores of one kind (floats or integers) in every update"
            )
        self.score.append(scores.to(self.device))
        self.is_base.append(base.to(self.device))
        self.correct.append(right.to(self.device))

    def _samples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(base_scores, new_scores, base_correct, new_correct) of every sample the states hold
        (of every process, once synced), or raise when there is no base or no new sample."""
        what = type(self).__name__
        if isinstance(self.score, list) and not self.score:
            raise OodevalError(f"{what} has seen no sample; call update() before compute()")
        # once synced, a state is one tensor, which dim_zero_cat returns as it is
        scores = dim_zero_cat(self.score).cpu().numpy()
        base = dim_zero_cat(self.is_base).cpu().numpy()
        right = dim_zero_cat(self.correct).cpu().numpy()
        n_base = int(np.count_nonzero(base))
        if n_base == 0 or n_base == base.size:
            missing, flag = ("base", "False") if n_base == 0 else ("new", "True")
            raise OodevalError(
                f"{what} needs base and new samples, got no {missing} sample (is_base is {flag} "
                f"for all {base.size} samples seen)"
            )
        return scores[base], scores[~base], right[base], right[~base]


class OpenworldAUC(_PerSample):
    """OpenworldAUC over batches and processes: `oodeval.measures.openworld_auc` on all samples.

    Prop. 4.2 of the OpenworldAUC paper, over all (base, new) sample pairs::

        OWAUC = 1/(N_b N_n) * sum_{b, n} 1[g right on x_b] * 1[r(x_b) > r(x_n)] * 1[h right on x_n]

    a pair with equal scores counting ``tie``. ``update(score, is_base, correct)`` takes one value
    per sample; a batch may hold base and new samples in any mix. ``compute()`` returns, as a
    float64 scalar tensor, exactly ``openworld_auc(score[is_base], score[~is_base],
    correct[is_base], correct[~is_base], tie=tie)`` on every sample seen by every process.

    Parameters
    ----------
    tie : float in [0, 1], default 0.5
        Credit for a (base, new) pair with equal scores (0 = the paper's strict inequality).
    validate_args : bool, default True
        Check that the scores are finite on each update (a device synchronisation); shapes and
        dtypes are always checked.
    **kwargs
        torchmetrics' `Metric` options (``sync_on_compute``, ``process_group``...).

    Examples
    --------
    >>> import torch
    >>> metric = OpenworldAUC()
    >>> metric.update(torch.tensor([0.9, 0.5]), torch.tensor([True, False]),
    ...               torch.tensor([True, True]))
    >>> metric.update(torch.tensor([0.8, 0.3, 0.2]), torch.tensor([True, True, False]),
    ...               torch.tensor([True, False, False]))
    >>> metric.compute().item()
    0.3333333333333333
    """

    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    def __init__(self, *, tie: float = 0.5, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(tie=tie, validate_args=validate_args, **kwargs)

    def update(self, score: Any, is_base: Any, correct: Any) -> None:
        """Add a batch: detector scores r(x) (larger = more base-like; floats or integers), bool
        whether each sample is from the base domain, bool whether the classifier of its domain (g
        on a base sample, h on a new one) was right. All 1-D of one length."""
        scores = checked_scores(score, "score", validate=self.validate_args)
        base = checked_mask(is_base, "is_base")
        right = checked_mask(correct, "correct")
        same_length(score=scores, is_base=base, correct=right)
        self._append(scores, base, right)

    def compute(self) -> torch.Tensor:
        """OpenworldAUC of every sample seen, a float64 scalar tensor."""
        value = openworld_auc(*self._samples(), tie=self.tie)
        return torch.tensor(value, dtype=torch.float64, device=self.device)


class OpenworldSummary(_PerSample):
    """BaseAcc, NewAcc, HM, OverallAcc, AUROC and OpenworldAUC over batches and processes.

    The values of `oodeval.measures.openworld_scores` on all samples (Sec. 3 of the
    OpenworldAUC paper), for a model given as its parts: a sample is a base one when its label
    is in ``base_classes``; BaseAcc is the accuracy of g (``base_predictions``) on the base
    samples, NewAcc that of h (``new_predictions``) on the new ones, HM = 2 BaseAcc NewAcc /
    (BaseAcc + NewAcc) (0 when both are 0), OverallAcc the accuracy of the predictions over all
    classes (``predictions``, e.g. the argmax of the logits) on all samples, AUROC of the scores
    r(x) with base samples positive and OpenworldAUC (Prop. 4.2); ``tie`` credits tied pairs in
    both ranking metrics. Without ``predictions`` in any update OverallAcc is NaN, as
    ``openworld_scores`` gives it without outputs over all classes.

    Parameters
    ----------
    base_classes : iterable of int
        Ids of the base classes: non-empty, distinct, in 0..num_classes-1, not every class.
    num_classes : int
        Number of classes (base + new); labels and predictions are ids in 0..num_classes-1.
    tie : float in [0, 1], default 0.5
        Credit for a (base, new) pair with equal scores.
    validate_args : bool, default True
        Check the values on each update (finite scores, ids in range, g's predictions base
        classes on the base samples and h's new classes on the new ones), which synchronises
        the device; shapes and dtypes are always checked.
    **kwargs
        torchmetrics' `Metric` options (``sync_on_compute``, ``process_group``...).

    Examples
    --------
    >>> import torch
    >>> metric = OpenworldSummary(base_classes=[0, 1], num_classes=3)
    >>> metric.update(
    ...     scores=torch.tensor([0.7, 0.5, 0.1, 0.4]),
    ...     labels=torch.tensor([0, 1, 2, 2]),
    ...     base_predictions=torch.tensor([0, 1, 0, 1]),
    ...     new_predictions=torch.tensor([2, 2, 2, 2]),
    ...     predictions=torch.tensor([0, 1, 2, 0]),
    ... )
    >>> {k: v.item() for k, v in metric.compute().items()}
    {'base_acc': 1.0, 'new_acc': 1.0, 'hm': 1.0, 'overall_acc': 0.75, 'auroc': 1.0, 'openworld_auc': 1.0}
    """  # noqa: E501

    overall_correct: torch.Tensor
    n_predicted: torch.Tensor
    base_lookup: torch.Tensor

    def __init__(
        self,
        base_classes: Iterable[int],
        num_classes: int,
        *,
        tie: float = 0.5,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(tie=tie, validate_args=validate_args, **kwargs)
        self.base_classes = checked_label_space(base_classes, num_classes)
        self.num_classes = num_classes
        lookup = torch.zeros(num_classes, dtype=torch.bool)
        lookup[self.base_classes] = True
        self.register_buffer("base_lookup", lookup, persistent=False)
        self.add_state("overall_correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("n_predicted", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(
        self,
        scores: Any,
        labels: Any,
        base_predictions: Any,
        new_predictions: Any,
        predictions: Any = None,
    ) -> None:
        """Add a batch, one value per sample (all 1-D of one length): detector scores r(x)
        (larger = more base-like), true class ids, the base classifier g's predictions (used on
        the base samples), the new classifier h's (used on the new samples) and, for OverallAcc,
        the predictions over all classes. Predictions are global class ids."""
        validate = self.validate_args
        r = checked_scores(scores, "scores", validate=validate)
        y = checked_ids(labels, "labels", self.num_classes, validate=validate)
        g = self._predictions(base_predictions, "base_predictions", y, base=True)
        h = self._predictions(new_predictions, "new_predictions", y, base=False)
        same_length(scores=r, labels=y, base_predictions=g, new_predictions=h)
        base = self.base_lookup.to(y.device)[y]
        right = torch.where(base, g == y, h == y)
        p = None
        if predictions is not None:
            p = checked_ids(predictions, "predictions", self.num_classes, validate=validate)
            same_length(labels=y, predictions=p)
        self._append(r, base, right)  # checked in full: from here on, nothing raises
        if p is not None:
            self.overall_correct += (p == y).sum().to(self.device)
            self.n_predicted += y.numel()

    def _predictions(self, x: Any, name: str, y: torch.Tensor, *, base: bool) -> torch.Tensor:
        """g's (h's) predictions as int64; with validation, base (new) class ids on the base
        (new) samples, anything integer on the others (they are not used)."""
        preds = as_vector(x, name)
        if preds.dtype == torch.bool or preds.is_floating_point() or preds.is_complex():
            raise OodevalError(f"{name} must hold integer class ids, got dtype {preds.dtype}")
        preds = preds.to(torch.int64)
        if not self.validate_args or preds.shape != y.shape:
            return preds  # a length mismatch is reported by the caller, naming every input
        lookup = self.base_lookup.to(y.device)
        used = preds[lookup[y] == base]
        if used.numel() == 0:
            return preds
        in_range = (used >= 0) & (used < self.num_classes)
        wrong = ~in_range | (lookup[used.clamp(0, self.num_classes - 1)] != base)
        if bool(wrong.any()):
            what = "base" if base else "new"
            raise OodevalError(
                f"{name} must be {what}-class ids on the {what}-class samples (global class ids "
                f"in 0..{self.num_classes - 1}, not positions among the {what} classes), found "
                f"{int(used[wrong][0])}"
            )
        return preds

    def compute(self) -> dict[str, torch.Tensor]:
        """The summary of every sample seen: float64 scalar tensors under "base_acc",
        "new_acc", "hm", "overall_acc", "auroc", "openworld_auc"."""
        samples = self._samples()
        summary = openworld_summary(*samples, tie=self.tie)
        n = samples[0].size + samples[1].size
        n_predicted = int(self.n_predicted)
        if n_predicted not in (0, n):
            raise OodevalError(
                f"predictions were given for {n_predicted} of the {n} samples; give them in "
                "every update (for OverallAcc) or in none"
            )
        overall = float(int(self.overall_correct)) / n if n_predicted else float("nan")
        keys = ("base_acc", "new_acc", "hm", "overall_acc", "auroc", "openworld_auc")
        values = {k: overall if k == "overall_acc" else summary[k] for k in keys}
        return {
            k: torch.tensor(v, dtype=torch.float64, device=self.device) for k, v in values.items()
        }
