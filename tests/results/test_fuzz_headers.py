"""Fuzzing the headers readers trust: ``.npy`` / ``.npz`` array headers, IDX headers (plain and
gzip), predictions whose class ids or ``prob_<j>`` columns are huge.

Shapes are drawn up to 2**40 per dimension (products far past 2**64), dtypes among plain,
object and bogus ones, payloads short, exact or long, header bytes garbled. Each example runs
with this process's address space capped at its size plus 1 GiB (`tests.helpers.memory.capped`),
so a reader that trusts a header and allocates fails with MemoryError. Every example ends in
success or one ``OodevalError`` line (CLI: one ``error:`` line, exit 2), never another exception.
"""

from __future__ import annotations

import gzip
import io
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from oodeval._npz import read_npz
from oodeval.environments.mnist import read_idx
from oodeval.errors import OodevalError
from oodeval.results.predictions import parse_class_ids
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import fuzz_settings
from tests.helpers.hostile import idx_header, npy_header
from tests.helpers.memory import capped

DIMENSION = st.one_of(
    st.integers(0, 8),
    st.integers(0, 2**40),
    st.sampled_from([2**31 - 1, 2**32 - 1, 2**16, 2**21]),
)
SHAPES = st.lists(DIMENSION, min_size=0, max_size=5).map(tuple)
DESCRS = st.sampled_from(["<f8", "<i8", "|u1", "<f4", "|b1", "|O", "<U10", "V8", "<x9", "<f8 "])


def _one_line_or_success(call) -> object:
    """`call()` under the memory cap: its value, or None after one OodevalError line."""
    with capped():
        try:
            return call()
        except OodevalError as exc:
            assert "\n" not in str(exc) and str(exc), repr(exc)
            return None


@st.composite
def npy_members(draw) -> bytes:
    """The bytes of one ``.npy`` member: a header (maybe garbled) and a payload (maybe short)."""
    shape, descr = draw(SHAPES), draw(DESCRS)
    header = npy_header(shape, descr)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(header) - 1))
        header = header[:at] + bytes([draw(st.integers(0, 255))]) + header[at + 1 :]
    claimed = int(np.prod(shape, dtype=object)) * 8 if shape else 8
    payload = draw(st.sampled_from([0, 1, 8, 64, min(claimed, 4096), min(claimed, 4096) + 3]))
    return header + bytes(payload)


@fuzz_settings(200)
@given(
    members=st.dictionaries(
        st.sampled_from(["probs", "labels", "scores"]), npy_members(), max_size=3
    ),
    compress=st.booleans(),
    single=st.booleans(),
)
@example(members={"probs": npy_header((8 << 40,)) + bytes(8)}, compress=True, single=False)
@example(members={"probs": npy_header((8 << 40,)) + bytes(8)}, compress=False, single=True)
def test_read_npz_trusts_no_header(members, compress, single):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.npz"
        if single and members:
            path.write_bytes(next(iter(members.values())))
        else:
            method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            with zipfile.ZipFile(path, "w", method) as archive:
                for name, data in members.items():
                    archive.writestr(f"{name}.npy", data)
        got = _one_line_or_success(lambda: read_npz(path, what="predictions file"))
        if got is not None:
            arrays, _ = got
            assert all(a.nbytes <= 1 << 20 for a in arrays.values())


@fuzz_settings(200)
@given(
    shape=SHAPES,
    kind=st.sampled_from([0x08, 0x08, 0x08, 0x0B, 0x00]),
    payload=st.sampled_from([0, 1, 16, 784, 4096]),
    extra=st.integers(0, 2),
    gz=st.booleans(),
)
@example(shape=(2**16,) * 4, kind=0x08, payload=0, extra=0, gz=False)  # int64 product wraps to 0
def test_read_idx_trusts_no_header(shape, kind, payload, extra, gz):
    shape = shape[:4] if all(d < 2**32 for d in shape) else tuple(d % 2**32 for d in shape[:4])
    data = bytearray(idx_header(shape) + bytes(payload + extra))
    data[2] = kind
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("x-idx-ubyte.gz" if gz else "x-idx-ubyte")
        path.write_bytes(gzip.compress(bytes(data)) if gz else bytes(data))
        got = _one_line_or_success(lambda: read_idx(path))
        if got is not None:
            assert got.shape == shape and got.size == payload + extra


CLASS_ID = st.one_of(st.integers(0, 5), st.integers(0, 10**13), st.sampled_from([2**31, 2**63 - 1]))


@fuzz_settings(120)
@given(
    labels=st.lists(CLASS_ID, min_size=2, max_size=6),
    columns=st.lists(CLASS_ID, min_size=1, max_size=4, unique=True),
    base=st.lists(CLASS_ID, min_size=1, max_size=3),
)
@example(labels=[0, 1], columns=[0, 10**9], base=[0])
def test_openworld_score_bounds_class_ids_and_prob_columns(labels, columns, base):
    header = ["label"] + [f"prob_{j}" for j in sorted(columns)]
    share = 1.0 / len(columns)
    rows = [",".join([str(y)] + [repr(share)] * len(columns)) for y in labels]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.csv"
        path.write_text("\n".join([",".join(header), *rows]) + "\n", encoding="utf-8")
        argv = ["openworld", "score", str(path), "--base-classes", ",".join(map(str, base))]
        with capped():
            code, out, err = invoke(argv)
        if code != 0:
            assert_refused(code, out, err, argv)


@fuzz_settings(120)
@given(
    ranges=st.lists(
        st.tuples(st.integers(0, 10**12), st.integers(0, 10**7 - 1)), min_size=1, max_size=30
    )
)
@example(ranges=[(k * 10**7, 10**7 - 1) for k in range(30)])
def test_parse_class_ids_counts_before_it_expands(ranges):
    text = ",".join(f"{first}-{first + span}" for first, span in ranges)
    got = _one_line_or_success(lambda: parse_class_ids(text))
    if got is not None:
        assert len(got) == sum(span + 1 for _, span in ranges) <= 10_000_000


def test_the_fuzzers_refuse_what_they_should(tmp_path):
    """The strategies reach the bounds: a 64 TiB member and a wrapped IDX are refused."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("probs.npy", npy_header((8 << 40,)) + bytes(8))
    (tmp_path / "p.npz").write_bytes(buffer.getvalue())
    assert _one_line_or_success(lambda: read_npz(tmp_path / "p.npz", what="file")) is None
    (tmp_path / "w-idx").write_bytes(idx_header((2**16,) * 4))
    assert _one_line_or_success(lambda: read_idx(tmp_path / "w-idx")) is None
