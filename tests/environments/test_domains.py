"""The domains family (NICO++'s classic DG setting, Sec. 4.2) on tiny synthetic folder trees."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oodeval.environments import build_scenario, load_source
from oodeval.environments.domains import NICO_TEST_DOMAINS, NICO_TRAIN_DOMAINS
from oodeval.errors import OodevalError
from oodeval.protocols import NICO_TRAIN_DOMAINS as PROTOCOL_TRAIN_DOMAINS
from oodeval.protocols.tree import NICO_COMMON_DOMAINS
from oodeval.study import config_from_dict, validate_config
from oodeval.study.config import ConfigError
from tests.helpers.images import write_domain_tree
from tests.requires import requires_module

DOMAINS = ("water", "autumn", "sand", "dim", "grass")  # written unsorted on purpose
PER_DOMAIN = 10  # 2 classes x 5 images


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_domain_tree(tmp_path_factory.mktemp("domains") / "tree", DOMAINS)


@pytest.fixture(scope="module")
def source(tree: Path):
    return load_source(f"folder:{tree}", size=12)


def rows_of(source, domain: str) -> set[int]:
    """The source rows of `domain`'s images, read from the source itself."""
    j = source.domain_names.index(domain)
    return set(np.flatnonzero(source.domains == j).tolist())


def test_names_params_and_shapes(tree: Path) -> None:
    sc = build_scenario("domains", source=f"folder:{tree}", given=["water", "grass", "dim"])
    assert sc.name == "domains/given=dim,grass,water"
    assert sc.given_names == ["dim", "grass", "water"]
    assert sc.all_names == ["autumn", "dim", "grass", "sand", "water"]
    assert sc.params == {"given": ["dim", "grass", "water"], "source": f"folder:{tree}"}
    assert sc.num_classes == 2 and sc.input_shape == (3, 64, 64)  # folder sources: 64 by default
    small = build_scenario("domains", source=f"folder:{tree}", given=["dim", "sand"], image_size=8)
    assert small.input_shape == (3, 8, 8) and next(small.evaluation()).images.shape[1:] == (3, 8, 8)


def test_the_name_is_the_split_whatever_order_or_spelling(source) -> None:
    ways = (["water", "grass"], ("grass", "water"), "grass+water", "water+grass")
    built = [build_scenario("domains", source=source, given=g) for g in ways]
    assert {sc.name for sc in built} == {"domains/given=grass,water"}
    first = [e.meta["indices"].tolist() for e in built[0].given()]
    assert all([e.meta["indices"].tolist() for e in sc.given()] == first for sc in built)
    other = build_scenario("domains", source=source, given=["grass", "sand"])
    assert other.name != built[0].name


def test_given_environments_exclude_their_held_out_images(source) -> None:
    sc = build_scenario("domains", source=source, given=["water", "grass", "dim"], seed=3)
    held = {e.name: e for e in sc.evaluation()}
    for env in sc.given():
        assert (env.meta["domain"], env.meta["domain_role"], env.meta["role"]) == (
            env.name,
            "given",
            "given",
        )
        trained = set(env.meta["indices"].tolist())
        kept = set(held[env.name].meta["indices"].tolist())
        assert not trained & kept
        assert trained | kept == rows_of(source, env.name)
        assert len(kept) == round(0.2 * PER_DOMAIN) and len(trained) == PER_DOMAIN - len(kept)
        assert np.array_equal(env.images, source.images[env.meta["indices"]])
        assert np.array_equal(env.labels, source.labels[env.meta["indices"]])
    assert sc.sizes() == {
        "given": {"dim": 8, "grass": 8, "water": 8},
        "evaluation": {"autumn": 10, "dim": 2, "grass": 2, "sand": 10, "water": 2},
    }


