"""What the sixth red-team round (issue 20, on the main of 2026-12-01 after round 5) got through,
each sent by the official client (through the real proxy on a real port, through the in-process
wrappers, or through a real LiteLLM proxy with the hook) to a real upstream (tests/upstreams.py,
tests/scripted.py); what the upstream received, and what the client read, is the evidence.

- The SDK wrappers' HTTP transport (gatekeeper.inprocess.answers) knew a model call by its
  path's ending, exactly: the SDK's low-level `client.post("/chat/completions/", body=...)` was
  "not a model call" and sent as it was, and the SDK's own HTTP client, below the gate, followed
  the upstream's redirect (Starlette's and FastAPI's servers answer `/chat/completions/` with a
  307 to `/chat/completions`): the model was offered `execute_command` and its call reached the
  caller. A path is compared as servers route it now (trailing slashes and case ignored), the
  redirects are followed above the gate (each hop judged), and a POST that offers tools to a
  path that is no model call is refused. A model call whose body offered nothing to gate was
  sent as its raw bytes, which may say more than the gate read (a duplicate key: the gate read
  the last one): it is sent as read.
- The LiteLLM hook gated requests only: a model's call of a tool the request never offered (a
  hallucination, or a prompt naming a hidden tool) reached the LiteLLM client, plain or
  streamed, in chat, Responses and Messages. The hook enforces answers now, in LiteLLM's
  post-call hooks: a plain answer has the call removed (or explained, `blocked_calls`); a stream
  too (issue 43: it was cut with an error, which LiteLLM cannot report once the response has
  started: clients saw a broken connection). A request that offered no tools offers nothing, as
  at the proxy.
- Messages streams: a `message_delta` (or `message_stop`) carrying a `content` list or a whole
  `message` with a `tool_use` block of a hidden tool was relayed as sent (the filter judged only
  content_block events). The SDKs build the message from content_block events, but a client that
  reads the final event's message would run the call. Both events keep only the fields the API
  defines for them now.
- `gate_agent` (Agents SDK) did not gate handoffs: a handoff is offered to the model as a function
  tool (`transfer_to_<agent>`), and the agent handed to ran its own tools ungated. A handoff is
  judged by its tool name at each turn now (a rule may name it: `transfer_to_*: medium`), and the
  agent it hands to is gated the same way (by its own model's tier). The tools of the agent's
  MCP servers (`mcp_servers`: listed by the SDK at each turn) were never gated: they are listed,
  and called, only when the tier allows `<server name>.<tool>`.
- pydantic-ai's native tools (`capabilities=[NativeTool(WebSearchTool())]`) never reach
  `PrepareTools`: with `gated_prepare_tools` and an ungated client, `web_search` went to the
  provider at any tier. `gated_capability(gk)` judges them by their built-in family (an
  `MCPServerTool` as its server) in each request; through the gated clients they were judged
  already (pinned here too).
- A rule named its tool exactly: a client offering `EXECUTE_COMMAND`, `execute_command\u200b`
  (a zero-width space a tokenizer may not show the model), `\ufeffexecute_command`, a fullwidth
  form or a trailing space gave a small model the hidden tool under its own name, in every
  protocol (and routing judged the request's need without it: sent to a medium pair). A rule
  now also covers every name that folds to the one it names (NFKC, invisible characters
  removed, case folded), when that rule is higher; a call still matches only the exact name
  offered (`read_file\u200b` is not `read_file`).
- A Responses output text annotation or a Messages text citation of a type the API does not
  define (a call-shaped object) was relayed; removed now, plain and streamed. No SDK parsed
  them as calls (the SDKs read them as citations), so this is hardening.
- Held, and pinned here: a compressed body (refused with a 415 naming the encoding now; it was
  a 400 "not valid UTF-8"), a BOM or UTF-16 body (400), duplicate keys (the upstream gets the
  body as the gate read it), query strings (never sent on), `X-HTTP-Method-Override` (never
  sent on), path variants (404/405), pydantic-ai's native tools through the gated clients
  (judged by their family), chat `modalities` (a closed set now) and Messages
  `output_config.effort` / `thinking.type` (closed sets).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import litellm
import openai
import pytest
from conftest import ROOT, make_profile, running_proxy, seed_store, settings_for
from scripted import RawAnswer, RawUpstream
from serving import litellm_example
from upstreams import NativeServer

from gatekeeper import Gatekeeper, RequestInvalid
from gatekeeper.adapters import anthropic_sdk, openai_sdk
from gatekeeper.adapters.litellm_hook import GatekeeperHook
from gatekeeper.inprocess.wrap import gate_agent
from gatekeeper.rules.tiers import Tier

# Under settings_for's rules (conftest): read_file small, execute_command large.
OBJECT = {"type": "object", "properties": {}}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": OBJECT}} for n in ("read_file", "execute_command")
]
RESPONSES_TOOLS = [{"type": "function", "name": n, "parameters": OBJECT} for n in ("read_file", "execute_command")]
CLAUDE_TOOLS = [{"name": n, "input_schema": OBJECT} for n in ("read_file", "execute_command")]
HI = [{"role": "user", "content": "hi"}]
BOTH_CALLS = {
    "content": None,
    "tool_calls": [{"name": "execute_command", "arguments": "{}"}, {"name": "read_file", "arguments": "{}"}],
}


@pytest.fixture
def upstream() -> Iterator[NativeServer]:  # overrides conftest's: the seeded `gk` fixture uses it
    with NativeServer(lambda body: BOTH_CALLS) as server:
        yield server


def received_text(upstream: NativeServer) -> str:
    return repr(upstream.received())


# -- the wrappers' transport knows a model call however its path is written -----------------------


@pytest.mark.parametrize("path", ["/chat/completions/", "/chat/completions//"])
def test_a_model_call_on_a_redirected_path_is_gated(upstream, gk, path):
    client = openai_sdk.gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)
    answer = client.post(
        path, body={"model": "small-model", "messages": HI, "tools": CHAT_TOOLS}, cast_to=httpx.Response
    )
    assert len(upstream.requests) == 1  # the upstream's redirect was followed, once, through the gate
    assert [t["function"]["name"] for t in upstream.requests[0]["tools"]] == ["read_file"]
    calls = answer.json()["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["read_file"]


async def test_a_redirected_messages_call_is_gated_async(upstream, gk):
    base = upstream.base_url.removesuffix("/v1")
    claude = anthropic_sdk.gate_client(anthropic.AsyncAnthropic(base_url=base, api_key="x", max_retries=0), gk)
    body = {"model": "small-model", "max_tokens": 5, "messages": HI, "tools": CLAUDE_TOOLS}
    answer = await claude.post("/v1/messages/", body=body, cast_to=dict[str, Any])
    assert [t["name"] for t in upstream.messages_requests[0]["tools"]] == ["read_file"]
    assert [b["name"] for b in answer["content"] if b["type"] == "tool_use"] == ["read_file"]


def test_tools_posted_to_a_path_that_is_no_model_call_are_refused(upstream, gk):
    client = openai_sdk.gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)
    with pytest.raises(RequestInvalid, match=r"POST /v1/chat/completions\.json is not a model call"):
        client.post(
            "/chat/completions.json", body={"model": "small-model", "tools": CHAT_TOOLS}, cast_to=httpx.Response
        )
    assert upstream.received() == []


@pytest.mark.parametrize("path", ["/chat/completions", "/engines/small-model/completions"])
def test_a_compressed_body_is_refused_in_process_as_at_the_proxy(upstream, gk, path):
    """gzip bytes spell no tool field, so a compressed POST to a path that is not a model call
    passed the wrappers' check unread; a compressed body is refused on every path."""
    import gzip

    client = openai_sdk.gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)
    raw = gzip.compress(json.dumps({"model": "small-model", "tools": CHAT_TOOLS}).encode())
    with pytest.raises(RequestInvalid, match="Content-Encoding 'gzip' is not accepted"):
        client._client.post(
            f"{upstream.base_url}{path}",
            content=raw,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
    assert upstream.received() == []


# -- Messages stream events carry only what the API defines ------------------------------------------


def _sse(*docs: dict) -> bytes:
    return b"".join(f"event: {d['type']}\ndata: {json.dumps(d)}\n\n".encode() for d in docs)


def _message(content: list) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "small-model",
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def test_message_delta_and_stop_carry_no_content(store_path, default_suite):
    hidden = {"type": "tool_use", "id": "toolu_1", "name": "execute_command", "input": {}}
    stream = _sse(
        {"type": "message_start", "message": _message([])},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None, "content": [hidden]},
            "usage": {"output_tokens": 1},
            "content": [hidden],
        },
        {"type": "message_stop", "message": _message([hidden])},
    )
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with RawUpstream(RawAnswer(stream, content_type="text/event-stream")) as raw:
        settings = settings_for(
            raw.base_url, store_path, upstream={"base_url": raw.base_url, "protocols": ["messages"]}
        )
        with running_proxy(settings) as proxy:
            claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
            with claude.messages.stream(model="small-model", max_tokens=5, messages=HI, tools=CLAUDE_TOOLS) as events:
                seen = [event.model_dump() for event in events]
                assert events.get_final_message().content == []
            assert "execute_command" not in repr(seen)
            body = {"model": "small-model", "max_tokens": 5, "stream": True, "messages": HI, "tools": CLAUDE_TOOLS}
            relayed = httpx.post(f"{proxy.url}/v1/messages", json=body, timeout=10).text
    assert "execute_command" not in relayed
    assert 'data: {"type":"message_stop"}' in relayed


