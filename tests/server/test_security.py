"""Issue 9 ("the gate holds on every path"), one regression test per item: a real proxy on a real
port, a real HTTP upstream misbehaving in exactly that way, the official openai client reading."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import anthropic
import httpx
import openai
import pytest
import structlog
from accumulate import chunks_of, client_events, node_names, plain_names, python_names, stream_names
from conftest import (
    ROOT,
    Proxy,
    make_profile,
    measuring_upstream,
    metric,
    running_proxy,
    seed_store,
    settings_for,
    suite_requests,
    tool,
    wait_until,
)
from pydantic import ValidationError
from redis_server import RedisServer, require_server
from scripted import RawAnswer, RawUpstream, ScriptedServer, chat_chunk, chat_completion, free_port, sse
from serving import served

from gatekeeper import Gatekeeper, ToolRegistry
from gatekeeper.config import Settings
from gatekeeper.errors import RequestInvalid
from gatekeeper.observe.logs import merge_context
from gatekeeper.observe.redact import address_forms, cap_strings, clip, redact, redact_url
from gatekeeper.rules.tiers import Tier

TOOLS = [tool("read_file"), tool("execute_command")]  # at tier small only read_file is offered
HI = [{"role": "user", "content": "hi"}]


def call(name: str, index: int = 0, arguments: str = "{}") -> dict:
    return {
        "index": index,
        "id": f"call_{index}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def message_call(name: str) -> dict:
    return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": "{}"}}


@contextmanager
def gate(server, store_path, default_suite, **changes) -> Iterator[Proxy]:
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with running_proxy(settings_for(server.base_url, store_path, **changes)) as proxy:
        yield proxy


def raw_stream(proxy: Proxy, **body) -> httpx.Response:
    """What the proxy sends, read as bytes (the client-side parsers are in accumulate.py)."""
    payload = {"model": "m", "messages": HI, "tools": TOOLS, "stream": True} | body
    return httpx.post(proxy.url + "/v1/chat/completions", json=payload, timeout=30)


def final_names(proxy: Proxy) -> list[str]:
    """Tool names after openai-python's own stream accumulation."""
    with proxy.client.chat.completions.stream(model="m", messages=HI, tools=TOOLS) as stream:
        for _ in stream:
            pass
        message = stream.get_final_completion().choices[0].message
    return [c.function.name for c in message.tool_calls or []]


HIDDEN_AND_ALLOWED = [
    chat_chunk({"role": "assistant", "content": ""}),
    chat_chunk({"tool_calls": [call("execute_command", 0)]}),
    chat_chunk({"tool_calls": [call("read_file", 1)]}),
    chat_chunk({}, "tool_calls"),
]


