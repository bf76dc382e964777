#!/usr/bin/env bash
# Set up everything the tests need, then run them. Extra args go to pytest (e.g. -k staging).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
# The KubeRay CRDs the manifest tests validate against: found, or fetched (pinned, checksummed); else one message
# naming RAYLIFT_KUBERAY_CRDS and a stop here (before the minutes of setup), never ~50 failures one by one
RAYLIFT_KUBERAY_CRDS=$(bash tools/kuberay_crds.sh) || exit 1
export RAYLIFT_KUBERAY_CRDS
bash tools/setup.sh all || exit 1
bash tools/setup.sh llamacpp || exit 1  # the llama.cpp app's tests need it
"$RUNTIME_VENV/bin/python" tools/make_tiny_model.py "$RAYLIFT_CACHE/tiny-llama" >/dev/null || exit 1
export RAYLIFT_TINY_MODEL=$RAYLIFT_CACHE/tiny-llama
export PATH=$CONTROL_VENV/bin:$PATH
say "running tests"
PYTEST=("$CONTROL_VENV/bin/python" -m pytest -ra --durations=40 -p no:cacheprovider)

# pytest exit code 5 is "no tests collected". With a filter that is the filter's doing; for a whole
# part of the suite it means the suite is broken, which must not pass silently.
verdict() {  # verdict RC WHAT
  if [ "$1" -eq 5 ]; then echo "pytest collected no tests for: $2"; return 1; fi
  return "$1"
}

if [ "$#" -gt 0 ]; then  # a chosen subset: one pytest run
  # Paths given: run just those; only options (e.g. -k staging): run them over the whole tests folder.
  where=(tests)
  for arg in "$@"; do [[ $arg != -* && -e ${arg%%::*} ]] && where=(); done
  "${PYTEST[@]}" "${where[@]}" "$@"
  rc=$?
  if [ "$rc" -eq 5 ]; then echo "pytest collected no tests for: $*"; exit 0; fi
  exit "$rc"
fi

# The whole suite in three lanes at once, each part in its own temp folder and log. Lane 1, the heavy part: the tests
# that start vLLM engines (real Ray + vLLM stacks, one after another: they share 2 cores and must not start engines
# together). Lane 2: the multi-worker Airflow (tests/multiworker: Postgres, Redis, Celery, two workers, two Ray
# clusters serving the translator app, no vLLM engine) and the integration modules that start no vLLM engine
# (Ray's token auth serves a hello app, ports 32xxx, below the ephemeral range; the translator and llama.cpp apps
# side by side, ports 23xxx). Lane 3, in the foreground:
# static checks, then everything that needs no cluster and mostly waits on other processes (moto, the runtime env).
# Lanes 2 and 3 mostly wait (about 0.8 and 0.4 of a core): one after the other they took 37-44 min, side by side
# they end by ~30. Lane 1 is serial at about one core and sets the suite's length (bench/README.md, session 21).
# The three together keep both cores busy until lane 2 ends (~21 min), then ~1.5-1.9 until the unit tests end; lane 1
# then runs alone at ~1 core (bench/README.md, session 25). Moving work between lanes, a higher CPU priority for
# lane 1 (session 24: within its run-to-run spread; the starved unit tests failed timing checks) or running the
# entry points first (session 25: 42 min 48 s against 42 min 22 s) barely changed the suite's length: less work did.
# Session 27: the integration stacks fork their Airflow CLI from one warm Airflow (bench/harness/airflow_forkserver.py):
# ~15 CPU-s less per `dags test`, the engine lane 40 min 16 s -> 38 min 15-46 s.
# Each lane's log follows once the foreground lane ends.
mkdir -p var/test-tmp
HEAVY=(tests/integration tests/entrypoints)
# The AWS-shaped Ray clusters (tests/integration/test_aws_shaped_cluster.py: Ray + Serve with stand-in replicas, no
# vLLM engine, ports 20500-20709) run in lane 2 too: it ends well before the engine lane, and they mostly wait on Ray.
MULTI_INTEGRATION=(tests/integration/test_ray_token_auth.py tests/integration/test_translator_and_llamacpp.py
                   tests/integration/test_aws_shaped_cluster.py)
MULTI=(tests/multiworker "${MULTI_INTEGRATION[@]}")
"${PYTEST[@]}" "${HEAVY[@]}" "${MULTI_INTEGRATION[@]/#/--ignore=}" --basetemp=var/test-tmp/heavy \
  >var/test-tmp/heavy.log 2>&1 &
heavy_pid=$!
"${PYTEST[@]}" "${MULTI[@]}" --basetemp=var/test-tmp/multi >var/test-tmp/multi.log 2>&1 &
multi_pid=$!
say "static checks: ruff, import-linter (the layers in pyproject.toml), mypy"
static_rc=0
"$CONTROL_VENV/bin/ruff" check --no-cache . || static_rc=1
PYTHONPATH=plugins "$CONTROL_VENV/bin/lint-imports" --no-cache || static_rc=1
"$CONTROL_VENV/bin/mypy" --cache-dir var/mypy-cache || static_rc=1
say "static checks: rc $static_rc"
"${PYTEST[@]}" tests "${HEAVY[@]/#/--ignore=}" --ignore=tests/multiworker --basetemp=var/test-tmp/light
light_rc=$?
say "unit tests done (rc $light_rc); the multi-worker Airflow (lane 2) so far, then as it goes:"
tail -n +1 -f --pid="$multi_pid" var/test-tmp/multi.log
wait "$multi_pid"
multi_rc=$?
say "multi-worker done (rc $multi_rc); the heavy part (integration, entry points) so far, then as it goes:"
tail -n +1 -f --pid="$heavy_pid" var/test-tmp/heavy.log
wait "$heavy_pid"
heavy_rc=$?
verdict "$light_rc" "the unit tests"; light_rc=$?
verdict "$multi_rc" "the multi-worker tests"; multi_rc=$?
verdict "$heavy_rc" "the integration + entry-point tests"; heavy_rc=$?
say "static checks: rc $static_rc; unit tests: rc $light_rc; multi-worker: rc $multi_rc; integration + entry points: rc $heavy_rc"
[ "$static_rc" -eq 0 ] && [ "$light_rc" -eq 0 ] && [ "$multi_rc" -eq 0 ] && [ "$heavy_rc" -eq 0 ]
