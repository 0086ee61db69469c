"""``model="resnet18"`` / ``"resnet50"``: every stacked model is DomainBed's ResNet featurizer.

The reference below is a plain torchvision-style ResNet written with torch.nn layers (BasicBlock
for 18, Bottleneck with the stride on its 3x3 conv for 50; conv7x7/2 -> bn -> relu -> maxpool
3x3/2 -> four layers -> adaptive average pool -> flatten; ``fc`` kept, so that its state_dict is a
torchvision one, and skipped in forward). Its state_dict, written to files, is what
``pretrained=`` reads. It takes its images ImageNet-normalised by hand (`imagenet`), as
DomainBed's datasets give them; the featurizer normalises them itself.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import oodeval.algorithms as alg
from oodeval.algorithms.networks import (
    MODELS,
    EnsembleBatchNorm2d,
    ResNet,
    ResNet18,
    ResNet50,
    build_featurizer,
    conv_layout,
    imagenet_normalization,
)
from oodeval.errors import OodevalError

torch.set_num_threads(1)

TOL = 1e-10
SHAPE = (3, 32, 32)
LAYERS = {"resnet18": (2, 2, 2, 2), "resnet50": (3, 4, 6, 3)}


class RefBasic(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = shortcut(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class RefBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = shortcut(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


def shortcut(inplanes: int, outplanes: int, stride: int) -> nn.Sequential | None:
    if stride == 1 and inplanes == outplanes:
        return None
    return nn.Sequential(
        nn.Conv2d(inplanes, outplanes, 1, stride, bias=False), nn.BatchNorm2d(outplanes)
    )


class RefResNet(nn.Module):
    def __init__(self, name: str, in_channels: int = 3) -> None:
        super().__init__()
        block = RefBasic if name == "resnet18" else RefBottleneck
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), LAYERS[name], strict=True)):
            layer = []
            for j in range(blocks):
                layer.append(block(inplanes, planes, 2 if i > 0 and j == 0 else 1))
                inplanes = planes * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(inplanes, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def reference(name: str, seed: int, in_channels: int = 3) -> RefResNet:
    """A float64 reference whose BatchNorms are far from the identity (random affine and
    running statistics), so that a mixed-up buffer or layer would show; every number is a
    float32 one, so that the weights survive a float32 featurizer exactly."""
    torch.manual_seed(seed)
    ref = RefResNet(name, in_channels).double()
    with torch.no_grad():
        for mod in ref.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.3, 0.3)
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 2.0)
                mod.num_batches_tracked.fill_(seed + 7)
        for value in ref.state_dict().values():  # float32 numbers: a float32 net holds them
            if value.is_floating_point():
                value.copy_(value.float())
    return ref


def stack_of(refs: list[RefResNet], name: str, **kwargs) -> ResNet:
    """A float64 stack whose model k holds refs[k]'s weights, copied row by row."""
    net = build_featurizer(name, len(refs), SHAPE, **kwargs).double()
    own = net.state_dict(keep_vars=True)
    with torch.no_grad():
        for k, ref in enumerate(refs):
            for key, value in ref.state_dict().items():
                if not key.startswith("fc."):
                    own[key][k].copy_(value)
    return net


