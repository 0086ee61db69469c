"""Gated Mixture-of-Prompts (GMoP, Section 5.1 of the OpenworldAUC paper) on frozen features.

GMoP splits the open-world model into three parts, each with its own "prompt":

* a base-domain classifier ``g`` with a learnable context, trained with cross-entropy on the base
  classes;
* a new-domain classifier ``h`` that stays zero-shot (fixed class text features, no training), so
  it cannot overfit the base classes;
* a detector ``r`` made of K sub-detectors ``r_k``, each with its own learnable context and each
  trained on a pseudo base/new partition of the base classes: with the base classes in sorted order
  ``c_0 < c_1 < ...``, class ``c_j`` is pseudo-new in partition ``k`` iff ``j mod K == k``.

Loss: the objective (OP_fin) of Section 5.1 plus the paper's cross-entropy regulariser
(Sec. 6.3), written out term by term in `oodeval.openworld.objective`::

    L = l_ce(g) + w_rank * (1/K) sum_k R_k + lambda * (1/K) sum_k l_ce(r_k)

``R_k`` is the gated AUC ranking term of sub-detector ``r_k`` on partition k (square surrogate
``l_sq(t) = (1 - t)^2``; weight ``w_rank`` = `GMoPConfig.ranking_weight`, 1 in the paper),
``l_ce(r_k)`` the sub-detector's cross-entropy on its pseudo-base samples, and ``lambda`` =
`GMoPConfig.ce_weight`, the paper's lambda. The gates ``phi_b``, ``phi_n`` of the pairs are
`GMoPConfig.gate`: ``"sigmoid"`` (the paper's), ``"hard"`` (0-1) or ``"none"`` (Table 17); the
sigmoid is applied to the softmax probability of the ground-truth class -- g's over the
pseudo-base classes of partition k for ``phi_b``, the zero-shot h's over its pseudo-new classes
for ``phi_n`` -- for the reason given in `oodeval.openworld.objective`. Because ``h`` has no
parameters, gradient reaches ``g`` only through the base gate (and not at all with the hard or
no gate). The double sum is computed in O(n) by expanding the square (`gated_auc_loss`);
`gated_auc_loss_pairwise` is the n_b x n_n reference.

Scores. During training ``r_k(x)`` is the largest softmax probability over the pseudo-base classes,
the softmax taken over all base classes (pseudo-new ones included, as new classes are at test
time). At test time ``r_k(x)`` is the largest softmax probability over the base classes, the
softmax taken over all classes, and ``r(x) = max_k r_k(x)`` (Section 5.1, "Pseudo Base-to-New
Partition").

Learnable context in feature space. Only frozen features are available here, so a "prompt" cannot
be prepended to class-name tokens. Each context is instead a class-shared affine map of the text
features, ``t'_c = normalize(t_c + W t_c + b)`` with ``W`` (d x d) and ``b`` (d,) initialised to
zero, so training starts from the zero-shot classifier and, like a CoOp context, one set of
parameters serves every class -- including classes never seen in training. Unlike prompt tuning
through the text transformer (see `oodeval.openworld.clip`), the correction can only be affine in
the frozen class embedding: it cannot re-read the class name in a new context, and it does not use
the text encoder's nonlinearity. Logits are ``logit_scale * cos(x, t'_c)`` as in CLIP.

torch is imported by this module; it belongs to the training parts of ``oodeval.openworld``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from oodeval._npz import read_npz, write_npz
from oodeval._torch import deterministic_device, resolve_device, single_threaded
from oodeval.errors import OodevalError, option
from oodeval.measures.openworld import openworld_scores
from oodeval.openworld.features import FeatureSet
from oodeval.openworld.objective import (
    GATES,
    GMoPConfig,
    check_config,
    check_gate,
    gate_weights,
    gated_auc_loss,
    gated_auc_loss_pairwise,
    objective_text,
)

__all__ = [
    "GATES",
    "MODEL_FORMAT",
    "ContextClassifier",
    "GMoP",
    "GMoPConfig",
    "PseudoPartition",
    "SingleContext",
    "check_config",
    "check_gate",
    "evaluate_model",
    "fit_contexts",
    "loss_weights",
    "gated_auc_loss",
    "gated_auc_loss_pairwise",
    "load_model",
    "objective_text",
    "pseudo_partitions",
    "save_model",
    "training_logit_scale",
    "train_gmop",
    "train_single_context",
    "zero_shot_model",
]

MODEL_FORMAT = "oodeval-gmop-1"


@dataclass(frozen=True)
class PseudoPartition:
    """One pseudo base/new partition of the base classes (sorted class ids)."""

    pseudo_base: tuple[int, ...]
    pseudo_new: tuple[int, ...]


def pseudo_partitions(base_classes: Sequence[int], n_partitions: int = 3) -> list[PseudoPartition]:
    """K pseudo base/new partitions: sorted base class number j is pseudo-new in partition j mod K.

    Every base class is pseudo-new in exactly one partition and pseudo-base in the other K - 1, so
    the pseudo-base sets cover the base classes (Section 5.1) whenever K >= 2.

    Examples
    --------
    >>> [(p.pseudo_base, p.pseudo_new) for p in pseudo_partitions([0, 1, 2, 3, 4], 3)]
    [((1, 2, 4), (0, 3)), ((0, 2, 3), (1, 4)), ((0, 1, 3, 4), (2,))]
    """
    base = sorted({int(c) for c in base_classes})
    if not isinstance(n_partitions, int | np.integer) or n_partitions < 2:
        raise OodevalError(
            f"the number of partitions K must be an integer >= 2, got {n_partitions}"
        )
    if n_partitions > len(base):
        raise OodevalError(
            f"K={n_partitions} partitions need at least K base classes, got {len(base)}; "
            f"lower {option('n_partitions')} to at most {len(base)}"
        )
    return [
        PseudoPartition(
            tuple(c for j, c in enumerate(base) if j % n_partitions != k),
            tuple(c for j, c in enumerate(base) if j % n_partitions == k),
        )
        for k in range(n_partitions)
    ]


def _contextual_text(text: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Class text features through a learnable context: normalize(t + W t + b), row-wise."""
    return F.normalize(text + text @ weight.T + bias, dim=-1)


