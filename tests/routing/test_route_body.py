"""Routing a parsed client body (what the proxy does), per protocol, without a server."""

from __future__ import annotations

import pytest
from conftest import make_profile, seed_store, settings_for

from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.protocols import table
from gatekeeper.rules.tiers import Tier

CHAT, RESPONSES, MESSAGES = (table.codec(n) for n in ("chat", "responses", "messages"))


@pytest.fixture
def gk(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
        make_profile("m", Tier.LARGE, default_suite, effort="high"),
        make_profile("big", Tier.LARGE, default_suite),
    )
    tools = {"required_tier": {"write_file": "medium", "execute_command": "large", "github.delete_*": "large"}}
    # An upstream that speaks every protocol: a chat-only one cannot take an MCP tool, so routing
    # would not send the request where that tool is kept (test_routing_hostile.py).
    upstream = {"base_url": "http://127.0.0.1:9/v1", "protocols": ["chat", "responses", "messages"]}
    settings = settings_for(
        "http://127.0.0.1:9/v1", store_path, upstream=upstream, tools=tools, routing={"fallback": {"s*": ["big"]}}
    )
    with Gatekeeper(settings) as gatekeeper:
        yield gatekeeper


def fn(name):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def test_a_chat_request_is_escalated_in_reasoning_effort(gk):
    body = {"model": "m", "messages": [], "reasoning_effort": "low", "tools": [fn("read_file"), fn("write_file")]}
    route = gk.route_body(CHAT, body)
    assert (route.pair, route.reason) == ("m@medium", "escalated")
    assert body["reasoning_effort"] == "medium" and len(body["tools"]) == 2


def test_a_responses_request_is_escalated_for_an_mcp_tool_in_reasoning_effort(gk):
    mcp = {
        "type": "mcp",
        "server_label": "github",
        "server_url": "https://example.invalid/mcp",
        "allowed_tools": ["delete_repo"],
    }
    body = {"model": "m", "input": "hi", "reasoning": {"effort": "low"}, "tools": [mcp]}
    route = gk.route_body(RESPONSES, body)
    assert route.pair == "m@high" and body["reasoning"] == {"effort": "high"}


def test_a_messages_request_falls_back_with_model_replaced(gk):
    body = {
        "model": "small",
        "max_tokens": 10,
        "messages": [],
        "tools": [{"name": "execute_command", "input_schema": {}}],
    }
    route = gk.route_body(MESSAGES, body)
    assert (route.pair, route.reason) == ("big@default", "fallback")
    assert body["model"] == "big"


def test_a_request_the_asked_pair_admits_is_untouched(gk):
    body = {"model": "m", "messages": [], "reasoning_effort": "medium", "tools": [fn("write_file")]}
    before = dict(body)
    assert gk.route_body(CHAT, body).reason == "none"
    assert body == before


def test_a_whole_mcp_server_needs_the_strictest_rule_under_it(gk):
    mcp = {"type": "mcp", "server_label": "github", "server_url": "https://example.invalid/mcp"}
    body = {"model": "m", "input": "hi", "reasoning": {"effort": "low"}, "tools": [mcp]}
    route = gk.route_body(RESPONSES, body)
    # github.delete_* is large: only m@high may be offered the server whole.
    assert route.pair == "m@high" and body["reasoning"] == {"effort": "high"}
    gated = RESPONSES.gate(body, route.resolution.tier, route.policy)
    assert gated.hidden == [] and body["tools"] == [mcp]
