#!/usr/bin/env bash
# Install from scratch (see setup.sh), run the worst+gap measure study's `quick` preset on the
# embedded data (real MNIST from ../shared/data/mnist when present, else scikit-learn's digits),
# write the paper's analyses (CSV + markdown) and the HTML report, and print the report's path.
# Re-running resumes: finished units are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${OODEVAL_DEMO_OUT:-out/quick}"
.venv/bin/oodeval study run --preset quick --out "$OUT" --no-report
.venv/bin/oodeval study analyze "$OUT"
.venv/bin/oodeval report "$OUT" --out "$OUT/report.html"
