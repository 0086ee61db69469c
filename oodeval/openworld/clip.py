"""Optional open_clip support (``pip install 'oodeval[clip]'``): features and true prompts.

Two things need a real vision-language model and are therefore optional:

* `extract_clip_features` writes the feature format of `oodeval.openworld.features` from
  open_clip's frozen image encoder and, for the zero-shot classifier h of GMoP, the hand-crafted
  prompts through its text encoder, with CLIP's logit scale. As App. C.4 of the OpenworldAUC
  paper, h is a prompt *ensemble* by default: each class's text feature is the normalised mean
  of the unit features of `DEFAULT_TEMPLATES` (`ensemble_text_features`); pass ``templates=``
  for your own (a fine-grained dataset may want one, e.g. ``["a photo of {}, a type of
  food."]``);
* `ClipGMoP` is GMoP with *true* prompt tuning: the contexts of g and of the K sub-detectors are
  CoOp-style learnable token embeddings ``[SOS] v_1 .. v_M [class name]. [EOS]`` passed through
  open_clip's frozen text transformer, instead of the feature-space affine contexts of
  `oodeval.openworld.gmop.GMoP`. As App. C.4, the classifier's context has M = 4 tokens (the
  `PromptTextEncoder`'s ``n_ctx``) and each sub-detector's M = 16 (``detector_ctx``). Losses,
  gates, partitions and scores are inherited unchanged. `train_clip_gmop` trains it like
  `train_gmop` (same loss and optimiser; only the prompt contexts get gradients); the model runs
  on the device of the given text tower (a GPU is advised for real CLIP models).

open_clip is imported lazily, only by `load_open_clip` and `extract_clip_features`; the prompt
machinery works on any model object with open_clip's text-tower attributes (``token_embedding``,
``positional_embedding``, ``transformer``, ``ln_final``, ``text_projection``, ``attn_mask``),
and `extract_clip_features` takes an already loaded ``(model, preprocess, tokenizer)`` as
``loaded=``, so all of it runs on a small stand-in encoder without open_clip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from oodeval._extras import MissingExtra, missing_extra_message
from oodeval._text import safe_text
from oodeval.errors import OodevalError
from oodeval.openworld.features import FeatureSet, make_feature_set
from oodeval.openworld.gmop import (
    ContextClassifier,
    GMoP,
    GMoPConfig,
    check_config,
    check_gate,
    fit_contexts,
    loss_weights,
    pseudo_partitions,
    training_logit_scale,
)

#: The single hand-crafted prompt of CLIP and CoOp.
DEFAULT_TEMPLATE = "a photo of a {}."

#: The prompt ensemble of h in App. C.4 of the OpenworldAUC paper (its generic datasets).
DEFAULT_TEMPLATES = (
    "itap of a {}.",
    "a bad photo of the {}.",
    "a origami {}.",
    "a photo of the large {}.",
    "a {} in a video game.",
    "art of the {}.",
    "a photo of the small {}.",
)

#: The prompt lengths of App. C.4: the classifier's context and each sub-detector's.
CLASSIFIER_CTX = 4
DETECTOR_CTX = 16


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


def check_templates(templates: Sequence[str]) -> tuple[str, ...]:
    """`templates` as a tuple, each checked to hold ``{}`` (where the class name goes) once.

    >>> check_templates(["a photo of a {}.", "art of the {}."])
    ('a photo of a {}.', 'art of the {}.')
    """
    if isinstance(templates, str) or not len(templates):
        raise OodevalError(
            "templates must be a non-empty list of prompts, each holding {} where the class "
            "name goes, e.g. ['a photo of a {}.']"
        )
    for template in templates:
        if not isinstance(template, str) or template.count("{") != 1 or "{}" not in template:
            raise OodevalError(
                f"prompt template {safe_text(repr(template))} must hold {{}} once, where the "
                "class name goes, and no other brace, e.g. 'a photo of a {}.'"
            )
    return tuple(templates)


@torch.no_grad()
def ensemble_text_features(
    model: Any,
    tokenizer: Callable,
    class_names: Sequence[str],
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    *,
    device: str = "cpu",
) -> torch.Tensor:
    """Unit text features (C, d) of a prompt ensemble: per class, the normalised mean over the
    templates of the unit features ``model.encode_text(tokenizer(template.format(name)))``.

    The ensembling of CLIP (Radford et al., 2021, Sec. 3.1.4) that App. C.4 of the OpenworldAUC
    paper uses for h; one template gives that template's unit features.
    """
    total = None
    for template in check_templates(templates):
        tokens = tokenizer([template.format(name) for name in class_names]).to(device)
        unit = F.normalize(model.encode_text(tokens).float(), dim=1)
        total = unit if total is None else total + unit
    assert total is not None  # check_templates refuses an empty list
    return F.normalize(total, dim=1).cpu()


@torch.no_grad()
def extract_clip_features(
    images: Sequence[Any],
    labels: Sequence[int],
    class_names: Sequence[str],
    *,
    model_name: str = "ViT-B-16",
    pretrained: str | None = "openai",
    templates: Sequence[str] | None = None,
    template: str | None = None,
    base_classes: Sequence[int] | None = None,
    device: str = "cpu",
    batch_size: int = 64,
    loaded: tuple[Any, Callable, Callable] | None = None,
) -> FeatureSet:
    """Image features of `images` (PIL images or file paths) and prompt features of each class.

    The class features are the ensemble of `templates` (default `DEFAULT_TEMPLATES`, App. C.4);
    ``template="..."`` is the one-prompt form (give one or the other). `loaded` is an already
    loaded ``(model, preprocess, tokenizer)``, as `load_open_clip` returns; without it the model
    is loaded from `model_name` and `pretrained`.
    """
    from PIL import Image

    if template is not None and templates is not None:
        raise OodevalError("give templates=[...] or template='...', not both")
    prompts = check_templates(
        [template] if template is not None else templates or DEFAULT_TEMPLATES
    )
    model, preprocess, tokenizer = loaded or load_open_clip(model_name, pretrained, device)
    feats = []
    for start in range(0, len(images), batch_size):
        batch = [
            Image.open(im).convert("RGB") if isinstance(im, str | Path) else im.convert("RGB")
            for im in images[start : start + batch_size]
        ]
        pixels = torch.stack([preprocess(im) for im in batch]).to(device)
        feats.append(F.normalize(model.encode_image(pixels).float(), dim=1).cpu())
    text = ensemble_text_features(model, tokenizer, class_names, prompts, device=device)
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

    The prompts ``"X X .. X {name}."`` (M = `n_ctx` placeholders; 4 by default, the classifier
    prompt length of App. C.4) are tokenised once; at call time the M placeholder embeddings are
    replaced by a context tensor (M, width) shared by the classes. `resized` gives the same
    encoder with another prompt length (the sub-detectors' 16).
    """

    # buffers, declared for type checkers (nn.Module's lookup of them is typed Tensor | Module)
    tokens: torch.Tensor
    prefix: torch.Tensor
    suffix: torch.Tensor

    def __init__(
        self,
        model: Any,
        tokenizer: Callable,
        class_names: Sequence[str],
        n_ctx: int = CLASSIFIER_CTX,
    ) -> None:
        super().__init__()
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
            raise OodevalError(f"a prompt context needs n_ctx >= 1 tokens, got {safe_text(n_ctx)}")
        self.model = model
        self.tokenizer = tokenizer
        self.class_names = tuple(class_names)
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

    def resized(self, n_ctx: int) -> PromptTextEncoder:
        """The same frozen tower and class names with prompts of `n_ctx` context tokens."""
        return PromptTextEncoder(self.model, self.tokenizer, self.class_names, n_ctx)

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
    g's context has ``text_encoder.n_ctx`` tokens (4 by default) and each of the K sub-detector
    contexts `detector_ctx` (default 16, as App. C.4); ``detector_ctx=text_encoder.n_ctx`` gives
    every prompt the same length. `gate` is the ranking term's gate (`GMoPConfig.gate`).
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
        detector_ctx: int = DETECTOR_CTX,
        gate: str = "sigmoid",
    ) -> None:
        # Skip GMoP.__init__ (its feature-space contexts): only the shared class set-up is needed.
        ContextClassifier.__init__(self, text_features, base_classes, logit_scale)
        self.partitions = pseudo_partitions(self.base_classes, n_partitions)
        self.gate = check_gate(gate)
        self.text_encoder = text_encoder
        same = detector_ctx == text_encoder.n_ctx
        self.detector_encoder = text_encoder if same else text_encoder.resized(detector_ctx)
        gen = torch.Generator().manual_seed(seed)
        width = text_encoder.width
        self.g_ctx = torch.nn.Parameter(
            0.02 * torch.randn((text_encoder.n_ctx, width), generator=gen)
        )
        self.r_ctx = torch.nn.Parameter(
            0.02 * torch.randn((n_partitions, self.detector_encoder.n_ctx, width), generator=gen)
        )

    def base_logits(self, x: torch.Tensor, classes: Sequence[int] | None = None) -> torch.Tensor:
        """Logits of g: cosine with the prompt-tuned class features, times the logit scale."""
        text = self.text_encoder(self.g_ctx, classes or self.base_classes)
        return self.logit_scale * x @ text.T

    def detector_logits(self, x: torch.Tensor, k: int, classes: Sequence[int]) -> torch.Tensor:
        """Logits of sub-detector k with its own prompt context (`detector_ctx` tokens)."""
        return self.logit_scale * x @ self.detector_encoder(self.r_ctx[k], classes).T

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
    *,
    detector_ctx: int = DETECTOR_CTX,
) -> ClipGMoP:
    """Train `ClipGMoP` on frozen image features: only the prompt contexts receive gradients.

    The objective is `train_gmop`'s (`oodeval.openworld.objective`, with `config`'s lambda,
    ranking weight and gate); g's prompt has ``text_encoder.n_ctx`` context tokens and each
    sub-detector's `detector_ctx` (4 and 16 by default, App. C.4).
    """
    config = config or GMoPConfig()
    check_config(config)
    model = ClipGMoP(
        text_encoder,
        train.text_features,
        train.base_classes,
        n_partitions=config.n_partitions,
        logit_scale=training_logit_scale(train, config),
        seed=config.seed,
        detector_ctx=detector_ctx,
        gate=config.gate,
    )
    fit_contexts(model, train, config, loss_weights(config))
    return model.eval()
