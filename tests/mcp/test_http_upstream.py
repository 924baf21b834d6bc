"""A Streamable HTTP MCP server behind the gateway (`url:` + `headers:` with `${VAR}`), next to a
`url:` server that is not there: the missing one costs only its own tools."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
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


def recording_app(seen: list[dict[str, str]]):
    """The SDK's MCPServer over Streamable HTTP, noting every request's headers."""
    server = MCPServer("clock")

    @server.tool(description="The time, always noon.")
    def now() -> str:
        return "12:00"

    inner = server.streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            seen.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
        await inner(scope, receive, send)

    return app


async def test_an_http_server_gets_only_the_headers_its_config_names_never_the_clients(
    tmp_path: Path, default_suite, monkeypatch
):
    from gatekeeper.mcp.bounded_http import PROTOCOL_HEADERS

    seen: list[dict[str, str]] = []
    monkeypatch.setenv("GATEKEEPER_MCP_KEY", KEY)
    client_headers = {
        "Cookie": "session=client-cookie-9f2",
        "X-Client-Secret": "client-secret-4d1",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "X-Forwarded-For": "203.0.113.9",
        "User-Agent": "client-agent-77",
    }
    with ThreadedServer(recording_app(seen)) as clock:
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
      headers: {{Authorization: "Bearer {SECRET}", X-Tenant: tenant-1}}
      timeout_s: 5
"""
        )
        with running_proxy(load_settings(config)) as proxy:

            async def listed() -> list[str]:
                async with connect(proxy.url + "/mcp/small-model", headers=client_headers) as session:
                    return await tool_names(session)

            assert await await_until(listed, "the clock's tools", timeout_s=30) == ["clock__now"]
            async with connect(proxy.url + "/mcp/small-model", headers=client_headers) as session:
                assert (await session.call_tool("clock__now", {})).content[0].text == "12:00"
    assert seen
    allowed = PROTOCOL_HEADERS | {"authorization", "x-tenant"}
    for headers in seen:
        assert set(headers) <= allowed | {h for h in headers if h.startswith("mcp-param-")}, headers
        assert headers["authorization"] == f"Bearer {SECRET}" and headers["x-tenant"] == "tenant-1"
        shown = json.dumps(headers)
        for value in (*client_headers.values(), KEY):
            assert value not in shown, (value, headers)


async def test_the_transport_removes_every_header_neither_configured_nor_the_protocols():
    from gatekeeper.mcp.bounded_http import BoundedTransport

    seen: list[dict[str, str]] = []
    with ThreadedServer(recording_app(seen)) as server:
        # Headers something on the way out adds (an SDK release, an instrumentation, a client's).
        added = {"cookie": "c=1", "x-client-secret": "client-secret-4d1", "traceparent": "00-ab-cd-01"}
        configured = {"authorization": f"Bearer {SECRET}"}
        async with httpx2.AsyncClient(
            headers=configured | added, transport=BoundedTransport(2**20, configured)
        ) as client:
            await client.post(f"http://127.0.0.1:{server.port}/mcp", json={}, headers={"mcp-param-region": "eu"})
    (headers,) = seen
    assert headers["authorization"] == f"Bearer {SECRET}" and headers["mcp-param-region"] == "eu"
    assert not set(added) & set(headers), headers
