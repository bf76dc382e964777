# Airflow settings for raylift's local runs (sourced). Everything binds 127.0.0.1; state under var/.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export RAYLIFT_HOME=${RAYLIFT_HOME:-$RAYLIFT_ROOT/var}
export AIRFLOW_HOME=${AIRFLOW_HOME:-$RAYLIFT_HOME/airflow}
export AIRFLOW__CORE__DAGS_FOLDER=$RAYLIFT_ROOT/dags
export AIRFLOW__CORE__PLUGINS_FOLDER=$RAYLIFT_ROOT/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-4}
export AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG=4
# raylift's waits (the image build, the cluster, the deploy) and the providers' operators defer to the triggerer
# instead of holding a worker: their deferrable default follows this setting.
export AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=${AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE:-True}
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT=${AIRFLOW__API__PORT:-8080}
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:${AIRFLOW__API__PORT}/execution/
export AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=False
# The local stack survives its own load (issue 56): on 2 cores, with a benchmark and a live client running beside
# it (load average 7+), the first trigger of a fresh `airflow standalone` failed before any raylift code ran: the
# task's start call to the execution API timed out at the default 5 s ([workers] execution_api_timeout) and its 5
# retries (1, 3, 7, 15 s apart: airflow/sdk/api/client.py) did not outlast it. A call that answers in time costs the
# same; one that waits costs only waiting. And the DAG processor re-parses every DAG file each 30 s by default: on
# 2 cores that is CPU taken from the engines being measured, for DAG files that change only when raylift is updated.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=${AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT:-30}
export AIRFLOW__WORKERS__EXECUTION_API_RETRIES=${AIRFLOW__WORKERS__EXECUTION_API_RETRIES:-8}
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=${AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL:-120}
export AIRFLOW__LOGGING__LOGGING_LEVEL=${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}
export PATH=$CONTROL_VENV/bin:$PATH
