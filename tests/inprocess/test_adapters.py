"""The adapters over real HTTP: the LiteLLM pre-call hook (through litellm's callback list and a
real `litellm.acompletion`) and the OpenAI SDK wrapper (sync and async clients)."""

from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm's bundled price map

import litellm
import openai
import pytest
from conftest import make_profile, seed_store, sent_tools, tool
from fastapi import HTTPException
from litellm.caching.dual_cache import DualCache
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import UserAPIKeyAuth

from gatekeeper import ConfigError
from gatekeeper.adapters.litellm_hook import GatekeeperHook
from gatekeeper.adapters.openai_sdk import gate_client
from gatekeeper.errors import ToolChoiceBlocked
from gatekeeper.rules.tiers import Tier

TOOLS = [tool("read_file"), tool("write_file"), tool("execute_command")]
HI = [{"role": "user", "content": "hi"}]
FORCE_EXECUTE = {"type": "function", "function": {"name": "execute_command"}}


# -- LiteLLM proxy hook ----------------------------------------------------------------------


@pytest.fixture
def hook(gk) -> Iterator[GatekeeperHook]:
    handler = GatekeeperHook(gk)
    litellm.callbacks.append(handler)
    yield handler
    litellm.callbacks.remove(handler)


async def proxy_pre_call(data: dict, call_type: str = "acompletion") -> dict:
    """What LiteLLM's `ProxyLogging.pre_call_hook` does with `litellm.callbacks` (the proxy extra is
    not installed here): call each CustomLogger that defines its own `async_pre_call_hook`, raise an
    exception it returns, take a dict it returns as the new request."""
    for callback in litellm.callbacks:
        if (
            isinstance(callback, CustomLogger)
            and "async_pre_call_hook" in vars(type(callback))
            and type(callback).async_pre_call_hook is not CustomLogger.async_pre_call_hook
        ):
            response = await callback.async_pre_call_hook(
                user_api_key_dict=UserAPIKeyAuth(), cache=DualCache(), data=data, call_type=call_type
            )
            if isinstance(response, Exception):
                raise response
            if isinstance(response, dict):
                data = response
    return data


async def through_litellm(upstream, data: dict):
    """The request as LiteLLM's router would send it: `model` mapped to an openai/ deployment."""
    data = dict(data)
    model = data.pop("model")
    return await litellm.acompletion(model=f"openai/{model}", api_base=upstream.base_url, api_key="x", **data)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("small-model", ["read_file"]),
        ("medium-model", ["read_file", "write_file"]),
        ("large-model", ["read_file", "write_file", "execute_command"]),
    ],
)
async def test_litellm_hook_filters_the_tools_litellm_sends(upstream, hook, model, expected):
    data = await proxy_pre_call({"model": model, "messages": HI, "tools": list(TOOLS)})
    response = await through_litellm(upstream, data)
    assert response.choices[0].message.content == "ok"
    assert sent_tools(upstream) == expected


async def test_litellm_hook_keys_by_reasoning_effort(upstream, hook):
    data = await proxy_pre_call(
        {"model": "effortful", "messages": HI, "tools": list(TOOLS), "reasoning_effort": "xhigh"}
    )
    assert [t["function"]["name"] for t in data["tools"]] == ["read_file", "write_file", "execute_command"]
    data = await proxy_pre_call({"model": "effortful", "messages": HI, "tools": list(TOOLS)})
    assert [t["function"]["name"] for t in data["tools"]] == ["read_file"]  # effortful@default: unmeasured


async def test_litellm_hook_drops_tools_and_tool_choice_when_none_remain(upstream, hook):
    data = await proxy_pre_call(
        {"model": "small-model", "messages": HI, "tools": [tool("execute_command")], "tool_choice": "auto"}
    )
    assert "tools" not in data and "tool_choice" not in data
    await through_litellm(upstream, data)
    assert "tools" not in upstream.requests[-1] and "tool_choice" not in upstream.requests[-1]


