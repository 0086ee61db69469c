"""Bad input to every command: exit status 2, one `error:` line on stderr, never a traceback.

Each case runs the command line as a user types it, through `oodeval.cli.main.run` (the
console script's own error handling) inside typer's CliRunner isolation; a few run through a
real subprocess to show that nothing else reaches the terminal. `test_every_command_has_a_case`
walks the Typer app so a new command cannot go without bad-input cases.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer.main

from oodeval.cli.main import app
from tests.helpers.cli import assert_refused as _assert_refused
from tests.helpers.cli import invoke as _invoke

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Bytes no text file holds: a PNG signature (0x89 is not UTF-8) and NUL bytes.
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10" + bytes(range(256))
# A number longer than the 4,300 digits Python's int() reads: json and tomllib raise ValueError.
LONG_ZEROS = "0" * 5000
LONG_JSONL = (
    f'{{"algorithm": "ERM", "environment": "e1", "error": 1{LONG_ZEROS}, "split": "loo"}}\n'
)


def _commands(*, leaves_only: bool = True) -> dict[str, object]:
    """Every leaf command of the app (and with leaves_only=False the groups, the root as "")
    as {"group sub": click command}."""
    found: dict[str, object] = {}

    def walk(cmd: object, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if not subs or not leaves_only:
            found[" ".join(path)] = cmd
        for name, sub in (subs or {}).items():
            if not sub.hidden:  # a deprecated name (`splits`) is not a command of its own
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def _shift_source_option() -> str:
    """The option naming shift's first data set (whatever it is called): the visible SPEC
    option that is not --test."""
    cmd = _commands()["shift"]
    names = [
        p.opts[0]  # type: ignore[attr-defined]
        for p in cmd.params
        if p.metavar == "SPEC" and not getattr(p, "hidden", False)
    ]
    (source,) = [n for n in names if n != "--test"]
    return source


CKPT_HEADER = (
    "dataset,algorithm,environment,trial,hparams,step,test_acc,train_val_acc,oracle_val_acc\n"
)


@pytest.fixture(scope="module")
def f(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The bad (and a few good) input files every case draws from."""
    root = tmp_path_factory.mktemp("bad")
    results = (EXAMPLES / "results.csv").read_text(encoding="utf-8")
    lines = results.splitlines()

    def put(name: str, content: str | bytes) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    folder = root / "folder"
    folder.mkdir()
    pct = [lines[0]] + [
        ",".join([*r.split(",")[:-1], f"{100 * float(r.split(',')[-1]):.2f}"]) for r in lines[1:]
    ]
    two_envs = "algorithm,environment,error,split\n" + "".join(
        f"{a},{e},{0.1 + 0.1 * i},loo\n" for i, a in enumerate(["A", "B"]) for e in ("e1", "e2")
    )
    tree = root / "tree"
    for dom in ("autumn", "dim", "grass"):
        for cls in ("cat", "dog"):
            (tree / dom / cls).mkdir(parents=True)
            for i in range(3):
                (tree / dom / cls / f"{i}.jpg").touch()
    sweep = root / "sweep"
    put("sweep/run1/results.jsonl", BINARY)
    put("sweep/run1/done", "done\n")
    split = put("split.csv", "path,class,domain,role\nautumn/cat/0.jpg,cat,autumn,test\n")
    put("long_sweep/run1/results.jsonl", LONG_JSONL.replace('"algorithm"', '"args": {}, "x"'))
    put("long_sweep/run1/done", "done\n")
    toml = (EXAMPLES / "study.toml").read_text(encoding="utf-8")
    victim = put("victim.txt", "never written through a link\n")
    link = root / "link.txt"
    link.symlink_to(victim)
    linked_study = root / "linked-study"  # report.html planted as a link to a file elsewhere
    linked_study.mkdir()
    (linked_study / "report.html").symlink_to(victim)
    return SimpleNamespace(
        root=root,
        victim=victim,
        link=link,
        linked_study=linked_study,
        missing=root / "missing.csv",
        missing_dir=root / "no-such-folder",
        folder=folder,
        afile=put("afile.txt", "not a folder\n"),
        binary=put("binary.csv", BINARY),
        binary_npz=put("binary.npz", BINARY),
        binary_toml=put("binary.toml", BINARY),
        utf16=put("utf16.csv", results.encode("utf-16")),
        utf16_toml=put("utf16.toml", toml.encode("utf-16")),
        empty=put("empty.csv", ""),
        empty_toml=put("empty.toml", ""),
        results=put("results.csv", results),
        results_pct=put("results_pct.csv", "\n".join(pct) + "\n"),
        ragged=put("ragged.csv", lines[0] + "\n" + lines[1] + ",extra,fields\n"),
        broken_jsonl=put("broken.jsonl", '{"algorithm": "ERM", "environment": \n'),
        long_jsonl=put("long.jsonl", LONG_JSONL),
        long_json=put("long.json", f"[{LONG_JSONL.strip()}]"),
        long_csv=put("long.csv", f"algorithm,environment,error,split\nERM,e1,1{LONG_ZEROS},loo\n"),
        long_sweep=root / "long_sweep",
        nan=put("nan.csv", lines[0] + "\n" + lines[1].rsplit(",", 1)[0] + ",nan\n"),
        wrong_cols=put("wrong.csv", "model,score\nERM,0.3\n"),
        two_envs=put("two_envs.csv", two_envs),
        bad_toml=put("bad.toml", 'name = "x\nsteps = \n'),
        toml_steps0=put("steps0.toml", toml.replace("steps = 300", "steps = 0")),
        toml_long=put("long.toml", toml.replace("steps = 300", f"steps = 1{LONG_ZEROS}")),
        toml_unknown_alg=put("alg.toml", toml.replace('"VREx"', '"NoSuchAlgorithm"')),
        toml_2envs=put(  # ratio 1:1 at scale 1: one major and one minor environment
            "twoenv.toml",
            'algorithms = ["ERM"]\nseeds = [0]\nsteps = 5\nmeasures = ["worst_plus_gap"]\n'
            '[[scenarios]]\nfamily = "sr-cmnist"\nratio = "1:1"\n',
        ),
        toml_imports_os=put("imports_os.toml", 'imports = ["os"]\n' + toml),
        toml_backend_os=put("backend_os.toml", 'backend = "os"\n' + toml),
        toml_bad_measure=put("measure.toml", toml_measures(toml, '["average", "medain"]')),
        toml_bad_cvar=put("cvar.toml", toml_measures(toml, '["average", "cvar:alpha=2"]')),
        predictions=put("preds.csv", (EXAMPLES / "openworld_predictions.csv").read_text()),
        preds_nan=put("preds_nan.csv", "label,score,is_base,correct\n0,nan,1,1\n1,0.2,0,1\n"),
        preds_wrong=put("preds_wrong.csv", "foo,bar\n1,2\n"),
        preds_txt=put("preds.txt", "label\n1\n"),
        tree=tree,
        sweep=sweep,
        split=split,
        split_preds_wrong=put("split_preds.csv", "file,label\nautumn/cat/0.jpg,cat\n"),
        ckpt_ragged=put("ckpt_ragged.csv", CKPT_HEADER + "D,ERM,0,0,0,100,0.8,0.8,0.8,9,9\n"),
        ckpt_nan=put("ckpt_nan.csv", CKPT_HEADER + "D,ERM,0,0,0,100,nan,0.8,0.8\n"),
        checkpoints_pct=put(
            "ckpt.csv",
            "dataset,algorithm,environment,trial,hparams,step,test_acc,train_val_acc,"
            "oracle_val_acc\nD,ERM,0,0,0,100,85.0,80.0,82.0\n",
        ),
    )


