"""Objects inside requests that the codecs forward as they are (content parts, `response_format`,
`text.format`, image sources, `metadata`, ...) are checked against their own tables
(protocols/<protocol>/fields.py), through the real proxy in front of a real upstream (tests/upstreams.py),
sent by the official clients, native and translated to chat: an unknown key is a 400 naming its
path (`upstream.unknown_fields: refuse`) or is dropped (`drop`), and what real clients send by
default still arrives as it was sent."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from conftest import Proxy, claude, native_gate

HIDDEN = "execute_command"  # large; small-model is small
RULES = {"default_tier": "small", "required_tier": {HIDDEN: "large"}}
CHAT_FN = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
CHAT_HIDDEN = {"type": "function", "function": {"name": HIDDEN, "parameters": {"type": "object"}}}
FN = {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}
HIDDEN_FN = FN | {"name": HIDDEN}
CLAUDE_FN = {"name": "read_file", "input_schema": {"type": "object", "properties": {}}}
CLAUDE_HIDDEN = CLAUDE_FN | {"name": HIDDEN}
NATIVE, TRANSLATED = ["chat", "responses", "messages"], ["chat"]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def gate(protocols: list[str], store_path: Any, suite: Any, unknown: str = "refuse") -> Any:
    return native_gate(protocols, store_path, suite, RULES, unknown)


# Each request hides `execute_command` one level down, in an object forwarded as it is; the path
# named in the 400; and the key that `drop` removes.
CHAT_PART = {"type": "text", "text": "hi", "tools": [CHAT_HIDDEN]}
INPUT_PART = {"type": "input_text", "text": "hi", "tools": [HIDDEN_FN]}
JSON_FORMAT = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "tools": [HIDDEN_FN]}
CLAUDE_PART = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "tools": [CLAUDE_HIDDEN]}}


def _chat_part(proxy: Proxy) -> Any:
    content = [{"type": "text", "text": "look"}, CHAT_PART]
    return proxy.client.chat.completions.create(
        model="small-model", messages=[{"role": "user", "content": content}], tools=[CHAT_FN]
    )


def _chat_response_format(proxy: Proxy) -> Any:
    schema = {"name": "answer", "schema": {"type": "object"}, "tools": [CHAT_HIDDEN]}
    return proxy.client.chat.completions.create(
        model="small-model",
        messages=[{"role": "user", "content": "hi"}],
        response_format={"type": "json_schema", "json_schema": schema},
        tools=[CHAT_FN],
    )


def _responses_part(proxy: Proxy) -> Any:
    return proxy.client.responses.create(
        model="small-model", input=[{"role": "user", "content": [INPUT_PART]}], tools=[FN]
    )


def _responses_text_format(proxy: Proxy) -> Any:
    return proxy.client.responses.create(model="small-model", input="hi", text={"format": JSON_FORMAT}, tools=[FN])


def _messages_cache_control(proxy: Proxy) -> Any:
    return claude(proxy).messages.create(
        model="small-model", max_tokens=5, messages=[{"role": "user", "content": [CLAUDE_PART]}], tools=[CLAUDE_FN]
    )


def _messages_metadata(proxy: Proxy) -> Any:
    return claude(proxy).messages.create(
        model="small-model",
        max_tokens=5,
        messages=[{"role": "user", "content": "hi"}],
        metadata={"user_id": "u1", "tools": [CLAUDE_HIDDEN]},
        tools=[CLAUDE_FN],
    )


SMUGGLED = [
    (_chat_part, openai.BadRequestError, r"messages\[0\]\.content\[1\]\.tools is not a field"),
    (_chat_response_format, openai.BadRequestError, r"response_format\.json_schema\.tools is not a field"),
    (_responses_part, openai.BadRequestError, r"input\[0\]\.content\[0\]\.tools is not a field"),
    (_responses_text_format, openai.BadRequestError, r"text\.format\.tools is not a field"),
    (_messages_cache_control, anthropic.BadRequestError, r"messages\[0\]\.content\[0\]\.cache_control\.tools is not"),
    (_messages_metadata, anthropic.BadRequestError, r"metadata\.tools is not a field"),
]
IDS = [send.__name__.strip("_") for send, _, _ in SMUGGLED]


@pytest.mark.parametrize("protocols", [NATIVE, TRANSLATED], ids=["native", "translated"])
@pytest.mark.parametrize(("send", "error", "path"), SMUGGLED, ids=IDS)
def test_an_unknown_nested_key_is_a_400_naming_its_path(protocols, send, error, path, store_path, default_suite):
    with gate(protocols, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(error, match=path) as info:
            send(proxy)
        assert info.value.status_code == 400
    assert upstream.received() == []


@pytest.mark.parametrize("protocols", [NATIVE, TRANSLATED], ids=["native", "translated"])
@pytest.mark.parametrize(("send", "error", "path"), SMUGGLED, ids=IDS)
def test_an_unknown_nested_key_is_dropped_under_drop(protocols, send, error, path, store_path, default_suite):
    with gate(protocols, store_path, default_suite, unknown="drop") as (proxy, upstream):
        send(proxy)
    [body] = upstream.received()
    text = json.dumps(body)
    assert HIDDEN not in text, f"{HIDDEN} reached the upstream"
    assert "read_file" in text  # the request itself went through, gated


@pytest.mark.parametrize("mode", ["refuse", "drop"])
def test_an_object_in_a_plain_field_is_a_400_whatever_the_mode(mode, store_path, default_suite):
    with gate(NATIVE, store_path, default_suite, unknown=mode) as (proxy, upstream):
        with pytest.raises(openai.BadRequestError, match=r"top_p is an object where gatekeeper knows only plain"):
            proxy.client.chat.completions.create(
                model="small-model",
                messages=[{"role": "user", "content": "hi"}],
                top_p={"tools": [CHAT_HIDDEN]},  # type: ignore[arg-type]
            )
        with pytest.raises(anthropic.BadRequestError, match=r"source\.type 'tools' is not a type gatekeeper knows"):
            claude(proxy).messages.create(
                model="small-model",
                max_tokens=5,
                messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "tools"}}]}],  # type: ignore[list-item, typeddict-item]
            )
    assert upstream.received() == []


def test_an_unknown_include_value_is_a_400_and_dropped_under_drop(store_path, default_suite):
    include = ["reasoning.encrypted_content", "tools.execute_command"]
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        with pytest.raises(openai.BadRequestError, match=r"include\[1\] 'tools.execute_command' is not a value"):
            proxy.client.responses.create(model="small-model", input="hi", include=include)  # type: ignore[arg-type]
    assert upstream.received() == []
    with gate(NATIVE, store_path, default_suite, unknown="drop") as (proxy, upstream):
        proxy.client.responses.create(model="small-model", input="hi", include=include)  # type: ignore[arg-type]
    assert upstream.responses_requests[0]["include"] == ["reasoning.encrypted_content"]


# -- what clients send by default arrives as it was sent ------------------------------------------


def test_chat_nested_objects_of_real_clients_arrive_as_sent(store_path, default_suite):
    sent = {
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a png"}]},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "a", "strict": True, "schema": {"type": "object", "$defs": {}, "properties": {}}},
        },
        "stream_options": None,
        "metadata": {"run": "r1"},
        "logit_bias": {"50256": -100},
        "prediction": {"type": "content", "content": [{"type": "text", "text": "a"}]},
        "tools": [CHAT_FN],
    }
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        proxy.client.chat.completions.create(model="small-model", **sent)
    [body] = upstream.requests
    for key in ("messages", "response_format", "metadata", "logit_bias", "prediction"):
        assert body[key] == sent[key], key


def test_responses_nested_objects_of_real_clients_arrive_as_sent(store_path, default_suite):
    sent = {
        "input": [
            {"role": "developer", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
                ],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look"}]},
            {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "a png"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "a png", "annotations": []}],
            },
        ],
        "reasoning": {"summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}, "verbosity": "low"},
        "include": ["reasoning.encrypted_content"],
        "metadata": {"run": "r1"},
        "tools": [FN],
    }
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        proxy.client.responses.create(model="small-model", **sent)
    [body] = upstream.responses_requests
    for key in ("input", "reasoning", "text", "include", "metadata"):
        assert body[key] == sent[key], key


def test_messages_nested_objects_of_real_clients_arrive_as_sent(store_path, default_suite):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    sent = {
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    image,
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "a doc"},
                        "citations": {"enabled": True},
                        "title": "doc",
                    },
                    {"type": "text", "text": "what are these?", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "/a", "opts": {}}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a png"}, image]}
                ],
            },
        ],
        "metadata": {"user_id": "u1"},
        "tools": [CLAUDE_FN | {"cache_control": {"type": "ephemeral"}}],
    }
    with gate(NATIVE, store_path, default_suite) as (proxy, upstream):
        claude(proxy).messages.create(model="small-model", max_tokens=5, **sent)
    [body] = upstream.messages_requests
    for key in ("system", "messages", "metadata", "tools"):
        assert body[key] == sent[key], key
