"""The tiny models the serve-app tests load, generated here on first use and cached under .cache/.

Like ``tests.harness.local_stack.tiny_model_path`` (the tiny Llama): nothing is downloaded; the
generators run in the runtime environment, which has torch/transformers/gguf.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.harness.local_stack import ROOT, tiny_model_path

RUNTIME_PYTHON = ROOT / ".cache/venvs/runtime/bin/python"


def tiny_t5_path() -> Path:
    """A tiny random T5 + locally trained tokenizer (tools/make_tiny_t5.py), for the translator."""
    path = Path(os.environ.get("RAYLIFT_TINY_T5", ROOT / ".cache/tiny-t5"))
    if not (path / "model.safetensors").exists():
        subprocess.run(
            [str(RUNTIME_PYTHON), str(ROOT / "tools/make_tiny_t5.py"), str(path)], check=True, timeout=300
        )
    return path


def tiny_gguf_dir() -> Path:
    """A folder holding the tiny Llama as one GGUF file (tools/make_tiny_gguf.py), for llama.cpp."""
    path = Path(os.environ.get("RAYLIFT_TINY_GGUF", ROOT / ".cache/tiny-gguf"))
    if not any(path.glob("*.gguf")):
        subprocess.run(
            [str(RUNTIME_PYTHON), str(ROOT / "tools/make_tiny_gguf.py"), str(tiny_model_path()), str(path)],
            check=True,
            timeout=300,
        )
    return path


def run_in_runtime(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the runtime env's Python, serve_apps/ importable (as in a Ray replica)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "serve_apps"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [str(RUNTIME_PYTHON), "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT / "serve_apps",
    )