def toml_measures(toml: str, measures: str) -> str:
    """`toml` (examples/study.toml) with its ``measures = [...]`` line made ``measures =
    MEASURES``."""
    lines = toml.splitlines(keepends=True)
    (at,) = [i for i, line in enumerate(lines) if line.startswith("measures = ")]
    lines[at] = f"measures = {measures}\n"
    return "".join(lines)


@dataclass(frozen=True)
class Case:
    command: str  # the leaf command, e.g. "study run"
    category: str
    args: object  # a function of the fixture namespace returning the arguments after command

    def argv(self, f: SimpleNamespace) -> list[str]:
        return [*self.command.split(), *map(str, self.args(f))]  # type: ignore[operator]


def C(command: str, category: str, args) -> Case:  # noqa: N802  (reads as a table row)
    return Case(command, category, args)


PRESET = ["--preset", "quick"]
CASES = [
    # --- measures --------------------------------------------------------------------------
    C("measures", "missing file", lambda f: [f.missing]),
    # a newline and a bidi override in the path: still one line (shown as \n, \u202e)
    C("measures", "missing file", lambda f: [f.root / "no\nsuch\u202e.csv"]),
    C("measures", "folder instead of file", lambda f: [f.folder]),
    C("measures", "binary file", lambda f: [f.binary]),
    C("measures", "UTF-16 file", lambda f: [f.utf16]),
    C("measures", "empty file", lambda f: [f.empty]),
    C("measures", "malformed CSV", lambda f: [f.ragged]),
    C("measures", "malformed JSON", lambda f: [f.broken_jsonl]),
    C("measures", "malformed JSON", lambda f: [f.long_jsonl]),
    C("measures", "malformed JSON", lambda f: [f.long_json]),
    C("measures", "NaN values", lambda f: [f.nan]),
    C("measures", "wrong columns", lambda f: [f.wrong_cols]),
    C("measures", "percentages as fractions", lambda f: [f.results_pct]),
    C("measures", "fractions under --percent", lambda f: [f.results, "--percent"]),
    C("measures", "unknown name", lambda f: [f.results, "--measures", "no_such_measure"]),
    C("measures", "out-of-range number", lambda f: [f.results, "--confidence", "1.5"]),
    C("measures", "out-of-range number", lambda f: [f.results, "--bootstrap", "-1"]),
    C("measures", "N<3 for worst+gap", lambda f: [f.two_envs, "--measures", "worst_plus_gap"]),
    C("measures", "folder as output file", lambda f: [f.results, "--output", f.folder]),
    # --- variance ----------------------------------------------------------------------------
    C("variance", "missing file", lambda f: [f.missing]),
    C("variance", "folder instead of file", lambda f: [f.folder]),
    C("variance", "binary file", lambda f: [f.binary]),
    C("variance", "UTF-16 file", lambda f: [f.utf16]),
    C("variance", "empty file", lambda f: [f.empty]),
    C("variance", "malformed CSV", lambda f: [f.ckpt_ragged]),
    C("variance", "NaN values", lambda f: [f.ckpt_nan]),
    C("variance", "wrong columns", lambda f: [f.results]),
    C("variance", "percentages as fractions", lambda f: [f.checkpoints_pct]),
    C("variance", "unknown name", lambda f: [f.results, "--oracle", "psychic"]),
    C("variance", "folder as output file", lambda f: [f.results, "--output", f.folder]),
    # --- shift (its data-set option is looked up: another change renames it) ------------------
    C("shift", "missing file", lambda f: [SRC, f"npz:{f.missing}", "--test", "digits"]),
    C("shift", "binary file", lambda f: [SRC, f"npz:{f.binary_npz}", "--test", "digits"]),
    C("shift", "folder instead of file", lambda f: [SRC, f"npz:{f.folder}", "--test", "digits"]),
    C("shift", "unknown name", lambda f: [SRC, "nosuch:x", "--test", "digits"]),
    C("shift", "unknown name", lambda f: [SRC, "sr-cmnist:e=0.1", "--test", "sr-cmnist:e=0.123"]),
    C(
        "shift",
        "out-of-range number",
        lambda f: [SRC, "digits", "--test", "digits", "--n-steps", "0"],
    ),
    C(
        "shift",
        "folder as output file",
        lambda f: [SRC, "digits", "--test", "digits", "-o", f.folder],
    ),
    # --- report ------------------------------------------------------------------------------
    C("report", "missing file", lambda f: [f.missing, "--out", f.root / "r.html"]),
    C("report", "binary file", lambda f: [f.binary, "--out", f.root / "r.html"]),
    C("report", "UTF-16 file", lambda f: [f.utf16, "--out", f.root / "r.html"]),
    C("report", "empty file", lambda f: [f.empty, "--out", f.root / "r.html"]),
    C("report", "folder instead of file", lambda f: [f.folder, "--out", f.root / "r.html"]),
    C("report", "malformed CSV", lambda f: [f.ragged, "--out", f.root / "r.html"]),
    C(
        "report",
        "fractions under --percent",
        lambda f: [f.results, "--percent", "--out", f.root / "r.html"],
    ),
    C("report", "unknown name", lambda f: [f.preds_txt, "--out", f.root / "r.html"]),
    C(
        "report",
        "existing file as --out folder",
        lambda f: [f.results, "--out", f.afile / "r.html"],
    ),
    C("report", "folder as output file", lambda f: [f.results, "--out", f.folder]),
    # --- import domainbed ---------------------------------------------------------------------
    C("import domainbed", "missing file", lambda f: [f.missing_dir]),
    C("import domainbed", "file instead of folder", lambda f: [f.results]),
    C("import domainbed", "empty folder", lambda f: [f.folder]),
    C("import domainbed", "binary file", lambda f: [f.sweep]),
    C("import domainbed", "malformed JSON", lambda f: [f.long_sweep]),
    C("import domainbed", "unknown name", lambda f: [f.sweep, "--selection", "psychic"]),
    C("import domainbed", "folder as output file", lambda f: [f.sweep, "--output", f.folder]),
    # --- openworld -----------------------------------------------------------------------------
    C("openworld score", "missing file", lambda f: [f.missing]),
    C("openworld score", "folder instead of file", lambda f: [f.folder]),
    C("openworld score", "binary file", lambda f: [f.binary]),
    C("openworld score", "binary file", lambda f: [f.binary_npz]),
    C("openworld score", "UTF-16 file", lambda f: [f.utf16]),
    C("openworld score", "empty file", lambda f: [f.empty]),
    C("openworld score", "NaN values", lambda f: [f.preds_nan]),
    C("openworld score", "wrong columns", lambda f: [f.preds_wrong]),
    C("openworld score", "unknown name", lambda f: [f.preds_txt]),
    C(
        "openworld score",
        "out-of-range number",
        lambda f: [f.predictions, "--base-classes", "0-99"],
    ),
    C(
        "openworld score",
        "folder as output file",
        lambda f: [f.predictions, "--base-classes", "0-2", "-o", f.folder],
    ),
    C("openworld ratio-study", "missing file", lambda f: [f.missing, "--base-classes", "0-2"]),
    C("openworld ratio-study", "binary file", lambda f: [f.binary, "--base-classes", "0-2"]),
    C(
        "openworld ratio-study",
        "out-of-range number",
        lambda f: [f.predictions, "--base-classes", "0-2", "--n-repeats", "0"],
    ),
    C(
        "openworld ratio-study",
        "malformed value",
        lambda f: [f.predictions, "--base-classes", "0-2", "--ratios", "1:x"],
    ),
    C(
        "openworld make-features",
        "unknown name",
        lambda f: [
            "--train-out",
            f.root / "tr.npz",
            "--test-out",
            f.root / "te.npz",
            "--source",
            "nosuch:x",
        ],
    ),
    C(
        "openworld make-features",
        "out-of-range number",
        lambda f: [
            "--train-out",
            f.root / "tr.npz",
            "--test-out",
            f.root / "te.npz",
            "--n-shots",
            "0",
        ],
    ),
    C(
        "openworld make-features",
        "existing file as --out folder",
        lambda f: ["--train-out", f.afile / "tr.npz", "--test-out", f.root / "te.npz"],
    ),
    C("openworld train-gmop", "missing file", lambda f: [f.missing, "--out", f.root / "m.npz"]),
    C("openworld train-gmop", "binary file", lambda f: [f.binary_npz, "--out", f.root / "m.npz"]),
    C(
        "openworld train-gmop",
        "folder instead of file",
        lambda f: [f.folder, "--out", f.root / "m.npz"],
    ),
    C("openworld evaluate", "missing file", lambda f: [f.missing]),
    C("openworld evaluate", "binary file", lambda f: [f.binary_npz]),
    C("openworld evaluate", "folder instead of file", lambda f: [f.folder]),
    # --- study -------------------------------------------------------------------------------
    C("study run", "missing file", lambda f: [f.missing, "--out", f.root / "s"]),
    C("study run", "folder instead of file", lambda f: [f.folder, "--out", f.root / "s"]),
    C("study run", "binary file", lambda f: [f.binary_toml, "--out", f.root / "s"]),
    C("study run", "UTF-16 file", lambda f: [f.utf16_toml, "--out", f.root / "s"]),
    C("study run", "empty file", lambda f: [f.empty_toml, "--out", f.root / "s"]),
    C("study run", "malformed TOML", lambda f: [f.bad_toml, "--out", f.root / "s"]),
    C("study run", "malformed TOML", lambda f: [f.toml_long, "--out", f.root / "s"]),
    C("study run", "out-of-range number", lambda f: [f.toml_steps0, "--out", f.root / "s"]),
    C(
        "study run",
        "out-of-range number",
        lambda f: [*PRESET, "--workers", "0", "--out", f.root / "s"],
    ),
    C(
        "study run",
        "out-of-range number",
        lambda f: [*PRESET, "--workers", "99999999999999999999", "--out", f.root / "s"],
    ),
    C("study run", "unknown name", lambda f: [f.toml_unknown_alg, "--out", f.root / "s"]),
    C("study run", "unknown name", lambda f: ["--preset", "huge", "--out", f.root / "s"]),
    C(
        "study run",
        "unknown name",
        lambda f: [*PRESET, "--precision", "fp8", "--out", f.root / "s"],
    ),
    C(
        "study run",
        "unknown name",
        lambda f: [*PRESET, "--executor", "cloud", "--out", f.root / "s"],
    ),
    C("study run", "N<3 for worst+gap", lambda f: [f.toml_2envs, "--out", f.root / "s"]),
    C("study run", "unusable user code", lambda f: [f.toml_imports_os, "--out", f.root / "s"]),
    C("study run", "unusable user code", lambda f: [f.toml_backend_os, "--out", f.root / "s"]),
    C("study run", "unknown name", lambda f: [f.toml_bad_measure, "--out", f.root / "s"]),
    C("study run", "out-of-range number", lambda f: [f.toml_bad_cvar, "--out", f.root / "s"]),
    C("study estimate", "unusable user code", lambda f: [f.toml_imports_os]),
    C("study estimate", "unusable user code", lambda f: [f.toml_backend_os]),
    C("study run", "existing file as --out folder", lambda f: [*PRESET, "--out", f.afile]),
    C("study run", "existing file as --out folder", lambda f: [*PRESET, "--out", f.afile / "s"]),
    C("study run", "existing file as --out folder", lambda f: [*PRESET, "--out", f.afile / "a\nb"]),
    C("study status", "missing file", lambda f: [f.missing_dir]),
    C("study status", "file instead of folder", lambda f: [f.afile]),
    C("study status", "empty folder", lambda f: [f.folder]),
    C("study analyze", "missing file", lambda f: [f.missing_dir]),
    C("study analyze", "file instead of folder", lambda f: [f.afile]),
    C("study analyze", "empty folder", lambda f: [f.folder]),
    C("study measures", "missing file", lambda f: [f.missing_dir]),
    C("study measures", "file instead of folder", lambda f: [f.afile]),
    C("study measures", "empty folder", lambda f: [f.folder]),
    C("study measures", "unknown name", lambda f: [f.folder, "--measures", "no_such_measure"]),
    C("study measures", "out-of-range number", lambda f: [f.folder, "--bootstrap", "-1"]),
    C("study measures", "folder as output file", lambda f: [f.folder, "--output", f.folder]),
    C("study merge", "missing file", lambda f: [f.missing_dir, "--out", f.root / "m"]),
    C("study merge", "file instead of folder", lambda f: [f.afile, "--out", f.root / "m"]),
    C("study merge", "existing file as --out folder", lambda f: [f.folder, "--out", f.afile]),
    C("study summary", "missing file", lambda f: [f.missing_dir]),
    C("study summary", "empty folder", lambda f: [f.folder]),
    C("study summary", "out-of-range number", lambda f: [f.folder, "--bootstrap", "0"]),
    C("study export", "missing file", lambda f: [f.missing_dir, "--out", f.root / "e.csv"]),
    C("study export", "folder as output file", lambda f: [f.folder, "--out", f.folder]),
    C("study verify", "missing file", lambda f: [f.missing_dir]),
    C("study verify", "file instead of folder", lambda f: [f.afile]),
    C("study verify", "empty folder", lambda f: [f.folder]),
    C("study estimate", "missing file", lambda f: [f.missing]),
    C("study estimate", "folder instead of file", lambda f: [f.folder]),
    C("study estimate", "binary file", lambda f: [f.binary_toml]),
    C("study estimate", "UTF-16 file", lambda f: [f.utf16_toml]),
    C("study estimate", "malformed TOML", lambda f: [f.bad_toml]),
    C("study estimate", "malformed TOML", lambda f: [f.toml_long]),
    C("study estimate", "out-of-range number", lambda f: [*PRESET, "--steps-fraction", "0"]),
    C("study estimate", "out-of-range number", lambda f: [*PRESET, "--workers", "100000000000"]),
    C("study estimate", "unknown name", lambda f: [*PRESET, "--algorithms", "NoSuchAlgorithm"]),
    # --- envs ----------------------------------------------------------------------------------
    C("envs list", "folder as output file", lambda f: ["--output", f.folder]),
    C("envs list", "existing file as --out folder", lambda f: ["--output", f.afile / "x.txt"]),
    C("envs show", "unknown name", lambda f: ["no-such-family"]),
    C("envs show", "unknown name", lambda f: ["cmnist", "--scale", "2"]),
    C("envs show", "out-of-range number", lambda f: ["sr-cmnist", "--scale", "0"]),
    C("envs show", "out-of-range number", lambda f: ["sr-cmnist", "--scale", "100000"]),
    C("envs show", "malformed value", lambda f: ["sr-cmnist", "--ratio", "three"]),
    C("envs show", "malformed value", lambda f: ["corrupted", "--pattern", "x-y"]),
    C("envs show", "out-of-range number", lambda f: ["corrupted", "--severity", "9"]),
    C("envs show", "missing file", lambda f: ["sr-cmnist", "--source", f"mnist:{f.missing_dir}"]),
    C("envs preview", "folder as output file", lambda f: ["sr-cmnist", "--out", f.folder]),
    C("envs preview", "unknown name", lambda f: ["no-such-family", "--out", f.root / "p.png"]),
    C(
        "envs preview",
        "out-of-range number",
        lambda f: ["sr-cmnist", "--out", f.root / "p.png", "--per-env", "0"],
    ),
    # --- protocols ----------------------------------------------------------------------------
    C("protocols classic", "missing file", lambda f: [f.missing_dir, "--out", f.root / "sp.csv"]),
    C(
        "protocols classic",
        "file instead of folder",
        lambda f: [f.afile, "--out", f.root / "sp.csv"],
    ),
    C("protocols classic", "empty folder", lambda f: [f.folder, "--out", f.root / "sp.csv"]),
    C(
        "protocols classic",
        "unknown name",
        lambda f: [f.tree, "--test", "moon", "--out", f.root / "sp.csv"],
    ),
    C(
        "protocols classic",
        "out-of-range number",
        lambda f: [f.tree, "--test", "dim", "--val-fraction", "2", "--out", f.root / "sp.csv"],
    ),
    C(
        "protocols classic",
        "folder as output file",
        lambda f: [f.tree, "--test", "dim", "--out", f.folder],
    ),
    C(
        "protocols flexible-random",
        "empty folder",
        lambda f: [f.folder, "--out", f.root / "sp.csv"],
    ),
    C(
        "protocols flexible-random",
        "missing file",
        lambda f: [f.missing_dir, "--out", f.root / "s.csv"],
    ),
    C(
        "protocols flexible-random",
        "out-of-range number",
        lambda f: [f.tree, "--n-dominant", "50", "--out", f.root / "sp.csv"],
    ),
    C(
        "protocols flexible-compositional",
        "empty folder",
        lambda f: [f.folder, "--out", f.root / "sp.csv"],
    ),
    C(
        "protocols flexible-compositional",
        "out-of-range number",
        lambda f: [f.tree, "--n-exclusive", "50", "--out", f.root / "sp.csv"],
    ),
    C("protocols evaluate", "missing file", lambda f: [f.missing, f.split_preds_wrong]),
    C("protocols evaluate", "folder instead of file", lambda f: [f.folder, f.split_preds_wrong]),
    C("protocols evaluate", "binary file", lambda f: [f.binary, f.split_preds_wrong]),
    C("protocols evaluate", "UTF-16 file", lambda f: [f.utf16, f.split_preds_wrong]),
    C("protocols evaluate", "binary file", lambda f: [f.split, f.binary]),
    C("protocols evaluate", "UTF-16 file", lambda f: [f.split, f.utf16]),
    C("protocols evaluate", "empty file", lambda f: [f.empty, f.split_preds_wrong]),
    C("protocols evaluate", "wrong columns", lambda f: [f.results, f.split_preds_wrong]),
    C("protocols evaluate", "wrong columns", lambda f: [f.split, f.split_preds_wrong]),
    # --- a symbolic link where a file is to be written (never written through) ----------------
    C("measures", "symbolic link as output", lambda f: [f.results, "--output", f.link]),
    C("variance", "symbolic link as output", lambda f: [f.results, "--output", f.link]),
    C("report", "symbolic link as output", lambda f: [f.results, "--out", f.link]),
    C("openworld score", "symbolic link as output", lambda f: [f.predictions, "--curve", f.link]),
    C("openworld train-gmop", "symbolic link as output", lambda f: [f.binary_npz, "--out", f.link]),
    C(
        "openworld evaluate",
        "symbolic link as output",
        lambda f: [f.binary_npz, "--predictions", f.link],
    ),
    C("study run", "symbolic link as output", lambda f: [*PRESET, "--out", f.linked_study]),
]
SRC = _shift_source_option()


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.command}-{c.category}-{i}" for i, c in enumerate(CASES)]
)
def test_bad_input_is_one_error_line_with_status_2(case: Case, f: SimpleNamespace) -> None:
    argv = case.argv(f)
    _assert_refused(*_invoke(argv), argv)


