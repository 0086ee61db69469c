"""``[trainer] pretrained = "PATH"`` in a study config: the path is relative to the config file
and stored absolute, the file is identified by its SHA-256 (``pretrained_sha256``), studies
compare weights by it, never by the path, and a changed file is refused before a unit trains."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from oodeval.algorithms.networks import ResNet18
from oodeval.errors import OodevalError
from oodeval.study import load_study
from oodeval.study.config import (
    ConfigError,
    config_changes,
    config_from_dict,
    load_config,
    validate_config,
)
from oodeval.study.worker import UnitTask, run_task, setup_worker
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.training import counted_file_reads

torch.set_num_threads(1)

CONFIG = """
name = "weights"
source = "digits"
model = "resnet18"
algorithms = ["ERM"]
seeds = [0]
steps = 1
measures = ["average"]
[[scenarios]]
family = "colored"
given = [0.1, 0.2]
n_per_given = 40
n_eval = 20
[trainer]
batch_size = 4
selection = "last"
holdout_fraction = 0.0
pretrained = "{path}"
"""


def write_weights(path: Path, seed: int = 0) -> str:
    """A torchvision-named resnet18 state_dict (model 0 of a fresh single `ResNet18`), saved;
    the file's SHA-256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    net = ResNet18(1, (3, 8, 8))
    torch.save({key: value[0].clone() for key, value in net.state_dict().items()}, path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_config(folder: Path, weights: str, name: str = "study.toml") -> Path:
    path = folder / name
    path.write_text(CONFIG.format(path=weights), encoding="utf-8")
    return path


def test_a_relative_path_is_the_config_files_and_the_digest_is_computed(tmp_path, monkeypatch):
    digest = write_weights(tmp_path / "project" / "w" / "resnet18.pth")
    monkeypatch.chdir(tmp_path)  # elsewhere: the path is relative to the config file
    config = load_config(write_config(tmp_path / "project", "w/resnet18.pth"))
    assert config.trainer["pretrained"] == str(tmp_path / "project" / "w" / "resnet18.pth")
    assert config.pretrained_sha256 == digest
    stored = json.loads(config.to_json())
    assert stored["pretrained_sha256"] == digest and config_from_dict(stored) == config
    # a config without weights stores no digest at all (older studies compare unchanged)
    plain = config.replace(trainer={"batch_size": 4})
    assert plain.pretrained_sha256 is None and "pretrained_sha256" not in plain.to_dict()
    validate_config(config)  # resnet18 loads the file


def test_the_digest_is_computed_not_written(tmp_path):
    write_weights(tmp_path / "w.pth")
    text = f'pretrained_sha256 = "{"0" * 64}"\n' + CONFIG.format(path="w.pth")
    (tmp_path / "c.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="pretrained_sha256 is computed from the"):
        load_config(tmp_path / "c.toml")


def test_studies_compare_weights_by_digest_never_by_path(tmp_path):
    digest = write_weights(tmp_path / "a" / "w.pth")
    shutil.copy(tmp_path / "a" / "w.pth", tmp_path / "b.pth")
    other = write_weights(tmp_path / "c" / "w.pth", seed=1)
    assert other != digest
    stored = load_config(write_config(tmp_path / "a", "w.pth"))
    moved = load_config(write_config(tmp_path, "b.pth", "moved.toml"))
    assert config_changes(stored, moved).compatible  # the same bytes at another path
    changed = config_changes(stored, load_config(write_config(tmp_path / "c", "w.pth")))
    assert [key for key, _, _ in changed.incompatible] == ["trainer.pretrained"]
    assert changed.incompatible[0][1:] == (f"sha256:{digest}", f"sha256:{other}")
    none = config_changes(
        stored,
        stored.replace(trainer={"batch_size": 4, "selection": "last", "holdout_fraction": 0.0}),
    )
    assert [key for key, _, _ in none.incompatible] == ["trainer.pretrained"]


def test_a_study_records_the_digest_and_refuses_to_grow_with_other_weights(tmp_path):
    digest = write_weights(tmp_path / "w.pth")
    config, out = write_config(tmp_path, "w.pth"), tmp_path / "out"
    argv = ["study", "run", str(config), "--out", str(out), "--workers", "1", "--no-progress",
            "--no-report"]  # fmt: skip
    code, stdout, stderr = invoke(argv)
    assert code == 0, stdout + stderr
    study = load_study(out)
    assert study.config["pretrained_sha256"] == digest
    assert study.units["versions"].map(lambda v: v["run:pretrained"]).tolist() == [digest]
    assert study.units["status"].tolist() == ["done"]
    write_weights(tmp_path / "w.pth", seed=1)  # other weights at the same path
    code, stdout, stderr = invoke(argv)
    assert_refused(code, stdout, stderr, argv)
    assert "trainer.pretrained" in stderr and "would not compare" in stderr


def test_a_changed_file_is_refused_when_a_unit_runs(tmp_path):
    write_weights(tmp_path / "w.pth")
    config = load_config(write_config(tmp_path, "w.pth"))
    setup_worker(config.to_json())
    write_weights(tmp_path / "w.pth", seed=1)  # changed after the study was made
    task = UnitTask(0, "colored", "colored", {}, "ERM", 0, {}, 1, "resnet18")
    record = run_task(task)
    assert record.status == "failed"
    assert f"pretrained weights {tmp_path / 'w.pth'} changed since the study was made" in (
        record.failure or ""
    )
    assert record.versions is not None and (
        record.versions["run:pretrained"] == config.pretrained_sha256
    )
    with pytest.raises(ConfigError, match="changed since the study was made"):
        validate_config(config)  # before anything trains, too


def test_a_non_resnet_model_is_refused_by_the_config(tmp_path):
    write_weights(tmp_path / "w.pth")
    config = load_config(write_config(tmp_path, "w.pth"))
    with pytest.raises(ConfigError, match=r"^\[trainer\] pretrained: pretrained weights are for "):
        validate_config(config.replace(model="mlp"))
    with pytest.raises(OodevalError, match="not 'mlp'"):
        from oodeval.study.trainer_backend import check_pretrained

        check_pretrained(str(tmp_path / "w.pth"), "mlp")


def _not_a_state_dict(path: Path) -> None:
    torch.save([torch.zeros(2)], path)


def _other_network(path: Path) -> None:
    torch.save({"conv1.weight": torch.zeros(64, 3, 7, 7)}, path)


def _not_torch(path: Path) -> None:
    path.write_bytes(b"weights")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (None, "[trainer] pretrained: cannot read"),
        (_not_a_state_dict, "are not a state dict"),
        (_other_network, "missing key 'bn1.weight'"),
        (_not_torch, "torch.load(weights_only=True) cannot read it"),
    ],
)
@pytest.mark.parametrize("command", ["estimate", "run"])
def test_a_bad_weights_file_is_refused_in_one_line_before_anything_trains(
    tmp_path, make, said, command
):
    path = tmp_path / "w.pth"
    if make is not None:
        make(path)
    config, out = write_config(tmp_path, "w.pth"), tmp_path / "out"
    argv = ["study", command, str(config)]
    if command == "run":  # estimate trains nothing of a refused config either
        argv += ["--out", str(out), "--no-progress"]
    code, stdout, stderr = invoke(argv)
    assert_refused(code, stdout, stderr, argv)
    assert said in stderr and not out.exists()


