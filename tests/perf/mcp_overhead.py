"""What the MCP gateway adds to a tool call and a listing. Not a test: run it by hand.

    python tests/perf/mcp_overhead.py [--calls 100] [--rounds 10] [--stdio]

One MCP server (the SDK's MCPServer, Streamable HTTP, in this process on its own port) is called
two ways with the official client (`streamable_http_client` + `ClientSession`, one session per
arm, kept open):
  * direct: client -> server;
  * gateway: client -> gatekeeper's /mcp/<model> (a real proxy on a real port, the server
    behind it as a `url:` server) -> server; the tier resolved, the listing filtered and the call
    checked on every request.
With `--stdio` the server runs as a child process over stdio instead: direct is the SDK's
`stdio_client` to one child, the gateway a `command:` server (its own bounded stdio transport,
gatekeeper.mcp.stdio) to another.
Each round times `--calls` sequential `tools/call` (a tool that echoes its argument) and
`tools/list` on each arm, interleaved; each figure is the fastest round's mean wall time per
request (milliseconds): on a shared machine the fastest round is the one least disturbed. Both
servers share the process and the machine, so the difference is the gateway's hop plus its work.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests/mcp")]

import httpx2  # noqa: E402
from conftest import make_profile, running_proxy, seed_store, settings_for  # noqa: E402
from gateway_helpers import KEY  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from scripted import ThreadedServer  # noqa: E402

from gatekeeper.observe.logs import configure as configure_logs  # noqa: E402
from gatekeeper.rules.tiers import Tier  # noqa: E402
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite  # noqa: E402


def echo_server() -> MCPServer:
    server = MCPServer("echo")

    @server.tool(description="Echo the text.")
    def echo(text: str) -> str:
        return text

    for i in range(20):  # a listing of a realistic size
        server.add_tool(lambda text="": text, name=f"tool_{i}", description=f"tool {i}")
    return server


async def timed(n: int, step: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    for _ in range(n):
        await step()
    return (time.perf_counter() - started) / n * 1000


@asynccontextmanager
async def direct_transport(direct_url: str) -> AsyncIterator[Any]:
    """The direct arm's streams: the SDK's own stdio client to a child, or its HTTP client."""
    if direct_url == "stdio":
        async with stdio_client(
            StdioServerParameters(command=sys.executable, args=[__file__, "--serve-stdio"])
        ) as streams:
            yield streams
        return
    async with httpx2.AsyncClient() as plain, streamable_http_client(direct_url, http_client=plain) as streams:
        yield streams


async def measure(direct_url: str, gateway_url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as keyed,
        direct_transport(direct_url) as (dr, dw),
        streamable_http_client(gateway_url, http_client=keyed) as (gr, gw),
        ClientSession(dr, dw) as direct,
        ClientSession(gr, gw) as gated,
    ):
        await direct.initialize()
        await gated.initialize()
        names = {"direct": "echo", "gateway": "echo__echo"}
        for _ in range(rounds):
            for arm, session in (("direct", direct), ("gateway", gated)):
                name = names[arm]
                results.setdefault(f"{arm} tools/call", []).append(
                    await timed(calls, lambda s=session, n=name: s.call_tool(n, {"text": "hi"}))
                )
                results.setdefault(f"{arm} tools/list", []).append(await timed(calls, lambda s=session: s.list_tools()))
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stdio", action="store_true", help="the server over stdio, not Streamable HTTP")
    parser.add_argument("--serve-stdio", action="store_true", help=argparse.SUPPRESS)  # the child itself
    args = parser.parse_args()
    if args.serve_stdio:
        echo_server().run("stdio")
        return
    configure_logs("warning")
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK logs every session at INFO
    suite = load_suite(DEFAULT_SUITE_DIR)
    with ThreadedServer(echo_server().streamable_http_app()) as upstream, tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "profiles.json"
        seed_store(store, make_profile("large-model", Tier.LARGE, suite))
        server: dict[str, Any] = {"url": f"http://127.0.0.1:{upstream.port}/mcp"}
        if args.stdio:
            server = {"command": [sys.executable, __file__, "--serve-stdio"]}
        mcp = {"api_keys": [KEY], "servers": {"echo": server}}
        settings = settings_for("http://127.0.0.1:9/v1", store, mcp=mcp, log_level="warning")
        with running_proxy(settings) as proxy:
            direct_url = "stdio" if args.stdio else f"http://127.0.0.1:{upstream.port}/mcp"
            gateway_url = proxy.url + "/mcp/large-model"

            async def ready() -> None:
                for _ in range(200):
                    async with (
                        httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as http,
                        streamable_http_client(gateway_url, http_client=http) as (r, w),
                        ClientSession(r, w) as s,
                    ):
                        await s.initialize()
                        if (await s.list_tools()).tools:
                            return
                    await asyncio.sleep(0.05)
                raise SystemExit("the gateway never listed the echo server's tools")

            asyncio.run(ready())
            results = asyncio.run(measure(direct_url, gateway_url, args.calls, args.rounds))
    transport = "stdio" if args.stdio else "Streamable HTTP"
    print(
        f"{args.rounds} rounds x {args.calls} sequential requests per arm, the server over {transport}; ms per request (fastest round)"
    )
    for what in ("tools/call", "tools/list"):
        direct = min(results[f"direct {what}"])
        gated = min(results[f"gateway {what}"])
        print(f"  {what:10}  direct {direct:6.2f}   through the gateway {gated:6.2f}   added {gated - direct:+6.2f}")


if __name__ == "__main__":
    main()
