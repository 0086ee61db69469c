"""Image sources: digits, MNIST IDX (checksums, download), folder trees, CIFAR-10 batches."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from oodeval.environments import load_source
from oodeval.environments import mnist as mnist_module
from oodeval.environments.cifar import UnsafePickleError, load_cifar10, safe_load_batch
from oodeval.environments.mnist import download_mnist, load_mnist, read_idx
from oodeval.errors import OodevalError


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX encoding of a uint8 array written independently of the reader."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def write_mnist(folder: Path, images: np.ndarray, labels: np.ndarray, *, gz: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stem, arr in (("t10k-images-idx3-ubyte", images), ("t10k-labels-idx1-ubyte", labels)):
        data = idx_bytes(arr)
        if gz:
            (folder / (stem + ".gz")).write_bytes(gzip.compress(data))
        else:
            (folder / stem).write_bytes(data)


def test_digits_source_is_8x8_grayscale_in_unit_range():
    src = load_source("digits")
    assert src.images.shape == (1797, 1, 8, 8)
    assert src.images.dtype == np.float32 and src.labels.dtype == np.int64
    assert src.images.min() == 0.0 and src.images.max() == 1.0
    assert np.bincount(src.labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def test_real_mnist_test_set_matches_published_counts_and_pixel_mean(mnist_dir):
    src = load_source(f"mnist:{mnist_dir}")
    assert src.images.shape == (10000, 1, 28, 28)
    counts = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert np.bincount(src.labels).tolist() == counts
    assert abs(float(src.images.mean()) - 0.1325) < 5e-4
    assert abs(float(src.images.std()) - 0.3105) < 5e-4


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_idx_plain_and_gzip_round_trip(tmp_path, gz):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7).astype(np.uint8)
    write_mnist(tmp_path, images, labels, gz=gz)
    src = load_mnist(tmp_path)
    assert np.array_equal(src.labels, labels.astype(np.int64))
    assert np.array_equal(np.rint(src.images[:, 0] * 255).astype(np.uint8), images)


def test_mnist_checksum_mismatch_is_one_clear_error(tmp_path):
    rng = np.random.default_rng(2)
    write_mnist(tmp_path, rng.integers(0, 256, (3, 28, 28)), np.arange(3), gz=True)
    good = hashlib.sha256((tmp_path / "t10k-labels-idx1-ubyte.gz").read_bytes()).hexdigest()
    (tmp_path / "SHA256SUMS").write_text(
        f"{good}  t10k-labels-idx1-ubyte.gz\n{'0' * 64}  t10k-images-idx3-ubyte.gz\n"
    )
    with pytest.raises(OodevalError, match="checksum mismatch.*t10k-images") as info:
        load_mnist(tmp_path)
    assert "\n" not in str(info.value)
    (tmp_path / "SHA256SUMS").write_text(f"{good}  t10k-labels-idx1-ubyte.gz\n")
    assert len(load_mnist(tmp_path)) == 3


def test_shared_mnist_passes_its_own_checksums(mnist_dir):
    sums = mnist_module.read_checksums(mnist_dir / "SHA256SUMS")
    assert set(sums) == {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}
    for name, digest in sums.items():
        assert hashlib.sha256((mnist_dir / name).read_bytes()).hexdigest() == digest


def test_truncated_idx_file_is_rejected(tmp_path):
    data = idx_bytes(np.zeros((4, 28, 28), np.uint8))[:-10]
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(data)
    with pytest.raises(OodevalError, match="truncated"):
        read_idx(path)
    path.write_bytes(b"\x12\x34" + data[2:])
    with pytest.raises(OodevalError, match="not an IDX file"):
        read_idx(path)


def test_mnist_folder_without_files_or_with_half_a_split(tmp_path):
    with pytest.raises(OodevalError, match="no MNIST IDX files"):
        load_mnist(tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((1, 28, 28))))
    with pytest.raises(OodevalError, match="labels-idx1-ubyte is missing"):
        load_mnist(tmp_path)


class _FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_download_retries_then_verifies_checksum(tmp_path, monkeypatch):
    payload = gzip.compress(idx_bytes(np.arange(5, dtype=np.uint8)))
    calls = []

    def fake_urlopen(url, timeout):
        calls.append(url)
        if len(calls) == 1:
            raise urllib.error.URLError("temporary failure")
        return _FakeResponse(payload)

    sums = dict(mnist_module.KNOWN_SHA256)
    sums["t10k-labels-idx1-ubyte.gz"] = hashlib.sha256(payload).hexdigest()
    monkeypatch.setattr(mnist_module, "KNOWN_SHA256", sums)
    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    monkeypatch.setattr(mnist_module.time, "sleep", lambda s: None)
    monkeypatch.setattr(mnist_module, "FILES", {"t10k": ("t10k-labels-idx1-ubyte",)})
    download_mnist(tmp_path, splits=("t10k",), mirrors=("http://mirror.invalid/",))
    assert len(calls) == 2
    assert (tmp_path / "t10k-labels-idx1-ubyte.gz").read_bytes() == payload
    assert sums["t10k-labels-idx1-ubyte.gz"] in (tmp_path / "SHA256SUMS").read_text()


def test_download_offline_gives_clear_error_and_leaves_no_partial_file(tmp_path, monkeypatch):
    def offline(url, timeout):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setattr(mnist_module.time, "sleep", lambda s: None)
    with pytest.raises(OodevalError, match="could not download .*check the network"):
        download_mnist(tmp_path, splits=("t10k",), retries=2)
    assert not list(tmp_path.glob("*.gz")) and not list(tmp_path.glob("*.part"))


def test_download_rejects_wrong_checksum(tmp_path, monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: _FakeResponse(b"evil"))
    monkeypatch.setattr(mnist_module.time, "sleep", lambda s: None)
    with pytest.raises(OodevalError, match="checksum mismatch"):
        download_mnist(tmp_path, splits=("t10k",), retries=1, mirrors=("http://m.invalid/",))


def save_png(path: Path, rgb: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgb.astype(np.uint8)).save(path)


def test_class_folder_reads_resizes_and_labels_by_sorted_class(tmp_path):
    save_png(tmp_path / "dog" / "a.png", np.full((20, 30, 3), 200))
    save_png(tmp_path / "cat" / "b.png", np.full((40, 40, 3), 10))
    save_png(tmp_path / "cat" / "c.png", np.full((8, 8, 3), 100))
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    src = load_source(f"classfolder:{tmp_path}", size=16)
    assert src.class_names == ("cat", "dog")
    assert src.images.shape == (3, 3, 16, 16)
    assert src.labels.tolist() == [0, 0, 1]
    assert np.allclose(src.images[:, 0, 5, 5], [10 / 255, 100 / 255, 200 / 255], atol=1e-6)


def test_domain_folder_tree_gives_domains_and_class_union(tmp_path):
    for dom, classes in {"photo": ["dog", "cat"], "sketch": ["dog", "horse"]}.items():
        for cls in classes:
            save_png(tmp_path / dom / cls / "x.png", np.zeros((32, 32, 3)))
    src = load_source(f"folder:{tmp_path}", size=32)
    assert src.domain_names == ("photo", "sketch")
    assert src.class_names == ("cat", "dog", "horse")
    assert src.domains.tolist() == [0, 0, 1, 1]
    assert src.labels.tolist() == [0, 1, 1, 2]


def test_hidden_files_such_as_macos_companions_are_skipped(tmp_path):
    # Copies made on macOS leave "._name.jpg" files that are not images; the NICO++ split
    # listing (oodeval.protocols.scan_tree) skips them too, so both see the same images.
    for root in (tmp_path / "classes", tmp_path / "domains" / "photo"):
        save_png(root / "cat" / "x.png", np.zeros((8, 8, 3)))
        (root / "cat" / "._x.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    assert len(load_source(f"classfolder:{tmp_path / 'classes'}", size=8)) == 1
    assert len(load_source(f"folder:{tmp_path / 'domains'}", size=8)) == 1


def test_unreadable_image_names_the_file(tmp_path):
    save_png(tmp_path / "cat" / "ok.png", np.zeros((8, 8, 3)))
    (tmp_path / "cat" / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(OodevalError, match=r"cannot read image .*broken\.png"):
        load_source(f"classfolder:{tmp_path}")


def test_unknown_source_and_missing_folder_are_clear_errors(tmp_path):
    with pytest.raises(OodevalError, match="unknown image source 'imagenet'"):
        load_source("imagenet:/data")
    with pytest.raises(OodevalError, match="source folder not found"):
        load_source(f"mnist:{tmp_path / 'nope'}")
    with pytest.raises(OodevalError, match="needs a folder"):
        load_source("cifar10")


def write_cifar(folder: Path, protocol: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(protocol)
    data = rng.integers(0, 256, size=(4, 3072), dtype=np.uint8)
    labels = [3, 1, 4, 1]
    batch = {b"batch_label": b"testing batch 1 of 1", b"labels": labels, b"data": data}
    batch[b"filenames"] = [b"a.png", b"b.png", b"c.png", b"d.png"]
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=protocol))
    names = [n.encode() for n in ("plane", "car", "bird", "cat", "deer")]
    meta = {b"label_names": names, b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=protocol))
    return data, labels


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar10_batches_load_as_data(tmp_path, protocol):
    data, labels = write_cifar(tmp_path, protocol)
    src = load_cifar10(tmp_path)
    assert src.images.shape == (4, 3, 32, 32)
    assert src.labels.tolist() == labels
    assert src.class_names == ("plane", "car", "bird", "cat", "deer")
    expected = data.reshape(4, 3, 32, 32).astype(np.float32) / 255
    assert np.array_equal(src.images, expected)
    assert len(load_source(f"cifar10:{tmp_path}")) == 4


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": _Exploit(marker)}, protocol=2))
    with pytest.raises(UnsafePickleError, match="refusing to load .*system"):
        load_cifar10(tmp_path)
    assert not marker.exists()


def test_object_arrays_and_stray_globals_are_refused():
    with pytest.raises(UnsafePickleError, match="not a numeric type|objects"):
        safe_load_batch(pickle.dumps({b"data": np.array([1, "a"], dtype=object)}, protocol=2))
    with pytest.raises(UnsafePickleError, match="refusing to load builtins.eval"):
        safe_load_batch(b"cbuiltins\neval\n(S'1+1'\ntR.")
    with pytest.raises(OodevalError, match="not a readable CIFAR-10 batch"):
        safe_load_batch(b"\x80\x02garbage")


def python2_style_batch(data: bytes, label: int) -> bytes:
    """A batch as Python 2's cPickle wrote CIFAR-10 (byte strings, numpy.core globals), by hand."""
    assert len(data) == 3072
    return (
        b"\x80\x02}q\x00(U\x04dataq\x01cnumpy.core.multiarray\n_reconstruct\nq\x02"
        b"cnumpy\nndarray\nq\x03K\x00\x85U\x01b\x87Rq\x04(K\x01K\x01M\x00\x0c\x86"
        b"cnumpy\ndtype\nq\x05U\x02u1K\x00K\x01\x87Rq\x06(K\x03U\x01|NNNJ\xff\xff\xff\xff"
        b"J\xff\xff\xff\xffK\x00tb\x89T\x00\x0c\x00\x00" + data + b"tb"
        b"U\x06labelsq\x07]q\x08K" + bytes([label]) + b"au."
    )


def test_cifar10_batch_written_by_python2_loads(tmp_path):
    data = bytes(range(256)) * 12
    (tmp_path / "data_batch_1").write_bytes(python2_style_batch(data, 7))
    src = load_cifar10(tmp_path)
    assert src.labels.tolist() == [7] and src.class_names[7] == "horse"
    expected = np.frombuffer(data, np.uint8).reshape(1, 3, 32, 32).astype(np.float32) / 255
    assert np.array_equal(src.images, expected)