async def test_litellm_hook_refuses_a_tool_choice_forcing_a_hidden_tool(upstream, hook):
    with pytest.raises(HTTPException) as info:
        await proxy_pre_call(
            {"model": "small-model", "messages": HI, "tools": list(TOOLS), "tool_choice": FORCE_EXECUTE}
        )
    assert info.value.status_code == 400
    error = info.value.detail["error"]
    assert error["code"] == "tool_not_allowed"
    assert "execute_command" in error["message"] and "'large'" in error["message"] and "'small'" in error["message"]
    assert upstream.requests == []


async def test_litellm_hook_leaves_tool_less_and_other_calls_alone(upstream, hook, gk):
    plain = {"model": "never-seen", "messages": HI}
    assert await proxy_pre_call(dict(plain)) == plain
    embedding = {"model": "never-seen", "input": ["x"]}
    assert await proxy_pre_call(dict(embedding), call_type="aembedding") == embedding
    # A measurement is registered the moment it starts (gk.progress): none was, for either call.
    assert [p.key for p in gk.progress()] == []
    assert upstream.requests == []


async def test_litellm_hook_refuses_tools_on_a_call_type_it_cannot_gate(upstream, hook):
    with pytest.raises(HTTPException) as info:
        await proxy_pre_call(
            {"model": "small-model", "contents": [], "tools": list(TOOLS)}, call_type="agenerate_content"
        )
    assert info.value.status_code == 400 and info.value.detail["error"]["code"] == "call_type_not_gated"
    assert "agenerate_content" in info.value.detail["error"]["message"]


async def test_litellm_hook_reads_its_config_from_the_environment(
    upstream, store_path, default_suite, tmp_path, monkeypatch
):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(
        f"upstream:\n  base_url: {upstream.base_url}\nstore: {store_path}\n"
        "tools:\n  required_tier:\n    write_file: medium\n"
    )
    monkeypatch.setenv("GATEKEEPER_CONFIG", str(config))
    hook = GatekeeperHook()
    try:
        data = await hook.async_pre_call_hook(
            UserAPIKeyAuth(), DualCache(), {"model": "small-model", "messages": HI, "tools": list(TOOLS)}, "acompletion"
        )
        assert [t["function"]["name"] for t in data["tools"]] == ["read_file", "execute_command"]
    finally:
        hook.gk.close()


async def test_litellm_hook_without_config_says_what_to_set(monkeypatch):
    monkeypatch.delenv("GATEKEEPER_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="GATEKEEPER_CONFIG is not set"):
        await GatekeeperHook().async_pre_call_hook(
            UserAPIKeyAuth(), DualCache(), {"model": "m", "messages": HI, "tools": list(TOOLS)}, "acompletion"
        )


# -- OpenAI SDK wrapper ----------------------------------------------------------------------


@pytest.fixture
def client(upstream, gk) -> openai.OpenAI:
    return gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)


@pytest.fixture
def aclient(upstream, gk) -> openai.AsyncOpenAI:
    return gate_client(openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)


def test_sync_client_sends_only_allowed_tools(upstream, client):
    completion = client.chat.completions.create(model="medium-model", messages=HI, tools=TOOLS)
    assert completion.choices[0].message.content == "ok"
    assert sent_tools(upstream) == ["read_file", "write_file"]


def test_sync_client_effort_is_part_of_the_key(upstream, client):
    client.chat.completions.create(model="effortful", messages=HI, tools=TOOLS, reasoning_effort="xhigh")
    assert sent_tools(upstream) == ["read_file", "write_file", "execute_command"]
    assert upstream.requests[-1]["reasoning_effort"] == "xhigh"


def test_sync_client_raw_response_stream_and_options_are_gated(upstream, client):
    raw = client.chat.completions.with_raw_response.create(model="small-model", messages=HI, tools=TOOLS)
    assert raw.parse().choices[0].message.content == "ok" and sent_tools(upstream) == ["read_file"]
    with client.chat.completions.stream(model="small-model", messages=HI, tools=TOOLS) as stream:
        assert stream.get_final_completion().choices[0].message.content == "ok"
    assert sent_tools(upstream) == ["read_file"] and upstream.requests[-1]["stream"] is True
    client.with_options(timeout=5).chat.completions.create(model="small-model", messages=HI, tools=TOOLS)
    assert sent_tools(upstream) == ["read_file"]
    with client.with_streaming_response.chat.completions.create(
        model="small-model", messages=HI, tools=TOOLS
    ) as response:
        assert response.parse().choices[0].message.content == "ok"
    assert sent_tools(upstream) == ["read_file"]


