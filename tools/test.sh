#!/usr/bin/env bash
# Set up everything the tests need, then run them. Extra args go to pytest (e.g. -k staging).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
bash tools/setup.sh all || exit 1
"$RUNTIME_VENV/bin/python" tools/make_tiny_model.py "$RAYLIFT_CACHE/tiny-llama" >/dev/null || exit 1
export RAYLIFT_TINY_MODEL=$RAYLIFT_CACHE/tiny-llama
export PATH=$CONTROL_VENV/bin:$PATH
say "running tests"
"$CONTROL_VENV/bin/python" -m pytest tests -ra --durations=15 -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  # pytest: "no tests collected". With a filter that is the filter's doing; for the whole suite it
  # means the suite is broken, which must not pass silently.
  if [ "$#" -gt 0 ]; then echo "pytest collected no tests for: $*"; exit 0; fi
  echo "pytest collected no tests at all: the test suite is broken"; exit 1
fi
exit "$rc"
