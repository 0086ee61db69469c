"""Readers check what they are given before they allocate (`oodeval.limits`): device files,
endless or oversized streams, gzip bombs, array and IDX headers claiming more than the file
holds, class ids that would size an array. Every case runs in a child whose address space is
capped (`tests.helpers.memory.run_limited`, 3 GiB), so a reader that allocates without bound
fails its test instead of the machine; each refusal is one ``error:`` line, exit 2, no output.

Standard input and pipes are read once: ``-``, ``/dev/stdin`` and a named pipe work for
``measures``, ``openworld score`` and ``report``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.hostile import (
    SHAPE_64_TIB,
    gzip_bomb,
    idx_header,
    npy_header,
    npz_claiming,
)
from tests.helpers.memory import Limited, run_limited

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "examples" / "results.csv"
PREDICTIONS = ROOT / "examples" / "openworld_predictions.csv"
FOUR_GIB = 4 << 30


def assert_one_error(run: Limited, *needles: str) -> str:
    """The bad-input contract under the memory cap: exit 2, one ``error:`` line holding every
    needle, nothing else on stderr (no traceback), nothing on stdout."""
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.stderr.count("\n") == 1 and len(run.error_lines) == 1, run.stderr[-2000:]
    assert run.stdout == ""
    for needle in needles:
        assert needle in run.error_lines[0], run.error_lines[0]
    return run.error_lines[0]


def _idx_code(path: Path, call: str = "read_idx") -> str:
    """Python run in the limited child: read `path` through oodeval's API, an OodevalError
    printed as the CLI prints it."""
    return (
        "import sys\n"
        "from oodeval.errors import OodevalError\n"
        "from oodeval.environments.mnist import read_idx\n"
        "from oodeval.environments.sources import load_source, source_identity\n"
        f"try:\n    {call}({str(path)!r})\n"
        "except OodevalError as exc:\n    print('error:', exc, file=sys.stderr); sys.exit(2)\n"
    )


# --- text inputs: devices, streams, the size bound ------------------------------------------


def test_measures_refuses_dev_zero_unread():
    assert_one_error(run_limited(["measures", "/dev/zero"]), "/dev/zero", "device file", "- to")


def test_report_and_openworld_refuse_a_device_file(tmp_path):
    out = tmp_path / "r.html"
    assert_one_error(run_limited(["report", "/dev/zero", "--out", str(out)]), "device file")
    assert not out.exists()
    run = run_limited(["openworld", "score", "/dev/zero", "--base-classes", "0"])
    assert_one_error(run, "device file")


def test_an_endless_binary_stream_on_standard_input_stops_at_its_first_chunk():
    # standard input is /dev/zero itself: a reader that reads to the end never returns
    run = run_limited(["measures", "-"], stdin=Path("/dev/zero"))
    assert_one_error(run, "standard input", "not UTF-8", "NUL")


def test_a_stream_past_the_bound_is_refused_naming_it_and_the_fix():
    text = b"algorithm,environment,error,split\n" + b"a,e,0.5,loo\n" * 200_000  # 2.4 MB
    run = run_limited(["measures", "-"], stdin=text, env={"OODEVAL_MAX_TEXT_BYTES": "1000000"})
    assert_one_error(run, "standard input", "976.6 KiB", "OODEVAL_MAX_TEXT_BYTES")


def test_a_regular_file_past_the_bound_is_refused_before_it_is_read():
    run = run_limited(["measures", str(RESULTS)], env={"OODEVAL_MAX_TEXT_BYTES": "1000"})
    assert_one_error(run, str(RESULTS), "over the bound of 1000 bytes", "OODEVAL_MAX_TEXT_BYTES")


def test_a_bad_bound_in_the_environment_is_one_line():
    run = run_limited(["measures", str(RESULTS)], env={"OODEVAL_MAX_TEXT_BYTES": "lots"})
    assert_one_error(run, "OODEVAL_MAX_TEXT_BYTES must be a positive whole number")


def _answer(run: Limited) -> list[str]:
    """The measures table without its source line (which names the input)."""
    assert run.returncode == 0, run.stderr[-2000:]
    return [line for line in run.stdout.splitlines() if "algorithms," not in line]


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_measures_reads_a_piped_results_file_once(name):
    from_file = _answer(run_limited(["measures", str(RESULTS)]))
    piped = _answer(run_limited(["measures", name], stdin=RESULTS.read_bytes()))
    assert piped == from_file and len(piped) > 10


def test_measures_reads_json_lines_from_a_pipe(tmp_path):
    import csv

    rows = list(csv.DictReader(RESULTS.open(encoding="utf-8")))
    lines = "".join(
        "{" + ", ".join(f'"{k}": "{v}"' for k, v in row.items()) + "}\n" for row in rows
    )
    from_file = _answer(run_limited(["measures", str(RESULTS)]))
    assert _answer(run_limited(["measures", "-"], stdin=lines.encode())) == from_file


def test_measures_reads_a_named_pipe_once(tmp_path):
    fifo = tmp_path / "results.pipe"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as writer:  # blocks until the child opens the pipe
            writer.write(RESULTS.read_bytes())

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    # a reader that opens the pipe twice waits for a second writer that never comes
    run = run_limited(["measures", str(fifo)], timeout=120)
    writer.join()
    assert _answer(run) == _answer(run_limited(["measures", str(RESULTS)]))


def test_openworld_score_reads_standard_input():
    argv = ["openworld", "score", "--base-classes", "0-2"]
    from_file = run_limited([*argv[:2], str(PREDICTIONS), *argv[2:]])
    piped = run_limited([*argv[:2], "-", *argv[2:]], stdin=PREDICTIONS.read_bytes())
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == from_file.stdout and "openworld_auc" in piped.stdout


def test_report_reads_results_from_standard_input(tmp_path):
    out = tmp_path / "report.html"
    run = run_limited(["report", "-", "--out", str(out)], stdin=RESULTS.read_bytes())
    assert run.returncode == 0, run.stderr
    html = out.read_text(encoding="utf-8")
    assert "oodeval measures report" in html and "Results file standard input" in html


# --- gzip ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, Path]:
    """MNIST folders whose images file is a 4 GiB gzip bomb (about 4 MB on disk): zeros (a bad
    IDX header), a header claiming 4 GiB of images, a header claiming MNIST's 7.8 MB."""
    made = {}
    for name, head in {
        "zeros": b"",
        "claims-4gib": idx_header((65536, 256, 256)),
        "claims-mnist": idx_header((10000, 28, 28)),
    }.items():
        folder = tmp_path_factory.mktemp(name)
        gzip_bomb(folder / "t10k-images-idx3-ubyte.gz", FOUR_GIB, head=head)
        labels = idx_header((10000,)) + bytes(10000)
        gzip_bomb(folder / "t10k-labels-idx1-ubyte.gz", len(labels), head=labels)
        made[name] = folder
    return made


