"""The tool budget (`tools.budget`, issue 41) through the real proxy with the official clients: a
request offering more tools than its pair's budget is reported, trimmed, refused or routed, on chat,
Responses and Messages (native, and translated to a chat-only upstream); a pin may carry a budget;
a pair without one is never limited."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from conftest import Proxy, claude, make_profile, running_proxy, seed_store, settings_for
from prometheus_client.parser import text_string_to_metric_families
from upstreams import NativeServer

from gatekeeper.rules.tiers import Tier

NAMES = [f"lookup_{i}" for i in range(6)]
PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": PATH}} for n in NAMES]
RESPONSES_TOOLS = [{"type": "function", "name": n, "parameters": PATH} for n in NAMES]
MESSAGES_TOOLS = [{"name": n, "input_schema": PATH} for n in NAMES]
HI = [{"role": "user", "content": "look it up"}]
HEADER = "x-gatekeeper-tool-budget"


def offered(body: dict[str, Any]) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


@pytest.fixture(params=["native", "chat-only"])
def protocols(request) -> list[str]:
    return ["chat", "responses", "messages"] if request.param == "native" else ["chat"]


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer(lambda body: {"content": "ok"}) as server:
        yield server


def budget_proxy(upstream: NativeServer, store, suite, protocols=("chat",), budget=3, **changes) -> Any:
    """`m` measured small with a tool budget of `budget`; every tool small."""
    seed_store(store, make_profile("m", Tier.SMALL, suite, tool_budget=budget))
    tools = {"default_tier": "small"} | changes.pop("tools", {})
    upstream_settings = {"base_url": upstream.base_url, "protocols": list(protocols)}
    return running_proxy(settings_for(upstream.base_url, store, upstream=upstream_settings, tools=tools, **changes))


def last_offered(upstream: NativeServer) -> list[str]:
    return offered(upstream.received()[-1])


# -- report (the default) ------------------------------------------------------------------------


def test_report_forwards_every_tool_and_names_the_budget(upstream, store_path, default_suite) -> None:
    with budget_proxy(upstream, store_path, default_suite) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=CHAT_TOOLS)
        assert raw.headers[HEADER] == "offered=6; budget=3; action=reported"
        assert last_offered(upstream) == NAMES


def test_within_budget_nothing_is_said_or_cut(upstream, store_path, default_suite) -> None:
    with budget_proxy(upstream, store_path, default_suite, budget=6, tools={"budget": "trim"}) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=CHAT_TOOLS)
        assert HEADER not in raw.headers
        assert last_offered(upstream) == NAMES


def test_a_pair_without_a_budget_is_never_limited(upstream, store_path, default_suite) -> None:
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))  # measured before budgets: none
    settings = settings_for(upstream.base_url, store_path, tools={"budget": "refuse"})
    with running_proxy(settings) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=CHAT_TOOLS)
        assert HEADER not in raw.headers
        assert last_offered(upstream) == NAMES


def test_the_budget_counts_tools_after_the_tier_hid_some(upstream, store_path, default_suite) -> None:
    rules = {"budget": "refuse", "required_tier": {"lookup_4": "large", "lookup_5": "large"}}
    with budget_proxy(upstream, store_path, default_suite, budget=4, tools=rules) as proxy:
        proxy.client.chat.completions.create(model="m", messages=HI, tools=CHAT_TOOLS)  # 4 left: within
        assert last_offered(upstream) == NAMES[:4]


def test_the_metric_counts_each_action(upstream, store_path, default_suite) -> None:
    with budget_proxy(upstream, store_path, default_suite) as proxy:
        before = _labelled(proxy, "reported")
        proxy.client.chat.completions.create(model="m", messages=HI, tools=CHAT_TOOLS)
        assert _labelled(proxy, "reported") == before + 1


def _labelled(proxy: Proxy, action: str) -> float:
    text = httpx.get(proxy.url + "/metrics", timeout=10).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gatekeeper_tool_budget_exceeded_total" and s.labels.get("action") == action
    )


# -- trim ----------------------------------------------------------------------------------------


def test_trim_keeps_used_tools_then_priority_then_client_order(upstream, store_path, default_suite) -> None:
    conversation = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup_4", "arguments": '{"path": "a"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
    ]
    rules = {"budget": "trim", "budget_priority": ["lookup_5"]}
    with budget_proxy(upstream, store_path, default_suite, tools=rules) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=conversation, tools=CHAT_TOOLS)
        assert raw.headers[HEADER] == "offered=6; budget=3; action=trimmed"
        assert last_offered(upstream) == ["lookup_0", "lookup_4", "lookup_5"]


def test_trim_keeps_the_tool_the_tool_choice_forces(upstream, store_path, default_suite) -> None:
    forced = {"type": "function", "function": {"name": "lookup_5"}}
    with budget_proxy(upstream, store_path, default_suite, budget=2, tools={"budget": "trim"}) as proxy:
        proxy.client.chat.completions.create(model="m", messages=HI, tools=CHAT_TOOLS, tool_choice=forced)
        assert last_offered(upstream) == ["lookup_0", "lookup_5"]


def test_trim_through_responses(upstream, store_path, default_suite, protocols) -> None:
    used = [
        {"role": "user", "content": "look it up"},
        {"type": "function_call", "call_id": "c1", "name": "lookup_3", "arguments": '{"path": "a"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
    ]
    with budget_proxy(upstream, store_path, default_suite, protocols, budget=2, tools={"budget": "trim"}) as proxy:
        raw = proxy.client.responses.with_raw_response.create(model="m", input=used, tools=RESPONSES_TOOLS)
        assert raw.headers[HEADER] == "offered=6; budget=2; action=trimmed"
        assert last_offered(upstream) == ["lookup_0", "lookup_3"]


def test_trim_through_messages(upstream, store_path, default_suite, protocols) -> None:
    used = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "lookup_2", "input": {"path": "a"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}]},
    ]
    with budget_proxy(upstream, store_path, default_suite, protocols, budget=2, tools={"budget": "trim"}) as proxy:
        raw = claude(proxy).messages.with_raw_response.create(
            model="m", max_tokens=64, messages=used, tools=MESSAGES_TOOLS
        )
        assert raw.headers[HEADER] == "offered=6; budget=2; action=trimmed"
        assert last_offered(upstream) == ["lookup_0", "lookup_2"]


def test_a_call_to_a_trimmed_tool_is_removed_from_the_answer(store_path, default_suite) -> None:
    call = {"content": None, "tool_calls": [{"name": "lookup_5", "arguments": {"path": "a"}}]}
    with NativeServer(lambda body: call) as upstream:
        with budget_proxy(upstream, store_path, default_suite, tools={"budget": "trim"}) as proxy:
            answer = proxy.client.chat.completions.create(model="m", messages=HI, tools=CHAT_TOOLS)
    assert not answer.choices[0].message.tool_calls


# -- refuse --------------------------------------------------------------------------------------


def test_refuse_is_a_400_naming_the_budget_in_each_clients_shape(upstream, store_path, default_suite) -> None:
    with budget_proxy(upstream, store_path, default_suite, tools={"budget": "refuse"}) as proxy:
        with pytest.raises(openai.BadRequestError) as chat:
            proxy.client.chat.completions.create(model="m", messages=HI, tools=CHAT_TOOLS)
        with pytest.raises(anthropic.BadRequestError) as messages:
            claude(proxy).messages.create(model="m", max_tokens=64, messages=HI, tools=MESSAGES_TOOLS)
        assert not upstream.received()
    assert chat.value.code == "tool_budget_exceeded"
    assert "offers 6 tools" in chat.value.message and "at most 3" in chat.value.message
    assert "tools.budget: refuse" in messages.value.message


# -- pins ----------------------------------------------------------------------------------------


def test_a_pin_carries_a_budget_and_a_plain_pin_none(upstream, store_path, default_suite) -> None:
    pins = {"pinned": {"tier": "large", "tool_budget": 2}, "plain": "large"}
    settings = settings_for(upstream.base_url, store_path, pins=pins, tools={"budget": "refuse"})
    with running_proxy(settings) as proxy:
        with pytest.raises(openai.BadRequestError, match="at most 2"):
            proxy.client.chat.completions.create(model="pinned", messages=HI, tools=CHAT_TOOLS)
        raw = proxy.client.chat.completions.with_raw_response.create(model="plain", messages=HI, tools=CHAT_TOOLS)
        assert raw.headers["x-gatekeeper-tier"] == "large" and HEADER not in raw.headers


# -- route ---------------------------------------------------------------------------------------


def test_route_sends_an_over_budget_request_to_a_pair_whose_budget_fits(upstream, store_path, default_suite) -> None:
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, tool_budget=3),
        make_profile("wide", Tier.SMALL, default_suite, tool_budget=4),
        make_profile("wider", Tier.SMALL, default_suite, tool_budget=8),
    )
    settings = settings_for(
        upstream.base_url,
        store_path,
        tools={"default_tier": "small", "budget": "route"},
        routing={"fallback": {"m": ["wide", "wider"]}},
        lazy={"allow": []},  # no candidate measured meanwhile: the upstream sees only the request
    )
    with running_proxy(settings) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=CHAT_TOOLS)
        assert raw.headers["x-gatekeeper-routed"] == "wider@default"
        assert raw.headers[HEADER] == "offered=6; budget=3; action=routed"
        assert upstream.received()[-1]["model"] == "wider"
        assert last_offered(upstream) == NAMES
        # Within the asked pair's budget: not routed.
        proxy.client.chat.completions.create(model="m", messages=HI, tools=CHAT_TOOLS[:3])
        assert upstream.received()[-1]["model"] == "m"


def test_route_with_no_pair_that_fits_reports(upstream, store_path, default_suite) -> None:
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, tool_budget=3),
        make_profile("wide", Tier.SMALL, default_suite, tool_budget=4),
    )
    settings = settings_for(
        upstream.base_url,
        store_path,
        tools={"budget": "route"},
        routing={"fallback": {"m": ["wide"]}},
        lazy={"allow": []},
    )
    with running_proxy(settings) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=CHAT_TOOLS)
        assert "x-gatekeeper-routed" not in raw.headers
        assert raw.headers[HEADER] == "offered=6; budget=3; action=reported"
