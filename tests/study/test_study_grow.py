"""Growing a stored study: `oodeval study run CONFIG --out DIR` on a folder holding a study accepts
a config that only adds (or removes) algorithms, seeds, scenarios and imports: stored units are
kept byte for byte and never re-run, exactly the new units run, analyses and status use the units
of the current config. A change that would make stored units incomparable is refused, naming the
key, and nothing is written. The store keeps a checksummed history of its configs; a store
written before the history existed (schema 2) resumes and grows. Imports may be ``.py`` paths
relative to the config; a unit records the digest of the code it imported."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.results.variance import study_checkpoints
from oodeval.study import load_study, preset
from oodeval.study.store import SCHEMA_VERSION, STORE_NAME, text_checksum, verify_store
from tests.helpers.mnist import fake_mnist

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
S1 = "synthetic/ratio=3:1/scale=1"
S2 = "synthetic/ratio=3:1/scale=2"

# the synthetic backend draws no images; the digits are named so the data note stays out
BASE = """
name = "grow"
source = "digits"
backend = "tests.checkpoint_backend"
algorithms = ["ERM", "IRM", "GroupDRO"]
seeds = [0, 1]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1, n_all = 21 },
             { family = "synthetic", ratio = "3:1", scale = 2, n_all = 21 }]
[unit_options]
fail_algorithms = ["GroupDRO"]
[hparams.IRM]
penalty_weight = 2.0
"""


def write(folder: Path, text: str, name: str = "study.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def run(config: Path, out: Path, *extra: str):
    args = ["study", "run", str(config), "--out", str(out), "--workers", "1", "--no-progress"]
    return CliRunner().invoke(app, [*args, "--no-report", *extra])


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def dump(out: Path) -> dict[str, list[tuple]]:
    """Every row of every table, as SQLite returns it (for byte-for-byte comparisons)."""
    conn = sqlite3.connect(f"{(out / STORE_NAME).as_uri()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


def rows_of(table: dict[str, list[tuple]], name: str, keys: set[str]) -> list[tuple]:
    return [r for r in table[name] if r[0] in keys]


def summary_counts(output: str) -> tuple[int, int, int]:
    """(planned, already stored, run) from `study run`'s summary line."""
    m = re.search(r"(\d+) units: (\d+) already stored, (\d+) run", output)
    assert m, output
    return int(m[1]), int(m[2]), int(m[3])


def unit_keys(scenarios, algorithms, seeds) -> set[str]:
    return {f"{s}|{a}|seed={x}" for s in scenarios for a in algorithms for x in seeds}


@pytest.fixture()
def base(tmp_path):
    """A finished study (2 scenarios x 3 algorithms x 2 seeds; GroupDRO's units fail)."""
    config = write(tmp_path, BASE)
    out = tmp_path / "out"
    result = run(config, out)
    assert result.exit_code == 0, result.output
    assert summary_counts(result.output) == (12, 0, 12)
    return tmp_path, out


def grow(tmp_path: Path, out: Path, text: str):
    result = run(write(tmp_path, text, "grown.toml"), out)
    assert result.exit_code == 0, result.output
    return result


def test_growing_by_one_algorithm_runs_exactly_its_units_and_keeps_stored_rows(base):
    tmp_path, out = base
    before = dump(out)
    stored = {r[0] for r in before["units"]}
    result = grow(tmp_path, out, BASE.replace('"GroupDRO"]', '"GroupDRO", "VREx"]', 1))
    assert "config: added algorithm VREx (stored units are kept)" in result.output
    assert summary_counts(result.output) == (16, 12, 4)
    after = dump(out)
    assert {r[0] for r in after["units"]} - stored == unit_keys([S1, S2], ["VREx"], [0, 1])
    for table in ("units", "results", "checkpoints"):  # the stored units' rows, byte for byte
        assert rows_of(after, table, stored) == before[table]
    assert len(after["configs"]) == 2 and after["configs"][0] == before["configs"][0]
    status = invoke("study", "status", out)
    assert "12 done, 4 failed, 0 pending (of 16)" in status.output
    coverage = [line.split() for line in status.output.splitlines()[1:10]]
    assert coverage[0] == ["axis", "value", "planned", "done", "failed", "pending"]
    assert ["algorithm", "VREx", "4", "4", "0", "0"] in coverage
    assert ["algorithm", "GroupDRO", "4", "0", "4", "0"] in coverage
    assert ["seed", "1", "8", "6", "2", "0"] in coverage
    assert [S2, "8", "6", "2", "0"] == coverage[2][1:]


