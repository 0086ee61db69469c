"""Fuzzing study configs: valid ones are accepted as written, broken ones refused before --out.

A valid config (synthetic backend, any grid) loads through `oodeval.study.load_config` with the
values written and passes `validate_config`; a broken one (a wrong type, an out-of-range number,
an unknown, computed or missing key, damaged or invalid TOML) makes `study run CONFIG --out NEW`
and `study estimate CONFIG` print one ``error:`` line and exit 2, never a traceback, with NEW
never created. Nothing trains: refused configs stop at validation, and the valid ones are only
validated (the strategies are in `tests.helpers.fuzz_config`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from oodeval._json import MAX_DEPTH
from oodeval.errors import OodevalError
from oodeval.study.config import ConfigError, config_from_dict, load_config, validate_config
from tests.helpers.cli import assert_refused, invoke
from tests.helpers.fuzz import MUTATIONS, bom_and_newlines, fuzz_settings, lookalikes
from tests.helpers.fuzz_config import broken_configs, study_configs, toml_text


def _written(tmp: Path, raw: bytes) -> Path:
    path = tmp / "study.toml"
    path.write_bytes(raw)
    return path


@fuzz_settings(60)
@given(study_configs(), st.data())
def test_valid_configs_load_as_written(config, data) -> None:
    raw = bom_and_newlines(toml_text(config), data)
    with tempfile.TemporaryDirectory() as tmp:
        loaded = load_config(_written(Path(tmp), raw))
    assert loaded.backend == config["backend"] and loaded.name == config["name"]
    assert list(loaded.algorithms) == config["algorithms"]
    assert list(loaded.seeds) == config["seeds"] and loaded.steps == config["steps"]
    assert [s.to_dict() for s in loaded.scenarios] == config["scenarios"]
    for key in ("data_seed", "hparams_mode", "model"):
        assert getattr(loaded, key) == config.get(key, getattr(loaded, key))
    if "measures" in config:
        assert list(loaded.measures) == config["measures"]
    for key, value in config.get("trainer", {}).items():
        assert loaded.trainer.get(key, value) == value, key  # a default value is not stored
    assert config_from_dict(loaded.to_dict()) == loaded
    built = validate_config(loaded).scenarios
    assert len(built) == len(config["scenarios"])


def _refused_before_out(path: Path, tmp: Path, command: str) -> None:
    out = tmp / "new-study"
    if command == "run":
        argv = ["study", "run", str(path), "--out", str(out), "--workers", "1",
                "--no-progress", "--no-report"]
    else:
        argv = ["study", "estimate", str(path), "--workers", "1", "-o", str(out / "e.txt")]
    code, stdout, stderr = invoke(argv)
    assert_refused(code, stdout, stderr, argv)
    assert not out.exists(), (argv, sorted(out.rglob("*")))


def _accepted_by_the_cli(path: Path, tmp: Path, algorithm: str) -> None:
    """`study estimate` accepts a config the API accepted, as `study run` would (the same
    checks): it writes its estimate and exits 0. Estimating runs a sample of the synthetic
    backend's units (simulated in milliseconds, nothing trained); `study run` would run them
    all, and its validation is the same."""
    out = tmp / "estimate"
    out.mkdir()
    argv = ["study", "estimate", str(path), "--workers", "1", "--algorithms", algorithm,
            "-o", str(out / "e.txt")]  # fmt: skip
    code, stdout, stderr = invoke(argv)
    assert code == 0, (argv, path.read_bytes(), stdout[-2000:], stderr[-2000:])
    assert (out / "e.txt").read_text(encoding="utf-8").startswith("measured on device"), argv


@fuzz_settings(80)
@given(broken_configs(), st.sampled_from(["run", "estimate"]))
@example(({"backend": "oodeval.study.synthetic", "algorithms": ["ERM"], "seeds": [0],
           "steps": 10**30, "scenarios": [{"family": "synthetic", "ratio": "3:1"}]},
          "steps = 10**30"), "run")
def test_broken_configs_are_refused_before_out(broken, command: str) -> None:
    config, what = broken
    with tempfile.TemporaryDirectory() as tmp:
        path = _written(Path(tmp), toml_text(config).encode("utf-8"))
        with pytest.raises(ConfigError):
            validate_config(load_config(path))
        _refused_before_out(path, Path(tmp), command)


#: Text no TOML parser accepts (or that holds no table of keys).
INVALID_TOML = ["steps = ", "steps = 1\nsteps = 2\n", "[trainer\n", "seeds = [0,\n",
                "name = 'unterminated\n", "= 5\n", "steps = 0x\n", "a.b = 1\na = 2\n",
                "steps = 1979-05-27T07:32:00Z\n", "steps = 1_\n", "\x00",
                "steps = 1" + "0" * 5000 + "\n"]  # over int()'s 4,300 digits: a ValueError


@fuzz_settings(60)
@given(study_configs(), st.sampled_from(sorted(MUTATIONS) + ["invalid TOML"]),
       st.sampled_from(["run", "estimate"]), st.data())
def test_damaged_config_files_are_refused_or_accepted(config, mutation, command, data) -> None:
    """A damaged file: refused in one line before --out exists, or (a cut at a line's end, a
    duplicated line) a config the validation API and the command line both accept."""
    raw = toml_text(config).encode("utf-8")
    if mutation == "invalid TOML":
        at = data.draw(st.sampled_from([0, len(raw)]), label="at")
        junk = data.draw(st.sampled_from(INVALID_TOML), label="junk").encode("utf-8")
        raw, always = raw[:at] + junk + raw[at:], True
    else:
        mutate, always = MUTATIONS[mutation]
        raw = mutate(raw, data)
    with tempfile.TemporaryDirectory() as tmp:
        path = _written(Path(tmp), raw)
        try:
            loaded = load_config(path)
            validate_config(loaded)
        except OodevalError:
            _refused_before_out(path, Path(tmp), command)
        else:
            assert not always, raw
            _accepted_by_the_cli(path, Path(tmp), loaded.algorithms[0])


#: The nestings written as dotted names, counted (when long) before parsing from their dots.
KEYS = ("dotted keys", "header")


def _nesting(how: str, depth: int) -> str:
    """TOML lines nesting `depth` levels below the document: inline arrays or tables, dotted
    keys, or a dotted table header (the last two under ``unit_options``, a free-form table)."""
    if how == "arrays":
        return "x = " + "[" * depth + "1" + "]" * depth + "\n"
    if how == "tables":
        return "x = " + "{ a = " * depth + "1" + " }" * depth + "\n"
    if how == "dotted keys":
        return "[unit_options]\n" + ".".join(["a"] * depth) + " = 1\n"
    return "[unit_options." + ".".join(["a"] * (depth - 1)) + "]\nb = 1\n"


@fuzz_settings(40)
@given(study_configs(), st.sampled_from(["arrays", "tables", "dotted keys", "header"]),
       st.one_of(st.integers(2, 2 * MAX_DEPTH), st.sampled_from([5_000, 50_000])),
       st.sampled_from(["run", "estimate"]))
def test_nesting_past_the_bound_is_refused_before_out(config, how, depth, command) -> None:
    """A config nesting over `MAX_DEPTH` levels, however it nests, is refused in one line
    naming the depth (a RecursionError traceback before); within the bound, the file parses
    (an unknown key ``x`` is then refused as usual, a free-form ``unit_options`` table kept)."""
    raw = (toml_text(config) + _nesting(how, depth)).encode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = _written(Path(tmp), raw)
        if depth <= MAX_DEPTH:
            try:
                load_config(path)
            except OodevalError as exc:
                assert "levels deep" not in str(exc), (how, depth, exc)
            return
        deep = f"at least {depth - 1:,}" if depth > 4 * MAX_DEPTH and how in KEYS else f"{depth:,}"
        with pytest.raises(OodevalError, match=f"nest {deep} levels deep"):
            load_config(path)
        _refused_before_out(path, Path(tmp), command)


@fuzz_settings(30)
@given(study_configs(), st.data())
def test_a_lookalike_algorithm_is_refused_before_out(config, data) -> None:
    """A second spelling of a listed algorithm (an invisible character, another normal form)
    is refused as a look-alike, naming both, whether or not an import registers it."""
    name = data.draw(st.sampled_from(config["algorithms"]), label="algorithm")
    config["algorithms"] = [*config["algorithms"], data.draw(lookalikes(name), label="twin")]
    command = data.draw(st.sampled_from(["run", "estimate"]), label="command")
    with tempfile.TemporaryDirectory() as tmp:
        path = _written(Path(tmp), toml_text(config).encode("utf-8"))
        with pytest.raises(OodevalError, match="differ only by Unicode normalisation"):
            validate_config(load_config(path))
        _refused_before_out(path, Path(tmp), command)