@pytest.mark.parametrize(
    ("bomb", "needle"),
    [
        ("zeros", "IDX type 0x00"),
        ("claims-4gib", "over the bound of 1 GiB on one IDX file"),
        ("claims-mnist", "holds more data bytes but its header says 7840000"),
    ],
)
def test_read_idx_checks_the_header_before_inflating_a_4_gib_bomb(bombs, bomb, needle):
    images = bombs[bomb] / "t10k-images-idx3-ubyte.gz"
    assert images.stat().st_size < 8 << 20  # ~4 MB on disk for 4 GiB inflated
    assert_one_error(run_limited(code=_idx_code(images)), str(images), needle)


def test_the_source_digest_stops_inflating_a_bomb_at_the_bound(bombs):
    code = _idx_code(f"mnist:{bombs['claims-mnist']}", call="source_identity")
    assert_one_error(run_limited(code=code), "inflates to more than 1 GiB", "replace it")


def test_envs_show_refuses_an_mnist_folder_holding_a_bomb(bombs):
    argv = ["envs", "show", "sr-cmnist", "--source", f"mnist:{bombs['zeros']}"]
    assert_one_error(run_limited(argv), "t10k-images-idx3-ubyte.gz")


# --- IDX and npz headers ---------------------------------------------------------------------


def test_idx_dimensions_whose_int64_product_wraps_are_refused(tmp_path):
    # 2**16 ** 4 = 2**64: an int64 product wraps to 0, which an empty payload would match
    path = tmp_path / "wrap-idx3-ubyte"
    path.write_bytes(idx_header((1 << 16,) * 4))
    line = assert_one_error(run_limited(code=_idx_code(path)), "18,446,744,073,709,551,616")
    assert "over the bound" in line


def test_an_npz_member_claiming_64_tib_is_refused_before_np_load(tmp_path):
    path = npz_claiming(tmp_path / "p.npz", {"probs": npy_header(SHAPE_64_TIB), "labels": b""})
    run = run_limited(["openworld", "score", str(path), "--base-classes", "0"])
    assert_one_error(run, str(path), "'probs'", "64 TiB", "8 GiB")


def test_an_npz_member_claiming_more_than_it_holds_is_refused(tmp_path):
    member = npy_header((1 << 20,)) + bytes(64)  # claims 8 MiB, holds 64 bytes
    path = npz_claiming(tmp_path / "p.npz", {"labels": member})
    run = run_limited(["openworld", "score", str(path), "--base-classes", "0"])
    assert_one_error(run, "'labels'", "claims 8 MiB but it holds 64 bytes")