def test_growing_by_seeds_runs_exactly_the_new_seeds(base):
    tmp_path, out = base
    before = dump(out)
    result = grow(tmp_path, out, BASE.replace("seeds = [0, 1]", "seeds = [0, 1, 2, 3]"))
    assert "config: added seeds 2, 3" in result.output
    assert summary_counts(result.output) == (24, 12, 12)
    after = dump(out)
    new = {r[0] for r in after["units"]} - {r[0] for r in before["units"]}
    assert new == unit_keys([S1, S2], ["ERM", "IRM", "GroupDRO"], [2, 3])
    assert rows_of(after, "results", {r[0] for r in before["units"]}) == before["results"]


def test_growing_by_a_scenario_runs_exactly_its_units(base):
    tmp_path, out = base
    before = dump(out)
    text = BASE.replace(
        "scale = 2, n_all = 21 }]",
        'scale = 2, n_all = 21 },\n{ family = "synthetic", ratio = "4:1", scale = 1, n_all = 21 }]',
    )
    result = grow(tmp_path, out, text)
    assert "config: added scenario synthetic[n_all=21,ratio=4:1,scale=1]" in result.output
    assert summary_counts(result.output) == (18, 12, 6)
    new = {r[0] for r in dump(out)["units"]} - {r[0] for r in before["units"]}
    assert new == unit_keys(["synthetic/ratio=4:1/scale=1"], ["ERM", "IRM", "GroupDRO"], [0, 1])


def test_removing_then_adding_back_runs_nothing_and_analyses_follow_the_config(base):
    tmp_path, out = base
    assert invoke("study", "analyze", out).exit_code == 0
    whole = {p.name: p.read_bytes() for p in (out / "analysis").iterdir()}
    before = dump(out)
    shrunk = BASE.replace('"ERM", "IRM", "GroupDRO"', '"ERM", "IRM"').replace("[0, 1]", "[0]")
    result = grow(tmp_path, out, shrunk)
    assert "config: removed algorithm GroupDRO; removed seed 1" in result.output
    assert summary_counts(result.output) == (4, 4, 0)
    status = invoke("study", "status", out)
    assert "4 done, 0 failed, 0 pending (of 4)" in status.output
    assert (
        "note: 8 stored unit(s) are outside the current config (removed algorithm GroupDRO; "
        "seed 1); they are kept in the store and not analysed"
    ) in status.output
    analyzed = invoke("study", "analyze", out)
    assert analyzed.exit_code == 0, analyzed.output
    assert "note: 8 stored unit(s) are outside the current config" in analyzed.output
    units = pd.read_csv(out / "analysis" / "units.csv")
    assert set(units["algorithm"]) == {"ERM", "IRM"} and set(units["seed"]) == {0}
    assert "Note: 8 stored unit(s) are outside" in (out / "analysis" / "analysis.md").read_text()
    study = load_study(out)
    assert set(study.units["unit_key"]) == unit_keys([S1, S2], ["ERM", "IRM"], [0])
    assert set(study.results["unit_key"]) == set(study.units["unit_key"])
    assert set(study_checkpoints(out)["trial"]) == {0}  # `oodeval variance DIR` reads these
    assert dump(out)["units"] == before["units"]  # kept in the store
    back = grow(tmp_path, out, BASE)  # adding them back: they are stored, nothing runs
    assert "config: added algorithm GroupDRO; added seed 1" in back.output
    assert summary_counts(back.output) == (12, 12, 0)
    assert set(study_checkpoints(out)["trial"]) == {0, 1}
    assert invoke("study", "analyze", out).exit_code == 0
    assert {p.name: p.read_bytes() for p in (out / "analysis").iterdir()} == whole
    assert [json.loads(r[1])["algorithms"] for r in dump(out)["configs"]] == [
        ["ERM", "IRM", "GroupDRO"],
        ["ERM", "IRM"],
        ["ERM", "IRM", "GroupDRO"],
    ]


