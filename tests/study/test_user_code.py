"""User code runs only when needed: a study config's ``imports`` and ``backend``.

- ``imports`` run after every other key is good, once per process, and a module that registers
  nothing (``imports = ["os"]``) is refused naming it;
- ``backend`` is a built-in name, an ``oodeval.backends`` entry point or a module whose source
  defines the backend functions: a module that does not is refused without being imported;
- reading a study folder (``study analyze``) imports nothing of its config;
- a config's ``measures`` are checked with the rest, before anything is created (issue 23, item 9).

Each user module here writes a marker file when it is executed, so a test sees whether (and how
often, in which process) it ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oodeval.cli.main import app
from oodeval.study import config_from_dict, load_study, run_study
from oodeval.study.config import ConfigError, import_backend, validate_config
from oodeval.study.config.backend import BACKEND_GROUP, BUILT_IN_BACKENDS
from tests.requires import REPO

runner = CliRunner()

SYNTHETIC = {
    "name": "user-code",
    "backend": "oodeval.study.synthetic",
    "algorithms": ["ERM", "IRM"],
    "seeds": [0],
    "steps": 5,
    "scenarios": [{"family": "synthetic", "ratio": "3:1", "scale": 1}],
}

#: A user module: appends its process id to $OODEVAL_TEST_COUNT_FILE (else to `marker`) when
#: executed; registers a measure family (it joins no default set of measures) when `registers`.
COUNTED = '''import os

with open(os.environ.get("OODEVAL_TEST_COUNT_FILE", {marker!r}), "a") as fh:
    fh.write(f"{{os.getpid()}}\\n")
'''
REGISTERS = '''
from oodeval.measures import register_measure_family


@register_measure_family("{name}", params={{"p": float}})
def {name}(p):
    return lambda errors: (errors ** p).mean(axis=-1) ** (1 / p)
'''
#: The five backend functions, from the synthetic backend, plus a marker when executed.
BACKEND = '''from oodeval.study.synthetic import (
    available, build_scenario, default_hparams, run_unit, sample_hparams,
)
'''


def user_module(path: Path, marker: Path, *, registers: str | None = None) -> Path:
    text = COUNTED.format(marker=str(marker))
    path.write_text(text + (REGISTERS.format(name=registers) if registers else ""))
    return path


def runs(marker: Path) -> list[str]:
    """The process ids that executed the module writing `marker`, in order."""
    return marker.read_text().split() if marker.exists() else []


def problems_of(data: dict) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        config_from_dict(data)
    return caught.value.problems


# -- imports ---------------------------------------------------------------------------------
def test_imports_run_only_once_every_other_key_is_good_and_once_per_process(tmp_path):
    marker = tmp_path / "ran"
    module = user_module(tmp_path / "uc_power_x.py", marker, registers="uc_power_x")
    data = {**SYNTHETIC, "imports": [str(module)], "measures": ["average", "uc_power_x:p=2"]}
    # a bad key: refused without running the module the measure name needs
    assert problems_of({**data, "steps": 0}) == ("steps must be >= 1, got 0",)
    assert problems_of({**data, "trainer": {"batch_size": -1}})[0].startswith("[trainer] batch")
    assert runs(marker) == []
    config = config_from_dict(data)  # the measure name needs the module: imported now
    assert config.measures == ("average", "uc_power_x:p=2")
    assert runs(marker) == [str(os.getpid())]
    config_from_dict(data)  # the same process: not again
    import_backend(config)
    assert runs(marker) == [str(os.getpid())]


def test_imports_are_not_run_by_a_config_that_does_not_need_them_yet(tmp_path):
    marker = tmp_path / "ran"
    module = user_module(tmp_path / "uc_lazy_x.py", marker, registers="uc_lazy_x")
    config = config_from_dict({**SYNTHETIC, "imports": [str(module)]})
    assert runs(marker) == []  # every measure is known: nothing to ask the module yet
    import_backend(config)  # what a run does before planning units
    assert runs(marker) == [str(os.getpid())]


@pytest.mark.parametrize("entry", ["os", "json.decoder", "nothing_here.py"])
def test_a_module_that_registers_nothing_is_refused_naming_it(tmp_path, entry):
    if entry.endswith(".py"):
        entry = str(user_module(tmp_path / entry, tmp_path / "ran"))
    config = config_from_dict({**SYNTHETIC, "imports": [entry]})
    with pytest.raises(ConfigError) as caught:
        import_backend(config)
    (problem,) = caught.value.problems
    assert problem.startswith(f"imports: module {entry!r} registers nothing (no algorithm, ")


def test_a_missing_module_is_found_missing_without_running_its_package(tmp_path, monkeypatch):
    package = tmp_path / "uc_pkg_x"
    package.mkdir()
    user_module(package / "__init__.py", tmp_path / "ran")
    monkeypatch.syspath_prepend(str(tmp_path))
    (problem,) = problems_of({**SYNTHETIC, "imports": ["uc_pkg_x.absent"]})
    assert problem == (
        "imports: cannot import module 'uc_pkg_x.absent' (no such module on the Python path)"
    )
    assert runs(tmp_path / "ran") == []


def test_study_run_refuses_imports_os_in_one_line_and_creates_nothing(tmp_path):
    config = tmp_path / "os.toml"
    config.write_text(
        'imports = ["os"]\nbackend = "oodeval.study.synthetic"\nalgorithms = ["ERM"]\n'
        'seeds = [0]\nsteps = 1\nscenarios = ["synthetic"]\n'
    )
    result = runner.invoke(app, ["study", "run", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: imports: module 'os' registers nothing (no algorithm, measure, source kind or "
        "executor); give only modules that register what you use"
    ]
    assert not (tmp_path / "out").exists()


def oodeval(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`oodeval ARGS` in a fresh process (imports are counted per process)."""
    return subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", *args],
        capture_output=True, text=True, env=env, cwd=REPO, check=False,
    )  # fmt: skip