def test_a_file_changed_while_a_unit_trains_fails_the_unit(tmp_path, monkeypatch):
    from oodeval.study import trainer_backend

    write_weights(tmp_path / "w.pth")
    config = load_config(write_config(tmp_path, "w.pth"))
    setup_worker(config.to_json())
    real = trainer_backend.run_unit

    def edited_meanwhile(*args, **kwargs):
        write_weights(tmp_path / "w.pth", seed=2)  # after the unit's own check, before loading
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_backend, "run_unit", edited_meanwhile)
    task = UnitTask(0, "colored", "colored", {}, "ERM", 0, {}, 1, "resnet18")
    record = run_task(task)  # the trainer loads the bytes the unit's check read: the study's
    assert record.status == "done", record.failure
    assert record.versions is not None
    assert record.versions["run:pretrained"] == config.pretrained_sha256

    def reads_the_path_again(*args, pretrained, **kwargs):  # a backend reading the file itself
        write_weights(tmp_path / "w.pth", seed=3)
        return real(*args, pretrained=str(pretrained), **kwargs)

    monkeypatch.setattr(trainer_backend, "run_unit", reads_the_path_again)
    write_weights(tmp_path / "w.pth")  # the study's file back for the unit's check
    record = run_task(task)
    assert record.status == "failed" and "changed since the study was made: the unit loaded" in (
        record.failure or ""
    )


def test_a_unit_reads_its_weights_file_once(tmp_path, monkeypatch):
    """Checked before the unit, hashed and parsed for every ResNet of its N + 1 models, recorded
    as run:pretrained: all from one read of the file's bytes (`oodeval._digest.file_bytes`)."""
    path = tmp_path / "w.pth"
    digest = write_weights(path)
    config = load_config(write_config(tmp_path, "w.pth"))
    reads = counted_file_reads(monkeypatch)
    validate_config(config)  # the study's check of the file and of its keys: one read too
    assert reads == [str(path)]
    setup_worker(config.to_json())
    reads.clear()
    record = run_task(UnitTask(0, "colored", "colored", {}, "ERM", 0, {}, 1, "resnet18"))
    assert record.status == "done", record.failure
    assert record.versions is not None and record.versions["run:pretrained"] == digest
    assert reads == [str(path)]
    reads.clear()  # a changed file is still refused before the unit trains, from that one read
    write_weights(path, seed=1)
    record = run_task(UnitTask(0, "colored", "colored", {}, "ERM", 0, {}, 1, "resnet18"))
    assert record.status == "failed" and "changed since the study was made" in (
        record.failure or ""
    )
    assert reads == [str(path)]
