#!/usr/bin/env bash
# Stop what `make demo` started: runs raylift_teardown (scale to zero, stop the local Ray cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/airflow_env.sh
bash tools/setup.sh control
airflow dags test raylift_teardown --conf "${RAYLIFT_CONF:-{\}}" 2>&1 | grep -E "teardown|ERROR|Marking run" | cut -c1-200
