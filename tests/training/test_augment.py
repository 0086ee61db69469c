"""DomainBed's augmentation and ImageNet normalisation (`oodeval.training.augment`).

Each colour op is checked with its factor forced, in float64, against the formula written out
here (torchvision's documented semantics; `colorsys` for the hue); the crop boxes, flips, jitter
factors and orders and grayscales against their distributions over many draws. The frequency
checks allow 5 binomial standard deviations, sqrt(n p (1 - p)): with n = 2,000 that is 112 for
p = 1/2, 67 for p = 0.1 and 97 for p = 1/4; a correct implementation leaves that band with
probability below 1e-6 per check, and the seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import colorsys
import math

import pytest
import torch

from oodeval.training import domainbed_augmented, imagenet_normalized
from oodeval.training.augment import (
    _applied,
    _brightness,
    _contrast,
    _crop_boxes,
    _drawn,
    _Draws,
    _grayscale,
    _hue,
    _resized_crops,
    _saturation,
)

F64 = torch.float64
N = 2000


def image(c: int = 3, h: int = 5, w: int = 4, seed: int = 0) -> torch.Tensor:
    """A (1, c, h, w) float64 image in [0, 1]."""
    return torch.rand((1, c, h, w), generator=torch.Generator().manual_seed(seed), dtype=F64)


def factor(f: float) -> torch.Tensor:
    return torch.tensor([f], dtype=F64)


def luma(x: torch.Tensor) -> torch.Tensor:
    """0.299 R + 0.587 G + 0.114 B, (1, 1, H, W), written out channel by channel."""
    return (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)


def identity_draws(n: int, h: int, w: int) -> _Draws:
    """Draws that change nothing: the whole image, no flip, neutral factors, no grayscale."""
    return _Draws(
        boxes=torch.tensor([[0, 0, h, w]] * n),
        flip=torch.zeros(n, dtype=torch.bool),
        factors=torch.tensor([[1.0, 1.0, 1.0, 0.0]] * n, dtype=F64),
        order=torch.arange(4).repeat(n, 1),
        gray=torch.zeros(n, dtype=torch.bool),
    )


# -- normalisation -----------------------------------------------------------------------------
def test_imagenet_normalisation_uses_the_imagenet_constants() -> None:
    x = image(3, 6, 7)
    y = imagenet_normalized(x)
    for ch, (mean, std) in enumerate([(0.485, 0.229), (0.456, 0.224), (0.406, 0.225)]):
        assert torch.allclose(y[:, ch], (x[:, ch] - mean) / std, rtol=0, atol=1e-12)


def test_imagenet_normalisation_refuses_other_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        imagenet_normalized(torch.zeros(1, 1, 4, 4))


# -- the colour ops, factors forced --------------------------------------------------------------
def test_brightness_scales_and_clamps() -> None:
    x = image()
    for f in (0.7, 1.0, 1.3, 2.5):
        assert torch.allclose(_brightness(x, factor(f)), (f * x).clamp(0, 1), atol=1e-12)


def test_contrast_blends_with_the_mean_of_the_grayscale_image() -> None:
    x = image()
    mean = float(luma(x).mean())
    for f in (0.7, 1.3, 3.0):
        expected = (f * x + (1 - f) * mean).clamp(0, 1)
        assert torch.allclose(_contrast(x, factor(f)), expected, atol=1e-12)
    gray = image(c=1)  # one channel: the image's own mean
    m1 = float(gray.mean())
    assert torch.allclose(
        _contrast(gray, factor(0.5)), (0.5 * gray + 0.5 * m1).clamp(0, 1), atol=1e-12
    )


def test_saturation_blends_with_the_grayscale_image() -> None:
    x = image()
    for f in (0.0, 0.7, 1.3):
        expected = (f * x + (1 - f) * luma(x)).clamp(0, 1)
        assert torch.allclose(_saturation(x, factor(f)), expected, atol=1e-12)
    assert torch.equal(_saturation(image(c=1), factor(0.2)), image(c=1))


@pytest.mark.parametrize(
    ("shift", "rgb"),
    [
        (1 / 3, (0.0, 1.0, 0.0)),  # red -> green
        (1 / 6, (1.0, 1.0, 0.0)),  # red -> yellow
        (-1 / 3, (0.0, 0.0, 1.0)),  # red -> blue
        (0.5, (0.0, 1.0, 1.0)),  # red -> cyan
        (0.0, (1.0, 0.0, 0.0)),
    ],
)
def test_a_hue_shift_of_pure_red_gives_the_known_colour(shift: float, rgb: tuple) -> None:
    red = torch.tensor([1.0, 0.0, 0.0], dtype=F64).view(1, 3, 1, 1)
    out = _hue(red, factor(shift)).flatten().tolist()
    assert out == pytest.approx(list(rgb), abs=1e-12)


def test_the_hue_shift_agrees_with_colorsys() -> None:
    x = image(3, 6, 6, seed=3)
    x[0, :, 0, 0] = 0.25  # a gray pixel: no hue
    x[0, :, 0, 1] = torch.tensor([0.2, 0.9, 0.9], dtype=F64)  # a tie for the max
    for shift in (-0.3, -0.05, 0.17, 0.3):
        out = _hue(x, factor(shift))
        for i in range(6):
            for j in range(6):
                h, s, v = colorsys.rgb_to_hsv(*x[0, :, i, j].tolist())
                expected = colorsys.hsv_to_rgb((h + shift) % 1.0, s, v)
                assert out[0, :, i, j].tolist() == pytest.approx(list(expected), abs=1e-12)
    assert torch.equal(_hue(image(c=1), factor(0.2)), image(c=1))


def test_grayscale_uses_the_luma_weights_on_every_channel() -> None:
    x = torch.tensor([0.2, 0.6, 1.0], dtype=F64).view(1, 3, 1, 1)
    expected = 0.299 * 0.2 + 0.587 * 0.6 + 0.114 * 1.0
    assert _grayscale(x).flatten().tolist() == pytest.approx([expected] * 3, abs=1e-15)
    assert torch.equal(_grayscale(image(c=1)), image(c=1))


# -- the whole pipeline with forced draws --------------------------------------------------------
def test_neutral_draws_give_the_image_back() -> None:
    x = torch.cat([image(3, 6, 6, seed=s) for s in range(3)])
    assert torch.allclose(_applied(x, identity_draws(3, 6, 6), 6), x, rtol=0, atol=1e-12)


def test_forced_flip_and_grayscale_touch_only_the_chosen_images() -> None:
    x = torch.cat([image(3, 6, 6, seed=s) for s in range(3)])
    base = identity_draws(3, 6, 6)
    chosen = torch.tensor([True, False, True])
    flipped = _applied(x, _Draws(base.boxes, chosen, base.factors, base.order, base.gray), 6)
    assert torch.allclose(flipped[0], x[0].flip(-1), atol=1e-12)
    assert torch.allclose(flipped[1], x[1], atol=1e-12)
    assert torch.allclose(flipped[2], x[2].flip(-1), atol=1e-12)
    gray = _applied(x, _Draws(base.boxes, base.flip, base.factors, base.order, chosen), 6)
    assert torch.allclose(gray[0], luma(x[:1])[0].expand(3, 6, 6), atol=1e-12)
    assert torch.allclose(gray[1], x[1], atol=1e-12)


def test_the_colour_ops_run_in_the_drawn_order() -> None:
    x = image(3, 6, 6, seed=5)
    b, c = 1.6, 0.5
    factors = torch.tensor([[b, c, 1.0, 0.0]], dtype=F64)
    box = torch.tensor([[0, 0, 6, 6]])
    no = torch.zeros(1, dtype=torch.bool)

    def run(order: list[int]) -> torch.Tensor:
        return _applied(x, _Draws(box, no, factors, torch.tensor([order]), no), 6)

    bright_first = (b * x).clamp(0, 1)
    bright_first = (c * bright_first + (1 - c) * float(luma(bright_first).mean())).clamp(0, 1)
    contrast_first = (c * x + (1 - c) * float(luma(x).mean())).clamp(0, 1)
    contrast_first = (b * contrast_first).clamp(0, 1)
    assert torch.allclose(run([0, 1, 2, 3]), bright_first, atol=1e-12)
    assert torch.allclose(run([1, 2, 3, 0]), contrast_first, atol=1e-12)
    assert not torch.allclose(bright_first, contrast_first, atol=1e-3)


def test_a_square_box_resized_to_its_own_size_is_the_slice() -> None:
    x = image(3, 9, 11, seed=2)
    out = _resized_crops(x, torch.tensor([[2, 3, 5, 5]]), 5)
    assert torch.allclose(out, x[:, :, 2:7, 3:8], rtol=0, atol=1e-12)


def test_downscaling_is_antialiased() -> None:
    """Columns 1, 0, 0, 1, 0, 0, ... shrunk 3x: antialiased (a triangle filter 3 pixels wide),
    an interior pixel is the mean 1/3; plain bilinear would sample a 0 column."""
    x = torch.zeros((1, 3, 30, 30), dtype=F64)
    x[..., ::3] = 1.0
    out = _resized_crops(x, torch.tensor([[0, 0, 30, 30]]), 10)
    assert torch.allclose(out[..., 1:9], torch.full_like(out[..., 1:9], 1 / 3), atol=1e-12)


# -- the draws ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("h", "w"), [(37, 53), (224, 224), (60, 40)])
def test_crop_boxes_keep_the_scale_and_ratio_and_fit(h: int, w: int) -> None:
    """Each side is rounded from the exact one, so the bounds allow half a pixel per side."""
    top, left, bh, bw = _crop_boxes(torch.Generator().manual_seed(7), N, h, w).T.double()
    assert bool(((top >= 0) & (left >= 0) & (top + bh <= h) & (left + bw <= w)).all())
    assert bool(((bh + 0.5) * (bw + 0.5) >= 0.7 * h * w).all())
    assert bool(((bh - 0.5) * (bw - 0.5) <= h * w).all())
    assert bool(((bw + 0.5) / (bh - 0.5) >= 3 / 4).all())
    assert bool(((bw - 0.5) / (bh + 0.5) <= 4 / 3).all())
    # the placement is uniform: the free space is used at both ends
    assert bool((top == 0).any()) and bool((top == h - bh).any())


def test_crop_areas_of_a_square_image_span_the_scale_range() -> None:
    """Over 2,000 draws on a 224 x 224 image the area fractions reach both ends of [0.7, 1]
    (near the full area only an aspect near 1 fits, about 1 attempt in 200, so the top end is
    reached some ten times)."""
    _, _, bh, bw = _crop_boxes(torch.Generator().manual_seed(8), N, 224, 224).T.double()
    fraction = bh * bw / 224**2
    assert float(fraction.min()) < 0.705 and float(fraction.max()) > 0.97


def test_when_no_attempt_fits_the_crop_is_central_and_clipped_to_the_ratio() -> None:
    g = torch.Generator().manual_seed(0)
    # 10 x 100: an area >= 700 at aspect <= 4/3 needs a height >= 22, so nothing fits
    assert _crop_boxes(g, 5, 10, 100).tolist() == [[0, 43, 10, 13]] * 5
    assert _crop_boxes(g, 5, 100, 10).tolist() == [[43, 0, 13, 10]] * 5


def test_flip_grayscale_factor_and_order_draws_follow_their_distributions() -> None:
    d = _drawn(torch.Generator().manual_seed(11), N, 32, 32)
    assert abs(int(d.flip.sum()) - N * 0.5) <= 112
    assert abs(int(d.gray.sum()) - N * 0.1) <= 67
    bcs, hue = d.factors[:, :3], d.factors[:, 3]
    assert float(bcs.min()) >= 0.7 and float(bcs.max()) <= 1.3
    assert float(hue.min()) >= -0.3 and float(hue.max()) <= 0.3
    assert float(bcs.min()) < 0.71 and float(bcs.max()) > 1.29 and float(hue.min()) < -0.29
    assert torch.equal(d.order.sort(dim=1).values, torch.arange(4).repeat(N, 1))
    for op in range(4):
        assert abs(int((d.order[:, 0] == op).sum()) - N / 4) <= 97


# -- the public function -----------------------------------------------------------------------
def batch(c: int = 3, n: int = 4, h: int = 20, w: int = 30) -> torch.Tensor:
    return torch.rand((n, c, h, w), generator=torch.Generator().manual_seed(99), dtype=F64)


def test_the_same_seed_gives_the_same_batch_and_other_seeds_others() -> None:
    x = batch()
    a = domainbed_augmented(x, torch.Generator().manual_seed(1), 16)
    b = domainbed_augmented(x, torch.Generator().manual_seed(1), 16)
    c = domainbed_augmented(x, torch.Generator().manual_seed(2), 16)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c, atol=1e-3)
    expected = _applied(x, _drawn(torch.Generator().manual_seed(1), 4, 20, 30), 16)
    assert torch.equal(a, expected)


@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_output_has_the_size_dtype_and_range(c: int, dtype: torch.dtype) -> None:
    out = domainbed_augmented(batch(c).to(dtype), torch.Generator().manual_seed(3), 12)
    assert out.shape == (4, c, 12, 12) and out.dtype == dtype
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


def test_a_device_other_than_the_cpu_gets_its_draws_moved() -> None:
    out = domainbed_augmented(torch.empty(3, 3, 20, 24, device="meta"), torch.Generator(), 8)
    assert out.device.type == "meta" and out.shape == (3, 3, 8, 8)


@pytest.mark.parametrize(
    ("images", "size", "problem"),
    [
        (torch.zeros(2, 2, 8, 8), 4, "C = 1 or 3"),
        (torch.zeros(8, 8), 4, "C = 1 or 3"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.float16), 4, "float32 or float64"),
        (torch.zeros(2, 3, 8, 8), 0, "size >= 1"),
    ],
)
def test_bad_arguments_are_refused(images: torch.Tensor, size: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        domainbed_augmented(images, torch.Generator(), size)


def test_the_ratio_bounds_are_the_documented_ones() -> None:
    """A guard for the constants the draws read: scale (0.7, 1), ratio (3/4, 4/3)."""
    from oodeval.training import augment

    assert augment.CROP_SCALE == (0.7, 1.0) and augment.CROP_ATTEMPTS == 10
    assert augment.CROP_RATIO == (3 / 4, 4 / 3) and math.isclose(augment.JITTER, 0.3)
    assert (augment.FLIP_P, augment.GRAYSCALE_P) == (0.5, 0.1)


# --- the trainer's `augment` option ------------------------------------------------------------


def _colored_unit(**options):
    from oodeval.environments.colored import build_colored
    from oodeval.training import run_unit

    scenario = build_colored(source="digits", n_per_given=40, n_eval=20)
    return run_unit(scenario, "ERM", seed=3, steps=4, batch_size=8, eval_every=2, **options)


def test_augment_trains_on_augmented_minibatches_the_same_every_run():
    plain, once, again = _colored_unit(), _colored_unit(augment=True), _colored_unit(augment=True)
    assert once.rows == again.rows  # drawn from the unit's seeded generator
    assert [r.error for r in once.rows] != [r.error for r in plain.rows]


def test_augment_leaves_the_unit_generator_and_minibatches_in_step(monkeypatch):
    """The draws follow each step's minibatch draw: what the models are given is the plain
    minibatch (same rows) passed through `domainbed_augmented` with the unit's generator."""
    import oodeval.training.loop as loop

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = loop.domainbed_augmented

    def spy(images, generator, size):
        out = real(images, generator, size)
        seen.append((images.clone(), out.clone()))
        return out

    monkeypatch.setattr(loop, "domainbed_augmented", spy)
    _colored_unit(augment=True)
    assert len(seen) == 4  # one call a step
    images, out = seen[0]
    assert images.shape == out.shape and images.shape[1:] == (3, 8, 8)
    assert not torch.equal(images, out) and 0 <= float(out.min()) <= float(out.max()) <= 1


def test_augment_is_refused_for_images_it_cannot_take():
    from oodeval.errors import OodevalError
    from oodeval.training import TrainerOptions, run_unit
    from tests.helpers.training import TinyScenario

    with pytest.raises(
        OodevalError, match=r"^augment needs images of 1 or 3 channels.*\(2, 14, 14\)"
    ):
        run_unit(TinyScenario(), "ERM", seed=0, steps=2, augment=True)
    with pytest.raises(OodevalError, match="augment must be true or false, got 'yes'"):
        TrainerOptions(augment="yes")  # type: ignore[arg-type]
