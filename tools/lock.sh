#!/usr/bin/env bash
# Re-resolve the pinned lock files from requirements/*.in (needs only package metadata).
# torch is resolved against the local CPU wheel and left out of the runtime lock:
# setup installs it with pip (uv does not see the local wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
ensure_uv
wheel=$(ls /opt/wheels/torch-"${TORCH_VERSION}"+cpu-*.whl 2>/dev/null | head -1)
ovr=$(mktemp); echo "torch @ file://${wheel}" >"$ovr"
common=(--python-version 3.11 --python-platform x86_64-manylinux_2_31 -q)
"$UV" pip compile "${common[@]}" --override "$ovr" --no-emit-package torch \
  requirements/runtime.in -o requirements/runtime.lock
"$UV" pip compile "${common[@]}" requirements/dev.in -o requirements/control.lock
rm -f "$ovr"
# Static-analysis tools whose pins clash with Airflow's (checkov) live in their own venv.
"$UV" pip compile "${common[@]}" requirements/tools.in -o requirements/tools.lock
