"""`oodeval envs list | show | preview`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.images import write_domain_tree

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def test_list_names_every_family():
    result = runner.invoke(app, ["envs", "list"])
    assert result.exit_code == 0, result.output
    for family in ("sr-cmnist", "cmnist", "colored", "lined", "corrupted", "domains"):
        assert family in result.output
    assert "ratio='3:1'" in result.output


def test_show_defaults_to_real_mnist():
    """No --source: `auto`, real MNIST (10,000 test images here: ../shared or the bundled set),
    2,000 held out and 8,000 split over 10 given environments; never the 8x8 digits."""
    result = runner.invoke(app, ["envs", "show", "sr-cmnist", "--ratio", "4:1", "--scale", "2"])
    assert result.exit_code == 0, result.output
    assert "source=mnist:" in result.output and "source=digits" not in result.output
    given_lines = [line for line in result.output.splitlines() if line.startswith("  e=")]
    assert [line.split()[1] for line in given_lines] == ["800"] * 10


def test_show_prints_given_environments_counts_and_e_all():
    result = runner.invoke(
        app, ["envs", "show", "sr-cmnist", "--ratio", "4:1", "--scale", "2", "--source", "digits"]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "scenario: sr-cmnist/ratio=4:1/scale=2" in out
    assert "E_given (10 environments)" in out
    given_lines = [line for line in out.splitlines() if line.startswith("  e=")]
    assert len(given_lines) == 10
    # digits: 1797 images, 359 held out, 1438 in the given pool split over 10 environments
    assert all(line.split()[1] == "143" for line in given_lines)
    assert "E_all: 101 environments (e=0.00 ... e=1.00), 359 held-out images each" in out


def test_show_writes_to_output_file(tmp_path):
    target = tmp_path / "show.txt"
    result = runner.invoke(app, ["envs", "show", "cmnist", "--output", str(target)])
    assert result.exit_code == 0
    assert "e=0.90" in target.read_text()


def test_preview_writes_a_png_grid(tmp_path):
    out = tmp_path / "grid.png"
    result = runner.invoke(
        app, ["envs", "preview", "lined", "--out", str(out), "--per-env", "4", "--max-eval", "3"]
    )
    assert result.exit_code == 0, result.output
    from PIL import Image

    with Image.open(out) as img:
        assert img.format == "PNG"
        pixels = np.asarray(img.convert("RGB"))
    assert pixels.shape[0] > 200 and pixels.std() > 10


def test_bad_input_exits_2_with_one_line():
    cases = [
        ["envs", "show", "sr-cmnist", "--ratio", "4-1"],
        ["envs", "show", "sr-cmnist", "--scale", "0"],
        ["envs", "show", "imagenet-c"],
        ["envs", "show", "sr-cmnist", "--source", "mnist:/no/such/folder"],
        ["envs", "show", "sr-cmnist", "--pattern", "1-1-1-1"],
    ]
    for args in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith("error: ") and result.output.count("\n") == 1


def test_real_process_exits_2_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", "envs", "show", "sr-cmnist", "--ratio", "x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "malformed ratio 'x'" in proc.stderr


def test_show_corrupted_over_a_folder_tree_without_corrupting(tmp_path):
    from PIL import Image

    for dom in ("art", "cartoon", "photo", "sketch"):
        for cls in ("dog", "horse"):
            folder = tmp_path / "pacs" / dom / cls
            folder.mkdir(parents=True)
            for k in range(3):
                Image.fromarray(np.full((40, 40, 3), 30 * k, np.uint8)).save(folder / f"{k}.png")
    cache = tmp_path / "cache"
    args = ["envs", "show", "corrupted", "--source", f"folder:{tmp_path / 'pacs'}"]
    args += ["--image-size", "32", "--pattern", "1-0-1-1", "--cache-dir", str(cache)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "E_given (3 environments)" in result.output
    assert "E_all: 64 environments (art ... sketch/jpeg_compression)" in result.output
    assert not cache.exists()


def test_show_domains_over_a_folder_tree(tmp_path):
    root = write_domain_tree(tmp_path / "nico", ("autumn", "dim", "grass", "sand"), side=8)
    argv = ["envs", "show", "domains", "--source", f"folder:{root}", "--image-size", "8"]
    code, out, err = invoke([*argv, "--given", "grass", "--given", "dim", "-f", "json"])
    assert code == 0, err
    shown = json.loads(out)
    assert shown["scenario"] == "domains/given=dim,grass"
    assert shown["given"] == {"dim": 8, "grass": 8}
    assert shown["held_out_images"] == {"autumn": 10, "dim": 2, "grass": 2, "sand": 10}
    assert shown["input_shape"] == [3, 8, 8]
    code, out, err = invoke([*argv, "--given", "grass", "--given", "dim"])
    assert code == 0 and "E_all: 4 environments (autumn ... sand), 2/10 held-out images" in out
    bad = [*argv, "--given", "grass", "--given", "ice"]
    assert_refused(*invoke(bad), bad)
    assert "ice not in the source; available: autumn, dim, grass, sand" in invoke(bad)[2]
    no_domains = ["envs", "show", "domains", "--source", "digits", "--given", "a", "--given", "b"]
    assert_refused(*invoke(no_domains), no_domains)


def test_given_is_read_as_each_family_types_it():
    """--given names domains for `domains` and numbers for the spurious families: read as text,
    then converted to the family's own type, a bad number refused as a float option refuses it."""
    argv = ["envs", "show", "sr-cmnist", "--source", "digits", "--given", "0.1", "--given", ".9"]
    code, out, err = invoke([*argv, "-f", "json"])
    assert code == 0, err
    assert json.loads(out)["params"]["given"] == [0.1, 0.9]  # numbers, not texts
    assert json.loads(out)["all"][:2] == ["e=0.00", "e=0.01"]


@pytest.mark.parametrize("value", ["x", "-1", "1e20", "99999999999999999999", "nan", "inf"])
def test_a_bad_number_for_given_is_refused_in_one_line(value):
    argv = ["envs", "show", "sr-cmnist", "--source", "digits", "--given", value]
    code, out, err = invoke(argv)
    assert_refused(code, out, err, argv)
    if value == "x":
        assert "Invalid value for '--given': Input should be a valid number" in err
