"""GMoP as the OpenworldAUC paper describes it: lambda, the gates of Table 17, App. C.4's prompts.

- lambda (Sec. 6.3, App. D.10) weights the cross-entropy regulariser on the sub-detectors; the
  gated AUC ranking term has its own weight (1 in (OP_fin)). One Adam step of `train_gmop` is
  checked against the objective written out here from the paper's formulae.
- ``gate = "sigmoid" | "hard" | "none"`` (Table 17's three rows), against gates computed here.
- The CLIP path: a 4-token classifier prompt and 16-token detector prompts, and h's prompt
  ensemble, on a tiny text tower built for the test (open_clip is not needed).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oodeval.openworld.base_new import few_shot_indices
from oodeval.openworld.features import synthetic_features
from oodeval.openworld.gmop import GMoP, GMoPConfig, train_gmop
from tests.helpers.text_tower import TinyTextTower, toy_tokenizer

#: Table 17's rows: "Ours Sigmoid Gate", "Ours 0-1 Gate", "Ours w/o Gate".
GATES = ("sigmoid", "hard", "none")


@pytest.fixture(scope="module")
def train():
    fs = synthetic_features(n_classes=10, dim=16, n_per_class=30, overlap=0.5, seed=5)
    return fs.subset(few_shot_indices(fs.labels, fs.base_classes, 8, seed=0))


def _base_rows(train):
    keep = np.isin(train.labels, train.base_classes)
    x = F.normalize(torch.from_numpy(train.features[keep].astype(np.float32)), dim=1)
    return x, torch.from_numpy(train.labels[keep].astype(np.int64))


def _perturbed(train, gate="sigmoid", seed=1):
    model = GMoP(train.text_features, train.base_classes, logit_scale=20.0, gate=gate)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return model


def _gate_ref(logits, y_pos, gate):
    """The gate of Table 17's row `gate`, from the paper's text (sigmoid of the true class's
    softmax probability; the 0-1 selection v of Prop. 5.1; no gate)."""
    p_true = logits.softmax(dim=1)[torch.arange(len(y_pos)), y_pos]
    if gate == "sigmoid":
        return 1.0 / (1.0 + torch.exp(-p_true))
    if gate == "hard":
        return torch.tensor(
            [float(row.argmax() == t) for row, t in zip(logits, y_pos, strict=True)]
        )
    return torch.ones(len(y_pos))


def _objective_ref(model, x, y, lam, w_rank, gate):
    """(OP_fin) + lambda * l_ce, term by term: l_ce(g) + w_rank (1/K) sum_k R_k + lambda (1/K)
    sum_k l_ce(r_k), with R_k the explicit double sum over pseudo-base x pseudo-new pairs."""
    base = list(model.base_classes)
    pos = torch.tensor([base.index(int(c)) for c in y])
    ce_g = F.cross_entropy(model.base_logits(x), pos)
    ranks, det = [], []
    for k, part in enumerate(model.partitions):
        pb = torch.tensor([int(c) in part.pseudo_base for c in y])
        logits_k = model.detector_logits(x, k, base)
        det.append(F.cross_entropy(logits_k[pb], pos[pb]))
        cols = [base.index(c) for c in part.pseudo_base]
        r = logits_k.softmax(dim=1)[:, cols].max(dim=1).values
        yb = torch.tensor([list(part.pseudo_base).index(int(c)) for c in y[pb]])
        yn = torch.tensor([list(part.pseudo_new).index(int(c)) for c in y[~pb]])
        phi_b = _gate_ref(model.base_logits(x[pb], part.pseudo_base), yb, gate)
        phi_n = _gate_ref(model.zero_shot_logits(x[~pb], part.pseudo_new), yn, gate)
        total = x.new_zeros(())
        for i in range(int(pb.sum())):
            for j in range(int((~pb).sum())):
                total = total + phi_b[i] * (1 - (r[pb][i] - r[~pb][j])) ** 2 * phi_n[j]
        ranks.append(total / (int(pb.sum()) * int((~pb).sum())))
    return ce_g + w_rank * torch.stack(ranks).mean() + lam * torch.stack(det).mean()


# --- finding: lambda is the weight of the cross-entropy regulariser ------------------------------


@pytest.mark.parametrize(("lam", "w_rank", "gate"), [(0.5, 1.0, "sigmoid"), (0.0, 2.0, "hard")])
def test_one_training_step_follows_the_papers_objective_with_lambda_on_the_ce_term(
    train, lam, w_rank, gate
):
    config = GMoPConfig(ce_weight=lam, ranking_weight=w_rank, gate=gate, steps=1, lr=0.05)
    trained = train_gmop(train, config)
    ref = GMoP(train.text_features, train.base_classes, logit_scale=train.logit_scale, gate=gate)
    opt = torch.optim.Adam(ref.parameters(), lr=0.05, weight_decay=config.weight_decay)
    x, y = _base_rows(train)
    _objective_ref(ref, x, y, lam, w_rank, gate).backward()
    # Adam's first step is lr * g / (|g| + eps) per coordinate: float32 rounding of g (about
    # 1e-7 of the gradients' scale, whatever the CPU's kernels) moves it by far less than rtol,
    # unless a coordinate's |g| is near that rounding, where its sign could flip. The smallest
    # nonzero |g| here is about 3e-5, 300 times 1e-7; checked, so the margin cannot vanish.
    grads = torch.cat([p.grad.flatten() for p in ref.parameters() if p.grad is not None])
    assert grads[grads != 0].abs().min() > 1e-5
    opt.step()
    for (name, got), (_, want) in zip(
        trained.named_parameters(), ref.named_parameters(), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6, msg=name)


def test_lambda_alone_moves_the_detectors_and_the_ranking_weight_is_another_term(train):
    # Without the ranking term the sub-detectors learn only from the lambda-weighted l_ce(r_k).
    still = train_gmop(train, GMoPConfig(ce_weight=0.0, ranking_weight=0.0, steps=5))
    moved = train_gmop(train, GMoPConfig(ce_weight=1.0, ranking_weight=0.0, steps=5))
    assert not still.r_weight.detach().any() and not still.r_bias.detach().any()
    assert moved.r_weight.detach().any()
    ranked = train_gmop(train, GMoPConfig(ce_weight=0.0, ranking_weight=1.0, steps=5))
    assert not torch.equal(ranked.r_weight, moved.r_weight)


def test_the_old_keywords_still_work_with_a_future_warning_saying_what_changed():
    with pytest.warns(FutureWarning, match="auc_weight is now ranking_weight.*not the paper's"):
        old = GMoPConfig(auc_weight=0.25)
    assert old == GMoPConfig(ranking_weight=0.25) and old.ce_weight == 1.0
    with pytest.warns(FutureWarning, match="detector_weight is now ce_weight.*paper's lambda"):
        old = GMoPConfig(detector_weight=0.75)
    assert old == GMoPConfig(ce_weight=0.75)
    with pytest.warns(FutureWarning, match="ranking_weight"):
        assert GMoPConfig(ranking_weight=0.5).auc_weight == 0.5
    with pytest.warns(FutureWarning, match="ce_weight"):
        assert GMoPConfig(ce_weight=0.5).detector_weight == 0.5
    with pytest.warns(FutureWarning):
        assert replace(GMoPConfig(), auc_weight=0.0).ranking_weight == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn of nothing
        replace(GMoPConfig(ce_weight=0.5, ranking_weight=2.0), seed=3)


def test_the_printed_objective_uses_the_papers_symbols():
    from oodeval.openworld.gmop import GATES as ACCEPTED
    from oodeval.openworld.gmop import objective_text

    assert ACCEPTED == GATES
    text = objective_text(GMoPConfig(ce_weight=0.5, ranking_weight=2.0, gate="none"))
    assert text.startswith("L = l_ce(g) + 2 * (1/K) sum_k R_k + lambda * (1/K) sum_k l_ce(r_k)")
    assert "lambda = 0.5" in text and "K = 3" in text and "gate none: phi = 1" in text


# --- finding: Table 17's gates ------------------------------------------------------------------


@pytest.mark.parametrize("gate", ["sigmoid", "hard", "none"])
def test_each_gate_is_table_17s_row(train, gate):
    model = _perturbed(train, gate)
    x, y = _base_rows(train)
    part = model.partitions[0]
    is_pb = torch.isin(y, torch.tensor(part.pseudo_base))
    yb = torch.tensor([list(part.pseudo_base).index(int(c)) for c in y[is_pb]])
    yn = torch.tensor([list(part.pseudo_new).index(int(c)) for c in y[~is_pb]])
    with torch.no_grad():
        got_b = model.base_gate(x[is_pb], y[is_pb], part.pseudo_base)
        got_n = model.new_gate(x[~is_pb], y[~is_pb], part.pseudo_new)
        want_b = _gate_ref(model.base_logits(x[is_pb], part.pseudo_base), yb, gate)
        want_n = _gate_ref(model.zero_shot_logits(x[~is_pb], part.pseudo_new), yn, gate)
        auc = model.losses(x, y)["auc"]
        want = _objective_ref(model, x, y, 0.0, 1.0, gate) - model.losses(x, y)["ce"]
    torch.testing.assert_close(got_b, want_b.to(got_b.dtype))
    torch.testing.assert_close(got_n, want_n.to(got_n.dtype))
    torch.testing.assert_close(auc, want, rtol=1e-5, atol=1e-7)
    if gate == "hard":
        assert 0 < float(want_b.sum()) < len(want_b)  # the 0-1 gate really selects


def test_gradient_reaches_g_through_the_sigmoid_gate_only(train):
    x, y = _base_rows(train)
    for gate in GATES:
        model = _perturbed(train, gate)
        model.losses(x, y)["auc"].backward()
        reached = float(model.g_weight.grad.abs().max()) if model.g_weight.grad is not None else 0
        assert (reached > 0) == (gate == "sigmoid"), gate


def test_the_gate_changes_the_trained_detectors(train):
    models = {g: train_gmop(train, GMoPConfig(gate=g, steps=10)) for g in GATES}
    assert not torch.equal(models["sigmoid"].r_weight, models["none"].r_weight)
    assert not torch.equal(models["hard"].r_weight, models["none"].r_weight)
    # g's context learns from l_ce(g) and, with the sigmoid gate, from the ranking term.
    assert torch.equal(models["hard"].g_weight, models["none"].g_weight)


# --- the CLIP path: prompt lengths of App. C.4 and h's prompt ensemble --------------------------

APP_C4 = (
    "itap_of_a_{}. a_bad_photo_of_the_{}. a_origami_{}. a_photo_of_the_large_{}. "
    "a_{}_in_a_video_game. art_of_the_{}. a_photo_of_the_small_{}"
)


def _encoded(tower, tokens):
    with torch.no_grad():
        return F.normalize(tower.encode_text(tokens), dim=1)


def test_clip_prompts_default_to_4_classifier_and_16_detector_tokens():
    from oodeval.openworld.clip import ClipGMoP, PromptTextEncoder

    tower, tokenize = TinyTextTower(context=24).eval(), toy_tokenizer(24)
    names = [f"c{i}" for i in range(6)]
    fs = synthetic_features(n_classes=6, dim=6, n_per_class=4, seed=0)
    enc = PromptTextEncoder(tower, tokenize, names)
    model = ClipGMoP(enc, fs.text_features, fs.base_classes, n_partitions=3)
    assert tuple(model.g_ctx.shape) == (4, 8) and tuple(model.r_ctx.shape) == (3, 16, 8)
    # Sub-detector k's prompt is [SOS] + its 16 context vectors + "c{i} ." [EOS], exactly.
    x = F.normalize(torch.randn(5, 6, generator=torch.Generator().manual_seed(0)), dim=1)
    with torch.no_grad():
        got = model.detector_logits(x, 2, [1, 4])
        tokens = tokenize([" ".join(["X"] * 16) + f" {names[i]}." for i in (1, 4)])
        emb = tower.token_embedding(tokens).clone()
        emb[:, 1:17] = model.r_ctx[2]
        h = tower.ln_final(tower.transformer(emb + tower.positional_embedding))
        text = F.normalize(h[torch.arange(2), tokens.argmax(dim=1)] @ tower.text_projection, dim=1)
        torch.testing.assert_close(got, model.logit_scale * x @ text.T)
        g_tokens = tokenize([f"X X X X {names[i]}." for i in (0, 2)])
        emb = tower.token_embedding(g_tokens).clone()
        emb[:, 1:5] = model.g_ctx
        h = tower.ln_final(tower.transformer(emb + tower.positional_embedding))
        text = F.normalize(
            h[torch.arange(2), g_tokens.argmax(dim=1)] @ tower.text_projection, dim=1
        )
        torch.testing.assert_close(model.base_logits(x, [0, 2]), model.logit_scale * x @ text.T)
    same = ClipGMoP(enc, fs.text_features, fs.base_classes, detector_ctx=4)
    assert tuple(same.r_ctx.shape) == (3, 4, 8) and same.detector_encoder is enc


def test_clip_gmop_trains_with_its_own_prompt_lengths_and_gate():
    from oodeval.openworld.clip import PromptTextEncoder, train_clip_gmop

    tower, tokenize = TinyTextTower(context=24), toy_tokenizer(24)
    fs = synthetic_features(n_classes=6, dim=6, n_per_class=4, seed=0)
    enc = PromptTextEncoder(tower, tokenize, [f"c{i}" for i in range(6)], n_ctx=3)
    model = train_clip_gmop(fs, enc, GMoPConfig(steps=2, gate="hard"), detector_ctx=7)
    assert tuple(model.g_ctx.shape) == (3, 8) and tuple(model.r_ctx.shape) == (3, 7, 8)
    assert model.gate == "hard"


def test_the_default_h_is_app_c4s_prompt_ensemble():
    from oodeval.openworld.clip import DEFAULT_TEMPLATES

    quoted = [t.replace("_", " ") for t in APP_C4.split()]
    assert DEFAULT_TEMPLATES == tuple(t if t.endswith(".") else t + "." for t in quoted)


def test_ensemble_text_features_average_the_unit_features_of_each_template():
    from oodeval.openworld.clip import ensemble_text_features

    tower, tokenize = TinyTextTower(context=12).eval(), toy_tokenizer(12)
    names = ["cat", "dog", "owl"]
    templates = ["a photo of a {}.", "art of the {}.", "a {} in a video game."]
    got = ensemble_text_features(tower, tokenize, names, templates)
    units = [_encoded(tower, tokenize([t.format(n) for n in names])) for t in templates]
    torch.testing.assert_close(got, F.normalize(sum(units), dim=1))
    one = ensemble_text_features(tower, tokenize, names, templates[:1])
    torch.testing.assert_close(one, units[0])
    assert got.shape == (3, 6)


def test_extract_clip_features_runs_on_an_injected_encoder_with_the_ensemble():
    from PIL import Image

    from oodeval.openworld.clip import DEFAULT_TEMPLATES, ensemble_text_features
    from oodeval.openworld.clip import extract_clip_features as extract

    tower, tokenize = TinyTextTower(context=12, image_dim=12).eval(), toy_tokenizer(12)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (2, 2, 3), dtype=np.uint8)) for _ in range(4)]

    def preprocess(im):
        return torch.from_numpy(np.asarray(im, dtype=np.float32) / 255.0).flatten()

    names = ["cat", "dog", "owl", "bee"]
    loaded = (tower, preprocess, tokenize)
    fs = extract(images, [0, 1, 2, 3], names, base_classes=[0, 1], loaded=loaded)
    want = ensemble_text_features(tower, tokenize, names, DEFAULT_TEMPLATES).numpy()
    np.testing.assert_allclose(fs.text_features, want, rtol=1e-5, atol=1e-6)
    assert fs.features.shape == (4, 6) and fs.logit_scale == pytest.approx(100.0)
    single = extract(images, [0, 1, 2, 3], names, template="a photo of a {}.", loaded=loaded)
    want = _encoded(tower, tokenize([f"a photo of a {n}." for n in names])).numpy()
    np.testing.assert_allclose(single.text_features, want, rtol=1e-5, atol=1e-6)
    mine = extract(images, [0, 1, 2, 3], names, templates=["art of the {}."], loaded=loaded)
    want = _encoded(tower, tokenize([f"art of the {n}." for n in names])).numpy()
    np.testing.assert_allclose(mine.text_features, want, rtol=1e-5, atol=1e-6)
