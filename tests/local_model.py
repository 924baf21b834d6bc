"""Shared fixture for tests marked `local_model`: one real llama_cpp server per module.

Import it into a test module (pytest only collects fixtures from conftest.py files
and the module itself):

    from local_model import local_server  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gatekeeper.localmodel import LocalModelServer


@pytest.fixture(scope="module")
def local_server() -> Iterator[LocalModelServer]:
    """A running LocalModelServer (Gemma 3 270M, chatml-function-calling) on loopback."""
    with LocalModelServer() as server:
        yield server
