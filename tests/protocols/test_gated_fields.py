"""No member is both gated and passed unread: `fields.check` skips every GATED value (the codec
reads it), so for each GATED field of each table (the request, its tools, tool choices, content
blocks and input items) an object or array value carrying a hidden tool is either refused or
read and gated by the codec: it never reaches the gated body as it came."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.protocols import schema
from gatekeeper.protocols.chat import fields as chat_fields
from gatekeeper.protocols.messages import fields as messages_fields
from gatekeeper.protocols.responses import fields as responses_fields
from gatekeeper.protocols.table import PROTOCOLS
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolPolicy

POLICY = ToolPolicy({"execute_command": Tier.LARGE, "github.delete_*": Tier.LARGE}, Tier.SMALL)
SMUGGLED = [{"tools": [{"name": "execute_command"}]}, [{"type": "function", "name": "execute_command"}]]
HI = [{"role": "user", "content": "hi"}]
BASES: dict[str, dict[str, Any]] = {
    "chat": {"model": "m", "messages": HI, "tools": [{"type": "function", "function": {"name": "read_file"}}]},
    "responses": {"model": "m", "input": HI, "tools": [{"type": "function", "name": "read_file"}]},
    "messages": {"model": "m", "max_tokens": 5, "messages": HI, "tools": [{"name": "read_file", "input_schema": {}}]},
}
GITHUB = {"type": "url", "url": "https://mcp.example", "name": "github"}


def _gated(table: Mapping[str, Any]) -> list[str]:
    return [k for k, how in table.items() if how == schema.GATED and k not in ("type", "model")]


def _tool(protocol: str, kind: str) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": kind}
    if protocol == "messages" and kind in messages_fields.MESSAGES_BUILTIN_NAMES:
        tool["name"] = messages_fields.MESSAGES_BUILTIN_NAMES[kind]
    if kind == "mcp_toolset":
        tool["mcp_server_name"] = "github"
    if kind == "mcp":
        tool |= {"server_label": "github", "allowed_tools": ["list_repos"]}
    return tool


def cases() -> Iterator[Any]:
    requests = {
        "chat": chat_fields.CHAT_REQUEST,
        "responses": responses_fields.RESPONSES_REQUEST,
        "messages": messages_fields.MESSAGES_REQUEST,
    }
    for protocol, table in requests.items():
        for key in _gated(table):
            yield pytest.param(protocol, (key,), id=f"{protocol}.{key}")
    tables = {
        "chat": chat_fields.CHAT_TOOL,
        "responses": responses_fields.RESPONSES_TOOL,
        "messages": messages_fields.MESSAGES_TOOL,
    }
    for protocol, by_type in tables.items():
        for kind, fields in by_type.items():
            for key in _gated(fields):
                yield pytest.param(protocol, ("tools", kind, key), id=f"{protocol}.tools.{kind}.{key}")
    choices = {
        "chat": chat_fields.CHAT_TOOL_CHOICE,
        "responses": responses_fields.RESPONSES_TOOL_CHOICE,
        "messages": messages_fields.MESSAGES_TOOL_CHOICE,
    }
    for protocol, by_type in choices.items():
        for kind, fields in by_type.items():
            for key in _gated(fields):
                yield pytest.param(protocol, ("tool_choice", kind, key), id=f"{protocol}.tool_choice.{kind}.{key}")
    for kind, fields in messages_fields.MESSAGES_CONTENT_BLOCK.items():
        for key in _gated(fields):
            yield pytest.param("messages", ("block", kind, key), id=f"messages.block.{kind}.{key}")
    for kind, fields in responses_fields.RESPONSES_INPUT_ITEM.items():
        for key in _gated(fields):
            yield pytest.param("responses", ("item", kind, key), id=f"responses.item.{kind}.{key}")
    for key in _gated(messages_fields.MESSAGES_MCP_SERVER) + _gated(messages_fields.MESSAGES_MCP_TOOL_CONFIGURATION):
        yield pytest.param("messages", ("server", key), id=f"messages.mcp_servers.{key}")


def _body(protocol: str, where: tuple[str, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASES[protocol])
    if len(where) == 1:
        body[where[0]] = value
    elif where[0] == "tools":
        body["tools"] = [_tool(protocol, where[1]) | {where[2]: value}]
        if where[1] == "mcp_toolset":
            body["mcp_servers"] = [GITHUB | {"tool_configuration": {"allowed_tools": ["list_repos"]}}]
    elif where[0] == "tool_choice":
        body["tool_choice"] = {"type": where[1], where[2]: value}
    elif where[0] == "block":
        body["messages"] = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": where[1]}]}]
        body["messages"][0]["content"][1][where[2]] = value
    elif where[0] == "item":
        body["input"] = [*HI, {"type": where[1], where[2]: value}]
    else:  # an mcp_servers entry, or its tool_configuration
        configuration = {"allowed_tools": ["list_repos"]}
        server = GITHUB | {"tool_configuration": configuration}
        (server if where[1] in messages_fields.MESSAGES_MCP_SERVER else configuration)[where[1]] = value
        body["mcp_servers"] = [server]
    return body


@pytest.mark.parametrize(("protocol", "where"), list(cases()))
@pytest.mark.parametrize("value", SMUGGLED, ids=["object", "array"])
def test_a_gated_field_is_read_or_refused(protocol: str, where: tuple[str, ...], value: Any):
    body = _body(protocol, where, copy.deepcopy(value))
    codec = PROTOCOLS[protocol].codec
    try:
        codec.parse(body)
        codec.gate(body, Tier.SMALL, POLICY)
    except (RequestInvalid, ToolChoiceBlocked):
        return
    assert "execute_command" not in json.dumps(body), body
