"""The leave-one-environment-out trainer of one unit (algorithm, seed, scenario).

For N given environments the unit trains N + 1 models: model k on E_given without e_k (the LOO
models of Section 3 of the worst+gap paper) and one model on all of E_given. Model k is tested on
all of e_k's data, the full model on every environment of E_all; the returned errors give the
average (Eq. 2), worst+gap (Eq. 6) and ideal (Eq. 4) measures of the unit.

The N LOO models are trained *together*: one algorithm instance holds them stacked (parameters of
shape (N, ...)), and each step gives model k the minibatches of its own N - 1 environments (a
per-model tensor (N, N - 1, B, ...)), so one batched forward/backward serves all of them and e_k's
data never reaches model k. The full model is a second instance on all N minibatches of the same
step. Algorithms with ``supports_ensemble = False`` are trained as N + 1 single-model instances on
the same minibatches (none of the built-in 14 needs this).

Model selection is DomainBed's training-domain validation: `holdout_fraction` of each given
environment is held out, and each model keeps the checkpoint (evaluated every `eval_every` steps
and at the last step) with the best mean validation accuracy over its own training environments
(first best on ties); ``selection="last"`` keeps the last step. Minibatches are drawn with
replacement from each environment's training part, B per environment per step.

Checkpoint records: with training-domain validation, every checkpoint of every LOO model k is also
kept as a `CheckpointRow` (step, its training-domain validation accuracy, and its accuracy on the
held-out e_k, split by the same seeded holdout as the given environments into an "in" part, the
test accuracy, and an "out" part, the oracle's test-domain validation split), DomainBed's
per-checkpoint record, so the seed and checkpoint variance and the oracle gap of NICO++ Section 4.4
can be computed from a study (`oodeval.results.variance`). They never change the selection.

Testing the full model on E_all: when the scenario describes E_all as variants of shared images
(`Scenario.shared_evaluation`, e.g. SR-CMNIST's 101 environments re-color the same held-out
images), the model predicts each image once per variant (twice, not 101 times) and each
environment's error is read off those predictions, with identical results; algorithms whose
predictions depend on the batch are tested environment by environment (MTL), those of them with a
per-image part (`Algorithm.per_image`, ARM's context maps) with that part computed once per image
and variant and gathered for each environment.

Precision: ``precision="bf16"`` runs the networks' matrix products in bfloat16 with float32
parameters, optimiser and losses (`oodeval.algorithms.networks.compute_precision`), for training
and testing; the training images are kept in bfloat16, which the first product rounds them to
anyway. On CPUs with native bfloat16 a unit runs 1.2-2.8x faster (ERM 2.3-2.7x), with slightly
different numbers (benchmarks/RESULTS.md). The default ``"fp32"`` is plain float32.

Device: ``device="cpu"`` (default), ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (cuda when available,
else cpu), checked by `oodeval._torch.resolve_device` (CUDA asked for where there is none is an
error, never a silent CPU run). The models are initialised on the CPU from the seed (so every
device starts from the same weights) and moved to the device; a unit's training and validation
tensors move there once, before the first step; minibatch indices are drawn on the CPU (the same
minibatches on every device) and gathered on the device; evaluation batches run on the device
(the evaluation images, the same for every unit of a scenario, are kept there once per process);
predictions come back to the CPU, so errors are float64 numbers as on the CPU. On CUDA the
process runs deterministic kernels (`oodeval._torch.deterministic_device`) and ``bf16`` is
``torch.autocast`` mixed precision (`compute_precision`); ``tf32`` (`TrainerOptions`) keeps
PyTorch's TF32 defaults or turns TF32 off. A training step never waits for the device: nothing
in it reads a device tensor on the host (the algorithms' random streams draw on the CPU from
states kept there, the minibatch indices are copied without waiting), and a non-finite loss is
looked for at every checkpoint period and at the last step instead of after every step (on the
CPU, after every update as before); it is still reported with the step it first appeared at.

Determinism: the seed fixes the holdout split, initialisation, minibatches and the algorithms' own
random draws (inside a forked torch RNG, so the caller's global RNG is untouched); the same seed
gives identical errors, also in another process (checked here with 1 and 2 torch threads).
"""

from __future__ import annotations

import math
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

from oodeval._torch import (
    TF32_MODES,
    check_device_spec,
    deterministic_device,
    resolve_device,
    tf32_mode,
)
from oodeval.algorithms import Algorithm, get_algorithm, resolve_hparams
from oodeval.algorithms.networks import compute_dtype, compute_precision, native_bf16
from oodeval.environments.base import Environment, Scenario, SharedEvaluation
from oodeval.errors import OodevalError, listing

