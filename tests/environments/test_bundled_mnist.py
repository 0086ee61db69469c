"""The MNIST test set bundled with oodeval: its files, where ``source = "auto"`` finds it, and
what a study on it says about its data (1/7 of DomainBed's 70,000 images)."""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import oodeval
from oodeval.cli.main import app
from oodeval.environments import build_scenario, load_source
from oodeval.environments.mnist import (
    MNIST_ENV_VAR,
    bundled_mnist_dir,
    is_test_set_only,
    load_mnist,
    resolve_source,
)
from oodeval.environments.sources import source_identity
from oodeval.study import config_from_dict, preset, run_study
from oodeval.study.config import data_note, validate_config
from oodeval.study.runner import prepare_config
from tests.requires import MNIST_DIR

# Where the package keeps the files, written out here rather than asked of oodeval.
PACKAGE_DIR = (Path(oodeval.__file__).parent / "data" / "mnist").resolve()
# SHA-256 of the two gzip files (../shared/data/mnist/SHA256SUMS, copied by hand) and of their
# decompressed IDX content.
GZIP_SHA256 = {
    "t10k-images-idx3-ubyte.gz": "167310007f03058885c7e95e6c0b19c20de5c7fd3031f4cbdadc9014a523d80b",
    "t10k-labels-idx1-ubyte.gz": "fc607395669ec21321ea83e4b82c0544b7e8e63ff5b34337c06bc0a17cc0da3c",
}
IDX_SHA256 = {
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
# MNIST's test set per digit 0-9 (../shared/README.md)
CLASS_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
NOTE = "the data is MNIST's test set alone (10,000 images), 1/7 of the 70,000 (train + test)"


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX encoding of a uint8 array, written independently of oodeval's reader."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def mnist_folder(folder: Path, *, train: int = 0) -> Path:
    """A copy of the bundled test set, plus `train` made-up training images when > 0."""
    shutil.copytree(PACKAGE_DIR, folder)
    if train:
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, size=(train, 28, 28), dtype=np.uint8)
        (folder / "train-images-idx3-ubyte").write_bytes(idx_bytes(images))
        labels = np.arange(train) % 10
        (folder / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    return folder


# -- the files ----------------------------------------------------------------------------------
def test_bundled_files_are_the_shared_test_set_byte_for_byte():
    files = sorted(p.name for p in PACKAGE_DIR.iterdir())
    assert files == ["SHA256SUMS", *sorted(GZIP_SHA256)]
    for name, digest in GZIP_SHA256.items():
        data = (PACKAGE_DIR / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name
        assert hashlib.sha256(gzip.decompress(data)).hexdigest() == IDX_SHA256[name[:-3]], name
    listed = dict(
        reversed(line.split()) for line in (PACKAGE_DIR / "SHA256SUMS").read_text().splitlines()
    )
    assert listed == GZIP_SHA256
    if (MNIST_DIR / "SHA256SUMS").is_file():  # ../shared, where the copy came from
        assert (MNIST_DIR / "SHA256SUMS").read_bytes() == (PACKAGE_DIR / "SHA256SUMS").read_bytes()


def test_bundled_set_loads_as_mnists_ten_thousand_test_images():
    assert bundled_mnist_dir() == PACKAGE_DIR
    src = load_source(f"mnist:{bundled_mnist_dir()}")
    assert src.images.shape == (10_000, 1, 28, 28) and src.images.dtype == np.float32
    assert np.bincount(src.labels).tolist() == CLASS_COUNTS
    # pixel mean 0.1325 and std 0.3105 on [0, 1] (../shared/README.md, 4 decimals): in float64
    pixels = src.images.astype(np.float64)
    assert abs(pixels.mean() - 0.1325) < 5e-5 and abs(pixels.std() - 0.3105) < 5e-5


def test_a_missing_bundled_file_is_one_clear_error(tmp_path, monkeypatch):
    import importlib.resources

    site = tmp_path / "site"
    (site / "data" / "mnist").mkdir(parents=True)
    shutil.copy(PACKAGE_DIR / "t10k-images-idx3-ubyte.gz", site / "data" / "mnist")
    monkeypatch.setattr(importlib.resources, "files", lambda package: site)
    with pytest.raises(oodeval.OodevalError, match="bundled MNIST test set is missing") as info:
        bundled_mnist_dir()
    assert "\n" not in str(info.value) and "t10k-labels-idx1-ubyte.gz" in str(info.value)


# -- where "auto" looks ---------------------------------------------------------------------------
def test_auto_prefers_the_env_var_then_shared_then_the_bundled_set(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.delenv(MNIST_ENV_VAR, raising=False)
    assert resolve_source("auto", cwd=work) == f"mnist:{PACKAGE_DIR}"
    shared = mnist_folder(tmp_path / "shared" / "data" / "mnist")
    assert resolve_source("auto", cwd=work) == f"mnist:{shared.resolve()}"
    named = mnist_folder(tmp_path / "elsewhere")
    monkeypatch.setenv(MNIST_ENV_VAR, str(named))
    assert resolve_source("auto", cwd=work) == f"mnist:{named.resolve()}"
    # a variable naming a folder without MNIST is refused, never passed over: the user named it
    monkeypatch.setenv(MNIST_ENV_VAR, str(tmp_path / "empty"))
    with pytest.raises(oodeval.OodevalError, match=r"^OODEVAL_MNIST=\S*empty holds no t10k"):
        resolve_source("auto", cwd=work)
    monkeypatch.delenv(MNIST_ENV_VAR)
    assert resolve_source("auto", cwd=work) == f"mnist:{shared.resolve()}"
    shutil.rmtree(shared)
    assert resolve_source("auto", cwd=work) == f"mnist:{PACKAGE_DIR}"


def test_digits_only_when_asked(bare_install):
    config = prepare_config(config_from_dict({**QUICK_TINY, "source": "digits"}))
    assert config.source == "digits" and config.source_identity["kind"] == "digits"
    scenario = build_scenario("sr-cmnist", source="digits", ratio="3:1", scale=1)
    assert scenario.input_shape == (2, 8, 8) and data_note(config) is None
    assert len(validate_config(config).scenarios) == 1


# -- the presets on a bare install -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["quick", "paper-cpu", "paper"])
def test_every_preset_builds_from_the_bundled_set_on_a_bare_install(name, bare_install):
    config = prepare_config(preset(name))
    assert config.source == f"mnist:{PACKAGE_DIR}"
    validated = validate_config(config)  # was: "source digits has too few images" for quick
    assert len(validated.scenarios) == len(config.scenarios)
    assert all(built.params["source"] == config.source for built in validated.scenarios)
    assert data_note(config) is not None and data_note(config).startswith(NOTE)


def test_quick_gives_its_scenarios_the_sizes_it_asks_for(bare_install):
    config = prepare_config(preset("quick"))
    for spec in config.scenarios:
        sizes = build_scenario(spec.family, source=config.source, **spec.params).sizes()
        n_given = sum(int(p) for p in spec.params["ratio"].split(":"))  # Scale 1
        assert list(sizes["given"].values()) == [1000] * n_given, spec
        assert set(sizes["evaluation"].values()) == {1000} and len(sizes["evaluation"]) == 101


def test_all_seventy_thousand_with_the_train_files(tmp_path, monkeypatch):
    """OODEVAL_MNIST naming train + t10k: every image is read and the scenario pool holds all
    of them (made-up training images stand in for MNIST's 60,000, which are not here)."""
    full = mnist_folder(tmp_path / "full", train=600)
    monkeypatch.setenv(MNIST_ENV_VAR, str(full))
    source = resolve_source("auto", cwd=tmp_path)
    assert source == f"mnist:{full.resolve()}"
    assert len(load_mnist(full)) == 10_600  # train first, then t10k
    scenario = build_scenario("sr-cmnist", source=source, ratio="3:1", scale=1)
    given = sum(len(i) for i in scenario.given_indices)
    assert given + len(scenario.eval_indices) == 10_600  # the whole pool, nothing left over
    assert not is_test_set_only(source_identity(source).as_dict())
    paper = preset("paper")
    assert paper.source == source and data_note(paper) is None


# -- the data's identity: a study grown where ../shared exists ------------------------------------
QUICK_TINY = {
    "name": "quick-tiny",
    "source": "auto",
    "algorithms": ["ERM"],
    "seeds": [0],
    "steps": 4,
    "model": "mlp",
    "scenarios": [
        {"family": "sr-cmnist", "ratio": "3:1", "scale": 1, "n_per_given": 20, "n_eval": 20}
    ],
    "trainer": {"eval_every": 2, "batch_size": 8},
}


def test_a_study_on_the_bundled_set_grows_where_shared_has_the_same_files(tmp_path, monkeypatch):
    bare = tmp_path / "bare" / "work"
    bare.mkdir(parents=True)
    monkeypatch.delenv(MNIST_ENV_VAR, raising=False)
    monkeypatch.chdir(bare)
    out = tmp_path / "study"
    first = run_study(config_from_dict(QUICK_TINY), out, workers=1, progress=False)
    assert (first.ran, first.done) == (1, 1)
    assert first.data_note is not None and first.data_note.startswith(NOTE)
    # later, on a machine whose checkout has ../shared/data/mnist (the same bytes elsewhere)
    checkout = tmp_path / "machine" / "work"
    checkout.mkdir(parents=True)
    shared = mnist_folder(tmp_path / "machine" / "shared" / "data" / "mnist")
    monkeypatch.chdir(checkout)
    assert source_identity(f"mnist:{shared}") == source_identity(f"mnist:{PACKAGE_DIR}")
    grown = run_study(
        config_from_dict({**QUICK_TINY, "algorithms": ["ERM", "VREx"]}),
        out,
        workers=1,
        progress=False,
    )
    assert (grown.skipped, grown.ran, grown.done) == (1, 1, 1)
    assert grown.changes is not None and grown.changes.added_algorithms == ("VREx",)
    # other data (the train files too) is refused, naming the source
    monkeypatch.setenv(MNIST_ENV_VAR, str(mnist_folder(tmp_path / "full", train=100)))
    with pytest.raises(oodeval.OodevalError, match="source"):
        run_study(config_from_dict(QUICK_TINY), out, workers=1, progress=False)


# -- every output of a test-set-only study says so -------------------------------------------------
SYNTHETIC = """
name = "on-the-test-set"
backend = "oodeval.study.synthetic"
source = "{source}"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx"]
seeds = [0]
steps = 5
scenarios = [{{ family = "synthetic", ratio = "3:1", scale = 1 }}]
"""


def run_outputs(tmp_path: Path, source: str) -> dict[str, str]:
    """Run a synthetic study on `source` and collect what run, status, analyze and the report
    say (the note is decided by the data's identity alone, whatever the backend)."""
    config = tmp_path / f"{source.partition(':')[0]}.toml"
    config.write_text(SYNTHETIC.format(source=source), encoding="utf-8")
    out = tmp_path / f"out-{config.stem}"
    runner = CliRunner()
    outputs = {}
    for name, args in (
        ("run", ["study", "run", str(config), "--out", str(out), "--no-progress"]),
        ("status", ["study", "status", str(out)]),
        ("status-json", ["study", "status", str(out), "--format", "json"]),
        ("analyze", ["study", "analyze", str(out)]),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (name, result.output)
        outputs[name] = result.output
    outputs["analysis.md"] = (out / "analysis" / "analysis.md").read_text(encoding="utf-8")
    outputs["report.html"] = (out / "report.html").read_text(encoding="utf-8")
    return outputs


def test_run_status_analyze_and_report_say_test_set_only(bare_install, tmp_path):
    outputs = run_outputs(tmp_path, "auto")
    for name, text in outputs.items():
        flat = " ".join(text.replace("&#39;", "'").split())
        assert NOTE in flat, name
        assert f"set {MNIST_ENV_VAR} to a folder holding MNIST's four IDX files" in flat, name
    assert "note: " + NOTE in outputs["run"] and "note: " + NOTE in outputs["status"]
    assert outputs["analysis.md"].count(NOTE) == 1


def test_no_test_set_note_on_digits(bare_install, tmp_path):
    outputs = run_outputs(tmp_path, "digits")
    assert not any("test set alone" in text for text in outputs.values())
