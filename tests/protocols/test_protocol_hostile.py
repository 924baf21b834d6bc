"""A hostile or broken upstream on the Responses and Messages paths: what the official clients
read is either gated or an error, never a hidden call (issue "The gate holds on every path")."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import openai
import pytest
from conftest import Proxy, small_model_proxy
from upstreams import NativeServer

FUNCTIONS = [
    {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}}
    for n in ("read_file", "execute_command")
]
CLAUDE_TOOLS = [{"name": t["name"], "input_schema": t["parameters"]} for t in FUNCTIONS]
HI = [{"role": "user", "content": "hi"}]
HIDDEN = {"content": "x", "tool_calls": [{"name": "execute_command", "arguments": {}}]}


@pytest.fixture
def native() -> Iterator[NativeServer]:
    with NativeServer(lambda body: HIDDEN, newline="\r\n") as server:  # CRLF-framed streams
        yield server


@pytest.fixture
def proxy(native, store_path, default_suite) -> Iterator[Proxy]:
    with small_model_proxy(native.base_url, store_path, default_suite) as running:
        yield running


def sse(*docs: dict, newline: str = "\n") -> bytes:
    return b"".join(f"event: {d['type']}{newline}data: {json.dumps(d)}{newline}{newline}".encode() for d in docs)


def test_crlf_framed_streams_are_filtered(proxy):
    with proxy.client.responses.stream(model="small-model", input="hi", tools=FUNCTIONS) as stream:
        final = stream.get_final_response()
    assert [i.type for i in final.output] == ["message"]
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    with client.messages.stream(model="small-model", max_tokens=10, messages=HI, tools=CLAUDE_TOOLS) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["text"] and message.stop_reason == "end_turn"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"output": [{"type": "function_call", "name": "execute_command", "arguments": NaN}]}',
        b'{"output": {"type": "function_call"}}',
        b'[{"type": "function_call"}]',
        b'{"output": [{"type": "function\\u005fcall", "name": 1}]}',
    ],
)
def test_unreadable_responses_answer_is_a_502(proxy, native, raw):
    native.responder = lambda body: {"raw": raw}
    with pytest.raises(openai.InternalServerError) as info:
        proxy.client.responses.create(model="small-model", input="hi", tools=FUNCTIONS)
    assert info.value.status_code == 502 and info.value.code == "upstream_invalid"


def test_unreadable_messages_answer_is_an_anthropic_502(proxy, native):
    native.responder = lambda body: {
        "raw": b'{"content": [{"type": "tool\\u005fuse", "name": "execute_command"}], '
        b'"stop_reason": "tool_use", "x": NaN}'
    }
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(model="small-model", max_tokens=10, messages=HI, tools=CLAUDE_TOOLS)
    assert info.value.status_code == 502 and info.value.body["type"] == "error"


def test_escaped_item_type_is_read_and_removed(proxy, native):
    native.responder = lambda body: {
        "raw": b'{"id": "r", "object": "response", "output": [{"type": "function\\u005fcall", '
        b'"name": "execute\\u005fcommand", "arguments": "{}", "call_id": "c"}]}'
    }
    raw = proxy.client.responses.with_raw_response.create(model="small-model", input="hi", tools=FUNCTIONS)
    assert raw.parse().output == [] and raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"


def test_item_renamed_mid_stream_ends_the_stream_in_error(proxy, native):
    item = {"type": "function_call", "id": "fc", "call_id": "c", "name": "read_file", "arguments": ""}
    native.responder = lambda body: {
        "media_type": "text/event-stream",
        "raw": sse(
            {"type": "response.created", "response": {"id": "r", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item | {"name": "execute_command"}},
            {"type": "response.completed", "response": {"id": "r", "output": [item | {"name": "execute_command"}]}},
        ),
    }
    seen = []
    with pytest.raises(openai.APIError, match="changed"):
        for event in proxy.client.responses.create(model="small-model", input="hi", tools=FUNCTIONS, stream=True):
            seen.append(event)
    assert "execute_command" not in json.dumps([e.model_dump() for e in seen])


def test_messages_delta_before_its_block_ends_the_stream_in_error(proxy, native):
    native.responder = lambda body: {
        "media_type": "text/event-stream",
        "raw": sse(
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "x",
                    "usage": {"input_tokens": 1, "output_tokens": 0},
                },
            },
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
            newline="\r",
        ),
    }
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError, match="not open"):
        with client.messages.stream(model="small-model", max_tokens=10, messages=HI, tools=CLAUDE_TOOLS) as stream:
            stream.get_final_message()
