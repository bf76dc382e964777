#!/usr/bin/env bash
# `make test-fast`: ruff, then the unit tier (tests/tier_guard.py: no process, no network socket) and the check of
# which modules of plugins/raylift no unit test imports (tests/tier_coverage.py). Under a minute here once the
# control venv exists; builds that venv when it is missing, never the runtime venv or llama.cpp.
# Extra args go to pytest (e.g. -k release, or test paths: then the coverage check is left out).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
if [ ! -x "$CONTROL_VENV/bin/python" ] || [ ! -f "$CONTROL_VENV/.raylift-stamp" ]; then
  bash tools/setup.sh control || exit 1
elif [ "$(cat requirements/control.lock pyproject.toml | sha256sum | cut -c1-16)" != "$(cat "$CONTROL_VENV/.raylift-stamp")" ]; then
  # the stamp tools/setup.sh writes (stamp_of control.lock pyproject.toml); rebuilding takes minutes, so not here
  say "the control venv predates requirements/control.lock or pyproject.toml: testing with it as it is" \
    "(bash tools/setup.sh control rebuilds it)"
fi
# The KubeRay CRDs the manifest tests validate against (found, or fetched pinned and checksummed), as tools/test.sh.
RAYLIFT_KUBERAY_CRDS=$(bash tools/kuberay_crds.sh) || exit 1
export RAYLIFT_KUBERAY_CRDS
export PATH=$CONTROL_VENV/bin:$PATH
mkdir -p var/test-tmp

ruff_rc=0
"$CONTROL_VENV/bin/ruff" check --no-cache . || ruff_rc=1

# Only folders that hold unit tests are collected (the system tier's hold none); given paths replace them.
where=(tests)
for dir in tests/integration tests/entrypoints tests/multiworker tests/install; do
  [ -d "$dir" ] && where+=("--ignore=$dir")
done
for arg in "$@"; do [[ $arg != -* && -e ${arg%%::*} ]] && where=(); done
rm -f var/test-tmp/unit.xml
"$CONTROL_VENV/bin/python" -m pytest -m unit -q -ra -p no:cacheprovider --basetemp=var/test-tmp/unit \
  --junitxml=var/test-tmp/unit.xml "${where[@]}" "$@"
unit_rc=$?
# pytest's exit code 5 ("no tests collected") fails, as in tools/test.sh: a tier that runs nothing must not pass.
if [ "$unit_rc" -eq 5 ]; then echo "pytest collected no unit tests for: ${where[*]} $*"; unit_rc=1; fi

coverage_rc=0
if [ "$#" -eq 0 ]; then  # the whole unit tier ran: which modules of plugins/raylift none of it imports
  "$CONTROL_VENV/bin/python" -m tests.tier_coverage var/test-tmp/unit.xml || coverage_rc=1
fi
say "ruff: rc $ruff_rc; unit tier: rc $unit_rc; unit coverage of plugins/raylift: rc $coverage_rc"
[ "$ruff_rc" -eq 0 ] && [ "$unit_rc" -eq 0 ] && [ "$coverage_rc" -eq 0 ]