def test_a_link_named_as_output_is_named_and_left_alone(f: SimpleNamespace) -> None:
    """Every "symbolic link as output" case names the link, and its target stays as it was
    (bytes and modification time; `oodeval._files`)."""
    before = (f.victim.read_bytes(), f.victim.stat().st_mtime_ns)
    cases = [c for c in CASES if c.category == "symbolic link as output"]
    assert len(cases) >= 7
    for case in cases:
        code, _, stderr = _invoke(case.argv(f))
        assert code == 2 and "is a symbolic link; oodeval does not write through" in stderr, stderr
    assert (f.victim.read_bytes(), f.victim.stat().st_mtime_ns) == before
    assert sorted(p.name for p in f.linked_study.iterdir()) == ["report.html"]


def test_every_command_has_a_case() -> None:
    covered = {c.command for c in CASES}
    missing = sorted(set(_commands()) - covered)
    assert not missing, f"commands without a bad-input case: {missing}"


# Through a real process: what reaches the terminal is exactly the one line.
SUBPROCESS_CASES = [
    ("protocols evaluate", "binary file"),
    ("measures", "UTF-16 file"),
    ("study run", "existing file as --out folder"),
    ("study estimate", "folder instead of file"),
    ("envs show", "out-of-range number"),
]


@pytest.mark.parametrize(("command", "category"), SUBPROCESS_CASES)
def test_bad_input_through_a_real_process(command: str, category: str, f: SimpleNamespace):
    case = next(c for c in CASES if c.command == command and c.category == category)
    argv = case.argv(f)
    done = subprocess.run(
        [sys.executable, "-m", "oodeval.cli.main", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    _assert_refused(done.returncode, done.stdout, done.stderr, argv)


# --- the messages say the real problem -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["protocols", "evaluate", "{binary}", "{split}"], "is not UTF-8 text (a binary file"),
        (["measures", "{utf16}"], "is not UTF-8 text (UTF-16 text with a byte-order mark)"),
        (["study", "run", "{folder}", "--out", "{root}/s"], "is a folder, not a file"),
        (["study", "run", "--preset", "quick", "--out", "{afile}"], "is a file, not a folder"),
        (["envs", "show", "corrupted", "--pattern", "x-y"], "malformed pattern 'x-y'"),
        (["measures", "{results}", "--percent"], "fractions, not percentages; drop --percent"),
        (["envs", "show", "sr-cmnist", "--scale", "100000"], "use a scale of at most 333"),
        (["study", "run", "{toml_imports_os}", "--out", "{root}/s"], "module 'os' registers "),
        (["study", "estimate", "{toml_backend_os}"], "backend 'os' lacks ['build_scenario', "),
        (["measures", "{long_jsonl}"], "line 1 is not valid JSON (a number longer than 4300 di"),
        (["measures", "{long_json}"], "is not valid JSON (a number longer than 4300 digits)"),
        (["measures", "{long_csv}"], "line 2: error is infinite (algorithm ERM, environment e1)"),
        (["study", "estimate", "{toml_long}"], "is not valid TOML: a number longer than 4300 "),
        (["study", "run", "{toml_bad_measure}", "--out", "{root}/s"], "unknown measure(s) 'me"),
        (["study", "run", "{toml_bad_cvar}", "--out", "{root}/s"], "measures: "),
        (
            ["study", "run", "--preset", "quick", "--out", "/proc/oodeval-x"],
            "cannot create the study folder /proc/oodeval-x (",
        ),
    ],
)
def test_messages_name_the_real_problem(argv: list[str], expected: str, f: SimpleNamespace):
    argv = [a.format(**vars(f)) for a in argv]
    code, _, stderr = _invoke(argv)
    assert code == 2 and expected in stderr, stderr


