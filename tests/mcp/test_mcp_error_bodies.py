"""The MCP door's errors name a server by its label, never its address, command path or its
connection's words; the log line does (issue 43). A real proxy, the official MCP client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog
from conftest import wait_until
from gateway_helpers import connect, gateway
from mcp.shared.exceptions import MCPError
from scripted import free_port


async def test_an_mcp_server_that_cannot_be_started_or_reached_is_named_by_its_label_only(
    tmp_path: Path, default_suite
):
    port = free_port()
    secret_path = str(tmp_path / "internal-tools" / "bin" / "mcp-vault")
    servers = {
        "vault": {"command": [secret_path, "--serve"], "timeout_s": 2},
        "remote": {"url": f"http://127.0.0.1:{port}/private/mcp", "timeout_s": 2},
    }
    with structlog.testing.capture_logs() as lines, gateway(tmp_path, default_suite, servers) as proxy:
        wait_until(
            lambda: {e.get("server") for e in lines if e["event"] == "mcp_server_down"} >= {"vault", "remote"},
            "both servers to be marked down",
        )
        async with connect(proxy.url + "/mcp/large-model") as session:
            said = []
            for name in ("vault__open", "remote__fetch"):
                with pytest.raises(MCPError) as caught:
                    await session.call_tool(name, {})
                said.append(caught.value.error.message + json.dumps(caught.value.error.data))
    assert "server 'vault' is unavailable: its command cannot be started" in said[0]
    assert "server 'remote' is unavailable" in said[1]
    for private in (secret_path, "internal-tools", str(port), "/private/mcp"):
        assert not any(private in text for text in said), private
    logged = json.dumps([e for e in lines if e["event"] == "mcp_server_down"])
    assert secret_path in logged and f"127.0.0.1:{port}" in logged  # the operator's log says where