FAKE_MNIST = "FAKE_MNIST"
REFUSED = [
    ("steps = 5", "steps = 6", "steps (5 -> 6)"),
    ("steps = 5", 'steps = 5\nmodel = "cnn"', 'model ("mlp" -> "cnn")'),
    ("penalty_weight = 2.0", "penalty_weight = 3.0", "hparams.IRM ("),
    ("steps = 5", "steps = 5\ndata_seed = 1", "data_seed (0 -> 1)"),
    ("[unit_options]", '[trainer]\nprecision = "bf16"\n[unit_options]', "trainer.precision ("),
    ("[unit_options]", "[trainer]\nbatch_size = 8\n[unit_options]", "trainer.batch_size (null"),
    ('source = "digits"', f'source = "{FAKE_MNIST}"', 'source ({"digest": '),
    ("scale = 1, n_all = 21", "scale = 1, n_all = 31", f"scenarios[{S1}] ("),
    ('fail_algorithms = ["GroupDRO"]', 'fail_algorithms = ["IRM"]', "unit_options ("),
]


def test_a_digits_study_resumed_without_source_names_the_new_default(base):
    """A config without `source` meant the digits before `auto` became the default: resuming
    such a study with it is refused in one line that says what to write."""
    tmp_path, out = base
    before = dump(out)
    result = run(write(tmp_path, BASE.replace('source = "digits"\n', ""), "old.toml"), out)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and 'write source = "digits" to resume it' in line
    assert dump(out) == before


@pytest.mark.parametrize(
    ("old", "new", "named"), REFUSED, ids=[r[2].split(" ")[0] for r in REFUSED]
)
def test_an_incomparable_change_is_refused_naming_the_key_and_nothing_is_written(
    base, old, new, named
):
    tmp_path, out = base
    fake_mnist(tmp_path / "mnist")
    new = new.replace(FAKE_MNIST, f"mnist:{tmp_path / 'mnist'}")
    text = BASE.replace(old, new, 1).replace('"GroupDRO"]', '"GroupDRO", "VREx"]', 1)
    assert text != BASE
    before = dump(out), (out / STORE_NAME).read_bytes()
    result = run(write(tmp_path, text, "changed.toml"), out)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"error: {out} holds a study whose units would not compare with this ")
    assert f"config's: {named}" in line
    assert line.endswith("keep these values, or use a new --out folder")
    assert (dump(out), (out / STORE_NAME).read_bytes()) == before
    fresh = run(write(tmp_path, text, "changed.toml"), tmp_path / "new-folder")  # the way out
    assert fresh.exit_code == 0, fresh.output


def test_an_algorithm_added_back_with_other_hyperparameters_is_refused(base):
    tmp_path, out = base
    without = BASE.replace('"ERM", "IRM", "GroupDRO"', '"ERM", "GroupDRO"')
    grow(tmp_path, out, without.replace("[hparams.IRM]\npenalty_weight = 2.0\n", ""))
    changed = run(write(tmp_path, BASE.replace("2.0", "3.0"), "changed.toml"), out)
    assert changed.exit_code == 2
    assert 'hparams.IRM ({"penalty_weight": 2.0} -> {"penalty_weight": 3.0})' in changed.output
    assert summary_counts(run(write(tmp_path, BASE, "same.toml"), out).output) == (12, 12, 0)


