"""The algorithm interface and the loss helpers every algorithm shares.

An `Algorithm` holds M models at once (an ensemble whose parameters are stacked on a first axis,
see `oodeval.algorithms.networks`) and a boolean ``env_mask`` of shape (M, E): model ``m`` trains
on environment slot ``e`` only where ``env_mask[m, e]``. An update gets one minibatch per
environment slot, stacked, either shared by all models or per model. The contract an algorithm
keeps (what ``update`` receives and returns, what the masks mean, random draws, the single-model
DomainBed view) is the docstring of `Algorithm`; ``examples/my_algorithm.py`` is a user's algorithm
written against it.

DomainBed parity: each built-in algorithm's default update is DomainBed's (``algorithms.py``) for
the same weights, minibatches and random draws; where DomainBed has a known defect, the default
keeps it (so results compare with DomainBed's published numbers), a hyperparameter of that
algorithm corrects it, and `DomainBedDefectWarning` names that hyperparameter when the defect bites.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from oodeval.algorithms.hparams import HParam, fixed, log_uniform
from oodeval.algorithms.networks import imagenet_normalization, imagenet_normalization_on
from oodeval.errors import OodevalError

T = TypeVar("T")


class DomainBedDefectWarning(UserWarning):
    """DomainBed's behaviour, kept by default for comparability, is known to be wrong here.

    The message names the algorithm's hyperparameter that corrects it (e.g. MLDG's
    ``mldg_always_update`` when a model has too few environments to form a meta-test split).
    """


def stream_state(seed: int) -> torch.Tensor:
    """The state of a fresh CPU torch generator seeded with `seed` (a uint8 tensor)."""
    return torch.Generator().manual_seed(int(seed)).get_state()


class Algorithm(nn.Module, metaclass=ABCMeta):
    """Base class: M stacked models trained on masked per-environment minibatches.

    The contract every algorithm keeps (`oodeval.algorithms.erm.ERM` is the smallest one;
    ``examples/my_algorithm.py`` adds a penalty to it in 20 lines):

    **Registering.** Decorate the class with `register_algorithm` and declare its hyperparameters
    in ``HPARAMS`` (name -> `HParam`: default, random-search sampler, meaning); they join those of
    its base classes (`hparam_space`). A study runs it once its module is imported (the config's
    ``imports``).

    **Construction.** ``cls(input_shape, num_classes, env_mask, hparams, *, model="mlp")``: the
    trainer (`oodeval.training.run_unit`) and `select_models` build instances with this signature,
    so a subclass keeps it (ERM's ``build_extra_parts`` and ``build_optimizer`` hooks add modules
    without a constructor). ``hparams`` holds every name of `hparam_space` (the defaults with the
    study's overrides), read as ``self.hparams[key]`` (`flag` for booleans). Initial weights come
    from the global torch RNG, which the trainer seeds. The ResNets an instance builds normalise
    their inputs, or not, as the trainer's ``imagenet_normalize`` says: the trainer builds it
    inside `oodeval.algorithms.networks.imagenet_normalization`, which ``build_featurizer``
    follows; the instance keeps the setting in ``imagenet_normalize``, and `select_models` builds
    its copy with it.

    **Stacked models.** One instance holds M independent models: every parameter and buffer has
    the model axis first, shape (M, ...) (`oodeval.algorithms.networks` has stacked layers). The
    models never mix: the objective is a vector of per-model losses (M,) whose *sum* is minimised,
    so model m's gradient is its own loss's (ERM's ``step``).

    **Environment masks.** ``env_mask`` (M, E), boolean: model m trains on environment slot e
    only where ``env_mask[m, e]``; ``own_envs[m]`` lists those slots. In a leave-one-out stack on
    shared minibatches ``env_mask[k, k]`` is False: model k never learns from e_k, neither
    through its loss nor through anything computed across samples or environments (means,
    statistics, pairs, percentiles, embeddings, partners drawn at random). `masked_mean` averages
    over the allowed slots with exactly zero gradient elsewhere.

    **update(x, y) -> dict.** One training step on one minibatch of B samples per slot, in one of
    two layouts that must give the same result:

    - shared: ``x`` (E, B, *input_shape), ``y`` (E, B); model m uses the slots of its mask;
    - per model: ``x`` (M, E, B, *input_shape), ``y`` (M, E, B); ``x[m]`` is model m's own.

    The trainer gives its N leave-one-out models the per-model layout: ``x[k]`` holds the
    minibatches of the N - 1 environments other than e_k, in environment order, and the mask is
    all True, shape (N, N - 1); the model on all N environments is a second instance (M = 1) on
    the shared (N, B, ...) minibatches. ``update`` computes the losses, steps its optimizer(s)
    and counts ``update_count``; it returns detached per-model tensors of shape (M,), with at
    least ``"loss"``: the trainer raises `oodeval.training.TrainingDiverged`, naming the fold,
    when a model's loss is not finite. Other keys (``"nll"``, ``"penalty"``...) are for
    inspection (tests, notebooks); the trainer does not record them.

    **predict(x) -> logits.** ``x`` (n, *input_shape), shared by all models, in eval mode
    without gradients; returns (M, n, num_classes). An algorithm whose predictions depend on the
    other rows of the batch sets ``batch_dependent = True`` and is then fed chunks of the
    training batch size.

    **Random draws.** Draws inside ``update`` (meta-test splits, mixing weights, partners, noise)
    never come from the global RNG, whose numbers for model m would depend on the other models:
    set ``random_draws = True`` and draw through `draw` (model m's own stream), so that a model
    draws the same numbers stacked or alone; `stream` replays them in tests.

    **select_models(index)** returns a copy holding model `index` alone (M = 1, its mask row, its
    rows of every parameter and buffer, ``update_count``), in eval mode: how the trainer hands
    out each fold's selected model. Other Python attributes are not copied, so whatever
    ``predict`` needs must live in parameters or buffers.

    **The single-model view (DomainBed's).** With M = 1 and an all-True mask, ``update(x, y)`` is
    DomainBed's ``update(minibatches)`` on ``minibatches = [(x[e], y[e]) for e in range(E)]``:
    ``x = torch.stack([xe for xe, _ in minibatches])`` (DomainBed's ``torch.cat`` of the
    minibatches is `flat_inputs`; its loop over minibatches is the E axis) and the loss is a
    1-vector. Model m of a stack is exactly that single model trained on
    ``[(x[e], y[e]) for e in own_envs[m]]`` (shared layout) or on its own ``x[m], y[m]`` (per
    model): write the update for one model in DomainBed's terms, then turn each loop over
    environments into the E axis and each mean over environments into a `masked_mean` with
    ``env_mask``. Minibatches all have B rows (DomainBed allows a smaller last one; the trainer
    draws B rows with replacement). An update that cannot be written for stacked models sets
    ``supports_ensemble = False``: the trainer then trains one M = 1 instance per model, each on
    the shared minibatches of its own environments only.

    A leave-one-out stack of three models, trained in the trainer's per-model layout, and model 0
    trained alone on DomainBed's list of its two minibatches (float64, so the two agree to
    rounding):

    >>> import torch
    >>> from oodeval.algorithms import default_hparams, get_algorithm
    >>> _ = torch.manual_seed(0)
    >>> mask = torch.ones(3, 2, dtype=torch.bool)  # 3 models, 2 environment slots each
    >>> stack = get_algorithm("ERM")((1, 4, 4), 2, mask, default_hparams("ERM")).double()
    >>> alone = stack.select_models(0).double().train()  # model 0 by itself (M = 1)
    >>> x = torch.randn(3, 8, 1, 4, 4, dtype=torch.float64)  # environments 0, 1, 2; B = 8
    >>> y = torch.randint(0, 2, (3, 8))
    >>> loo = torch.tensor([[1, 2], [0, 2], [0, 1]])  # model k's environments: all but k
    >>> stack.update(x[loo], y[loo])["loss"].shape  # x[loo]: (3, 2, 8, 1, 4, 4)
    torch.Size([3])
    >>> minibatches = [(x[1], y[1]), (x[2], y[2])]  # DomainBed's update(minibatches), model 0
    >>> xs, ys = (torch.stack(t) for t in zip(*minibatches))
    >>> alone.update(xs, ys)["loss"].shape
    torch.Size([1])
    >>> probe = torch.randn(5, 1, 4, 4, dtype=torch.float64)
    >>> stack.predict(probe).shape
    torch.Size([3, 5, 2])
    >>> torch.allclose(stack.predict(probe)[0], alone.predict(probe)[0], rtol=0, atol=1e-12)
    True
    """

    name: ClassVar[str] = "Algorithm"
    HPARAMS: ClassVar[dict[str, HParam]] = {
        "lr": HParam(1e-3, log_uniform(-4.5, -2.5), "Adam learning rate"),
        "weight_decay": HParam(0.0, fixed(0.0), "Adam L2 weight decay (0 for small images)"),
    }
    #: False when update() can only train one model on all the environments it is given.
    supports_ensemble: ClassVar[bool] = True
    #: True when predictions depend on the other inputs of the batch (ARM, MTL): the trainer then
    #: predicts in chunks of the training batch size.
    batch_dependent: ClassVar[bool] = False
    #: True when update() draws random numbers: every model then gets its own stream (`draw`).
    random_draws: ClassVar[bool] = False
    #: buffers that stay on the CPU when the algorithm moves to a device: the random streams'
    #: states, read and written by CPU generators (a draw never reads a device tensor back)
    CPU_BUFFERS: ClassVar[tuple[str, ...]] = ("rng_state",)
    # buffers, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    env_mask: torch.Tensor
    rng_state: torch.Tensor

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        env_mask: torch.Tensor,
        hparams: Mapping[str, Any],
        *,
        model: str = "mlp",
    ) -> None:
        super().__init__()
        mask = torch.as_tensor(env_mask, dtype=torch.bool)
        if mask.dim() != 2 or not bool(mask.any(dim=1).all()):
            raise OodevalError(
                f"env_mask must be (models, environments) with >= 1 environment per model, "
                f"got shape {tuple(mask.shape)}"
            )
        self.register_buffer("env_mask", mask)
        self.num_models, self.num_envs = mask.shape
        self.input_shape = tuple(int(s) for s in input_shape)
        self.num_classes = int(num_classes)
        self.hparams = dict(hparams)
        self.model = model
        #: whether the ResNets built now normalise their inputs (`imagenet_normalization`)
        self.imagenet_normalize = imagenet_normalization_on()
        self.update_count = 0
        #: each model's own environment slots, in slot order
        self.own_envs = [torch.nonzero(row).flatten().tolist() for row in mask]
        if self.random_draws:
            # one seed per model from the global RNG (so the trainer's seed fixes every draw)
            seeds = torch.randint(0, 2**62, (self.num_models,)).tolist()
            self.register_buffer("rng_state", torch.stack([stream_state(s) for s in seeds]))
        self.build_parts()

    def build_parts(self) -> None:
        """Create the modules and optimizers; called last by the constructor (none here)."""

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> Algorithm:
        """nn.Module's move/cast of every tensor, except the `CPU_BUFFERS`, kept as they are."""
        kept = {k: self._buffers[k] for k in self.CPU_BUFFERS if k in self._buffers}
        super()._apply(fn, recurse)
        self._buffers.update(kept)
        return self

    @classmethod
    def hparam_space(cls) -> dict[str, HParam]:
        """All hyperparameters of this class, its own overriding those of its bases."""
        space: dict[str, HParam] = {}
        for klass in reversed(cls.__mro__):
            if "HPARAMS" in vars(klass):
                space.update(vars(klass)["HPARAMS"])
        return space

    def flag(self, key: str) -> bool:
        """Hyperparameter `key` as a bool (True/False, or 1/0); a one-line error otherwise."""
        value = self.hparams[key]
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise OodevalError(
            f"hyperparameter {key} of {self.name} must be true or false, got {value!r}"
        )

    def stream(self, index: int) -> torch.Generator:
        """A CPU generator at model `index`'s stream state (a copy: drawing from it does not
        advance the model's stream; tests replay an update's draws with it)."""
        gen = torch.Generator()
        gen.set_state(self.rng_state[index].clone())  # set_state needs its own storage
        return gen

    def draw(self, sample: Callable[[int, torch.Generator], T]) -> list[T]:
        """``[sample(m, g_m) for every model m]``, g_m model m's own stream, which advances.

        `sample` draws on the CPU with ``generator=g_m`` (e.g. ``torch.randperm(k, generator=g)``);
        model m's draws depend only on its own stream, never on the other models'. The streams'
        states live on the CPU whatever the device (`CPU_BUFFERS`), so drawing never waits for
        the device; draws the device needs are moved there by the algorithm.
        """
        out = []
        for m in range(self.num_models):
            gen = self.stream(m)
            out.append(sample(m, gen))
            self.rng_state[m].copy_(gen.get_state())
        return out

    def env_minibatch(
        self, t: torch.Tensor, index: list[int], *, labels: bool = False
    ) -> torch.Tensor:
        """Per model m, the minibatch of environment slot ``index[m]``: (M, B, ...).

        `t` is images ([M,] E, B, *input_shape) or, with ``labels=True``, labels ([M,] E, B).
        """
        item_dims = 0 if labels else len(self.input_shape)
        idx = torch.as_tensor(index, dtype=torch.long, device=t.device)
        if t.dim() == item_dims + 2:  # shared by all models
            return t[idx]
        return t[torch.arange(self.num_models, device=t.device), idx]

    def flat_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Minibatches (E, B, *s) shared -> (E * B, *s); per model (M, E, B, *s) -> (M, E*B, *s)."""
        lead = x.dim() - len(self.input_shape)
        return x.reshape(*x.shape[: lead - 2], -1, *self.input_shape)

    def labels_per_model(self, y: torch.Tensor) -> torch.Tensor:
        """Labels (E, B) shared or (M, E, B) per model -> (M, E, B)."""
        return y.expand(self.num_models, *y.shape) if y.dim() == 2 else y

    def erm_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Return each model's mean cross-entropy over its own training environments: (M,).

        ``L_m = (1 / |E_m|) sum_{e in E_m} CE_e`` with E_m the environments of ``env_mask[m]``;
        logits (M, E, B, C), y (E, B) shared or (M, E, B) per model.
        """
        return masked_mean(per_env_cross_entropy(logits, y), self.env_mask)

    @abstractmethod
    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """One training step on per-environment minibatches (the class docstring has the contract).

        ``x`` is (E, B, *input_shape) shared by all models or (M, E, B, *input_shape) per model;
        ``y`` is (E, B) or (M, E, B) accordingly. Model m learns only from the slots of
        ``env_mask[m]``, and draws random numbers only through `draw`.

        Returns per-model losses, each a detached tensor of shape (M,), including ``"loss"`` (the
        trainer stops when one is not finite); the update steps the optimizer itself.
        """

    @abstractmethod
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of every model for inputs ``x`` (n, *input_shape): shape (M, n, num_classes).

        Called in eval mode without gradients, in chunks of the training batch size when
        ``batch_dependent`` is True.
        """

    def per_image(self, x: torch.Tensor) -> torch.Tensor | None:
        """Optional, for batch-dependent algorithms: the part of ``predict(x)`` that each image
        determines alone, (M, n, ...), row i from ``x[i]`` only, with `predict_from` giving
        ``predict(x) == predict_from(x, per_image(x))``; None (the default) when there is none.

        With it the trainer computes the part once per image and variant of a shared E_all
        (`oodeval.environments.SharedEvaluation`) and gathers each environment's rows from it,
        instead of computing it afresh for each of the 101 environments (ARM's context maps).
        """
        return None

    def predict_from(self, x: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        """``predict(x)`` given ``part = per_image(x)`` (only for algorithms with `per_image`)."""
        raise NotImplementedError(f"{self.name} has no per-image part of its predictions")

    def select_models(self, index: int) -> Algorithm:
        """A copy holding only model `index` (M = 1), for evaluation, on this one's device."""
        with imagenet_normalization(self.imagenet_normalize):  # its ResNets, as this one's
            one = type(self)(
                self.input_shape,
                self.num_classes,
                self.env_mask[index : index + 1].cpu().clone(),
                self.hparams,
                model=self.model,
            ).to(self.env_mask.device)
        state = {}
        for key, value in self.state_dict().items():
            if value.dim() == 0 or value.shape[0] != self.num_models:
                raise OodevalError(
                    f"{self.name} state {key!r} has shape {tuple(value.shape)}; every parameter "
                    "and buffer needs the model axis first"
                )
            state[key] = value[index : index + 1].clone()
        one.load_state_dict(state)
        one.update_count = self.update_count
        return one.eval()


def adam(
    params: Any,
    hparams: Mapping[str, Any],
    *,
    lr_key: str = "lr",
    wd_key: str = "weight_decay",
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.Adam:
    """Adam over `params` with the learning rate and weight decay named by the keys.

    Uses torch's fused kernel (the same update rule, several times faster on CPU).
    """
    return torch.optim.Adam(
        list(params),
        lr=float(hparams[lr_key]),
        weight_decay=float(hparams[wd_key]),
        betas=betas,
        fused=True,
    )


def per_env_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per (model, environment).

    logits: (M, E, B, C); y: (E, B) shared or (M, E, B) per model -> (M, E).

    >>> logits = torch.zeros(1, 2, 3, 2)  # uniform predictions: CE = log 2 everywhere
    >>> per_env_cross_entropy(logits, torch.zeros(2, 3, dtype=torch.long)).round(decimals=4)
    tensor([[0.6931, 0.6931]])
    """
    m, e, b, c = logits.shape
    labels = y.expand(m, e, b) if y.dim() == 2 else y
    loss = F.cross_entropy(logits.reshape(-1, c), labels.reshape(-1), reduction="none")
    return loss.view(m, e, b).mean(dim=2)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the last axis of `values` where `mask` is True: (M, E), (M, E) -> (M,).

    Leading axes broadcast: values (M, C, E) with mask ``env_mask[:, None, :]`` (M, 1, E) give
    (M, C), each model's per-class mean over its own environments. Masked entries get exactly
    zero gradient (``torch.where``), even when they are not finite.

    >>> masked_mean(torch.tensor([[1.0, float("nan"), 3.0]]), torch.tensor([[True, False, True]]))
    tensor([2.])
    """
    total = torch.where(
        mask, values, torch.zeros((), dtype=values.dtype, device=values.device)
    ).sum(dim=-1)
    return total / mask.sum(dim=-1).clamp_min(1).to(values.dtype)


def env_pairs(mask: torch.Tensor) -> list[tuple[int, int, torch.Tensor]]:
    """Every environment pair i < j with the (M,) mask of models that train on both."""
    e = mask.shape[1]
    return [(i, j, mask[:, i] & mask[:, j]) for i in range(e) for j in range(i + 1, e)]


def mean_over_pairs(
    penalties: list[tuple[torch.Tensor, torch.Tensor]],
    m: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Per model, the mean of the pair penalties whose model mask is True (0 without any pair,
    on `device`)."""
    if not penalties:
        return torch.zeros(m, device=device)
    values = torch.stack([p for p, _ in penalties], dim=1)
    masks = torch.stack([k for _, k in penalties], dim=1)
    return masked_mean(values, masks)