# -- High: SSE as the specification says ------------------------------------------------------------


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_crlf_and_cr_framed_streams_are_filtered(store_path, default_suite, newline):
    with RawUpstream(RawAnswer(sse(*HIDDEN_AND_ALLOWED, newline=newline), content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert final_names(proxy) == ["read_file"]


@pytest.mark.parametrize(
    "prefix,suffix",
    [
        (b"id: 1\n", b""),
        (b": keep-alive\n", b""),
        (b"event: message\nretry: 10\n", b""),
        (b"", b"id: 2\n"),
        (b"", b": trailing comment\n"),
    ],
    ids=["id-before", "comment-before", "event-retry-before", "id-after", "comment-after"],
)
def test_field_and_comment_lines_around_data_do_not_let_a_call_through(store_path, default_suite, prefix, suffix):
    hidden = b"data: " + json.dumps(chat_chunk({"tool_calls": [call("execute_command")]})).encode() + b"\n"
    body = prefix + hidden + suffix + b"\n" + sse(chat_chunk({}, "tool_calls"))
    with RawUpstream(RawAnswer(body, content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert final_names(proxy) == []
            assert stream_names(raw_stream(proxy).content) == set()


def test_an_event_whose_data_spans_several_lines_is_read_whole(store_path, default_suite):
    multi = json.dumps(chat_chunk({"tool_calls": [call("execute_command")]}), indent=1).encode()
    body = b"".join(b"data: " + line + b"\n" for line in multi.split(b"\n")) + b"\n" + sse()
    with RawUpstream(RawAnswer(body, content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert stream_names(raw_stream(proxy).content) == set()


def test_an_event_split_at_every_byte_is_filtered(store_path, default_suite):
    body = sse(*HIDDEN_AND_ALLOWED, newline=b"\r\n")
    with RawUpstream(RawAnswer([body[i : i + 1] for i in range(len(body))], content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert final_names(proxy) == ["read_file"]


@pytest.mark.parametrize("content_type", ["Text/Event-Stream; charset=utf-8", "application/json", None])
def test_a_requested_stream_is_filtered_whatever_its_content_type(store_path, default_suite, content_type):
    with RawUpstream(RawAnswer(sse(*HIDDEN_AND_ALLOWED), content_type=content_type)) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert final_names(proxy) == ["read_file"]
            assert stream_names(raw_stream(proxy).content) == {"read_file"}


def test_an_unasked_stream_is_still_filtered(store_path, default_suite):
    with RawUpstream(RawAnswer(sse(*HIDDEN_AND_ALLOWED), content_type="TEXT/EVENT-STREAM")) as up:
        with gate(up, store_path, default_suite) as proxy:
            answer = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": HI, "tools": TOOLS})
    assert stream_names(answer.content) == {"read_file"}


# -- High: what the JSON parser refuses never passes raw ------------------------------------------

HIDDEN_BODY = json.dumps(chat_completion({"tool_calls": [message_call("execute_command")]}, "tool_calls"))


@pytest.mark.parametrize(
    "body",
    [
        HIDDEN_BODY.replace('"created": 0', '"created": NaN').encode(),
        HIDDEN_BODY.replace('"created": 0', '"created": Infinity').encode(),
        HIDDEN_BODY.replace('"content": null', '"content": "\xff"').encode("latin-1"),
        HIDDEN_BODY.encode("utf-16"),
        json.dumps(chat_completion({"tool_calls": {"0": message_call("execute_command")}})).encode(),
        json.dumps([chat_completion({"tool_calls": [message_call("execute_command")]})]).encode(),
        json.dumps(chat_completion({"tool_calls": [{"function": {"name": 7}}]})).encode(),
        json.dumps(chat_completion({"tool_calls": ["execute_command"]})).encode(),
    ],
    ids=["nan", "infinity", "invalid-utf8", "utf16", "calls-object", "top-level-list", "name-int", "call-string"],
)
def test_an_unreadable_plain_answer_is_a_502_upstream_invalid(store_path, default_suite, body):
    with RawUpstream(RawAnswer(body)) as up:
        with gate(up, store_path, default_suite) as proxy:
            with pytest.raises(openai.APIStatusError) as info:
                proxy.client.chat.completions.create(model="m", messages=HI, tools=TOOLS)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_invalid"  # OpenAI shape: {"error": {message, type, code}}
    assert info.value.body["type"] == "upstream_error"


def test_an_escaped_key_is_read_enforced_and_never_relayed_raw(store_path, default_suite):
    body = HIDDEN_BODY.replace('"tool_calls": [', '"tool\\u005fcalls": [').encode()
    assert b"tool_calls" not in body.split(b'"finish_reason"')[0]
    with RawUpstream(RawAnswer(body)) as up:
        with gate(up, store_path, default_suite) as proxy:
            raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=TOOLS)
    assert plain_names(raw.content) == set()
    assert raw.parse().choices[0].finish_reason == "stop"
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"


@pytest.mark.parametrize(
    "bad",
    [
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"execute_command"}}]}}],"x":NaN}',
        '{"choices":[{"index":0,"delta":{"tool_calls":{"index":0,"function":{"name":"execute_command"}}}}]}',
        '[{"choices":[{"delta":{"tool_calls":[]}}]}]',
    ],
    ids=["nan", "calls-object", "top-level-list"],
)
def test_an_unreadable_event_ends_the_stream_with_a_framed_error_event(store_path, default_suite, bad):
    body = sse(chat_chunk({"content": "a"}), bad)
    with RawUpstream(RawAnswer(body, content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            with pytest.raises(openai.APIError) as info:
                final_names(proxy)
            raw = raw_stream(proxy).content
    assert "upstream stream event" in info.value.message
    assert not isinstance(info.value, openai.APIResponseValidationError)
    assert raw.startswith(b'data: {"id"') and raw.endswith(b"\n\n")
    assert b'\n\n\ndata: {"error"' in raw  # a blank line first: nothing partial can absorb it
    assert stream_names(raw) == set()


def test_an_escaped_key_in_an_event_is_enforced(store_path, default_suite):
    escaped = json.dumps(chat_chunk({"tool_calls": [call("execute_command")]})).replace(
        "tool_calls", "tool\\u005fcalls"
    )
    with RawUpstream(RawAnswer(sse(escaped, chat_chunk({}, "tool_calls")), content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert final_names(proxy) == []


def test_a_stream_cut_inside_an_event_ends_with_a_readable_error(store_path, default_suite):
    cut = b'data: {"choices": [{"index": 0, "delta": {"content": "par'
    with RawUpstream(
        RawAnswer([sse(chat_chunk({"content": "a"}), done=False), cut], content_type="text/event-stream")
    ) as up:
        with gate(up, store_path, default_suite) as proxy:
            with pytest.raises(openai.APIError) as info:
                list(proxy.client.chat.completions.create(model="m", messages=HI, stream=True))
    assert "ended before [DONE]" in info.value.message


# -- High: a streamed call keeps its first name -----------------------------------------------------


def test_a_renamed_call_never_reaches_either_client_style(store_path, default_suite):
    rename = [
        chat_chunk({"tool_calls": [call("read_file", 0, "")]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"name": "execute_command", "arguments": "{}"}}]}),
        chat_chunk({}, "tool_calls"),
    ]
    with RawUpstream(RawAnswer(sse(*rename), content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            with pytest.raises(openai.APIError, match="renames"):
                final_names(proxy)
            raw = raw_stream(proxy).content
    chunks = chunks_of(client_events(raw))
    assert python_names(chunks) <= {"read_file"} and node_names(chunks) <= {"read_file"}


def test_a_repeated_name_is_not_concatenated_by_openai_python(store_path, default_suite):
    repeat = [
        chat_chunk({"tool_calls": [call("read_file", 0, "")]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"name": "read_file", "arguments": "{}"}}]}),
        chat_chunk({}, "tool_calls"),
    ]
    with RawUpstream(RawAnswer(sse(*repeat), content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert final_names(proxy) == ["read_file"]


def test_deltas_without_index_are_calls_of_their_own(store_path, default_suite):
    no_index = [
        chat_chunk({"tool_calls": [{"function": {"name": "execute_command", "arguments": "{}"}}]}),
        chat_chunk({"tool_calls": [{"function": {"name": "read_file", "arguments": "{}"}}]}),
        chat_chunk({"tool_calls": [{"function": {"name": "execute_command", "arguments": "x"}}]}),
        chat_chunk({}, "tool_calls"),
    ]
    with RawUpstream(RawAnswer(sse(*no_index), content_type="text/event-stream")) as up:
        with gate(up, store_path, default_suite) as proxy:
            assert final_names(proxy) == ["read_file"]
            assert stream_names(raw_stream(proxy).content) == {"read_file"}


# -- Upstream abuse: the answer-size cap ---------------------------------------------------------


def test_a_plain_answer_past_max_response_bytes_is_a_502(store_path, default_suite):
    big = json.dumps(chat_completion({"content": "x" * 4000})).encode()
    with RawUpstream(RawAnswer([big[:2000], big[2000:]])) as up:
        with gate(
            up, store_path, default_suite, upstream={"base_url": up.base_url, "max_response_bytes": 2048}
        ) as proxy:
            with pytest.raises(openai.APIStatusError) as info:
                proxy.client.chat.completions.create(model="m", messages=HI)
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_too_large"


def test_a_stream_past_max_response_bytes_ends_in_error(store_path, default_suite):
    body = sse(*[chat_chunk({"content": "x" * 100}) for _ in range(40)])
    with RawUpstream(
        RawAnswer([body[i : i + 500] for i in range(0, len(body), 500)], content_type="text/event-stream")
    ) as up:
        with gate(
            up, store_path, default_suite, upstream={"base_url": up.base_url, "max_response_bytes": 2048}
        ) as proxy:
            with pytest.raises(openai.APIError, match="max_response_bytes"):
                list(proxy.client.chat.completions.create(model="m", messages=HI, stream=True))


# -- Request side --------------------------------------------------------------------------------


def test_parallel_tool_calls_is_dropped_with_the_last_tool(upstream, store_path, default_suite):
    with gate(upstream, store_path, default_suite) as proxy:
        proxy.client.chat.completions.create(
            model="m", messages=HI, tools=[tool("execute_command")], parallel_tool_calls=False
        )
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & upstream.requests[-1].keys()


@pytest.mark.parametrize("choice", ["required", "any"])
def test_demanding_a_call_when_every_tool_is_hidden_is_a_400_naming_them(upstream, store_path, default_suite, choice):
    with gate(upstream, store_path, default_suite) as proxy:
        with pytest.raises(openai.BadRequestError) as info:
            proxy.client.chat.completions.create(
                model="m", messages=HI, tools=[tool("execute_command")], tool_choice=choice
            )
    assert info.value.code == "tool_not_allowed" and "execute_command" in info.value.message
    assert upstream.requests == []


def test_allowed_tools_choice_is_filtered(upstream, store_path, default_suite):
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "auto",
            "tools": [
                {"type": "function", "function": {"name": "read_file"}},
                {"type": "function", "function": {"name": "execute_command"}},
            ],
        },
    }
    with gate(upstream, store_path, default_suite) as proxy:
        proxy.client.chat.completions.create(model="m", messages=HI, tools=TOOLS, tool_choice=choice)
    sent = upstream.requests[-1]["tool_choice"]["allowed_tools"]["tools"]
    assert [t["function"]["name"] for t in sent] == ["read_file"]