# -- the LiteLLM hook enforces answers -----------------------------------------------------------------


@pytest.fixture
def hook(gk) -> GatekeeperHook:
    return GatekeeperHook(gk)


async def gated_data(hook: GatekeeperHook, call_type: str, **body) -> dict:
    return await hook.async_pre_call_hook(None, None, {"model": "small-model", **body}, call_type)


async def drained(hook: GatekeeperHook, stream, data: dict) -> list:
    return [chunk async for chunk in hook.async_post_call_streaming_iterator_hook(None, stream, data)]


async def test_the_hook_removes_a_hidden_call_from_a_chat_answer(upstream, hook):
    data = await gated_data(hook, "acompletion", messages=HI, tools=CHAT_TOOLS)
    answer = await litellm.acompletion(
        model="openai/small-model", api_base=upstream.base_url, api_key="x", messages=HI, tools=data["tools"]
    )
    answer = await hook.async_post_call_success_hook(data, None, answer)
    assert [c.function.name for c in answer.choices[0].message.tool_calls] == ["read_file"]


async def test_the_hook_removes_a_hidden_call_from_responses_and_messages_answers(upstream, hook):
    data = await gated_data(hook, "aresponses", input="hi", tools=RESPONSES_TOOLS)
    answer = await litellm.aresponses(
        model="openai/small-model", api_base=upstream.base_url, api_key="x", input="hi", tools=data["tools"]
    )
    answer = await hook.async_post_call_success_hook(data, None, answer)
    assert [item.name for item in answer.output] == ["read_file"]
    data = await gated_data(hook, "aanthropic_messages", max_tokens=5, messages=HI, tools=CLAUDE_TOOLS)
    message = await litellm.anthropic.messages.acreate(
        model="anthropic/small-model",
        api_base=upstream.base_url.removesuffix("/v1"),
        api_key="x",
        max_tokens=5,
        messages=HI,
        tools=data["tools"],
    )
    message = await hook.async_post_call_success_hook(data, None, message)
    assert [b["name"] for b in message["content"] if b["type"] == "tool_use"] == ["read_file"]


