#!/usr/bin/env bash
# Install oodeval as a stranger would, and use it from outside the repository.
#
#   bash scripts/check_wheel.sh [SWEEP_DIR]
#
# Builds the wheel and the sdist into a temporary folder, checks the sdist holds what its tests
# need, creates a fresh virtual environment WITHOUT torch, installs the wheel with the `report`
# extra (dependencies from PyPI), and from a folder outside the repository runs
#   oodeval measures <repo>/examples/results.csv
#   oodeval report   <repo>/examples/results.csv --out results.html
#   oodeval import domainbed SWEEP_DIR
# (SWEEP_DIR: the argument, else ../shared/fixtures/domainbed-vlcs-sweep beside the checkout,
# else the repository's examples/domainbed-sweep), then checks that
#   oodeval study run --preset quick --out study
# refuses with exactly one `error:` line naming oodeval[train], exit status 2, and creates
# nothing. Prints the wheel's size and the install time; exits non-zero on any failure.
# PYTHON picks the interpreter (default python3). CI calls it from .ci/run.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/oodeval-wheel.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "check_wheel: FAILED: $*" >&2; exit 1; }
say() { echo "check_wheel: $*"; }
PIP_QUIET=(--quiet --disable-pip-version-check)

sweep="${1:-}"
if [ -z "$sweep" ]; then
    for candidate in "$REPO/../shared/fixtures/domainbed-vlcs-sweep" "$REPO/examples/domainbed-sweep"; do
        if [ -d "$candidate" ]; then sweep="$candidate"; break; fi
    done
fi
[ -n "$sweep" ] && [ -d "$sweep" ] || fail "no DomainBed sweep folder: pass one as the argument"
sweep="$(cd "$sweep" && pwd)"

# -- build -------------------------------------------------------------------------------------
"$PYTHON" -m venv "$TMP/build-env"
"$TMP/build-env/bin/python" -m pip install "${PIP_QUIET[@]}" build
"$TMP/build-env/bin/python" -m build --outdir "$TMP/dist" "$REPO" >"$TMP/build.log" 2>&1 \
    || { tail -30 "$TMP/build.log" >&2; fail "python -m build"; }
wheel="$(ls "$TMP"/dist/oodeval-*.whl)"
sdist="$(ls "$TMP"/dist/oodeval-*.tar.gz)"
say "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB, $(stat -c %s "$wheel") bytes)"
say "built $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB)"

# -- the sdist holds what the tests need (each path that the repository has) --------------------
tar tzf "$sdist" | sed 's|^[^/]*/||' >"$TMP/sdist.txt"
for path in tests/conftest.py tests/fixtures examples/results.csv conftest.py scripts/setup.sh \
    docs mkdocs.yml benchmarks LICENSE NOTICE CITATION.cff CHANGELOG.md CONTRIBUTING.md \
    oodeval/py.typed oodeval/data/mnist oodeval/report/templates; do
    if [ -e "$REPO/$path" ]; then
        grep -q "^$path" "$TMP/sdist.txt" || fail "the sdist lacks $path"
    fi
done
say "the sdist holds the tests, fixtures, examples, scripts and the package data"

# -- a fresh environment without torch -----------------------------------------------------------
"$PYTHON" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install "${PIP_QUIET[@]}" --upgrade pip
start=$(date +%s%N)
"$TMP/venv/bin/python" -m pip install "${PIP_QUIET[@]}" "${wheel}[report]"
install_ms=$((($(date +%s%N) - start) / 1000000))
install_s="$((install_ms / 1000)).$(printf %03d $((install_ms % 1000)))"
say "installed the wheel with the report extra in ${install_s} s"
if "$TMP/venv/bin/python" -c "import torch" 2>/dev/null; then
    fail "torch is installed in the fresh environment; the check needs one without it"
fi
OODEVAL="$TMP/venv/bin/oodeval"

# -- use it from a folder outside the repository -----------------------------------------------
mkdir "$TMP/work"
cd "$TMP/work"
version="$("$OODEVAL" --version)"
expected="oodeval $(cd "$REPO" && "$TMP/venv/bin/python" -c \
    'import re; print(re.search(r"__version__ = \"(.+?)\"", open("oodeval/__init__.py").read())[1])')"
[ "$version" = "$expected" ] || fail "--version says '$version', the source '$expected'"

"$OODEVAL" measures "$REPO/examples/results.csv" >measures.txt || fail "oodeval measures"
grep -q "worst_plus_gap" measures.txt || fail "oodeval measures printed no worst_plus_gap column"
say "oodeval measures: ok ($(wc -l <measures.txt) lines)"

"$OODEVAL" report "$REPO/examples/results.csv" --out results.html 2>report.err \
    || { cat report.err >&2; fail "oodeval report"; }
[ -s results.html ] || fail "oodeval report wrote no results.html"
say "oodeval report: ok (results.html, $(du -k results.html | cut -f1) KiB)"

"$OODEVAL" import domainbed "$sweep" >domainbed.txt 2>domainbed.err \
    || { cat domainbed.err >&2; fail "oodeval import domainbed $sweep"; }
[ -s domainbed.txt ] || fail "oodeval import domainbed printed nothing"
say "oodeval import domainbed $sweep: ok ($(wc -l <domainbed.txt) lines)"

# -- a command needing the train extra refuses in one line, exit 2, nothing created -------------
set +e
"$OODEVAL" study run --preset quick --out study >run.out 2>run.err
status=$?
set -e
[ "$status" -eq 2 ] || { cat run.out run.err >&2; fail "study run exited $status, not 2"; }
[ ! -s run.out ] || { cat run.out >&2; fail "study run printed on stdout"; }
[ "$(wc -l <run.err)" -eq 1 ] || { cat run.err >&2; fail "study run printed more than one line"; }
grep -q "^error: .*pip install 'oodeval\[train\]'" run.err || { cat run.err >&2; fail "no oodeval[train] line"; }
[ ! -e study ] || fail "study run created the folder 'study'"
say "oodeval study run without torch: $(cat run.err)"

say "wheel size $(stat -c %s "$wheel") bytes; install time ${install_s} s; all checks passed"
