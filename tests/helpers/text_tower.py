"""A tiny stand-in for open_clip's CLIP model, for the optional CLIP path without open_clip.

`TinyTextTower` has the text-tower attributes `oodeval.openworld.clip.PromptTextEncoder` reads
(``token_embedding``, ``positional_embedding``, ``transformer``, ``ln_final``,
``text_projection``, ``attn_mask``), open_clip's ``encode_text`` over them, and an
``encode_image`` (a fixed linear map of the flattened pixels) and ``logit_scale``, so that
`extract_clip_features(loaded=...)` runs on it. `toy_tokenizer` tokenises words to ids
(start 48, end 49, the largest id, as open_clip's end-of-text token is) padded with 0 to the
tower's context length.
"""

from __future__ import annotations

import math

import torch

START, END = 48, 49


class Blocks(torch.nn.Module):
    """One transformer layer called as open_clip calls its text transformer."""

    batch_first = True

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x, attn_mask=None):
        return self.layer(x, src_mask=attn_mask)


class TinyTextTower(torch.nn.Module):
    """The attributes open_clip's CLIP exposes for its text tower, at toy size (width 8, d 6)."""

    def __init__(self, context: int = 10, image_dim: int = 12) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.token_embedding = torch.nn.Embedding(50, 8)
        self.positional_embedding = torch.nn.Parameter(0.1 * torch.randn(context, 8))
        self.transformer = Blocks()
        self.ln_final = torch.nn.LayerNorm(8)
        self.text_projection = torch.nn.Parameter(torch.randn(8, 6))
        self.attn_mask = None
        self.image_projection = torch.nn.Parameter(torch.randn(image_dim, 6))
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(100.0)))

    @property
    def context(self) -> int:
        return int(self.positional_embedding.shape[0])

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """open_clip's text path: embed, add positions, transform, pool at the end token."""
        x = self.ln_final(
            self.transformer(self.token_embedding(tokens) + self.positional_embedding)
        )
        return x[torch.arange(tokens.shape[0]), tokens.argmax(dim=1)] @ self.text_projection

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return pixels.flatten(1) @ self.image_projection


def toy_tokenizer(context: int = 10):
    """A tokenizer with a growing vocabulary (ids 1..47), rows padded to `context`."""
    vocab: dict[str, int] = {}

    def tokenize(texts):
        rows = []
        for text in texts:
            words = text.replace(".", " .").replace(",", " ,").split()
            ids = [START] + [vocab.setdefault(w, len(vocab) + 1) for w in words] + [END]
            assert len(ids) <= context and len(vocab) < START, (text, context)
            rows.append(ids + [0] * (context - len(ids)))
        return torch.tensor(rows)

    return tokenize