def test_target_domains_are_whole_in_e_all_and_never_trained_on(source) -> None:
    sc = build_scenario("domains", source=source, given=["water", "grass", "dim"])
    trained = set().union(*(set(e.meta["indices"].tolist()) for e in sc.given()))
    envs = {e.name: e for e in sc.evaluation()}
    assert list(envs) == sc.all_names
    for name in ("autumn", "sand"):
        env = envs[name]
        assert env.meta["domain_role"] == "target" and env.meta["role"] == "evaluation"
        assert set(env.meta["indices"].tolist()) == rows_of(source, name)
        assert not trained & rows_of(source, name)
        assert np.array_equal(env.images, source.images[env.meta["indices"]])
        assert np.array_equal(env.labels, source.labels[env.meta["indices"]])
    assert [envs[n].meta["domain_role"] for n in sc.given_names] == ["given"] * 3


def test_the_split_is_fixed_by_the_seed(source) -> None:
    def held_out(seed: int, eval_fraction: float = 0.2) -> list[list[int]]:
        sc = build_scenario(
            "domains", source=source, given=["dim", "grass"], seed=seed, eval_fraction=eval_fraction
        )
        return [e.meta["indices"].tolist() for e in sc.evaluation()]

    assert held_out(4) == held_out(4)
    assert len({str(held_out(s)) for s in range(6)}) > 1
    assert [len(rows) for rows in held_out(0, 0.5)] == [10, 5, 5, 10, 10]


def test_the_held_out_images_are_those_corrupted_holds_out(tree: Path, source) -> None:
    """One split helper: with the same seed, domains and corrupted hold out the same images."""
    requires_module("imagecorruptions")
    large = load_source(f"folder:{tree}", size=32)  # corrupted needs 32x32 images
    corrupted = build_scenario("corrupted", source=large, pattern="1-1-1-1-1", seed=2)
    sc = build_scenario("domains", source=source, given=list(DOMAINS), seed=2)
    assert [rows.tolist() for rows in corrupted.eval_indices] == [
        e.meta["indices"].tolist() for e in sc.evaluation()
    ]


def test_every_domain_given_leaves_e_all_the_held_out_parts(source) -> None:
    sc = build_scenario("domains", source=source, given=list(DOMAINS))
    assert sc.given_names == sc.all_names == sorted(DOMAINS)
    assert all(e.meta["domain_role"] == "given" for e in sc.evaluation())
    assert set(sc.sizes()["evaluation"].values()) == {2}


def test_the_default_is_nico_table_2_first_split(tmp_path: Path) -> None:
    assert NICO_TRAIN_DOMAINS is PROTOCOL_TRAIN_DOMAINS  # the protocols re-export the family's
    assert NICO_COMMON_DOMAINS == NICO_TRAIN_DOMAINS + NICO_TEST_DOMAINS
    root = write_domain_tree(tmp_path / "nico", NICO_COMMON_DOMAINS, ("cat",), per_class=3, side=4)
    sc = build_scenario("domains", source=f"folder:{root}", image_size=4)
    assert sc.name == "domains/given=autumn,dim,grass,indoor,rock,water"
    assert sc.given_names == sorted(NICO_TRAIN_DOMAINS)
    roles = {e.name: e.meta["domain_role"] for e in sc.evaluation()}
    assert sorted(n for n, r in roles.items() if r == "target") == sorted(NICO_TEST_DOMAINS)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["water", "rock", "ice"], r"^given domain\(s\) rock, ice not in the source; available: "),
        (["water"], r"given names 1 domain\(s\) but leave-one-environment-out needs at least 2"),
        ([], r"given names 0 domain\(s\)"),
        ("water", r"given names 1 domain\(s\)"),
        (["water", "dim", "water"], r"given domains repeat a name: water$"),
        (3, r"given must be a list of domain names, e\.g\. \['grass', 'water'\], got int 3$"),
        (["water", 3], r"given must be a list of domain names"),
        (
            NICO_TRAIN_DOMAINS,
            r"lacks rock, indoor of the default given domains .* name the given domains, e\.g\. "
            r"given=\['autumn', 'dim'\] \(available: autumn, dim, grass, sand, water\)$",
        ),
    ],
)
def test_bad_given_domains_are_refused_in_one_line(source, given, message) -> None:
    with pytest.raises(OodevalError, match=message) as caught:
        build_scenario("domains", source=source, given=given)
    assert "\n" not in str(caught.value)
    if "not in the source" in message:
        assert str(caught.value).endswith("available: autumn, dim, grass, sand, water")