def test_allowed_tools_forcing_only_hidden_tools_is_a_400(upstream, store_path, default_suite):
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "execute_command"}}]},
    }
    with gate(upstream, store_path, default_suite) as proxy:
        with pytest.raises(openai.BadRequestError) as info:
            proxy.client.chat.completions.create(model="m", messages=HI, tools=TOOLS, tool_choice=choice)
    assert info.value.code == "tool_not_allowed" and "execute_command" in info.value.message


def test_custom_and_typed_tools_are_gated_by_name_or_type(upstream, store_path, default_suite):
    rules = {"default_tier": "small", "required_tier": {"execute_command": "large", "web_search": "large"}}
    tools = [
        {"type": "custom", "custom": {"name": "execute_command", "description": "freeform"}},
        {"type": "custom", "custom": {"name": "notes"}},
        {"type": "web_search"},
    ]
    with gate(upstream, store_path, default_suite, tools=rules) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=tools)
        with pytest.raises(openai.BadRequestError) as info:
            proxy.client.chat.completions.create(
                model="m",
                messages=HI,
                tools=tools,
                tool_choice={"type": "custom", "custom": {"name": "execute_command"}},
            )
    assert raw.status_code == 200
    assert upstream.requests[-1]["tools"] == [tools[1]]
    assert info.value.code == "tool_not_allowed"