def test_a_single_npy_claiming_64_tib_is_refused_unloaded(tmp_path):
    path = tmp_path / "p.npz"
    path.write_bytes(npy_header(SHAPE_64_TIB) + bytes(64))
    run = run_limited(["openworld", "score", str(path), "--base-classes", "0"])
    assert_one_error(run, "single array (.npy)")


def test_a_zip_member_declaring_more_than_deflate_can_give_is_refused(tmp_path):
    import zipfile

    path = npz_claiming(tmp_path / "p.npz", {"probs": npy_header((4,)) + bytes(32)})
    data = bytearray(path.read_bytes())
    info = zipfile.ZipFile(path).infolist()[0]
    # raise the declared inflated size in the central directory to 1 TiB (zip64 aside: 4 GiB-1)
    central = data.rindex(b"PK\x01\x02")
    data[central + 24 : central + 28] = (0xFFFFFFFE).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert info.compress_size < 100
    run = run_limited(["openworld", "score", str(path), "--base-classes", "0"])
    assert_one_error(run, "'probs'", "more than deflate can give")


# --- class ids -------------------------------------------------------------------------------


def test_a_column_prob_1000000000_is_refused_without_building_its_range(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("label,prob_0,prob_1000000000\n0,0.5,0.5\n1,0.5,0.5\n", encoding="utf-8")
    run = run_limited(["openworld", "score", str(path), "--base-classes", "0"])
    assert_one_error(run, "prob_0 .. prob_1000000000 without gaps", "missing prob_1")


def test_base_classes_naming_more_ids_than_the_bound_are_refused_unexpanded():
    ranges = ",".join(f"{k * 10_000_000}-{k * 10_000_000 + 9_999_999}" for k in range(50))
    argv = ["openworld", "score", str(PREDICTIONS), "--base-classes", ranges]
    assert_one_error(run_limited(argv), "more than 10,000,000 class ids")


def test_a_gmop_model_with_a_base_class_of_10_to_the_12_is_one_line(tmp_path):
    from oodeval.openworld.features import make_feature_set, save_features

    rng = np.random.default_rng(0)
    labels = np.arange(40) % 4
    save_features(tmp_path / "f.npz", make_feature_set(rng.normal(size=(40, 4)), labels, np.eye(4)))
    model = {
        "format": np.asarray("oodeval-gmop-1"),
        "kind": np.asarray("single_context"),
        "text_features": np.eye(4, dtype=np.float32),
        "base_classes": np.asarray([0, 10**12]),
        "logit_scale": np.asarray(100.0),
    }
    from oodeval.openworld.gmop import MODEL_FORMAT

    model["format"] = np.asarray(MODEL_FORMAT)
    np.savez(tmp_path / "m.npz", **model)
    argv = ["openworld", "evaluate", str(tmp_path / "f.npz"), "--model", str(tmp_path / "m.npz")]
    assert_one_error(run_limited(argv), "base classes must be ids 0..3")


def test_a_sweep_run_log_past_the_bound_is_skipped_with_a_warning(tmp_path):
    import shutil

    sweep = tmp_path / "sweep"
    shutil.copytree(ROOT / "examples" / "domainbed-sweep", sweep)
    big = sorted(sweep.glob("*/results.jsonl"))[0]
    big.write_bytes(big.read_bytes() + b"\n" * 20_000)  # blank lines: valid, but past the bound
    run = run_limited(["import", "domainbed", str(sweep)], env={"OODEVAL_MAX_TEXT_BYTES": "10000"})
    assert run.returncode == 0, run.stderr[-2000:]
    warned = [line for line in run.stderr.splitlines() if str(big) in line]
    assert warned and "not a regular file of at most 9.8 KiB" in warned[0]


def test_a_cifar_batch_past_its_bound_is_refused_unread(tmp_path):
    with open(tmp_path / "data_batch_1", "wb") as batch:
        batch.truncate(FOUR_GIB)  # sparse: 4 GiB long, nothing on disk
    code = _idx_code(f"cifar10:{tmp_path}", call="load_source")
    assert_one_error(run_limited(code=code), "data_batch_1", "over the 256 MiB bound")


def test_a_corruption_cache_file_claiming_64_tib_is_refused_unloaded(tmp_path):
    (tmp_path / "k.npy").write_bytes(npy_header(SHAPE_64_TIB) + bytes(64))
    code = (
        "import sys\nfrom oodeval.errors import OodevalError\n"
        "from oodeval.environments.corrupted import CorruptionCache\n"
        f"try:\n    CorruptionCache({str(tmp_path)!r}).load('k')\n"
        "except OodevalError as exc:\n    print('error:', exc, file=sys.stderr); sys.exit(2)\n"
    )
    assert_one_error(run_limited(code=code), "k.npy", "64 TiB", "delete it and rebuild")
