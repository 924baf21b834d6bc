"""The SSE parser and the chat stream filter, event by event (the proxy tests cover them end to end)."""

from __future__ import annotations

import json

import pytest

from gatekeeper.errors import AnswerInvalid
from gatekeeper.protocols.base import Event
from gatekeeper.protocols.chat.answer import ChatStreamFilter
from gatekeeper.protocols.chat.codec import ChatCodec
from gatekeeper.protocols.sse import SSEParser, encode


def parse_all(raw: bytes, step: int | None = None) -> list[Event]:
    parser = SSEParser()
    events: list[Event] = []
    if step is None:
        events += parser.feed(raw)
    else:
        for i in range(0, len(raw), step):
            events += parser.feed(raw[i : i + step])
    return events + parser.finish()


# -- the parser ------------------------------------------------------------------------------------


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("step", [None, 1, 2, 3, 7])
def test_every_line_ending_and_every_split_give_the_same_events(newline, step):
    raw = newline.join(
        [b": comment", b"event: delta", b"id: 7", b"retry: 10", b'data: {"a":', b"data: 1}", b"", b"data:x", b"", b""]
    )
    events = parse_all(raw, step)
    assert events == [Event('{"a":\n1}', "delta", "7", 10), Event("x")]


def test_a_field_without_space_and_one_without_colon():
    assert parse_all(b"data\n\ndata:  two spaces\n\n") == [Event(""), Event(" two spaces")]


def test_a_utf8_sequence_split_across_chunks_is_one_character():
    raw = "data: caffè\n\n".encode()
    assert parse_all(raw, 1) == [Event("caffè")]


def test_invalid_utf8_is_unreadable():
    with pytest.raises(AnswerInvalid):
        parse_all(b"data: \xff\n\n")


def test_a_byte_order_mark_is_skipped_once():
    assert parse_all(b"\xef\xbb\xbfdata: a\n\n") == [Event("a")]


def test_an_unterminated_last_line_is_discarded_but_a_complete_event_is_kept():
    assert parse_all(b"data: [DONE]\n") == [Event("[DONE]")]
    assert parse_all(b"data: a\n\ndata: cut") == [Event("a")]


def test_encode_frames_multiline_data_and_fields():
    assert encode(Event("a\nb", "e", "1", 5)) == b"event: e\nid: 1\nretry: 5\ndata: a\ndata: b\n\n"
    assert parse_all(encode(Event("x\r\ny", "e\nvil"))) == [Event("x\ny", "evil")]


# -- the chat stream filter ------------------------------------------------------------------------