def test_the_default_refused_when_the_source_lacks_its_domains(source) -> None:
    with pytest.raises(OodevalError, match="lacks rock, indoor of the default given domains"):
        build_scenario("domains", source=source)


@pytest.mark.parametrize("eval_fraction", [0.0, 1.0, -0.1, float("nan")])
def test_eval_fraction_must_lie_inside_0_1(source, eval_fraction) -> None:
    with pytest.raises(OodevalError, match=r"eval_fraction must be in \(0, 1\)"):
        build_scenario("domains", source=source, given=["dim", "sand"], eval_fraction=eval_fraction)


def test_a_source_without_domains_is_refused_naming_the_fix() -> None:
    with pytest.raises(OodevalError, match=r"needs a source with domains, such as folder:DIR"):
        build_scenario("domains", source="digits", given=["a", "b"])


def build_small(root: Path, given: list[str], **params) -> object:
    return build_scenario("domains", source=f"folder:{root}", given=given, image_size=4, **params)


def test_domains_too_small_for_the_split_are_refused(tmp_path: Path) -> None:
    # per class: tiny has 2 images in all (one too few for 0.2 held out), empty none
    small = write_domain_tree(tmp_path / "s", ["big", "tiny"], counts={"tiny": 1}, side=4)
    with pytest.raises(OodevalError, match=r"given domain 'tiny' has too few images \(2\) to hold"):
        build_small(small, ["big", "tiny"])
    ok = build_small(small, ["big", "tiny"], eval_fraction=0.5)  # one held out, one trained on
    assert ok.sizes()["given"]["tiny"] == 1 and ok.sizes()["evaluation"]["tiny"] == 1
    empty = write_domain_tree(tmp_path / "e", ["big", "empty", "other"], counts={"empty": 0})
    with pytest.raises(OodevalError, match=r"given domain 'empty' has too few images \(0\)"):
        build_small(empty, ["big", "empty"])
    with pytest.raises(OodevalError, match=r"^target domain 'empty' has no images; add some$"):
        build_small(empty, ["big", "other"])


def test_a_given_domain_with_the_name_separator_is_refused(tmp_path: Path) -> None:
    root = write_domain_tree(tmp_path / "t", ["a,b", "c", "d"], per_class=3, side=4)
    with pytest.raises(OodevalError, match=r"given domain 'a,b' has a ','.*rename its folder"):
        build_scenario("domains", source=f"folder:{root}", given=["a,b", "c"], image_size=4)
    fine = build_scenario("domains", source=f"folder:{root}", given=["c", "d"], image_size=4)
    assert fine.all_names == ["a,b", "c", "d"]  # a target domain may have one


def study(tree: Path, *scenarios: dict) -> dict:
    return {
        "name": "nico-classic",
        "algorithms": ["ERM"],
        "seeds": [0],
        "steps": 1,
        "source": f"folder:{tree}",
        "scenarios": list(scenarios),
    }


def test_a_study_config_scenario_validates(tree: Path) -> None:
    spec = {"family": "domains", "given": ["water", "grass", "dim"], "image_size": 8}
    validated = validate_config(config_from_dict(study(tree, spec)))
    (built,) = validated.scenarios
    assert built.name == "domains/given=dim,grass,water"
    assert built.given == ("dim", "grass", "water")
    assert built.params["given"] == ["dim", "grass", "water"]


def test_a_study_config_with_bad_domain_scenarios_lists_every_problem(tree: Path) -> None:
    specs = (
        {"family": "domains", "given": ["water"]},
        {"family": "domains", "given": ["water", "ice"]},
        {"family": "domains", "given": ["grass", "water", "dim"]},
        {"family": "domains", "given": "dim+water+grass"},  # the same split again
    )
    with pytest.raises(ConfigError) as caught:
        validate_config(config_from_dict(study(tree, *specs)))
    problems = caught.value.problems
    assert len(problems) == 3, problems
    assert "needs at least 2" in problems[0] and "ice not in the source" in problems[1]
    assert "scenario domains/given=dim,grass,water is listed twice" in problems[2]
