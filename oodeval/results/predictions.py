"""Readers of users' open-world predictions files (.npz without pickle, or CSV) and the suite.

The accepted forms and their array/column names are documented in `oodeval.cli.openworld`.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from oodeval._npz import read_npz
from oodeval._text import STDIN, read_text, stream_bytes
from oodeval.errors import OodevalError, listing, option
from oodeval.limits import MAX_CLASS_IDS
from oodeval.measures._validation import (
    as_bool_array,
    as_real_array,
    check_same_length,
)
from oodeval.measures.openworld import (
    openworld_scored_samples,
    openworld_scores,
    openworld_summary,
)

# CSV column -> canonical (.npz) array name, for the per-sample vectors.
_CSV_COLUMNS = {
    "label": "labels",
    "score": "scores",
    "is_base": "is_base",
    "correct": "correct",
    "base_prediction": "base_predictions",
    "new_prediction": "new_predictions",
}
_NPZ_NAMES = (
    "probs",
    "logits",
    "labels",
    "base_classes",
    "scores",
    "base_predictions",
    "new_predictions",
    "is_base",
    "correct",
)
_MATRIX_COLUMN = re.compile(r"^(prob|logit)_(\d+)$")
_BOOL_NAMES = {"is_base", "correct"}
_MAX_RANGE = 10_000_000
_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False}


# --------------------------------------------------------------------------------------------
# reading predictions files
# --------------------------------------------------------------------------------------------


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    arrays, names = read_npz(
        path,
        what="predictions file",
        example="np.savez(path, probs=..., labels=...)",
        names=_NPZ_NAMES,
    )
    if not arrays:
        raise OodevalError(
            f"{path} holds none of the expected arrays ({', '.join(_NPZ_NAMES)}); found "
            f"{listing(names) or 'nothing'}"
        )
    return arrays


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    import pandas as pd

    try:
        text = read_text(path, what="predictions file", save_as="a UTF-8 CSV file")
        header = next(csv.reader(io.StringIO(text)), [])
        with warnings.catch_warnings():
            # a row with more fields than the header would otherwise shift into an index
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(io.StringIO(text), skipinitialspace=True, index_col=False)
    except pd.errors.EmptyDataError:
        raise OodevalError(
            f"{path} is empty; expected a header row and one row per sample"
        ) from None
    except (pd.errors.ParserError, pd.errors.ParserWarning, csv.Error) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OodevalError(f"{path} is not a readable CSV file: {first}") from None
    # pandas renames a repeated column to "name.1"; the raw header shows the repeat.
    header = [c.strip() for c in header]
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise OodevalError(f"{path}: column {repeated[0]!r} appears more than once")
    frame.columns = [str(c).strip() for c in frame.columns]
    if frame.empty:
        raise OodevalError(f"{path} has a header but no rows")

    arrays: dict[str, np.ndarray] = {}
    for column, name in _CSV_COLUMNS.items():
        if column in frame.columns:
            arrays[name] = _csv_column(frame[column], column, path, boolean=name in _BOOL_NAMES)
    matrix_columns: dict[str, dict[int, str]] = {"prob": {}, "logit": {}}
    for column in frame.columns:
        match = _MATRIX_COLUMN.match(column)
        if match:
            matrix_columns[match.group(1)][int(match.group(2))] = column
    if matrix_columns["prob"] and matrix_columns["logit"]:
        raise OodevalError(f"{path} has both prob_<j> and logit_<j> columns; keep one kind")
    for kind, columns in matrix_columns.items():
        if not columns:
            continue
        # the first gap found without building range(max + 1): prob_1000000000 is one column
        missing = next((j for j, c in enumerate(sorted(columns)) if j != c), None)
        if missing is not None:
            raise OodevalError(
                f"{path}: {kind}_<j> columns must run {kind}_0 .. {kind}_{max(columns)} without "
                f"gaps; missing {kind}_{missing}"
            )
        matrix = [_csv_column(frame[columns[j]], columns[j], path) for j in sorted(columns)]
        arrays[kind + "s"] = np.column_stack(matrix)
    if not arrays:
        raise OodevalError(
            f"{path} has none of the expected columns (label, score, is_base, correct, "
            f"base_prediction, new_prediction, prob_<j>, logit_<j>); found "
            f"{listing(frame.columns)}"
        )
    return arrays


def _csv_column(series: Any, column: str, path: Path, *, boolean: bool = False) -> np.ndarray:
    """Return one CSV column as a numeric (or bool) array, naming the first bad cell."""
    import pandas as pd

    textual = not (
        pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)
    )
    if boolean and textual:
        words = series.astype(str).str.strip().str.lower()
        bad = ~words.isin(list(_BOOL_WORDS))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise OodevalError(
                f"{path}: column {column!r} must be true/false or 1/0, row {row + 2} holds "
                f"{series.iloc[row]!r}"
            )
        return words.map(_BOOL_WORDS).to_numpy(dtype=bool)
    if textual:
        numeric = pd.to_numeric(series, errors="coerce")
        bad = numeric.isna() & series.notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise OodevalError(
                f"{path}: column {column!r} must hold numbers, row {row + 2} holds "
                f"{series.iloc[row]!r}"
            )
        series = numeric
    if series.isna().any():
        row = int(np.flatnonzero(series.isna().to_numpy())[0])
        raise OodevalError(f"{path}: column {column!r} has an empty or NaN cell in row {row + 2}")
    return series.to_numpy()


def read_predictions(path: Path) -> dict[str, np.ndarray]:
    """Read an .npz or CSV predictions file into arrays (see `oodeval openworld --help`); standard
    input (``-``) and pipes are read once, as CSV."""
    if path.is_dir():
        raise OodevalError(f"predictions file {path} is a folder; give an .npz or .csv file")
    if str(path) == STDIN or (
        path.exists() and stream_bytes(path, what="predictions file") is not None
    ):
        return _read_csv(path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _read_npz(path)
    if suffix == ".csv":
        return _read_csv(path)
    raise OodevalError(f"{path}: unsupported file type {suffix!r}; give an .npz or .csv file")


def parse_class_ids(text: str) -> list[int]:
    """Parse "0,1,2" or "0-4,7" (inclusive ranges) into class ids; at most `MAX_CLASS_IDS` ids
    in all, counted before any range is expanded.

    >>> parse_class_ids("0-2,7")
    [0, 1, 2, 7]
    """
    flag = option("base_classes")  # what messages call the text: --base-classes or the keyword
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"([0-9]+)\s*-\s*([0-9]+)", part)
        if match:
            first, last = int(match.group(1)), int(match.group(2))
            if last < first:
                raise OodevalError(f"{flag} range {part!r} runs backwards; write low-high")
            if last - first >= _MAX_RANGE:
                raise OodevalError(f"{flag} range {part!r} spans over {_MAX_RANGE} ids")
            if len(ids) + last - first + 1 > MAX_CLASS_IDS:
                raise OodevalError(
                    f"{flag} names more than {MAX_CLASS_IDS:,} class ids in all; "
                    "list the base classes of one model"
                )
            ids.extend(range(first, last + 1))
        elif re.fullmatch("[0-9]+", part):  # ASCII only: str.isdigit also takes '²'
            ids.append(int(part))
        else:
            raise OodevalError(f"{flag} must list class ids like 0,1,2 or 0-4, got {part!r}")
    return ids


# --------------------------------------------------------------------------------------------
# computing the suite
# --------------------------------------------------------------------------------------------


def score_predictions(
    arrays: dict[str, np.ndarray], base_classes: list[int] | np.ndarray | None, tie: float
) -> tuple[dict[str, float | int], tuple[np.ndarray, ...]]:
    """Return the metrics and the (base_scores, new_scores, base_correct, new_correct) samples.

    A file holds one of two forms: already scored (``scores``, ``is_base``, ``correct``) or model
    outputs (``labels`` with ``probs``/``logits``, or with detector scores and both predictions).
    """
    if "correct" in arrays:
        return _scored_form(arrays, tie)
    return _outputs_form(arrays, base_classes, tie)


def _scored_form(
    arrays: dict[str, np.ndarray], tie: float
) -> tuple[dict[str, float | int], tuple[np.ndarray, ...]]:
    """`score_predictions` on the already-scored form (``correct`` given)."""
    for extra in ("probs", "logits", "base_predictions", "new_predictions"):
        if extra in arrays:
            raise OodevalError(
                f"the file has both 'correct' (already-scored form) and {extra!r} (outputs "
                "form); keep the columns of one form"
            )
    missing = [name for name in ("scores", "is_base") if name not in arrays]
    if missing:
        raise OodevalError(
            f"already-scored form ('correct' given) also needs {' and '.join(missing)} "
            "(CSV columns score, is_base)"
        )
    scores = as_real_array(arrays["scores"], "scores", ndim=1)
    is_base = as_bool_array(arrays["is_base"], "is_base")
    correct = as_bool_array(arrays["correct"], "correct")
    check_same_length(scores=scores, is_base=is_base, correct=correct)
    if not is_base.any() or is_base.all():
        which = "base" if not is_base.any() else "new"
        raise OodevalError(
            f"no {which} samples: is_base must be true for some rows and false for others"
        )
    samples = (scores[is_base], scores[~is_base], correct[is_base], correct[~is_base])
    metrics: dict[str, float | int] = {
        "n_base": int(is_base.sum()),
        "n_new": int((~is_base).sum()),
        **openworld_summary(*samples, tie=tie),
    }
    return metrics, samples


def _outputs_form(
    arrays: dict[str, np.ndarray], base_classes: list[int] | np.ndarray | None, tie: float
) -> tuple[dict[str, float | int], tuple[np.ndarray, ...]]:
    """`score_predictions` on the model-outputs form (``labels`` and outputs or predictions)."""
    outputs_name = "probs" if "probs" in arrays else "logits" if "logits" in arrays else None
    if outputs_name is not None and "probs" in arrays and "logits" in arrays:
        raise OodevalError("the file has both 'probs' and 'logits'; keep one")
    if "labels" not in arrays:
        raise OodevalError(
            "missing 'labels' (CSV column label); or give the already-scored form with "
            "score, is_base, correct"
        )
    stored = arrays.get("base_classes")
    if base_classes is None:
        if stored is None:
            raise OodevalError(
                f"which classes are base? pass {option('base_classes')} (e.g. 0-49 or 0,1,2) or "
                "store a 'base_classes' array in the .npz"
            )
        base_classes = np.ravel(stored)  # validated by openworld_scores
    elif stored is not None and set(np.ravel(stored).tolist()) != set(base_classes):
        raise OodevalError(
            f"{option('base_classes')} differs from the 'base_classes' array stored in the file; "
            "drop one"
        )
    if outputs_name is None and not all(
        k in arrays for k in ("scores", "base_predictions", "new_predictions")
    ):
        raise OodevalError(
            "need model outputs ('probs' or 'logits'; CSV prob_<j> or logit_<j> columns) or all of "
            "scores, base_predictions, new_predictions (CSV score, base_prediction, new_prediction)"
        )
    kwargs: dict[str, Any] = {
        "logits": outputs_name == "logits",
        "detector_scores": arrays.get("scores"),
        "base_predictions": arrays.get("base_predictions"),
        "new_predictions": arrays.get("new_predictions"),
    }
    outputs = arrays.get(outputs_name) if outputs_name else None
    result = openworld_scores(outputs, arrays["labels"], base_classes, tie=tie, **kwargs)
    samples = openworld_scored_samples(outputs, arrays["labels"], base_classes, **kwargs)
    metrics: dict[str, float | int] = {
        "n_base": len(samples.base_scores),
        "n_new": len(samples.new_scores),
    }
    metrics.update({k: v for k, v in result.items() if not np.isnan(v)})
    return metrics, tuple(samples)