def test_each_command_imports_a_module_once_per_process_and_reading_imports_none(tmp_path):
    """`study estimate` imported the config's module three times in its own process before;
    now each process (the command's, and each worker that trains a unit) runs it once, and
    `study analyze` of the stored study runs none of the config's code."""
    counter = tmp_path / "count"
    module = user_module(tmp_path / "uc_counted_x.py", counter, registers="uc_counted_x")
    config = tmp_path / "study.toml"
    config.write_text(
        f'imports = ["{module.name}"]\nbackend = "oodeval.study.synthetic"\n'
        'algorithms = ["ERM", "IRM"]\nseeds = [0]\nsteps = 5\nscenarios = ["synthetic"]\n'
        'measures = ["average", "worst_plus_gap", "uc_counted_x:p=2"]\n'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OODEVAL_TEST_COUNT_FILE": str(counter)}
    steps = [
        ["study", "estimate", str(config), "--workers", "1"],
        ["study", "run", str(config), "--out", str(tmp_path / "s"), "--workers", "1"],
    ]
    for args in steps:
        counter.unlink(missing_ok=True)
        result = oodeval(*args, env=env)
        assert result.returncode == 0, result.stderr
        pids = runs(counter)
        assert len(pids) >= 2 and len(set(pids)) == len(pids), (args, pids)  # parent + workers
    counter.unlink()
    analyzed = oodeval("study", "analyze", str(tmp_path / "s"), env=env)
    assert analyzed.returncode == 2  # the config's measure needs the module: --imports FILE
    assert "--imports FILE" in analyzed.stderr
    assert runs(counter) == []  # the folder's config names the module; reading runs none of it
    given = oodeval("study", "analyze", str(tmp_path / "s"), "--imports", str(module), env=env)
    assert given.returncode == 0, given.stderr
    assert len(runs(counter)) == 1  # --imports FILE: once


# -- backend ---------------------------------------------------------------------------------
def test_a_backend_module_without_the_functions_is_refused_without_importing_it(
    tmp_path, monkeypatch
):
    user_module(tmp_path / "uc_not_a_backend_x.py", tmp_path / "ran")  # defines none of them
    package = tmp_path / "uc_backends_x"
    package.mkdir()
    user_module(package / "__init__.py", tmp_path / "package-ran")
    user_module(package / "plain.py", tmp_path / "ran")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("uc_not_a_backend_x", "uc_backends_x.plain", "os"):
        (problem,) = problems_of({**SYNTHETIC, "backend": name})
        assert problem.startswith(f"backend {name!r} lacks ['build_scenario', "), problem
    assert runs(tmp_path / "ran") == [] and runs(tmp_path / "package-ran") == []
    assert "uc_not_a_backend_x" not in sys.modules and "uc_backends_x" not in sys.modules


def test_a_backend_module_runs_only_once_the_config_is_good(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "uc_backend_x.py").write_text(BACKEND + COUNTED.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {**SYNTHETIC, "backend": "uc_backend_x"}
    assert problems_of({**data, "seeds": [-1]})[0].startswith("seeds[0] must be >= 0")
    config = config_from_dict(data)
    assert runs(marker) == []  # a good config: the module is checked in its source, not run
    with pytest.raises(ConfigError, match="unknown algorithm"):  # a question for the module
        validate_config(config.replace(algorithms=["Magic"]))
    assert runs(marker) == [str(os.getpid())]
    import_backend(config)
    assert runs(marker) == [str(os.getpid())]


def test_study_run_refuses_backend_os_in_one_line(tmp_path):
    config = tmp_path / "os.toml"
    config.write_text(
        'backend = "os"\nalgorithms = ["ERM"]\nseeds = [0]\nsteps = 1\nscenarios = ["synthetic"]\n'
    )
    result = runner.invoke(app, ["study", "run", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: backend 'os' lacks ['build_scenario', 'available', ")
    assert not (tmp_path / "out").exists()


def test_an_installed_backend_is_named_by_its_entry_point(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "uc_ep_backend_x.py").write_text(BACKEND + COUNTED.format(marker=str(marker)))
    info = tmp_path / "uc_ep_backend_x-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: uc-ep-backend-x\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{BACKEND_GROUP}]\nuc-mine = uc_ep_backend_x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = config_from_dict({**SYNTHETIC, "backend": "uc-mine"})
    assert runs(marker) == []
    backend = import_backend(config)
    assert backend.__name__ == "uc_ep_backend_x" and runs(marker) == [str(os.getpid())]
    assert "oodeval.study.synthetic" in BUILT_IN_BACKENDS


# -- measures are checked with the rest (item 9) ---------------------------------------------
@pytest.mark.parametrize(
    "measures, expected",
    [
        ('["average", "medain"]', "error: unknown measure(s) 'medain'; choose from average, "),
        ('["cvar:alpha=2"]', "error: measures: "),
        ('["cvar"]', "error: measures: "),
    ],
)
def test_a_bad_measure_is_refused_before_anything_is_created(tmp_path, measures, expected):
    config = tmp_path / "m.toml"
    config.write_text(
        'backend = "oodeval.study.synthetic"\nalgorithms = ["ERM"]\nseeds = [0]\nsteps = 1\n'
        f'scenarios = ["synthetic"]\nmeasures = {measures}\n'
    )
    for command in (["run", "--out", str(tmp_path / "out")], ["estimate"]):
        result = runner.invoke(app, ["study", command[0], str(config), *command[1:]])
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(expected), line
    assert not (tmp_path / "out").exists()


def test_a_study_listing_two_measures_analyses(tmp_path):
    """Issue 23: `measures = ["average", "worst_plus_gap"]` trained, then analyze refused."""
    config = tmp_path / "two.toml"
    config.write_text(
        'backend = "oodeval.study.synthetic"\nalgorithms = ["ERM", "IRM", "VREx"]\nseeds = [0]\n'
        'steps = 1\nscenarios = ["synthetic"]\nmeasures = ["average", "worst_plus_gap"]\n'
    )
    out = tmp_path / "out"
    ran = runner.invoke(app, ["study", "run", str(config), "--out", str(out), "--workers", "1"])
    assert ran.exit_code == 0, ran.output
    analyzed = runner.invoke(app, ["study", "analyze", str(out)])
    assert analyzed.exit_code == 0, analyzed.output
    assert (out / "analysis" / "analysis.md").is_file()


def test_study_merge_runs_none_of_the_studies_code(tmp_path):
    module = user_module(tmp_path / "uc_merged_x.py", tmp_path / "ran", registers="uc_merged_x")
    data = {**SYNTHETIC, "imports": [str(module)], "measures": ["average", "uc_merged_x:p=2"]}
    for seed in (0, 1):
        config = config_from_dict({**data, "seeds": [seed]})
        run_study(config, tmp_path / f"s{seed}", workers=1, progress=False)
    counter = tmp_path / "count"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OODEVAL_TEST_COUNT_FILE": str(counter)}
    merged = oodeval(
        "study", "merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out",
        str(tmp_path / "m"), "--no-progress", env=env,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    assert runs(counter) == []
    assert load_study(tmp_path / "m").config["measures"] == ["average", "uc_merged_x:p=2"]