def test_the_config_history_is_checksummed_and_verified(base):
    tmp_path, out = base
    grow(tmp_path, out, BASE.replace("seeds = [0, 1]", "seeds = [0, 1, 2]"))
    report = verify_store(out)
    assert report.clean and report.schema == SCHEMA_VERSION == "3"
    assert [line.split(" (")[0] for line in report.history] == ["config 1", "config 2"]
    assert report.history[1].endswith("2 scenarios x 3 algorithms x 3 seeds")
    history = load_study(out).history
    assert [r.origin for r in history] == ["run", "run"]
    assert history[1].scenario_names == {
        '{"family": "synthetic", "n_all": 21, "ratio": "3:1", "scale": 1}': S1,
        '{"family": "synthetic", "n_all": 21, "ratio": "3:1", "scale": 2}': S2,
    }
    with sqlite3.connect(out / STORE_NAME) as conn:  # an earlier config rewritten
        conn.execute("UPDATE configs SET config = replace(config, '\"grow\"', '\"x\"') WHERE seq=1")
    conn.close()
    study = load_study(out)  # the numbers never depend on the history: the current config is
    assert [r.seq for r in study.history] == [2]  # checksummed on its own
    assert study.health.history_damage == {"row 1": "fails its checksum"}
    assert (
        "1 row(s) of the store's config history are damaged (row 1 (fails its checksum))"
        in (study.integrity_notes()[0])
    )
    status = invoke("study", "status", out)
    assert "damaged: config history row 1: fails its checksum" in status.output
    verify = invoke("study", "verify", out)
    assert verify.exit_code == 1 and "damaged: config history row 1: fails its checksum" in (
        verify.output
    )
    merged = invoke("study", "merge", out, "--out", tmp_path / "m")
    assert merged.exit_code == 2 and "its config history is damaged (row 1" in merged.output
    repaired = run(write(tmp_path, BASE.replace("[0, 1]", "[0, 1, 2]")), out)  # sets it aside
    assert "1 damaged row(s) of the config history moved aside" in repaired.output
    assert summary_counts(repaired.output) == (18, 18, 0)
    assert verify_store(out).clean and verify_store(out).quarantined == 1
    assert [r.seq for r in load_study(out).history] == [2]


def test_a_history_whose_last_row_is_not_the_current_config_is_recorded_again(base):
    tmp_path, out = base
    with sqlite3.connect(out / STORE_NAME) as conn:
        row = list(conn.execute("SELECT * FROM configs WHERE seq=1").fetchone()[:-1])
        row[1] = row[1].replace('"steps": 5', '"steps": 6')
        checksum = text_checksum(json.dumps(row, ensure_ascii=False))
        conn.execute("UPDATE configs SET config=?, checksum=? WHERE seq=1", (row[1], checksum))
    conn.close()
    study = load_study(out)
    assert study.history == [] and study.health.history_damage == {
        "row 1": "is not the current config"
    }
    assert study.counts() == {"done": 8, "failed": 4, "damaged": 0, "pending": 0, "planned": 12}
    again = run(write(tmp_path, BASE), out)
    assert summary_counts(again.output) == (12, 12, 0)
    assert "1 damaged row(s) of the config history moved aside" in again.output
    history = load_study(out).history
    assert [(r.seq, r.origin) for r in history] == [(2, "recorded again (history row damaged)")]
    assert history[0].config["steps"] == 5 and len(history[0].scenario_names) == 2
    assert verify_store(out).clean


def schema_2_store(folder: Path) -> Path:
    """The store the code at this change's branch point wrote (tests/fixtures/schema2_store.sql:
    `iterdump` of a study of tests.checkpoint_backend, 1 scenario x ERM, IRM x seeds 0, 1)."""
    folder.mkdir(parents=True)
    conn = sqlite3.connect(folder / STORE_NAME)
    conn.executescript((FIXTURES / "schema2_store.sql").read_text(encoding="utf-8"))
    conn.close()
    return folder


