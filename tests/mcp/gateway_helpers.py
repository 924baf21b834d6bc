"""A real proxy with the MCP gateway on a real port, its servers started over stdio, and the
official MCP client (`streamable_http_client` + `ClientSession`) to talk to it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from conftest import ROOT, Proxy, make_profile, running_proxy, seed_store, settings_for
from mcp import ClientSession
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client

from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import Suite

KEY = "mcp-test-key"
TOY = Path(__file__).with_name("toy_server.py")
FILESYSTEM = ROOT / "tests/js/node_modules/.bin/mcp-server-filesystem"
RULES = {
    "notes.read_*": "small",
    "notes.write_note": "medium",
    "notes.progress_steps": "large",
    "notes.broken_tool": "small",
    "notes.crash": "large",
    "files.read_*": "small",
    "files.list_*": "small",
    "files.write_file": "medium",
    "files.edit_file": "medium",
    "files.move_file": "large",
    "files.*": "large",  # anything else the filesystem server offers: only the largest tier
}


def toy(mode: str, folder: Path, **extra: Any) -> dict[str, Any]:
    return {"command": [sys.executable, str(TOY), mode], "env": {"TOY_DIR": str(folder)}, "timeout_s": 5} | extra


@contextmanager
def gateway(tmp_path: Path, suite: Suite, servers: dict[str, Any], **changes: Any) -> Iterator[Proxy]:
    """A proxy whose store has small-, medium- and large-model measured, serving `servers`."""
    store = tmp_path / "profiles.json"
    seed_store(
        store,
        make_profile("small-model", Tier.SMALL, suite),
        make_profile("medium-model", Tier.MEDIUM, suite),
        make_profile("large-model", Tier.LARGE, suite),
    )
    mcp = {"api_keys": [KEY], "servers": servers} | changes.pop("mcp", {})
    tools = {"default_tier": "small", "required_tier": RULES} | changes.pop("tools", {})
    settings = settings_for("http://127.0.0.1:9/v1", store, mcp=mcp, tools=tools, **changes)
    with running_proxy(settings) as proxy:
        yield proxy


@asynccontextmanager
async def connect(
    url: str,
    key: str = KEY,
    headers: dict[str, str] | None = None,
    message_handler: MessageHandlerFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with the gateway at `url`."""
    sent = {"Authorization": f"Bearer {key}"} | (headers or {})
    async with (
        httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, message_handler=message_handler) as session,
    ):
        await session.initialize()
        yield session


async def tool_names(session: ClientSession) -> list[str]:
    """Every page of the session's tools/list."""
    names: list[str] = []
    cursor: str | None = None
    while True:
        from mcp import types

        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            return names
