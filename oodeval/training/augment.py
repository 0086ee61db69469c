"""DomainBed's image augmentation and ImageNet normalisation, in plain torch tensor ops.

DomainBed's image datasets (``domainbed/datasets.py``, ``MultipleEnvironmentImageFolder``) train
with torchvision's ``RandomResizedCrop(size, scale=(0.7, 1.0))``, ``RandomHorizontalFlip()``,
``ColorJitter(0.3, 0.3, 0.3, 0.3)``, ``RandomGrayscale(p=0.1)``, ``ToTensor()`` and
``Normalize(ImageNet mean, std)``, and test with ``Resize((size, size))`` + ``ToTensor()`` +
``Normalize``. oodeval does not import torchvision, so this module implements the documented
semantics of each of those ops on float tensors in [0, 1] of shape (B, C, H, W):

- `domainbed_augmented`: the training augmentation, every random draw from one
  ``torch.Generator`` (a seeded generator per model gives the same batch every run);
- `imagenet_normalized`: ``(x - mean) / std`` per channel, of RGB images; `imagenet_stats` gives
  the statistics for other channel counts (the ResNets normalise their inputs with them:
  `oodeval.algorithms.networks.ResNet.normalized`).

DomainBed applies the colour ops to PIL images (8-bit); these are torchvision's tensor formulas,
applied to float images without rounding to 8 bits. The draws are made in a fixed order per
batch (`_drawn`), then applied (`_applied`), so each step can be checked with forced parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: ImageNet's per-channel mean and standard deviation (RGB), as in DomainBed's ``datasets.py``
#: ``transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])``
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: ``RandomResizedCrop``: DomainBed's area scale, torchvision's default aspect ratio and attempts
CROP_SCALE = (0.7, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
CROP_ATTEMPTS = 10
#: ``RandomHorizontalFlip()``'s default probability
FLIP_P = 0.5
#: ``ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.3)``
JITTER = 0.3
#: ``RandomGrayscale(p=0.1)``
GRAYSCALE_P = 0.1
#: the luma weights of torchvision's ``rgb_to_grayscale`` (ITU-R 601-2)
GRAY_WEIGHTS = (0.299, 0.587, 0.114)
#: the colour ops of ``ColorJitter``, in the order of their columns in `_Draws.factors`
JITTER_OPS = ("brightness", "contrast", "saturation", "hue")


def imagenet_stats(channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """ImageNet's per-channel mean and standard deviation for images of `channels` channels:
    channel i takes those of RGB channel ``i % 3`` (`IMAGENET_MEAN`, `IMAGENET_STD`), as the first
    convolution DomainBed adapts to other than 3 channels copies RGB channel ``i % 3``'s weights
    (`oodeval.algorithms.networks.adapt_first_conv`).

    >>> imagenet_stats(4)
    ((0.485, 0.456, 0.406, 0.485), (0.229, 0.224, 0.225, 0.229))
    """
    mean = tuple(IMAGENET_MEAN[i % 3] for i in range(channels))
    return mean, tuple(IMAGENET_STD[i % 3] for i in range(channels))


def imagenet_normalized(images: torch.Tensor) -> torch.Tensor:
    """``(images - mean) / std`` per channel, with ImageNet's `IMAGENET_MEAN` and `IMAGENET_STD`.

    `images`: float, in [0, 1], shape (B, 3, H, W); the result has the same shape, device and
    dtype.

    >>> x = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    >>> imagenet_normalized(x).abs().max().item() < 1e-6   # the mean maps to 0
    True
    >>> y = imagenet_normalized(torch.ones(2, 3, 4, 5, dtype=torch.float64))
    >>> round(y[0, 0, 0, 0].item(), 6) == round((1 - 0.485) / 0.229, 6), tuple(y.shape)
    (True, (2, 3, 4, 5))
    """
    if images.dim() != 4 or images.shape[1] != 3 or not images.is_floating_point():
        raise ValueError(
            f"imagenet_normalized takes float images of shape (B, 3, H, W), got "
            f"{images.dtype} {tuple(images.shape)}"
        )
    mean = torch.tensor(IMAGENET_MEAN, dtype=images.dtype, device=images.device)
    std = torch.tensor(IMAGENET_STD, dtype=images.dtype, device=images.device)
    return (images - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)


def domainbed_augmented(
    images: torch.Tensor, generator: torch.Generator, size: int
) -> torch.Tensor:
    """DomainBed's training augmentation of a batch, per image, drawn from `generator`.

    `images`: float32/float64 in [0, 1], shape (B, C, H, W), C = 1 or 3, any H and W, on any
    device; `generator`: a CPU ``torch.Generator`` (every draw is made on it, then moved to the
    images' device); returns (B, C, size, size) in [0, 1], same device and dtype. The steps, in
    torchvision's order, each with its own parameters per image:

    1. ``RandomResizedCrop(size, scale=(0.7, 1.0), ratio=(3/4, 4/3))``: up to 10 attempts of an
       area ``s * H * W`` with ``s ~ U(0.7, 1)`` and an aspect ``r = exp(U(log 3/4, log 4/3))``,
       ``w = round(sqrt(s H W r))``, ``h = round(sqrt(s H W / r))``; the first that fits is
       placed uniformly; if none fits, the central crop of the image clipped to the ratio range.
       The crop is resized to (size, size) by bilinear interpolation (``align_corners=False``)
       with ``antialias=True``, as torchvision's tensor ``resize`` does by default (it only
       changes a downscaling);
    2. ``RandomHorizontalFlip()``: flipped with probability 0.5;
    3. ``ColorJitter(0.3, 0.3, 0.3, 0.3)``: factors ``b, c, s ~ U(0.7, 1.3)``, ``h ~ U(-0.3,
       0.3)``, applied in a uniformly random order, each clamped to [0, 1]:
       brightness ``b x``; contrast ``c x + (1 - c) mean(gray(x))``; saturation
       ``s x + (1 - s) gray(x)``; hue: RGB -> HSV, ``H <- (H + h) mod 1``, -> RGB;
       with ``gray = 0.299 R + 0.587 G + 0.114 B``;
    4. ``RandomGrayscale(p=0.1)``: ``gray(x)`` on every channel, with probability 0.1.

    For C = 1 the ops that need colour are skipped, as torchvision does for a one-channel
    tensor: saturation, hue and grayscale leave the image as it is (the contrast mean is the
    image's own); their parameters are still drawn, so the draws do not depend on C.

    >>> g = torch.Generator().manual_seed(0)
    >>> out = domainbed_augmented(torch.rand(4, 3, 40, 30, generator=g), g, 32)
    >>> tuple(out.shape), bool(out.min() >= 0), bool(out.max() <= 1)
    ((4, 3, 32, 32), True, True)
    >>> a = domainbed_augmented(torch.ones(2, 1, 8, 8), torch.Generator().manual_seed(1), 4)
    >>> b = domainbed_augmented(torch.ones(2, 1, 8, 8), torch.Generator().manual_seed(1), 4)
    >>> torch.equal(a, b)
    True
    """
    _check_batch(images, generator, size)
    n, _, h, w = images.shape
    return _applied(images, _drawn(generator, n, h, w), size)


# -- the draws ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Draws:
    """The parameters of one batch's augmentation, one row per image, on the CPU.

    ``boxes``: (n, 4) int64, the crop's (top, left, height, width); ``flip``, ``gray``: (n,)
    bool; ``factors``: (n, 4) float64, the `JITTER_OPS` factors; ``order``: (n, 4) int64, a
    permutation of the `JITTER_OPS` indices, the order the colour ops are applied in.
    """

    boxes: torch.Tensor
    flip: torch.Tensor
    factors: torch.Tensor
    order: torch.Tensor
    gray: torch.Tensor


def _uniform(
    generator: torch.Generator, shape: tuple[int, ...], low: float, high: float
) -> torch.Tensor:
    """``U(low, high)`` draws of `shape`, float64 on the CPU."""
    return low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)


def _crop_boxes(generator: torch.Generator, n: int, h: int, w: int) -> torch.Tensor:
    """`n` boxes (top, left, height, width) of ``RandomResizedCrop``'s `get_params` for an h x w
    image: `CROP_ATTEMPTS` attempts each (all drawn, the first that fits kept), else the central
    crop clipped to `CROP_RATIO`.

    >>> b = _crop_boxes(torch.Generator().manual_seed(0), 3, 10, 100)   # nothing fits: centre
    >>> b.tolist()
    [[0, 43, 10, 13], [0, 43, 10, 13], [0, 43, 10, 13]]
    """
    area = h * w
    target = area * _uniform(generator, (n, CROP_ATTEMPTS), *CROP_SCALE)
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    aspect = torch.exp(_uniform(generator, (n, CROP_ATTEMPTS), log_lo, log_hi))
    widths = torch.round(torch.sqrt(target * aspect)).long()
    heights = torch.round(torch.sqrt(target / aspect)).long()
    fits = (widths > 0) & (widths <= w) & (heights > 0) & (heights <= h)
    first = fits.long().argmax(dim=1)  # the first attempt that fits (0 when none does)
    found = fits.any(dim=1)
    rows = torch.arange(n)
    # the fallback: the whole image, clipped to the ratio range, centred
    if w / h < CROP_RATIO[0]:
        fh, fw = int(round(w / CROP_RATIO[0])), w
    elif w / h > CROP_RATIO[1]:
        fh, fw = h, int(round(h * CROP_RATIO[1]))
    else:
        fh, fw = h, w
    bh = torch.where(found, heights[rows, first], fh)
    bw = torch.where(found, widths[rows, first], fw)
    # uniform placement: floor(u * (number of positions)), u ~ U[0, 1)
    u = torch.rand((n, 2), generator=generator, dtype=torch.float64)
    top = torch.minimum(torch.floor(u[:, 0] * (h - bh + 1)).long(), h - bh)
    left = torch.minimum(torch.floor(u[:, 1] * (w - bw + 1)).long(), w - bw)
    top = torch.where(found, top, (h - bh) // 2)
    left = torch.where(found, left, (w - bw) // 2)
    return torch.stack((top, left, bh, bw), dim=1)


def _drawn(generator: torch.Generator, n: int, h: int, w: int) -> _Draws:
    """Every random parameter of a batch of `n` h x w images, in a fixed order of draws: the
    crops, the flips, the jitter factors, the jitter orders, the grayscales."""
    boxes = _crop_boxes(generator, n, h, w)
    flip = torch.rand(n, generator=generator, dtype=torch.float64) < FLIP_P
    low = max(0.0, 1.0 - JITTER)
    factors = torch.cat(
        (
            _uniform(generator, (n, 3), low, 1.0 + JITTER),
            _uniform(generator, (n, 1), -JITTER, JITTER),
        ),
        dim=1,
    )
    # a uniform permutation per image: the ranks of i.i.d. uniforms
    ranks = torch.rand((n, len(JITTER_OPS)), generator=generator, dtype=torch.float64)
    order = torch.argsort(ranks, dim=1)
    gray = torch.rand(n, generator=generator, dtype=torch.float64) < GRAYSCALE_P
    return _Draws(boxes=boxes, flip=flip, factors=factors, order=order, gray=gray)


# -- applying them -----------------------------------------------------------------------------
def _applied(images: torch.Tensor, draws: _Draws, size: int) -> torch.Tensor:
    """The augmentation of `images` with the parameters `draws` (see `domainbed_augmented`)."""
    out = _resized_crops(images, draws.boxes, size)
    out = _where_chosen(out, draws.flip, lambda x: torch.flip(x, dims=(-1,)))
    ops = (_brightness, _contrast, _saturation, _hue)
    factors = draws.factors.to(device=images.device, dtype=images.dtype)
    for slot in range(len(JITTER_OPS)):
        for k, op in enumerate(ops):
            chosen = draws.order[:, slot] == k
            if chosen.any():
                idx = chosen.nonzero().flatten().to(images.device)
                out = out.index_copy(0, idx, op(out.index_select(0, idx), factors[idx, k]))
    return _where_chosen(out, draws.gray, _grayscale)


def _where_chosen(
    images: torch.Tensor, chosen: torch.Tensor, op: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """`op` applied to the images whose `chosen` (a CPU bool mask) is set, the others kept."""
    if not chosen.any():
        return images
    idx = chosen.nonzero().flatten().to(images.device)
    return images.index_copy(0, idx, op(images.index_select(0, idx)))


def _resized_crops(images: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Each image's box (top, left, height, width), resized to (size, size) bilinearly with
    antialiasing; one ``interpolate`` per image, since the boxes differ in size."""
    crops = [
        F.interpolate(
            images[b : b + 1, :, top : top + height, left : left + width],
            size=(size, size),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )
        for b, (top, left, height, width) in enumerate(boxes.tolist())
    ]
    return torch.cat(crops, dim=0)


def _per_image(factor: torch.Tensor) -> torch.Tensor:
    """(k,) factors as (k, 1, 1, 1), to scale a (k, C, H, W) batch."""
    return factor.view(-1, 1, 1, 1)


def _blend(a: torch.Tensor, b: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """``clamp(ratio a + (1 - ratio) b, 0, 1)``, torchvision's ``_blend`` for float images."""
    ratio = _per_image(ratio)
    return (ratio * a + (1 - ratio) * b).clamp(0.0, 1.0)


def _gray(images: torch.Tensor) -> torch.Tensor:
    """``0.299 R + 0.587 G + 0.114 B`` of (k, 3, H, W) images, as (k, 1, H, W).

    >>> _gray(torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64).view(1, 3, 1, 1)).item()
    0.299
    """
    weights = torch.tensor(GRAY_WEIGHTS, dtype=images.dtype, device=images.device)
    return (images * weights.view(1, 3, 1, 1)).sum(dim=1, keepdim=True)


def _grayscale(images: torch.Tensor) -> torch.Tensor:
    """`_gray` on every channel (``RandomGrayscale`` keeps the channel count); a one-channel
    image is kept."""
    if images.shape[1] != 3:
        return images
    return _gray(images).expand_as(images).clone()


def _brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``clamp(f x, 0, 1)``: a blend with black."""
    return _blend(images, torch.zeros_like(images), factor)


def _contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``clamp(f x + (1 - f) m, 0, 1)``, m the mean of the image's `_gray` (of the image itself
    for one channel)."""
    gray = _gray(images) if images.shape[1] == 3 else images
    return _blend(images, gray.mean(dim=(1, 2, 3), keepdim=True), factor)


def _saturation(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``clamp(f x + (1 - f) gray(x), 0, 1)`` per pixel; a one-channel image is kept."""
    if images.shape[1] != 3:
        return images
    return _blend(images, _gray(images), factor)


def _hue(images: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """RGB -> HSV, ``H <- (H + shift) mod 1``, HSV -> RGB; a one-channel image is kept.

    >>> red = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64).view(1, 3, 1, 1)
    >>> _hue(red, torch.tensor([1 / 3], dtype=torch.float64)).flatten().tolist()   # green
    [0.0, 1.0, 0.0]
    """
    if images.shape[1] != 3:
        return images
    hue, saturation, value = _rgb_to_hsv(images).unbind(dim=1)
    hue = torch.remainder(hue + shift.view(-1, 1, 1), 1.0)
    return _hsv_to_rgb(torch.stack((hue, saturation, value), dim=1))


def _rgb_to_hsv(rgb: torch.Tensor) -> torch.Tensor:
    """(k, 3, H, W) RGB -> HSV, all in [0, 1] (torchvision's ``_rgb2hsv``): V = max, S = (max -
    min) / max, H from the channel holding the max, 0 for a gray pixel."""
    r, g, b = rgb.unbind(dim=1)
    value = rgb.max(dim=1).values
    chroma = value - rgb.min(dim=1).values
    gray = chroma == 0
    saturation = chroma / torch.where(gray, torch.ones_like(value), value)
    safe = torch.where(gray, torch.ones_like(chroma), chroma)
    rc, gc, bc = (value - r) / safe, (value - g) / safe, (value - b) / safe
    hue = torch.where(value == r, bc - gc, torch.where(value == g, 2.0 + rc - bc, 4.0 + gc - rc))
    hue = torch.remainder(hue / 6.0 + 1.0, 1.0)
    return torch.stack((hue, saturation, value), dim=1)


def _hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    """(k, 3, H, W) HSV -> RGB (torchvision's ``_hsv2rgb``): sector ``i = floor(6 H) mod 6``,
    ``f = 6 H - floor(6 H)``, ``p = V (1 - S)``, ``q = V (1 - S f)``, ``t = V (1 - S (1 - f))``."""
    hue, saturation, value = hsv.unbind(dim=1)
    sector_f = torch.floor(hue * 6.0)
    f = hue * 6.0 - sector_f
    sector = torch.remainder(sector_f, 6).long().unsqueeze(1)
    p = (value * (1.0 - saturation)).clamp(0.0, 1.0)
    q = (value * (1.0 - saturation * f)).clamp(0.0, 1.0)
    t = (value * (1.0 - saturation * (1.0 - f))).clamp(0.0, 1.0)
    v = value
    channels = [
        torch.stack(options, dim=1).gather(1, sector).squeeze(1)
        for options in ((v, q, p, p, t, v), (t, v, v, q, p, p), (p, p, t, v, v, q))
    ]
    return torch.stack(channels, dim=1)


def _check_batch(images: torch.Tensor, generator: torch.Generator, size: int) -> None:
    """ValueError naming the problem when the arguments cannot be augmented."""
    if images.dim() != 4 or images.shape[1] not in (1, 3) or images.shape[0] == 0:
        raise ValueError(
            f"domainbed_augmented takes images of shape (B, C, H, W) with B >= 1 and C = 1 or "
            f"3, got {tuple(images.shape)}"
        )
    if images.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"domainbed_augmented takes float32 or float64 images, got {images.dtype}")
    if images.shape[2] < 1 or images.shape[3] < 1:
        raise ValueError(f"domainbed_augmented needs H, W >= 1, got {tuple(images.shape)}")
    if generator.device.type != "cpu":
        raise ValueError(
            f"domainbed_augmented draws on a CPU torch.Generator, got one on {generator.device}"
        )
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"domainbed_augmented needs size >= 1 (an int), got {size!r}")
