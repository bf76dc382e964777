#!/usr/bin/env bash
# Set up everything the tests need, then run them. Extra args go to pytest (e.g. -k staging).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
# The KubeRay CRDs the manifest tests validate against (found, or fetched pinned and checksummed), else stop here.
RAYLIFT_KUBERAY_CRDS=$(bash tools/kuberay_crds.sh) || exit 1
export RAYLIFT_KUBERAY_CRDS
RAYLIFT_DEFER_BYTECODE=1 bash tools/setup.sh all || exit 1
# The runtime venv's bytecode (25 s here) and llama-cpp-python, compiled from its sdist the first time (~95 s alone
# here): in the background (`setup.sh llamacpp` does both, in that order), beside the static checks and the lanes;
# only the llama.cpp tests wait for it (LLAMACPP_TESTS in tests/conftest.py, which reads the rc file).
mkdir -p var/test-tmp
rm -f var/test-tmp/llamacpp.rc
(bash tools/setup.sh llamacpp; echo $? >var/test-tmp/llamacpp.rc.part && mv var/test-tmp/llamacpp.rc.part var/test-tmp/llamacpp.rc) \
  >var/test-tmp/llamacpp.log 2>&1 &
llamacpp_pid=$!
export RAYLIFT_LLAMACPP_RC=$PWD/var/test-tmp/llamacpp.rc
llamacpp_verdict() {  # the background build's own result (its log on failure)
  wait "$llamacpp_pid"
  local rc
  rc=$(cat var/test-tmp/llamacpp.rc 2>/dev/null || echo 1)
  if [ "$rc" -ne 0 ]; then say "llama-cpp-python build failed (rc $rc):"; tail -n 30 var/test-tmp/llamacpp.log; fi
  return "$rc"
}
"$RUNTIME_VENV/bin/python" tools/make_tiny_model.py "$RAYLIFT_CACHE/tiny-llama" >/dev/null || exit 1
export RAYLIFT_TINY_MODEL=$RAYLIFT_CACHE/tiny-llama
export PATH=$CONTROL_VENV/bin:$PATH
say "running tests"
PYTEST=("$CONTROL_VENV/bin/python" -m pytest -ra --durations=40 -p no:cacheprovider)

# pytest's exit code 5 ("no tests collected") fails a whole part of the suite, which must not pass silently.
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
  llamacpp_verdict || [ "$rc" -ne 0 ] || rc=1
  if [ "$rc" -eq 5 ]; then echo "pytest collected no tests for: $*"; exit 0; fi
  exit "$rc"
fi

# The whole suite in three lanes at once, each in its own temp folder, log and JUnit XML (var/test-tmp/<lane>.xml,
# which bench/suite_timing.py reads; lane timings: bench/README.md).
# Lane 1, in the background: the tests that start vLLM engines, one after another (engines must not start together).
HEAVY=(tests/integration tests/entrypoints)
# Lane 2, in the background: the multi-worker Airflow, and the integration and entry-point modules that start no vLLM
# engine (the entry-point ones on Airflows of their own: the AWS quick starts on 28xxx, the UI's on 284xx).
MULTI_INTEGRATION=(tests/integration/test_ray_token_auth.py tests/integration/test_translator_and_llamacpp.py
                   tests/integration/test_aws_shaped_cluster.py tests/entrypoints/test_aws_quickstarts.py
                   tests/entrypoints/test_ui_trigger.py)
# tests/install (the wheel into fresh Airflow venvs: pip and CPU, no engine) joins lane 2 where it exists.
INSTALL=()
[ -d tests/install ] && INSTALL=(tests/install)
MULTI=(tests/multiworker "${MULTI_INTEGRATION[@]}" "${INSTALL[@]}")
"${PYTEST[@]}" "${HEAVY[@]}" "${MULTI_INTEGRATION[@]/#/--ignore=}" --basetemp=var/test-tmp/heavy \
  --junitxml=var/test-tmp/heavy.xml >var/test-tmp/heavy.log 2>&1 &
heavy_pid=$!
RAYLIFT_ENTRYPOINTS_PORT_BASE=28400 "${PYTEST[@]}" "${MULTI[@]}" --basetemp=var/test-tmp/multi \
  --junitxml=var/test-tmp/multi.xml >var/test-tmp/multi.log 2>&1 &
multi_pid=$!
# Lane 3, in the foreground: the static checks, then every other test; then each background lane's log follows.
say "static checks: ruff, import-linter (the layers in pyproject.toml), mypy"
static_rc=0
"$CONTROL_VENV/bin/ruff" check --no-cache . || static_rc=1
PYTHONPATH=plugins "$CONTROL_VENV/bin/lint-imports" --no-cache || static_rc=1
"$CONTROL_VENV/bin/mypy" --cache-dir var/mypy-cache || static_rc=1
say "static checks: rc $static_rc"
"${PYTEST[@]}" tests "${HEAVY[@]/#/--ignore=}" --ignore=tests/multiworker "${INSTALL[@]/#/--ignore=}" \
  --basetemp=var/test-tmp/light --junitxml=var/test-tmp/light.xml
light_rc=$?
say "unit tests done (rc $light_rc); the multi-worker Airflow (lane 2) so far, then as it goes:"
tail -n +1 -f --pid="$multi_pid" var/test-tmp/multi.log
wait "$multi_pid"
multi_rc=$?
say "multi-worker done (rc $multi_rc); the heavy part (integration, entry points) so far, then as it goes:"
tail -n +1 -f --pid="$heavy_pid" var/test-tmp/heavy.log
wait "$heavy_pid"
heavy_rc=$?
llamacpp_verdict; llamacpp_rc=$?
verdict "$light_rc" "the unit tests"; light_rc=$?
verdict "$multi_rc" "the multi-worker tests"; multi_rc=$?
verdict "$heavy_rc" "the integration + entry-point tests"; heavy_rc=$?
say "static checks: rc $static_rc; unit tests: rc $light_rc; multi-worker: rc $multi_rc; integration + entry points: rc $heavy_rc; llama-cpp-python build: rc $llamacpp_rc"
[ "$static_rc" -eq 0 ] && [ "$light_rc" -eq 0 ] && [ "$multi_rc" -eq 0 ] && [ "$heavy_rc" -eq 0 ] && [ "$llamacpp_rc" -eq 0 ]
