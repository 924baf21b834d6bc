"""Members that the Messages allowlist marked gated and the codec forwarded unread (issue 30's
hostile kit; issue 32's MCP item), each sent by the official Anthropic client through the real
proxy to a real upstream (tests/upstreams.py); what the upstream received is the evidence.

- A typed tool was judged by its type and family only, never by the name the model calls it by
  (which the API fixes): a rule `str_replace_based_edit_tool: large` did not hide
  `text_editor_20250728`. Both are judged now, in `tools`, `tool_addition` and compaction blocks.
- A computer or browser toolset was judged as one tool: the member tools it offers (its
  `configs` keys, the names the model calls) were never read. Each member is judged as
  `family.member` now: a hidden one is turned off (`enabled: false`), a key that names no member
  is refused, and so is an unknown field inside a member's config.
- An `mcp_toolset`'s `configs` were read only when `default_config` disabled the rest: next to a
  pinned `tools` listing, `configs: {"delete_repo": {"enabled": true}}` went unread. Every key is
  a tool name, judged wherever it appears.
- An `mcp_servers` entry offered whole (no tool list) was refused alone but accepted beside a
  toolset that narrowed it, and reached the upstream whole (an API version that reads the
  server's own configuration offered every tool). It is narrowed to what its toolset admits now,
  or removed when that is nothing.
- A probe of every GATED field of every table with an object or array value found two more
  forwarded unread: chat and Responses `parallel_tool_calls` (the codecs only dropped it when no
  tool was left) and a Messages server's `tool_configuration.enabled`. Both must be booleans now.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from conftest import Proxy, claude, small_model_proxy
from upstreams import NativeServer

HI = [{"role": "user", "content": "hi"}]
OBJECT = {"type": "object", "properties": {}}
RULES = {
    "execute_command": "large",
    "github.delete_*": "large",
    "str_replace_based_edit_tool": "large",
    "javascript_exec": "large",
    "computer.zoom": "large",
}
GITHUB = {"type": "url", "name": "github", "url": "https://mcp.example/github"}
EDITOR = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
READ = {"name": "read_file", "input_schema": OBJECT}


@pytest.fixture
def native() -> Iterator[NativeServer]:
    with NativeServer(lambda body: {"content": "ok"}) as server:
        yield server


@pytest.fixture
def proxy(native: NativeServer, store_path, default_suite) -> Iterator[Proxy]:
    tools = {"default_tier": "small", "required_tier": RULES}
    with small_model_proxy(native.base_url, store_path, default_suite, tools=tools) as running:
        yield running


def send(proxy: Proxy, tools: list[Any], **extra: Any) -> None:
    claude(proxy).beta.messages.create(model="small-model", max_tokens=10, messages=HI, tools=tools, **extra)


def sent(native: NativeServer) -> dict[str, Any]:
    assert len(native.messages_requests) == 1
    return native.messages_requests[0]


# -- typed tools: by their type and by the name the model calls them by ---------------------------


def test_a_typed_tool_is_hidden_by_a_rule_for_the_name_the_model_calls(proxy, native):
    send(proxy, [EDITOR, READ])
    assert sent(native)["tools"] == [READ]


def test_a_typed_tool_added_by_a_block_is_hidden_by_the_name_the_model_calls(proxy, native):
    blocks = [{"type": "text", "text": "hi"}, {"type": "tool_addition", "tool": EDITOR}]
    claude(proxy).beta.messages.create(
        model="small-model", max_tokens=10, messages=[{"role": "user", "content": blocks}], tools=[READ]
    )
    assert sent(native)["messages"][0]["content"] == [{"type": "text", "text": "hi"}]


def test_a_typed_tool_under_another_name_is_refused(proxy, native):
    with pytest.raises(anthropic.BadRequestError, match=r"tools\[0\]\.name must be 'str_replace_based_edit_tool'"):
        send(proxy, [EDITOR | {"name": "read_file"}])
    assert native.messages_requests == []


# -- computer and browser toolsets: member by member ------------------------------------------


def test_a_hidden_toolset_member_is_turned_off(proxy, native):
    send(proxy, [{"type": "browser_toolset_20260801", "configs": {"navigate": {"enabled": True}}}])
    configs = sent(native)["tools"][0]["configs"]
    assert configs["javascript_exec"] == {"enabled": False}
    assert configs["navigate"] == {"enabled": True}
    assert [m for m, c in configs.items() if c.get("enabled") is False] == ["javascript_exec"]


def test_a_hidden_member_enabled_by_the_client_is_turned_off(proxy, native):
    configs = {"zoom": {"enabled": True, "defer_loading": False}}
    send(proxy, [{"type": "computer_toolset_20260801", "configs": configs}])
    assert sent(native)["tools"][0]["configs"] == {"zoom": {"enabled": False, "defer_loading": False}}


def test_a_toolset_config_key_that_is_no_member_is_refused(proxy, native):
    configs = {"navigate": {"enabled": True}, "execute_command": {"enabled": True}}
    with pytest.raises(anthropic.BadRequestError, match=r"configs\.execute_command is not a member"):
        send(proxy, [{"type": "browser_toolset_20260801", "configs": configs}])
    assert native.messages_requests == []


def test_an_unknown_field_in_a_member_config_is_refused(proxy, native):
    with pytest.raises(anthropic.BadRequestError, match=r"configs\.navigate\.tools"):
        send(proxy, [{"type": "browser_toolset_20260801", "configs": {"navigate": {"tools": ["execute_command"]}}}])
    assert native.messages_requests == []


def test_a_toolset_whose_members_are_all_hidden_goes(native, store_path, default_suite):
    tools = {"default_tier": "small", "required_tier": {"browser.*": "large"}}
    with small_model_proxy(native.base_url, store_path, default_suite, tools=tools) as proxy:
        send(proxy, [{"type": "browser_toolset_20260801"}, READ])
    assert sent(native)["tools"] == [READ]


# -- mcp_toolset configs, and the server entry beside its toolset -----------------------------


def test_a_toolset_config_beside_a_pinned_listing_is_judged(proxy, native):
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "tools": [{"name": "list_repos", "input_schema": OBJECT}],
        "configs": {"delete_repo": {"enabled": True}},
    }
    send(proxy, [toolset], mcp_servers=[GITHUB | {"tool_configuration": {"allowed_tools": ["list_repos"]}}])
    assert sent(native)["tools"][0]["configs"] == {"delete_repo": {"enabled": False}}


def test_a_whole_server_beside_a_narrowed_toolset_is_narrowed_too(proxy, native):
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "default_config": {"enabled": False},
        "configs": {"list_repos": {"enabled": True}},
    }
    send(proxy, [toolset], mcp_servers=[GITHUB])
    body = sent(native)
    assert body["mcp_servers"] == [GITHUB | {"tool_configuration": {"allowed_tools": ["list_repos"]}}]
    assert body["tools"] == [toolset]


def test_a_whole_server_beside_a_toolset_of_hidden_tools_goes(proxy, native):
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "default_config": {"enabled": False},
        "configs": {"delete_repo": {"enabled": True}},
    }
    send(proxy, [toolset, READ], mcp_servers=[GITHUB])
    body = sent(native)
    assert "mcp_servers" not in body
    assert body["tools"] == [READ]


def test_a_whole_server_alone_is_still_refused(proxy, native):
    with pytest.raises(anthropic.BadRequestError, match=r"MCP server 'github' is offered without a list"):
        send(proxy, [READ], mcp_servers=[GITHUB])
    assert native.messages_requests == []


# -- switches the codecs read: booleans only ------------------------------------------------------

SMUGGLED = [{"tools": [{"name": "execute_command"}]}, [{"type": "function", "name": "execute_command"}]]


@pytest.mark.parametrize("value", SMUGGLED, ids=["object", "array"])
def test_parallel_tool_calls_that_is_no_boolean_is_refused(proxy, native, value):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    refused = r"'parallel_tool_calls' must be true or false"
    with pytest.raises(openai.BadRequestError, match=refused):
        client.chat.completions.create(
            model="small-model",
            messages=HI,
            tools=[{"type": "function", "function": {"name": "read_file", "parameters": OBJECT}}],
            parallel_tool_calls=value,
        )
    with pytest.raises(openai.BadRequestError, match=refused):
        client.responses.create(
            model="small-model",
            input="hi",
            tools=[{"type": "function", "name": "read_file", "parameters": OBJECT}],
            parallel_tool_calls=value,
        )
    assert native.received() == []


def test_a_server_switch_that_is_no_boolean_is_refused(proxy, native):
    configuration = {"allowed_tools": ["list_repos"], "enabled": ["execute_command"]}
    with pytest.raises(anthropic.BadRequestError, match=r"tool_configuration\.enabled must be true or false"):
        send(proxy, [READ], mcp_servers=[GITHUB | {"tool_configuration": configuration}])
    assert native.messages_requests == []


def test_a_call_of_an_admitted_member_reaches_the_client_and_of_a_hidden_one_does_not(store_path, default_suite):
    calls = {
        "content": None,
        "tool_calls": [{"name": "navigate", "arguments": {}}, {"name": "javascript_exec", "arguments": {}}],
    }
    with NativeServer(lambda body: calls) as upstream:
        tools = {"default_tier": "small", "required_tier": RULES}
        with small_model_proxy(upstream.base_url, store_path, default_suite, tools=tools) as proxy:
            answer = claude(proxy).beta.messages.create(
                model="small-model", max_tokens=10, messages=HI, tools=[{"type": "browser_toolset_20260801"}]
            )
    assert [b.name for b in answer.content if b.type == "tool_use"] == ["navigate"]


# A chat request takes typed built-ins too (servers that accept Responses or Messages tools in
# chat's `tools`), but chat's gate reads only their type: a member another protocol's gate reads
# was forwarded unread (issue 40: `configs` turning `javascript_exec` on for a small model).
UNREAD_ON_CHAT = [
    {"type": "browser_toolset_20260801", "configs": {"javascript_exec": {"enabled": True}}},
    {"type": "computer_toolset_20260801", "configs": {"zoom": {"enabled": True}}},
]


@pytest.mark.parametrize("tool", UNREAD_ON_CHAT, ids=["browser_configs", "computer_configs"])
def test_a_member_chat_does_not_read_is_refused_on_chat(proxy, native, tool):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.configs.*chat reads only a built-in tool's type"):
        client.chat.completions.create(model="small-model", messages=HI, tools=[tool])
    assert native.received() == []


def test_a_typed_built_in_without_unread_members_still_reaches_a_chat_upstream(proxy, native):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    client.chat.completions.create(model="small-model", messages=HI, tools=[{"type": "computer_toolset_20260801"}])
    assert native.requests[-1]["tools"] == [{"type": "computer_toolset_20260801"}]


def test_every_member_chat_forwards_of_a_built_in_is_one_chat_reads_or_forwards_as_is() -> None:
    from gatekeeper.protocols import schema
    from gatekeeper.protocols.chat.fields import CHAT_BUILTIN_TOOL

    for kind, table in CHAT_BUILTIN_TOOL.items():
        gated = {k for k, how in table.items() if schema.how_of(how) == schema.GATED}
        assert gated <= {"type", "name"}, (kind, gated)  # chat's gate reads these two, and no other
    assert isinstance(CHAT_BUILTIN_TOOL["browser_toolset_20260801"]["configs"], schema.Refused)
