"""`oodeval.torchmetrics`: the streaming metrics give, bit for bit, the numpy functions' values on
all the data, however it is batched and split across processes; bad input gives one line."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tests.requires import REPO, requires_module

requires_module("torchmetrics")

import torch  # noqa: E402

from oodeval.errors import OodevalError  # noqa: E402
from oodeval.measures.openworld import openworld_auc, openworld_scores  # noqa: E402
from oodeval.torchmetrics import OpenworldAUC, OpenworldSummary  # noqa: E402
from tests.helpers.distributed import openworld_metrics_on_rank, run_on_ranks  # noqa: E402

BASE = [0, 2, 3]
NUM_CLASSES = 6
NEW = [c for c in range(NUM_CLASSES) if c not in BASE]


def batches(rng: np.random.Generator, n: int) -> list[slice]:
    """Cuts of range(n) of random sizes, an empty one among them."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=6, replace=False))
    edges = [0, *cuts.tolist(), int(cuts[2]), n]  # cuts[2] twice: an empty batch
    edges.sort()
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def scored_samples(seed: int, n: int = 301) -> dict[str, np.ndarray]:
    """Scores on a grid of 9 values (many ties), a random base/new mix, random correctness."""
    rng = np.random.default_rng(seed)
    return {
        "score": rng.integers(0, 9, n) / 8.0,
        "is_base": rng.random(n) < rng.uniform(0.2, 0.8),
        "correct": rng.random(n) < 0.7,
    }


def reference_auc(d: dict[str, np.ndarray], tie: float) -> float:
    b = d["is_base"]
    return openworld_auc(d["score"][b], d["score"][~b], d["correct"][b], d["correct"][~b], tie=tie)


def fed_auc(d: dict[str, np.ndarray], cuts: list[slice], **kwargs) -> OpenworldAUC:
    metric = OpenworldAUC(**kwargs)
    for cut in cuts:
        metric.update(*(torch.from_numpy(d[k][cut]) for k in ("score", "is_base", "correct")))
    return metric


