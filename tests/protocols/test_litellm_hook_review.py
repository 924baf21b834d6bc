"""The review of issue 43 (the LiteLLM hook's answers, streamed and plain): a real LiteLLM proxy
(subprocess) with gatekeeper's hook on examples/gatekeeper.yaml (`blocked_calls: explain`), the
official openai and anthropic clients, a scripted upstream whose model calls what each test says.

LiteLLM sends /v1/messages of an `openai/` model to the upstream's /v1/responses: all three
client routes are answered by the NativeServer below."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest
from serving import litellm_example
from upstreams import NativeServer

NAMES = ("read_file", "write_file", "execute_command")  # small, medium, large (examples/gatekeeper.yaml)
PATH = {"type": "object", "properties": {"path": {"type": "string"}}}
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": PATH}} for n in NAMES]
RESPONSES_TOOLS = [{"type": "function", "name": n, "parameters": PATH} for n in NAMES]
CLAUDE_TOOLS = [{"name": n, "input_schema": PATH} for n in NAMES]
HI = [{"role": "user", "content": "read a.txt"}]
SECRET = "rm -rf /srv"  # the hidden call's arguments: never in what a client reads
HIDDEN_ONLY = {"content": None, "tool_calls": [{"name": "execute_command", "arguments": {"path": SECRET}}]}
ALLOWED_ONLY = {"content": None, "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}
EXPLAINED = "A call to the tool `execute_command` was removed: it needs tier large"


@pytest.fixture(scope="module")
def litellm_proxy(tmp_path_factory, default_suite) -> Iterator[tuple[str, str, NativeServer]]:
    with litellm_example(tmp_path_factory.mktemp("litellm"), default_suite, lambda body: HIDDEN_ONLY) as served:
        yield served


@pytest.fixture
def clients(litellm_proxy) -> Iterator[tuple[openai.OpenAI, anthropic.Anthropic, NativeServer]]:
    url, key, upstream = litellm_proxy
    upstream.responder = lambda body: HIDDEN_ONLY
    yield (
        openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60),
        anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=60),
        upstream,
    )


@pytest.mark.parametrize("offered", [True, False], ids=["tools", "no-tools"])
def test_a_chat_answer_whose_every_call_is_removed_finishes_with_stop(clients, offered):
    """LiteLLM's chat answer carries `function_call: null`, which the codec read as a (legacy)
    call still there: the plain answer kept `finish_reason: tool_calls` with no call in it (the
    proxy's, and the hook's stream, say `stop`), and a client's agent loop looked for calls."""
    client, _, _ = clients
    tools = {"tools": CHAT_TOOLS} if offered else {}
    plain = client.chat.completions.create(model="local-model", messages=HI, **tools).choices[0]  # type: ignore[call-overload]
    with client.chat.completions.stream(model="local-model", messages=HI, **tools) as events:  # type: ignore[arg-type]
        streamed = events.get_final_completion().choices[0]
    for choice in (plain, streamed):
        assert choice.message.tool_calls is None and choice.finish_reason == "stop"
        assert "execute_command` was removed" in (choice.message.content or "")


def test_a_stream_whose_only_call_is_hidden_ends_as_its_protocol_requires(litellm_proxy, clients):
    """Nothing but a hidden call: each route's stream still ends with its end marker and a
    finished answer that carries only the explanation, the call's arguments nowhere."""
    url, key, _ = litellm_proxy
    client, claude, _ = clients
    auth = {"Authorization": f"Bearer {key}"}
    routes = {
        "/v1/chat/completions": ({"messages": HI, "tools": CHAT_TOOLS}, "data: [DONE]"),
        "/v1/responses": ({"input": "read a.txt", "tools": RESPONSES_TOOLS}, "event: response.completed"),
        "/v1/messages": ({"max_tokens": 50, "messages": HI, "tools": CLAUDE_TOOLS}, "event: message_stop"),
    }
    for path, (body, end) in routes.items():
        relayed = httpx.post(
            url + path, json={"model": "local-model", "stream": True, **body}, headers=auth, timeout=60
        )
        assert relayed.status_code == 200 and end in relayed.text, relayed.text[-500:]
        assert SECRET not in relayed.text and EXPLAINED in relayed.text
    with client.responses.stream(model="local-model", input="read a.txt", tools=RESPONSES_TOOLS) as events:  # type: ignore[arg-type]
        response = events.get_final_response()
    assert response.status == "completed" and [item.type for item in response.output] == ["message"]
    with claude.messages.stream(model="local-model", max_tokens=50, messages=HI, tools=CLAUDE_TOOLS) as blocks:  # type: ignore[arg-type]
        message = blocks.get_final_message()
    assert message.stop_reason == "end_turn" and [block.type for block in message.content] == ["text"]


def test_parallel_streams_each_get_their_own_request_s_gate(clients):
    """Streams at once on one proxy, half offering the tool the model calls and half offering no
    tool: each keeps the call only when its own request offered it (gates never swap)."""
    client, claude, upstream = clients
    upstream.responder = lambda body: ALLOWED_ONLY

    def chat(offered: bool) -> list[str]:
        tools = {"tools": CHAT_TOOLS} if offered else {}
        with client.chat.completions.stream(model="local-model", messages=HI, **tools) as events:  # type: ignore[arg-type]
            return [c.function.name for c in events.get_final_completion().choices[0].message.tool_calls or []]

    def responses(offered: bool) -> list[str]:
        tools = {"tools": RESPONSES_TOOLS} if offered else {}
        with client.responses.stream(model="local-model", input="read a.txt", **tools) as events:  # type: ignore[arg-type]
            return [item.name for item in events.get_final_response().output if item.type == "function_call"]

    def messages(offered: bool) -> list[str]:
        tools = {"tools": CLAUDE_TOOLS} if offered else {}
        with claude.messages.stream(model="local-model", max_tokens=50, messages=HI, **tools) as blocks:  # type: ignore[arg-type]
            return [block.name for block in blocks.get_final_message().content if block.type == "tool_use"]

    runs = [(route, offered) for _ in range(3) for route in (chat, responses, messages) for offered in (True, False)]
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        kept = list(pool.map(lambda run: run[0](run[1]), runs))
    assert kept == [["read_file"] if offered else [] for _, offered in runs]
