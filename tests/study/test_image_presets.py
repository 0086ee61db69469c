"""The image presets (``paper-images``, ``nico``, ``nico-resnet18``): their fields against values
written here from the papers and DomainBed, their one-line refusals without data, and a ResNet-18
study over the tiny stand-in folders of `tests.helpers.image_folders` that resumes and reports."""

from __future__ import annotations

import shutil

import pytest

from oodeval.errors import OodevalError
from oodeval.paper_grid import PAPER_ALGORITHMS
from oodeval.report.build import build_report
from oodeval.study import config_from_dict, load_study, preset, preset_names
from oodeval.study.config import ScenarioSpec, differing_keys, validate_config
from oodeval.study.presets import IMAGE_DATA, WEIGHTS_VARIABLES
from oodeval.study.runner import run_study
from tests.helpers.images import image_preset_data, write_domain_tree

IMAGE_PRESETS = ("paper-images", "nico", "nico-resnet18")
# the worst+gap paper's Table 2 ratios, Tables 3 and 4's Envs; NICO++ Section 4.2's two splits
RATIOS = ["3:2", "4:1", "5:0"]
PACS = ["1-1-1-1", "2-2-2-2", "1-0-1-1", "2-0-2-2"]
VLCS = ["1-1-1-1", "2-2-2-2"]
SPLITS = [
    ["grass", "water", "rock", "autumn", "indoor", "dim"],
    ["sand", "grass", "water", "rock", "indoor", "outdoor"],
]
NICO_ALGORITHMS = {"ERM", "IRM", "GroupDRO", "MLDG", "CORAL", "MMD", "SagNet", "RSC"}


@pytest.fixture
def no_data(monkeypatch):
    for spec in IMAGE_DATA.values():
        monkeypatch.delenv(spec.variable, raising=False)
    for variable in WEIGHTS_VARIABLES.values():
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return image_preset_data(tmp_path_factory.mktemp("image-data"))


def test_the_image_presets_are_listed_after_the_mnist_ones():
    assert preset_names() == ["quick", "paper-cpu", "paper", *IMAGE_PRESETS]


@pytest.mark.parametrize("name", IMAGE_PRESETS)
def test_a_preset_without_its_data_names_the_variable_to_set(name, no_data):
    with pytest.raises(OodevalError) as info:
        preset(name)
    message = str(info.value)
    assert "\n" not in message and "set OODEVAL_" in message
    assert "docs/howto/image-experiments.md" in message


def test_an_unknown_dataset_is_refused(no_data, data):
    with pytest.raises(OodevalError, match="no image dataset 'PACS'"):
        preset("paper-images", data={**data, "PACS": data["PACS-corrupted"]})


def test_an_mnist_preset_refuses_image_folders(data):
    with pytest.raises(OodevalError, match="preset quick reads MNIST, not image folders"):
        preset("quick", data=data)


def test_the_environment_variables_name_the_folders(no_data, data, monkeypatch):
    for dataset, folder in data.items():
        monkeypatch.setenv(IMAGE_DATA[dataset].variable, folder)
    assert preset("paper-images") == preset("paper-images", data=data)


def test_paper_images_is_the_papers_grid_under_domainbeds_image_protocol(no_data, data):
    cfg = preset("paper-images", data=data)
    assert (cfg.model, cfg.steps, cfg.seeds) == ("resnet50", 5001, (0, 1, 2))
    assert cfg.algorithms == PAPER_ALGORITHMS and len(cfg.algorithms) == 14
    # DomainBed's batch of 32 per environment (ARM: 8) is the trainer's default for the ResNets
    assert cfg.trainer == {"eval_every": 300, "augment": True}
    assert cfg.pretrained_sha256 is None and cfg.hparams == {}
    expected = [
        ("C-Cats&Dogs", "colored", {"ratio": r}, f"classfolder:{data['C-Cats&Dogs']}")
        for r in RATIOS
    ]
    cifar = f"cifar10:{data['L-CIFAR10']}"
    expected += [("L-CIFAR10", "lined", {"ratio": r}, cifar) for r in RATIOS]
    expected += [
        (d, "corrupted", {"pattern": p, "image_size": 224}, f"folder:{data[d]}")
        for d, patterns in (("PACS-corrupted", PACS), ("VLCS-corrupted", VLCS))
        for p in patterns
    ]
    got = [(s.dataset, s.family, s.params, s.source) for s in cfg.scenarios]
    assert got == expected
    assert all(s.source_identity and s.source_identity["digest"] for s in cfg.scenarios)
    assert cfg.source == "auto" and not cfg.reads_source()