async def test_a_gated_answer_in_another_form_is_judged_by_the_request_or_refused(upstream, hook):
    """A gated chat request's answer handed to the hook as a plain dict (a form LiteLLM's class
    check did not know) passed unjudged; one the hook cannot read at all is a 502."""
    data = await gated_data(hook, "acompletion", messages=HI, tools=CHAT_TOOLS)
    answer = await litellm.acompletion(
        model="openai/small-model", api_base=upstream.base_url, api_key="x", messages=HI, tools=data["tools"]
    )
    doc = await hook.async_post_call_success_hook(data, None, answer.model_dump(mode="json"))
    assert [c["function"]["name"] for c in doc["choices"][0]["message"]["tool_calls"]] == ["read_file"]
    data = await gated_data(hook, "acompletion", messages=HI, tools=CHAT_TOOLS)
    with pytest.raises(Exception, match="cannot read a object answer"):
        await hook.async_post_call_success_hook(data, None, object())


async def test_a_call_in_the_answer_to_a_request_without_tools_is_removed(upstream, hook):
    data = await gated_data(hook, "acompletion", messages=HI)
    answer = await litellm.acompletion(model="openai/small-model", api_base=upstream.base_url, api_key="x", messages=HI)
    answer = await hook.async_post_call_success_hook(data, None, answer)
    assert not answer.choices[0].message.tool_calls


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
async def test_the_hook_removes_a_hidden_call_from_a_stream(upstream, hook, protocol):
    if protocol == "chat":
        data = await gated_data(hook, "acompletion", messages=HI, tools=CHAT_TOOLS, stream=True)
        stream = await litellm.acompletion(
            model="openai/small-model",
            api_base=upstream.base_url,
            api_key="x",
            messages=HI,
            tools=data["tools"],
            stream=True,
        )
    elif protocol == "responses":
        data = await gated_data(hook, "aresponses", input="hi", tools=RESPONSES_TOOLS, stream=True)
        stream = await litellm.aresponses(
            model="openai/small-model",
            api_base=upstream.base_url,
            api_key="x",
            input="hi",
            tools=data["tools"],
            stream=True,
        )
    else:
        data = await gated_data(hook, "aanthropic_messages", max_tokens=5, messages=HI, tools=CLAUDE_TOOLS, stream=True)
        stream = await litellm.anthropic.messages.acreate(
            model="anthropic/small-model",
            api_base=upstream.base_url.removesuffix("/v1"),
            api_key="x",
            max_tokens=5,
            messages=HI,
            tools=data["tools"],
            stream=True,
        )
    relayed = "".join(
        c.decode() if isinstance(c, bytes) else c.model_dump_json() for c in await drained(hook, stream, data)
    )
    assert '"name":"read_file"' in relayed and '"name":"execute_command"' not in relayed


async def test_a_stream_of_offered_calls_passes_the_hook(hook):
    with NativeServer(
        lambda body: {"content": None, "tool_calls": [{"name": "read_file", "arguments": "{}"}]}
    ) as server:
        data = await gated_data(hook, "acompletion", messages=HI, tools=CHAT_TOOLS, stream=True)
        stream = await litellm.acompletion(
            model="openai/small-model",
            api_base=server.base_url,
            api_key="x",
            messages=HI,
            tools=data["tools"],
            stream=True,
        )
        chunks = await drained(hook, stream, data)
    names = [c.function.name for chunk in chunks for c in chunk.choices[0].delta.tool_calls or [] if c.function.name]
    assert names == ["read_file"]


