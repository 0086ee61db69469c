"""Optional open_clip support (``pip install 'oodeval[clip]'``): features and true prompts.

Two things need a real vision-language model and are therefore optional:

* `extract_clip_features` writes the feature format of `oodeval.openworld.features` from
  open_clip's frozen image encoder and the hand-crafted prompt ``"a photo of a {name}."``
  through its text encoder (the zero-shot classifier h of GMoP), with CLIP's logit scale;
* `ClipGMoP` is GMoP with *true* prompt tuning: the contexts of g and of the K sub-detectors are
  CoOp-style learnable token embeddings ``[SOS] v_1 .. v_M [class name]. [EOS]`` passed through
  open_clip's frozen text transformer, instead of the feature-space affine contexts of
  `oodeval.openworld.gmop.GMoP`. Losses, gates, partitions and scores are inherited unchanged.
  `train_clip_gmop` trains it like `train_gmop` (same loss and optimiser; only the prompt
  contexts get gradients); the model runs on the device of the given text tower (a GPU is
  advised for real CLIP models).

open_clip is imported lazily, only by `load_open_clip` and `extract_clip_features`; the prompt
machinery works on any model object with open_clip's text-tower attributes (``token_embedding``,
``positional_embedding``, ``transformer``, ``ln_final``, ``text_projection``, ``attn_mask``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from oodeval._extras import MissingExtra, missing_extra_message
from oodeval.errors import OodevalError
from oodeval.openworld.features import FeatureSet, make_feature_set
from oodeval.openworld.gmop import (
    ContextClassifier,
    GMoP,
    GMoPConfig,
    check_config,
    fit_contexts,
    pseudo_partitions,
    training_logit_scale,
)

DEFAULT_TEMPLATE = "a photo of a {}."


def _open_clip() -> Any:
    try:
        import open_clip
    except ImportError:
        raise MissingExtra(missing_extra_message("CLIP features", "open_clip", "clip")) from None
    return open_clip


def load_open_clip(
    model_name: str = "ViT-B-16", pretrained: str | None = "openai", device: str = "cpu"
) -> tuple[Any, Callable, Callable]:
    """(model in eval mode, image preprocess, tokenizer) from open_clip; weights must be local."""
    open_clip = _open_clip()
    model, _, preprocess = open_clip.create_model_and_transforms(
        model_name, pretrained=pretrained, device=device
    )
    return model.eval(), preprocess, open_clip.get_tokenizer(model_name)


@torch.no_grad()
def extract_clip_features(
    images: Sequence[Any],
    labels: Sequence[int],
    class_names: Sequence[str],
    *,
    model_name: str = "ViT-B-16",
    pretrained: str | None = "openai",
    template: str = DEFAULT_TEMPLATE,
    base_classes: Sequence[int] | None = None,
    device: str = "cpu",
    batch_size: int = 64,
) -> FeatureSet:
    """Image features of `images` (PIL images or file paths) and prompt features of each class."""
    from PIL import Image

    model, preprocess, tokenizer = load_open_clip(model_name, pretrained, device)
    feats = []
    for start in range(0, len(images), batch_size):
        batch = [
            Image.open(im).convert("RGB") if isinstance(im, str | Path) else im.convert("RGB")
            for im in images[start : start + batch_size]
        ]
        pixels = torch.stack([preprocess(im) for im in batch]).to(device)
        feats.append(F.normalize(model.encode_image(pixels).float(), dim=1).cpu())
    tokens = tokenizer([template.format(name) for name in class_names]).to(device)
    text = F.normalize(model.encode_text(tokens).float(), dim=1).cpu()
    return make_feature_set(
        torch.cat(feats).numpy(),
        np.asarray(labels),
        text.numpy(),
        base_classes,
        list(class_names),
        float(model.logit_scale.exp()),
    )


class PromptTextEncoder(torch.nn.Module):
    """open_clip's frozen text tower fed with learnable context embeddings (CoOp's prompt).

    The prompts ``"X X .. X {name}."`` (M placeholders) are tokenised once; at call time the M
    placeholder embeddings are replaced by a context tensor (M, width) shared by the classes.
    """

    def __init__(
        self, model: Any, tokenizer: Callable, class_names: Sequence[str], n_ctx: int = 4
    ) -> None:
        super().__init__()
        self.model = model
        for p in model.parameters():
            p.requires_grad_(False)
        placeholder = " ".join(["X"] * n_ctx)
        tokens = tokenizer([f"{placeholder} {name}." for name in class_names])
        self.register_buffer("tokens", torch.as_tensor(tokens), persistent=False)
        with torch.no_grad():
            embedded = model.token_embedding(self.tokens)
        self.register_buffer("prefix", embedded[:, :1].clone(), persistent=False)
        self.register_buffer("suffix", embedded[:, 1 + n_ctx :].clone(), persistent=False)
        self.n_ctx = n_ctx
        self.width = int(embedded.shape[-1])

    def forward(self, ctx: torch.Tensor, classes: Sequence[int]) -> torch.Tensor:
        """Unit text features (len(classes), d) of the prompts with context `ctx` (M, width)."""
        idx = list(classes)
        n = len(idx)
        x = torch.cat([self.prefix[idx], ctx.expand(n, -1, -1), self.suffix[idx]], dim=1)
        x = x + self.model.positional_embedding
        batch_first = getattr(self.model.transformer, "batch_first", True)
        if not batch_first:
            x = x.permute(1, 0, 2)
        x = self.model.transformer(x, attn_mask=self.model.attn_mask)
        if not batch_first:
            x = x.permute(1, 0, 2)
        x = self.model.ln_final(x)
        # The end-of-text token has the largest id: its position pools the sequence.
        x = x[torch.arange(n), self.tokens[idx].argmax(dim=-1)]
        proj = self.model.text_projection
        x = proj(x) if isinstance(proj, torch.nn.Module) else x @ proj
        return F.normalize(x, dim=-1)


class ClipGMoP(GMoP):
    """GMoP whose g and sub-detector contexts are learnable prompt tokens (see module docstring).

    `text_features` are the hand-crafted prompt features (h stays zero-shot, as in Sec. 5.1).
    """

    def __init__(
        self,
        text_encoder: PromptTextEncoder,
        text_features: np.ndarray,
        base_classes: Sequence[int],
        *,
        n_partitions: int = 3,
        logit_scale: float = 100.0,
        seed: int = 0,
    ) -> None:
        # Skip GMoP.__init__ (its feature-space contexts): only the shared class set-up is needed.
        ContextClassifier.__init__(self, text_features, base_classes, logit_scale)
        self.partitions = pseudo_partitions(self.base_classes, n_partitions)
        self.text_encoder = text_encoder
        gen = torch.Generator().manual_seed(seed)
        shape = (text_encoder.n_ctx, text_encoder.width)
        self.g_ctx = torch.nn.Parameter(0.02 * torch.randn(shape, generator=gen))
        self.r_ctx = torch.nn.Parameter(0.02 * torch.randn((n_partitions, *shape), generator=gen))

    def base_logits(self, x: torch.Tensor, classes: Sequence[int] | None = None) -> torch.Tensor:
        """Logits of g: cosine with the prompt-tuned class features, times the logit scale."""
        text = self.text_encoder(self.g_ctx, classes or self.base_classes)
        return self.logit_scale * x @ text.T

    def detector_logits(self, x: torch.Tensor, k: int, classes: Sequence[int]) -> torch.Tensor:
        """Logits of sub-detector k with its own prompt context."""
        return self.logit_scale * x @ self.text_encoder(self.r_ctx[k], classes).T

    def prompt_state(self) -> dict[str, torch.Tensor]:
        """The learnable contexts only (save with torch.save; load with weights_only=True)."""
        return {"g_ctx": self.g_ctx.detach().cpu(), "r_ctx": self.r_ctx.detach().cpu()}

    def load_prompt_state(self, path: str | Path) -> None:
        """Load contexts written by ``torch.save(model.prompt_state(), path)``; never unpickles."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        for name in ("g_ctx", "r_ctx"):
            value = state.get(name) if isinstance(state, dict) else None
            if value is None or value.shape != getattr(self, name).shape:
                raise OodevalError(f"{path}: prompt context {name} is missing or has another shape")
            with torch.no_grad():
                getattr(self, name).copy_(value)


def train_clip_gmop(
    train: FeatureSet,
    text_encoder: PromptTextEncoder,
    config: GMoPConfig | None = None,
) -> ClipGMoP:
    """Train `ClipGMoP` on frozen image features: only the prompt contexts receive gradients."""
    config = config or GMoPConfig()
    check_config(config)
    model = ClipGMoP(
        text_encoder,
        train.text_features,
        train.base_classes,
        n_partitions=config.n_partitions,
        logit_scale=training_logit_scale(train, config),
        seed=config.seed,
    )
    weights = {"ce": 1.0, "auc": config.auc_weight, "detector_ce": config.detector_weight}
    fit_contexts(model, train, config, weights)
    return model.eval()
