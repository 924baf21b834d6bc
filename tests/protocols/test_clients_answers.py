"""Real clients' answer helpers through the real proxy, under `blocked_calls: explain` (the
default), with a gated tool list; the upstream (tests/upstreams.py) native or chat-only:

* structured outputs: openai's `chat.completions.parse` / `.stream` with a pydantic
  `response_format`, and `responses.parse` / `.stream` with a pydantic `text_format`. The SDK
  validates the message text as the format, so an explanation of a removed call must never be
  written into it: chat puts it in the message's `refusal` (only when the model wrote no text),
  Responses in a `refusal` part of its stand-in message;
* the Anthropic SDK's stream helpers (`messages.stream`, `text_stream`, `get_final_message`) on
  an answer whose rogue call was removed: still a valid Messages answer, and `stop_reason` is
  `tool_use` exactly when a `tool_use` block remains.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from conftest import Proxy, claude, make_profile, seed_store, settings_for, small_model_proxy
from pydantic import BaseModel
from upstreams import NativeServer

from gatekeeper import Gatekeeper
from gatekeeper.adapters import openai_sdk
from gatekeeper.rules.tiers import Tier

HI = [{"role": "user", "content": "which city, and how many live there?"}]
EXPLAINED = "A call to the tool `execute_command` was removed: it needs tier large"


class City(BaseModel):
    name: str
    population: int


class Path(BaseModel):
    path: str


ROME = City(name="Rome", population=2_800_000)
JSON = ROME.model_dump_json()
HIDDEN = {"name": "execute_command", "arguments": {"path": "rm -rf /"}}
ALLOWED = {"name": "read_file", "arguments": {"path": "a.txt"}}
# What the model answers: its JSON and a call to the hidden tool and one to the allowed tool; the
# same without the allowed call; only the hidden call, no text.
TURNS = {
    "json+hidden+allowed": {"content": JSON, "tool_calls": [HIDDEN, ALLOWED]},
    "json+hidden": {"content": JSON, "tool_calls": [HIDDEN]},
    "hidden only": {"content": None, "tool_calls": [HIDDEN]},
    "json only": {"content": JSON},
}
CHAT_TOOLS = [openai.pydantic_function_tool(Path, name=n) for n in ("read_file", "execute_command")]
RESPONSES_TOOLS = [
    {"type": "function", "name": n, "parameters": t["function"]["parameters"], "strict": True}
    for n, t in zip(("read_file", "execute_command"), CHAT_TOOLS, strict=True)
]


@pytest.fixture(params=["native", "chat-only"])
def mode(request) -> str:
    return request.param


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer() as server:
        yield server


@pytest.fixture
def proxy(upstream, mode, store_path, default_suite) -> Iterator[Proxy]:
    protocols = ["chat", "responses", "messages"] if mode == "native" else ["chat"]
    settings = {"base_url": upstream.base_url, "protocols": protocols}
    with small_model_proxy(
        upstream.base_url, store_path, default_suite, upstream=settings, blocked_calls="explain"
    ) as running:
        yield running


def answering(upstream: NativeServer, turn: str) -> None:
    upstream.responder = lambda body: TURNS[turn]


def only_read_file_was_offered(upstream: NativeServer) -> dict[str, Any]:
    (body,) = upstream.received()
    names = [t.get("name") or t["function"]["name"] for t in body["tools"]]
    assert names == ["read_file"], names
    return body


# -- chat: `parse` and `stream` with a pydantic response_format ---------------------------------


def chat_message(proxy: Proxy, stream: bool) -> Any:
    request: dict[str, Any] = {"model": "small-model", "messages": HI, "response_format": City, "tools": CHAT_TOOLS}
    if stream:
        with proxy.client.chat.completions.stream(**request) as events:
            return events.get_final_completion().choices[0]
    return proxy.client.chat.completions.parse(**request).choices[0]


def the_chat_upstream_got_the_format(upstream: NativeServer) -> None:
    body = only_read_file_was_offered(upstream)
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "City"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["name", "population"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_parse_keeps_the_json_and_the_allowed_call(proxy, upstream, stream):
    answering(upstream, "json+hidden+allowed")
    choice = chat_message(proxy, stream)
    message = choice.message
    assert message.parsed == ROME and message.content == JSON and message.refusal is None
    assert [(c.function.name, c.function.parsed_arguments) for c in message.tool_calls] == [
        ("read_file", Path(path="a.txt"))
    ]
    assert choice.finish_reason == "tool_calls"
    the_chat_upstream_got_the_format(upstream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_parse_leaves_the_json_alone_when_the_only_call_is_removed(proxy, upstream, stream):
    answering(upstream, "json+hidden")
    choice = chat_message(proxy, stream)
    assert choice.message.parsed == ROME and choice.message.refusal is None and not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    the_chat_upstream_got_the_format(upstream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_parse_reads_a_removed_call_without_text_as_a_refusal(proxy, upstream, stream):
    answering(upstream, "hidden only")
    choice = chat_message(proxy, stream)
    assert choice.message.parsed is None and not choice.message.content and not choice.message.tool_calls
    assert EXPLAINED in choice.message.refusal and choice.finish_reason == "stop"


def test_chat_plain_create_still_gets_the_explanation_as_text(proxy, upstream):
    """Without a structured format the explanation stays assistant text (what agent loops read)."""
    answering(upstream, "json+hidden")
    message = (
        proxy.client.chat.completions.create(model="small-model", messages=HI, tools=CHAT_TOOLS).choices[0].message
    )
    assert message.content.startswith(JSON) and EXPLAINED in message.content and message.refusal is None


# -- Responses: `parse` and `stream` with a pydantic text_format, native and translated --------


def response(proxy: Proxy, stream: bool) -> Any:
    request: dict[str, Any] = {"model": "small-model", "input": HI, "text_format": City, "tools": RESPONSES_TOOLS}
    if stream:
        with proxy.client.responses.stream(**request) as events:
            return events.get_final_response()
    return proxy.client.responses.parse(**request)


def refusals(final: Any) -> list[str]:
    return [p.refusal for item in final.output if item.type == "message" for p in item.content if p.type == "refusal"]


def the_responses_upstream_got_the_format(upstream: NativeServer, mode: str) -> None:
    body = only_read_file_was_offered(upstream)
    if mode == "native":
        fmt = body["text"]["format"]
        assert fmt["type"] == "json_schema" and fmt["name"] == "City" and fmt["strict"] is True
        assert upstream.requests == []
    else:  # translated: the format carried to chat's response_format
        assert upstream.responses_requests == []
        the_chat_upstream_got_the_format(upstream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_parse_of_an_answer_without_calls(proxy, upstream, mode, stream):
    answering(upstream, "json only")
    assert chat_message(proxy, stream).message.parsed == ROME
    assert response(proxy, stream).output_parsed == ROME


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_parse_keeps_the_json_and_the_allowed_call(proxy, upstream, mode, stream):
    answering(upstream, "json+hidden+allowed")
    final = response(proxy, stream)
    assert final.output_parsed == ROME and final.output_text == JSON
    calls = [(i.name, i.parsed_arguments) for i in final.output if i.type == "function_call"]
    assert calls == [("read_file", {"path": "a.txt"})]  # a strict tool given as a dict: its JSON
    assert len(refusals(final)) == 1 and EXPLAINED in refusals(final)[0]
    the_responses_upstream_got_the_format(upstream, mode)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_parse_reads_a_removed_call_without_text_as_a_refusal(proxy, upstream, mode, stream):
    answering(upstream, "hidden only")
    final = response(proxy, stream)
    assert final.output_parsed is None and final.output_text == ""
    assert [i.type for i in final.output] == ["message"] and EXPLAINED in refusals(final)[0]


@pytest.mark.parametrize("mode", ["chat-only"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_chat_upstream_s_refusal_reaches_every_client_as_its_refusal(proxy, upstream, stream):
    """Translation kept only a chat answer's content: a model declining the format (content null,
    `refusal` set) reached a Responses client as an empty answer, a Messages client as nothing."""
    upstream.responder = lambda body: {"content": None, "refusal": "I will not say."}
    assert chat_message(proxy, stream).message.refusal == "I will not say."
    final = response(proxy, stream)
    assert refusals(final) == ["I will not say."] and final.output_parsed is None and final.output_text == ""
    message, text = claude_answer(proxy, stream)
    assert [b.text for b in message.content] == ["I will not say."] == [text]


def test_responses_create_still_gets_the_explanation_as_text(proxy, upstream):
    answering(upstream, "hidden only")
    final = proxy.client.responses.create(model="small-model", input=HI, tools=RESPONSES_TOOLS)
    assert EXPLAINED in final.output_text and refusals(final) == []


# -- in process: the same helpers on a gated client (gatekeeper.adapters.openai_sdk) ---------


@pytest.fixture
def gated(upstream, store_path, default_suite) -> Iterator[Any]:
    """A stand-in for `proxy` whose `client` is a gated OpenAI client on the upstream itself."""
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    gk = Gatekeeper(settings_for(upstream.base_url, store_path, blocked_calls="explain"))
    client = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    yield SimpleNamespace(client=openai_sdk.gate_client(client, gk))
    gk.close()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_parse_in_process_keeps_the_json_and_the_allowed_call(gated, upstream, stream):
    answering(upstream, "json+hidden+allowed")
    message = chat_message(gated, stream).message
    assert message.parsed == ROME and message.refusal is None
    assert [c.function.name for c in message.tool_calls] == ["read_file"]
    final = response(gated, stream)
    assert final.output_parsed == ROME and EXPLAINED in refusals(final)[0]
    assert [i.name for i in final.output if i.type == "function_call"] == ["read_file"]


# -- the Anthropic SDK's helpers on an answer whose rogue call was removed ---------------------

CLAUDE_TOOLS = [{"name": n, "input_schema": Path.model_json_schema()} for n in ("read_file", "execute_command")]
CLAUDE_TURNS = {
    "text+hidden+allowed": ({"content": "on it", "tool_calls": [HIDDEN, ALLOWED]}, "tool_use"),
    "text+allowed+hidden": ({"content": "on it", "tool_calls": [ALLOWED, HIDDEN]}, "tool_use"),
    "text+hidden": ({"content": "on it", "tool_calls": [HIDDEN]}, "end_turn"),
    "hidden only": ({"content": None, "tool_calls": [HIDDEN]}, "end_turn"),
}


def claude_answer(proxy: Proxy, stream: bool) -> tuple[Any, str]:
    """The final message, and the text the client saw (text_stream when streamed)."""
    request = {"model": "small-model", "max_tokens": 100, "messages": HI, "tools": CLAUDE_TOOLS}
    client = claude(proxy)
    if not stream:
        message = client.messages.create(**request)
        return message, "".join(b.text for b in message.content if b.type == "text")
    with client.messages.stream(**request) as events:
        text = "".join(events.text_stream)
        return events.get_final_message(), text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("turn", list(CLAUDE_TURNS))
def test_anthropic_helpers_read_an_explained_answer_with_the_right_stop_reason(proxy, upstream, turn, stream):
    reply, stop = CLAUDE_TURNS[turn]
    upstream.responder = lambda body: reply
    message, text = claude_answer(proxy, stream)
    assert message.stop_reason == stop
    uses = [(b.name, b.input) for b in message.content if b.type == "tool_use"]
    assert uses == ([("read_file", {"path": "a.txt"})] if stop == "tool_use" else [])
    texts = [b.text for b in message.content if b.type == "text"]
    assert EXPLAINED in texts[-1] and (reply["content"] is None or texts[0] == "on it")
    assert text == "".join(texts)
    only_read_file_was_offered(upstream)


def test_anthropic_parse_leaves_the_json_alone_when_the_only_call_is_removed(proxy, upstream):
    """A structured Messages answer (`output_format`): every text block is what `parse`
    validates, and Messages has no refusal block, so no explanation is added."""
    upstream.responder = lambda body: {"content": JSON, "tool_calls": [HIDDEN]}
    message = claude(proxy).messages.parse(
        model="small-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS, output_format=City
    )
    assert message.parsed_output == ROME and message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    assert json.loads(message.content[0].text) == ROME.model_dump()