@pytest.fixture(scope="module")
def litellm_calling(tmp_path_factory, default_suite) -> Iterator[tuple[openai.OpenAI, NativeServer]]:
    """A real LiteLLM proxy with the hook, local-model measured small, an upstream that calls both tools."""
    with litellm_example(tmp_path_factory.mktemp("litellm"), default_suite, lambda body: BOTH_CALLS) as (
        url,
        key,
        server,
    ):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60), server


def test_a_hidden_call_never_reaches_a_litellm_proxy_client(litellm_calling):
    client, _ = litellm_calling
    tools = [
        {"type": "function", "function": {"name": n, "parameters": OBJECT}} for n in ("read_file", "execute_command")
    ]
    answer = client.chat.completions.create(model="local-model", messages=HI, tools=tools)  # type: ignore[arg-type]
    assert [c.function.name for c in answer.choices[0].message.tool_calls or []] == ["read_file"]
    # Streamed, the hook removes the hidden call as the proxy does: the stream finishes well-formed.
    streamed, finished = [], []
    for chunk in client.chat.completions.create(model="local-model", messages=HI, tools=tools, stream=True):  # type: ignore[arg-type]
        if chunk.choices:
            streamed += [c.function.name for c in chunk.choices[0].delta.tool_calls or []]
            finished += [chunk.choices[0].finish_reason] if chunk.choices[0].finish_reason else []
    assert "execute_command" not in streamed
    assert "read_file" in streamed and finished


# -- gate_agent gates handoffs and the agents handed to, and its MCP servers' tools ------------------


def _agents_model(upstream: NativeServer):
    from agents import OpenAIChatCompletionsModel

    return OpenAIChatCompletionsModel("m", openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0))


def _function_tool(name: str):
    from agents import function_tool

    def run() -> str:
        return f"{name} ran"

    run.__name__ = name
    return function_tool(run)


async def test_gate_agent_gates_handoffs_and_the_agent_handed_to(store_path, default_suite):
    from agents import Agent, Runner, handoff, set_tracing_disabled

    set_tracing_disabled(True)  # traces would be exported to OpenAI

    def hand_off_once(body: dict) -> dict:
        offered = [t["function"]["name"] for t in body.get("tools", [])]
        if "transfer_to_worker" in offered:
            return {"content": None, "tool_calls": [{"name": "transfer_to_worker", "arguments": "{}"}]}
        return {"content": "done"}

    with NativeServer(hand_off_once) as server:
        rules = {"required_tier": {"execute_command": "large", "transfer_to_admin": "large"}}
        gk = Gatekeeper(settings_for(server.base_url, store_path, pins={"m": "small"}, tools=rules))
        try:
            model = _agents_model(server)
            worker = Agent(
                name="worker", model=model, tools=[_function_tool("execute_command"), _function_tool("read_file")]
            )
            admin = Agent(name="admin", model=model)
            custom = handoff(worker, tool_name_override="transfer_to_admin")  # a handoff object named by a rule
            triage = Agent(name="triage", model=model, handoffs=[worker, admin, custom])
            result = await Runner.run(gate_agent(gk, triage), "hi", max_turns=4)
            assert result.final_output == "done"
            first, second = server.requests[0], server.requests[1]
            assert [t["function"]["name"] for t in first["tools"]] == ["transfer_to_worker"]
            assert [t["function"]["name"] for t in second["tools"]] == ["read_file"]  # the worker is gated too
        finally:
            gk.close()


async def test_gate_agent_gates_the_tools_of_its_mcp_servers(store_path, default_suite, tmp_path):
    import sys

    from agents import Agent, ModelBehaviorError, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStdio

    set_tracing_disabled(True)

    def call_write_note(body: dict) -> dict:
        return {"content": None, "tool_calls": [{"name": "write_note", "arguments": '{"name": "a", "text": "b"}'}]}

    toy = ROOT / "tests" / "mcp" / "toy_server.py"
    params = {"command": sys.executable, "args": [str(toy), "notes"], "env": {"TOY_DIR": str(tmp_path)}}
    with NativeServer(call_write_note) as server:
        rules = {"required_tier": {"notes.write_note": "large"}}
        gk = Gatekeeper(settings_for(server.base_url, store_path, pins={"m": "small"}, tools=rules))
        try:
            async with MCPServerStdio(params=params, name="notes") as notes:  # type: ignore[arg-type]
                agent = gate_agent(gk, Agent(name="a", model=_agents_model(server), mcp_servers=[notes]))
                with pytest.raises(ModelBehaviorError, match="Tool write_note not found"):  # the SDK's word for it
                    await Runner.run(agent, "write a note", max_turns=3)
            offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
            assert "read_note" in offered and "write_note" not in offered
            assert not (tmp_path / "calls.log").exists()  # the model's write_note never reached the server
        finally:
            gk.close()


