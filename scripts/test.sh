#!/usr/bin/env bash
# Install everything from scratch (see setup.sh), lint, and run the whole test suite.
# The suite includes every module's doctests (pyproject: --doctest-modules). With CI=true in the
# environment (.ci/run sets it) a test needing a missing extra or ../shared data fails, not skips.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The report's real-browser tests need Debian's Chromium and ChromeDriver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# A real one-node Slurm cluster for the tests marked `slurm` (scripts/slurm_cluster.sh installs
# Debian's packages and starts the daemons; stopped on exit unless it ran before). Where it cannot start, those tests
# are skipped with the reason; once it runs, OODEVAL_REQUIRE_SLURM=1 makes them fail, not skip.
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
.venv/bin/ruff check .
.venv/bin/python -m pytest -q -rs -p no:cacheprovider "$@"