def _positions(y: torch.Tensor, classes: Sequence[int]) -> torch.Tensor:
    """The position of each label of `y` in `classes`, on `y`'s device (a lookup table, so a
    GPU batch is never read back element by element).

    >>> _positions(torch.tensor([7, 3, 7]), [3, 9, 7]).tolist()
    [2, 0, 2]
    """
    table = torch.full((max(classes) + 1,), -1, dtype=torch.long, device=y.device)
    table[torch.tensor(list(classes), dtype=torch.long, device=y.device)] = torch.arange(
        len(classes), device=y.device
    )
    if y.numel() and int(y.max()) >= len(table):
        raise OodevalError(f"label {int(y.max())} is not one of the classes {list(classes)}")
    idx = table[y]
    if bool((idx < 0).any()):
        raise OodevalError(f"a label is not one of the classes {list(classes)}")
    return idx


def _check_features(x: np.ndarray | torch.Tensor, dim: int) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x, dtype=np.float32))
    if t.ndim != 2 or t.shape[1] != dim:
        raise OodevalError(
            f"features have shape {tuple(t.shape)} but the model expects (n, {dim}); use features "
            "from the same encoder as the model's text features"
        )
    return F.normalize(t, dim=1)


class ContextClassifier(torch.nn.Module):
    """Shared pieces: frozen unit text features (C, d), a logit scale, base/new class ids."""

    # a buffer, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    text: torch.Tensor

    def __init__(
        self, text_features: np.ndarray, base_classes: Sequence[int], logit_scale: float
    ) -> None:
        super().__init__()
        text = torch.as_tensor(np.asarray(text_features, dtype=np.float32))
        self.register_buffer("text", F.normalize(text, dim=1))
        self.base_classes = tuple(sorted(int(c) for c in base_classes))
        if any(not 0 <= c < len(text) for c in self.base_classes):  # before a tensor is indexed
            raise OodevalError(f"base classes must be ids 0..{len(text) - 1}, one per text row")
        self.new_classes = tuple(c for c in range(text.shape[0]) if c not in self.base_classes)
        if not self.base_classes or not self.new_classes:
            raise OodevalError("need at least one base class and one new class")
        if not logit_scale > 0:
            raise OodevalError(f"logit_scale must be positive, got {logit_scale}")
        self.logit_scale = float(logit_scale)

    @property
    def dim(self) -> int:
        return int(self.text.shape[1])

    def _logits(
        self, x: torch.Tensor, classes: Sequence[int], weight: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        text = _contextual_text(self.text[list(classes)], weight, bias)
        return self.logit_scale * x @ text.T

    def zero_shot_logits(self, x: torch.Tensor, classes: Sequence[int]) -> torch.Tensor:
        """Logits of the fixed (hand-crafted prompt) classifier h over `classes`."""
        return self.logit_scale * x @ self.text[list(classes)].T


class GMoP(ContextClassifier):
    """GMoP on frozen features: g's context, K detector contexts, zero-shot h (see module doc)."""

    def __init__(
        self,
        text_features: np.ndarray,
        base_classes: Sequence[int],
        *,
        n_partitions: int = 3,
        logit_scale: float = 100.0,
        gate: str = "sigmoid",
    ) -> None:
        super().__init__(text_features, base_classes, logit_scale)
        self.partitions = pseudo_partitions(self.base_classes, n_partitions)
        self.gate = check_gate(gate)
        d, k = self.dim, n_partitions
        self.g_weight = torch.nn.Parameter(torch.zeros(d, d))
        self.g_bias = torch.nn.Parameter(torch.zeros(d))
        self.r_weight = torch.nn.Parameter(torch.zeros(k, d, d))
        self.r_bias = torch.nn.Parameter(torch.zeros(k, d))

    @property
    def n_partitions(self) -> int:
        return len(self.partitions)

    def base_logits(self, x: torch.Tensor, classes: Sequence[int] | None = None) -> torch.Tensor:
        """Logits of g over `classes` (default: all base classes)."""
        return self._logits(x, classes or self.base_classes, self.g_weight, self.g_bias)

    def detector_logits(self, x: torch.Tensor, k: int, classes: Sequence[int]) -> torch.Tensor:
        """Logits of sub-detector k over `classes`."""
        return self._logits(x, classes, self.r_weight[k], self.r_bias[k])

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """The three terms of the loss on a batch of unit features `x` and base-class labels `y`.

        Returns a dict with "ce" (g's cross-entropy l_ce(g)), "auc" (the gated AUC ranking term
        (1/K) sum_k R_k over the partitions present in the batch) and "detector_ce" (the
        regulariser (1/K) sum_k l_ce(r_k) that the paper's lambda weights).
        """
        base = self.base_classes
        pos = {c: i for i, c in enumerate(base)}
        y_pos = _positions(y, base)
        ce = F.cross_entropy(self.base_logits(x), y_pos)
        auc_terms, det_terms = [], []
        for k, part in enumerate(self.partitions):
            is_pb = torch.isin(y, torch.tensor(part.pseudo_base, device=y.device))
            is_pn = ~is_pb
            # r_k's softmax over every base class; its score is the max over pseudo-base ones.
            det_logits = self.detector_logits(x, k, base)
            pb_cols = [pos[c] for c in part.pseudo_base]
            if is_pb.any():
                det_terms.append(F.cross_entropy(det_logits[is_pb], y_pos[is_pb]))
            if not (is_pb.any() and is_pn.any()):
                continue
            r_k = det_logits.softmax(dim=1)[:, pb_cols].amax(dim=1)
            gate_b = self.base_gate(x[is_pb], y[is_pb], part.pseudo_base)
            gate_n = self.new_gate(x[is_pn], y[is_pn], part.pseudo_new)
            auc_terms.append(gated_auc_loss(r_k[is_pb], r_k[is_pn], gate_b, gate_n))
        zero = x.new_zeros(())
        return {
            "ce": ce,
            "auc": torch.stack(auc_terms).mean() if auc_terms else zero,
            "detector_ce": torch.stack(det_terms).mean() if det_terms else zero,
        }

    def base_gate(self, x: torch.Tensor, y: torch.Tensor, classes: Sequence[int]) -> torch.Tensor:
        """phi_b from g's softmax over `classes` (`gate_weights`; sigmoid: sigmoid(p_g(y | x)),
        which depends on g's context)."""
        logits = self.base_logits(x, classes)
        return gate_weights(logits, _positions(y, classes), self.gate)

    def new_gate(self, x: torch.Tensor, y: torch.Tensor, classes: Sequence[int]) -> torch.Tensor:
        """phi_n from the zero-shot softmax over `classes` (no learnable input)."""
        logits = self.zero_shot_logits(x, classes)
        return gate_weights(logits, _positions(y, classes), self.gate)

    def detector_scores(self, x: torch.Tensor) -> torch.Tensor:
        """r(x) = max_k max_{c in base} softmax_k(x)_c, each softmax over all C classes."""
        every = list(range(self.text.shape[0]))
        per_k = [
            self.detector_logits(x, k, every).softmax(dim=1)[:, list(self.base_classes)].amax(1)
            for k in range(self.n_partitions)
        ]
        return torch.stack(per_k, dim=1).amax(dim=1)

    @torch.no_grad()
    def predict(self, features: Any) -> dict[str, np.ndarray]:
        """Open-world outputs for `features` (n, d).

        Returns "detector_scores" r(x), "base_predictions" g(x), "new_predictions" h(x) (class
        ids) and "outputs" (n, C): the gated mixture ``r(x) p_g(c|x)`` on base classes and
        ``(1 - r(x)) p_h(c|x)`` on new ones, whose argmax defines GMoP's OverallAcc.
        """
        x = _check_features(features, self.dim).to(self.text.device)
        with single_threaded():
            r = self.detector_scores(x)
            p_g = self.base_logits(x).softmax(dim=1)
            p_h = self.zero_shot_logits(x, self.new_classes).softmax(dim=1)
        outputs = torch.zeros(x.shape[0], self.text.shape[0], dtype=torch.float64, device=x.device)
        outputs[:, list(self.base_classes)] = (r[:, None] * p_g).double()
        outputs[:, list(self.new_classes)] = ((1.0 - r)[:, None] * p_h).double()
        base = np.asarray(self.base_classes)
        new = np.asarray(self.new_classes)
        return {
            "detector_scores": r.double().cpu().numpy(),
            "base_predictions": base[p_g.argmax(dim=1).cpu().numpy()],
            "new_predictions": new[p_h.argmax(dim=1).cpu().numpy()],
            "outputs": outputs.cpu().numpy(),
        }


class SingleContext(ContextClassifier):
    """One context shared by every class: CoOp's analogue (trained) or CLIP zero-shot (untrained).

    Outputs are the softmax over all classes; the detector is its max over the base classes, g
    and h the argmax over base / new columns (the reference methods of the paper's Table 2).
    """

    def __init__(
        self, text_features: np.ndarray, base_classes: Sequence[int], *, logit_scale: float = 100.0
    ) -> None:
        super().__init__(text_features, base_classes, logit_scale)
        self.weight = torch.nn.Parameter(torch.zeros(self.dim, self.dim))
        self.bias = torch.nn.Parameter(torch.zeros(self.dim))

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Cross-entropy over the base classes (the only term of CoOp-style training)."""
        y_pos = _positions(y, self.base_classes)
        logits = self._logits(x, self.base_classes, self.weight, self.bias)
        return {"ce": F.cross_entropy(logits, y_pos)}

    @torch.no_grad()
    def predict(self, features: Any) -> dict[str, np.ndarray]:
        """ "outputs" (n, C) softmax over all classes plus the derived detector and predictions."""
        x = _check_features(features, self.dim)
        every = list(range(self.text.shape[0]))
        with single_threaded():
            logits = self._logits(x.to(self.text.device), every, self.weight, self.bias)
        probs = logits.softmax(dim=1).double().cpu().numpy()
        base, new = np.asarray(self.base_classes), np.asarray(self.new_classes)
        return {
            "detector_scores": probs[:, base].max(axis=1),
            "base_predictions": base[probs[:, base].argmax(axis=1)],
            "new_predictions": new[probs[:, new].argmax(axis=1)],
            "outputs": probs,
        }


def _training_tensors(train: FeatureSet) -> tuple[torch.Tensor, torch.Tensor]:
    base = np.asarray(train.base_classes)
    keep = np.isin(train.labels, base)
    if not keep.any():
        raise OodevalError("the training features hold no base-class samples; nothing to train")
    present = set(np.unique(train.labels[keep]).tolist())
    empty = [c for c in train.base_classes if c not in present]
    if empty:
        raise OodevalError(
            f"base class(es) {empty} have no training samples; give samples of every base class "
            "or drop them from base_classes"
        )
    x = F.normalize(torch.from_numpy(train.features[keep].astype(np.float32)), dim=1)
    return x, torch.from_numpy(train.labels[keep].astype(np.int64))


def fit_contexts(
    model: GMoP | SingleContext, train: FeatureSet, config: GMoPConfig, weights: dict
) -> None:
    """Train `model`'s contexts in place: Adam on the sum of the loss terms `model.losses`
    returns, each times its weight in `weights`; full batch or seeded mini-batches."""
    with single_threaded():
        _fit_steps(model, train, config, weights)


def _fit_steps(
    model: GMoP | SingleContext, train: FeatureSet, config: GMoPConfig, weights: dict
) -> None:
    x, y = _training_tensors(train)
    device = next(model.buffers()).device  # the text features live where the model does
    x, y = x.to(device), y.to(device)
    gen = torch.Generator().manual_seed(config.seed)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    n = x.shape[0]
    batch = n if config.batch_size is None else max(1, min(int(config.batch_size), n))
    perm = torch.randperm(n, generator=gen)
    cursor = 0
    for step in range(config.steps):
        if batch == n:
            idx = torch.arange(n)
        else:
            if cursor + batch > n:
                perm, cursor = torch.randperm(n, generator=gen), 0
            idx, cursor = perm[cursor : cursor + batch], cursor + batch
        idx = idx.to(device)  # drawn on the CPU: the same batches on every device
        terms = model.losses(x[idx], y[idx])
        loss = sum(weights[name] * value for name, value in terms.items())
        if not torch.isfinite(loss):
            raise OodevalError(
                f"training diverged (loss {float(loss)}) at step {step}; lower {option('lr')}"
            )
        opt.zero_grad()
        loss.backward()
        opt.step()


def loss_weights(config: GMoPConfig) -> dict[str, float]:
    """The weight of each term `GMoP.losses` returns: 1 for l_ce(g), ``ranking_weight`` for the
    gated AUC term, the paper's lambda (``ce_weight``) for the sub-detectors' cross-entropy.

    >>> loss_weights(GMoPConfig(ce_weight=0.5))
    {'ce': 1.0, 'auc': 1.0, 'detector_ce': 0.5}
    """
    return {"ce": 1.0, "auc": config.ranking_weight, "detector_ce": config.ce_weight}


def training_logit_scale(train: FeatureSet, config: GMoPConfig) -> float:
    """The logit scale to train with: the config's, else the feature file's."""
    return float(config.logit_scale if config.logit_scale is not None else train.logit_scale)


_Model = TypeVar("_Model", bound=torch.nn.Module)


def _on(model: _Model, device: str) -> _Model:
    """`model` moved to `device` (`oodeval._torch.resolve_device`: no silent CPU), made
    deterministic there."""
    where = resolve_device(device)
    deterministic_device(where)
    return model.to(where)


def train_gmop(train: FeatureSet, config: GMoPConfig | None = None, *, device: str = "cpu") -> GMoP:
    """Train GMoP's base context and K detector contexts on `train` (base-class rows are used).

    Same features, config and seed give bit-identical parameters (on one device). The model
    trains on `device` (``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``) and stays there;
    `predict` returns numpy arrays and `save_model` writes it from any device.

    Examples
    --------
    >>> from oodeval.openworld.features import synthetic_features
    >>> fs = synthetic_features(n_classes=6, dim=8, n_per_class=4, seed=0)
    >>> model = train_gmop(fs, GMoPConfig(steps=2))
    >>> model.n_partitions, model.base_classes
    (3, (0, 1, 2))
    """
    config = config or GMoPConfig()
    check_config(config)
    torch.manual_seed(config.seed)
    model = GMoP(
        train.text_features,
        train.base_classes,
        n_partitions=config.n_partitions,
        logit_scale=training_logit_scale(train, config),
        gate=config.gate,
    )
    fit_contexts(_on(model, device), train, config, loss_weights(config))
    return model.eval()


def train_single_context(
    train: FeatureSet, config: GMoPConfig | None = None, *, device: str = "cpu"
) -> SingleContext:
    """The CoOp-style reference: one context trained with cross-entropy on the base classes only
    (on `device`, as `train_gmop`)."""
    config = config or GMoPConfig()
    check_config(config)
    model = SingleContext(
        train.text_features, train.base_classes, logit_scale=training_logit_scale(train, config)
    )
    fit_contexts(_on(model, device), train, config, {"ce": 1.0})
    return model.eval()


def zero_shot_model(features: FeatureSet, *, logit_scale: float | None = None) -> SingleContext:
    """The CLIP-style zero-shot reference: fixed text features, max-softmax detector."""
    scale = features.logit_scale if logit_scale is None else logit_scale
    return SingleContext(features.text_features, features.base_classes, logit_scale=scale).eval()


def evaluate_model(model: GMoP | SingleContext, test: FeatureSet) -> dict[str, float]:
    """OpenworldAUC, AUROC, HM, BaseAcc, NewAcc and OverallAcc of `model` on `test`."""
    if tuple(test.base_classes) != model.base_classes:
        raise OodevalError(
            f"test base classes {list(test.base_classes)} differ from the model's "
            f"{list(model.base_classes)}; use the same base and new classes"
        )
    if test.text_features.shape[0] != model.text.shape[0]:
        raise OodevalError(
            f"test features have {test.text_features.shape[0]} classes but the model has "
            f"{model.text.shape[0]}"
        )
    out = model.predict(test.features)
    return openworld_scores(
        out["outputs"],
        test.labels,
        model.base_classes,
        detector_scores=out["detector_scores"],
        base_predictions=out["base_predictions"],
        new_predictions=out["new_predictions"],
    )


def save_model(
    path: str | Path, model: GMoP | SingleContext, config: GMoPConfig | None = None
) -> None:
    """Write a trained model to ``.npz`` (plain arrays; read back with `load_model`)."""
    arrays: dict[str, np.ndarray] = {
        "format": np.asarray(MODEL_FORMAT),
        "kind": np.asarray("gmop" if isinstance(model, GMoP) else "single_context"),
        "text_features": model.text.cpu().numpy(),
        "base_classes": np.asarray(model.base_classes, dtype=np.int64),
        "logit_scale": np.asarray(model.logit_scale),
    }
    for name, value in model.state_dict().items():
        if name != "text":
            arrays[f"param_{name}"] = value.detach().cpu().numpy()
    if config is not None:
        arrays["config_json"] = np.asarray(_config_json(config))
    write_npz(path, **arrays)


def _config_json(config: GMoPConfig) -> str:
    import json

    return json.dumps(asdict(config), sort_keys=True)


def load_model(path: str | Path) -> GMoP | SingleContext:
    """Read a model written by `save_model` (``allow_pickle=False``; arrays checked by shape)."""
    arrays, _ = read_npz(path, what="GMoP model file", example="oodeval.openworld.gmop.save_model")
    if str(arrays.get("format", "")) != MODEL_FORMAT:
        raise OodevalError(f"{path}: not an oodeval GMoP model (train one with train-gmop)")
    kind = str(arrays.get("kind", ""))
    needed = ["kind", "text_features", "base_classes", "logit_scale"]
    needed += ["param_r_bias"] if kind == "gmop" else []
    missing = [k for k in needed if k not in arrays]
    if missing or (kind == "gmop" and arrays["param_r_bias"].ndim != 2):
        raise OodevalError(
            f"{path}: damaged GMoP model file (missing array(s) {', '.join(missing) or 'none'}, "
            "or param_r_bias is not K x d); train it again with train-gmop"
        )
    text = arrays["text_features"]
    base = [int(c) for c in arrays["base_classes"]]
    scale = float(arrays["logit_scale"])
    if kind == "gmop":
        k = int(arrays["param_r_bias"].shape[0])
        model: GMoP | SingleContext = GMoP(text, base, n_partitions=k, logit_scale=scale)
    else:
        model = SingleContext(text, base, logit_scale=scale)
    # The stored text features are already unit rows: load them bit for bit.
    state = {"text": torch.from_numpy(np.asarray(text, dtype=np.float32))}
    for name, value in model.state_dict().items():
        if name == "text":
            continue
        stored = arrays.get(f"param_{name}")
        if stored is None or tuple(stored.shape) != tuple(value.shape):
            raise OodevalError(f"{path}: parameter {name} is missing or has the wrong shape")
        state[name] = torch.from_numpy(np.asarray(stored, dtype=np.float32))
    model.load_state_dict(state)
    return model.eval()