# -- pydantic-ai's native (provider built-in) tools through the gated clients -----------------------


@pytest.mark.parametrize("provider", ["openai-responses", "anthropic"])
async def test_pydantic_ai_native_tools_are_judged_by_their_family(store_path, default_suite, provider):
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import NativeTool
    from pydantic_ai.native_tools import CodeExecutionTool, WebSearchTool

    with NativeServer(lambda body: {"content": "ok"}) as server:
        rules = {"required_tier": {"web_search": "large"}}
        gk = Gatekeeper(settings_for(server.base_url, store_path, pins={"m": "small"}, tools=rules))
        try:
            if provider == "anthropic":
                from pydantic_ai.models.anthropic import AnthropicModel
                from pydantic_ai.providers.anthropic import AnthropicProvider

                base = server.base_url.removesuffix("/v1")
                client = anthropic_sdk.gate_client(
                    anthropic.AsyncAnthropic(base_url=base, api_key="x", max_retries=0), gk
                )
                model = AnthropicModel("m", provider=AnthropicProvider(anthropic_client=client))
            else:
                from pydantic_ai.models.openai import OpenAIResponsesModel
                from pydantic_ai.providers.openai import OpenAIProvider

                client = openai_sdk.gate_client(
                    openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0), gk
                )
                model = OpenAIResponsesModel("m", provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, capabilities=[NativeTool(WebSearchTool()), NativeTool(CodeExecutionTool())])
            assert (await agent.run("hi")).output == "ok"
            sent = (server.messages_requests or server.responses_requests)[-1]["tools"]
            kinds = [t["type"] for t in sent]
            assert kinds and not any("web_search" in k for k in kinds), kinds
            assert any("code_execution" in k or "code_interpreter" in k for k in kinds), kinds
        finally:
            gk.close()


# -- closed sets of values ------------------------------------------------------------------------


def test_chat_modalities_are_a_closed_set(store_path, default_suite):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with (
        NativeServer(lambda body: {"content": "ok"}) as server,
        running_proxy(settings_for(server.base_url, store_path)) as proxy,
    ):
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
        client.chat.completions.create(model="small-model", messages=HI, modalities=["text"])
        with pytest.raises(openai.BadRequestError, match=r"modalities"):
            client.chat.completions.create(model="small-model", messages=HI, modalities=["text", "tools"])  # type: ignore[list-item]
        assert [r.get("modalities") for r in server.requests] == [["text"]]


@pytest.mark.parametrize(
    "extra",
    [
        {"output_config": {"effort": "turbo"}},
        {"thinking": {"type": "disabled"}, "output_config": {"effort": "ultra"}},
        {"thinking": {"type": "sometimes"}},
    ],
)
def test_messages_effort_and_thinking_are_closed_sets(store_path, default_suite, extra):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with NativeServer(lambda body: {"content": "ok"}) as server:
        settings = settings_for(
            server.base_url, store_path, upstream={"base_url": server.base_url, "protocols": ["messages"]}
        )
        with running_proxy(settings) as proxy:
            claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
            with pytest.raises(anthropic.BadRequestError):
                claude.messages.create(model="small-model", max_tokens=5, messages=HI, extra_body=extra)  # type: ignore[arg-type]
            assert server.received() == []


