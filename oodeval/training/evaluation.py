"""Testing a unit's selected models: predicted labels, errors per environment, E_all's rows.

`predict_labels` predicts in large no-grad batches on the model's device; `full_model_rows` tests
the full model on every environment of E_all, once per (image, variant) when the scenario shares
its evaluation images (`Scenario.shared_evaluation`), else environment by environment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import torch

from oodeval.algorithms import Algorithm
from oodeval.environments.base import Environment, Scenario, SharedEvaluation
from oodeval.errors import OodevalError
from oodeval.training.data import on_device
from oodeval.training.results import FULL_FOLD, ResultRow

#: rows per forward pass when predictions do not depend on the batch (conv nets run faster on
#: smaller chunks that stay in cache; measured on CPU: mnist_cnn at 28x28 predicts 2x faster in
#: chunks of 32-128 than of 1024)
EVAL_CHUNK = {"mlp": 8192, "cnn": 1024, "mnist_cnn": 64}


def predict_labels(
    model: Algorithm, images: np.ndarray | torch.Tensor, *, context: int
) -> torch.Tensor:
    """Predicted classes (M, n) of every model held by `model`, in large no-grad batches.

    Batch-dependent algorithms (ARM, MTL) see chunks of `context` rows, the training batch size.
    The batches run on the model's device (numpy images are moved there once per process,
    `on_device`); the predictions come back on the CPU.
    """
    device = model.env_mask.device
    x = images.to(device) if isinstance(images, torch.Tensor) else on_device(images, device)
    chunk = context if model.batch_dependent else EVAL_CHUNK.get(model.model, 1024)
    model.eval()
    with torch.inference_mode():
        parts = [model.predict(x[i : i + chunk]).argmax(-1) for i in range(0, len(x), chunk)]
    if not parts:
        return torch.zeros(model.num_models, 0, dtype=torch.long)
    return torch.cat(parts, dim=1).cpu()


def environment_error(model: Algorithm, env: Environment, context: int) -> float:
    if len(env) == 0:
        raise OodevalError(f"environment {env.name!r} has no data to test on")
    pred = predict_labels(model, env.images, context=context)[0]
    return float((pred != torch.as_tensor(env.labels)).double().mean())


def full_model_rows(full: Algorithm, scenario: Scenario, context: int) -> list[ResultRow]:
    """The full model's `ResultRow` on every environment of E_all, in E_all order."""
    shared = scenario.shared_evaluation()
    if full.batch_dependent and type(full).per_image is Algorithm.per_image:
        shared = None  # every environment's batches differ: predicted one by one
    if shared is None:
        return [
            ResultRow(FULL_FOLD, env.name, environment_error(full, env, context), len(env))
            for env in scenario.evaluation()
        ]
    return _shared_rows(full, shared, context)


def _shared_rows(full: Algorithm, shared: SharedEvaluation, context: int) -> list[ResultRow]:
    """Errors on E_all from one prediction per (image, variant): environment j's prediction for
    image i is the one made on image i rendered in its variant ``variants[j][i]``."""
    labels = torch.as_tensor(shared.labels)
    n = len(labels)
    if n == 0:
        raise OodevalError("the evaluation environments have no data to test on")
    values = shared.values()
    rows = torch.arange(n)
    out = []
    if full.batch_dependent:  # with a per-image part: computed once per image and variant
        predict = _variant_predictor(full, shared, values, context)
        for name, variant in zip(shared.names, shared.variants, strict=True):
            wrong = predict(np.searchsorted(values, variant)) != labels
            out.append(ResultRow(FULL_FOLD, name, float(wrong.double().mean()), n))
        return out
    predicted = torch.stack(
        [predict_labels(full, shared.render(v), context=context)[0] for v in values]
    )
    wrong = predicted != labels  # (V, n): is image i misclassified in variant values[v]
    for name, variant in zip(shared.names, shared.variants, strict=True):
        which = torch.as_tensor(np.searchsorted(values, variant))
        out.append(ResultRow(FULL_FOLD, name, float(wrong[which, rows].double().mean()), n))
    return out


def _variant_predictor(
    full: Algorithm, shared: SharedEvaluation, values: list[int], context: int
) -> Callable[[np.ndarray], torch.Tensor]:
    """For a batch-dependent `full` model with a per-image part (`Algorithm.per_image`): a
    function of an environment's variant index per image (into `values`) that returns its
    predicted classes (n,), as `predict_labels` on the environment's images in chunks of
    `context`, with the per-image part of every (variant, image) computed once up front."""
    device = full.env_mask.device
    images = torch.stack([on_device(shared.render(v), device) for v in values])  # (V, n, ...)
    n = images.shape[1]
    full.eval()
    with torch.inference_mode():
        parts = torch.stack(
            [
                torch.cat(
                    # not None: `full` has a per-image part
                    [
                        cast(torch.Tensor, full.per_image(x[i : i + context]))
                        for i in range(0, n, context)
                    ],
                    1,
                )
                for x in images
            ]
        )  # (V, M, n, ...)
    rows = torch.arange(n, device=device)

    def predict(which: np.ndarray) -> torch.Tensor:
        index = torch.as_tensor(which, device=device)
        x = images[index, rows]
        part = parts[index, :, rows].transpose(0, 1)  # (M, n, ...)
        with torch.inference_mode():
            logits = [
                full.predict_from(x[i : i + context], part[:, i : i + context])
                for i in range(0, n, context)
            ]
        return torch.cat(logits, dim=1).argmax(-1)[0].cpu()

    return predict