def test_long_lists_in_errors_are_capped(f: SimpleNamespace) -> None:
    """100,000 unknown measure names give a short line that counts the rest."""
    names = ",".join(f"m{i}" for i in range(100_000))
    code, _, stderr = _invoke(["measures", str(f.results), "--measures", names])
    assert code == 2 and len(stderr) < 400, stderr[:400]
    assert "m0, m1, m2, m3, m4, m5 and 99,994 more" in stderr


def test_mixed_scales_under_percent_name_the_algorithm(f: SimpleNamespace, tmp_path: Path):
    """Under --percent, one algorithm written as fractions among percentages is named."""
    lines = f.results_pct.read_text(encoding="utf-8").splitlines()
    fixed = [lines[0]]
    for row in lines[1:]:
        cells = row.split(",")
        if cells[0] == "IRM":
            cells[-1] = repr(float(cells[-1]) / 100)
        fixed.append(",".join(cells))
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("\n".join(fixed) + "\n", encoding="utf-8")
    assert any(r.startswith("IRM,") for r in fixed)
    code, _, stderr = _invoke(["measures", str(mixed), "--percent"])
    assert code == 0, stderr
    notes = [line for line in stderr.splitlines() if "--percent:" in line]
    assert len(notes) == 1 and "IRM has every error <= 1" in notes[0], stderr
    code, _, stderr = _invoke(["measures", str(f.results_pct), "--percent"])
    assert code == 0 and "--percent:" not in stderr, stderr