SELECTIONS = ("training_domain", "last")
#: fold name of the model trained on all given environments
FULL_FOLD = "all"
#: rows per forward pass when predictions do not depend on the batch (conv nets run faster on
#: smaller chunks that stay in cache; measured on CPU: mnist_cnn at 28x28 predicts 2x faster in
#: chunks of 32-128 than of 1024)
EVAL_CHUNK = {"mlp": 8192, "cnn": 1024, "mnist_cnn": 64}
#: DomainBed's checkpoint frequency for the MNIST datasets
DEFAULT_EVAL_EVERY = 100


class TrainingDiverged(OodevalError):
    """A training loss became NaN or infinite; names the algorithm, the fold and the step."""

    def __init__(self, algorithm: str, fold: str, step: int, value: float = math.nan) -> None:
        self.algorithm, self.fold, self.step, self.value = algorithm, fold, step, value
        super().__init__(
            f"{algorithm} diverged: loss {value} in fold {fold!r} at step {step}; "
            "lower the learning rate or the penalty weight"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.algorithm, self.fold, self.step, self.value))


@dataclass(frozen=True)
class ResultRow:
    """Test error of one model on one environment.

    `fold` is the held-out given environment for a LOO model (tested on that environment only) or
    ``"all"`` for the model trained on every given environment (tested on each of E_all).
    """

    fold: str
    environment: str
    error: float
    count: int


@dataclass(frozen=True)
class CheckpointRow:
    """One checkpoint of the LOO model held out from `fold` (accuracies as fractions in [0, 1]).

    `train_val_acc` is the mean validation accuracy over the model's training environments (what
    training-domain validation maximises); `test_acc` its accuracy on the "in" part of the
    held-out environment and `oracle_val_acc` on its "out" part (`holdout_fraction` of its rows,
    the same seeded split as `Environment.split(holdout_fraction, seed)`), the test-domain
    validation split of an oracle.
    """

    fold: str
    step: int
    train_val_acc: float
    test_acc: float
    oracle_val_acc: float


@dataclass
class UnitResult:
    """All test errors of one unit, with its hyperparameters and timings (seconds)."""

    algorithm: str
    seed: int
    scenario_name: str
    rows: list[ResultRow]
    hparams: dict
    steps: int
    timings: dict[str, float] = field(default_factory=dict)
    #: every checkpoint of every LOO model (empty with ``selection="last"``), by fold then step
    checkpoints: list[CheckpointRow] = field(default_factory=list)

    def loo_errors(self) -> dict[str, float]:
        """LOO test errors {e_n: R_{e_n}(f^{E_given \\ e_n})}, in given-environment order."""
        return {r.fold: r.error for r in self.rows if r.fold != FULL_FOLD}

    def all_errors(self) -> dict[str, float]:
        """Errors of the full model on every environment of E_all, in E_all order."""
        return {r.environment: r.error for r in self.rows if r.fold == FULL_FOLD}

    def measures(self) -> dict[str, float]:
        """The unit's domain measures from the LOO errors, plus ``"ideal"`` (Eq. 4) from E_all.

        Measures whose formula needs more environments than were given (worst+gap and gap-only
        need 3, Eq. 6) are left out, as the measure registry declares.

        >>> rows = [ResultRow("a", "a", 0.1, 10), ResultRow("b", "b", 0.3, 10),
        ...         ResultRow("c", "c", 0.2, 10), ResultRow("all", "x", 0.4, 10)]
        >>> m = UnitResult("ERM", 0, "s", rows, {}, 1).measures()
        >>> round(m["worst_plus_gap"], 6), m["ideal"]
        (0.5, 0.4)
        """
        from oodeval.measures.domain import MEASURES, domain_measures, ideal, undefined_measures

        loo = np.array(list(self.loo_errors().values()))
        undefined = undefined_measures(list(MEASURES), len(loo))
        names = [k for k in MEASURES if k not in undefined]
        out = {k: float(v) for k, v in domain_measures(loo, names).items()}
        out["ideal"] = float(ideal(np.array(list(self.all_errors().values()))))
        return out