def test_tools_nested_in_chat_template_kwargs_are_refused(upstream, store_path, default_suite):
    with gate(upstream, store_path, default_suite) as proxy:
        with pytest.raises(openai.BadRequestError) as info:
            proxy.client.chat.completions.create(
                model="m", messages=HI, extra_body={"chat_template_kwargs": {"tools": [tool("execute_command")]}}
            )
        proxy.client.chat.completions.create(
            model="m", messages=HI, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
        )
    assert "chat_template_kwargs.tools" in info.value.message
    # (Reasoning off is the pair m@none, which is measured lazily: its suite requests carry no kwargs.)
    assert [r["chat_template_kwargs"] for r in upstream.requests if "chat_template_kwargs" in r] == [
        {"enable_thinking": False}
    ]


def test_forcing_a_hidden_tool_without_tools_is_a_400(upstream, store_path, default_suite):
    with gate(upstream, store_path, default_suite) as proxy:
        with pytest.raises(openai.BadRequestError) as info:
            proxy.client.chat.completions.create(
                model="m", messages=HI, tool_choice={"type": "function", "function": {"name": "execute_command"}}
            )
    assert info.value.code == "tool_not_allowed" and upstream.requests == []


def test_a_non_ascii_header_value_is_a_400_naming_it(upstream, store_path, default_suite):
    with gate(upstream, store_path, default_suite) as proxy:
        answer = httpx.post(
            proxy.url + "/v1/chat/completions",
            json={"model": "m", "messages": HI},
            headers={"x-stainless-agent": "caf\xe9".encode("latin-1")},
        )
        assert answer.status_code == 400 and "x-stainless-agent" in answer.json()["error"]["message"]
        assert proxy.client.chat.completions.create(model="m", messages=HI).choices[0].message.content == "ok"


# What a client may put in a header that an upstream gateway reads as request parameters.
_GATEWAY_HEADERS = {
    "x-portkey-config": json.dumps({"override_params": {"tools": [tool("execute_command")]}}),
    "x-litellm-tags": "premium",
    "cookie": "gatekeeper_session=admin",
}


def test_only_known_client_headers_reach_the_upstream(upstream, store_path, default_suite):
    with gate(upstream, store_path, default_suite) as proxy, structlog.testing.capture_logs() as lines:
        client = openai.OpenAI(
            base_url=proxy.url + "/v1", api_key="client-key", default_headers=_GATEWAY_HEADERS | {"openai-beta": "x"}
        )
        client.chat.completions.create(model="m", messages=HI, extra_headers={"idempotency-key": "k1"})
    sent = upstream.headers[-1]
    assert not _GATEWAY_HEADERS.keys() & sent.keys()
    assert sent["authorization"] == "Bearer client-key" and sent["openai-beta"] == "x"
    assert sent["idempotency-key"] == "k1" and sent["user-agent"].startswith("OpenAI/Python")
    assert any(k.startswith("x-stainless-") for k in sent)
    dropped = [line for line in lines if line["event"] == "client_headers_dropped"]
    assert sorted(dropped[0]["headers"]) == sorted(_GATEWAY_HEADERS)


def test_an_operator_can_forward_more_headers_or_all(upstream, store_path, default_suite):
    listed = {"base_url": upstream.base_url, "forward_headers": ["X-Portkey-*", "cookie"]}
    with gate(upstream, store_path, default_suite, upstream=listed) as proxy:
        httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": HI}, headers=_GATEWAY_HEADERS)
    assert {"x-portkey-config", "cookie"} <= upstream.headers[-1].keys()
    assert "x-litellm-tags" not in upstream.headers[-1]
    every = {"base_url": upstream.base_url, "client_headers": "all"}
    with gate(upstream, store_path, default_suite, upstream=every) as proxy:
        httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": HI}, headers=_GATEWAY_HEADERS)
    assert _GATEWAY_HEADERS.keys() <= upstream.headers[-1].keys()


@pytest.mark.parametrize("name", ["x-a*b", "x a", "", "*"])
def test_a_forwarded_header_must_be_a_name_or_a_prefix(name):
    with pytest.raises(ValidationError, match="expected a header name"):
        Settings.model_validate({"upstream": {"forward_headers": [name]}})


# -- Admin and errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["   ", "\t"])
def test_a_whitespace_admin_key_is_refused_at_start_up(store_path, key):
    with pytest.raises(ValidationError, match="admin_key"):
        Settings.model_validate({"store": str(store_path), "admin_key": key})


def test_an_empty_admin_key_disables_the_admin_api(upstream, store_path):
    # `admin_key: ${GATEKEEPER_ADMIN_KEY:-}` with the variable unset: no admin API, not a password "".
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="")) as proxy:
        answer = httpx.get(proxy.url + "/admin/profiles", headers={"authorization": "Bearer x"})
    assert answer.status_code == 404


