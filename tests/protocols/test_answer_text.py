"""The assistant text of an answer, per protocol (what drift reads for a call written as text)."""

from __future__ import annotations

import json

from gatekeeper.protocols.answer_text import MAX_CHARS, TextCollector, plain_texts
from gatekeeper.protocols.base import Event


def raw(doc: dict) -> bytes:
    return json.dumps(doc).encode()


def test_plain_text_of_each_protocol() -> None:
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]}
    responses = {
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
        ]
    }
    messages = {"content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "hi"}]}
    assert plain_texts("chat", raw(chat)) == ["hi"]
    assert plain_texts("chat", raw(parts)) == ["ab"]
    assert plain_texts("responses", raw(responses)) == ["hi"]
    assert plain_texts("messages", raw(messages)) == ["hi"]


def test_unreadable_answers_have_no_text() -> None:
    assert plain_texts("chat", b"not json") == []
    assert plain_texts("chat", b"[1]") == []
    assert plain_texts("chat", raw({"choices": "x"})) == []
    assert plain_texts("toy", raw({"content": "hi"})) == []


def events(protocol: str, *docs: dict) -> list[str]:
    collector = TextCollector(protocol)
    for doc in docs:
        collector.feed(Event(json.dumps(doc)))
    collector.feed(Event("[DONE]"))
    return collector.texts()


def test_streamed_text_of_each_protocol_is_joined_from_its_deltas() -> None:
    chunk = lambda text: {"choices": [{"index": 0, "delta": {"content": text}}]}  # noqa: E731
    assert events("chat", chunk("<tool"), chunk("_call>"), {"choices": [{"index": 0, "delta": {}}]}) == ["<tool_call>"]
    delta = lambda text: {"type": "response.output_text.delta", "output_index": 1, "delta": text}  # noqa: E731
    assert events("responses", {"type": "response.created"}, delta("a"), delta("b")) == ["ab"]
    block = lambda text: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}  # noqa: E731
    thinking = {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "no"}}
    assert events("messages", block("a"), thinking, block("b")) == ["ab"]


def test_a_stream_past_the_cap_has_no_text() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "x" * (MAX_CHARS + 1)}}]}
    assert events("chat", chunk) == []
