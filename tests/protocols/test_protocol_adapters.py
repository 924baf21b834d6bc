"""In-process gating of the Responses and Messages APIs: the OpenAI SDK wrapper's
`responses.create`, the Anthropic SDK wrapper, the LiteLLM hook's Responses and Anthropic call
types, and the `gated` forms for pydantic-ai and the OpenAI Agents SDK. The upstream is a real
HTTP server speaking each protocol natively (tests/upstreams.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import anthropic
import openai
import pytest
from fastapi import HTTPException
from litellm.caching.dual_cache import DualCache
from litellm.proxy._types import UserAPIKeyAuth
from upstreams import NativeServer

from gatekeeper.adapters import anthropic_sdk, openai_sdk
from gatekeeper.adapters.litellm_hook import GatekeeperHook
from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.inprocess.wrap import gate_agent, gated_prepare_tools

FUNCTIONS = [
    {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}}
    for n in ("read_file", "write_file", "execute_command")
]
ANTHROPIC_TOOLS = [
    {"name": n, "input_schema": {"type": "object", "properties": {}}}
    for n in ("read_file", "write_file", "execute_command")
]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def upstream() -> Iterator[NativeServer]:  # overrides conftest's: the seeded `gk` fixture uses it
    with NativeServer() as server:
        yield server


def names(body: dict) -> list[str] | None:
    return [t["name"] for t in body["tools"]] if "tools" in body else None


# -- OpenAI SDK: responses -----------------------------------------------------------------


def test_openai_responses_create_sends_only_allowed_tools(upstream, gk):
    client = openai_sdk.gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)
    response = client.responses.create(model="medium-model", input="hi", tools=FUNCTIONS)
    assert response.output_text == "ok"
    assert names(upstream.responses_requests[-1]) == ["read_file", "write_file"]
    client.responses.create(model="effortful", input="hi", tools=FUNCTIONS, reasoning={"effort": "xhigh"})
    assert names(upstream.responses_requests[-1]) == ["read_file", "write_file", "execute_command"]
    with client.responses.stream(model="small-model", input="hi", tools=FUNCTIONS) as stream:
        assert stream.get_final_response().output_text == "ok"
    assert names(upstream.responses_requests[-1]) == ["read_file"]


def test_openai_responses_forcing_a_hidden_tool_raises_before_sending(upstream, gk):
    client = openai_sdk.gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)
    with pytest.raises(ToolChoiceBlocked, match="execute_command"):
        client.responses.create(
            model="small-model",
            input="hi",
            tools=FUNCTIONS,
            tool_choice={"type": "function", "name": "execute_command"},
        )
    with pytest.raises(RequestInvalid, match="extra_body"):
        client.responses.create(model="small-model", input="hi", extra_body={"tools": FUNCTIONS})
    assert upstream.responses_requests == []


async def test_async_openai_responses_are_gated(upstream, gk):
    client = openai_sdk.gate_client(openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)
    await client.responses.create(model="small-model", input="hi", tools=FUNCTIONS, parallel_tool_calls=True)
    assert names(upstream.responses_requests[-1]) == ["read_file"]
    await client.responses.create(model="small-model", input="hi", tools=FUNCTIONS[2:], parallel_tool_calls=True)
    assert "tools" not in upstream.responses_requests[-1]
    assert "parallel_tool_calls" not in upstream.responses_requests[-1]


# -- Anthropic SDK -------------------------------------------------------------------------


def test_anthropic_messages_create_and_stream_are_gated(upstream, gk):
    client = anthropic_sdk.gate_client(
        anthropic.Anthropic(base_url=upstream.base_url[:-3], api_key="x", max_retries=0), gk
    )
    message = client.messages.create(model="medium-model", max_tokens=100, messages=HI, tools=ANTHROPIC_TOOLS)
    assert message.content[0].text == "ok"
    assert names(upstream.messages_requests[-1]) == ["read_file", "write_file"]
    with client.messages.stream(model="small-model", max_tokens=100, messages=HI, tools=ANTHROPIC_TOOLS) as stream:
        assert stream.get_final_message().content[0].text == "ok"
    assert names(upstream.messages_requests[-1]) == ["read_file"]
    client.messages.create(
        model="effortful",
        max_tokens=100,
        messages=HI,
        tools=ANTHROPIC_TOOLS,
        thinking={"type": "enabled", "budget_tokens": 20000},
    )  # -> effort high: medium tier
    assert names(upstream.messages_requests[-1]) == ["read_file", "write_file"]


def test_anthropic_count_tokens_counts_the_gated_tools(upstream, gk):
    client = anthropic_sdk.gate_client(
        anthropic.Anthropic(base_url=upstream.base_url[:-3], api_key="x", max_retries=0), gk
    )
    count = client.messages.count_tokens(model="small-model", messages=HI, tools=ANTHROPIC_TOOLS)
    assert count.input_tokens == 15 and names(upstream.count_requests[-1]) == ["read_file"]


async def test_async_anthropic_forcing_a_hidden_tool_raises(upstream, gk):
    client = anthropic_sdk.gate_client(
        anthropic.AsyncAnthropic(base_url=upstream.base_url[:-3], api_key="x", max_retries=0), gk
    )
    with pytest.raises(ToolChoiceBlocked):
        await client.messages.create(
            model="small-model",
            max_tokens=100,
            messages=HI,
            tools=ANTHROPIC_TOOLS,
            tool_choice={"type": "tool", "name": "execute_command"},
        )
    with pytest.raises(ToolChoiceBlocked, match="every offered tool is hidden"):
        await client.messages.create(
            model="small-model", max_tokens=100, messages=HI, tools=ANTHROPIC_TOOLS[2:], tool_choice={"type": "any"}
        )
    async with client.messages.stream(
        model="small-model", max_tokens=100, messages=HI, tools=ANTHROPIC_TOOLS
    ) as stream:
        assert (await stream.get_final_message()).content[0].text == "ok"
    assert names(upstream.messages_requests[-1]) == ["read_file"]


# -- LiteLLM hook --------------------------------------------------------------------------


async def test_litellm_hook_gates_responses_and_anthropic_messages(gk):
    hook = GatekeeperHook(gk)
    data = await hook.async_pre_call_hook(
        UserAPIKeyAuth(),
        DualCache(),
        {"model": "small-model", "input": "hi", "tools": list(FUNCTIONS), "parallel_tool_calls": True},
        "aresponses",
    )
    assert names(data) == ["read_file"]
    data = await hook.async_pre_call_hook(
        UserAPIKeyAuth(),
        DualCache(),
        {"model": "medium-model", "messages": HI, "max_tokens": 10, "tools": list(ANTHROPIC_TOOLS)},
        "anthropic_messages",
    )
    assert names(data) == ["read_file", "write_file"]
    with pytest.raises(HTTPException) as info:
        await hook.async_pre_call_hook(
            UserAPIKeyAuth(),
            DualCache(),
            {
                "model": "small-model",
                "messages": HI,
                "max_tokens": 10,
                "tools": list(ANTHROPIC_TOOLS),
                "tool_choice": {"type": "tool", "name": "execute_command"},
            },
            "anthropic_messages",
        )
    assert info.value.status_code == 400 and info.value.detail["error"]["code"] == "tool_not_allowed"


# -- pydantic-ai and the OpenAI Agents SDK, in process -------------------------------------


async def test_pydantic_ai_prepare_tools_hook_keeps_the_allowed_tools(upstream, gk):
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import PrepareTools
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("small-model", provider=OpenAIProvider(base_url=upstream.base_url, api_key="x"))
    agent = Agent(model, capabilities=[PrepareTools(gated_prepare_tools(gk))])
    for name in ("read_file", "write_file", "execute_command"):
        agent.tool_plain(name=name)(lambda: "done")
    result = await agent.run("hi")
    assert result.output == "ok"
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["read_file"]


async def test_agents_sdk_gate_agent_hides_tools_above_the_tier(upstream, gk):
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # traces would be exported to OpenAI
    tools = [function_tool(lambda: "done", name_override=n) for n in ("read_file", "write_file", "execute_command")]
    model = OpenAIResponsesModel("medium-model", openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x"))
    agent = gate_agent(gk, Agent(name="a", model="medium-model", tools=tools))
    result = await Runner.run(agent.clone(model=model), "hi")
    assert result.final_output == "ok"
    assert names(upstream.responses_requests[-1]) == ["read_file", "write_file"]


def test_a_call_whose_only_tools_are_smuggled_is_gated(upstream, gk):
    """No tool field of its own, but tools where the SDK or the upstream would find them: gated."""
    client = openai_sdk.gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0), gk)
    smuggled = {"chat_template_kwargs": {"tools": [{"type": "function", "function": {"name": "execute_command"}}]}}
    with pytest.raises(RequestInvalid, match=r"extra_body\.chat_template_kwargs"):
        client.chat.completions.create(model="small-model", messages=HI, extra_body=smuggled)
    addition = {"type": "additional_tools", "tools": [{"type": "function", "name": "execute_command"}]}
    client.responses.create(model="small-model", input=[{"role": "user", "content": "hi"}, addition])
    assert "execute_command" not in json.dumps(upstream.requests + upstream.responses_requests)
