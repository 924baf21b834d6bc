"""Translation of Responses and Messages requests/answers to and from Chat Completions (pure)."""

from __future__ import annotations

import json

import pytest

from gatekeeper.errors import AnswerInvalid, RequestInvalid
from gatekeeper.protocols.base import Event
from gatekeeper.protocols.messages.codec import MessagesCodec
from gatekeeper.protocols.messages.translate import MessagesTranslator
from gatekeeper.protocols.responses.codec import ResponsesCodec
from gatekeeper.protocols.responses.translate import ResponsesTranslator

RT, MT = ResponsesTranslator(), MessagesTranslator()


def fn(name: str) -> dict:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


FN = {
    "type": "function",
    "name": "read_file",
    "description": "read",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def chat_answer(content: str | None, calls: list[tuple[str, str]] = (), finish: str = "stop") -> dict:
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }


def chat_stream(content: str, calls: list[tuple[str, str]]) -> list[Event]:
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{"choices": [{"index": 0, "delta": {"content": content[i : i + 3]}}]} for i in range(0, len(content), 3)]
    for i, (name, arguments) in enumerate(calls):
        chunks.append(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": f"call_{i}",
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ]
                        },
                    }
                ]
            }
        )
        chunks.append(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": arguments}}]}}]}
        )
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    return [Event(data=json.dumps(c)) for c in chunks] + [Event(data="[DONE]")]


def test_responses_request_to_chat():
    body = {
        "model": "m",
        "instructions": "be brief",
        "reasoning": {"effort": "low"},
        "max_output_tokens": 50,
        "tools": [FN],
        "tool_choice": {"type": "function", "name": "read_file"},
        "stream": True,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "data"},
        ],
    }
    chat = RT.to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "data"},
    ]
    assert chat["tools"][0]["function"]["name"] == "read_file"
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    assert chat["reasoning_effort"] == "low" and chat["max_tokens"] == 50
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"tools": [{"type": "custom", "name": "apply_patch"}]}, "tools"),
        ({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice 'required'"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input"),
    ],
)
def test_responses_untranslatable_request_is_refused(body, field):
    with pytest.raises(RequestInvalid, match=field):
        RT.to_chat({"model": "m", "input": "hi"} | body)


def test_responses_builtin_tools_are_left_out_of_the_chat_request_and_named():
    """A chat model cannot call a built-in (what the upstream itself would run): left out, named by
    `untranslated` for the pipeline's log; with nothing else left, no tool field is sent at all."""
    body = {"model": "m", "input": "hi", "tools": [{"type": "web_search"}, fn("read_file")], "tool_choice": "auto"}
    chat = RT.to_chat(body)
    assert [t["function"]["name"] for t in chat["tools"]] == ["read_file"] and chat["tool_choice"] == "auto"
    assert RT.untranslated(body) == ["web_search"]
    alone = RT.to_chat(body | {"tools": [{"type": "web_search_2025_08_26"}], "parallel_tool_calls": True})
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & alone.keys()
    assert RT.untranslated({"model": "m", "input": "hi", "tools": [fn("read_file")]}) == []


def test_responses_answer_from_chat():
    doc = RT.from_chat(chat_answer("hello", [("read_file", '{"path": "a"}')], "tool_calls"), {"model": "m"})
    assert [i["type"] for i in doc["output"]] == ["message", "function_call"]
    assert doc["output"][1]["arguments"] == '{"path": "a"}' and doc["output"][1]["call_id"] == "call_0"
    assert doc["usage"]["total_tokens"] == 7 and doc["status"] == "completed"


def test_responses_stream_from_chat_then_filtered():
    converter = RT.stream_from_chat({"model": "m"})
    flt = ResponsesCodec().stream_filter({"read_file": None})
    events = [
        e
        for chunk in chat_stream("hello", [("execute_command", "{}"), ("read_file", '{"p": 1}')])
        for e in converter.feed(chunk)
    ] + converter.finish()
    out = [json.loads(e.data) for event in events for e in flt.feed(event)]
    final = out[-1]
    assert final["type"] == "response.completed"
    assert [(i["type"], i.get("name")) for i in final["response"]["output"]] == [
        ("message", None),
        ("function_call", "read_file"),
    ]
    assert final["response"]["output"][1]["arguments"] == '{"p": 1}'
    assert {d["output_index"] for d in out if "output_index" in d} == {0, 1}
    assert flt.result.removed == ["execute_command"]
    assert [d["sequence_number"] for d in out] == list(range(len(out)))


def test_stream_without_finish_reason_is_invalid():
    converter = RT.stream_from_chat({"model": "m"})
    converter.feed(Event(data=json.dumps({"choices": [{"index": 0, "delta": {"content": "hi"}}]})))
    with pytest.raises(AnswerInvalid):
        converter.finish()


def test_messages_request_to_chat():
    body = {
        "model": "m",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "sys"}],
        "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "data"},
                    {"type": "text", "text": "go on"},
                ],
            },
        ],
    }
    chat = MT.to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "data"},
        {"role": "user", "content": "go on"},
    ]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["reasoning_effort"] == "low" and chat["max_tokens"] == 100


