#!/usr/bin/env bash
# Install from scratch (see setup.sh), run the worst+gap measure study's `quick` preset on real
# MNIST (source = "auto": the folder $OODEVAL_MNIST names, else ../shared/data/mnist beside the
# checkout, else the MNIST test set bundled with oodeval, so a clone with nothing beside it
# works), write the paper's analyses (CSV + markdown) and the HTML report, and print the report's
# path (`study run --analyze` writes the analysis and the report and prints the verdict; the note
# on the data is said once). Re-running resumes: finished units are skipped.
#
# The quick study (8 algorithms, 1 seed, 500 steps) is too small to separate the measures. So the
# demo ends with a bigger real run made by oodeval and shipped as examples/paper-cpu-scale1.csv
# (paper-cpu's Scale-1 grid: 14 algorithms x 3 ratios x 3 seeds; made again with the commands in
# examples/paper-cpu-scale1.toml): its report is written from the stored errors (nothing trains),
# and `study summary` says in one line per study what each shows, with its intervals.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${OODEVAL_DEMO_OUT:-out/quick}"
BIG="${OODEVAL_DEMO_BIG_OUT:-out/paper-cpu-scale1}"
.venv/bin/oodeval study run --preset quick --out "$OUT" --analyze
.venv/bin/oodeval report examples/paper-cpu-scale1.csv --out "$BIG/report.html"
echo
echo "What each study shows (worst+gap against average; [95% intervals]):"
.venv/bin/oodeval study summary "$OUT" examples/paper-cpu-scale1.csv
