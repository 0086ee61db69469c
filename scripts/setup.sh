#!/usr/bin/env bash
# Create .venv and install oodeval with everything its jobs and tests need, on a fresh machine.
# torch is installed first and pinned to the CPU build on this machine's disk; installing it later
# (as a dependency of something else) would fetch a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
# every extra the tests and the docs build need (not clip: open_clip_torch pulls torchvision)
.venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -e ".[report,train,corruptions,test,ray,slurm,docs,torchmetrics]"
