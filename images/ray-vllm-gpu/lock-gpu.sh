#!/usr/bin/env bash
# Regenerate images/ray-vllm-gpu/gpu-constraints.txt: the pins the CUDA build of vLLM needs on top of
# requirements/runtime.lock. Resolves with pip against PyPI for CPython 3.11 / manylinux x86_64
# (metadata only, --dry-run), dropping a runtime.lock pin only when pip reports it conflicts with an
# exact pin of vLLM-GPU or CUDA torch. Needs network access to PyPI; takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/env.sh
PY=${PY:-$CONTROL_VENV/bin/python}
VLLM_VERSION=0.32.0
RAY_VERSION=$(awk -F== '$1 == "ray" {print $2}' requirements/runtime.lock)
out=images/ray-vllm-gpu/gpu-constraints.txt
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
platforms=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for g in 5 12 17 18 24 25 26 27 28 29 30 31 32 33 34 35; do platforms+=(--platform "manylinux_2_${g}_x86_64"); done
drop="^$"  # runtime.lock names to drop (regex alternation), grown from pip's conflict reports
for attempt in $(seq 1 10); do
  grep -viE "^(${drop})==" requirements/runtime.lock >"$work/constraints.txt"
  if env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "$PY" -m pip install --isolated --dry-run --ignore-installed \
      --report "$work/report.json" --use-feature=fast-deps --index-url https://pypi.org/simple \
      --only-binary=:all: --python-version 3.11 "${platforms[@]}" --target "$work/none" \
      -c "$work/constraints.txt" "vllm==$VLLM_VERSION" "ray[serve]==$RAY_VERSION" >"$work/log" 2>&1; then
    break
  fi
  name=$(grep -oE 'user requested \(constraint\) [A-Za-z0-9_.-]+==' "$work/log" | head -1 | sed -E 's/.*\) //; s/==$//')
  [ -n "$name" ] || { tail -20 "$work/log" >&2; echo "lock-gpu: unresolvable, see above" >&2; exit 1; }
  say "runtime.lock pin of $name conflicts with vLLM-GPU; overriding it (attempt $attempt)"
  drop="$drop|$name"
done
[ -f "$work/report.json" ] || { echo "lock-gpu: gave up after 10 attempts" >&2; exit 1; }
{
  sed -n '/^#/p' "$out"  # keep the explanatory header
  "$PY" - "$work/report.json" requirements/runtime.lock <<'PY'
import json, re, sys
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
resolved = {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in json.load(open(sys.argv[1]))["install"]}
lock = {}
for line in open(sys.argv[2]):
    if "==" in line and not line.startswith((" ", "#")):
        name, version = line.strip().split("==")
        lock[norm(name)] = version
for name in sorted(resolved):
    if lock.get(name) != resolved[name]:
        print(f"{name}=={resolved[name]}")
PY
} >"$work/new.txt"
mv "$work/new.txt" "$out"
say "wrote $out ($(grep -c '==' "$out") pins)"