def test_messages_typed_tool_cannot_be_translated():
    with pytest.raises(RequestInvalid, match="bash_20250124"):
        MT.to_chat({"model": "m", "messages": [], "tools": [{"type": "bash_20250124", "name": "bash"}]})


@pytest.mark.parametrize("thread", [{"type": "create"}, {"type": "continue", "previous_message_id": "msg_1"}])
def test_messages_thread_cannot_be_translated(thread):
    """A continued thread carries only its new turn: chat would get a conversation without its start."""
    with pytest.raises(RequestInvalid, match="'thread' needs server-side state"):
        MT.to_chat({"model": "m", "messages": [], "thread": thread})


def test_messages_answer_from_chat():
    doc = MT.from_chat(chat_answer("hi", [("read_file", '{"path": "a"}')], "tool_calls"), {"model": "m"})
    assert doc["content"] == [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "call_0", "name": "read_file", "input": {"path": "a"}},
    ]
    assert doc["stop_reason"] == "tool_use" and doc["usage"] == {"input_tokens": 3, "output_tokens": 4}


def test_messages_answer_with_non_object_arguments_is_invalid():
    with pytest.raises(AnswerInvalid):
        MT.from_chat(chat_answer(None, [("read_file", "[1, 2]")], "tool_calls"), {"model": "m"})


def test_messages_stream_from_chat_then_filtered():
    converter = MT.stream_from_chat({"model": "m"})
    flt = MessagesCodec().stream_filter({"read_file": None})
    events = [e for chunk in chat_stream("hello", [("execute_command", "{}")]) for e in converter.feed(chunk)]
    events += converter.finish()
    out = [json.loads(e.data) for event in events for e in flt.feed(event)]
    assert [d["type"] for d in out] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert out[-2]["delta"]["stop_reason"] == "end_turn"


def test_count_tokens_estimate_counts_gated_tools():
    small = MT.count_tokens({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    large = MT.count_tokens(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
        }
    )
    assert large["input_tokens"] > small["input_tokens"] >= 1


def test_legacy_function_call_next_to_tool_calls_is_ignored():
    """llama.cpp sends a stale legacy `function_call` next to the real `tool_calls`."""
    doc = chat_answer(None, [("read_file", "{}")], "tool_calls")
    doc["choices"][0]["message"]["function_call"] = {"name": "get_time:", "arguments": "{}"}
    assert [i["name"] for i in RT.from_chat(doc)["output"]] == ["read_file"]
    assert [b["name"] for b in MT.from_chat(doc)["content"]] == ["read_file"]


def test_legacy_only_function_call_is_translated_and_then_gated():
    doc = chat_answer(None, [], "function_call")
    doc["choices"][0]["message"]["function_call"] = {"name": "execute_command", "arguments": "{}"}
    answer = RT.from_chat(doc)
    assert ResponsesCodec().enforce(answer, {"read_file": None}).removed == ["execute_command"]
    assert answer["output"] == []


NS = {"type": "namespace", "name": "crm", "description": "customers", "tools": [FN | {"name": "read"}]}


def test_namespaced_functions_translate_to_chat_and_back():
    body = {
        "model": "m",
        "input": [
            {"type": "function_call", "call_id": "c0", "name": "read", "namespace": "crm", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c0", "output": "ok"},
        ],
        "tools": [FN, NS],
        "tool_choice": {"type": "function", "name": "read", "namespace": "crm"},
    }
    chat = RT.to_chat(body)
    assert [t["function"]["name"] for t in chat["tools"]] == ["read_file", "crm__read"]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "crm__read"}}
    assert chat["messages"][0]["tool_calls"][0]["function"]["name"] == "crm__read"
    doc = RT.from_chat(chat_answer(None, [("crm__read", "{}"), ("read", "{}")], "tool_calls"), body)
    calls = [(i.get("namespace"), i["name"]) for i in doc["output"]]
    assert calls == [("crm", "read"), (None, "read")]  # a bare `read` is not the namespaced one
    enforced = ResponsesCodec().enforce(doc, ResponsesCodec().offered(body))
    assert enforced.removed == ["read"] and [i["name"] for i in doc["output"]] == ["read"]


def test_namespaced_stream_maps_calls_back():
    body = {"model": "m", "tools": [NS]}
    converter = RT.stream_from_chat(body)
    events = [e for chunk in chat_stream("", [("crm__read", "{}")]) for e in converter.feed(chunk)]
    added = [json.loads(e.data) for e in events if e.event == "response.output_item.added"]
    assert added[0]["item"]["namespace"] == "crm" and added[0]["item"]["name"] == "read"


def test_a_chat_name_two_tools_would_share_is_refused():
    body = {"model": "m", "tools": [FN | {"name": "crm__read"}, NS]}
    with pytest.raises(RequestInvalid, match="crm__read"):
        RT.to_chat(body)
