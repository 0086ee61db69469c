"""One safe reader for every .npz input (oodeval._npz) and the shared torch thread helper."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from oodeval._npz import read_npz
from oodeval._torch import single_threaded
from oodeval.errors import OodevalError
from oodeval.openworld.features import load_features
from oodeval.openworld.gmop import load_model
from oodeval.results.predictions import read_predictions
from oodeval.shift.specs import load_spec

READERS = {
    "feature file": load_features,
    "GMoP model file": load_model,
    "predictions file": read_predictions,
    "features file": lambda path: load_spec(f"npz:{path}"),
}


def _bad_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "bad.npz"
    if kind == "npy":  # a single array under an .npz name
        with open(path, "wb") as fh:
            np.save(fh, np.zeros((4, 3)))
    elif kind == "csv":  # np.load falls back to unpickling for unknown content
        path.write_text("features,labels\n0.1,0\n")
    elif kind == "pickle":
        path.write_bytes(pickle.dumps({"features": [1, 2]}))
    elif kind == "damaged":
        path.write_bytes(b"PK\x03\x04 not really a zip")
    else:  # an object array under every name a reader looks at
        obj = np.array([{"a": 1}, 2], dtype=object)
        np.savez(path, features=obj, labels=obj, probs=obj, format=obj, text_features=obj)
    return path


@pytest.mark.parametrize("kind", ["npy", "csv", "pickle", "damaged", "object"])
@pytest.mark.parametrize("what", sorted(READERS))
def test_every_reader_refuses_non_plain_npz_with_one_message(tmp_path, kind, what):
    path = _bad_file(tmp_path, kind)
    with pytest.raises(OodevalError) as info:
        READERS[what](path)
    message = str(info.value)
    assert message.startswith(f"cannot read {path} as a {what}: ")
    assert "save it as an .npz archive of plain arrays with " in message
    assert "pickle" not in message and "\n" not in message
    reason = {
        "npy": "single array (.npy)",
        "csv": "not a readable .npz archive",
        "pickle": "not a readable .npz archive",
        "damaged": "not a readable .npz archive",
        "object": "has object dtype, which is never loaded",
    }[kind]
    assert reason in message


def test_read_npz_reads_the_named_arrays_and_lists_all(tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, a=np.arange(3), b=np.ones(2), skipped=np.array([{"x": 1}], dtype=object))
    arrays, found = read_npz(path, what="test file", names=("a", "b", "absent"))
    assert found == ("a", "b", "skipped") and sorted(arrays) == ["a", "b"]
    np.testing.assert_array_equal(arrays["a"], np.arange(3))
    with pytest.raises(OodevalError, match="array 'skipped' has object dtype"):
        read_npz(path, what="test file")
    with pytest.raises(FileNotFoundError):
        read_npz(tmp_path / "missing.npz", what="test file")


def test_caller_specific_checks_still_apply(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, x=np.zeros(3))
    with pytest.raises(OodevalError, match="holds none of the expected arrays.*found x"):
        read_predictions(path)
    with pytest.raises(OodevalError, match="missing array\\(s\\) features, labels"):
        load_features(path)
    with pytest.raises(OodevalError, match="must hold arrays 'features'.*found x"):
        load_spec(f"npz:{path}")
    with pytest.raises(OodevalError, match="not an oodeval GMoP model"):
        load_model(path)


def test_single_threaded_restores_the_thread_count_even_after_an_error():
    import torch

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), single_threaded():
        assert torch.get_num_threads() == 1
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_one_thread_helper_serves_shift_and_openworld():
    from oodeval.openworld import features, gmop
    from oodeval.shift import concept, discrepancy

    for module in (concept, discrepancy, features, gmop):
        assert module.single_threaded is single_threaded
