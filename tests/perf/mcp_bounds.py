"""What a flooding MCP server costs the gateway, with the bounds of gatekeeper.mcp.stdio and
without them. Not a test: run it by hand.

    python tests/perf/mcp_bounds.py

Three figures, each the wall time and the peak growth of this process's resident memory (the
gateway runs in this process, on a real port; the servers are tests/mcp/round2_servers.py over
stdio; the official client calls through /mcp/large-model):
  * a server writing 100 MB on one line: through the gateway (16 MiB bound), and through the
    SDK's own `stdio_client` + `ClientSession` (what the gateway used before), given 10 s;
  * a 50 MB result relayed under `max_message_mb: 128` (MCPServer sends it twice: ~100 MB).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests/mcp")]

from conftest import make_profile, running_proxy, seed_store, settings_for  # noqa: E402
from gateway_helpers import KEY  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from test_mcp_round2 import SERVERS, peak_rss_growth, roomy_client  # noqa: E402

from gatekeeper.observe.logs import configure as configure_logs  # noqa: E402
from gatekeeper.rules.tiers import Tier  # noqa: E402
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite  # noqa: E402


async def timed_call(session: ClientSession, tool: str, mb: int, timeout_s: float) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            result = await session.call_tool(tool, {"mb": mb})
        outcome = f"answered {sum(len(getattr(c, 'text', '')) for c in result.content) / 2**20:.0f} MB"
    except TimeoutError:
        outcome = f"no answer within {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001 - the outcome is the figure
        outcome = f"{type(exc).__name__}: {str(exc)[:90]}"
    return time.perf_counter() - started, outcome


async def through_gateway(url: str, tool: str, mb: int) -> None:
    async with roomy_client(url) as session:
        with peak_rss_growth() as grown:
            took, outcome = await timed_call(session, tool, mb, 60)
    print(f"  gateway   {tool:22} {mb:4} MB  {took:6.2f} s  +{grown[0]:5.0f} MB resident  {outcome}")


async def through_the_sdk(folder: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(SERVERS), "flood"], env={"TOY_DIR": str(folder)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        with peak_rss_growth() as grown:
            took, outcome = await timed_call(session, "endless_line", 100, 10)
    print(f"  SDK stdio {'endless_line':22} {100:4} MB  {took:6.2f} s  +{grown[0]:5.0f} MB resident  {outcome}")


def main() -> None:
    configure_logs("error")
    logging.getLogger("mcp").setLevel(logging.CRITICAL)
    suite = load_suite(DEFAULT_SUITE_DIR)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = folder / "profiles.json"
        seed_store(store, make_profile("large-model", Tier.LARGE, suite))
        flood = {"command": [sys.executable, str(SERVERS), "flood"], "env": {"TOY_DIR": tmp}, "timeout_s": 60}
        servers = {"flood": flood, "roomy": flood | {"max_message_mb": 128}}
        settings = settings_for("http://127.0.0.1:9/v1", store, mcp={"api_keys": [KEY], "servers": servers})
        with running_proxy(settings) as proxy:
            url = proxy.url + "/mcp/large-model"
            time.sleep(5)  # both servers started and listed
            asyncio.run(through_gateway(url, "flood__endless_line", 100))
            asyncio.run(through_gateway(url, "roomy__big_result", 50))
        asyncio.run(through_the_sdk(folder))


if __name__ == "__main__":
    main()