@pytest.mark.parametrize("header", ["Bearer  k3y", "k3y", "Bearer k3y2", "Basic k3y", "Bearer", "bearer K3Y"])
def test_only_bearer_and_exactly_the_key_passes(upstream, store_path, header):
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="k3y")) as proxy:
        refused = httpx.get(proxy.url + "/admin/profiles", headers={"authorization": header})
        allowed = httpx.get(proxy.url + "/admin/profiles", headers={"authorization": "Bearer k3y"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_admin_key"
    assert allowed.status_code == 200


def test_unknown_paths_and_methods_answer_in_the_openai_shape_naming_what_is_served(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        unknown = httpx.get(proxy.url + "/v1/files")
        method = httpx.get(proxy.url + "/v1/chat/completions")
        slash = httpx.post(proxy.url + "/v1/chat/completions/", json={}, follow_redirects=False)
        with pytest.raises(openai.NotFoundError) as info:
            proxy.client.files.list()
    assert unknown.status_code == 404 and "POST /v1/chat/completions" in unknown.json()["error"]["message"]
    assert method.status_code == 405 and "served" in method.json()["error"]["message"]
    assert method.headers["allow"] == "POST"
    assert slash.status_code == 404 and "location" not in slash.headers
    assert info.value.code == "not_found"


def test_unknown_messages_paths_answer_in_anthropic_shape(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        answer = httpx.post(proxy.url + "/v1/messages/batches", json={})
    assert answer.status_code == 404
    assert answer.json()["type"] == "error" and "served" in answer.json()["error"]["message"]


# -- the litellm route: an allowlist, and the same enforcement -----------------------------------


def _route_settings(upstream_url: str, store_path, unknown_fields: str = "refuse") -> Settings:
    route = {
        "name": "routed",
        "litellm_model": "openai/behind-litellm",
        "api_base": upstream_url,
        "api_key": "operator-key",
    }
    upstream = {"base_url": f"http://127.0.0.1:{free_port()}/v1", "unknown_fields": unknown_fields}
    return settings_for(upstream["base_url"], store_path, models=[route], upstream=upstream)


_REDIRECTS = {
    "base_url": "ATTACKER",
    "api_base": "ATTACKER",
    "api_key": "client-chosen",
    "extra_headers": {"x-injected": "1"},
    "mock_response": "pwned",
    "mock_tool_calls": [{"function": {"name": "execute_command", "arguments": "{}"}}],
}


def test_a_client_cannot_redirect_a_litellm_route_or_add_headers(store_path, default_suite):
    with ScriptedServer() as upstream, ScriptedServer(lambda b: {"content": "stolen"}) as attacker:
        seed_store(store_path, make_profile("routed", Tier.SMALL, default_suite))
        extra = {k: attacker.base_url if v == "ATTACKER" else v for k, v in _REDIRECTS.items()}
        with running_proxy(_route_settings(upstream.base_url, store_path)) as proxy:
            with pytest.raises(openai.BadRequestError) as info:  # unknown fields: refused by default
                proxy.client.chat.completions.create(model="routed", messages=HI, extra_body=extra)
        assert "'base_url' is not a field gatekeeper knows" in info.value.message
        with running_proxy(_route_settings(upstream.base_url, store_path, "drop")) as proxy:
            answer = proxy.client.chat.completions.create(model="routed", messages=HI, extra_body=extra)
    assert answer.choices[0].message.content == "ok"
    assert attacker.requests == []
    assert upstream.headers[-1]["authorization"] == "Bearer operator-key"
    assert "x-injected" not in upstream.headers[-1]
    assert not set(_REDIRECTS) & upstream.requests[-1].keys()


def test_a_litellm_stream_is_enforced_logged_and_counted(store_path, default_suite):
    reply = lambda body: {  # noqa: E731
        "content": "x",
        "tool_calls": [
            {"name": "execute_command", "arguments": {}},
            {"name": "read_file", "arguments": {}},
        ],
    }
    with ScriptedServer(reply) as upstream:
        seed_store(store_path, make_profile("routed", Tier.SMALL, default_suite))
        with running_proxy(_route_settings(upstream.base_url, store_path)) as proxy:
            before = metric(proxy.url, "gatekeeper_tool_calls_blocked_total")
            with structlog.testing.capture_logs(processors=[merge_context]) as logs:
                with proxy.client.chat.completions.stream(model="routed", messages=HI, tools=TOOLS) as stream:
                    for _ in stream:
                        pass
                    names = [c.function.name for c in stream.get_final_completion().choices[0].message.tool_calls]
                # The relay logs and counts once the stream is over on its side: after the client's [DONE].
                line = wait_until(lambda: next((e for e in logs if e["event"] == "request"), None), "the log line")
            after = wait_until(
                lambda: (
                    metric(proxy.url, "gatekeeper_tool_calls_blocked_total") > before
                    and metric(proxy.url, "gatekeeper_tool_calls_blocked_total")
                ),
                "the counter",
            )
    assert names == ["read_file"]
    assert after == before + 1
    assert line["stream"] is True and line["blocked_calls"] == ["execute_command"] and line["model"] == "routed"


# -- issue 11, everything else: forwarded endpoints and the blocked-calls header -----------------


def test_a_model_is_forwarded_by_id(store_path):
    with RawUpstream(RawAnswer(b'{"id": "org/m-1", "object": "model", "owned_by": "x"}')) as up:
        with running_proxy(settings_for(up.base_url, store_path)) as proxy:
            assert proxy.client.models.retrieve("org/m-1").id == "org/m-1"
            assert httpx.get(proxy.url + "/v1/models/../admin").status_code in (400, 404)
    assert up.paths == ["/v1/models/org/m-1"]


@pytest.mark.parametrize(
    ("path", "sent"),
    [("/v1/embeddings", {"model": "m", "input": "x"}), ("/v1/completions", {"model": "m", "prompt": "y"})],
)
def test_tool_free_endpoints_are_forwarded_untouched(store_path, path, sent):
    with RawUpstream(RawAnswer(b'{"object": "list", "data": [], "odd": NaN}')) as up:
        with running_proxy(settings_for(up.base_url, store_path)) as proxy:
            answer = httpx.post(proxy.url + path, json=sent)
            refused = httpx.post(proxy.url + path, json={"model": "m", "tools": [tool("execute_command")]})
    assert answer.status_code == 200 and answer.content == b'{"object": "list", "data": [], "odd": NaN}'
    assert up.requests == [sent] and up.paths == [path]
    assert refused.status_code == 400


def test_blocked_calls_are_named_in_a_header_on_plain_answers(store_path, default_suite):
    body = chat_completion(
        {"tool_calls": [message_call("execute_command"), message_call("ghost\r\nx: y"), message_call("read_file")]},
        "tool_calls",
    )
    with RawUpstream(RawAnswer(json.dumps(body).encode())) as up:
        with gate(up, store_path, default_suite) as proxy:
            raw = proxy.client.chat.completions.with_raw_response.create(model="m", messages=HI, tools=TOOLS)
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command,ghost%0D%0Ax:%20y"
    assert [c.function.name for c in raw.parse().choices[0].message.tool_calls] == ["read_file"]


# -- issue 20: abuse of the proxy itself -----------------------------------------------------------


def from_address(url: str, address: str) -> httpx.Client:
    """A client whose connections come from `address` (any 127.x.y.z is this host's loopback)."""
    return httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(local_address=address))


def test_admin_key_guessing_is_throttled_per_source(upstream, store_path):
    right = {"authorization": "Bearer k3y"}
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="k3y")) as proxy:
        with from_address(proxy.url, "127.0.0.2") as guesser:
            statuses = [
                guesser.get("/admin/profiles", headers={"authorization": f"Bearer guess-{i}"}).status_code
                for i in range(200)
            ]
            assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}
            throttled = guesser.get("/admin/profiles", headers={"authorization": "Bearer guess"})
            assert throttled.json()["error"]["code"] == "admin_key_throttled"
            assert 1 <= int(throttled.headers["retry-after"]) <= 60
            # Past 100 wrong keys a minute the address's keys are not read: the right one waits too,
            # so guessing is bounded at 100 keys a minute whatever the answers tell.
            assert guesser.get("/admin/profiles", headers=right).status_code == 429
            # The console's sign-in counts the same failures: switching door buys nothing.
            login = guesser.post("/admin/login", data={"key": "k3y"}, headers={"origin": proxy.url})
            assert login.status_code == 429
        with from_address(proxy.url, "127.0.0.3") as admin:
            assert admin.get("/admin/profiles", headers=right).status_code == 200


