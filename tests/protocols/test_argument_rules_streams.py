"""The stream filters under argument rules, event by event (no server): a call whose tier depends
on its arguments is held until they are whole, judged on exactly what the client will read, and
nothing of it may follow its release."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gatekeeper.errors import AnswerInvalid
from gatekeeper.protocols.base import Allowed, Event, Offered
from gatekeeper.protocols.chat.answer import ChatStreamFilter
from gatekeeper.protocols.messages.answer import MessagesStreamFilter
from gatekeeper.protocols.responses.answer import ResponsesStreamFilter
from gatekeeper.rules.arguments import ArgumentRule
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

POLICY = ToolPolicy(
    {"execute_command": Tier.LARGE},
    arguments={"execute_command": [ArgumentRule.model_validate({"match": {"command": "ls *"}, "tier": "small"})]},
)
ALLOW = Allowed(Offered([(ToolId.function("execute_command"), None)]), Tier.SMALL, POLICY)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> Event:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return Event(
        json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]})
    )


def call_delta(arguments: str, first: bool = False) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if first:
        function["name"] = "execute_command"
    call: dict[str, Any] = {"index": 0, "function": function}
    if first:
        call |= {"id": "call_1", "type": "function"}
    return {"tool_calls": [call]}


def run(stream: Any, events: list[Event]) -> list[dict[str, Any]]:
    out = [e for event in events for e in stream.feed(event)]
    out += stream.finish()
    return [json.loads(e.data) for e in out if e.data != "[DONE]"]


def chat_calls(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for d in docs for ch in d.get("choices", []) for c in (ch.get("delta") or {}).get("tool_calls", [])]


@pytest.mark.parametrize(
    ("parts", "kept"),
    [
        (['{"comm', 'and": "ls', ' -la"}'], True),
        (['{"command": "ls', " -la", '; rm -rf /"}'], False),  # a benign start, a hostile tail
        (['{"command": "ls", ', '"command": "rm -rf /"}'], False),  # duplicate keys across chunks
    ],
)
def test_chat_holds_a_call_until_its_choice_finishes(parts, kept):
    events = [chunk(call_delta(parts[0], first=True)), *(chunk(call_delta(p)) for p in parts[1:])]
    stream = ChatStreamFilter(ALLOW)
    assert [e for event in events for e in stream.feed(event)] == []  # nothing of the call before its end
    docs = run(stream, [chunk(finish="tool_calls"), Event("[DONE]")])
    calls = chat_calls(docs)
    if kept:
        assert calls == [
            {
                "id": "call_1",
                "type": "function",
                "index": 0,
                "function": {"name": "execute_command", "arguments": "".join(parts)},
            }
        ]
        assert docs[-1]["choices"][0]["finish_reason"] == "tool_calls"
    else:
        assert calls == [] and docs[-1]["choices"][0]["finish_reason"] == "stop"
        assert stream.result.removed == ["execute_command"]


def test_chat_releases_a_held_call_at_done_when_no_finish_reason_came():
    docs = run(ChatStreamFilter(ALLOW), [chunk(call_delta('{"command": "ls /"}', first=True)), Event("[DONE]")])
    assert [c["function"]["arguments"] for c in chat_calls(docs)] == ['{"command": "ls /"}']


def test_chat_refuses_a_call_continued_after_its_release():
    stream = ChatStreamFilter(ALLOW)
    stream.feed(chunk(call_delta('{"command": "ls /"}', first=True)))
    stream.feed(chunk(finish="tool_calls"))
    with pytest.raises(AnswerInvalid):
        stream.feed(chunk(call_delta("; rm -rf /")))


def responses_events(arguments: list[str], done_arguments: str) -> list[Event]:
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "execute_command",
        "status": "in_progress",
    }
    docs: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": 0, "item": item | {"arguments": ""}},
        *(
            {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": a}
            for a in arguments
        ),
        {
            "type": "response.function_call_arguments.done",
            "output_index": 0,
            "item_id": "fc_1",
            "arguments": done_arguments,
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": item | {"arguments": done_arguments, "status": "completed"},
        },
    ]
    return [Event(json.dumps(d | {"sequence_number": i}), d["type"]) for i, d in enumerate(docs)]


def test_responses_holds_a_call_until_its_item_is_done():
    stream = ResponsesStreamFilter(ALLOW)
    events = responses_events(['{"command": ', '"ls -la"}'], '{"command": "ls -la"}')
    out = [e for event in events[:-1] for e in stream.feed(event)]
    assert out == []
    released = [json.loads(e.data)["type"] for e in stream.feed(events[-1])]
    assert released == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]


def test_responses_removes_a_call_whose_whole_arguments_are_not_admitted():
    stream = ResponsesStreamFilter(ALLOW)
    out = [
        e
        for event in responses_events(['{"command": "ls | sh"}'], '{"command": "ls | sh"}')
        for e in stream.feed(event)
    ]
    assert out == [] and stream.result.removed == ["execute_command"]


def test_responses_refuses_deltas_that_spell_other_arguments_than_the_item():
    stream = ResponsesStreamFilter(ALLOW)
    events = responses_events(['{"command": "rm -rf /"}'], '{"command": "ls -la"}')
    with pytest.raises(AnswerInvalid, match="differ"):
        for event in events:
            stream.feed(event)


def messages_events(parts: list[str]) -> list[Event]:
    block = {"type": "tool_use", "id": "toolu_1", "name": "execute_command", "input": {}}
    docs: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": 0, "content_block": block},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": p}}
            for p in parts
        ),
        {"type": "content_block_stop", "index": 0},
    ]
    return [Event(json.dumps(d), d["type"]) for d in docs]


@pytest.mark.parametrize(
    ("parts", "kept"),
    [
        (['{"command"', ': "ls -la"}'], True),
        (['{"command": "ls"', ', "command": "rm -rf /"}'], False),  # duplicate keys: the SDK takes the last
        (['{"command": "ls $(', 'rm -rf /)"}'], False),
    ],
)
def test_messages_holds_a_block_until_it_stops(parts, kept):
    stream = MessagesStreamFilter(ALLOW)
    events = messages_events(parts)
    assert [e for event in events[:-1] for e in stream.feed(event)] == []
    out = [json.loads(e.data) for e in stream.feed(events[-1])]
    if kept:
        assert [d["type"] for d in out] == [
            "content_block_start",
            *["content_block_delta"] * len(parts),
            "content_block_stop",
        ]
        assert "".join(d["delta"]["partial_json"] for d in out if d["type"] == "content_block_delta") == "".join(parts)
    else:
        assert out == [] and stream.result.removed == ["execute_command"]
