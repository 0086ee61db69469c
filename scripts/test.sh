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
.venv/bin/ruff check .
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