@pytest.mark.parametrize(("name", "model"), [("nico", "resnet50"), ("nico-resnet18", "resnet18")])
def test_nico_is_the_classic_dg_setting_of_tables_2_and_5(no_data, data, name, model):
    cfg = preset(name, data=data)
    assert (cfg.name, cfg.model, cfg.steps, cfg.seeds) == (name, model, 5001, (0, 1, 2))
    assert set(cfg.algorithms) == NICO_ALGORITHMS
    assert [s.params for s in cfg.scenarios] == [
        {"given": split, "image_size": 224} for split in SPLITS
    ]
    assert {(s.family, s.dataset, s.source) for s in cfg.scenarios} == {
        ("domains", "NICO++", f"folder:{data['NICO++']}")
    }


def test_weights_named_by_the_variable_are_the_pretrained_file(
    no_data, data, tmp_path, monkeypatch
):
    weights = tmp_path / "resnet18.pth"
    weights.write_bytes(b"not read when the config is built, only hashed")
    monkeypatch.setenv("OODEVAL_RESNET18_WEIGHTS", str(weights))
    cfg = preset("nico-resnet18", data=data)
    assert cfg.trainer["pretrained"] == str(weights) and len(cfg.pretrained_sha256 or "") == 64
    assert "pretrained" not in preset("nico", data=data).trainer  # ResNet-50 weights not given


@pytest.mark.parametrize("name", IMAGE_PRESETS)
def test_each_image_preset_validates_on_the_stand_in_folders(no_data, data, name):
    validated = validate_config(preset(name, data=data))
    names = [s.name for s in validated.scenarios]
    datasets = [s.dataset for s in preset(name, data=data).scenarios]
    assert len(set(names)) == len(names)
    assert all(n.startswith(f"{d}/") for n, d in zip(names, datasets, strict=True))
    if name.startswith("nico"):
        assert names == [
            "NICO++/domains/given=autumn,dim,grass,indoor,rock,water",
            "NICO++/domains/given=grass,indoor,outdoor,rock,sand,water",
        ]
        assert [len(s.given) for s in validated.scenarios] == [6, 6]
    else:
        assert [len(s.given) for s in validated.scenarios] == [5] * 6 + [4, 8, 3, 6, 4, 8]


def test_a_scenario_dataset_leads_its_label_and_must_be_a_plain_name(data):
    spec = ScenarioSpec.from_dict({"family": "corrupted", "pattern": "1-1-1-1", "dataset": "P"})
    assert spec.label() == "P/corrupted[pattern=1-1-1-1]" and spec.to_dict()["dataset"] == "P"
    base = {"algorithms": ["ERM"], "seeds": [0], "steps": 1}
    for bad in ("", "a/b", 3):
        with pytest.raises(OodevalError, match=r"scenarios\[0\]\.dataset must be a name"):
            config_from_dict({**base, "scenarios": [{"family": "colored", "dataset": bad}]})
    with pytest.raises(OodevalError, match=r"scenarios\[0\]\.source must name its data"):
        config_from_dict({**base, "scenarios": [{"family": "colored", "source": "auto"}]})
    with pytest.raises(OodevalError, match=r"scenarios\[0\]: source folder not found"):
        config_from_dict({**base, "scenarios": [{"family": "colored", "source": "folder:/no"}]})


def _small_study(folder: str, algorithms: list[str]) -> dict:
    """A ResNet-18 study at 32 px over one PACS-like scenario: a few steps, DomainBed's
    augmentation, the image presets' scenario keys."""
    return {
        "name": "resnet18-cpu",
        "algorithms": algorithms,
        "seeds": [0],
        "steps": 3,
        "model": "resnet18",
        "scenarios": [
            {
                "family": "corrupted",
                "pattern": "1-1-1-1",
                "image_size": 32,
                "workers": 1,
                "progress": False,
                "dataset": "PACS-corrupted",
                "source": f"folder:{folder}",
            }
        ],
        "trainer": {"eval_every": 3, "batch_size": 4, "augment": True},
    }


