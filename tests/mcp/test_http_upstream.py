"""A Streamable HTTP MCP server behind the gateway (`url:` + `headers:` with `${VAR}`), next to a
`url:` server that is not there: the missing one costs only its own tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import await_until, make_profile, running_proxy, seed_store
from gateway_helpers import KEY, connect, tool_names
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from scripted import ThreadedServer, free_port
from starlette.types import Receive, Scope, Send

from gatekeeper.config import load_settings
from gatekeeper.rules.tiers import Tier

SECRET = "clock-secret-7c1"


def clock_app(seen: list[str]):
    """The SDK's MCPServer over Streamable HTTP, answering only requests with the right bearer."""
    server = MCPServer("clock")

    @server.tool(description="The time, always noon.")
    def now() -> str:
        return "12:00"

    @server.tool(description="Set the time.")
    def set_time(value: str) -> str:
        return f"set to {value}"

    inner = server.streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"").decode()
            seen.append(auth)
            if auth != f"Bearer {SECRET}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
        await inner(scope, receive, send)

    return app


async def test_an_http_server_is_reached_with_its_headers_and_a_dead_one_costs_only_its_tools(
    tmp_path: Path, default_suite, monkeypatch
):
    seen: list[str] = []
    monkeypatch.setenv("CLOCK_KEY", SECRET)
    monkeypatch.setenv("GATEKEEPER_MCP_KEY", KEY)
    with ThreadedServer(clock_app(seen)) as clock:
        store = tmp_path / "profiles.json"
        seed_store(store, make_profile("small-model", Tier.SMALL, default_suite))
        config = tmp_path / "gatekeeper.yaml"
        config.write_text(
            f"""
upstream: {{base_url: "http://127.0.0.1:9/v1"}}
store: {store}
mcp:
  api_keys: ["${{GATEKEEPER_MCP_KEY}}"]
  servers:
    clock:
      url: http://127.0.0.1:{clock.port}/mcp
      headers: {{Authorization: "Bearer ${{CLOCK_KEY}}"}}
      timeout_s: 5
    gone:
      url: http://127.0.0.1:{free_port()}/mcp
      timeout_s: 2
tools:
  required_tier:
    "clock.set_*": large
"""
        )
        with running_proxy(load_settings(config)) as proxy:

            async def listed() -> list[str]:
                async with connect(proxy.url + "/mcp/small-model") as session:
                    return await tool_names(session)

            assert await await_until(listed, "the clock's tools", timeout_s=30) == ["clock__now"]
            async with connect(proxy.url + "/mcp/small-model") as session:
                assert (await session.call_tool("clock__now", {})).content[0].text == "12:00"
                with pytest.raises(MCPError) as refused:
                    await session.call_tool("clock__set_time", {"value": "1"})
                assert "needs tier large" in refused.value.message

                async def gone_error() -> str | None:
                    try:
                        await session.call_tool("gone__anything", {})
                    except MCPError as exc:
                        return None if "not connected yet" in exc.message else exc.message
                    return None

                error = await await_until(gone_error, "the dead server's error")
                assert "server 'gone' is unavailable" in error
        assert seen and set(seen) == {f"Bearer {SECRET}"}  # the header, expanded, on every request