@pytest.mark.parametrize("tie", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("seed", range(5))
def test_openworld_auc_equals_the_numpy_function_on_all_batches(seed: int, tie: float) -> None:
    d = scored_samples(seed)
    cuts = batches(np.random.default_rng(100 + seed), d["score"].size)
    value = fed_auc(d, cuts, tie=tie).compute()
    assert value.dtype == torch.float64 and value.ndim == 0
    assert value.item() == reference_auc(d, tie)


def test_openworld_auc_is_the_exact_pair_fraction() -> None:
    # brute force over every (base, new) pair with exact fractions, independent of the numpy code
    d = scored_samples(7, n=60)
    b = d["is_base"]
    total = Fraction(0)
    for sb, cb in zip(d["score"][b], d["correct"][b], strict=True):
        for sn, cn in zip(d["score"][~b], d["correct"][~b], strict=True):
            if cb and cn:
                total += 1 if sb > sn else Fraction(1, 2) if sb == sn else 0
    expected = float(total / (int(b.sum()) * int((~b).sum())))
    assert fed_auc(d, [slice(0, 25), slice(25, 60)]).compute().item() == expected


def test_float32_and_huge_integer_scores_keep_their_order_and_ties() -> None:
    d = scored_samples(3)
    as_float32 = {**d, "score": (d["score"] * 1.1).astype(np.float32)}
    cuts = batches(np.random.default_rng(3), d["score"].size)
    assert fed_auc(as_float32, cuts).compute().item() == reference_auc(as_float32, 0.5)
    # integers beyond 2**53: float64 would merge 2**60 + k for small k and change the ties
    huge = {**d, "score": (2**60 + (d["score"] * 8).astype(np.int64)).astype(np.int64)}
    assert (huge["score"].astype(np.float64) == 2.0**60).all()  # float64 merges them all
    got = fed_auc(huge, cuts).compute().item()
    assert got == reference_auc(huge, 0.5) == reference_auc(d, 0.5)


def probability_samples(seed: int, n: int = 257) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities from small integer counts (tied scores and tied argmaxes) and labels."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 5, size=(n, NUM_CLASSES)).astype(np.float64)
    return counts / counts.sum(axis=1, keepdims=True), rng.integers(0, NUM_CLASSES, n)


def model_parts(probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """r, g, h and the overall prediction from probabilities over all classes, in torch, as an
    evaluation loop computes them (Algorithm 1 of the OpenworldAUC paper)."""
    base, new = torch.tensor(BASE), torch.tensor(NEW)
    return {
        "scores": probs[:, base].max(dim=1).values,
        "base_predictions": base[probs[:, base].argmax(dim=1)],
        "new_predictions": new[probs[:, new].argmax(dim=1)],
        "predictions": probs.argmax(dim=1),
    }


@pytest.mark.parametrize("seed", range(4))
def test_the_summary_equals_openworld_scores_on_all_batches(seed: int) -> None:
    probs, labels = probability_samples(seed)
    metric = OpenworldSummary(BASE, NUM_CLASSES)
    for cut in batches(np.random.default_rng(seed), labels.size):
        parts = model_parts(torch.from_numpy(probs[cut]))
        metric.update(labels=torch.from_numpy(labels[cut]), **parts)
    got = {k: v.item() for k, v in metric.compute().items()}
    expected = openworld_scores(probs, labels, BASE)
    assert list(got) == list(expected)
    assert got == expected  # every value to the last bit, NaN-free here


def test_without_predictions_overall_acc_is_nan_as_without_outputs() -> None:
    probs, labels = probability_samples(9)
    parts = model_parts(torch.from_numpy(probs))
    del parts["predictions"]
    metric = OpenworldSummary(BASE, NUM_CLASSES, tie=0.0)
    metric.update(labels=torch.from_numpy(labels), **parts)
    got = {k: v.item() for k, v in metric.compute().items()}
    expected = openworld_scores(
        None,
        labels,
        BASE,
        tie=0.0,
        detector_scores=parts["scores"].numpy(),
        base_predictions=parts["base_predictions"].numpy(),
        new_predictions=parts["new_predictions"].numpy(),
    )
    assert np.isnan(got.pop("overall_acc")) and np.isnan(expected.pop("overall_acc"))
    assert got == expected


def test_calling_the_metric_adds_the_batch_and_returns_none() -> None:
    d = scored_samples(4)
    metric = OpenworldAUC()
    for cut in batches(np.random.default_rng(4), d["score"].size):
        args = [torch.from_numpy(d[k][cut]) for k in ("score", "is_base", "correct")]
        assert metric(*args) is None
    metric(T([0.5]), T([True]), T([True]))  # a batch of one domain: no batch value to fail on
    b, s, c = (
        np.append(d[k], v) for k, v in (("is_base", True), ("score", 0.5), ("correct", True))
    )
    assert metric.compute().item() == reference_auc({"score": s, "is_base": b, "correct": c}, 0.5)


def test_reset_forgets_every_sample() -> None:
    first, second = scored_samples(1), scored_samples(2)
    metric = fed_auc(first, [slice(0, 301)])
    metric.reset()
    assert metric.score == [] and metric.is_base == [] and metric.correct == []
    for k in ("score", "is_base", "correct"):
        assert getattr(metric, k) == []
    metric.update(*(torch.from_numpy(second[k]) for k in ("score", "is_base", "correct")))
    assert metric.compute().item() == reference_auc(second, 0.5)

    probs, labels = probability_samples(5)
    summary = OpenworldSummary(BASE, NUM_CLASSES)
    summary.update(labels=torch.from_numpy(labels), **model_parts(torch.from_numpy(probs)))
    summary.reset()
    assert int(summary.overall_correct) == 0 and int(summary.n_predicted) == 0
    probs, labels = probability_samples(6)
    summary.update(labels=torch.from_numpy(labels), **model_parts(torch.from_numpy(probs)))
    got = {k: v.item() for k, v in summary.compute().items()}
    assert got == openworld_scores(probs, labels, BASE)


T = torch.tensor
GOOD = {"score": T([0.5, 0.2]), "is_base": T([True, False]), "correct": T([True, True])}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"score": T([[0.5, 0.2]])}, r"score must be a 1-D tensor .*got shape \(1, 2\)"),
        ({"score": T([0.5, 0.2, 0.1])}, r"same length .*score=3, is_base=2, correct=2"),
        ({"is_base": T([1, 0])}, r"is_base must be a bool tensor .*got dtype torch.int64"),
        ({"correct": T([1.0, 0.0])}, r"correct must be a bool tensor .*torch.float32"),
        ({"score": T([float("nan"), 0.2])}, r"score contains 1 NaN or infinite value"),
        ({"score": T([True, False])}, r"score must hold real numbers, got dtype torch.bool"),
        ({"score": "high"}, r"score must be a 1-D tensor, got str"),
    ],
)
def test_bad_updates_of_openworld_auc_give_one_line(change: dict, message: str) -> None:
    with pytest.raises(OodevalError, match=message) as caught:
        OpenworldAUC().update(**{**GOOD, **change})
    assert "\n" not in str(caught.value)