def test_a_right_key_passes_from_an_address_that_sent_a_few_wrong_ones(upstream, store_path):
    """Ten wrong keys, from anyone, anywhere (here the admin's own address), lock nobody out."""
    right = {"authorization": "Bearer k3y"}
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="k3y")) as proxy:
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            statuses = [
                client.get("/admin/profiles", headers={"authorization": f"Bearer g{i}"}).status_code for i in range(30)
            ]
            assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}
            assert client.get("/admin/profiles", headers=right).status_code == 200
            signed_in = client.post("/admin/login", data={"key": "k3y"}, headers={"origin": proxy.url})
            assert signed_in.status_code == 303


def test_the_auth_scheme_is_case_insensitive_and_the_key_is_not(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="k3y")) as proxy:
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            for scheme in ("Bearer", "bearer", "BEARER"):
                assert client.get("/admin/profiles", headers={"authorization": f"{scheme} k3y"}).status_code == 200
            for wrong in ("Bearer K3Y", "Basic k3y", "Bearerk3y", "k3y", "Bearer  k3y"):
                assert client.get("/admin/profiles", headers={"authorization": wrong}).status_code == 401, wrong


def test_the_console_sign_in_and_the_api_share_the_count(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="k3y")) as proxy:
        with from_address(proxy.url, "127.0.0.2") as guesser:
            for i in range(10):
                guesser.post("/admin/login", data={"key": f"guess-{i}"}, headers={"origin": proxy.url})
            refused = guesser.get("/admin/profiles", headers={"authorization": "Bearer guess"})
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "admin_key_throttled"


STRANGE_EFFORTS = [f"e{i}" for i in range(12)]


def effort_requests(proxy: Proxy, effort: str) -> list[Exception | None]:
    """The same request on the three protocols, naming `effort` the way each protocol does."""
    messages_client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    calls = [
        lambda: proxy.client.chat.completions.create(model="m", messages=HI, reasoning_effort=effort),
        lambda: proxy.client.responses.create(model="m", input="hi", reasoning={"effort": effort}),
        lambda: messages_client.messages.create(
            model="m", max_tokens=16, messages=HI, output_config={"effort": effort}
        ),
    ]
    errors: list[Exception | None] = []
    for call_ in calls:
        try:
            call_()
            errors.append(None)
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            errors.append(exc)
    return errors


