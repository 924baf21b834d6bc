"""The Responses and Messages APIs through the real proxy, driven by the official `openai` and
`anthropic` clients and the OpenAI Agents SDK, unmodified, against an upstream that speaks each
protocol natively and against a chat-only one (translation): hidden tools never reach the
upstream, hidden calls never reach the client, allowed calls round-trip."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import anthropic
import openai
import pytest
from conftest import ROOT, Proxy, claude, make_profile, running_proxy, seed_store, settings_for
from upstreams import NativeServer

from gatekeeper.rules.tiers import Tier

FUNCTIONS = [
    {
        "type": "function",
        "name": n,
        "description": f"the {n} tool",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    for n in ("read_file", "write_file", "execute_command")
]
CLAUDE_TOOLS = [
    {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in FUNCTIONS
]
HI = [{"role": "user", "content": "hi"}]
# The upstream calls a hidden tool and an allowed one, with some text.
BOTH = {
    "content": "on it",
    "tool_calls": [
        {"name": "execute_command", "arguments": {"path": "rm -rf /"}},
        {"name": "read_file", "arguments": {"path": "a.txt"}},
    ],
}


def offered(body: dict) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


@pytest.fixture(params=["native", "chat-only"])
def mode(request) -> str:
    return request.param


@pytest.fixture
def upstream_native(mode) -> Iterator[NativeServer]:
    with NativeServer(lambda body: BOTH) as server:
        yield server


@pytest.fixture
def proxy(upstream_native, mode, store_path, default_suite) -> Iterator[Proxy]:
    seed_store(
        store_path,
        make_profile("small-model", Tier.SMALL, default_suite),
        make_profile("medium-model", Tier.MEDIUM, default_suite),
    )
    protocols = ["chat", "responses", "messages"] if mode == "native" else ["chat"]
    settings = settings_for(
        upstream_native.base_url,
        store_path,
        upstream={"base_url": upstream_native.base_url, "api_key": "k", "protocols": protocols},
    )
    with running_proxy(settings) as running:
        yield running


def sent(upstream: NativeServer, mode: str, protocol: str) -> dict:
    """The last body the upstream received for a client `protocol` request."""
    if mode == "chat-only":
        return upstream.requests[-1]
    return {"responses": upstream.responses_requests, "messages": upstream.messages_requests}[protocol][-1]


# -- Responses -----------------------------------------------------------------------------


def test_responses_plain_gated_both_ways(proxy, upstream_native, mode):
    raw = proxy.client.responses.with_raw_response.create(model="medium-model", input="hi", tools=FUNCTIONS)
    response = raw.parse()
    assert offered(sent(upstream_native, mode, "responses")) == ["read_file", "write_file"]
    calls = [i for i in response.output if i.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("read_file", {"path": "a.txt"})]
    assert response.output_text == "on it"
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"
    assert raw.headers["x-gatekeeper-tier"] == "medium"


def test_responses_stream_gated_both_ways(proxy, upstream_native, mode):
    with proxy.client.responses.stream(model="small-model", input="hi", tools=FUNCTIONS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert offered(sent(upstream_native, mode, "responses")) == ["read_file"]
    names = [e.item.name for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert names == ["read_file"]
    assert "execute_command" not in json.dumps([e.model_dump() for e in events])
    assert [(i.name, i.arguments) for i in final.output if i.type == "function_call"] == [
        ("read_file", json.dumps({"path": "a.txt"}))
    ]
    indexes = sorted({e.output_index for e in events if hasattr(e, "output_index")})
    assert indexes == list(range(len(final.output)))


def test_responses_forcing_a_hidden_tool_is_a_400(proxy, upstream_native, mode):
    with pytest.raises(openai.BadRequestError) as info:
        proxy.client.responses.create(
            model="small-model",
            input="hi",
            tools=FUNCTIONS,
            tool_choice={"type": "function", "name": "execute_command"},
        )
    assert info.value.code == "tool_not_allowed" and "execute_command" in info.value.message
    with pytest.raises(openai.BadRequestError):
        proxy.client.responses.create(model="small-model", input="hi", tools=FUNCTIONS[2:], tool_choice="required")
    assert upstream_native.requests == upstream_native.responses_requests == []


# -- Messages ------------------------------------------------------------------------------


def test_messages_plain_gated_both_ways(proxy, upstream_native, mode):
    raw = claude(proxy).messages.with_raw_response.create(
        model="medium-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS
    )
    message = raw.parse()
    assert offered(sent(upstream_native, mode, "messages")) == ["read_file", "write_file"]
    assert [(b.type, getattr(b, "name", None)) for b in message.content] == [("text", None), ("tool_use", "read_file")]
    assert message.content[1].input == {"path": "a.txt"} and message.stop_reason == "tool_use"
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"


def test_messages_stream_gated_both_ways(proxy, upstream_native, mode):
    with claude(proxy).messages.stream(model="small-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert offered(sent(upstream_native, mode, "messages")) == ["read_file"]
    assert [(b.type, getattr(b, "name", None)) for b in final.content] == [("text", None), ("tool_use", "read_file")]
    assert final.content[1].input == {"path": "a.txt"}
    assert "execute_command" not in json.dumps([e.model_dump() for e in events], default=str)


def test_messages_only_hidden_call_ends_the_turn(upstream_native, mode, store_path, default_suite):
    upstream_native.responder = lambda body: {"content": None, "tool_calls": BOTH["tool_calls"][:1]}
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    protocols = ["chat", "responses", "messages"] if mode == "native" else ["chat"]
    settings = settings_for(
        upstream_native.base_url, store_path, upstream={"base_url": upstream_native.base_url, "protocols": protocols}
    )
    with running_proxy(settings) as proxy:
        client = claude(proxy)
        message = client.messages.create(model="small-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS)
        assert message.content == [] and message.stop_reason == "end_turn"
        with client.messages.stream(model="small-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS) as stream:
            final = stream.get_final_message()
        assert final.content == [] and final.stop_reason == "end_turn"


def test_messages_errors_are_anthropic_shaped(proxy, upstream_native, mode):
    client = claude(proxy)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="small-model",
            max_tokens=100,
            messages=HI,
            tools=CLAUDE_TOOLS,
            tool_choice={"type": "tool", "name": "execute_command"},
        )
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "invalid_request_error"
    assert "execute_command" in info.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="every offered tool is hidden"):
        client.messages.create(
            model="small-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS[2:], tool_choice={"type": "any"}
        )


def test_count_tokens_counts_what_would_be_sent(proxy, upstream_native, mode):
    client = claude(proxy)
    few = client.messages.count_tokens(model="small-model", messages=HI, tools=CLAUDE_TOOLS)
    many = client.messages.count_tokens(model="large-model-unmeasured", messages=HI, tools=CLAUDE_TOOLS)
    if mode == "native":
        assert offered(upstream_native.count_requests[-2]) == ["read_file"]
        assert few.input_tokens == 15
    else:
        assert few.input_tokens >= 1
    assert many.input_tokens == few.input_tokens  # an unmeasured model is served at unknown_tier (small)


# -- the OpenAI Agents SDK with its default model ------------------------------------------


def agent_turns(body: dict) -> dict:
    """First turn: call a hidden and an allowed tool; once a tool result is back: answer."""
    text = json.dumps(body.get("input") or body.get("messages"))
    if "function_call_output" in text or '"role": "tool"' in text:
        return {"content": "the file says hello", "tool_calls": []}
    return BOTH


async def test_agents_sdk_default_model_runs_only_allowed_tools(mode, store_path, default_suite):
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    ran: list[str] = []

    def tool(name: str):
        def run(path: str) -> str:
            ran.append(name)
            return "hello"

        return function_tool(run, name_override=name)

    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with NativeServer(agent_turns) as upstream:
        protocols = ["chat", "responses", "messages"] if mode == "native" else ["chat"]
        settings = settings_for(
            upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "protocols": protocols}
        )
        with running_proxy(settings) as proxy:
            set_default_openai_client(openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k"))
            agent = Agent(
                name="reader",
                model="small-model",
                tools=[tool(n) for n in ("read_file", "write_file", "execute_command")],
            )
            result = await Runner.run(agent, "read a.txt")
    assert result.final_output == "the file says hello"
    assert ran == ["read_file"]
    bodies = upstream.responses_requests if mode == "native" else upstream.requests
    assert len(bodies) == 2 and all(offered(b) == ["read_file"] for b in bodies)


def test_the_demo_protocol_requests_are_gated(store_path, default_suite):
    """examples/protocol_requests.py (the local demo's Responses and Messages requests) against a
    chat-only upstream, with the demo's own tools: translated, gated, the hidden call removed."""
    sys.path.insert(0, str(ROOT / "examples"))
    from local_demo import AGENT_MESSAGES, AGENT_TOOLS
    from protocol_requests import send_protocol_requests

    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with NativeServer(lambda body: BOTH) as upstream:
        settings = settings_for(upstream.base_url, store_path, upstream={"base_url": upstream.base_url})
        with running_proxy(settings) as proxy:
            lines = send_protocol_requests(proxy.url, "small-model", AGENT_TOOLS, AGENT_MESSAGES)
    for line in lines:
        assert "tier small (measured)" in line and "calls removed: execute_command" in line, line
        assert "answer: read_file(" in line, line
    assert all(offered(body) == ["read_file", "search_docs", "delete_file"] for body in upstream.requests)


async def test_agents_sdk_without_a_model_is_gated_at_unknown_tier(store_path, default_suite, monkeypatch):
    """An Agent given no model uses the SDK's default model name: unmeasured, so the proxy serves
    it at `unknown_tier` (fail_closed) and measures it in the background."""
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
    from agents.models.default_models import get_default_model

    set_tracing_disabled(True)
    monkeypatch.delenv("OPENAI_DEFAULT_MODEL", raising=False)
    seed_store(store_path)
    with NativeServer(agent_turns) as upstream:
        settings = settings_for(
            upstream.base_url,
            store_path,
            unknown_models="fail_closed",
            upstream={"base_url": upstream.base_url, "protocols": ["chat", "responses", "messages"]},
        )
        with running_proxy(settings) as proxy:
            set_default_openai_client(openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k"))
            agent = Agent(
                name="reader",
                tools=[function_tool(lambda path: "hello", name_override=n) for n in ("read_file", "execute_command")],
            )
            await Runner.run(agent, "read a.txt")
    first = upstream.responses_requests[0]
    assert first["model"] == get_default_model() and offered(first) == ["read_file"]