# schema-2 stores predate `auto`: a config without `source` then meant the digits
LEGACY = """
name = "legacy"
source = "digits"
backend = "tests.checkpoint_backend"
algorithms = ["ERM", "IRM"]
seeds = [0, 1]
steps = 5
scenarios = [{ family = "synthetic", ratio = "3:1", scale = 1, n_all = 11 }]
"""


def test_a_schema_2_store_written_before_the_history_resumes_and_grows(tmp_path):
    out = schema_2_store(tmp_path / "legacy")
    first = dump(out)
    assert "configs" not in first and dict(first["study"])["schema"] == "2"
    study = load_study(out)  # read as it is: one config, names unknown
    assert study.health.verified == 4 and study.counts()["done"] == 4
    assert [r.origin for r in study.history] == ["recorded by a store of schema 2"]
    assert invoke("study", "analyze", out).exit_code == 0
    analysis = {p.name: p.read_bytes() for p in (out / "analysis").iterdir()}
    assert dump(out) == first  # readers never write
    same = run(write(tmp_path, LEGACY), out)
    assert same.exit_code == 0, same.output
    assert summary_counts(same.output) == (4, 4, 0)
    migrated = dump(out)
    for table in ("units", "results", "checkpoints"):
        assert migrated[table] == first[table]
    history = load_study(out).history
    assert [r.origin for r in history] == ["migrated from schema 2"]
    assert history[0].scenario_names == {  # learnt from the config that resumed it
        '{"family": "synthetic", "n_all": 11, "ratio": "3:1", "scale": 1}': (
            "synthetic/ratio=3:1/scale=1"
        )
    }
    assert verify_store(out).clean and verify_store(out).schema == "3"
    assert invoke("study", "analyze", out).exit_code == 0
    assert {p.name: p.read_bytes() for p in (out / "analysis").iterdir()} == analysis
    grown = run(write(tmp_path, LEGACY.replace('"IRM"]', '"IRM", "VREx"]')), out)
    assert summary_counts(grown.output) == (6, 4, 2)
    assert rows_of(dump(out), "results", {r[0] for r in first["units"]}) == first["results"]
    refused = run(write(tmp_path, LEGACY.replace("steps = 5", "steps = 4")), out)
    assert refused.exit_code == 2 and "steps (5 -> 4)" in refused.output


def test_a_schema_2_store_losing_a_scenario_names_it_by_building_it(tmp_path):
    """The history of a migrated store does not name its scenarios: the run builds the removed
    one to tell a re-parametrised scenario (same name, other data) from a new one."""
    out = schema_2_store(tmp_path / "legacy")
    first = dump(out)
    changed = run(write(tmp_path, LEGACY.replace("n_all = 11", "n_all = 12")), out)
    assert changed.exit_code == 2
    assert "scenarios[synthetic/ratio=3:1/scale=1] (" in changed.output
    after = dump(out)  # upgraded to schema 3 on open; its study untouched
    for table in ("units", "results", "checkpoints"):
        assert after[table] == first[table]
    assert dict(after["study"])["config"] == dict(first["study"])["config"]
    assert [r[5] for r in after["configs"]] == ["migrated from schema 2"]


def test_a_schema_2_store_failing_sqlites_check_is_rebuilt_with_a_history(tmp_path):
    out = schema_2_store(tmp_path / "legacy")
    path = out / STORE_NAME
    with sqlite3.connect(path) as conn:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name='sqlite_autoindex_results_1'"
        ).fetchone()
    conn.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * 4096 + 8 : root * 4096] = bytes(4096 - 8)  # an index page zeroed
    path.write_bytes(bytes(data))
    grown = run(write(tmp_path, LEGACY.replace('"IRM"]', '"IRM", "VREx"]')), out)
    assert grown.exit_code == 0, grown.output
    assert "the store failed SQLite's integrity check and was rebuilt" in grown.output
    assert verify_store(out).clean
    history = load_study(out).history
    assert [r.origin for r in history] == ["migrated from schema 2"]
    assert history[0].config["algorithms"] == ["ERM", "IRM", "VREx"]  # the grown config
    assert load_study(out).counts()["done"] == 6


