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
export AIRFLOW__LOGGING__LOGGING_LEVEL=${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}
export PATH=$CONTROL_VENV/bin:$PATH