LABELS = T([0, 1, 2, 5])  # 0, 2 base; 1, 5 new
PARTS = {
    "scores": T([0.9, 0.1, 0.8, 0.3]),
    "labels": LABELS,
    "base_predictions": T([0, -1, 3, 7]),  # only the base rows (0 and 2) are used
    "new_predictions": T([9, 4, 9, 5]),  # only the new rows (1 and 3) are used
    "predictions": T([0, 1, 2, 4]),
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"labels": T([0, 1, 2, 6])}, r"labels must hold class ids in 0\.\.5 .*found 6"),
        ({"labels": T([0, -1, 2, 5])}, r"labels must hold class ids in 0\.\.5 .*found -1"),
        ({"labels": T([0.0, 1, 2, 5])}, r"labels must hold integer class ids, got .*float32"),
        (
            {"base_predictions": T([0, 0, 1, 0])},
            r"base_predictions must be base-class ids .*found 1",
        ),
        ({"new_predictions": T([0, 2, 0, 5])}, r"new_predictions must be new-class ids .*found 2"),
        ({"new_predictions": T([0, 6, 0, 5])}, r"new_predictions must be new-class ids .*found 6"),
        ({"predictions": T([0, 1, 2, 6])}, r"predictions must hold class ids in 0\.\.5 .*found 6"),
        ({"predictions": T([0, 1])}, r"same length .*labels=4, predictions=2"),
        ({"scores": T([0.9, 0.1])}, r"same length .*scores=2, labels=4"),
        ({"labels": T([[0, 1, 2, 5]])}, r"labels must be a 1-D tensor"),
    ],
)
def test_bad_updates_of_the_summary_give_one_line(change: dict, message: str) -> None:
    metric = OpenworldSummary(BASE, NUM_CLASSES)
    metric.update(**PARTS)  # the unchanged parts are fine
    with pytest.raises(OodevalError, match=message) as caught:
        metric.update(**{**PARTS, **change})
    assert "\n" not in str(caught.value)
    assert sum(t.numel() for t in metric.score) == 4  # the bad batch was not kept
    assert int(metric.n_predicted) == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_classes": [], "num_classes": 4}, r"base_classes is empty"),
        ({"base_classes": [0, 0], "num_classes": 4}, r"lists a class more than once"),
        ({"base_classes": [0, 4], "num_classes": 4}, r"class ids in 0\.\.3, found 4"),
        ({"base_classes": [0, 1], "num_classes": 2}, r"lists all 2 classes"),
        ({"base_classes": [0], "num_classes": 1}, r"num_classes must be an integer >= 2"),
        ({"base_classes": None, "num_classes": 3}, r"base_classes must be an iterable"),
        ({"base_classes": [0], "num_classes": 3, "tie": 2}, r"tie must be a number in \[0, 1\]"),
    ],
)
def test_a_bad_label_space_gives_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(OodevalError, match=message):
        OpenworldSummary(**kwargs)


def test_compute_needs_samples_of_both_domains_and_one_kind_of_score() -> None:
    with (
        pytest.warns(UserWarning, match="called before the ``update``"),  # torchmetrics' own
        pytest.raises(OodevalError, match=r"OpenworldAUC has seen no sample; call update\(\)"),
    ):
        OpenworldAUC().compute()
    only_base = OpenworldAUC()
    only_base.update(T([0.5]), T([True]), T([True]))
    with pytest.raises(OodevalError, match=r"no new sample \(is_base is True for all 1 samples"):
        only_base.compute()
    mixed = OpenworldAUC()
    mixed.update(T([1, 2]), T([True, False]), T([True, True]))
    with pytest.raises(OodevalError, match=r"scores are torch.float64 but earlier .*torch.int64"):
        mixed.update(T([0.5]), T([True]), T([True]))
    some = OpenworldSummary(BASE, NUM_CLASSES)
    some.update(**PARTS)
    some.update(**{k: v for k, v in PARTS.items() if k != "predictions"})
    with pytest.raises(OodevalError, match=r"predictions were given for 4 of the 8 samples"):
        some.compute()


BLOCKED = """
import sys

class NotInstalled:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == sys.argv[1]:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled)
import oodeval.torchmetrics
"""


@pytest.mark.parametrize("missing", ["torchmetrics", "torch"])
def test_without_the_extra_the_import_names_it(missing: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, missing],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"oodeval._extras.MissingExtra: oodeval.torchmetrics needs the 'torchmetrics' extra "
        f"({missing} is not installed); install it with: pip install 'oodeval[torchmetrics]'"
    )


def test_two_processes_sync_to_the_value_on_all_the_data(tmp_path: Path) -> None:
    probs, labels = probability_samples(11, n=203)  # odd: the ranks hold 101 and 102 samples
    parts = {k: v.numpy() for k, v in model_parts(torch.from_numpy(probs)).items()}
    is_base = np.isin(labels, BASE)
    correct = np.where(is_base, parts["base_predictions"], parts["new_predictions"]) == labels
    data = {**parts, "labels": labels, "is_base": is_base, "correct": correct}
    ranks = run_on_ranks(
        openworld_metrics_on_rank, (data, BASE, NUM_CLASSES, 17), tmp_path, seconds=120
    )
    assert [r["seen"] for r in ranks] == [101, 102]
    expected = openworld_scores(probs, labels, BASE)
    d = {"score": parts["scores"], "is_base": is_base, "correct": correct}
    for result in ranks:  # every rank gets the value on all 203 samples
        assert result["summary"] == expected
        assert result["auc"] == reference_auc(d, 0.5) == expected["openworld_auc"]