MODULE = '''"""A user's module: imported by the study, it registers a measure family (an imported
module must register something; a family joins no default set of measures)."""
from oodeval.measures import register_measure_family

VERSION = {version}


@register_measure_family("grow_power_mean", params={{"p": float}})
def grow_power_mean(p):
    return lambda errors: (errors ** p).mean(axis=-1) ** (1 / p)
'''


def imports_config(imports: str) -> str:
    return BASE.replace('name = "grow"', f'name = "grow"\nimports = [{imports}]')


def test_imports_by_path_relative_to_the_config_and_a_moved_study_resumes(tmp_path):
    project = tmp_path / "machine-a" / "project"
    (project / "algs").mkdir(parents=True)
    (project / "algs" / "my_module.py").write_text(MODULE.format(version=1))
    config = write(project, imports_config('"algs/my_module.py"'))
    out = project / "out"
    first = run(config, out)
    assert first.exit_code == 0, first.output
    source = project / "algs" / "my_module.py"
    stored = load_study(out).config
    assert stored["imports"] == [str(source)]
    digest = stored["import_digests"][str(source)]
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    units = load_study(out).units
    assert set(units["versions"].map(lambda v: v["import:my_module"])) == {digest}
    # the whole project moves (another machine): the import is the same file by name and digest
    moved = tmp_path / "machine-b" / "elsewhere"
    moved.parent.mkdir()
    shutil.move(project, moved)
    again = run(moved / "study.toml", moved / "out")
    assert again.exit_code == 0, again.output
    assert summary_counts(again.output) == (12, 12, 0) and "config:" not in again.output
    grown = run(
        write(moved, imports_config('"algs/my_module.py"').replace("[0, 1]", "[0, 1, 2]")),
        moved / "out",
    )
    assert summary_counts(grown.output) == (18, 12, 6)
    assert load_study(moved / "out").config["imports"] == [str(moved / "algs" / "my_module.py")]
    missing = run(write(tmp_path, imports_config('"nowhere.py"'), "missing.toml"), tmp_path / "m")
    assert missing.exit_code == 2
    assert f"imports: file {tmp_path / 'nowhere.py'} not found" in missing.output
    assert not (tmp_path / "m").exists()


def test_a_changed_imported_module_is_flagged_per_algorithm(tmp_path):
    (tmp_path / "my_module.py").write_text(MODULE.format(version=1))
    out = tmp_path / "out"
    assert run(write(tmp_path, imports_config('"my_module.py"')), out).exit_code == 0
    assert "note:" not in invoke("study", "status", out).output
    (tmp_path / "my_module.py").write_text(MODULE.format(version=2))  # the user edits the code
    grown = run(
        write(tmp_path, imports_config('"my_module.py"').replace("[0, 1]", "[0, 1, 2]")), out
    )
    assert grown.exit_code == 0, grown.output
    assert "config: added seed 2; added import" in grown.output  # a new version of the file
    warning = (
        "the units of ERM, IRM were computed with 2 different versions of the imported module "
        "my_module (its code changed between runs"
    )
    assert f"note: {warning}" in invoke("study", "status", out).output
    analyzed = invoke("study", "analyze", out)
    assert f"warning: {warning}" in analyzed.output
    assert f"Warning: {warning}" in (out / "analysis" / "analysis.md").read_text()
    report = invoke("report", out, "--out", tmp_path / "report.html")
    assert report.exit_code == 0, report.output
    assert warning in (tmp_path / "report.html").read_text()
    history = load_study(out).history
    assert [len(set(r.config["import_digests"].values())) for r in history] == [1, 1]
    assert history[0].config["import_digests"] != history[1].config["import_digests"]


