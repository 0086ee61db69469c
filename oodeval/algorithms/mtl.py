"""MTL: marginal transfer learning (Blanchard et al., 2021), as in DomainBed.

The classifier sees each sample's features f(x) concatenated with a second vector of the same width
that is meant to be its environment's embedding: the mean feature of the environment's minibatch,
smoothed across updates, ``emb_e <- ema * mean_b f(x_b) + (1 - ema) * emb_e`` (DomainBed's
convention: `mtl_ema` weights the *current* batch mean; at prediction time the mean feature of the
batch being predicted). The loss is the *sum* over the model's environments of their mean
cross-entropies, as in DomainBed.

DomainBed's defect, kept by default: its ``update_embeddings_(...).normal_()`` overwrites that
vector in place with N(0, 1) noise before the classifier sees it, in training and in prediction, so
the embedding never reaches the classifier (the moving averages are still kept in the
``embeddings`` buffer). ``mtl_feed_embedding=True`` feeds the embedding instead, which is the
algorithm of the paper (predictions then depend on the batch).

Draws, default mode: in training, from each model's own stream, one ``randn(B, d)`` per environment
in slot order (the dtype of the features); in prediction, ``randn(n, d)`` from a generator seeded
with the model's ``predict_seed`` afresh on every call, so that ``predict(x)`` is a function of `x`
(DomainBed draws fresh noise on every call; the distribution is the same).

On a GPU the noise must not cost a host round trip per update: the training draws of
`NOISE_BLOCK` updates are made at once, in the same order on the same CPU streams (so the numbers
are those of one draw per update, on every device), and moved to the device in one copy; the
prediction noise, a function of the seeds and the shape, is drawn once and kept there.
"""

from __future__ import annotations

import torch

from oodeval.algorithms.erm import ERM
from oodeval.algorithms.hparams import HParam, choice, fixed
from oodeval.algorithms.registry import register_algorithm


@register_algorithm
class MTL(ERM):
    """ERM on [features, environment embedding or DomainBed's noise] (embeddings (M, E, d))."""

    # buffers, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    embeddings: torch.Tensor
    predict_seed: torch.Tensor

    HPARAMS = {
        "mtl_ema": HParam(0.99, choice(0.5, 0.9, 0.99, 1.0), "weight of the batch mean"),
        "mtl_feed_embedding": HParam(
            False, fixed(False), "feed the embedding, not DomainBed's N(0, 1) noise"
        ),
    }
    batch_dependent = True
    random_draws = True
    CPU_BUFFERS = ("rng_state", "predict_seed")
    #: training updates whose noise is drawn at once and moved to the device in one copy
    NOISE_BLOCK = 100
    #: at most this many noise numbers per block (fewer updates per block for large stacks)
    NOISE_BLOCK_NUMBERS = 2**24

    def build_extra_parts(self) -> None:
        d = self.featurizer.n_outputs
        self.register_buffer("embeddings", torch.zeros(self.num_models, self.num_envs, d))
        self.register_buffer("predict_seed", torch.randint(0, 2**62, (self.num_models,)))
        self.flag("mtl_feed_embedding")  # fails early on a non-boolean value
        self.drop_noise()
        # new streams or seeds (a restored checkpoint, a selected model) make new noise
        self.register_load_state_dict_post_hook(lambda module, _keys: module.drop_noise())

    def drop_noise(self) -> None:
        """Forget the noise drawn ahead (training) and kept (prediction)."""
        self.noise_ahead: tuple[tuple, torch.Tensor] | None = None
        self.noise_used = 0
        self.predict_noise: tuple[tuple, torch.Tensor] | None = None

    def classifier_inputs(self, n_features: int) -> int:
        return 2 * n_features

    def training_noise(
        self, e: int, b: int, d: int, dtype: torch.dtype, device: torch.device | None = None
    ) -> torch.Tensor:
        """DomainBed's noise (M, E, B, d) of this update on `device`: N(0, 1) for each model's
        own environments, else 0; taken from a block of `NOISE_BLOCK` updates drawn ahead."""
        key = (e, b, d, dtype, device)
        if (
            self.noise_ahead is None
            or self.noise_ahead[0] != key
            or (self.noise_used == len(self.noise_ahead[1]))
        ):
            steps = max(
                1, min(self.NOISE_BLOCK, self.NOISE_BLOCK_NUMBERS // (self.num_models * e * b * d))
            )

            def sample(m: int, gen: torch.Generator) -> list[list[torch.Tensor]]:
                return [
                    [torch.randn(b, d, generator=gen, dtype=dtype) for _ in self.own_envs[m]]
                    for _ in range(steps)
                ]

            noise = torch.zeros(steps, self.num_models, e, b, d, dtype=dtype)
            for m, block in enumerate(self.draw(sample)):
                for t, draws in enumerate(block):
                    for env, values in zip(self.own_envs[m], draws, strict=True):
                        noise[t, m, env] = values
            self.noise_ahead, self.noise_used = (key, to_device(noise, device)), 0
        self.noise_used += 1
        return self.noise_ahead[1][self.noise_used - 1]

    def update(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        e, b = y.shape[-2:]
        feats = self.featurizer(self.flat_inputs(x)).view(self.num_models, e, b, -1)
        ema = float(self.hparams["mtl_ema"])
        emb = ema * feats.mean(dim=2) + (1 - ema) * self.embeddings
        with torch.no_grad():
            self.embeddings.copy_(torch.where(self.env_mask[..., None], emb, self.embeddings))
        if self.flag("mtl_feed_embedding"):
            side = emb[:, :, None].expand_as(feats)
        else:
            side = self.training_noise(e, b, feats.shape[-1], feats.dtype, feats.device)
        joint = torch.cat([feats, side], dim=-1)
        logits = self.classifier(joint.reshape(self.num_models, e * b, -1)).view(
            self.num_models, e, b, -1
        )
        loss = self.erm_loss(logits, y) * self.env_mask.sum(dim=1)
        self.step(loss)
        return {"loss": loss.detach()}

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.featurizer(x)
        if self.flag("mtl_feed_embedding"):
            side = feats.mean(dim=1, keepdim=True).expand_as(feats)
        else:
            side = self.prediction_noise(feats.shape[1], feats.shape[2], feats.dtype, feats.device)
        return self.classifier(torch.cat([feats, side], dim=-1))

    def prediction_noise(self, n: int, d: int, dtype: torch.dtype, device: torch.device):
        """(M, n, d): model m's ``randn(n, d)`` from a generator seeded with its
        ``predict_seed``, drawn once per shape and kept on `device`."""
        seeds = tuple(self.predict_seed.tolist())  # a CPU buffer: no device read
        key = (seeds, n, d, dtype, device)
        if self.predict_noise is None or self.predict_noise[0] != key:
            noise = torch.stack(
                [
                    torch.randn(n, d, generator=torch.Generator().manual_seed(s), dtype=dtype)
                    for s in seeds
                ]
            )
            self.predict_noise = (key, to_device(noise, device))
        return self.predict_noise[1]


def to_device(t: torch.Tensor, device: torch.device | None) -> torch.Tensor:
    """CPU tensor `t` on `device` without the host waiting for the device (a pinned copy)."""
    if device is None or device.type == "cpu":
        return t
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)