# -- request encodings ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_a_compressed_body_is_refused_not_forwarded_unread(store_path, default_suite, path):
    import gzip

    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    body = {"model": "small-model", "max_tokens": 5, "messages": HI, "input": "hi", "tools": CHAT_TOOLS}
    with NativeServer(lambda b: {"content": "ok"}) as server:
        settings = settings_for(
            server.base_url,
            store_path,
            upstream={"base_url": server.base_url, "protocols": ["chat", "responses", "messages"]},
        )
        with running_proxy(settings) as proxy:
            for encoding, content in [
                ("gzip", gzip.compress(json.dumps(body).encode())),
                ("br", json.dumps(body).encode()),
            ]:
                answer = httpx.post(
                    proxy.url + path,
                    content=content,
                    headers={"content-type": "application/json", "content-encoding": encoding},
                    timeout=10,
                )
                assert answer.status_code == 415
                assert f"Content-Encoding '{encoding}' is not accepted" in answer.text
        assert server.received() == []


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbf" + json.dumps({"model": "small-model", "messages": HI}).encode(),  # a BOM
        json.dumps({"model": "small-model", "messages": HI}).encode("utf-16"),
    ],
    ids=["bom", "utf-16"],
)
def test_a_body_that_is_not_plain_utf8_json_is_refused(store_path, default_suite, raw):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with (
        NativeServer(lambda b: {"content": "ok"}) as server,
        running_proxy(settings_for(server.base_url, store_path)) as proxy,
    ):
        answer = httpx.post(
            proxy.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 400 and "not valid JSON" in answer.text
        assert server.received() == []


def test_duplicate_keys_reach_the_upstream_as_the_gate_read_them(store_path, default_suite):
    """orjson keeps a key's last value; the upstream gets the body the gate read, re-written, so
    a parser that keeps the first value (a hidden tool list first, an empty one last) sees none."""
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    hidden = json.dumps(CHAT_TOOLS[1:])
    messages = '[{"role": "user", "content": "hi", "role": "user"}]'
    raw = f'{{"model": "small-model", "tools": {hidden}, "messages": {messages}, "tools": []}}'.encode()
    with BytesUpstream(RawAnswer(json.dumps({"choices": []}).encode())) as server:
        with running_proxy(settings_for(server.base_url, store_path)) as proxy:
            httpx.post(proxy.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert len(server.raw) == 1 and b"execute_command" not in server.raw[0]
        assert server.raw[0].count(b'"tools"') <= 1


class BytesUpstream(RawUpstream):
    """RawUpstream that also keeps the bytes of each body as received."""

    def __init__(self, answer: RawAnswer) -> None:
        self.raw: list[bytes] = []
        super().__init__(answer)

    async def _any(self, request):
        self.raw.append(await request.body())
        return await super()._any(request)


def test_the_wrappers_send_a_body_as_the_gate_read_it(gk):
    raw = (
        b'{"model": "small-model", "tools": '
        + json.dumps(CHAT_TOOLS[1:]).encode()
        + b', "messages": [{"role": "user", "content": "hi"}], "tools": null}'
    )
    with BytesUpstream(RawAnswer(json.dumps({"choices": []}).encode())) as server:
        client = openai_sdk.gate_client(openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0), gk)
        client._client.post(
            f"{server.base_url}/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
        assert len(server.raw) == 1 and b"execute_command" not in server.raw[0]


# -- lookalike tool names ---------------------------------------------------------------------------

LOOKALIKES = [
    "EXECUTE_COMMAND",
    "execute_command\u200b",
    "execute_command\u0000",
    "\ufeffexecute_command",
    "ｅｘｅｃｕｔｅ_command",
    "execute_command ",
    "\u0435xecute_command",  # a Cyrillic е: no rule matches it, so the strictest rule does
]


@pytest.mark.parametrize("name", LOOKALIKES, ids=ascii)
@pytest.mark.parametrize("protocols", [["chat", "responses", "messages"], ["chat"]], ids=["native", "translated"])
def test_a_lookalike_of_a_hidden_tool_is_hidden_too(store_path, default_suite, name, protocols):
    """A model (its tokenizer) may read `execute_command\\u200b` as `execute_command`: the name is
    judged by the rule it looks like, when that one is higher."""
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with NativeServer(lambda body: {"content": "ok"}) as server:
        settings = settings_for(
            server.base_url, store_path, upstream={"base_url": server.base_url, "protocols": protocols}
        )
        with running_proxy(settings) as proxy:
            client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
            client.chat.completions.create(
                model="small-model",
                messages=HI,
                tools=[{"type": "function", "function": {"name": name, "parameters": OBJECT}}],
            )
            client.responses.create(
                model="small-model", input="hi", tools=[{"type": "function", "name": name, "parameters": OBJECT}]
            )
            claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
            claude.messages.create(
                model="small-model", max_tokens=5, messages=HI, tools=[{"name": name, "input_schema": OBJECT}]
            )
        assert len(server.received()) == 3
        assert all(not body.get("tools") for body in server.received()), server.received()


@pytest.mark.parametrize("name", ["read_file\u200b", "read_file\u0000", "READ_FILE", "ｒead_file"], ids=ascii)
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_of_a_lookalike_name_is_not_a_call_of_the_offered_tool(store_path, default_suite, name, stream):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    reply = {"content": None, "tool_calls": [{"name": name, "arguments": "{}"}]}
    with NativeServer(lambda body: reply) as server:
        settings = settings_for(
            server.base_url,
            store_path,
            upstream={"base_url": server.base_url, "protocols": ["chat", "responses", "messages"]},
        )
        with running_proxy(settings) as proxy:
            client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
            tools = CHAT_TOOLS[:1]
            if stream:
                chunks = client.chat.completions.create(model="small-model", messages=HI, tools=tools, stream=True)  # type: ignore[arg-type]
                calls = [c for chunk in chunks if chunk.choices for c in chunk.choices[0].delta.tool_calls or []]
                output = [
                    i
                    for e in client.responses.create(
                        model="small-model", input="hi", tools=RESPONSES_TOOLS[:1], stream=True
                    )
                    if e.type == "response.output_item.added"
                    for i in [e.item]
                    if i.type == "function_call"
                ]
            else:
                calls = (
                    client.chat.completions.create(model="small-model", messages=HI, tools=tools)
                    .choices[0]
                    .message.tool_calls
                    or []
                )  # type: ignore[arg-type]
                output = [
                    i
                    for i in client.responses.create(model="small-model", input="hi", tools=RESPONSES_TOOLS[:1]).output
                    if i.type == "function_call"
                ]
            claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
            blocks = claude.messages.create(
                model="small-model", max_tokens=5, messages=HI, tools=CLAUDE_TOOLS[:1]
            ).content
    assert calls == [] and output == []
    assert [b for b in blocks if b.type == "tool_use"] == []


# -- capability routing with the above ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["EXECUTE_COMMAND", "execute_command\u200b"], ids=ascii)
def test_routing_judges_a_lookalike_by_the_rule_it_looks_like(store_path, default_suite, name):
    """effortful@low is small, @high medium, @xhigh large. A request offering write_file
    (medium) and a lookalike of execute_command (large) needs large: routed to @xhigh, not to
    @high (where the lookalike was sent to a medium pair)."""
    seed_store(
        store_path,
        make_profile("effortful", Tier.SMALL, default_suite, effort="low"),
        make_profile("effortful", Tier.MEDIUM, default_suite, effort="high"),
        make_profile("effortful", Tier.LARGE, default_suite, effort="xhigh"),
    )
    tools = [{"type": "function", "function": {"name": n, "parameters": OBJECT}} for n in ("write_file", name)]
    with NativeServer(lambda body: {"content": "ok"}) as server:
        settings = settings_for(server.base_url, store_path, routing={"escalate_effort": True})
        with running_proxy(settings) as proxy:
            client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
            answer = client.chat.completions.with_raw_response.create(
                model="effortful",
                reasoning_effort="low",
                messages=HI,
                tools=tools,  # type: ignore[arg-type]
            )
        assert answer.headers.get("x-gatekeeper-routed") == "effortful@xhigh"
        ours = [r for r in server.requests if r["messages"] == HI]  # not a lazy measurement's
        assert [r["reasoning_effort"] for r in ours] == ["xhigh"]


# -- annotations and citations are of the types the APIs define ---------------------------------------

CALL_LIKE = {"type": "function_call", "name": "execute_command", "arguments": "{}", "call_id": "c9"}
TOOL_USE_LIKE = {"type": "tool_use", "id": "toolu_9", "name": "execute_command", "input": {}}
URL_CITATION = {"type": "url_citation", "url": "https://example.com", "title": "t", "start_index": 0, "end_index": 1}


def _responses_answer(annotations: list) -> dict:
    text = {"type": "output_text", "text": "x", "annotations": annotations}
    message = {"type": "message", "id": "m", "status": "completed", "role": "assistant", "content": [text]}
    return {
        "id": "r1",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "small-model",
        "output": [message],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def test_an_annotation_of_an_unknown_type_is_removed(store_path, default_suite):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    answer = RawAnswer(json.dumps(_responses_answer([URL_CITATION, CALL_LIKE])).encode())
    with RawUpstream(answer) as raw:
        settings = settings_for(
            raw.base_url, store_path, upstream={"base_url": raw.base_url, "protocols": ["responses"]}
        )
        with running_proxy(settings) as proxy:
            client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
            response = client.responses.create(model="small-model", input="hi", tools=RESPONSES_TOOLS[:1])
    annotations = response.output[0].content[0].annotations  # type: ignore[union-attr]
    assert [a.type for a in annotations] == ["url_citation"]


def test_an_annotation_event_of_an_unknown_type_is_removed(store_path, default_suite):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    done = _responses_answer([CALL_LIKE])
    message = done["output"][0]
    at = {"item_id": "m", "output_index": 0, "content_index": 0}
    stream = _sse(
        {"type": "response.created", "response": done | {"status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": message | {"content": []}},
        {"type": "response.output_text.annotation.added", **at, "annotation_index": 0, "annotation": CALL_LIKE},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.completed", "response": done},
    )
    with RawUpstream(RawAnswer(stream, content_type="text/event-stream")) as raw:
        settings = settings_for(
            raw.base_url, store_path, upstream={"base_url": raw.base_url, "protocols": ["responses"]}
        )
        with running_proxy(settings) as proxy:
            client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
            events = [e.model_dump() for e in client.responses.create(model="small-model", input="hi", stream=True)]
    assert "execute_command" not in repr(events)
    assert [e["type"] for e in events][-1] == "response.completed"


def test_a_citation_of_an_unknown_type_is_removed(store_path, default_suite):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    char = {
        "type": "char_location",
        "cited_text": "x",
        "document_index": 0,
        "document_title": None,
        "start_char_index": 0,
        "end_char_index": 1,
    }
    plain = _message([{"type": "text", "text": "x", "citations": [char, TOOL_USE_LIKE]}]) | {"stop_reason": "end_turn"}
    stream = _sse(
        {"type": "message_start", "message": _message([])},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": "", "citations": [TOOL_USE_LIKE]},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": TOOL_USE_LIKE}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
        {"type": "message_stop"},
    )
    answers = iter([RawAnswer(json.dumps(plain).encode()), RawAnswer(stream, content_type="text/event-stream")])
    with RawUpstream(lambda body: next(answers)) as raw:
        settings = settings_for(
            raw.base_url, store_path, upstream={"base_url": raw.base_url, "protocols": ["messages"]}
        )
        with running_proxy(settings) as proxy:
            claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
            message = claude.messages.create(model="small-model", max_tokens=5, messages=HI)
            with claude.messages.stream(model="small-model", max_tokens=5, messages=HI) as events:
                seen = [e.model_dump() for e in events]
                streamed = events.get_final_message()
    assert [c.type for c in message.content[0].citations or []] == ["char_location"]  # type: ignore[union-attr]
    assert "execute_command" not in repr(seen) and "execute_command" not in streamed.model_dump_json()


# -- query strings, path variants, method overrides ---------------------------------------------------


class QueryUpstream(BytesUpstream):
    """BytesUpstream that also keeps each request's query string."""

    def __init__(self, answer: RawAnswer) -> None:
        self.queries: list[str] = []
        super().__init__(answer)

    async def _any(self, request):
        self.queries.append(request.url.query)
        return await super()._any(request)


def test_a_query_string_and_a_method_override_never_reach_the_upstream(store_path, default_suite):
    """Azure-style upstreams read `api-version` (and some gateways `tools`) from the query: the
    proxy sends its own path only; `X-HTTP-Method-Override` is a header no upstream is given."""
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with QueryUpstream(RawAnswer(json.dumps({"choices": []}).encode())) as raw:
        with running_proxy(settings_for(raw.base_url, store_path)) as proxy:
            body = {"model": "small-model", "messages": HI, "tools": CHAT_TOOLS}
            params = {"tools": json.dumps(CHAT_TOOLS), "api-version": "2024-10-21"}
            headers = {"x-http-method-override": "PUT"}
            httpx.post(proxy.url + "/v1/chat/completions", json=body, params=params, headers=headers, timeout=10)
        assert raw.queries == [""]
        assert "x-http-method-override" not in raw.headers[0]
        assert b"execute_command" not in raw.raw[0]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1//chat/completions", 404),
        ("POST", "/V1/Chat/Completions", 404),
        ("POST", "/openai/v1/chat/completions", 404),
        ("GET", "/v1/chat/completions", 405),
        ("PUT", "/v1/responses", 405),
    ],
)
def test_a_model_path_variant_is_not_served(store_path, default_suite, method, path, status):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with (
        NativeServer(lambda body: {"content": "ok"}) as server,
        running_proxy(settings_for(server.base_url, store_path)) as proxy,
    ):
        body = json.dumps({"model": "small-model", "messages": HI, "tools": CHAT_TOOLS})
        answer = httpx.request(
            method, proxy.url + path, content=body, headers={"x-http-method-override": "POST"}, timeout=10
        )
        assert answer.status_code == status
        assert server.received() == []


async def test_gated_capability_judges_native_tools_without_a_gated_client(store_path, default_suite):
    """`gated_prepare_tools` sees function tools only: a native tool reached the provider ungated
    when the client was not a gated one. `gated_capability` judges both."""
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import NativeTool
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.native_tools import CodeExecutionTool, MCPServerTool, WebSearchTool
    from pydantic_ai.providers.openai import OpenAIProvider

    from gatekeeper.inprocess.wrap import gated_capability

    def read_file(path: str) -> str:
        return path

    def execute_command(command: str) -> str:
        return command

    with NativeServer(lambda body: {"content": "ok"}) as server:
        rules = {"required_tier": {"web_search": "large", "execute_command": "large", "github.delete_*": "large"}}
        gk = Gatekeeper(settings_for(server.base_url, store_path, pins={"m": "small"}, tools=rules))
        try:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)  # not gated
            model = OpenAIResponsesModel("m", provider=OpenAIProvider(openai_client=client))
            natives = [
                WebSearchTool(),
                CodeExecutionTool(),
                MCPServerTool(id="github", url="https://mcp.example/github"),
            ]
            agent = Agent(
                model,
                tools=[read_file, execute_command],
                capabilities=[*(NativeTool(t) for t in natives), gated_capability(gk)],
            )
            assert (await agent.run("hi")).output == "ok"
            sent = server.responses_requests[-1]["tools"]
            assert sorted(t.get("name") or t["type"] for t in sent) == ["code_interpreter", "read_file"]
        finally:
            gk.close()


async def test_an_unreadable_stream_chunk_ends_the_stream_with_the_protocols_error_event(hook):
    """Not an exception (LiteLLM cannot report one once the response started): the error chunk
    the official clients raise on, and nothing after it."""
    data = await gated_data(hook, "acompletion", messages=HI, tools=CHAT_TOOLS, stream=True)

    async def stream():
        yield {"choices": [{"index": 0, "delta": {"tool_calls": "not a list"}}]}
        yield {"choices": [{"index": 0, "delta": {"content": "after"}}]}

    (chunk,) = await drained(hook, stream(), data)
    assert chunk.startswith(b"data: ") and json.loads(chunk[6:])["error"]["code"] == "upstream_invalid"