def test_a_resnet18_image_study_runs_resumes_and_reports(tmp_path, monkeypatch):
    monkeypatch.setenv("OODEVAL_CACHE", str(tmp_path / "cache"))
    domains = ("art", "cartoon", "photo", "sketch")
    pacs = write_domain_tree(tmp_path / "pacs", domains, ("a", "b"), 6)
    out = tmp_path / "study"
    first = config_from_dict(_small_study(str(pacs), ["ERM"]))
    assert run_study(first, out, workers=1, progress=False).ran == 1
    grown = config_from_dict(_small_study(str(pacs), ["ERM", "CORAL"]))
    summary = run_study(grown, out, workers=1, progress=False)
    assert (summary.skipped, summary.ran) == (1, 1)
    study = load_study(out)
    units = study.units
    assert set(units["algorithm"]) == {"ERM", "CORAL"} and set(units["status"]) == {"done"}
    assert set(units["scenario"]) == {"PACS-corrupted/corrupted/pattern=1-1-1-1/severity=3"}
    page = build_report(out)
    assert "PACS-corrupted/corrupted/pattern=1-1-1-1/severity=3" in page
    assert "not pretrained" in page
    # the data moved: the same study; other data at the same path: refused
    shutil.move(pacs, tmp_path / "moved")
    moved = config_from_dict(_small_study(str(tmp_path / "moved"), ["ERM", "CORAL"]))
    assert differing_keys(grown, moved) == []
    again = run_study(moved, out, workers=1, progress=False)
    assert (again.skipped, again.ran) == (2, 0)
    write_domain_tree(pacs, domains, ("a", "b"), 6, seed=9)
    other = config_from_dict(_small_study(str(pacs), ["ERM", "CORAL"]))
    assert differing_keys(grown, other) == ["scenarios"]
    with pytest.raises(OodevalError, match="would not compare"):
        run_study(other, out, workers=1, progress=False)


def test_an_image_preset_estimates_on_the_stand_in_folders(no_data, data):
    """`study estimate --n-sample-steps 1` on nico-resnet18 shrunk for a CPU test (32 px, 2
    images per environment, 2 algorithms): every algorithm's step is timed and the whole grid
    projected from the preset's own 5001 steps and checkpoints."""
    from oodeval.study.estimate import estimate_steps

    cfg = preset("nico-resnet18", data=data)
    small = cfg.replace(
        algorithms=["ERM", "CORAL"],
        scenarios=[{**s.to_dict(), "image_size": 32} for s in cfg.scenarios],
        trainer={**cfg.trainer, "batch_size": 2},
    )
    estimate = estimate_steps(small, sample_steps=1, workers=1)
    assert estimate.failed == 0 and estimate.sample_steps == 1
    assert set(estimate.samples["algorithm"]) == {"ERM", "CORAL"}
    assert int(estimate.per_n["units_in_study"].sum()) == 2 * 2 * 3
    assert list(estimate.per_n["n_given"]) == [6]  # both NICO++ splits train on 6 domains


def test_a_backends_read_only_scenario_refuses_a_dataset_name_in_one_line():
    from types import SimpleNamespace

    from oodeval.study.config.backend import build

    class ReadOnly:
        name = "fixed"

        def __setattr__(self, key, value):
            raise AttributeError(key)

    backend = SimpleNamespace(build_scenario=lambda family, **kw: ReadOnly())
    cfg = config_from_dict({"algorithms": ["ERM"], "seeds": [0], "steps": 1, "scenarios": ["a"]})
    spec = ScenarioSpec("a", {}, dataset="D")
    with pytest.raises(OodevalError, match="cannot be renamed for dataset; drop dataset"):
        build(backend, cfg, spec)  # type: ignore[arg-type]
    assert build(backend, cfg, ScenarioSpec("a")).name == "fixed"


def test_a_study_never_writes_over_a_file_of_a_scenarios_data(tmp_path):
    from tests.helpers.cli import assert_refused, invoke

    tree = write_domain_tree(tmp_path / "pacs", ("art", "cartoon", "photo", "sketch"), ("a", "b"))
    (tree / "report.html").write_text("the user's own page")
    config = tmp_path / "study.toml"
    config.write_text(
        'algorithms = ["ERM"]\nseeds = [0]\nsteps = 1\nmodel = "resnet18"\n'
        f'[[scenarios]]\nfamily = "corrupted"\npattern = "1-1-1-1"\ndataset = "P"\n'
        f'source = "folder:{tree}"\n'
    )
    for argv in (
        ["study", "run", str(config), "--out", str(tree)],
        ["study", "estimate", str(config), "--output", str(tree / "report.html")],
    ):
        code, out, err = invoke(argv)
        assert_refused(code, out, err, argv)
        assert "inside the source of scenario P/corrupted[pattern=1-1-1-1]" in err
    assert (tree / "report.html").read_text() == "the user's own page"
    assert not (tree / "results.sqlite").exists()
