"""Study configs: complete validation, data identified by content, and growing a stored study."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oodeval.environments.sources import SourceIdentity, load_source, source_identity
from oodeval.errors import OodevalError
from oodeval.study import config as config_module
from oodeval.study import config_from_dict, load_config, load_study, run_study, validate_config
from oodeval.study.config import (
    SEED_LIMIT,
    SHOWN_PROBLEMS,
    STEPS_LIMIT,
    TRAINER_OPTIONS,
    ConfigError,
    ScenarioSpec,
    StudyConfig,
    TrainerOption,
    config_changes,
    differing_keys,
    one_of,
    scenario_key,
)
from oodeval.study.store import ResultStore
from tests.helpers.mnist import fake_mnist

SYNTHETIC = {
    "name": "config-test",
    "backend": "oodeval.study.synthetic",
    "algorithms": ["ERM", "IRM"],
    "seeds": [0],
    "steps": 3,
    "scenarios": [{"family": "synthetic", "ratio": "3:1", "scale": 1}],
}


def problems_of(data: dict) -> tuple[str, ...]:
    """Every problem `config_from_dict` (and, when that passes, `validate_config`) finds."""
    try:
        validate_config(config_from_dict(data))
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return exc.problems
    return ()


# -- validation -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"steps": 0}, "steps must be >= 1, got 0"),
        ({"steps": STEPS_LIMIT + 1}, "steps must be <= 10_000_000, got 10000001"),
        ({"steps": 99999999999999999999}, "steps must be <= 10_000_000"),
        ({"steps": 2.0}, "steps must be an integer in [1, 10_000_000], got float 2.0"),
        ({"steps": True}, "steps must be an integer in [1, 10_000_000], got bool True"),
        ({"seeds": [-1]}, "seeds[0] must be >= 0, got -1"),
        ({"seeds": [0, SEED_LIMIT]}, "seeds[1] must be <= 4_294_967_295, got 4294967296"),
        ({"seeds": ["0"]}, "seeds[0] must be an integer in [0, 4_294_967_295], got str '0'"),
        ({"seeds": 0}, "seeds must be a list, got int 0"),
        ({"seeds": []}, "study config 'seeds' is empty; list at least one"),
        ({"seeds": [1, 1]}, "study config 'seeds' lists a value twice (1); remove the duplicate"),
        ({"data_seed": -3}, "data_seed must be >= 0, got -3"),
        ({"data_seed": "x"}, "data_seed must be an integer in [0, 4_294_967_295], got str 'x'"),
        ({"algorithms": ["ERM", 3]}, "algorithms[1] must be a non-empty string, got int 3"),
        ({"algorithms": "ERM"}, "algorithms must be a list, got str 'ERM'"),
        ({"algorithms": ["ERM", "Magic"]}, "unknown algorithm(s) Magic; available: ARM, CDANN, "),
        ({"model": "transformer"}, "unknown model 'transformer'; choose one of mlp, cnn"),
        ({"model": 3}, "model must be a non-empty string, got int 3"),
        ({"measures": ["medain"]}, "unknown measure(s) 'medain'; choose from average, "),
        ({"measures": ["average", "average"]}, "'measures' lists a value twice ('average')"),
        ({"hparams_mode": "grid"}, "hparams_mode must be one of default, random, got str 'grid'"),
        ({"hparams": {"ERM": {"lr": "fast"}}}, "hparams.ERM.lr must be float like its default"),
        ({"hparams": {"ERM": {"lr": float("nan")}}}, "hparams.ERM.lr must be a finite number"),
        ({"hparams": {"ERM": {"lr": float("inf")}}}, "hparams.ERM.lr must be a finite number"),
        ({"hparams": {"ERM": {"momentum": 0.9}}}, "ERM has no hyperparameter 'momentum'"),
        ({"hparams": {"ERM": 0.1}}, "hparams.ERM must be a table"),
        ({"hparams": {"DANN": {"lr": 0.1}}}, "[hparams.DANN] names an algorithm the study"),
        ({"hparams": []}, "hparams must be a table of tables"),
        ({"trainer": {"batch_size": "big"}}, "[trainer] batch_size must be an integer in [1, "),
        ({"trainer": {"batch_size": 0}}, "[trainer] batch_size must be >= 1, got 0"),
        ({"trainer": {"batch_size": 10**6}}, "[trainer] batch_size must be <= 65_536"),
        ({"trainer": {"eval_every": 0}}, "[trainer] eval_every must be >= 1, got 0"),
        ({"trainer": {"eval_every": 2.5}}, "[trainer] eval_every must be an integer in [1, "),
        ({"trainer": {"holdout_fraction": 2.0}}, "[trainer] holdout_fraction must be in (0, 1)"),
        ({"trainer": {"holdout_fraction": 0}}, "[trainer] holdout_fraction must be in (0, 1)"),
        ({"trainer": {"holdout_fraction": 1}}, "[trainer] holdout_fraction must be in (0, 1)"),
        ({"trainer": {"holdout_fraction": float("nan")}}, "holdout_fraction must be in (0, 1)"),
        ({"trainer": {"holdout_fraction": "x"}}, "holdout_fraction must be a number in (0, 1)"),
        ({"trainer": {"selection": "best"}}, "[trainer] selection must be one of training_do"),
        ({"trainer": {"selection": 1}}, "[trainer] selection must be one of training_domain"),
        ({"trainer": {"precision": "fp16"}}, "[trainer] precision must be one of fp32, bf16"),
        ({"trainer": {"precision": 16}}, "[trainer] precision must be one of fp32, bf16, got"),
        ({"trainer": {"device": "gpu"}}, "[trainer] device must be cpu, cuda, cuda:N or auto, got"),
        ({"trainer": {"speed": 1}}, "unknown [trainer] key(s) 'speed'; allowed: "),
        ({"trainer": "fast"}, "[trainer] must be a table, got str 'fast'"),
        ({"unit_options": {"seed": 1}}, "unit_options.seed is set by the study itself"),
        ({"unit_options": {"batch_size": 8}}, "unit_options.batch_size is a trainer setting"),
        ({"unit_options": 3}, "unit_options must be a table, got int 3"),
        ({"scenarios": [{"family": "nope"}]}, "unknown scenario family 'nope'"),
        ({"scenarios": [{"ratio": "3:1"}]}, "scenarios[0] must be a table with a 'family' str"),
        ({"scenarios": [{"family": "synthetic", "given": [0.1, 0.9]}]}, "has 2 given envir"),
        ({"scenarios": [{"family": "synthetic", "ratio": "x"}]}, "ratio must look like '3:1'"),
        ({"scenarios": [{"family": "synthetic", "size": 3}]}, "unexpected keyword argument"),
        ({"scenarios": [{"family": "synthetic", "scale": "2"}]}, "TypeError: '<' not support"),
        ({"source": "mnist:/no/such/folder"}, "source folder not found: /no/such/folder"),
        ({"source": "imagenet"}, "unknown image source 'imagenet'"),
        ({"source": ""}, "source must be a non-empty string"),
        ({"backend": "no.such.module"}, "backend: cannot import module 'no.such.module'"),
        ({"backend": "json"}, "backend 'json' lacks ['build_scenario', "),
        ({"imports": ["no_such_module_x"]}, "imports: cannot import module 'no_such_module_x'"),
        ({"name": ""}, "name must be a non-empty string, got str ''"),
        ({"algorithm": ["ERM"]}, "unknown study config key(s) 'algorithm'; allowed keys are"),
    ],
)
def test_each_bad_value_is_named_with_its_fix(changes, expected):
    problems = problems_of({**SYNTHETIC, **changes})
    assert len(problems) == 1, problems
    assert expected in problems[0]


@pytest.mark.parametrize("key", ["scenarios", "algorithms", "seeds", "steps"])
def test_a_missing_required_key_is_one_problem(key):
    data = {k: v for k, v in SYNTHETIC.items() if k != key}
    assert problems_of(data) == (f"study config is missing {key!r}; see examples/study.toml",)


def test_a_good_config_has_no_problems_and_keeps_its_values():
    cfg = config_from_dict(
        {
            **SYNTHETIC,
            "seeds": [0, SEED_LIMIT - 1],
            "steps": STEPS_LIMIT,
            "data_seed": SEED_LIMIT - 1,
            "trainer": {
                "selection": "last",
                "holdout_fraction": 0,  # allowed with selection = "last"
                "batch_size": 65_536,
                "eval_every": 1,
                "precision": "bf16",
            },
            "hparams": {"ERM": {"lr": 1}},
        }
    )
    validated = validate_config(cfg)
    assert validated.hparams[("ERM", 0)]["lr"] == 1.0
    assert cfg.trainer["holdout_fraction"] == 0 and cfg.steps == STEPS_LIMIT


def test_every_problem_is_listed_at_once_in_one_line():
    data = {
        **SYNTHETIC,
        "steps": 99999999999999999999,
        "model": "transformer",
        "trainer": {"batch_size": "big", "holdout_fraction": 2.0, "eval_every": 0},
    }
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    message = str(info.value)
    assert message.startswith("5 problems in the study config: (1) steps must be <= 10_000_000")
    assert "\n" not in message
    for expected in (
        "[trainer] eval_every must be >= 1",
        "[trainer] holdout_fraction must be in (0, 1)",
        "[trainer] batch_size must be an integer",
        # asked of the backend although the config already failed its own checks
        "(5) unknown model 'transformer'",
    ):
        assert expected in message
    assert len(info.value.problems) == 5


def test_a_long_list_is_capped_and_kept_whole_on_the_error():
    data = {**SYNTHETIC, "seeds": [-1, -2, -3, -4, -5, -6, -7, -8, -9]}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert len(info.value.problems) == 9
    message = str(info.value)
    assert message.startswith("9 problems in the study config: (1) seeds[0] must be >= 0")
    assert f"({SHOWN_PROBLEMS}) seeds[{SHOWN_PROBLEMS - 1}]" in message
    assert f"({SHOWN_PROBLEMS + 1})" not in message
    assert message.endswith(f" and {9 - SHOWN_PROBLEMS} more (fix these first)")
    # an OodevalError, pickled across processes intact
    assert isinstance(info.value, OodevalError)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.problems == info.value.problems and str(again) == message


def test_backend_problems_are_listed_together():
    problems = problems_of(
        {
            **SYNTHETIC,
            "algorithms": ["ERM", "Magic"],
            "model": "transformer",
            "scenarios": [
                {"family": "nope"},
                {"family": "synthetic", "given": [0.1, 0.9]},
                {"family": "synthetic", "ratio": "3:1", "scale": 1},
                {"family": "synthetic", "scale": 1},  # the same scenario by name
            ],
            "hparams": {"ERM": {"lr": "fast", "momentum": 1.0}},
        }
    )
    assert [p.split(" ")[0] for p in problems] == [
        "unknown",  # algorithm
        "unknown",  # model
        "hparams.ERM.lr",
        "hparams.ERM.momentum:",
        "scenario",  # family nope
        "scenario",  # two given environments
        "scenario",  # listed twice
    ]


def test_a_failed_import_skips_the_backends_algorithm_check():
    # the import may be what registers an algorithm: "unknown algorithm" would mislead
    problems = problems_of({**SYNTHETIC, "imports": ["no_such_module_x"], "steps": 0})
    assert len(problems) == 2 and "steps" in problems[0] and "imports" in problems[1]


def test_a_module_failing_at_import_is_a_problem_not_a_traceback(tmp_path, monkeypatch):
    (tmp_path / "broken_algorithms_x.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (problem,) = problems_of({**SYNTHETIC, "imports": ["broken_algorithms_x"]})
    assert problem == "imports: cannot import module 'broken_algorithms_x' (RuntimeError: boom)"


def test_nothing_is_written_for_a_bad_config(tmp_path):
    cfg = config_from_dict(SYNTHETIC)
    with pytest.raises(ConfigError):
        run_study(cfg.replace(algorithms=["ERM", "Magic"]), tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_a_new_trainer_key_is_one_table_entry(monkeypatch):
    speed = TrainerOption(one_of(("slow", "fast")), compared=lambda d: d.split(":")[0])
    monkeypatch.setitem(TRAINER_OPTIONS, "speed", speed)
    assert config_from_dict({**SYNTHETIC, "trainer": {"speed": "fast"}}).trainer == {
        "speed": "fast"
    }
    assert problems_of({**SYNTHETIC, "trainer": {"speed": "warp"}}) == (
        "[trainer] speed must be one of slow, fast, got str 'warp'",
    )
    base = StudyConfig("s", (ScenarioSpec("a"),), ("ERM",), (0,), 5, trainer={"speed": "fast:0"})
    same_kind = config_changes(base, {**base.to_dict(), "trainer": {"speed": "fast:1"}})
    assert same_kind.compatible
    other_kind = config_changes(base, {**base.to_dict(), "trainer": {"speed": "slow"}})
    assert other_kind.incompatible == (("trainer.speed", "fast:0", "slow"),)


def test_imagenet_normalize_is_a_checked_boolean_stored_only_when_off():
    assert config_from_dict({**SYNTHETIC, "trainer": {"imagenet_normalize": True}}).trainer == {}
    off = config_from_dict({**SYNTHETIC, "trainer": {"imagenet_normalize": False}})
    assert off.trainer == {"imagenet_normalize": False}
    assert config_from_dict(off.to_dict()) == off
    assert problems_of({**SYNTHETIC, "trainer": {"imagenet_normalize": "no"}}) == (
        "[trainer] imagenet_normalize must be true or false, got str 'no'",
    )
    # units normalised and units that were not never compare; an absent key is the default
    stored = study(trainer={"batch_size": 32, "imagenet_normalize": False})
    assert config_changes(stored, study()).incompatible == (
        ("trainer.imagenet_normalize", False, True),
    )
    named = study(trainer={"batch_size": 32, "imagenet_normalize": True})
    assert config_changes(study(), named).compatible


def test_the_default_precision_is_never_stored():
    assert config_from_dict({**SYNTHETIC, "trainer": {"precision": "fp32"}}).trainer == {}
    assert config_from_dict({**SYNTHETIC, "trainer": {"precision": "bf16"}}).trainer == {
        "precision": "bf16"
    }


def test_seed_limit_is_what_numpy_and_torch_seeding_accept():
    np.random.seed(SEED_LIMIT - 1)
    with pytest.raises(ValueError):
        np.random.seed(SEED_LIMIT)
    torch = pytest.importorskip("torch")
    torch.manual_seed(SEED_LIMIT - 1)
    torch.Generator().manual_seed(SEED_LIMIT - 1)


def test_the_largest_seed_runs(tmp_path):
    cfg = config_from_dict({**SYNTHETIC, "seeds": [SEED_LIMIT - 1], "data_seed": SEED_LIMIT - 1})
    summary = run_study(cfg, tmp_path, workers=1, progress=False)
    assert summary.done == 2


def test_names_copied_without_torch_agree_with_the_trainer():
    from oodeval.algorithms.networks import MODELS
    from oodeval.study import synthetic, trainer_backend
    from oodeval.training import CHECKPOINT_SELECTIONS

    assert list(config_module.CHECKPOINT_SELECTIONS) == list(CHECKPOINT_SELECTIONS)
    assert trainer_backend.available_models() == list(MODELS)
    assert config_module.available_models(trainer_backend) == list(MODELS)
    assert config_module.available_models(synthetic) == list(synthetic.MODELS)


def test_the_parser_gives_every_field_of_the_schema_and_accepts_only_those():
    from oodeval.study.config.parsing import parsed_fields
    from oodeval.study.config.schema import CONFIG_KEYS

    problems: list[str] = []
    values, bad = parsed_fields(SYNTHETIC, problems, CONFIG_KEYS)
    assert (problems, bad) == ([], set())
    assert set(values) == CONFIG_KEYS == {f.name for f in dataclasses.fields(StudyConfig)}
    assert problems_of({**SYNTHETIC, "colour": 1})[0].startswith(
        "unknown study config key(s) 'colour'; allowed keys are algorithms, backend, data_seed"
    )


def test_the_shipped_backends_define_every_function_of_the_backend_protocol():
    import inspect

    from oodeval.study import synthetic, trainer_backend
    from oodeval.study.config.backend import BACKEND_FUNCTIONS, TrainerBackend

    assert BACKEND_FUNCTIONS == (
        "build_scenario",
        "available",
        "default_hparams",
        "sample_hparams",
        "run_unit",
    )
    for module in (trainer_backend, synthetic):
        for name in BACKEND_FUNCTIONS:
            wanted = inspect.signature(getattr(TrainerBackend, name)).parameters
            found = inspect.signature(getattr(module, name)).parameters
            takes_any = any(p.kind is p.VAR_KEYWORD for p in found.values())
            named = [n for n, p in wanted.items() if n != "self" and p.kind is not p.VAR_KEYWORD]
            assert all(n in found or takes_any for n in named), (module.__name__, name)


def test_a_backend_without_available_models_does_not_check_the_model(tmp_path, monkeypatch):
    source = Path(config_module.__file__).parents[1] / "synthetic.py"
    text = source.read_text().replace("def available_models(", "def _no_models(")
    (tmp_path / "modelless_backend_x.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {**SYNTHETIC, "backend": "modelless_backend_x", "model": "anything"}
    assert problems_of(data) == ()
    assert problems_of({**SYNTHETIC, "model": "anything"}) == (
        "unknown model 'anything'; choose one of mlp, cnn",
    )


def test_real_backend_checks_models_and_families_through_the_backend():
    from oodeval.algorithms.networks import MODELS

    problems = problems_of(
        {
            "algorithms": ["ERM"],
            "seeds": [0],
            "steps": 2,
            "model": "transformer",
            "scenarios": [
                {"family": "sr-cmnist", "scale": "big"},
                {"family": "sr-cmnist", "nope": 1},
                {"family": "sr-cmnist", "eval_fraction": "x"},
            ],
        }
    )
    assert problems == (
        f"unknown model 'transformer'; choose one of {', '.join(MODELS)}",
        "scenario sr-cmnist[scale=big]: scale must be an integer >= 1, got 'big'",
        "scenario sr-cmnist[nope=1]: sr-cmnist has no parameter 'nope'; its parameters are: "
        "ratio, scale, size, eval_fraction, n_per_given, n_eval, given",
        "scenario sr-cmnist[eval_fraction=x]: ValueError: could not convert string to float: "
        "'x'; check its parameters",
    )


def test_toml_may_not_set_the_computed_identity(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'backend = "oodeval.study.synthetic"\nalgorithms = ["ERM"]\nseeds = [0]\nsteps = 1\n'
        'scenarios = ["synthetic"]\n[source_identity]\nkind = "digits"\ndigest = "sha256:0"\n'
    )
    with pytest.raises(ConfigError, match="source_identity is computed from the data"):
        load_config(path)


# -- data identity --------------------------------------------------------------------------
def manifest_digest(files: dict[str, bytes]) -> str:
    """The documented digest, computed independently: SHA-256 of sorted name/SHA-256 lines."""
    lines = "".join(
        f"{name}\0{hashlib.sha256(data).hexdigest()}\n" for name, data in sorted(files.items())
    )
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def test_mnist_identity_is_the_documented_digest_wherever_and_however_stored(tmp_path):
    files = fake_mnist(tmp_path / "a")
    fake_mnist(tmp_path / "b", gz=True)
    first = source_identity(f"mnist:{tmp_path / 'a'}")
    assert first == SourceIdentity("mnist", manifest_digest(files))
    assert first.hint == str((tmp_path / "a").resolve())
    moved = source_identity(f"mnist:{tmp_path / 'b'}")  # another path, gzip-compressed
    assert moved == first and moved.hint != first.hint
    fake_mnist(tmp_path / "c", seed=1)
    assert source_identity(f"mnist:{tmp_path / 'c'}") != first


def test_identity_follows_a_change_of_the_file_in_place(tmp_path):
    fake_mnist(tmp_path / "a")
    before = source_identity(f"mnist:{tmp_path / 'a'}")
    labels = tmp_path / "a" / "t10k-labels-idx1-ubyte"
    data = bytearray(labels.read_bytes())
    data[-1] = (data[-1] + 1) % 10
    labels.write_bytes(bytes(data))
    # same size: the modification time tells the cache; moved on explicitly, as two writes
    # within one clock tick of the file system may share a time stamp
    stat = labels.stat()
    os.utime(labels, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert source_identity(f"mnist:{tmp_path / 'a'}") != before


def test_real_mnist_identity(mnist_dir, tmp_path):
    ident = source_identity(f"mnist:{mnist_dir}")
    files = {
        p.name.removesuffix(".gz"): gzip.decompress(p.read_bytes())
        for p in sorted(mnist_dir.glob("*-ubyte.gz"))
    }
    assert ident.digest == manifest_digest(files)
    shutil.copytree(mnist_dir, tmp_path / "copy")
    assert source_identity(f"mnist:{tmp_path / 'copy'}") == ident


def test_digits_identity_is_the_bundled_file():
    import sklearn

    path = Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz"
    expected = manifest_digest({"digits.csv": gzip.decompress(path.read_bytes())})
    assert source_identity("digits") == SourceIdentity("digits", expected)
    assert source_identity(" digits ").hint == ""


def write_png(path: Path, value: int) -> bytes:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((4, 4, 3), value, dtype=np.uint8)).save(path)
    return path.read_bytes()


def test_folder_identity_covers_exactly_the_images_the_loader_reads(tmp_path):
    root = tmp_path / "pacs"
    files = {
        "art/dog/1.png": write_png(root / "art" / "dog" / "1.png", 10),
        "art/cat/2.png": write_png(root / "art" / "cat" / "2.png", 20),
        "photo/dog/3.png": write_png(root / "photo" / "dog" / "3.png", 30),
    }
    (root / "art" / "dog" / "._1.png").write_bytes(b"macOS junk")  # skipped by the loader too
    (root / "art" / "notes.txt").write_text("not an image")
    assert len(load_source(f"folder:{root}")) == 3
    ident = source_identity(f"folder:{root}")
    assert ident == SourceIdentity("folder", manifest_digest(files))
    shutil.copytree(root, tmp_path / "elsewhere")
    assert source_identity(f"folder:{tmp_path / 'elsewhere'}") == ident
    # a renamed class changes the labels: other data
    (root / "photo" / "dog").rename(root / "photo" / "wolf")
    assert source_identity(f"folder:{root}") != ident
    # a class folder is another kind of source
    assert source_identity(f"classfolder:{root / 'art'}").kind == "classfolder"


def test_cifar_identity_includes_the_class_names_file(tmp_path):
    root = tmp_path / "cifar"
    root.mkdir()
    batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}
    (root / "test_batch").write_bytes(pickle.dumps(batch))
    plain = source_identity(f"cifar10:{root}")
    (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"a", b"b"]}))
    named = source_identity(f"cifar10:{root}")
    assert plain != named and named.kind == "cifar10"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("imagenet", "unknown image source 'imagenet'"),
        ("mnist:", "source 'mnist' needs a folder"),
        ("digits:/x", "the digits source takes no folder"),
        ("folder:/no/such", "source folder not found"),
    ],
)
def test_identity_of_a_bad_spec_is_the_loaders_error(spec, message):
    with pytest.raises(OodevalError, match=message):
        source_identity(spec)
    with pytest.raises(OodevalError, match=message):
        load_source(spec)


def test_empty_mnist_folder_has_no_identity(tmp_path):
    with pytest.raises(OodevalError, match="no MNIST IDX files"):
        source_identity(f"mnist:{tmp_path}")


def test_config_carries_the_identity_and_recomputes_it_for_a_new_source(tmp_path):
    fake_mnist(tmp_path / "a")
    fake_mnist(tmp_path / "b", seed=1)
    cfg = config_from_dict({**SYNTHETIC, "source": f"mnist:{tmp_path / 'a'}"})
    assert cfg.source_identity == source_identity(f"mnist:{tmp_path / 'a'}").as_dict()
    assert config_from_dict(cfg.to_dict()) == cfg
    assert json.loads(cfg.to_json())["source_identity"]["kind"] == "mnist"
    other = cfg.replace(source=f"mnist:{tmp_path / 'b'}")
    assert other.source_identity == source_identity(f"mnist:{tmp_path / 'b'}").as_dict()
    assert cfg.replace(steps=4).source_identity == cfg.source_identity
    # a stored identity is trusted: the data need not be at the hint's path any more
    shutil.rmtree(tmp_path / "a")
    assert config_from_dict(cfg.to_dict()).source_identity == cfg.source_identity
    auto = config_from_dict({**SYNTHETIC, "source": "auto"})
    assert auto.source_identity is None


def test_a_stored_identity_must_fit_its_source():
    problems = problems_of(
        {**SYNTHETIC, "source": "digits", "source_identity": {"kind": "mnist", "digest": "x"}}
    )
    assert problems == ("source_identity names a 'mnist' source but source is 'digits'",)
    assert problems_of({**SYNTHETIC, "source_identity": {"kind": "digits"}})[0].startswith(
        "source_identity must be {kind, digest} strings"
    )


def test_differing_keys_compares_the_source_by_identity(tmp_path):
    fake_mnist(tmp_path / "a")
    fake_mnist(tmp_path / "b")  # the same data at another path
    here = config_from_dict({**SYNTHETIC, "source": f"mnist:{tmp_path / 'a'}"}).to_dict()
    there = config_from_dict({**SYNTHETIC, "source": f"mnist:{tmp_path / 'b'}"}).to_dict()
    assert here["source"] != there["source"] and differing_keys(here, there) == []
    changed = {**there, "source_identity": {"kind": "mnist", "digest": "sha256:other"}}
    assert differing_keys(here, changed) == ["source"]
    # a store written before identities existed is compared by path, as it was
    legacy = {k: v for k, v in here.items() if k != "source_identity"}
    assert differing_keys(legacy, here) == []
    assert differing_keys(legacy, there) == ["source"]
    assert differing_keys(here, {**here, "steps": 9, "seeds": [3]}) == ["seeds", "steps"]


def test_a_study_resumes_from_another_path_and_refuses_other_data_at_the_same_path(tmp_path):
    fake_mnist(tmp_path / "data-a")
    out = tmp_path / "study"
    first = config_from_dict({**SYNTHETIC, "source": f"mnist:{tmp_path / 'data-a'}"})
    assert run_study(first, out, workers=1, progress=False).ran == 2
    # the data moved (another machine, another checkout): the same study
    shutil.move(tmp_path / "data-a", tmp_path / "data-b")
    moved = config_from_dict({**SYNTHETIC, "source": f"mnist:{tmp_path / 'data-b'}"})
    summary = run_study(moved, out, workers=1, progress=False)
    assert (summary.skipped, summary.ran) == (2, 0)
    # other data at the original path: refused
    fake_mnist(tmp_path / "data-a", seed=5)
    other = config_from_dict({**SYNTHETIC, "source": f"mnist:{tmp_path / 'data-a'}"})
    with pytest.raises(OodevalError, match=r"would not compare with this config's: source \("):
        run_study(other, out, workers=1, progress=False)
    assert load_study(out).config["source"] == f"mnist:{tmp_path / 'data-a'}"  # the first hint


def test_auto_source_resumes_from_a_checkout_at_another_path(tmp_path, monkeypatch):
    monkeypatch.delenv("OODEVAL_MNIST", raising=False)
    for checkout in ("one", "two"):
        fake_mnist(tmp_path / checkout / "shared" / "data" / "mnist")
        (tmp_path / checkout / "main").mkdir()
    out = tmp_path / "study"
    monkeypatch.chdir(tmp_path / "one" / "main")
    run_study(config_from_dict({**SYNTHETIC, "source": "auto"}), out, workers=1, progress=False)
    stored = load_study(out).config
    assert stored["source"].startswith("mnist:") and stored["source"].endswith(
        "one/shared/data/mnist"
    )
    monkeypatch.chdir(tmp_path / "two" / "main")
    again = run_study(config_from_dict({**SYNTHETIC, "source": "auto"}), out, progress=False)
    assert (again.skipped, again.ran) == (2, 0)


def test_a_legacy_store_without_identity_still_resumes_at_its_path(tmp_path):
    fake_mnist(tmp_path / "data")
    cfg = config_from_dict({**SYNTHETIC, "source": f"mnist:{tmp_path / 'data'}"})
    legacy = {k: v for k, v in cfg.to_dict().items() if k != "source_identity"}
    with ResultStore(tmp_path / "s", create=True) as store:
        store.bind_config(legacy)
        fake_mnist(tmp_path / "other")
        moved = cfg.replace(source=f"mnist:{tmp_path / 'other'}")
        with pytest.raises(OodevalError, match=r"would not compare with this config's: source \("):
            store.bind_config(moved.to_dict())
        store.bind_config(cfg.to_dict())  # same path: accepted, and the identity recorded
        assert store.stored_config()["source_identity"] == cfg.source_identity
        store.bind_config(moved.to_dict())  # from now on the same data at another path resumes


# -- growing a study ------------------------------------------------------------------------
ALGOS = ("ERM", "IRM", "GroupDRO", "VREx", "MMD", "CORAL")
SPECS = tuple(
    {"family": "synthetic", "ratio": r, "scale": s} for r in ("3:1", "4:1") for s in (1, 2, 3)
)
IDENTITY = {"kind": "mnist", "digest": "sha256:aa"}


def study(**changes) -> StudyConfig:
    """A config built without validation (config_changes is pure: no backend, no data)."""
    base = {
        "name": "grow",
        "scenarios": tuple(ScenarioSpec("synthetic", {"ratio": "3:1", "scale": 1}) for _ in [0]),
        "algorithms": ("ERM", "IRM"),
        "seeds": (0, 1),
        "steps": 50,
        "source": "mnist:/data/a",
        "source_identity": IDENTITY,
        "hparams": {"IRM": {"irm_lambda": 10.0}},
        "trainer": {"batch_size": 32},
    }
    return StudyConfig(**{**base, **changes})


def subsets(pool, *, min_size=0):
    return st.lists(st.sampled_from(pool), unique=True, min_size=min_size)


@settings(max_examples=60, deadline=None)
@given(
    algorithms=subsets(ALGOS, min_size=1),
    seeds=subsets(range(6), min_size=1),
    specs=subsets(range(len(SPECS)), min_size=1),
    more_algorithms=subsets(ALGOS),
    more_seeds=subsets(range(6, 12)),
    more_specs=subsets(range(len(SPECS))),
    drop=st.booleans(),
)
def test_additions_and_removals_are_compatible(
    algorithms, seeds, specs, more_algorithms, more_seeds, more_specs, drop
):
    stored = study(algorithms=tuple(algorithms), seeds=tuple(seeds), hparams={}).to_dict()
    stored["scenarios"] = [SPECS[i] for i in specs]
    added_algorithms = [a for a in more_algorithms if a not in algorithms]
    added_specs = [SPECS[i] for i in more_specs if i not in specs]
    kept = algorithms[1:] if drop else algorithms
    new = {
        **stored,
        "name": "renamed",
        "measures": ["average"],
        "algorithms": kept + added_algorithms,
        "seeds": seeds + more_seeds,
        "scenarios": stored["scenarios"] + added_specs,
        "imports": ["my_algorithms"],
        "source": "mnist:/elsewhere",  # the same identity at another path
    }
    changes = config_changes(stored, new)
    assert changes.compatible and changes.incompatible == ()
    assert changes.added_algorithms == tuple(added_algorithms)
    assert changes.added_seeds == tuple(more_seeds)
    assert changes.added_scenarios == tuple(added_specs)
    assert changes.added_imports == ("my_algorithms",)
    assert changes.removed_algorithms == ((algorithms[0],) if drop else ())
    assert changes.grows  # an import at least
    assert config_changes(stored, stored) == type(changes)()


INCOMPATIBLE = [
    ({"steps": 51}, ("steps", 50, 51)),
    ({"model": "cnn"}, ("model", "mlp", "cnn")),
    ({"data_seed": 1}, ("data_seed", 0, 1)),
    ({"backend": "my.backend"}, ("backend", "oodeval.study.trainer_backend", "my.backend")),
    ({"unit_options": {"sleep": 1}}, ("unit_options", {}, {"sleep": 1})),
    (
        {"source_identity": {"kind": "mnist", "digest": "sha256:bb"}},
        ("source", IDENTITY, {"kind": "mnist", "digest": "sha256:bb"}),
    ),
    ({"trainer": {"batch_size": 64}}, ("trainer.batch_size", 32, 64)),
    ({"trainer": {}}, ("trainer.batch_size", 32, None)),
    ({"trainer": {"batch_size": 32, "precision": "bf16"}}, ("trainer.precision", "fp32", "bf16")),
    (
        {"hparams": {"IRM": {"irm_lambda": 1.0}}},
        ("hparams.IRM", {"irm_lambda": 10.0}, {"irm_lambda": 1.0}),
    ),
    ({"hparams": {}}, ("hparams.IRM", {"irm_lambda": 10.0}, {})),
    ({"hparams_mode": "random"}, ("hparams_mode", "default", "random")),
]


@pytest.mark.parametrize(("changes", "expected"), INCOMPATIBLE)
@pytest.mark.parametrize("grow", [False, True])
def test_changes_that_make_stored_units_incomparable_are_listed(changes, expected, grow):
    new = study(**changes)
    if grow:
        new = study(**changes, algorithms=("ERM", "IRM", "VREx"), seeds=(0, 1, 2))
    result = config_changes(study(), new)
    assert result.incompatible == (expected,)
    assert not result.compatible
    line = result.refusal("out")
    assert line.startswith(
        f"out holds a study whose units would not compare with this config's: {expected[0]} ("
    )
    assert line.endswith("keep these values, or use a new directory folder") and "\n" not in line


def test_hyperparameters_of_a_new_or_removed_algorithm_are_free():
    stored = study()
    grown = study(algorithms=("ERM", "VREx"), hparams={"VREx": {"vrex_lambda": 3.0}})
    changes = config_changes(stored, grown)
    assert changes.compatible
    assert (changes.added_algorithms, changes.removed_algorithms) == (("VREx",), ("IRM",))
    # no algorithm kept: the way hyperparameters are drawn concerns new units only
    assert config_changes(
        study(algorithms=("ERM",)), study(algorithms=("MMD",), hparams_mode="random")
    ).compatible


def test_a_reparametrised_scenario_is_told_apart_by_its_built_name():
    old_spec = {"family": "sr-cmnist", "ratio": "3:1", "scale": 1, "n_per_given": 500}
    new_spec = {"family": "sr-cmnist", "ratio": "3:1", "scale": 1, "n_per_given": 900}
    stored = {**study().to_dict(), "scenarios": [old_spec]}
    new = {**stored, "scenarios": [new_spec, {"family": "cmnist"}]}
    blind = config_changes(stored, new)
    assert blind.compatible and blind.removed_scenarios == (old_spec,)
    names = {
        scenario_key(old_spec): "sr-cmnist/ratio=3:1/scale=1",
        scenario_key(new_spec): "sr-cmnist/ratio=3:1/scale=1",
        scenario_key({"family": "cmnist"}): "cmnist",
    }
    told = config_changes(stored, new, scenario_names=names)
    assert told.incompatible == (("scenarios[sr-cmnist/ratio=3:1/scale=1]", old_spec, new_spec),)
    assert told.added_scenarios == ({"family": "cmnist"},) and told.removed_scenarios == ()


def test_an_unknown_key_of_a_newer_store_is_incompatible_when_it_differs():
    stored = {**study().to_dict(), "augment": True}
    assert config_changes(stored, study()).incompatible == (("augment", True, None),)
    assert config_changes(stored, {**study().to_dict(), "augment": True}).compatible


def test_a_key_missing_from_an_older_store_is_its_default():
    stored = study().to_dict()
    del stored["unit_options"], stored["measures"]
    assert config_changes(stored, study()).compatible
    assert differing_keys(stored, study()) == []


def test_a_long_refusal_is_capped():
    new = study(
        steps=1,
        model="cnn",
        data_seed=3,
        backend="b",
        unit_options={"x": 1},
        hparams_mode="random",
        trainer={"batch_size": 1},
    )
    changes = config_changes(study(), new)
    assert len(changes.incompatible) == 7
    assert changes.refusal("d").count(" -> ") == SHOWN_PROBLEMS
    assert f" and {7 - SHOWN_PROBLEMS} more;" in changes.refusal("d")
