#!/usr/bin/env bash
# Install oodeval into .venv (see setup.sh), lint, type-check and run the test suite; extra
# arguments go to pytest (`bash scripts/test.sh tests/test_docs.py -k tutorial`).
#
#   bash scripts/test.sh            # changes nothing outside the checkout
#   bash scripts/test.sh --system   # also installs the system packages some tests need
#
# A few tests need programs from outside Python: the report's real-browser tests Debian's
# Chromium and ChromeDriver, the tests marked `slurm` a running Slurm cluster (its daemons and
# their database). Only with --system, or CI=true in the environment (.ci/run sets it), does this
# script install those packages with apt-get (sudo when not root) and start a one-node cluster
# (scripts/slurm_cluster.sh: munge, MariaDB, slurmdbd, slurmctld, slurmd; stopped on exit unless
# it ran before). Without it, what is missing is skipped, said in one line before the suite and
# by each test's skip reason (pytest -rs). With CI=true a test needing a missing extra, program
# or ../shared data fails, not skips.
# The suite includes every module's doctests (pyproject: --doctest-modules).
set -euo pipefail
cd "$(dirname "$0")/.."

system=""
pytest_args=()
for arg in "$@"; do
    if [ "$arg" = "--system" ]; then system=1; else pytest_args+=("$arg"); fi
done
ci="$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')"
case "$ci" in "" | 0 | false | no) ;; *) system=1 ;; esac

has_chromium() {
    { command -v chromium || command -v chromium-browser; } >/dev/null && command -v chromedriver >/dev/null
}

bash scripts/setup.sh
if [ -n "$system" ]; then
    if ! has_chromium; then
        if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
    # Once the cluster runs, OODEVAL_REQUIRE_SLURM=1 makes the slurm tests fail, not skip.
    slurm_start=$SECONDS
    slurm_was_up=""
    bash scripts/slurm_cluster.sh status 2>/dev/null && slurm_was_up=1
    if slurm_env="$(bash scripts/slurm_cluster.sh start)"; then
        eval "$slurm_env"
        export OODEVAL_REQUIRE_SLURM=1
        [ -n "$slurm_was_up" ] || trap 'bash scripts/slurm_cluster.sh stop' EXIT
        echo "test.sh: Slurm cluster ready in $((SECONDS - slurm_start)) s; the slurm tests run" >&2
    else
        echo "test.sh: NO SLURM CLUSTER (reason above): the tests marked slurm will be SKIPPED" >&2
    fi
else
    skipped=()
    has_chromium || skipped+=("the report's real-browser tests (no chromium/chromedriver)")
    if bash scripts/slurm_cluster.sh status 2>/dev/null; then
        eval "$(bash scripts/slurm_cluster.sh env)"
    elif ! command -v sinfo >/dev/null || ! sinfo -h >/dev/null 2>&1; then
        skipped+=("the tests marked slurm (no Slurm cluster answers)")
    fi
    if [ "${#skipped[@]}" -gt 0 ]; then
        joined="$(printf '%s; ' "${skipped[@]}")"
        echo "test.sh: skipping ${joined%; } - run 'bash scripts/test.sh --system' to install" \
            "Chromium and Slurm with apt-get and start a local Slurm cluster for them" >&2
    fi
fi
.venv/bin/ruff check .
# the type checker, in mypy's default mode ([tool.mypy] in pyproject.toml); any error stops here
.venv/bin/python -m mypy oodeval
.venv/bin/python -m pytest -q -rs -p no:cacheprovider ${pytest_args[@]+"${pytest_args[@]}"}