def test_module_name_imports_still_work_and_record_their_digest(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "named_module_for_grow.py").write_text(MODULE.format(version=1))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))  # the workers'
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))  # this process's
    out = tmp_path / "out"
    result = run(write(tmp_path, imports_config('"named_module_for_grow"')), out)
    assert result.exit_code == 0, result.output
    study = load_study(out)
    assert study.config["imports"] == ["named_module_for_grow"]
    assert study.config["import_digests"] == {}
    digests = set(study.units["versions"].map(lambda v: v["import:named_module_for_grow"]))
    assert len(digests) == 1 and re.fullmatch(r"[0-9a-f]{16}", digests.pop())


def test_a_py_file_named_like_an_imported_module_is_refused(tmp_path):
    (tmp_path / "json.py").write_text("")
    result = run(write(tmp_path, imports_config('"json.py"')), tmp_path / "out")
    assert result.exit_code == 2
    assert "json.py would be imported as 'json', the name of the module" in result.output
    assert "rename the file" in result.output


def test_import_digests_are_computed_not_written(tmp_path):
    text = imports_config('"m.py"') + '\n[import_digests]\n"m.py" = "0000000000000000"\n'
    (tmp_path / "m.py").write_text("")
    result = run(write(tmp_path, text), tmp_path / "out")
    assert result.exit_code == 2
    assert "import_digests is computed from the imported files, not written in a config" in (
        result.output
    )


# -- the Done-when with the quick preset, on the real trainer ----------------------------
QUICK = """
name = "quick"
source = "digits"
algorithms = ["ERM", "IRM", "GroupDRO", "VREx", "CORAL", "MMD", "Mixup", "MLDG"]
seeds = [0]
steps = 10
model = "mlp"
scenarios = [
  { family = "sr-cmnist", ratio = "3:1", scale = 1, n_per_given = 60, n_eval = 60 },
  { family = "sr-cmnist", ratio = "4:1", scale = 1, n_per_given = 60, n_eval = 60 },
  { family = "sr-cmnist", ratio = "5:1", scale = 1, n_per_given = 60, n_eval = 60 },
]
[trainer]
eval_every = 5
[hparams.IRM]
irm_penalty_anneal_iters = 5
[hparams.VREx]
vrex_penalty_anneal_iters = 5
"""


@pytest.mark.slow
def test_done_when_grow_the_quick_study_by_one_algorithm_and_refuse_other_steps(tmp_path):
    """The quick preset shrunk to seconds (steps, data sizes, anneals, digits): growing it by one
    algorithm runs exactly that algorithm's 3 units; other steps are refused naming the key."""
    from oodeval.study import load_config

    shrunk = load_config(write(tmp_path, QUICK)).to_dict()
    quick = preset("quick").to_dict()
    differ = sorted(k for k in quick if quick[k] != shrunk[k])
    assert differ == ["hparams", "scenarios", "source", "source_identity", "steps", "trainer"]
    assert [{**s, "n_per_given": 1000, "n_eval": 1000} for s in shrunk["scenarios"]] == quick[
        "scenarios"
    ]
    out = tmp_path / "quick"
    first = run(write(tmp_path, QUICK), out, "--workers", "2")
    assert first.exit_code == 0, first.output
    assert summary_counts(first.output) == (24, 0, 24)
    before = dump(out)
    grown = run(write(tmp_path, QUICK.replace('"MLDG"]', '"MLDG", "MTL"]'), "grown.toml"), out)
    assert grown.exit_code == 0, grown.output
    assert summary_counts(grown.output) == (27, 24, 3)
    after = dump(out)
    assert {r[0] for r in after["units"]} - {r[0] for r in before["units"]} == {
        f"sr-cmnist/ratio={r}/scale=1|MTL|seed=0" for r in ("3:1", "4:1", "5:1")
    }
    stored = {r[0] for r in before["units"]}
    for table in ("units", "results", "checkpoints"):
        assert rows_of(after, table, stored) == before[table]
    refused = run(write(tmp_path, QUICK.replace("steps = 10", "steps = 20"), "steps.toml"), out)
    assert refused.exit_code == 2
    assert "would not compare with this config's: steps (10 -> 20)" in refused.output
    assert dump(out) == after