def test_efforts_outside_the_closed_set_are_a_400_and_measure_nothing(store_path, default_suite):
    """12 requests naming efforts e0..e11 of one stored model once made 12 profiles and 120 calls."""
    with measuring_upstream(default_suite) as server:
        seed_store(store_path, make_profile("m", Tier.LARGE, default_suite))
        with running_proxy(settings_for(server.base_url, store_path)) as proxy:  # Responses, Messages translated
            for effort in STRANGE_EFFORTS:
                for error in effort_requests(proxy, effort):
                    assert error is not None and error.status_code == 400
                    assert effort in error.message and "'xhigh'" in error.message and "'minimal'" in error.message
            assert set(proxy.gk.store.load().profiles) == {"m@default"}
            assert proxy.gk.progress() == []
        assert suite_requests(server, default_suite) == []
        assert server.requests == []  # nothing was forwarded either


def test_the_config_adds_efforts_to_the_closed_set(store_path, default_suite):
    with measuring_upstream(default_suite) as server:
        seed_store(store_path, make_profile("m", Tier.LARGE, default_suite, effort="turbo"))
        with running_proxy(settings_for(server.base_url, store_path, extra_efforts=["turbo"])) as proxy:
            answer = proxy.client.chat.completions.with_raw_response.create(
                model="m", messages=HI, reasoning_effort="turbo"
            )
            assert answer.headers["x-gatekeeper-profile"] == "measured"
            with pytest.raises(openai.BadRequestError, match="'turbo'"):
                proxy.client.chat.completions.create(model="m", messages=HI, reasoning_effort="nitro")


def test_in_process_the_same_efforts_are_refused(store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.LARGE, default_suite))
    with Gatekeeper(settings_for("http://127.0.0.1:9/v1", store_path)) as gk:
        registry = ToolRegistry(gk)
        registry.register(tool("read_file"))
        with pytest.raises(RequestInvalid, match="'e0' is not one of"):
            registry.list_for_llm("m", effort="e0")
        assert [t["function"]["name"] for t in registry.list_for_llm("m", effort="high")] == ["read_file"]


def test_every_new_pair_counts_against_the_lazy_caps(store_path, default_suite):
    with measuring_upstream(default_suite) as server:
        seed_store(store_path, make_profile("m", Tier.LARGE, default_suite))
        settings = settings_for(
            server.base_url, store_path, lazy={"max_pairs": 2}, unknown_models="wait", wait_timeout_s=30
        )
        with running_proxy(settings) as proxy:
            ask = proxy.client.chat.completions.with_raw_response.create
            assert ask(model="m", messages=HI, reasoning_effort="low").headers["x-gatekeeper-profile"] == "measured"
            runs = len(suite_requests(server, default_suite))
            for effort in ("medium", "high", "xhigh"):  # a known model, but each a new pair past the cap
                assert ask(model="m", messages=HI, reasoning_effort=effort).headers["x-gatekeeper-tier"] == "small"
            assert set(proxy.gk.store.load().profiles) == {"m@default", "m@low"}
        assert len(suite_requests(server, default_suite)) == runs


def test_a_redis_password_never_reaches_a_log_line_or_an_error_body(upstream, tmp_path):
    password = "s3cret-Redis-pw"
    config = f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "redis://:{password}@127.0.0.1:{free_port()}/0"
admin_key: admin-secret
"""
    with served(config, tmp_path) as proxy:
        admin = {"authorization": "Bearer admin-secret"}
        refused = httpx.delete(proxy.url + "/admin/profiles/m@default", headers=admin, timeout=30)
        assert refused.status_code == 503
        assert password not in refused.text and "127.0.0.1" not in refused.text  # where the store is: the log's
        answer = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": HI}, timeout=30)
        assert answer.status_code == 200  # served from nothing: fail closed, tier small
    log = proxy.log_text()
    assert "redis_unavailable" in log and "redis://***@127.0.0.1" in log
    assert password not in log


def test_redaction_hides_credentials_of_every_url():
    assert redact_url("redis://:pw@host:6379/0") == "redis://***@host:6379/0"
    assert redact_url("rediss://user:pw@host/1") == "rediss://***@host/1"
    assert redact_url("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/v1"
    assert redact_url("redis://:p@ss@host/0") == "redis://***@host/0"
    assert redact("at redis://:p@ss@host/0, retrying") == "at redis://***@host/0, retrying"
    assert (
        redact("mail me@example.com, see https://example.com/a@b") == "mail me@example.com, see https://example.com/a@b"
    )
    assert redact("cannot reach redis://:pw@h:1/0 nor https://u:p@x.example/v1") == (
        "cannot reach redis://***@h:1/0 nor https://***@x.example/v1"
    )


def test_a_huge_tool_choice_gives_a_small_error_and_a_small_log_line(upstream, store_path, default_suite):
    with gate(upstream, store_path, default_suite) as proxy:
        with structlog.testing.capture_logs(processors=[merge_context]) as logs:
            answer = httpx.post(
                proxy.url + "/v1/chat/completions",
                json={"model": "m", "messages": HI, "tools": TOOLS, "tool_choice": "x" * 1_000_000},
                timeout=30,
            )
    assert answer.status_code == 400 and "tool_choice" in answer.json()["error"]["message"]
    assert len(answer.content) < 4096
    assert logs and sum(len(json.dumps(entry, default=str)) for entry in logs) < 16384


def test_a_huge_model_name_costs_a_bounded_log(upstream, tmp_path):
    config = f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "{tmp_path / "models_profile.json"}"
"""
    with served(config, tmp_path) as proxy:
        before = proxy.log.stat().st_size
        answer = httpx.post(
            proxy.url + "/v1/chat/completions", json={"model": "m" * 1_000_000, "messages": HI}, timeout=180
        )
        assert answer.status_code == 200
        wait_until(lambda: '"request"' in proxy.log_text()[before:], "the request's log line", timeout_s=60)
        written = proxy.log.stat().st_size - before
    assert written < 32768, f"{written} bytes of log for one request"


