"""Capability routing through the real proxy and the official clients (openai for chat and
Responses, anthropic for Messages), plain and streamed, over a real upstream that speaks all
three protocols natively and records what it received."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import pytest
import structlog
from conftest import Proxy, make_profile, running_proxy, seed_store, settings_for, wait_until
from prometheus_client.parser import text_string_to_metric_families
from scripted import ScriptedServer
from upstreams import NativeServer

from gatekeeper.observe.logs import merge_context
from gatekeeper.rules.tiers import Tier

PROTOCOLS = ["chat", "responses", "messages"]
STREAMED = [False, True]
HI = [{"role": "user", "content": "hi"}]
# Under settings_for's rules: read_file small, write_file medium, execute_command large.
EFFORT_FIELD = {
    "chat": ("reasoning_effort",),
    "responses": ("reasoning", "effort"),
    "messages": ("output_config", "effort"),
}


@dataclass
class Seen:
    """What the client read, and what the upstream received."""

    headers: httpx.Headers
    calls: list[str]  # tool calls in the answer the client read
    answer_model: str | None  # the answer's own `model`
    sent: dict[str, Any]  # the body the upstream received

    @property
    def sent_effort(self) -> str | None:
        value: Any = self.sent
        for key in EFFORT_FIELD[self.protocol]:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    protocol: str = "chat"

    @property
    def sent_tools(self) -> list[str]:
        tools = self.sent.get("tools") or []
        return [t["function"]["name"] if "function" in t else t["name"] for t in tools]


def send(
    proxy: Proxy, upstream: NativeServer, protocol: str, model: str, effort: str | None, tools: list[str], stream: bool
) -> Seen:
    if protocol == "chat":
        extra = {"reasoning_effort": effort} if effort else {}
        schemas = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in tools]
        raw = proxy.client.chat.completions.with_raw_response.create(
            model=model, messages=HI, tools=schemas, stream=stream, **extra
        )
        if stream:
            chunks = list(raw.parse())
            calls = [
                c.function.name
                for ch in chunks
                for d in ch.choices
                for c in d.delta.tool_calls or []
                if c.function.name
            ]
            answer_model = chunks[0].model
        else:
            answer = raw.parse()
            calls = [c.function.name for c in answer.choices[0].message.tool_calls or []]
            answer_model = answer.model
        sent = upstream.requests[-1]
    elif protocol == "responses":
        extra = {"reasoning": {"effort": effort}} if effort else {}
        schemas = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in tools]
        raw = proxy.client.responses.with_raw_response.create(
            model=model, input="hi", tools=schemas, stream=stream, **extra
        )
        if stream:
            events = list(raw.parse())
            final = next(e.response for e in events if e.type == "response.completed")
        else:
            final = raw.parse()
        calls = [item.name for item in final.output if item.type == "function_call"]
        answer_model = final.model
        sent = upstream.responses_requests[-1]
    else:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="client-key", max_retries=0)
        extra = {"output_config": {"effort": effort}} if effort else {}
        schemas = [{"name": n, "input_schema": {"type": "object"}} for n in tools]
        raw = client.messages.with_raw_response.create(
            model=model, max_tokens=50, messages=HI, tools=schemas, stream=stream, **extra
        )
        if stream:
            events = list(raw.parse())
            calls = [
                e.content_block.name
                for e in events
                if e.type == "content_block_start" and e.content_block.type == "tool_use"
            ]
            answer_model = next(e.message.model for e in events if e.type == "message_start")
        else:
            message = raw.parse()
            calls = [b.name for b in message.content if b.type == "tool_use"]
            answer_model = message.model
        sent = upstream.messages_requests[-1]
    return Seen(raw.headers, calls, answer_model, sent, protocol)


def calling(name: str):
    return lambda body: {"content": "done", "tool_calls": [{"name": name, "arguments": {}}]}


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer(calling("write_file")) as server:
        yield server


def seeded_proxy(upstream: NativeServer, store_path, suite, **settings) -> Any:
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, suite, effort="low"),
        make_profile("m", Tier.MEDIUM, suite, effort="medium"),
        make_profile("m", Tier.LARGE, suite, effort="xhigh"),
        make_profile("gemma-2b", Tier.SMALL, suite),
        make_profile("big-model", Tier.LARGE, suite),
    )
    base = settings_for(upstream.base_url, store_path, **settings)
    native = base.upstream.model_copy(update={"protocols": ["chat", "responses", "messages"]})
    return running_proxy(base.model_copy(update={"upstream": native}))


ROUTING = {"escalate_effort": True, "fallback": {"gemma-*": ["big-model"]}, "max_effort": "high"}


@pytest.fixture
def proxy(upstream, store_path, default_suite) -> Iterator[Proxy]:
    with seeded_proxy(upstream, store_path, default_suite, routing=ROUTING) as running:
        yield running


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_low_effort_request_reaches_the_upstream_at_the_effort_that_admits_its_tool(
    proxy, upstream, protocol, stream
):
    seen = send(proxy, upstream, protocol, "m", "low", ["read_file", "write_file"], stream)
    assert seen.sent_effort == "medium" and seen.sent["model"] == "m"
    assert seen.sent_tools == ["read_file", "write_file"]
    assert seen.headers["x-gatekeeper-routed"] == "m@medium"
    assert seen.headers["x-gatekeeper-tier"] == "medium"
    assert seen.calls == ["write_file"]  # the answer side enforces what the pair used was offered


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_small_model_with_a_large_tool_reaches_the_fallback_model(proxy, upstream, protocol, stream):
    upstream.responder = calling("execute_command")
    seen = send(proxy, upstream, protocol, "gemma-2b", None, ["execute_command"], stream)
    assert seen.sent["model"] == "big-model" and seen.sent_effort is None
    assert seen.sent_tools == ["execute_command"]
    assert seen.headers["x-gatekeeper-routed"] == "big-model@default"
    assert seen.headers["x-gatekeeper-tier"] == "large"
    assert seen.answer_model == "big-model"  # relayed as the model that answered wrote it
    assert seen.calls == ["execute_command"]


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_the_asked_pair_admits_is_untouched(proxy, upstream, protocol, stream):
    seen = send(proxy, upstream, protocol, "m", "medium", ["read_file", "write_file"], stream)
    assert seen.sent_effort == "medium" and seen.sent["model"] == "m"
    assert seen.sent_tools == ["read_file", "write_file"]
    assert "x-gatekeeper-routed" not in seen.headers
    assert seen.headers["x-gatekeeper-tier"] == "medium"


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_routing_nothing_changes(upstream, store_path, default_suite, protocol, stream):
    with seeded_proxy(upstream, store_path, default_suite) as proxy:
        seen = send(proxy, upstream, protocol, "m", "low", ["read_file", "write_file"], stream)
    assert seen.sent_effort == "low" and seen.sent["model"] == "m"
    assert seen.sent_tools == ["read_file"]
    assert "x-gatekeeper-routed" not in seen.headers
    assert seen.headers["x-gatekeeper-tier"] == "small"
    assert seen.calls == []  # write_file was hidden from this pair: its call is removed


def test_max_effort_stops_escalation_and_the_tool_is_hidden(proxy, upstream):
    seen = send(proxy, upstream, "chat", "m", "low", ["read_file", "execute_command"], False)
    # Only m@xhigh is large, above max_effort: high, and m is no fallback pattern.
    assert seen.sent_effort == "low" and seen.sent_tools == ["read_file"]
    assert "x-gatekeeper-routed" not in seen.headers


def routed_total(proxy: Proxy) -> dict[str, float]:
    text = httpx.get(proxy.url + "/metrics", timeout=10).text
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gatekeeper_routed_total"
    }


def test_routing_is_counted_by_reason(proxy, upstream):
    before = routed_total(proxy)
    send(proxy, upstream, "chat", "m", "low", ["write_file"], False)
    send(proxy, upstream, "chat", "gemma-2b", None, ["execute_command"], False)
    send(proxy, upstream, "chat", "m", "medium", ["write_file"], False)
    after = routed_total(proxy)
    for reason in ("escalated", "fallback", "none"):
        assert after.get(reason, 0) - before.get(reason, 0) == 1, reason


def test_the_request_log_line_says_where_it_was_routed(proxy, upstream):
    with structlog.testing.capture_logs(processors=[merge_context]) as logs:
        send(proxy, upstream, "chat", "m", "low", ["write_file"], False)
        line = wait_until(lambda: next((e for e in logs if e["event"] == "request"), None), "the request log line")
    assert (line["model"], line["effort"]) == ("m", "low")  # what the client asked
    assert (line["routed"], line["routed_reason"], line["tier"]) == ("m@medium", "escalated", "medium")


@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_a_translated_request_reaches_a_chat_only_upstream_at_the_routed_effort(store_path, default_suite, protocol):
    with ScriptedServer(calling("write_file")) as chat_only:
        seed_store(
            store_path,
            make_profile("m", Tier.SMALL, default_suite, effort="low"),
            make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
        )
        with running_proxy(settings_for(chat_only.base_url, store_path, routing={})) as proxy:
            if protocol == "responses":
                tools = [{"type": "function", "name": "write_file", "parameters": {"type": "object"}}]
                raw = proxy.client.responses.with_raw_response.create(
                    model="m", input="hi", tools=tools, reasoning={"effort": "low"}
                )
            else:
                client = anthropic.Anthropic(base_url=proxy.url, api_key="client-key", max_retries=0)
                tools = [{"name": "write_file", "input_schema": {"type": "object"}}]
                raw = client.messages.with_raw_response.create(
                    model="m", max_tokens=50, messages=HI, tools=tools, output_config={"effort": "low"}
                )
    assert raw.headers["x-gatekeeper-routed"] == "m@medium"
    sent = chat_only.requests[-1]
    assert sent["reasoning_effort"] == "medium" and [t["function"]["name"] for t in sent["tools"]] == ["write_file"]


def test_an_economized_request_reaches_the_upstream_at_the_cheaper_effort(upstream, store_path, default_suite):
    bounds = {c: [0.93, 1.0] for c in ("instruction", "json", "toolCalling")}
    seed_store(
        store_path,
        make_profile("m", Tier.LARGE, default_suite, effort="low", score_intervals=bounds),
        make_profile("m", Tier.LARGE, default_suite, effort="xhigh", score_intervals=bounds),
    )
    settings = settings_for(upstream.base_url, store_path, routing={"economize_effort": True})
    with running_proxy(settings) as proxy:
        seen = send(proxy, upstream, "chat", "m", "xhigh", ["write_file"], False)
    assert seen.sent_effort == "low" and seen.headers["x-gatekeeper-routed"] == "m@low"
    assert seen.calls == ["write_file"]


def test_the_routed_header_stays_ascii_whatever_the_model_is_called(upstream, store_path, default_suite):
    seed_store(
        store_path,
        make_profile("modèle-東", Tier.SMALL, default_suite, effort="low"),
        make_profile("modèle-東", Tier.MEDIUM, default_suite, effort="high"),
    )
    with running_proxy(settings_for(upstream.base_url, store_path, routing={})) as proxy:
        seen = send(proxy, upstream, "chat", "modèle-東", "low", ["write_file"], False)
    assert seen.headers["x-gatekeeper-routed"] == "mod%C3%A8le-%E6%9D%B1@high"
    assert seen.sent["model"] == "modèle-東" and seen.sent_effort == "high"
