"""The answer-side instances of issue 20 through the real proxy: a real upstream answers exactly
that way (tests/upstreams.py, tests/scripted.py), the official client reads the answer; native
and translated, plain and streamed."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import openai
import pytest
from conftest import Proxy, claude, small_model_proxy
from scripted import RawAnswer, RawUpstream, chat_chunk, chat_completion, sse
from upstreams import NativeServer

HI = [{"role": "user", "content": "hi"}]
# A Messages MCP server offering both of its tools: the tier admits only `list_repos`.
GITHUB_BOTH = [
    {
        "type": "url",
        "name": "github",
        "url": "https://mcp.example/github",
        "tool_configuration": {"allowed_tools": ["delete_repo", "list_repos"]},
    }
]
RULES = {"execute_command": "large", "write_*": "medium", "github.delete_*": "large"}
HIDDEN_ONLY = {"content": None, "tool_calls": [{"name": "execute_command", "arguments": {}}]}


def fn(name: str) -> dict:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


def claude_tool(name: str) -> dict:
    return {"name": name, "input_schema": {"type": "object", "properties": {}}}


@pytest.fixture
def native() -> Iterator[NativeServer]:
    with NativeServer() as server:
        yield server


def proxy_for(upstream, store_path, default_suite, protocols=("chat", "responses", "messages"), **changes):
    changes.setdefault("tools", {"default_tier": "small", "required_tier": RULES})
    return small_model_proxy(
        upstream.base_url,
        store_path,
        default_suite,
        upstream={"base_url": upstream.base_url, "protocols": list(protocols)},
        **changes,
    )


@pytest.fixture
def proxy(native, store_path, default_suite) -> Iterator[Proxy]:
    with proxy_for(native, store_path, default_suite, blocked_calls="strip") as running:
        yield running


# -- a built-in call needs its built-in -------------------------------------------------------

LOOKALIKES = [
    ("computer_call", "computer_notes", {"action": {"type": "screenshot"}, "pending_safety_checks": []}),
    ("local_shell_call", "local_shell_notes", {"action": {"type": "exec", "command": ["ls"], "env": {}}}),
    ("shell_call", "shell_history", {"action": {"commands": ["ls"]}}),
    ("apply_patch_call", "apply_patch_preview", {"operation": {"type": "delete_file", "path": "a"}}),
    ("code_interpreter_call", "code_interpreter_help", {"code": "1", "container_id": "c", "outputs": []}),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("item_type", "lookalike", "fields"), LOOKALIKES)
def test_a_function_named_like_a_builtin_does_not_let_the_builtin_call_through(
    proxy, native, item_type, lookalike, fields, stream
):
    item = {"type": item_type, "id": "it_1", "call_id": "call_1", "status": "completed", **fields}
    native.responder = lambda body: {"content": "done", "items": [item]}
    if stream:
        with proxy.client.responses.stream(model="small-model", input="hi", tools=[fn(lookalike)]) as events:
            seen = [e.type for e in events]
            final = events.get_final_response()
        assert "response.completed" in seen
    else:
        final = proxy.client.responses.create(model="small-model", input="hi", tools=[fn(lookalike)])
    assert [i.type for i in final.output] == ["message"]
    assert native.responses_requests[-1]["tools"][0]["name"] == lookalike  # the function itself was offered


# -- MCP calls, per tool ----------------------------------------------------------------------

GITHUB = {"type": "mcp", "server_label": "github", "server_url": "https://mcp.example/github", "allowed_tools": None}


def mcp_items(kind: str) -> list[dict]:
    return [
        {"type": kind, "id": f"{kind}_{n}", "server_label": "github", "name": n, "arguments": "{}"}
        for n in ("delete_repo", "list_repos")
    ]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["mcp_call", "mcp_approval_request"])
def test_a_hidden_mcp_tool_call_does_not_reach_a_small_model_s_client(proxy, native, kind, stream):
    native.responder = lambda body: {"content": None, "items": mcp_items(kind)}
    offered = {k: v for k, v in GITHUB.items() if v is not None}
    offered["allowed_tools"] = ["delete_repo", "list_repos"]
    if stream:
        with proxy.client.responses.stream(model="small-model", input="hi", tools=[offered]) as events:
            final = events.get_final_response()
    else:
        final = proxy.client.responses.create(model="small-model", input="hi", tools=[offered])
    assert [(i.type, i.name) for i in final.output] == [(kind, "list_repos")]


@pytest.mark.parametrize("stream", [False, True])
def test_a_hidden_messages_mcp_tool_use_does_not_reach_the_client(proxy, native, stream):
    blocks = [
        {"type": "mcp_tool_use", "id": f"mcptoolu_{n}", "server_name": "github", "name": n, "input": {}}
        for n in ("delete_repo", "list_repos")
    ]
    native.responder = lambda body: {"content": None, "items": blocks}
    client = claude(proxy)
    request = {"model": "small-model", "max_tokens": 10, "messages": HI, "mcp_servers": GITHUB_BOTH}
    if stream:
        with client.beta.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = client.beta.messages.create(**request)
    assert [(b.type, b.name) for b in message.content] == [("mcp_tool_use", "list_repos")]


# -- streams cut before their end marker ------------------------------------------------------


def responses_events(*docs: dict) -> bytes:
    return b"".join(f"event: {d['type']}\ndata: {json.dumps(d)}\n\n".encode() for d in docs)


def test_a_native_responses_stream_cut_before_completed_raises_in_the_client(store_path, default_suite):
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "output": []}}
    cut = RawAnswer([responses_events(created)], content_type="text/event-stream")
    with RawUpstream(cut) as upstream, proxy_for(upstream, store_path, default_suite) as proxy:
        with pytest.raises(openai.APIError, match=r"before response\.completed"):
            for _ in proxy.client.responses.create(model="small-model", input="hi", stream=True):
                pass


def test_a_native_messages_stream_cut_before_message_stop_raises_in_the_client(store_path, default_suite):
    start = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}}
    cut = RawAnswer([responses_events(start)], content_type="text/event-stream")
    with RawUpstream(cut) as upstream, proxy_for(upstream, store_path, default_suite) as proxy:
        with pytest.raises(anthropic.APIStatusError, match="before message_stop"):
            with claude(proxy).messages.stream(model="small-model", max_tokens=5, messages=HI) as events:
                events.get_final_message()


def test_a_chat_answer_with_a_null_function_call_whose_calls_are_removed_finishes_with_stop(store_path, default_suite):
    # LiteLLM (and any server that dumps an SDK object with its nulls) sends `"function_call": null`.
    call = {"id": "c1", "type": "function", "function": {"name": "execute_command", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "function_call": None, "tool_calls": [call]}
    answer = RawAnswer(json.dumps(chat_completion(message, finish="tool_calls")).encode())
    with RawUpstream(answer) as upstream, proxy_for(upstream, store_path, default_suite, ("chat",)) as proxy:
        tools = [{"type": "function", "function": {"name": "execute_command", "parameters": {"type": "object"}}}]
        got = proxy.client.chat.completions.create(model="small-model", messages=HI, tools=tools)
    assert got.choices[0].message.tool_calls is None and got.choices[0].finish_reason == "stop"


def chat_cut() -> RawAnswer:
    return RawAnswer(
        [sse(chat_chunk({"role": "assistant", "content": "par"}), done=False)], content_type="text/event-stream"
    )


def test_a_translated_responses_stream_cut_raises_in_the_client(store_path, default_suite):
    with RawUpstream(chat_cut()) as upstream, proxy_for(upstream, store_path, default_suite, ("chat",)) as proxy:
        with pytest.raises(openai.APIError, match=r"before \[DONE\]"):
            for _ in proxy.client.responses.create(model="small-model", input="hi", stream=True):
                pass


def test_a_translated_messages_stream_cut_raises_in_the_client(store_path, default_suite):
    with RawUpstream(chat_cut()) as upstream, proxy_for(upstream, store_path, default_suite, ("chat",)) as proxy:
        with pytest.raises(anthropic.APIStatusError, match=r"before \[DONE\]"):
            with claude(proxy).messages.stream(model="small-model", max_tokens=5, messages=HI) as events:
                events.get_final_message()


def chat_error() -> RawAnswer:
    chunks = sse(chat_chunk({"role": "assistant", "content": "par"}), {"error": {"message": "upstream overloaded"}})
    return RawAnswer([chunks], content_type="text/event-stream")


def test_a_translated_responses_stream_error_chunk_raises_in_the_client(store_path, default_suite):
    with RawUpstream(chat_error()) as upstream, proxy_for(upstream, store_path, default_suite, ("chat",)) as proxy:
        with pytest.raises(openai.APIError, match="upstream overloaded"):
            for _ in proxy.client.responses.create(model="small-model", input="hi", stream=True):
                pass


def test_a_translated_messages_stream_error_chunk_raises_in_the_client(store_path, default_suite):
    with RawUpstream(chat_error()) as upstream, proxy_for(upstream, store_path, default_suite, ("chat",)) as proxy:
        with pytest.raises(anthropic.APIStatusError, match="upstream overloaded"):
            with claude(proxy).messages.stream(model="small-model", max_tokens=5, messages=HI) as events:
                events.get_final_message()


# -- blocked_calls: explain ---------------------------------------------------------------------


@pytest.fixture(params=["native", "translated"])
def explaining(request, native, store_path, default_suite) -> Iterator[Proxy]:
    protocols = ("chat", "responses", "messages") if request.param == "native" else ("chat",)
    native.responder = lambda body: HIDDEN_ONLY
    with proxy_for(native, store_path, default_suite, protocols, blocked_calls="explain") as running:
        yield running


def said(text: str | None) -> bool:
    return text is not None and "execute_command" in text and "tier large" in text and "tier small" in text


@pytest.mark.parametrize("stream", [False, True])
def test_explain_chat(explaining, stream):
    tools = [{"type": "function", "function": {"name": "execute_command", "parameters": {"type": "object"}}}]
    if stream:
        chunks = list(
            explaining.client.chat.completions.create(model="small-model", messages=HI, tools=tools, stream=True)
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    else:
        answer = explaining.client.chat.completions.create(model="small-model", messages=HI, tools=tools)
        text = answer.choices[0].message.content
        assert answer.choices[0].message.tool_calls is None and answer.choices[0].finish_reason == "stop"
    assert said(text)


@pytest.mark.parametrize("stream", [False, True])
def test_explain_responses(explaining, stream):
    tools = [fn("execute_command")]
    if stream:
        with explaining.client.responses.stream(model="small-model", input="hi", tools=tools) as events:
            final = events.get_final_response()
    else:
        final = explaining.client.responses.create(model="small-model", input="hi", tools=tools)
    assert [i.type for i in final.output] == ["message"] and said(final.output_text)


@pytest.mark.parametrize("stream", [False, True])
def test_explain_messages(explaining, stream):
    request = {"model": "small-model", "max_tokens": 10, "messages": HI, "tools": [claude_tool("execute_command")]}
    client = claude(explaining)
    if stream:
        with client.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**request)
    assert [b.type for b in message.content] == ["text"] and message.stop_reason == "end_turn"
    assert said(message.content[0].text)


def test_strip_leaves_the_answer_empty(proxy, native):
    native.responder = lambda body: HIDDEN_ONLY
    final = proxy.client.responses.create(model="small-model", input="hi", tools=[fn("execute_command")])
    assert final.output == []


def execute_command(command: str) -> str:
    """Run a shell command."""
    return "ran"


@pytest.mark.parametrize("model_kind", ["chat", "responses", "anthropic"])
async def test_pydantic_ai_agent_loop_continues_under_explain(explaining, model_kind):
    """pydantic-ai raises UnexpectedModelBehavior on an empty answer; under `explain` the run ends
    with the explanation as its output."""
    from pydantic_ai import Agent

    if model_kind == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        model = AnthropicModel(
            "small-model",
            provider=AnthropicProvider(
                anthropic_client=anthropic.AsyncAnthropic(base_url=explaining.url, api_key="k", max_retries=0)
            ),
        )
    else:
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        provider = OpenAIProvider(base_url=explaining.url + "/v1", api_key="k")
        model = (OpenAIChatModel if model_kind == "chat" else OpenAIResponsesModel)("small-model", provider=provider)
    agent = Agent(model, tools=[execute_command])
    assert said((await agent.run("hi")).output)


async def test_pydantic_ai_raises_on_the_empty_answer_strip_leaves(proxy, native):
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import UnexpectedModelBehavior
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    native.responder = lambda body: HIDDEN_ONLY
    model = OpenAIResponsesModel("small-model", provider=OpenAIProvider(base_url=proxy.url + "/v1", api_key="k"))
    with pytest.raises(UnexpectedModelBehavior):
        await Agent(model, tools=[execute_command]).run("hi")


# -- no fast path around the judge ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_without_a_call_still_has_its_mcp_listing_cut_and_unknown_blocks_removed(proxy, native, stream):
    # No `tool_use` anywhere: a plain answer like this one was once relayed unparsed.
    listing = {
        "type": "mcp_tool_listing",
        "mcp_server_name": "github",
        "tools": [{"name": n, "input_schema": {"type": "object"}} for n in ("delete_repo", "list_repos")],
    }
    unknown = {"type": "mcp_tool_call", "server_name": "github", "name": "delete_repo"}
    native.responder = lambda body: {"content": "done", "items": [listing, unknown]}
    request = {"model": "small-model", "max_tokens": 10, "messages": HI, "mcp_servers": GITHUB_BOTH}
    client = claude(proxy)
    if stream:
        with client.beta.messages.stream(**request) as events:
            raw = [b.model_dump() for b in events.get_final_message().content]
    else:
        raw = json.loads(client.beta.messages.with_raw_response.create(**request).text())["content"]
    assert "delete_repo" not in json.dumps(raw)
    assert [b["type"] for b in raw] == ["text", "mcp_tool_listing"]
    assert [t["name"] for t in raw[1]["tools"]] == ["list_repos"]
