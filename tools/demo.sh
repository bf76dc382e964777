#!/usr/bin/env bash
# The main job on the embedded `local` target, from a fresh clone:
#   set up both environments -> generate the tiny model -> run raylift_deploy with real Airflow,
#   real Ray and real vLLM on CPU -> print the endpoint, a curl that works, and the benchmark table.
# The endpoint keeps serving afterwards; `make teardown` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/airflow_env.sh
T0=$SECONDS
say "1/4 environments"; bash tools/setup.sh all
say "2/4 tiny model"; "$RUNTIME_VENV/bin/python" tools/make_tiny_model.py "$RAYLIFT_HOME/models/tiny-llama" | tail -1
say "3/4 airflow db"; airflow db migrate >"$RAYLIFT_HOME/airflow-db.log" 2>&1 || { tail -20 "$RAYLIFT_HOME/airflow-db.log"; exit 1; }
say "4/4 raylift_deploy on target=local (cluster start, vLLM engine start and benchmark take a few minutes)"
CONF=${RAYLIFT_CONF:-'{}'}
set +e
airflow dags test raylift_deploy --conf "$CONF" 2>&1 | tee "$RAYLIFT_HOME/demo.log" \
  | grep --line-buffered -E "raylift|staging|benchmark|cluster|Serve|smoke|Marking run|ERROR|Error" | grep -v "^\s*$" | cut -c1-220
rc=${PIPESTATUS[0]}
set -e
"$CONTROL_VENV/bin/python" -m raylift.demo_summary --log "$RAYLIFT_HOME/demo.log"
say "done in $((SECONDS - T0)) s"
exit "$rc"