@dataclass
class TrainedUnit:
    """The selected N + 1 models of a unit (each an `Algorithm` holding one model, in eval mode).

    `precision` is the arithmetic they were trained in; predict inside
    ``compute_precision(trained.precision)`` to get `run_unit`'s test numbers (outside it the
    products run in float32).
    """

    algorithm: str
    folds: list[str]
    models: list[Algorithm]
    selected_step: list[int]
    val_accuracy: list[float]
    hparams: dict
    timings: dict[str, float]
    checkpoints: list[CheckpointRow] = field(default_factory=list)
    precision: str = "fp32"
    #: the device the models live on (resolved: never ``"auto"``)
    device: str = "cpu"


@dataclass
class _Run:
    """One algorithm instance and the unit models it holds.

    ``envs[i, j]`` is the given environment in training slot j of its model i.
    """

    algorithm: Algorithm
    envs: torch.Tensor
    models: list[int]
    #: the slots' index on the device of the minibatches (moved there once), or None for all
    #: slots in order (the minibatches as they are)
    _index: dict[torch.device, torch.Tensor | None] = field(default_factory=dict)

    def minibatches(self, xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This run's share of a step's minibatches: shared (E, B, ...) for a single model, else
        per model (M, E, B, ...)."""
        if xb.device not in self._index:
            index = self.envs[0] if len(self.models) == 1 else self.envs
            whole = index.dim() == 1 and torch.equal(index, torch.arange(len(xb)))
            self._index[xb.device] = None if whole else index.to(xb.device)
        index = self._index[xb.device]
        if index is None:
            return xb, yb
        return xb[index], yb[index]


@dataclass(frozen=True)
class TrainerOptions:
    """How the trainer trains and selects a unit's models; checked when made.

    These are the keyword options of `run_unit` and `train_models` and the keys of a study
    config's ``[trainer]`` table (`oodeval.study.config.TRAINER_KEYS`).

    Attributes
    ----------
    selection : ``"training_domain"`` (DomainBed's training-domain validation) or ``"last"``.
    eval_every : validation period for model selection (default 100, DomainBed's MNIST checkpoint
        period); the last step is always a checkpoint.
    holdout_fraction : fraction of each given environment held out for validation (not trained on).
    batch_size : minibatch size per environment; also the prediction chunk of batch-dependent
        algorithms.
    precision : ``"fp32"`` or ``"bf16"``: arithmetic of the networks' matrix products, in training
        and testing (module docstring).
    device : ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (module docstring); the spelling is
        checked here, CUDA's presence when the unit runs.
    tf32 : ``"default"`` (PyTorch's TF32 defaults, DomainBed's: TF32 cuDNN convolutions, full
        float32 cuBLAS products) or ``"off"`` (full float32 everywhere), for training and testing
        (`oodeval._torch.tf32_mode`); no effect on the CPU. A study stores it in its config's
        ``[trainer]`` table, with precision and device, when it is not the default.
    """

    selection: str = "training_domain"
    eval_every: int | None = None
    holdout_fraction: float = 0.2
    batch_size: int = 64
    precision: str = "fp32"
    device: str = "cpu"
    tf32: str = TF32_MODES[0]

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise OodevalError(
                f"unknown selection {self.selection!r}; choose one of {', '.join(SELECTIONS)}"
            )
        fraction = self.holdout_fraction
        allowed = 0 <= fraction < 1 if self.selection == "last" else 0 < fraction < 1
        if not allowed:
            raise OodevalError(
                f"holdout_fraction must be in (0, 1) for training-domain validation (in [0, 1) "
                f"for selection='last'), got {fraction}"
            )
        if self.batch_size < 1:
            raise OodevalError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.eval_every is not None and self.eval_every < 1:
            raise OodevalError(f"eval_every must be >= 1, got {self.eval_every}")
        compute_dtype(self.precision)  # unknown names fail here, before any data is prepared
        check_device_spec(self.device)
        if self.tf32 not in TF32_MODES:
            raise OodevalError(
                f"unknown tf32 mode {self.tf32!r}; choose one of {', '.join(TF32_MODES)}"
            )

    @classmethod
    def from_keywords(cls, options: Mapping[str, Any]) -> TrainerOptions:
        """The options named in `options` (the others at their defaults); unknown names fail.

        >>> TrainerOptions.from_keywords({"batch_size": 16}).batch_size
        16
        """
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise OodevalError(
                f"unknown trainer option(s) {listing(unknown)}; the trainer takes "
                f"{', '.join(names)}"
            )
        return cls(**options)


@dataclass
class _Data:
    """A unit's data as tensors: the training parts of the N given environments, concatenated
    (environment k's rows at ``offsets[k]:offsets[k] + sizes[k]``), and their validation parts."""

    x: torch.Tensor  # on the unit's device, as are y and the validation images
    y: torch.Tensor
    sizes: torch.Tensor  # float64: a uniform draw in [0, 1) times a size is a row index
    offsets: torch.Tensor
    val: list[tuple[torch.Tensor, torch.Tensor]]
    #: the "in" part of each given environment (its training rows), for the checkpoint records
    held_in: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def minibatches(
        self, generator: torch.Generator, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step's minibatches (N, B, ...): B rows drawn with replacement per environment."""
        sizes = self.sizes
        draw = torch.rand(len(sizes), batch_size, generator=generator, dtype=torch.float64)
        idx = self.offsets[:, None] + (draw * sizes[:, None]).long().clamp_max(
            sizes.long()[:, None] - 1
        )
        # drawn on the CPU: the same minibatches on every device; copied without waiting for it
        idx = idx.to(self.x.device, non_blocking=True)
        return self.x[idx], self.y[idx]


class _Selection:
    """Training-domain validation: the best checkpoint so far of every model of every run.

    A model keeps a checkpoint whose mean validation accuracy beats its best (first best on ties);
    the best parameters of a run's models are kept in one state dict, model by model.
    """

    def __init__(self, runs: list[_Run]) -> None:
        self.accuracy = [torch.full((len(r.models),), -math.inf, dtype=torch.float64) for r in runs]
        self.step = [[0] * len(r.models) for r in runs]
        self.state: list[dict[str, torch.Tensor] | None] = [None] * len(runs)

    def update(self, r: int, run: _Run, accuracy: torch.Tensor, step: int) -> None:
        """Keep run `r`'s models whose `accuracy` at `step` beats their best."""
        improved = accuracy > self.accuracy[r]
        if not bool(improved.any()):
            return
        state = run.algorithm.state_dict()
        best = self.state[r]
        if best is None:
            self.state[r] = {k: v.detach().clone() for k, v in state.items()}
        else:
            masks = {}  # per device: the random streams' states stay on the CPU
            for k, v in state.items():
                mask = masks.setdefault(v.device, improved.to(v.device))
                best[k][mask] = v[mask]
        self.accuracy[r] = torch.where(improved, accuracy, self.accuracy[r])
        for i in torch.nonzero(improved).flatten().tolist():
            self.step[r][i] = step


class _Divergence:
    """The first non-finite loss of every model of every run, kept where the losses are.

    Recording never reads a loss on the host (on a GPU that would wait for the step to finish);
    `check` does, so the trainer calls it after every run's update on the CPU and at every
    checkpoint period and the last step elsewhere: a diverged model is still named with its first
    bad step.
    """

    def __init__(self, n_runs: int) -> None:
        self.step: list[torch.Tensor | None] = [None] * n_runs
        self.value: list[torch.Tensor | None] = [None] * n_runs

    def record(self, r: int, loss: torch.Tensor, step: int) -> None:
        """Note run `r`'s per-model `loss` at `step` where no bad loss was noted yet."""
        if self.step[r] is None:
            self.step[r] = torch.zeros(loss.shape, dtype=torch.long, device=loss.device)
            self.value[r] = torch.zeros_like(loss)
        new = (self.step[r] == 0) & ~torch.isfinite(loss)
        self.step[r] = torch.where(new, step, self.step[r])
        self.value[r] = torch.where(new, loss, self.value[r])

    def check(self, runs: list[_Run], algorithm: str, folds: list[str]) -> None:
        """Raise `TrainingDiverged` for the earliest bad loss noted (first run, first model)."""
        worst = None
        for r, steps in enumerate(self.step):
            if steps is None:
                continue
            host = steps.cpu()
            for i in torch.nonzero(host).flatten().tolist():
                if worst is None or int(host[i]) < worst[0]:
                    worst = (int(host[i]), r, i)
        if worst is not None:
            step, r, i = worst
            value = float(self.value[r][i])
            raise TrainingDiverged(algorithm, folds[runs[r].models[i]], step, value)


def _check_run(steps: int, options: TrainerOptions) -> None:
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise OodevalError(f"steps must be a positive integer, got {steps!r}")
    spec = str(options.device)  # bf16 on CUDA is autocast, native there
    on_cpu = spec == "cpu" or (spec == "auto" and not torch.cuda.is_available())
    if options.precision == "bf16" and on_cpu and not native_bf16():
        warnings.warn(
            "precision='bf16' on a CPU without native bfloat16 (avx512_bf16 / amx_bf16): the "
            "products are emulated and slower than fp32; use precision='fp32' here",
            RuntimeWarning,
            stacklevel=4,  # the caller of run_unit / train_models
        )


def predict_labels(
    model: Algorithm, images: np.ndarray | torch.Tensor, *, context: int
) -> torch.Tensor:
    """Predicted classes (M, n) of every model held by `model`, in large no-grad batches.

    Batch-dependent algorithms (ARM, MTL) see chunks of `context` rows, the training batch size.
    The batches run on the model's device (numpy images are moved there once per process,
    `on_device`); the predictions come back on the CPU.
    """
    device = model.env_mask.device
    x = images.to(device) if isinstance(images, torch.Tensor) else on_device(images, device)
    chunk = context if model.batch_dependent else EVAL_CHUNK.get(model.model, 1024)
    model.eval()
    with torch.inference_mode():
        parts = [model.predict(x[i : i + chunk]).argmax(-1) for i in range(0, len(x), chunk)]
    if not parts:
        return torch.zeros(model.num_models, 0, dtype=torch.long)
    return torch.cat(parts, dim=1).cpu()


#: float32 copies of numpy images on a GPU, by (id of the array, device); an entry leaves with
#: its array (a weak reference), so a worker keeps its scenario's evaluation images there once
_ON_DEVICE: dict[tuple[int, str], tuple[weakref.ref, torch.Tensor]] = {}


def on_device(images: np.ndarray, device: torch.device | str) -> torch.Tensor:
    """`images` as a float32 tensor on `device`: on the CPU as before (no copy for float32 images),
    elsewhere copied once per process and array and kept while the array lives."""
    device = torch.device(device)
    if device.type == "cpu":
        return torch.as_tensor(images, dtype=torch.float32)
    key = (id(images), str(device))
    hit = _ON_DEVICE.get(key)
    if hit is not None and hit[0]() is images:
        return hit[1]
    tensor = torch.as_tensor(images, dtype=torch.float32).to(device)
    try:
        ref = weakref.ref(images, lambda _ref, key=key: _ON_DEVICE.pop(key, None))
    except TypeError:  # not weak-referenceable (a subclass without slots): no caching
        return tensor
    _ON_DEVICE[key] = (ref, tensor)
    return tensor


def _error(model: Algorithm, env: Environment, context: int) -> float:
    if len(env) == 0:
        raise OodevalError(f"environment {env.name!r} has no data to test on")
    pred = predict_labels(model, env.images, context=context)[0]
    return float((pred != torch.as_tensor(env.labels)).double().mean())


def _full_model_rows(full: Algorithm, scenario: Scenario, context: int) -> list[ResultRow]:
    """The full model's `ResultRow` on every environment of E_all, in E_all order."""
    shared = scenario.shared_evaluation()
    if full.batch_dependent and type(full).per_image is Algorithm.per_image:
        shared = None  # every environment's batches differ: predicted one by one
    if shared is None:
        return [
            ResultRow(FULL_FOLD, env.name, _error(full, env, context), len(env))
            for env in scenario.evaluation()
        ]
    return _shared_rows(full, shared, context)


def _shared_rows(full: Algorithm, shared: SharedEvaluation, context: int) -> list[ResultRow]:
    """Errors on E_all from one prediction per (image, variant): environment j's prediction for
    image i is the one made on image i rendered in its variant ``variants[j][i]``."""
    labels = torch.as_tensor(shared.labels)
    n = len(labels)
    if n == 0:
        raise OodevalError("the evaluation environments have no data to test on")
    values = shared.values()
    rows = torch.arange(n)
    out = []
    if full.batch_dependent:  # with a per-image part: computed once per image and variant
        predict = _variant_predictor(full, shared, values, context)
        for name, variant in zip(shared.names, shared.variants, strict=True):
            wrong = predict(np.searchsorted(values, variant)) != labels
            out.append(ResultRow(FULL_FOLD, name, float(wrong.double().mean()), n))
        return out
    predicted = torch.stack(
        [predict_labels(full, shared.render(v), context=context)[0] for v in values]
    )
    wrong = predicted != labels  # (V, n): is image i misclassified in variant values[v]
    for name, variant in zip(shared.names, shared.variants, strict=True):
        which = torch.as_tensor(np.searchsorted(values, variant))
        out.append(ResultRow(FULL_FOLD, name, float(wrong[which, rows].double().mean()), n))
    return out


def _variant_predictor(
    full: Algorithm, shared: SharedEvaluation, values: list[int], context: int
) -> Callable[[np.ndarray], torch.Tensor]:
    """For a batch-dependent `full` model with a per-image part (`Algorithm.per_image`): a
    function of an environment's variant index per image (into `values`) that returns its
    predicted classes (n,), as `predict_labels` on the environment's images in chunks of
    `context`, with the per-image part of every (variant, image) computed once up front."""
    device = full.env_mask.device
    images = torch.stack([on_device(shared.render(v), device) for v in values])  # (V, n, ...)
    n = images.shape[1]
    full.eval()
    with torch.inference_mode():
        parts = torch.stack(
            [
                torch.cat([full.per_image(x[i : i + context]) for i in range(0, n, context)], 1)
                for x in images
            ]
        )  # (V, M, n, ...)
    rows = torch.arange(n, device=device)

    def predict(which: np.ndarray) -> torch.Tensor:
        index = torch.as_tensor(which, device=device)
        x = images[index, rows]
        part = parts[index, :, rows].transpose(0, 1)  # (M, n, ...)
        with torch.inference_mode():
            logits = [
                full.predict_from(x[i : i + context], part[:, i : i + context])
                for i in range(0, n, context)
            ]
        return torch.cat(logits, dim=1).argmax(-1)[0].cpu()

    return predict


def _fit(
    scenario: Scenario,
    given: Sequence[Environment],
    algorithm: str,
    *,
    seed: int,
    steps: int,
    hparams: dict | None,
    model: str,
    options: TrainerOptions,
    progress: Callable[[int, int], None] | None,
) -> TrainedUnit:
    """Train and select the unit's N LOO models and its full model (`train_models`)."""
    _check_run(steps, options)
    cls = get_algorithm(algorithm)
    hp = resolve_hparams(algorithm, hparams)
    n = len(given)
    if n < 2:
        raise OodevalError(f"leave-one-out training needs >= 2 given environments, got {n}")
    folds = [e.name for e in given] + [FULL_FOLD]
    device = resolve_device(options.device)
    deterministic_device(device)
    data = _prepare(scenario, given, seed, options, device)
    timings = {"train": 0.0, "selection_eval": 0.0}
    start = time.perf_counter()
    with (
        torch.random.fork_rng(devices=_rng_devices(device)),
        compute_precision(options.precision, device),
        tf32_mode(options.tf32),
    ):
        torch.manual_seed(seed)
        runs = _new_runs(cls, hp, model, data.input_shape, scenario.num_classes, n)
        for run in runs:  # initialised on the CPU: every device starts from the same weights
            run.algorithm.to(device)
        loop_start = time.perf_counter()
        best, records = _train(
            runs, data, folds, algorithm, seed=seed, steps=steps, options=options,
            progress=progress, timings=timings,
        )  # fmt: skip
        # the steps alone: no model building, moving to the device or selection
        timings["steps"] = time.perf_counter() - loop_start - timings["selection_eval"]
        models, selected, accuracy = _selected_models(runs, best, steps, options.selection)
    timings["train"] = time.perf_counter() - start - timings["selection_eval"]
    records.sort(key=lambda c: (folds.index(c.fold), c.step))
    return TrainedUnit(
        algorithm, folds, models, selected, accuracy, hp, timings, records, options.precision,
        device,
    )  # fmt: skip


def _rng_devices(device: str) -> list[int]:
    """The CUDA devices whose RNG a unit on `device` forks (none on the CPU)."""
    where = torch.device(device)
    if where.type != "cuda":
        return []
    return [torch.cuda.current_device() if where.index is None else where.index]


def _prepare(
    scenario: Scenario,
    given: Sequence[Environment],
    seed: int,
    options: TrainerOptions,
    device: str = "cpu",
) -> _Data:
    """Split each given environment (seeded holdout) and gather the parts as tensors on `device`
    (moved there once); check them."""
    parts = [env.split(options.holdout_fraction, seed) for env in given]
    for env, (train, val) in zip(given, parts, strict=True):
        if len(train) == 0 or (options.selection == "training_domain" and len(val) == 0):
            raise OodevalError(
                f"environment {env.name!r} ({len(env)} rows) leaves an empty training or "
                f"validation part with holdout_fraction={options.holdout_fraction}; give it "
                "more data"
            )
    train_x = torch.from_numpy(np.concatenate([t.images for t, _ in parts]).astype(np.float32))
    train_y = torch.from_numpy(np.concatenate([t.labels for t, _ in parts]).astype(np.int64))
    on_cpu = torch.device(device).type == "cpu"
    if options.precision != "fp32" and on_cpu:  # the first product rounds them: half the bytes
        train_x = train_x.to(compute_dtype(options.precision))
    sizes = torch.tensor([len(t) for t, _ in parts], dtype=torch.float64)
    offsets = torch.cumsum(sizes, 0).long() - sizes.long()
    val = [
        (torch.from_numpy(v.images.astype(np.float32)).to(device), torch.from_numpy(v.labels))
        for _, v in parts
    ]  # labels stay on the CPU, where the predictions come back
    labels = train_y
    train_x, train_y = train_x.to(device), train_y.to(device)
    held_in = [
        (train_x[o : o + s], labels[o : o + s])
        for o, s in zip(offsets.tolist(), sizes.long().tolist(), strict=True)
    ]
    input_shape = tuple(train_x.shape[1:])
    if input_shape != tuple(scenario.input_shape):
        raise OodevalError(
            f"scenario {scenario.name!r} declares input_shape {tuple(scenario.input_shape)} but "
            f"its images have shape {input_shape}; make them agree"
        )
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < scenario.num_classes:
        raise OodevalError(
            f"labels must lie in [0, {scenario.num_classes}) for scenario {scenario.name!r}, got "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    return _Data(train_x, train_y, sizes, offsets, val, held_in)


def _new_runs(
    cls: type[Algorithm], hp: dict, model: str, input_shape: tuple, num_classes: int, n: int
) -> list[_Run]:
    """The algorithm instances of a unit, initialised in this order from torch's global RNG: the
    N LOO models stacked in one (one instance each without ensemble support), the full model."""

    def new(envs: torch.Tensor, models: list[int]) -> _Run:
        own = torch.ones(envs.shape, dtype=torch.bool)
        return _Run(cls(input_shape, num_classes, own, hp, model=model), envs, models)

    loo = torch.stack([torch.cat([torch.arange(k), torch.arange(k + 1, n)]) for k in range(n)])
    if cls.supports_ensemble:
        runs = [new(loo, list(range(n)))]
    else:
        runs = [new(loo[k : k + 1], [k]) for k in range(n)]
    return runs + [new(torch.arange(n)[None], [n])]


def _train(
    runs: list[_Run],
    data: _Data,
    folds: list[str],
    algorithm: str,
    *,
    seed: int,
    steps: int,
    options: TrainerOptions,
    progress: Callable[[int, int], None] | None,
    timings: dict[str, float],
) -> tuple[_Selection, list[CheckpointRow]]:
    """The training loop: `steps` updates of every run, checkpoints every ``eval_every`` steps.

    Returns the selection (best checkpoints) and every checkpoint's records; adds the time spent
    evaluating checkpoints to ``timings["selection_eval"]``.
    """
    generator = torch.Generator().manual_seed(seed)
    every = min(options.eval_every or DEFAULT_EVAL_EVERY, steps)
    best = _Selection(runs)
    records: list[CheckpointRow] = []
    watch = _Divergence(len(runs))
    on_cpu = data.x.device.type == "cpu"
    for step in range(1, steps + 1):
        xb, yb = data.minibatches(generator, options.batch_size)
        for r, run in enumerate(runs):
            run.algorithm.train()
            watch.record(r, run.algorithm.update(*run.minibatches(xb, yb))["loss"], step)
            if on_cpu:  # nothing to wait for: stop at the first bad run, as soon as it is bad
                watch.check(runs, algorithm, folds)
        if step % every == 0 or step == steps:
            watch.check(runs, algorithm, folds)
        if options.selection == "training_domain" and (step % every == 0 or step == steps):
            t0 = time.perf_counter()
            for r, run in enumerate(runs):
                envs = torch.unique(run.envs).tolist()
                matrix = _accuracy_matrix(run, data.val, envs, options.batch_size)
                accuracy = matrix.gather(1, run.envs).mean(dim=1)
                records += _checkpoint_rows(
                    run, matrix, accuracy, data.val, data.held_in, folds, step, options.batch_size
                )
                best.update(r, run, accuracy, step)
            timings["selection_eval"] += time.perf_counter() - t0
        if progress is not None:
            progress(step, steps)
    return best, records


def _selected_models(
    runs: list[_Run], best: _Selection, steps: int, selection: str
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
            if selection == "training_domain":
                selected[k], accuracy[k] = best.step[r][i], float(best.accuracy[r][i])
    return models, selected, accuracy


def _accuracy_matrix(
    run: _Run, data: list[tuple[torch.Tensor, torch.Tensor]], envs: list[int], context: int
) -> torch.Tensor:
    """Accuracy (M, E) of each model of `run` on ``data[j]`` for j in `envs` (NaN elsewhere)."""
    acc = torch.full((len(run.models), len(data)), math.nan, dtype=torch.float64)
    for j in envs:
        x, y = data[j]
        pred = predict_labels(run.algorithm, x, context=context)
        acc[:, j] = (pred == y).double().mean(dim=1)
    return acc


def _checkpoint_rows(
    run: _Run,
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
    out = _accuracy_matrix(run, val, missing, context) if missing else val_matrix
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
    run: _Run, i: int, data: tuple[torch.Tensor, torch.Tensor], context: int
) -> float:
    """Accuracy of model i of `run` by itself on ``data = (images, labels)``."""
    model = run.algorithm
    if len(run.models) > 1:
        with torch.random.fork_rng(devices=[]):  # building the copy draws initial weights
            model = run.algorithm.select_models(i)
    x, y = data
    return float((predict_labels(model, x, context=context)[0] == y).double().mean())


def train_models(
    scenario: Scenario,
    algorithm: str,
    *,
    seed: int,
    steps: int,
    hparams: dict | None = None,
    model: str = "mlp",
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> TrainedUnit:
    """Train and select a unit's N LOO models and its full model (see `run_unit`), untested."""
    return _fit(
        scenario,
        scenario.given(),
        algorithm,
        seed=seed,
        steps=steps,
        hparams=hparams,
        model=model,
        options=TrainerOptions.from_keywords(options),
        progress=progress,
    )


def run_unit(
    scenario: Scenario,
    algorithm: str,
    *,
    seed: int,
    steps: int,
    hparams: dict | None = None,
    model: str = "mlp",
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> UnitResult:
    """Train one unit's N + 1 models and test them: LOO model k on e_k, the full model on E_all.

    Parameters
    ----------
    scenario : Scenario
        Its ``given()`` environments are E_given (N >= 2), ``evaluation()`` yields E_all.
    algorithm : str
        A registered algorithm name (`oodeval.algorithms.available()`).
    seed : int
        Fixes the holdout split, the initialisation, the minibatches and the algorithm's own
        randomness: the same seed gives identical errors.
    steps : int
        Training updates (each update sees ``batch_size`` rows of every training environment).
    hparams : dict, optional
        Overrides of the algorithm's defaults (`oodeval.algorithms.default_hparams`).
    model : one of `oodeval.algorithms.networks.MODELS`: "mlp", "cnn" (both for CPU work) or
        "mnist_cnn" (DomainBed's MNIST_CNN, for 2x28x28 scenarios)
    progress : callable(step, steps), optional
    **options
        The trainer's options, fields of `TrainerOptions`: selection, eval_every,
        holdout_fraction, batch_size, precision, device (``"cpu"``, ``"cuda"``, ``"cuda:N"``,
        ``"auto"``), tf32 (``"default"``, ``"off"``).

    Returns
    -------
    UnitResult with N rows (fold = environment = e_k) followed by one row per environment of
    E_all (fold = "all"); errors are fractions in [0, 1] on all of each environment's rows.
    ``checkpoints`` holds a `CheckpointRow` per (LOO model, checkpoint) with training-domain
    validation (none with ``selection="last"``).
    Raises `TrainingDiverged` when a loss becomes NaN or infinite.
    """
    start = time.perf_counter()
    trainer = TrainerOptions.from_keywords(options)
    given = scenario.given()
    trained = _fit(
        scenario,
        given,
        algorithm,
        seed=seed,
        steps=steps,
        hparams=hparams,
        model=model,
        options=trainer,
        progress=progress,
    )
    t0 = time.perf_counter()
    context = trainer.batch_size
    with compute_precision(trained.precision, trained.device), tf32_mode(trainer.tf32):
        rows = [
            ResultRow(env.name, env.name, _error(trained.models[k], env, context), len(env))
            for k, env in enumerate(given)
        ]
        rows += _full_model_rows(trained.models[-1], scenario, context)
    timings = dict(trained.timings)
    timings["test_eval"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - start
    return UnitResult(
        algorithm,
        int(seed),
        scenario.name,
        rows,
        trained.hparams,
        int(steps),
        timings,
        trained.checkpoints,
    )
