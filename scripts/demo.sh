#!/usr/bin/env bash
# Install from scratch (see setup.sh), run the worst+gap measure study's `quick` preset on real
# MNIST (source = "auto": the folder $OODEVAL_MNIST names, else ../shared/data/mnist beside the
# checkout, else the MNIST test set bundled with oodeval, so a clone with nothing beside it
# works), write the paper's analyses (CSV + markdown) and the HTML report, and print the report's
# path (`study run --analyze` writes the analysis and the report and prints the verdict; the note
# on the data is said once). Re-running resumes: finished units are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${OODEVAL_DEMO_OUT:-out/quick}"
.venv/bin/oodeval study run --preset quick --out "$OUT" --analyze
