"""The MCP door's errors name a server by its label, never its address, command path or its
connection's words; the log line does (issue 43). A real proxy, the official MCP client."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import structlog
from conftest import await_until, wait_until
from gateway_helpers import connect, gateway, tool_names
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from scripted import ThreadedServer, free_port
from starlette.types import Message, Receive, Scope, Send


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


TOKEN = "mcp-upstream-token-9f3a2b"
ELSEWHERE = "http://10.20.30.40:8443/internal/mcp"


def garbling_app(port: list[int]):
    """An MCP server over Streamable HTTP whose tools/call answers are no JSON-RPC message: a
    redirect to another address (`redirect`), a truncated body quoting its URL, its credential and
    a path (`garbled`). Everything else is the SDK's MCPServer."""
    server = MCPServer("garbling")
    for name in ("redirect", "garbled"):
        server.add_tool(lambda: "never", name=name, description="Answers garbage.")
    inner = server.streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await inner(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        request = json.loads(body)
        tool = request.get("params", {}).get("name") if request.get("method") == "tools/call" else None
        if tool is None:
            replayed = [{"type": "http.request", "body": body, "more_body": False}]

            async def replay() -> Message:
                return replayed.pop() if replayed else await receive()

            return await inner(scope, replay, send)
        quote = f"http://127.0.0.1:{port[0]}/mcp Bearer {TOKEN} /srv/garbling/app.py"
        if tool == "redirect":
            status, headers, out = 307, [(b"location", ELSEWHERE.encode())], b""
        else:
            status, headers = 200, [(b"content-type", b"application/json")]
            out = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": quote}).encode()[:-2]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


async def test_an_http_server_answering_garbage_or_a_redirect_is_said_in_gatekeeper_s_words(
    tmp_path: Path, default_suite
):
    port: list[int] = []
    with ThreadedServer(garbling_app(port)) as upstream:
        port.append(upstream.port)
        url = f"http://127.0.0.1:{upstream.port}/mcp"
        servers = {"garbling": {"url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}, "timeout_s": 5}}
        with structlog.testing.capture_logs() as lines, gateway(tmp_path, default_suite, servers) as proxy:

            async def listed() -> bool:
                async with connect(proxy.url + "/mcp/large-model") as session:
                    return "garbling__garbled" in await tool_names(session)

            await await_until(listed, "the server's tools", timeout_s=30)
            async with connect(proxy.url + "/mcp/large-model") as session:
                said = {}
                for name in ("redirect", "garbled"):
                    with pytest.raises(MCPError) as caught:
                        await session.call_tool(f"garbling__{name}", {})
                    said[name] = caught.value.error.message + json.dumps(caught.value.error.data)
    assert "it answered with a redirect, which is not followed" in said["redirect"]
    assert "its answer was not a JSON-RPC message" in said["garbled"]
    for private in (ELSEWHERE, "10.20.30.40", str(upstream.port), TOKEN[-6:], "/srv/garbling"):
        assert not any(private in text for text in said.values()), (private, said)
    logged = json.dumps([e for e in lines if e["event"] == "mcp_server_failed"])
    assert ELSEWHERE in logged and "/srv/garbling/app.py" in logged and TOKEN not in logged


CRASHING = """
import os, traceback
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

server = MCPServer("crashing")


def trace() -> str:
    try:
        open(os.path.join(os.path.dirname(__file__), "state", "db.sqlite"))
    except OSError:
        return traceback.format_exc()
    return ""


@server.tool(description="Fails with a JSON-RPC error carrying its traceback.")
def rpc_error() -> str:
    raise MCPError(-32603, trace(), {"trace": trace()})


@server.tool(description="Fails with a tool error carrying its traceback.")
def tool_error() -> str:
    raise ToolError(trace())


server.run("stdio")
"""


async def test_a_stdio_server_s_traceback_names_none_of_its_files(tmp_path: Path, default_suite):
    script = tmp_path / "internal-tools" / "crashing" / "server.py"
    script.parent.mkdir(parents=True)
    script.write_text(CRASHING)
    servers = {"crashing": {"command": [sys.executable, str(script)], "timeout_s": 5}}
    with gateway(tmp_path, default_suite, servers) as proxy:

        async def listed() -> bool:
            async with connect(proxy.url + "/mcp/large-model") as session:
                return "crashing__rpc_error" in await tool_names(session)

        await await_until(listed, "the server's tools", timeout_s=30)
        async with connect(proxy.url + "/mcp/large-model") as session:
            with pytest.raises(MCPError) as caught:
                await session.call_tool("crashing__rpc_error", {})
            failed = await session.call_tool("crashing__tool_error", {})
    said = [caught.value.error.message + json.dumps(caught.value.error.data), failed.model_dump_json()]
    assert failed.is_error and all("FileNotFoundError" in text and "***" in text for text in said), said
    assert not any("internal-tools" in text for text in said), said