def chunk(delta: dict, finish: str | None = None, index: int = 0) -> Event:
    return Event(json.dumps({"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}))


def calls(out: list[Event]) -> list[dict]:
    return [c for e in out for c in json.loads(e.data)["choices"][0]["delta"].get("tool_calls", [])]


def call(index: int | None, name: str | None = None, arguments: str = "") -> dict:
    function = {"arguments": arguments} | ({"name": name} if name is not None else {})
    return ({"index": index} if index is not None else {}) | {"function": function}


def test_events_without_tool_calls_pass_as_the_same_event():
    event = chunk({"content": "hello"})
    assert ChatStreamFilter({}).feed(event) == [event]


def test_allowed_calls_are_renumbered_after_a_blocked_one():
    f = ChatStreamFilter({"read": None})
    assert f.feed(chunk({"tool_calls": [call(0, "rm")]})) == []
    assert calls(f.feed(chunk({"tool_calls": [call(1, "read")]})))[0]["index"] == 0
    assert f.feed(chunk({"tool_calls": [call(0, arguments="{}")]})) == []
    assert f.result.removed == ["rm"]


def test_a_later_delta_never_carries_a_name_to_the_client():
    f = ChatStreamFilter({"read": None})
    f.feed(chunk({"tool_calls": [call(0, "read")]}))
    later = calls(f.feed(chunk({"tool_calls": [call(0, "read", "{}")]})))
    assert later == [{"index": 0, "function": {"arguments": "{}"}}]


def test_a_kept_call_renamed_later_makes_the_stream_unreadable():
    f = ChatStreamFilter({"read": None})
    f.feed(chunk({"tool_calls": [call(0, "read")]}))
    with pytest.raises(AnswerInvalid, match="renames"):
        f.feed(chunk({"tool_calls": [call(0, "execute_command")]}))


def test_a_blocked_call_renamed_to_an_allowed_name_stays_blocked():
    f = ChatStreamFilter({"read": None})
    assert f.feed(chunk({"tool_calls": [call(0, "rm")]})) == []
    assert f.feed(chunk({"tool_calls": [call(0, "read")]})) == []


def test_a_delta_without_index_is_a_call_of_its_own():
    f = ChatStreamFilter({"read": None})
    assert calls(f.feed(chunk({"tool_calls": [call(None, "read", "{}")]}))) == [
        {"index": 0, "function": {"arguments": "{}", "name": "read"}}
    ]
    assert f.feed(chunk({"tool_calls": [call(None, None, "more")]})) == []
    assert f.feed(chunk({"tool_calls": [call(None, "rm")]})) == []


def test_an_escaped_key_is_enforced_and_sent_plainly():
    f = ChatStreamFilter({"read": None})
    event = Event('{"choices":[{"index":0,"delta":{"tool\\u005fcalls":[{"index":0,"function":{"name":"rm"}}]}}]}')
    assert f.feed(event) == []


@pytest.mark.parametrize(
    "data",
    [
        '{"choices":[{"index":0,"delta":{"tool_calls":{"index":0}}}]}',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":1}}]}}]}',
        '{"choices":{"delta":{"tool_calls":[]}}}',
        '[{"tool_calls": []}]',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":NaN}]}}]}',
        '{"choices":[{"index":true,"delta":{"tool_calls":[]}}]}',
    ],
)
def test_wrong_types_where_a_call_could_be_are_unreadable(data):
    with pytest.raises(AnswerInvalid):
        ChatStreamFilter({"read": None}).feed(Event(data))


def test_legacy_function_call_deltas_follow_the_first_decision():
    f = ChatStreamFilter({"read": None})
    assert f.feed(chunk({"function_call": {"name": "rm", "arguments": ""}})) == []
    assert f.feed(chunk({"function_call": {"arguments": '{"path": "/"}'}})) == []
    out = f.feed(chunk({}, "function_call"))
    assert json.loads(out[0].data)["choices"][0]["finish_reason"] == "stop"


def test_a_stream_without_done_is_unreadable_and_events_after_done_are_dropped():
    f = ChatStreamFilter({})
    with pytest.raises(AnswerInvalid, match=r"\[DONE\]"):
        f.finish()
    f = ChatStreamFilter({})
    assert f.feed(Event("[DONE]")) == [Event("[DONE]")]
    assert f.feed(chunk({"tool_calls": [call(0, "rm")]})) == []
    assert f.finish() == []


def test_kept_call_arguments_are_accumulated_for_the_record():
    f = ChatStreamFilter({"read": None})
    f.feed(chunk({"tool_calls": [call(0, "read", '{"a"')]}))
    f.feed(chunk({"tool_calls": [call(0, arguments=": 1}")]}))
    f.feed(Event("[DONE]"))
    f.finish()
    assert [(c.name, c.arguments, c.offered) for c in f.result.calls] == [("read", '{"a": 1}', True)]


def test_calls_in_the_other_shapes_field_are_refused_not_relayed():
    # A stream chunk with a whole `message`, or a plain answer with a `delta`, carrying a call:
    # no client accumulates those fields, but one reading raw JSON would see the hidden name.
    call = {"tool_calls": [{"index": 0, "function": {"name": "execute_command", "arguments": "{}"}}]}
    chunk = json.dumps({"choices": [{"index": 0, "message": call}]})
    with pytest.raises(AnswerInvalid, match="message"):
        ChatCodec().stream_filter({"read_file": None}).feed(Event(data=chunk))
    with pytest.raises(AnswerInvalid, match="delta"):
        ChatCodec().enforce({"choices": [{"index": 0, "delta": call}]}, {"read_file": None})
