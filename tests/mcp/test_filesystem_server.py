"""The real npm `@modelcontextprotocol/server-filesystem` (pinned in tests/js) behind the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import await_until
from gateway_helpers import FILESYSTEM, connect, gateway, tool_names
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.skipif(not FILESYSTEM.exists(), reason="run `npm ci` in tests/js (test.sh does)")


async def test_a_small_model_reads_but_cannot_write_and_a_large_one_writes(tmp_path: Path, default_suite):
    data = tmp_path / "data"
    data.mkdir()
    target = data / "plan.txt"
    target.write_text("original\n")
    servers = {"files": {"command": [str(FILESYSTEM), str(data)], "timeout_s": 30}}
    with gateway(tmp_path, default_suite, servers) as proxy:

        async def listed() -> list[str]:
            async with connect(proxy.url + "/mcp/large-model") as session:
                return await tool_names(session)

        every = await await_until(listed, "the filesystem server's tools", timeout_s=60)
        assert {"files__read_text_file", "files__write_file", "files__move_file"} <= set(every)

        async with connect(proxy.url + "/mcp/small-model") as session:
            small = await tool_names(session)
            assert small and all(name.startswith(("files__read_", "files__list_")) for name in small)
            assert "files__read_text_file" in small and "files__write_file" not in small
            read = await session.call_tool("files__read_text_file", {"path": str(target)})
            assert read.content[0].text == "original\n"
            with pytest.raises(MCPError) as refused:
                await session.call_tool("files__write_file", {"path": str(target), "content": "overwritten"})
        assert "files__write_file" in refused.value.message and "needs tier medium" in refused.value.message
        assert target.read_text() == "original\n"  # the call never reached the server

        async with connect(proxy.url + "/mcp/large-model") as session:
            wrote = await session.call_tool("files__write_file", {"path": str(target), "content": "by a large model"})
        assert not wrote.is_error, wrote.content
        assert target.read_text() == "by a large model"
