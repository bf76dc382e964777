#!/usr/bin/env bash
# Run every benchmark in bench/ one after another (each prints a table and writes bench/results/*.json).
# They measure ratios within one run, so run them on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
bash tools/setup.sh all
"$RUNTIME_VENV/bin/python" tools/make_tiny_model.py "$RAYLIFT_CACHE/tiny-llama" >/dev/null
export RAYLIFT_TINY_MODEL=$RAYLIFT_CACHE/tiny-llama
export PATH=$CONTROL_VENV/bin:$PATH
for script in serve_vs_vllm airflow_overhead staging_throughput loadgen_headroom; do
  say "bench/$script.py"
  "$CONTROL_VENV/bin/python" "bench/$script.py"
done
