"""The request side of the gate, closed by construction (issue 20): each instance found on the old
main, through the real proxy in front of a real upstream (tests/upstreams.py), sent by the
official client, native and translated to chat where the protocol is translated. What the
upstream received is the evidence: no hidden tool in it, or no request at all (a 400)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from conftest import claude, native_gate
from upstreams import NativeServer

HIDDEN = "execute_command"  # large; small-model is small
RULES = {
    "default_tier": "small",
    "required_tier": {HIDDEN: "large", "web_search": "large", "browser": "large", "github.delete_*": "large"},
}
FN = {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}
HIDDEN_FN = FN | {"name": HIDDEN}
CHAT_HIDDEN = {"type": "function", "function": {"name": HIDDEN, "parameters": {"type": "object"}}}
CLAUDE_FN = {"name": "read_file", "input_schema": {"type": "object", "properties": {}}}
CLAUDE_HIDDEN = CLAUDE_FN | {"name": HIDDEN}
HI = [{"role": "user", "content": "hi"}]
NATIVE, TRANSLATED = ["chat", "responses", "messages"], ["chat"]


def gate(protocols: list[str], store_path: Any, suite: Any, unknown: str = "refuse") -> Any:
    return native_gate(protocols, store_path, suite, RULES, unknown)


def no_hidden(upstream: NativeServer, *names: str) -> None:
    text = json.dumps(upstream.received())
    for name in names or (HIDDEN,):
        assert name not in text, f"{name} reached the upstream"


# -- extra_body carrying tools -------------------------------------------------------------------


@pytest.mark.parametrize("protocols", [NATIVE, TRANSLATED], ids=["native", "translated"])
def test_extra_body_carrying_tools_is_refused_on_every_protocol(protocols, store_path, default_suite):
    smuggled = {"extra_body": {"tools": [CHAT_HIDDEN]}}  # the wire field LiteLLM-style upstreams merge
    with gate(protocols, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(openai.BadRequestError, match="'extra_body' is not a field"):
            proxy.client.chat.completions.create(model="small-model", messages=HI, extra_body=smuggled)
        with pytest.raises(openai.BadRequestError, match="'extra_body' is not a field"):
            proxy.client.responses.create(model="small-model", input="hi", tools=[FN], extra_body=smuggled)
        with pytest.raises(anthropic.BadRequestError, match="'extra_body' is not a field"):
            claude(proxy).messages.create(model="small-model", max_tokens=5, messages=HI, extra_body=smuggled)
    assert upstream.received() == []


@pytest.mark.parametrize("protocols", [NATIVE, TRANSLATED], ids=["native", "translated"])
def test_extra_body_is_dropped_under_drop(protocols, store_path, default_suite):
    smuggled = {"extra_body": {"tools": [CHAT_HIDDEN]}, "chat_template_kwargs": {"tools": [CHAT_HIDDEN]}}
    with gate(protocols, store_path, default_suite, unknown="drop") as (proxy, upstream):
        proxy.client.chat.completions.create(model="small-model", messages=HI, extra_body=smuggled)
        proxy.client.responses.create(model="small-model", input="hi", tools=[FN], extra_body=smuggled)
        claude(proxy).messages.create(model="small-model", max_tokens=5, messages=HI, extra_body=smuggled)
    assert len(upstream.received()) == 3
    no_hidden(upstream)
    assert not any("extra_body" in body for body in upstream.received())


def test_unknown_nested_fields_are_refused(store_path, default_suite):
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.function\.tools"):
            proxy.client.chat.completions.create(
                model="small-model",
                messages=HI,
                tools=[{"type": "function", "function": {"name": "read_file", "tools": [CHAT_HIDDEN]}}],
            )
        with pytest.raises(openai.BadRequestError, match=r"input\[0\]\.tools"):
            proxy.client.responses.create(
                model="small-model", input=[{"role": "user", "content": "hi", "tools": [HIDDEN_FN]}]
            )
        with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[0\]\.tools"):
            claude(proxy).messages.create(
                model="small-model",
                max_tokens=5,
                messages=[{"role": "user", "content": [{"type": "text", "text": "hi", "tools": [CLAUDE_HIDDEN]}]}],
            )
    assert upstream.received() == []


# -- Responses input items that carry tools --------------------------------------------------------


@pytest.mark.parametrize("protocols", [NATIVE, TRANSLATED], ids=["native", "translated"])
def test_additional_tools_items_are_gated(protocols, store_path, default_suite):
    with gate(protocols, store_path, default_suite) as (proxy, upstream):
        proxy.client.responses.create(
            model="small-model",
            input=[{"role": "user", "content": "hi"}, {"type": "additional_tools", "tools": [HIDDEN_FN]}],
            tools=[FN],
        )
    no_hidden(upstream)
    assert len(upstream.received()) == 1


def test_tool_search_output_items_are_gated(store_path, default_suite):
    found = {
        "type": "tool_search_output",
        "call_id": "ts_1",
        "execution": "client",
        "status": "completed",
        "tools": [FN, HIDDEN_FN, {"type": "namespace", "name": "ops", "description": "d", "tools": [HIDDEN_FN]}],
    }
    call = {
        "type": "tool_search_call",
        "call_id": "ts_1",
        "execution": "client",
        "arguments": {},
        "status": "completed",
    }
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        proxy.client.responses.create(model="small-model", input=[{"role": "user", "content": "hi"}, call, found])
    sent = upstream.responses_requests[0]["input"][2]
    assert sent["tools"] == [FN]  # the item stays (it answers its call), narrowed
    no_hidden(upstream)


# -- built-ins: families and client-chosen names -------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26"]
)
@pytest.mark.parametrize("protocols", [NATIVE, TRANSLATED], ids=["native", "translated"])
def test_a_family_rule_hides_every_web_search_version(kind, protocols, store_path, default_suite):
    with gate(protocols, store_path, default_suite) as (proxy, upstream):
        proxy.client.responses.create(model="small-model", input="hi", tools=[FN, {"type": kind}])
    no_hidden(upstream, kind)


@pytest.mark.parametrize("protocols", [NATIVE, TRANSLATED], ids=["native", "translated"])
def test_messages_web_search_version_is_hidden_by_the_family_rule(protocols, store_path, default_suite):
    search = {"type": "web_search_20250305", "name": "web_search"}
    with gate(protocols, store_path, default_suite) as (proxy, upstream):
        claude(proxy).messages.create(model="small-model", max_tokens=5, messages=HI, tools=[CLAUDE_FN, search])
    no_hidden(upstream, "web_search")


def test_a_name_on_a_built_in_is_refused(store_path, default_suite):
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        for tools in ([{"type": "web_search", "name": "read_file"}], [{"type": "web_search_preview", "name": "x"}]):
            with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.name"):
                proxy.client.responses.create(model="small-model", input="hi", tools=tools)
        with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.name"):
            proxy.client.chat.completions.create(
                model="small-model", messages=HI, tools=[{"type": "web_search", "name": "read_file"}]
            )
        with pytest.raises(anthropic.BadRequestError, match=r"must be 'bash'"):
            claude(proxy).messages.create(
                model="small-model", max_tokens=5, messages=HI, tools=[{"type": "bash_20250124", "name": "read_file"}]
            )
        for toolset in ("browser_toolset_20260801", "computer_toolset_20260801"):
            with pytest.raises(anthropic.BadRequestError, match=r"tools\[0\]\.name"):
                claude(proxy).messages.create(
                    model="small-model", max_tokens=5, messages=HI, tools=[{"type": toolset, "name": "read_file"}]
                )
    assert upstream.received() == []


def test_a_dropped_name_leaves_the_built_in_gated_by_its_type(store_path, default_suite):
    with gate(NATIVE, store_path, default_suite, unknown="drop") as (proxy, upstream):
        proxy.client.responses.create(
            model="small-model", input="hi", tools=[FN, {"type": "web_search", "name": "read_file"}]
        )
        claude(proxy).messages.create(
            model="small-model",
            max_tokens=5,
            messages=HI,
            tools=[CLAUDE_FN, {"type": "browser_toolset_20260801", "name": "read_file"}],
        )
    assert upstream.responses_requests[0]["tools"] == [FN]
    assert upstream.messages_requests[0]["tools"] == [CLAUDE_FN]


# -- MCP servers offered by label only --------------------------------------------------------------


GITHUB = {"type": "mcp", "server_label": "github", "server_url": "https://mcp.example/github"}


@pytest.mark.parametrize("allowed", [None, {"read_only": True}], ids=["no-list", "read-only"])
def test_responses_mcp_server_without_a_tool_list_is_refused_when_a_rule_names_its_tools(
    allowed, store_path, default_suite
):
    server = GITHUB if allowed is None else GITHUB | {"allowed_tools": allowed}
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(openai.BadRequestError, match=r"github\.delete_\*") as info:
            proxy.client.responses.create(model="small-model", input="hi", tools=[server])
    assert "allowed_tools" in info.value.message
    assert upstream.received() == []


def test_responses_mcp_server_is_narrowed_to_the_admitted_tools(store_path, default_suite):
    listing = {
        "type": "mcp_list_tools",
        "id": "mcpl_1",
        "server_label": "github",
        "tools": [{"name": "list_repos", "input_schema": {}}, {"name": "delete_repo", "input_schema": {}}],
    }
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        proxy.client.responses.create(
            model="small-model", input="hi", tools=[GITHUB | {"allowed_tools": ["list_repos", "delete_repo"]}]
        )
        # No list in the tool, but the request lists the server's tools: narrowed to those admitted.
        proxy.client.responses.create(
            model="small-model", input=[{"role": "user", "content": "hi"}, listing], tools=[GITHUB]
        )
    first, second = upstream.responses_requests
    assert first["tools"][0]["allowed_tools"] == ["list_repos"]
    assert second["tools"][0]["allowed_tools"] == ["list_repos"]
    assert [t["name"] for t in second["input"][1]["tools"]] == ["list_repos"]
    no_hidden(upstream, "delete_repo")


BETA = {"anthropic-beta": "mcp-client-2025-11-20"}
CLAUDE_GITHUB = {"type": "url", "url": "https://mcp.example/github", "name": "github"}


@pytest.mark.parametrize(
    "tools",
    [[], [{"type": "mcp_toolset", "mcp_server_name": "github"}]],
    ids=["server-only", "whole-toolset"],
)
def test_messages_mcp_server_without_a_tool_list_is_refused_when_a_rule_names_its_tools(
    tools, store_path, default_suite
):
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(anthropic.BadRequestError, match=r"github\.delete_\*"):
            claude(proxy).beta.messages.create(
                model="small-model", max_tokens=5, messages=HI, mcp_servers=[CLAUDE_GITHUB], tools=tools
            )
    assert upstream.received() == []


def test_messages_mcp_tools_are_gated_one_by_one(store_path, default_suite):
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "default_config": {"enabled": False},
        "configs": {"list_repos": {"enabled": True}, "delete_repo": {"enabled": True}},
    }
    listing = {
        "type": "mcp_tool_listing",
        "mcp_server_name": "github",
        "tools": [{"name": "list_repos", "input_schema": {}}, {"name": "delete_repo", "input_schema": {}}],
    }
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        client = claude(proxy)
        client.beta.messages.create(
            model="small-model", max_tokens=5, messages=HI, mcp_servers=[CLAUDE_GITHUB], tools=[toolset]
        )
        listed = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [listing]}, *HI]
        client.beta.messages.create(model="small-model", max_tokens=5, messages=listed, mcp_servers=[CLAUDE_GITHUB])
    first, second = upstream.messages_requests
    assert first["tools"][0]["configs"] == {"list_repos": {"enabled": True}}
    assert second["mcp_servers"][0]["tool_configuration"]["allowed_tools"] == ["list_repos"]
    no_hidden(upstream, "delete_repo")


def test_a_second_toolset_for_a_server_is_refused_not_let_reopen_it(store_path, default_suite):
    narrowed = {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "default_config": {"enabled": False},
        "configs": {"list_repos": {"enabled": True}},
    }
    whole = {"type": "mcp_toolset", "mcp_server_name": "github"}
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(
            anthropic.BadRequestError, match=r"tools\[1\]: a second mcp_toolset for MCP server 'github'"
        ):
            claude(proxy).beta.messages.create(
                model="small-model", max_tokens=5, messages=HI, mcp_servers=[CLAUDE_GITHUB], tools=[narrowed, whole]
            )
    assert upstream.received() == []


@pytest.mark.parametrize("system", [{"text": "be brief"}, 5])
def test_a_system_of_another_shape_is_refused(system, store_path, default_suite):
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(anthropic.BadRequestError, match="system must be a string or an array of text blocks"):
            claude(proxy).messages.create(model="small-model", max_tokens=5, messages=HI, extra_body={"system": system})
    assert upstream.received() == []


def test_a_tool_addition_block_is_gated(store_path, default_suite):
    addition = {"type": "tool_addition", "tool": CLAUDE_HIDDEN}
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        claude(proxy).beta.messages.create(
            model="small-model",
            max_tokens=5,
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, addition]}],
            tools=[CLAUDE_FN],
        )
    no_hidden(upstream)
    assert upstream.messages_requests[0]["messages"][0]["content"] == [{"type": "text", "text": "hi"}]


def test_count_tokens_has_its_own_allowlist(store_path, default_suite):
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        client = claude(proxy)
        client.messages.count_tokens(model="small-model", messages=HI, tools=[CLAUDE_FN, CLAUDE_HIDDEN])
        with pytest.raises(anthropic.BadRequestError, match="'max_tokens' is not a field"):  # a create field only
            client.messages.count_tokens(model="small-model", messages=HI, extra_body={"max_tokens": 5})
    assert [t["name"] for t in upstream.count_requests[0]["tools"]] == ["read_file"]
    assert len(upstream.count_requests) == 1
