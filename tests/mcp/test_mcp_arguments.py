"""Argument rules (`tools.arguments`) at the MCP door, with the official MCP client: a call is
judged on its arguments before it is forwarded; the listing tells a model which calls it may make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gateway_helpers import RULES, connect, gateway, tool_names, toy
from mcp import types
from mcp.shared.exceptions import MCPError
from test_gateway import NOTES_ALL, calls, wait_listed

ARGUMENTS = {
    # write_note needs medium on its own; a scratch note is small's to write.
    "notes.write_note": [{"match": {"name": "scratch-*"}, "tier": "small"}],
    # read_note is small on its own; a secret note needs large.
    "notes.read_note": [{"match": {"name": "secret*"}, "tier": "large"}],
}


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    return folder


async def test_a_call_is_judged_on_its_arguments_before_it_is_forwarded(tmp_path, default_suite, notes_dir):
    tools = {"required_tier": RULES, "arguments": ARGUMENTS}
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, tools=tools) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert "notes__write_note" in await tool_names(session)  # some of its calls are small's
            wrote = await session.call_tool("notes__write_note", {"name": "scratch-1", "text": "ok"})
            assert not wrote.is_error
            for name in ("todo", "SCRATCH-1", "scratch-1/../../x"):
                with pytest.raises(MCPError) as refused:
                    await session.call_tool("notes__write_note", {"name": name, "text": "the secret text"})
                assert refused.value.code == types.INVALID_PARAMS
                assert refused.value.data["reason"] == "arguments_tier_too_low"
                assert refused.value.data["required_tier"] == "medium"
                assert "the secret text" not in refused.value.message
            with pytest.raises(MCPError) as refused:
                await session.call_tool("notes__read_note", {"name": "secret-plan"})
            assert refused.value.data["required_tier"] == "large"
        assert [(c["tool"], c["arguments"]["name"]) for c in calls(notes_dir)] == [("write_note", "scratch-1")]
        async with connect(proxy.url + "/mcp/large-model") as session:
            read = await session.call_tool("notes__read_note", {"name": "secret-plan"})
        assert read.content  # forwarded at large (the note does not exist: the server's own answer)


async def test_the_listing_narrows_the_schema_to_the_admitted_calls(tmp_path, default_suite, notes_dir):
    tools = {"required_tier": RULES, "arguments": ARGUMENTS}
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, tools=tools) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/small-model") as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
        name = listed["notes__write_note"].input_schema["properties"]["name"]
        assert name["pattern"].startswith("^(?:(?:scratch-")
        async with connect(proxy.url + "/mcp/medium-model") as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
        assert "pattern" not in json.dumps(listed["notes__write_note"].input_schema)  # medium: every call
