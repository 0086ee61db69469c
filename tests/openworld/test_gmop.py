"""GMoP on frozen features: partitions, the O(n) gated AUC loss, gates, detector scores, I/O."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oodeval.errors import OodevalError
from oodeval.openworld.base_new import few_shot_indices
from oodeval.openworld.features import (
    digit_features,
    load_features,
    load_mnist,
    make_feature_set,
    mnist_in_digits_format,
    save_features,
    synthetic_features,
)
from oodeval.openworld.gmop import (
    GMoP,
    GMoPConfig,
    evaluate_model,
    gated_auc_loss,
    gated_auc_loss_pairwise,
    load_model,
    pseudo_partitions,
    save_model,
    train_gmop,
    train_single_context,
    zero_shot_model,
)
from tests.helpers.text_tower import TinyTextTower, toy_tokenizer


@pytest.fixture(scope="module")
def data():
    fs = synthetic_features(n_classes=10, dim=16, n_per_class=40, overlap=0.5, seed=3)
    train_idx = few_shot_indices(fs.labels, fs.base_classes, 8, seed=0)
    test_idx = np.setdiff1d(np.arange(fs.labels.size), train_idx)
    return fs.subset(train_idx), fs.subset(test_idx)


# --- pseudo partitions ---------------------------------------------------------------------------


def test_partitions_follow_j_mod_k_over_sorted_base_classes():
    parts = pseudo_partitions([7, 3, 5, 1, 9], 3)  # sorted: 1 3 5 7 9 -> positions 0..4
    assert [p.pseudo_new for p in parts] == [(1, 7), (3, 9), (5,)]
    assert [p.pseudo_base for p in parts] == [(3, 5, 9), (1, 5, 7), (1, 3, 7, 9)]


@pytest.mark.parametrize("n_base, k", [(5, 2), (6, 3), (7, 7), (10, 4)])
def test_each_class_is_pseudo_new_exactly_once_and_bases_cover_everything(n_base, k):
    parts = pseudo_partitions(range(n_base), k)
    new = sorted(c for p in parts for c in p.pseudo_new)
    assert new == list(range(n_base))
    assert set().union(*(p.pseudo_base for p in parts)) == set(range(n_base))
    for p in parts:
        assert p.pseudo_base and p.pseudo_new and not set(p.pseudo_base) & set(p.pseudo_new)


def test_too_many_or_too_few_partitions_is_one_clear_error():
    with pytest.raises(OodevalError, match="K=6 partitions need at least K base classes, got 5"):
        pseudo_partitions(range(5), 6)
    with pytest.raises(OodevalError, match=">= 2"):
        pseudo_partitions(range(5), 1)


# --- the gated AUC loss ---------------------------------------------------------------------------


def _double_loop(rb, rn, gb, gn):
    total = 0.0
    for i in range(len(rb)):
        for j in range(len(rn)):
            total += gb[i] * (1.0 - (rb[i] - rn[j])) ** 2 * gn[j]
    return total / (len(rb) * len(rn))


@settings(max_examples=40, deadline=None)
@given(n_b=st.integers(1, 12), n_n=st.integers(1, 12), seed=st.integers(0, 10_000))
def test_linear_time_loss_equals_the_pairwise_loss_and_its_gradients(n_b, n_n, seed):
    g = torch.Generator().manual_seed(seed)
    tensors = [torch.rand(n, generator=g, dtype=torch.float64) for n in (n_b, n_n, n_b, n_n)]
    fast_in = [t.clone().requires_grad_(True) for t in tensors]
    slow_in = [t.clone().requires_grad_(True) for t in tensors]
    fast, slow = gated_auc_loss(*fast_in), gated_auc_loss_pairwise(*slow_in)
    assert fast.item() == pytest.approx(slow.item(), rel=1e-12, abs=1e-14)
    assert slow.item() == pytest.approx(_double_loop(*[t.tolist() for t in tensors]), rel=1e-12)
    fast.backward()
    slow.backward()
    for a, b in zip(fast_in, slow_in, strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-10, atol=1e-12)


def test_gated_loss_hand_example():
    # pairs: (0.9 vs 0.2) -> (1 - 0.7)^2 = 0.09 weighted 0.5 * 1; (0.4 vs 0.2) -> 0.64 * 1 * 1
    loss = gated_auc_loss(
        torch.tensor([0.9, 0.4]), torch.tensor([0.2]), torch.tensor([0.5, 1.0]), torch.tensor([1.0])
    )
    assert float(loss) == pytest.approx((0.5 * 0.09 + 0.64) / 2)


# --- gates ---------------------------------------------------------------------------------------


def _perturbed_model(train, seed=0):
    model = GMoP(train.text_features, train.base_classes, logit_scale=train.logit_scale)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def _unit(train):
    x = torch.nn.functional.normalize(torch.from_numpy(train.features), dim=1)
    return x, torch.from_numpy(train.labels)


def test_auc_gradient_reaches_g_through_the_base_gate_only(data, monkeypatch):
    train, _ = data
    model = _perturbed_model(train)
    x, y = _unit(train)
    model.losses(x, y)["auc"].backward()
    assert model.g_weight.grad.abs().sum() > 0 and model.g_bias.grad.abs().sum() > 0
    assert model.r_weight.grad.abs().sum() > 0
    # The new gate is built from the fixed zero-shot classifier: nothing learnable in it.
    part = model.partitions[0]
    pn = torch.isin(y, torch.tensor(part.pseudo_new))
    assert not model.new_gate(x[pn], y[pn], part.pseudo_new).requires_grad
    assert model.base_gate(x[~pn], y[~pn], part.pseudo_base).requires_grad
    # Cut the base gate from the graph: g then receives no gradient from the AUC term at all.
    model.zero_grad()
    original = GMoP.base_gate
    monkeypatch.setattr(GMoP, "base_gate", lambda self, *a: original(self, *a).detach())
    model.losses(x, y)["auc"].backward()
    assert model.g_weight.grad is None or model.g_weight.grad.abs().sum() == 0
    assert model.r_weight.grad.abs().sum() > 0


def test_gates_are_sigmoids_of_ground_truth_probabilities(data):
    train, _ = data
    model = _perturbed_model(train, seed=1)
    x, y = _unit(train)
    classes = model.partitions[1].pseudo_base
    rows = torch.isin(y, torch.tensor(classes))
    with torch.no_grad():
        gate = model.base_gate(x[rows], y[rows], classes)
        probs = model.base_logits(x[rows], classes).softmax(dim=1)
        col = [classes.index(int(c)) for c in y[rows]]
        expected = torch.sigmoid(probs[torch.arange(len(col)), col])
    assert torch.allclose(gate, expected)
    assert torch.all((gate > 0.5) & (gate < 1 / (1 + np.exp(-1)) + 1e-6))


# --- detector score ------------------------------------------------------------------------------


def test_detector_score_is_max_over_sub_detectors_of_max_base_softmax(data):
    train, test = data
    model = _perturbed_model(train, seed=2)
    text = test.text_features / np.linalg.norm(test.text_features, axis=1, keepdims=True)
    x = test.features / np.linalg.norm(test.features, axis=1, keepdims=True)
    per_k = []
    for k in range(model.n_partitions):
        w = model.r_weight[k].detach().double().numpy()
        b = model.r_bias[k].detach().double().numpy()
        t = text + text @ w.T + b
        t /= np.linalg.norm(t, axis=1, keepdims=True)
        logits = model.logit_scale * x @ t.T
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        per_k.append(p[:, list(train.base_classes)].max(axis=1))
    expected = np.max(per_k, axis=0)
    got = model.predict(test.features)["detector_scores"]
    # float32 model vs float64 reference, u = 2**-24. The features and text rows are normalised
    # (<= 20u each); t = text + text W^T + b sums 18 terms per entry (<= 18u times the sum of
    # |terms|, which is <= 3 |t| for these seeds); the 16-term dot product adds <= 16u. So
    # |d logit| <= scale * 130u, and a softmax probability moves by at most 2 |d logit| relative
    # plus 14u of its own rounding (C = 10 classes): rtol = 2 * 10 * 130u + 14u = 1.6e-4.
    np.testing.assert_allclose(got, expected, rtol=1.6e-4, atol=0)
    # The sub-detectors differ, and the max is attained by different ones on different samples.
    assert len(set(np.argmax(per_k, axis=0).tolist())) > 1


def test_predict_outputs_are_the_gated_mixture(data):
    train, test = data
    out = _perturbed_model(train, seed=4).predict(test.features)
    # r and the float32 softmaxes p_g, p_h (each summing to 1 within (C + 4)u, u = 2**-24, C <= 10
    # classes) are mixed in float64: both identities hold within 16u = 1e-6 of r or 1.
    np.testing.assert_allclose(out["outputs"].sum(axis=1), 1.0, rtol=0, atol=1e-6)
    base = list(train.base_classes)
    np.testing.assert_allclose(
        out["outputs"][:, base].sum(axis=1), out["detector_scores"], rtol=1e-6, atol=0
    )


# --- training, determinism, baselines -------------------------------------------------------------


def test_training_lowers_every_loss_term(data):
    train, _ = data
    x, y = _unit(train)
    start = GMoP(train.text_features, train.base_classes, logit_scale=train.logit_scale)
    trained = train_gmop(train, GMoPConfig(steps=60))
    with torch.no_grad():
        before, after = start.losses(x, y), trained.losses(x, y)
    for term in ("ce", "auc", "detector_ce"):
        assert float(after[term]) < float(before[term]), term


def test_same_seed_same_model_and_seed_matters_with_minibatches(data):
    train, _ = data
    cfg = GMoPConfig(steps=15, batch_size=16, seed=5)
    a, b = train_gmop(train, cfg), train_gmop(train, cfg)
    c = train_gmop(train, GMoPConfig(steps=15, batch_size=16, seed=6))
    for (name, pa), pb, _pc in zip(
        a.state_dict().items(), b.state_dict().values(), c.state_dict().values(), strict=True
    ):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.r_weight, c.r_weight)


def test_gmop_new_classifier_stays_zero_shot_and_metrics_are_complete(data):
    train, test = data
    gmop = train_gmop(train, GMoPConfig(steps=40))
    zs = zero_shot_model(train)
    np.testing.assert_array_equal(
        gmop.predict(test.features)["new_predictions"], zs.predict(test.features)["new_predictions"]
    )
    for model in (gmop, zs, train_single_context(train, GMoPConfig(steps=40))):
        metrics = evaluate_model(model, test)
        assert set(metrics) == {
            "base_acc",
            "new_acc",
            "hm",
            "overall_acc",
            "auroc",
            "openworld_auc",
        }
        assert all(0.0 <= v <= 1.0 for v in metrics.values())


def test_model_round_trips_through_npz(data, tmp_path):
    train, test = data
    for model in (train_gmop(train, GMoPConfig(steps=5)), train_single_context(train)):
        path = tmp_path / "model.npz"
        save_model(path, model, GMoPConfig())
        loaded = load_model(path)
        assert type(loaded) is type(model)
        for key, value in model.predict(test.features).items():
            np.testing.assert_array_equal(loaded.predict(test.features)[key], value)


def test_model_files_are_never_unpickled(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, format=np.array([{"a": 1}], dtype=object))
    with pytest.raises(OodevalError):
        load_model(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(OodevalError, match="not a readable"):
        load_model(tmp_path / "junk.npz")


# --- bad input -----------------------------------------------------------------------------------


def test_feature_dimension_mismatch_is_one_clear_error(data):
    train, test = data
    with pytest.raises(OodevalError, match="dimension 16 but text_features have dimension 8"):
        make_feature_set(train.features, train.labels, train.text_features[:, :8])
    model = zero_shot_model(train)
    with pytest.raises(OodevalError, match=r"expects \(n, 16\)"):
        model.predict(test.features[:, :10])


def test_a_base_class_without_training_samples_is_one_clear_error(data):
    train, _ = data
    without_2 = train.subset(np.flatnonzero(train.labels != 2))
    with pytest.raises(OodevalError, match=r"base class\(es\) \[2\] have no training samples"):
        train_gmop(without_2, GMoPConfig(steps=1))


def test_more_partitions_than_base_classes_is_one_clear_error(data):
    train, _ = data
    with pytest.raises(OodevalError, match="lower n_partitions to at most 5"):  # the keyword
        train_gmop(train, GMoPConfig(n_partitions=6))


def test_evaluating_on_another_split_is_refused(data):
    train, test = data
    model = zero_shot_model(train)
    other = make_feature_set(test.features, test.labels, test.text_features, [0, 1, 2, 3])
    with pytest.raises(OodevalError, match="differ from the model"):
        evaluate_model(model, other)


# --- feature files and feature sources ------------------------------------------------------------


def test_feature_file_round_trip_and_missing_arrays(data, tmp_path):
    train, _ = data
    save_features(tmp_path / "f.npz", train)
    back = load_features(tmp_path / "f.npz")
    np.testing.assert_array_equal(back.features, train.features)
    assert back.base_classes == train.base_classes and back.logit_scale == train.logit_scale
    np.savez(tmp_path / "bad.npz", features=train.features, labels=train.labels)
    with pytest.raises(OodevalError, match="missing array"):
        load_features(tmp_path / "bad.npz")
    np.savez(
        tmp_path / "range.npz",
        features=train.features,
        labels=train.labels + 20,
        text_features=train.text_features,
    )
    with pytest.raises(OodevalError, match="has no text feature row"):
        load_features(tmp_path / "range.npz")


def test_synthetic_overlap_makes_detection_harder():
    aurocs = []
    for overlap in (0.0, 0.5, 0.9):
        fs = synthetic_features(overlap=overlap, seed=0)
        aurocs.append(evaluate_model(zero_shot_model(fs), fs)["auroc"])
    assert aurocs[0] > aurocs[1] > aurocs[2]
    with pytest.raises(OodevalError):
        synthetic_features(overlap=1.5)


def test_digit_features_from_a_base_class_encoder():
    train, test = digit_features("digits", seed=0, shots=4, encoder_steps=150)
    assert train.features.shape == (20, 32) and set(train.labels) == set(range(5))
    assert set(test.labels) == set(range(10))
    np.testing.assert_allclose(np.linalg.norm(test.text_features, axis=1), 1.0, rtol=1e-5)
    # Prototype "text" features classify unseen new classes far above chance (1 / 5).
    assert evaluate_model(zero_shot_model(test), test)["new_acc"] > 0.5


def test_mnist_reader_and_digits_format(tmp_path, mnist_dir):
    images, labels = load_mnist(mnist_dir)
    assert images.shape == (10000, 784) and labels.shape == (10000,)
    assert np.bincount(labels).tolist()[:2] == [980, 1135]
    redrawn = mnist_in_digits_format(np.vstack([images[:5], np.zeros((1, 784), np.float32)]))
    assert redrawn.shape == (6, 64) and redrawn.min() >= 0 and redrawn.max() <= 1
    assert redrawn[:5].sum(axis=1).min() > 0 and redrawn[5].sum() == 0
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (tmp_path / name).write_bytes((mnist_dir / name).read_bytes())
    (tmp_path / "SHA256SUMS").write_text("0" * 64 + "  t10k-labels-idx1-ubyte.gz\n")
    with pytest.raises(OodevalError, match="checksum mismatch"):
        load_mnist(tmp_path)


# --- optional open_clip prompt tuning, on a tiny stand-in for open_clip's text tower --------------


def test_prompt_encoder_splices_the_context_exactly():
    from oodeval.openworld.clip import PromptTextEncoder

    tower, tokenize = TinyTextTower().eval(), toy_tokenizer()
    names = [f"c{i}" for i in range(6)]
    enc = PromptTextEncoder(tower, tokenize, names, n_ctx=3)
    x_ctx = tower.token_embedding(tokenize(["X"])[0, 1]).detach().expand(3, -1)
    with torch.no_grad():
        got = enc(x_ctx, [4, 1])
        tokens = tokenize([f"X X X {names[i]}." for i in (4, 1)])
        ref = tower.ln_final(
            tower.transformer(tower.token_embedding(tokens) + tower.positional_embedding)
        )
        ref = ref[torch.arange(2), tokens.argmax(dim=1)] @ tower.text_projection
    torch.testing.assert_close(got, torch.nn.functional.normalize(ref, dim=1))
    assert all(not p.requires_grad for p in tower.parameters())


def test_clip_gmop_trains_only_the_prompt_contexts(tmp_path):
    from oodeval.openworld.clip import ClipGMoP, PromptTextEncoder, train_clip_gmop

    tower, tokenize = TinyTextTower(context=24), toy_tokenizer(24)
    frozen = {k: v.clone() for k, v in tower.state_dict().items()}
    fs = synthetic_features(n_classes=6, dim=6, n_per_class=6, seed=0)
    enc = PromptTextEncoder(tower, tokenize, [f"c{i}" for i in range(6)], n_ctx=2)
    start = ClipGMoP(enc, fs.text_features, fs.base_classes, n_partitions=2, logit_scale=10.0)
    model = train_clip_gmop(fs, enc, GMoPConfig(n_partitions=2, steps=8, lr=0.05))
    assert not torch.equal(model.g_ctx, start.g_ctx) and not torch.equal(model.r_ctx, start.r_ctx)
    for k, v in tower.state_dict().items():
        assert torch.equal(v, frozen[k]), k
    x, y = _unit(fs.subset(np.flatnonzero(np.isin(fs.labels, fs.base_classes))))
    with torch.no_grad():
        assert float(model.losses(x, y)["ce"]) < float(start.losses(x, y)["ce"])
    out = model.predict(fs.features)
    assert out["outputs"].shape == (36, 6)
    torch.save(model.prompt_state(), tmp_path / "prompts.pt")
    start.load_prompt_state(tmp_path / "prompts.pt")
    assert torch.equal(start.g_ctx, model.g_ctx)
    torch.save({"g_ctx": torch.zeros(1)}, tmp_path / "bad.pt")
    with pytest.raises(OodevalError, match="g_ctx"):
        start.load_prompt_state(tmp_path / "bad.pt")


def test_missing_open_clip_is_one_clear_error(monkeypatch):
    from oodeval.openworld.clip import load_open_clip

    # `import open_clip` fails from here on, whether the clip extra is installed or not
    monkeypatch.setitem(sys.modules, "open_clip", None)
    with pytest.raises(OodevalError, match=r"pip install 'oodeval\[clip\]'"):
        load_open_clip()


def test_a_non_npz_file_is_refused_without_suggesting_to_unpickle(data, tmp_path):
    # np.load falls back to pickle for unknown content; its message invites unsafe loading.
    csv_file = tmp_path / "predictions.csv"
    csv_file.write_text("label,prob_0\n0,1.0\n")
    npy_file = tmp_path / "one_array.npz"
    with open(npy_file, "wb") as fh:
        np.save(fh, np.zeros(3))  # a single .npy array under an .npz name
    for reader in (load_features, load_model):
        for path in (csv_file, npy_file):
            with pytest.raises(OodevalError, match="an .npz archive of plain arrays") as info:
                reader(path)
            assert "allow_pickle" not in str(info.value) and "pickle.load" not in str(info.value)


@pytest.mark.parametrize("batch_size", [0, -4])
def test_a_non_positive_batch_size_is_one_clear_error(data, batch_size):
    train, _ = data
    with pytest.raises(OodevalError, match="batch_size must be a positive integer"):
        train_gmop(train, GMoPConfig(steps=1, batch_size=batch_size))


def test_a_model_file_with_missing_arrays_is_one_clear_error(tmp_path):
    from oodeval.openworld.gmop import MODEL_FORMAT

    stub = {"format": np.asarray(MODEL_FORMAT)}
    np.savez(tmp_path / "stub.npz", **stub)
    with pytest.raises(OodevalError, match="missing array.*text_features"):
        load_model(tmp_path / "stub.npz")
    stub.update(
        kind=np.asarray("gmop"),
        text_features=np.eye(4),
        base_classes=np.array([0, 1]),
        logit_scale=np.asarray(10.0),
    )
    np.savez(tmp_path / "no_params.npz", **stub)
    with pytest.raises(OodevalError, match="param_r_bias"):
        load_model(tmp_path / "no_params.npz")