def test_sync_client_drops_tools_when_none_remain(upstream, client):
    client.chat.completions.create(
        model="small-model", messages=HI, tools=[tool("execute_command")], tool_choice="auto"
    )  # "required" over hidden tools only is a 400 (issue 9)
    assert "tools" not in upstream.requests[-1] and "tool_choice" not in upstream.requests[-1]


def test_sync_client_refuses_a_forced_hidden_tool_before_sending(upstream, client):
    with pytest.raises(ToolChoiceBlocked, match=r"execute_command.*'large'.*'small'"):
        client.chat.completions.create(model="small-model", messages=HI, tools=TOOLS, tool_choice=FORCE_EXECUTE)
    assert upstream.requests == []


def test_sync_client_passes_everything_else_through(upstream, client, gk):
    assert [m.id for m in client.models.list()] == ["scripted"]
    client.chat.completions.create(model="never-seen", messages=HI, temperature=0.2, seed=3)
    body = upstream.requests[-1]
    assert body["temperature"] == 0.2 and body["seed"] == 3 and "tools" not in body
    # A measurement is registered the moment it starts (gk.progress): a call without tools started none.
    assert [p.key for p in gk.progress()] == []
    assert len(upstream.requests) == 1


def test_the_original_client_is_not_gated(upstream, gk):
    original = openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
    gate_client(original, gk).chat.completions.create(model="small-model", messages=HI, tools=TOOLS)
    assert sent_tools(upstream) == ["read_file"]
    original.chat.completions.create(model="small-model", messages=HI, tools=TOOLS)
    assert sent_tools(upstream) == ["read_file", "write_file", "execute_command"]


async def test_async_client_sends_only_allowed_tools(upstream, aclient):
    completion = await aclient.chat.completions.create(model="small-model", messages=HI, tools=TOOLS)
    assert completion.choices[0].message.content == "ok"
    assert sent_tools(upstream) == ["read_file"]
    await aclient.chat.completions.create(model="large-model", messages=HI, tools=TOOLS)
    assert sent_tools(upstream) == ["read_file", "write_file", "execute_command"]


async def test_async_client_stream_and_raw_response_are_gated(upstream, aclient):
    async with aclient.chat.completions.stream(model="medium-model", messages=HI, tools=TOOLS) as stream:
        assert (await stream.get_final_completion()).choices[0].message.content == "ok"
    assert sent_tools(upstream) == ["read_file", "write_file"]
    raw = await aclient.chat.completions.with_raw_response.create(model="small-model", messages=HI, tools=TOOLS)
    assert raw.parse().choices[0].message.content == "ok" and sent_tools(upstream) == ["read_file"]
    async with aclient.chat.completions.with_streaming_response.create(
        model="small-model", messages=HI, tools=TOOLS
    ) as response:
        assert (await response.parse()).choices[0].message.content == "ok"
    assert sent_tools(upstream) == ["read_file"]


async def test_async_client_refuses_a_forced_hidden_tool(upstream, aclient):
    with pytest.raises(ToolChoiceBlocked):
        await aclient.chat.completions.create(model="medium-model", messages=HI, tools=TOOLS, tool_choice=FORCE_EXECUTE)
    assert upstream.requests == []


async def test_litellm_hook_refuses_tools_smuggled_in_extra_body(upstream, hook):
    # LiteLLM merges extra_body into the provider's request: a call with no tool field of its own
    # but tools in extra_body is gated (and refused), not waved through as tool-less.
    with pytest.raises(HTTPException) as info:
        await proxy_pre_call(
            {"model": "small-model", "messages": HI, "extra_body": {"tools": [tool("execute_command")]}}
        )
    assert info.value.status_code == 400 and "extra_body.tools" in info.value.detail["error"]["message"]
    data = await proxy_pre_call({"model": "small-model", "messages": HI, "extra_body": {"temperature": 0}})
    await through_litellm(upstream, data)
    assert upstream.requests[-1]["temperature"] == 0 and "tools" not in upstream.requests[-1]