def test_every_form_an_error_may_spell_an_address_in_is_known_and_a_malformed_url_is_itself():
    assert address_forms("https://u:pw@gw.internal:8443/v1/") == [
        "https://gw.internal:8443/v1",
        "https://gw.internal:8443",
        "gw.internal:8443",
        "https:\\/\\/gw.internal:8443\\/v1",
        "https:\\/\\/gw.internal:8443",
    ]
    assert address_forms("http://h:9[/x]/v1") == ["http://h:9[/x]/v1"]  # urlsplit refuses it: no crash


def test_every_logged_string_is_capped_and_redacted():
    event = cap_strings(None, "info", {"event": "x", "model": "m" * 100_000, "url": "redis://:pw@h/0", "n": 3})
    assert len(event["model"]) < 5000 and event["url"] == "redis://***@h/0" and event["n"] == 3
    nested = cap_strings(None, "info", {"event": "x", "tools": ["t" * 100_000] * 1000})
    assert len(json.dumps(nested["tools"])) < 32768
    error = cap_strings(None, "error", {"event": "x", "exc_info": KeyError("k" * 100_000), "path": ROOT})
    assert len(error["exc_info"]) < 5000 and error["path"] == ROOT  # short objects are left to the renderer


@pytest.mark.parametrize("given", ["x" * 500, "two words", "<script>", "a/b", ""])
def test_an_unsafe_request_id_is_replaced(upstream, store_path, default_suite, given):
    with gate(upstream, store_path, default_suite) as proxy:
        with structlog.testing.capture_logs(processors=[merge_context]) as logs:
            answer = httpx.post(
                proxy.url + "/v1/chat/completions",
                json={"model": "m", "messages": HI},
                headers={"x-request-id": given},
                timeout=30,
            )
        line = wait_until(lambda: next((e for e in logs if e["event"] == "request"), None), "the log line")
    replaced = answer.headers["x-request-id"]
    assert replaced != given and re.fullmatch(r"[0-9a-f]{32}", replaced)
    assert line["request_id"] == replaced


def test_a_safe_request_id_is_kept(upstream, store_path, default_suite):
    with gate(upstream, store_path, default_suite) as proxy:
        answer = httpx.post(
            proxy.url + "/v1/chat/completions",
            json={"model": "m", "messages": HI},
            headers={"x-request-id": "req-42_a:b.c"},
            timeout=30,
        )
    assert answer.headers["x-request-id"] == "req-42_a:b.c"


def test_clip_bounds_and_escapes_client_text():
    assert clip("abc") == "abc"
    assert clip("a\nb\x1b[31m") == "a\\u000ab\\u001b[31m"
    clipped = clip("z" * 10_000, 100)
    assert clipped.startswith("z" * 100) and "9900 more characters" in clipped and len(clipped) < 150


def test_a_long_unknown_path_is_named_capped(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        answer = httpx.get(proxy.url + "/v1/" + "p" * 12_000, timeout=30)
    assert answer.status_code == 404 and "more characters" in answer.json()["error"]["message"]
    assert len(answer.content) < 4096


def test_a_forged_forwarded_header_buys_a_guesser_nothing(upstream, tmp_path):
    """`gatekeeper serve`: without `trusted_proxy_header` the address is the socket peer's, so
    a new X-Forwarded-For per attempt (uvicorn believes 127.0.0.1's by default) changes nothing."""
    config = f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "{tmp_path / "models_profile.json"}"
admin_key: k3y
"""
    with served(config, tmp_path) as proxy:
        statuses = [
            httpx.get(
                proxy.url + "/admin/profiles",
                headers={"authorization": f"Bearer guess-{i}", "x-forwarded-for": f"198.51.100.{i}"},
                timeout=30,
            ).status_code
            for i in range(30)
        ]
    assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}


def test_replicas_on_one_redis_count_wrong_keys_together(upstream, tmp_path):
    """Round-robin over two replicas must not give a guesser twice the rate."""
    require_server()
    with RedisServer(tmp_path) as redis_server:
        settings = settings_for(upstream.base_url, redis_server.url, admin_key="k3y")
        with running_proxy(settings) as a, running_proxy(settings) as b:
            with from_address(a.url, "127.0.0.2") as on_a, from_address(b.url, "127.0.0.2") as on_b:
                wrong = {"authorization": "Bearer guess"}
                statuses = [
                    (on_a if i % 2 else on_b).get("/admin/profiles", headers=wrong).status_code for i in range(14)
                ]
                assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}
                assert on_b.get("/admin/profiles", headers={"authorization": "Bearer k3y"}).status_code == 200
            with from_address(b.url, "127.0.0.3") as admin:
                assert admin.get("/admin/profiles", headers={"authorization": "Bearer k3y"}).status_code == 200
