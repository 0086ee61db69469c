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

Checkpoint selection (DomainBed's "model selection") is training-domain validation:
`holdout_fraction` of each given environment is held out, and each model keeps the checkpoint
(evaluated every `eval_every` steps and at the last step) with the best mean validation accuracy
over its own training environments (first best on ties); ``selection="last"`` keeps the last
step. Minibatches are drawn with
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

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oodeval._torch import deterministic_device, resolve_device, tf32_mode
from oodeval.algorithms import Algorithm, get_algorithm, resolve_hparams
from oodeval.algorithms.hparams import SMALL_IMAGE_BATCH_SIZE, default_batch_size
from oodeval.algorithms.networks import (
    FEATURIZERS,
    ResNet,
    compute_precision,
    imagenet_normalization,
    native_bf16,
)
from oodeval.algorithms.pretrained import checked_weights, load_weights, read_weights
from oodeval.environments.base import Environment, Scenario
from oodeval.errors import OodevalError
from oodeval.training.augment import domainbed_augmented
from oodeval.training.checkpoints import (
    BestCheckpoints,
    accuracy_matrix,
    checkpoint_rows,
    selected_models,
)
from oodeval.training.data import TrainingRun, UnitData, prepare_data
from oodeval.training.evaluation import environment_error, full_model_rows
from oodeval.training.options import (
    DEFAULT_EVAL_EVERY,
    NOT_PRETRAINED,
    PRECISIONS,
    TrainerOptions,
)
from oodeval.training.results import (
    FULL_FOLD,
    CheckpointRow,
    ResultRow,
    TrainingDiverged,
    UnitResult,
)


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
    precision: str = PRECISIONS[0]
    #: the device the models live on (resolved: never ``"auto"``)
    device: str = "cpu"
    #: the SHA-256 of the pretrained weights the models started from, or ``"not pretrained"``
    pretrained: str = NOT_PRETRAINED
    #: the minibatch size (rows per environment and step) the models trained with, also the
    #: prediction chunk of batch-dependent algorithms (`TrainerOptions.batch_size`, resolved)
    batch_size: int = SMALL_IMAGE_BATCH_SIZE


class DivergenceWatch:
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
        steps, values = self.step[r], self.value[r]
        if steps is None or values is None:  # run r's first record
            steps = torch.zeros(loss.shape, dtype=torch.long, device=loss.device)
            values = torch.zeros_like(loss)
        new = (steps == 0) & ~torch.isfinite(loss)
        self.step[r] = torch.where(new, step, steps)
        self.value[r] = torch.where(new, loss, values)

    def check(self, runs: list[TrainingRun], algorithm: str, folds: list[str]) -> None:
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
            values = self.value[r]
            assert values is not None  # noted with run r's steps
            value = float(values[i])
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
    if options.pretrained is not None:
        pretrained_model_problem(model, raise_it=True)
    cls = get_algorithm(algorithm)
    hp = resolve_hparams(algorithm, hparams, model=model)
    n = len(given)
    if n < 2:
        raise OodevalError(f"leave-one-out training needs >= 2 given environments, got {n}")
    folds = [e.name for e in given] + [FULL_FOLD]
    shape = tuple(scenario.input_shape)
    if options.augment and (len(shape) != 3 or shape[0] not in (1, 3)):
        raise OodevalError(
            f"augment needs images of 1 or 3 channels, (C, H, W); scenario {scenario.name!r} has "
            f"inputs of shape {shape}; set augment = false"
        )
    batch_size = options.batch_size or default_batch_size(algorithm, model)  # DomainBed's default
    device = resolve_device(options.device)
    deterministic_device(device)
    data = prepare_data(scenario, given, seed, options, device)
    timings = {"train": 0.0, "selection_eval": 0.0}
    start = time.perf_counter()
    with (
        torch.random.fork_rng(devices=_rng_devices(device)),
        compute_precision(options.precision, device),
        tf32_mode(options.tf32),
    ):
        torch.manual_seed(seed)
        runs = _new_runs(
            cls, hp, model, data.input_shape, scenario.num_classes, n, options.imagenet_normalize
        )
        pretrained = NOT_PRETRAINED
        if options.pretrained is not None:  # before anything trains, on the CPU
            pretrained = load_pretrained(runs, options.pretrained, algorithm)
        for run in runs:  # initialised on the CPU: every device starts from the same weights
            run.algorithm.to(device)
        loop_start = time.perf_counter()
        best, records = _train(
            runs, data, folds, algorithm, seed=seed, steps=steps, batch_size=batch_size,
            options=options, progress=progress, timings=timings,
        )  # fmt: skip
        # the steps alone: no model building, moving to the device or selection
        timings["steps"] = time.perf_counter() - loop_start - timings["selection_eval"]
        models, selected, accuracy = selected_models(runs, best, steps, options.selection)
    timings["train"] = time.perf_counter() - start - timings["selection_eval"]
    records.sort(key=lambda c: (folds.index(c.fold), c.step))
    return TrainedUnit(
        algorithm, folds, models, selected, accuracy, hp, timings, records, options.precision,
        device, pretrained, batch_size,
    )  # fmt: skip


#: the models pretrained weights are for (`oodeval.algorithms.networks.ResNet`)
RESNET_MODELS = tuple(name for name, cls in FEATURIZERS.items() if issubclass(cls, ResNet))


def pretrained_model_problem(model: str, *, raise_it: bool = False) -> str | None:
    """Why `model` cannot take pretrained weights (it is not a ResNet), or None; with
    `raise_it` the reason is raised as an OodevalError.

    >>> pretrained_model_problem("mlp")
    "pretrained weights are for model resnet18 or resnet50, not 'mlp'; set model to one of them or drop pretrained"
    """  # noqa: E501
    if model in RESNET_MODELS:
        return None
    problem = (
        f"pretrained weights are for model {' or '.join(RESNET_MODELS)}, not {model!r}; set "
        "model to one of them or drop pretrained"
    )
    if raise_it:
        raise OodevalError(problem)
    return problem


def check_pretrained(path: str, model: str) -> None:
    """Refuse, in one OodevalError line, weights file `path` unless it is a torchvision
    state_dict that `model` (``resnet18`` or ``resnet50``) loads: readable, the right keys and
    shapes (`oodeval.algorithms.pretrained.checked_weights`), read once (none when `path` is an
    `oodeval._digest.ReadFile`). Nothing is built or drawn: the shapes come from a network on
    the meta device."""
    pretrained_model_problem(model, raise_it=True)
    cls = FEATURIZERS[model]
    assert issubclass(cls, ResNet)  # RESNET_MODELS
    with torch.device("meta"):
        shapes = cls(1, (3, 32, 32)).torchvision_shapes()
    checked_weights(read_weights(path), shapes, model, str(path))


def load_pretrained(runs: list[TrainingRun], path: str, algorithm: str) -> str:
    """Load weights file `path` into every ResNet (found among ``.modules()``) of every run's
    algorithm; its SHA-256. The file is read once (`load_weights`; not at all when `path` is an
    `oodeval._digest.ReadFile`, which carries its bytes), so every ResNet gets the same weights
    (a file changing meanwhile cannot split them). An algorithm holding no ResNet is refused."""
    nets = [[m for m in run.algorithm.modules() if isinstance(m, ResNet)] for run in runs]
    if not all(nets):
        raise OodevalError(
            f"algorithm {algorithm} holds no ResNet to load pretrained weights {path} into; "
            "build its networks with oodeval.algorithms.networks.build_featurizer, or drop "
            "pretrained"
        )
    weights = load_weights(path)
    for net in (net for held in nets for net in held):
        net.load_pretrained(weights)
    return weights.sha256


def _rng_devices(device: str) -> list[int]:
    """The CUDA devices whose RNG a unit on `device` forks (none on the CPU)."""
    where = torch.device(device)
    if where.type != "cuda":
        return []
    return [torch.cuda.current_device() if where.index is None else where.index]


def _new_runs(
    cls: type[Algorithm],
    hp: dict,
    model: str,
    input_shape: tuple,
    num_classes: int,
    n: int,
    imagenet_normalize: bool = True,
) -> list[TrainingRun]:
    """The algorithm instances of a unit, initialised in this order from torch's global RNG: the
    N LOO models stacked in one (one instance each without ensemble support), the full model.

    They are built inside `imagenet_normalization`, so that every ResNet they hold normalises
    its inputs as `imagenet_normalize` says (an algorithm that builds one otherwise, with
    ``normalize=`` of its own, is refused in one line)."""

    def new(envs: torch.Tensor, models: list[int]) -> TrainingRun:
        own = torch.ones(envs.shape, dtype=torch.bool)
        with imagenet_normalization(imagenet_normalize):
            algorithm = cls(input_shape, num_classes, own, hp, model=model)
        for net in algorithm.modules():
            if isinstance(net, ResNet) and net.normalize != imagenet_normalize:
                raise OodevalError(
                    f"algorithm {cls.name} holds a ResNet with normalize={net.normalize}, the "
                    f"trainer's imagenet_normalize is {imagenet_normalize}; build its networks "
                    "with build_featurizer(...), which follows it, without normalize="
                )
        return TrainingRun(algorithm, envs, models)

    loo = torch.stack([torch.cat([torch.arange(k), torch.arange(k + 1, n)]) for k in range(n)])
    if cls.supports_ensemble:
        runs = [new(loo, list(range(n)))]
    else:
        runs = [new(loo[k : k + 1], [k]) for k in range(n)]
    return runs + [new(torch.arange(n)[None], [n])]


def _train(
    runs: list[TrainingRun],
    data: UnitData,
    folds: list[str],
    algorithm: str,
    *,
    seed: int,
    steps: int,
    batch_size: int,
    options: TrainerOptions,
    progress: Callable[[int, int], None] | None,
    timings: dict[str, float],
) -> tuple[BestCheckpoints, list[CheckpointRow]]:
    """The training loop: `steps` updates of every run on minibatches of `batch_size` rows per
    environment, checkpoints every ``eval_every`` steps.

    Returns the selection (best checkpoints) and every checkpoint's records; adds the time spent
    evaluating checkpoints to ``timings["selection_eval"]``.
    """
    generator = torch.Generator().manual_seed(seed)
    every = min(options.eval_every or DEFAULT_EVAL_EVERY, steps)
    best = BestCheckpoints(runs)
    records: list[CheckpointRow] = []
    watch = DivergenceWatch(len(runs))
    on_cpu = data.x.device.type == "cpu"
    for step in range(1, steps + 1):
        xb, yb = data.minibatches(generator, batch_size)
        if options.augment:  # every image of the step's (N, B, C, H, W) minibatches
            flat = xb.reshape(-1, *xb.shape[2:])
            xb = domainbed_augmented(flat, generator, int(xb.shape[-1])).reshape(xb.shape)
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
                matrix = accuracy_matrix(run, data.val, envs, batch_size)
                accuracy = matrix.gather(1, run.envs).mean(dim=1)
                records += checkpoint_rows(
                    run, matrix, accuracy, data.val, data.held_in, folds, step, batch_size
                )
                best.update(r, run, accuracy, step)
            timings["selection_eval"] += time.perf_counter() - t0
        if progress is not None:
            progress(step, steps)
    return best, records


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
        Overrides of the algorithm's defaults (`oodeval.algorithms.default_hparams`), and of
        the model's (``resnet_dropout`` for the ResNets).
    model : one of `oodeval.algorithms.networks.MODELS`: "mlp", "cnn" (both for CPU work),
        "mnist_cnn" (DomainBed's MNIST_CNN, for 2x28x28 scenarios), "resnet18" or "resnet50"
        (DomainBed's ResNets, randomly initialised unless ``pretrained``; see
        `oodeval.algorithms.networks.ResNet`)
    progress : callable(step, steps), optional
    **options
        The trainer's options, fields of `TrainerOptions`: selection, eval_every,
        holdout_fraction, batch_size (default: DomainBed's for the model and algorithm, 64 for
        the small networks, 32 for the ResNets, 8 for ARM on them), precision, device
        (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"``), tf32 (``"default"``, ``"off"``),
        augment, imagenet_normalize (default True: the ResNets' ImageNet normalisation of their
        inputs), pretrained (a torchvision ``state_dict`` file loaded into the ResNets before
        training; its SHA-256 is the result's ``pretrained``).

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
    rows = _tested_rows(trained, scenario, given, trainer)
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
        trained.pretrained,
    )


def _tested_rows(
    trained: TrainedUnit, scenario: Scenario, given: Sequence[Environment], trainer: TrainerOptions
) -> list[ResultRow]:
    """The `ResultRow` of LOO model k on e_k, then of the full model on each of E_all, predicted
    in the arithmetic the models were trained in."""
    context = trained.batch_size
    with compute_precision(trained.precision, trained.device), tf32_mode(trainer.tf32):
        rows = [
            ResultRow(
                env.name, env.name, environment_error(trained.models[k], env, context), len(env)
            )
            for k, env in enumerate(given)
        ]
        rows += full_model_rows(trained.models[-1], scenario, context)
    return rows