def test_hints_name_only_options_that_exist() -> None:
    """Every `--option` a message of oodeval names is an option of some command, or one of the
    external tools' options listed here (Slurm's, Ray's, DomainBed's)."""
    options: set[str] = set()
    for cmd in _commands(leaves_only=False).values():
        for param in cmd.params:  # type: ignore[attr-defined]
            options.update(param.opts)
            options.update(getattr(param, "secondary_opts", []))
    external = {"--array", "--cpus-per-task", "--gpus-per-node", "--name", "--head", "--single"}
    external |= {"--help", "--n-", "--no-"}  # prefixes: --n-THINGS, --no-FLAG
    unknown: dict[str, str] = {}
    for path in sorted((ROOT / "oodeval").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", node.value):
                    if name not in options | external:
                        unknown[name] = f"{path.relative_to(ROOT)}:{node.lineno}"
    assert not unknown, f"messages name options no command has: {unknown}"


def test_library_messages_name_no_option_of_one_command() -> None:
    """`study analyze` reaches the measures' range check; it has no --percent, so the check's
    message must not tell the user to pass one."""
    from oodeval.errors import OodevalError
    from oodeval.measures.domain import worst_plus_gap

    with pytest.raises(OodevalError) as caught:
        worst_plus_gap([[10.0, 20.0, 30.0]])
    assert "--percent" not in str(caught.value) and "divide them by 100" in str(caught.value)


def test_case_counts_by_category() -> None:
    """CONTRIBUTING.md's "Bad input" section quotes these counts; they are counted here, not
    typed."""
    counts = Counter(c.category for c in CASES)
    by_category = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    listed = ", ".join(f"{name} {n}" for name, n in by_category)
    text = " ".join((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").split())
    assert f"runs {len(CASES)} bad-input cases over all {len(_commands())} commands" in text
    assert f"by category: {listed}." in text
    assert f"{len(SUBPROCESS_CASES)} of them also run as a real" in text


def test_the_text_reader_keeps_utf8_and_names_what_else_it_found(tmp_path: Path) -> None:
    """UTF-8 with or without a byte-order mark reads the same; Latin-1 and UTF-32 are named."""
    from oodeval._text import read_text
    from oodeval.errors import OodevalError

    text = "algorithm,environment\nÉcole,e=0.10\n"
    plain, marked, latin, wide = (tmp_path / n for n in ("a.csv", "b.csv", "c.csv", "d.csv"))
    plain.write_bytes(text.encode("utf-8"))
    marked.write_bytes(text.encode("utf-8-sig"))
    latin.write_bytes(text.encode("latin-1"))
    wide.write_bytes(text.encode("utf-32"))
    assert read_text(plain) == read_text(marked) == text
    with pytest.raises(OodevalError, match=r"\(byte 0xc9 at offset 22 is not UTF-8\)"):
        read_text(latin)
    with pytest.raises(OodevalError, match=r"\(UTF-32 text with a byte-order mark\)"):
        read_text(wide)


# --- numbers in a study config: 0, -1, 1e20 and NaN of every numeric key --------------------------
NUMBERS_TOML = {
    "seeds": "seeds = [1]",
    "steps": "steps = 5",
    "data_seed": "data_seed = 1",
    "batch_size": "batch_size = 8",
    "eval_every": "eval_every = 5",
    "holdout_fraction": "holdout_fraction = 0.2",
    "scale": "scale = 1",
    "n_per_given": "n_per_given = 50",
    "n_eval": "n_eval = 50",
    "eval_fraction": "eval_fraction = 0.2",
}
NUMBERS_CONFIG = """name = "numbers"
source = "digits"
algorithms = ["ERM"]
{seeds}
{steps}
{data_seed}
[trainer]
{batch_size}
{eval_every}
{holdout_fraction}
[[scenarios]]
family = "sr-cmnist"
ratio = "3:1"
size = 8
{scale}
{n_per_given}
{n_eval}
{eval_fraction}
"""
#: 0 is a good seed; every other value here is refused.
NUMBER_CASES = [
    (key, value)
    for key in NUMBERS_TOML
    for value in ("0", "-1", "1e20", "99999999999999999999", "nan", "inf")
    if not (value == "0" and key in ("seeds", "data_seed"))
]


def _numbers_config(key: str | None = None, value: str = "") -> str:
    lines = dict(NUMBERS_TOML)
    if key is not None:
        lines[key] = f"{key} = [{value}]" if key == "seeds" else f"{key} = {value}"
    return NUMBERS_CONFIG.format(**lines)


def test_the_numbers_config_is_valid_as_written(tmp_path: Path) -> None:
    """The base of the cases below passes validation: each case's refusal is its own number's."""
    from oodeval.study import load_config, validate_config

    path = tmp_path / "numbers.toml"
    path.write_text(_numbers_config(), encoding="utf-8")
    validate_config(load_config(path))


@pytest.mark.parametrize(("key", "value"), NUMBER_CASES)
def test_a_bad_number_in_a_config_is_refused_before_the_folder(
    key: str, value: str, tmp_path: Path
) -> None:
    config = tmp_path / "numbers.toml"
    config.write_text(_numbers_config(key, value), encoding="utf-8")
    out = tmp_path / "s"
    argv = ["study", "run", str(config), "--out", str(out), "--no-progress"]
    code, stdout, stderr = _invoke(argv)
    _assert_refused(code, stdout, stderr, argv)
    assert not out.exists()
    # the line names the key and its rule (or the images it would need), not a Python error
    said = stderr.split("]: ", 1)[-1]  # after a scenario's label, which names every key
    assert re.search(rf"{key}(\[0\])? must|too few images|{key} {value}", said), stderr