def imagenet(x: torch.Tensor) -> torch.Tensor:
    """DomainBed's ``transforms.Normalize`` by hand, in float64: channel i of (..., C, H, W)
    images minus mean[i % 3], over std[i % 3] (ImageNet's RGB statistics)."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    channels = [(x[..., i, :, :] - mean[i % 3]) / std[i % 3] for i in range(x.shape[-3])]
    return torch.stack(channels, dim=-3)


def images(*lead: int, seed: int = 0, channels: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(*lead, channels, 32, 32, generator=gen, dtype=torch.float64)


def torchvision_state(name: str, seed: int = 0) -> dict[str, torch.Tensor]:
    return dict(reference(name, seed).state_dict())


def test_registered_with_torchvisions_names_shapes_and_parameter_counts():
    assert {"resnet18", "resnet50"} <= set(MODELS)
    # torchvision's resnet18 / resnet50 have 11,689,512 / 25,557,032 parameters, of which fc
    # holds 512 * 1000 + 1000 / 2048 * 1000 + 1000
    for name, cls, width, count in (
        ("resnet18", ResNet18, 512, 11_689_512 - 513_000),
        ("resnet50", ResNet50, 2048, 25_557_032 - 2_049_000),
    ):
        net = build_featurizer(name, 2, SHAPE)
        assert type(net) is cls and net.n_outputs == width and net.pretrained is None
        assert sum(p.numel() for p in net.parameters()) == 2 * count
        want = {k: tuple(v.shape) for k, v in RefResNet(name).state_dict().items()}
        del want["fc.weight"], want["fc.bias"]
        assert list(net.state_dict()) == list(want)  # same names, same order
        assert net.torchvision_shapes() == want
        assert all(tuple(v.shape[1:]) == want[k] for k, v in net.state_dict().items())
    with pytest.raises(OodevalError, match="model='resnet18' needs \\(C, H, W\\) inputs"):
        build_featurizer("resnet18", 1, (784,))


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
@pytest.mark.parametrize("layout", ["grouped", "per_model"])
def test_each_stacked_model_is_the_reference_forward_and_backward(name, layout):
    """Shared and per-model images, in train mode (BatchNorms frozen): model k's features and
    gradients are those of reference k in eval mode."""
    refs = [reference(name, seed) for seed in (1, 2)]
    net = stack_of(refs, name).train()
    n = 2 if name == "resnet18" else 1  # float64 backward of ResNet-50 is slow on one thread
    for shared in (True, False) if name == "resnet18" else (layout == "grouped",):
        x = images(n, seed=3) if shared else images(2, n, seed=4)
        weights = torch.randn(2, n, net.n_outputs, dtype=torch.float64)
        net.zero_grad()
        with conv_layout(layout):
            out = net(x)
        assert out.shape == (2, n, net.n_outputs)
        (out * weights).sum().backward()
        grads = {k: p.grad for k, p in net.named_parameters()}
        for k, ref in enumerate(refs):
            ref.eval().zero_grad()
            want = ref(imagenet(x if shared else x[k]))
            torch.testing.assert_close(out[k], want, rtol=0, atol=TOL)
            (want * weights[k]).sum().backward()
            for key, p in ref.named_parameters():
                if not key.startswith("fc."):
                    scale = max(1.0, float(p.grad.abs().max()))
                    torch.testing.assert_close(grads[key][k], p.grad, rtol=0, atol=TOL * scale)


@pytest.mark.parametrize("layout", ["grouped", "per_model"])
def test_without_freeze_bn_each_model_normalises_with_its_own_batch_like_the_reference(layout):
    refs = [reference("resnet18", seed) for seed in (5, 6)]
    net = ResNet18(2, SHAPE, freeze_bn=False).double()
    net.load_state_dict(stack_of(refs, "resnet18").state_dict())
    net.train()
    x = images(2, 4, seed=7)  # 4 images: layer4's batch statistics over 4 values per channel
    with conv_layout(layout):
        out = net(x)
    for k, ref in enumerate(refs):
        torch.testing.assert_close(out[k], ref.train()(imagenet(x[k])), rtol=0, atol=TOL)
        for key, value in ref.state_dict().items():
            if "running" in key or "num_batches" in key:
                torch.testing.assert_close(net.state_dict()[key][k], value, rtol=0, atol=TOL)


def test_freeze_bn_keeps_batchnorms_in_eval_and_running_stats_fixed_through_a_training_step():
    torch.manual_seed(0)
    hp = alg.resolve_hparams("ERM", {}, model="resnet18")
    erm = alg.get_algorithm("ERM")(SHAPE, 2, torch.ones(2, 2, dtype=torch.bool), hp,
                                   model="resnet18").double().train()  # fmt: skip
    norms = [m for m in erm.featurizer.modules() if isinstance(m, EnsembleBatchNorm2d)]
    assert len(norms) == 20 and erm.featurizer.training  # 1 + 8 blocks x 2 + 3 downsamples
    assert not any(m.training for m in norms)
    before = {k: v.clone() for k, v in erm.state_dict().items()}
    erm.update(images(2, 2, 2, seed=1), torch.randint(0, 2, (2, 2, 2)))
    after = erm.state_dict()
    for key in before:
        if "running" in key or "num_batches" in key:
            assert torch.equal(before[key], after[key]), key
    assert not torch.equal(before["featurizer.conv1.weight"], after["featurizer.conv1.weight"])
    assert not torch.equal(before["featurizer.bn1.weight"], after["featurizer.bn1.weight"])
    erm.eval().train()
    assert not any(m.training for m in norms)
    one = erm.select_models(1).double().train()  # model 1 alone, BatchNorms still frozen
    assert torch.equal(one.featurizer.layer1[0].bn1.running_var[0].double(),
                       erm.featurizer.layer1[0].bn1.running_var[1])  # fmt: skip
    assert not any(m.training for m in one.featurizer.modules()
                   if isinstance(m, EnsembleBatchNorm2d))  # fmt: skip


def test_dropout_drops_features_in_training_and_is_the_identity_in_eval():
    torch.manual_seed(0)
    hp = alg.resolve_hparams("ERM", {"resnet_dropout": 0.5}, model="resnet18")
    erm = alg.get_algorithm("ERM")(SHAPE, 2, torch.ones(1, 2, dtype=torch.bool), hp,
                                   model="resnet18").double()  # fmt: skip
    net = erm.featurizer
    assert net.dropout == 0.5
    x = images(2, seed=2)
    net.eval()
    clean = net(x)
    assert torch.equal(net(x), clean)
    net.train()  # BatchNorms frozen: before dropout the features are the eval ones
    noisy = net(x)
    live = clean != 0  # pooled ReLU outputs: a few features are 0 before any dropout
    dropped = (noisy == 0) & live
    assert 0.3 < float(dropped.sum() / live.sum()) < 0.7 and float(live.double().mean()) > 0.5
    kept = live & ~dropped
    torch.testing.assert_close(noisy[kept], 2 * clean[kept], rtol=0, atol=TOL)
    assert not noisy[~live].any()
    assert build_featurizer("resnet50", 1, SHAPE).dropout == 0.0


def test_resnet_dropout_is_the_featurizers_hyperparameter_with_domainbeds_search():
    assert "resnet_dropout" not in alg.default_hparams("ERM")
    assert alg.default_hparams("ERM", model="resnet50")["resnet_dropout"] == 0.0
    draws = {alg.sample_hparams("IRM", s, model="resnet18")["resnet_dropout"] for s in range(40)}
    assert draws == {0.0, 0.1, 0.5}
    for seed in range(5):  # the algorithm's own draws do not move when a model is given, but
        with_model = alg.sample_hparams("IRM", seed, model="resnet18")  # those the model changes
        del with_model["resnet_dropout"], with_model["lr"], with_model["weight_decay"]
        small = alg.sample_hparams("IRM", seed)
        del small["lr"], small["weight_decay"]
        assert with_model == small
    with pytest.raises(OodevalError, match="unknown hyperparameter\\(s\\) resnet_dropout for ERM"):
        alg.resolve_hparams("ERM", {"resnet_dropout": 0.1}, model="mnist_cnn")


@pytest.mark.parametrize("suffix", [".pth", ".pt", ".safetensors", "dict"])
def test_a_torchvision_state_dict_loads_into_every_model(tmp_path, suffix):
    ref = reference("resnet18", seed=8)
    state = ref.state_dict()
    if suffix == "dict":
        source, digest = state, None
    else:
        source = tmp_path / f"weights{suffix}"
        if suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file(dict(state), source)
        else:
            torch.save(state, source)
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
    net = build_featurizer("resnet18", 2, SHAPE, pretrained=source).double().eval()
    assert net.pretrained is not None and len(net.pretrained) == 64
    if digest is not None:
        assert net.pretrained == digest
    for key, value in net.state_dict().items():
        for k in range(2):
            assert torch.equal(value[k], state[key].to(value.dtype)), key
    x = images(2, seed=9)
    out = net(x)
    torch.testing.assert_close(out[0], ref.eval()(imagenet(x)), rtol=0, atol=TOL)
    torch.testing.assert_close(out[1], out[0], rtol=0, atol=0)


def test_a_state_dict_that_does_not_fit_raises_one_line_naming_the_first_bad_key(tmp_path):
    good = torchvision_state("resnet18")
    missing = {k: v for k, v in good.items() if k != "layer2.0.downsample.1.running_var"}
    del missing["layer3.1.bn2.bias"]
    extra = {**good, "layer5.0.conv1.weight": torch.zeros(1), "head.bias": torch.zeros(1)}
    misshapen = {**good, "conv1.weight": torch.zeros(64, 1, 7, 7)}
    fix = "give the state_dict of a torchvision resnet18"
    cases = [
        (missing, "missing key 'layer2.0.downsample.1.running_var' (2 keys missing); " + fix),
        (extra, "unexpected key 'layer5.0.conv1.weight' (2 unexpected keys); " + fix),
        (misshapen, "key 'conv1.weight' has shape (64, 1, 7, 7), resnet18 needs (64, 3, 7, 7)"),
        (
            torchvision_state("resnet50"),
            "key 'layer1.0.conv1.weight' has shape (64, 64, 1, 1), resnet18 needs (64, 64, 3, 3)",
        ),  # fmt: skip
    ]
    net = ResNet18(1, SHAPE)
    for i, (state, message) in enumerate(cases):
        path = tmp_path / f"bad{i}.pth"
        torch.save(state, path)
        for source in (path, state):
            with pytest.raises(OodevalError) as err:
                net.load_pretrained(source)
            text = str(err.value)
            assert message in text and "\n" not in text
            assert text.startswith(f"pretrained weights {path if source is path else '(a'}")
    torch.save(torch.zeros(3), tmp_path / "tensor.pth")
    torch.save({"state_dict": good, "epoch": 3}, tmp_path / "checkpoint.pt")
    (tmp_path / "junk.pth").write_bytes(b"not a torch file")
    (tmp_path / "junk.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    for file, message in (
        ("tensor.pth", "are not a state dict (names -> tensors) but a Tensor; save one with"),
        ("checkpoint.pt", "key 'state_dict' holds a dict; a checkpoint's weights are often"),
        ("junk.pth", "torch.load(weights_only=True) cannot read it"),
        ("junk.safetensors", "not a readable safetensors file"),
        ("absent.pth", "no such file"),
        ("weights.npz", "unknown file type '.npz'; give a .pth, .pt, .safetensors file"),
    ):
        with pytest.raises(OodevalError) as err:
            net.load_pretrained(tmp_path / file)
        assert message in str(err.value) and "\n" not in str(err.value), file
    with pytest.raises(OodevalError, match="model='cnn' has no pretrained weights; pretrained= "
                                           "is for resnet18, resnet50"):  # fmt: skip
        build_featurizer("cnn", 1, (2, 14, 14), pretrained=good)
    with pytest.raises(OodevalError, match="^pretrained weights .*bad0.pth for resnet18: missing"):
        build_featurizer("resnet18", 2, SHAPE, pretrained=tmp_path / "bad0.pth")


def test_a_refused_state_dict_changes_no_weight():
    torch.manual_seed(0)
    net = ResNet18(1, SHAPE)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    bad = {**torchvision_state("resnet18"), "layer4.1.bn2.weight": torch.zeros(3)}
    with pytest.raises(OodevalError, match="key 'layer4.1.bn2.weight' has shape \\(3,\\)"):
        net.load_pretrained(bad)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert net.pretrained is None


@pytest.mark.parametrize("channels", [1, 4])
def test_other_channel_counts_copy_pretrained_channel_i_mod_3(channels):
    ref = reference("resnet18", seed=10)
    shape = (channels, 32, 32)
    net = build_featurizer("resnet18", 2, shape, pretrained=ref.state_dict()).double().eval()
    rgb = ref.conv1.weight
    assert net.conv1.weight.shape == (2, 64, channels, 7, 7)
    for k in range(2):
        for i in range(channels):
            assert torch.equal(net.conv1.weight[k, :, i], rgb[:, i % 3])
    adapted = RefResNet("resnet18", channels).double()  # ref with the adapted first conv
    first = rgb[:, [i % 3 for i in range(channels)]]
    adapted.load_state_dict({**ref.state_dict(), "conv1.weight": first})
    x = images(2, seed=11, channels=channels)
    torch.testing.assert_close(net(x)[1], adapted.eval()(imagenet(x)), rtol=0, atol=TOL)
    torch.manual_seed(0)
    fresh = ResNet18(3, shape)  # not pretrained: DomainBed adapts the random RGB conv alike
    for i in range(3, channels):
        assert torch.equal(fresh.conv1.weight[:, :, i], fresh.conv1.weight[:, :, i % 3])
    assert not torch.equal(fresh.conv1.weight[0], fresh.conv1.weight[1])


def test_random_init_is_torchvisions_and_seeded():
    torch.manual_seed(3)
    a = ResNet50(2, SHAPE)
    torch.manual_seed(3)
    b = ResNet50(2, SHAPE)
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    w = a.layer3[0].conv2.weight.detach()  # kaiming_normal_(fan_out): std sqrt(2 / (256 * 3 * 3))
    assert abs(float(w.std()) / (2 / (256 * 9)) ** 0.5 - 1) < 0.01 and abs(float(w.mean())) < 1e-3
    assert all(torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any()
               for m in a.modules() if isinstance(m, EnsembleBatchNorm2d))  # fmt: skip


def test_erm_on_resnet18_trains_the_same_in_both_layouts():
    """Two float64 ERM updates of two models on their own minibatches of small images."""
    shape = (3, 8, 8)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 2, 2, 2, *shape, generator=g, dtype=torch.float64)  # steps, M, E, B
    y = torch.randint(0, 2, (2, 2, 2, 2), generator=g)
    states = []
    for layout in ("grouped", "per_model"):
        torch.manual_seed(0)
        hp = alg.resolve_hparams("ERM", {}, model="resnet18")
        erm = alg.get_algorithm("ERM")(shape, 2, torch.ones(2, 2, dtype=torch.bool), hp,
                                       model="resnet18").double().train()  # fmt: skip
        with conv_layout(layout):
            losses = [erm.update(x[step], y[step])["loss"] for step in range(2)]
        states.append((erm.state_dict(), losses))
    (first, l1), (second, l2) = states
    for key, value in first.items():
        torch.testing.assert_close(value, second[key], rtol=0, atol=TOL, msg=key)
    torch.testing.assert_close(torch.stack(l1), torch.stack(l2), rtol=0, atol=TOL)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_normalisation_is_imagenets_of_channel_i_mod_3_by_hand(channels):
    net = build_featurizer("resnet18", 2, (channels, 32, 32))
    x = images(2, 5, seed=12, channels=channels)  # float64, per model
    got = net.normalized(x)
    assert got.dtype == torch.float64 and got.shape == x.shape
    assert torch.equal(got, imagenet(x))  # the same float64 operations: bit for bit
    # by hand: a pixel at the mean is 0, one at 1 is (1 - mean) / std
    ones = net.normalized(torch.ones(1, channels, 1, 1, dtype=torch.float64)).flatten().tolist()
    want = [515 / 229, 544 / 224, 594 / 225]  # (1 - m) / s of R, G, B, exactly
    assert ones == pytest.approx([want[i % 3] for i in range(channels)], rel=1e-15, abs=0)
    low = net.normalized(x.float())  # float32 images: float32 statistics (rounded once)
    assert low.dtype == torch.float32
    # rounded to float32: the image, the mean, the std, the difference and the quotient, each
    # by at most 2**-24 of a value below 2.7 (the std rounding enters through the quotient)
    torch.testing.assert_close(low.double(), imagenet(x), rtol=0, atol=6 * 2**-24 * 2.7)
    assert net.normalized(x.bfloat16()).dtype == torch.float32  # never in bfloat16


def test_the_forward_normalises_first_and_the_state_dict_stays_torchvisions():
    torch.manual_seed(0)
    net = ResNet18(2, SHAPE).double().eval()
    plain = ResNet18(2, SHAPE, normalize=False).double().eval()
    plain.load_state_dict(net.state_dict())  # strict: the same torchvision keys, no more
    assert not any(k.startswith("input_") for k in net.state_dict())
    assert {"input_mean", "input_std"} <= {k for k, _ in net.named_buffers()}
    x = images(3, seed=13)
    for layout in ("grouped", "per_model"):
        with conv_layout(layout):
            torch.testing.assert_close(net(x), plain(imagenet(x)), rtol=0, atol=TOL)
            assert not torch.allclose(net(x), plain(x))
    assert torch.equal(plain.normalized(x), x)
    assert build_featurizer("resnet50", 1, SHAPE, normalize=False).normalize is False


def test_only_the_image_channels_are_normalised():
    net = build_featurizer("resnet18", 1, (4, 32, 32), image_channels=3)  # ARM: a context channel
    x = images(2, seed=14, channels=4)
    got = net.normalized(x)
    assert torch.equal(got[:, :3], imagenet(x[:, :3])) and torch.equal(got[:, 3], x[:, 3])
    assert torch.equal(net.normalized(x[:, :3]), imagenet(x[:, :3]))  # the images alone
    for bad in (0, 5):
        with pytest.raises(OodevalError, match=r"image_channels must be in \[1, 4\]"):
            ResNet18(1, (4, 32, 32), image_channels=bad)


def test_the_setting_an_algorithm_was_built_with_survives_select_models():
    hp = alg.resolve_hparams("ARM", {}, model="resnet18")
    for flag in (True, False):
        with imagenet_normalization(flag):
            arm = alg.get_algorithm("ARM")(SHAPE, 2, torch.ones(2, 2, dtype=torch.bool), hp,
                                           model="resnet18")  # fmt: skip
        assert arm.featurizer.normalize is flag and arm.imagenet_normalize is flag
        one = arm.select_models(1)  # built outside the block: the original's setting still
        assert one.featurizer.normalize is flag and one.imagenet_normalize is flag
        x = images(2, seed=16)
        assert torch.equal(arm.normalized_images(x), imagenet(x) if flag else x)
    assert build_featurizer("resnet18", 1, SHAPE).normalize is True  # outside: on
    with imagenet_normalization(False):
        assert build_featurizer("resnet18", 1, SHAPE, normalize=True).normalize is True
    with pytest.raises(OodevalError, match="imagenet_normalize must be true or false, got 1"):
        with imagenet_normalization(1):
            pass


def test_arms_context_net_sees_normalised_images_and_its_channel_is_left_alone():
    """DomainBed: the dataset normalises the images, the context net maps them, the featurizer
    gets the normalised images and the raw context map."""
    torch.manual_seed(0)
    hp = alg.resolve_hparams("ARM", {}, model="resnet18")
    arm = alg.get_algorithm("ARM")(SHAPE, 2, torch.ones(1, 2, dtype=torch.bool), hp,
                                   model="resnet18").double().eval()  # fmt: skip
    seen = {}
    context = arm.context_net.forward
    featurize = arm.featurizer.features

    def context_input(x, *args):
        seen["context"] = x
        return context(x, *args)

    def featurizer_input(h, m):
        seen["featurizer"] = h
        return featurize(h, m)

    arm.context_net.forward = context_input
    arm.featurizer.features = featurizer_input
    x = images(4, seed=15)
    with torch.no_grad(), conv_layout("per_model"):
        maps = arm.per_image(x)
        arm.predict_from(x, maps)
    assert torch.equal(seen["context"], imagenet(x))
    fed = seen["featurizer"].double()  # model 0's images (n, 4, H, W), one group of 4
    assert torch.equal(fed[:, :3], imagenet(x))
    assert torch.equal(fed[:, 3:], maps[0].mean(dim=0, keepdim=True).expand(4, -1, -1, -1))
