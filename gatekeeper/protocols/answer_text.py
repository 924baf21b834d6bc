"""The assistant text of an answer, as the client reads it, in each of the three protocols.

What drift reads for a tool call written as text (gatekeeper/drift/text_call.py): the pipeline
asks for it only when tools were offered and the answer made no call. Plain answers are read
from the bytes the client gets; streams from the events the client gets, delta by delta. Text
past `MAX_CHARS` is not collected (no call is that long), so a stream's memory stays bounded.
Never raises: text it cannot read is no text.
"""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.protocols.base import Event

# No call written as text is longer (drift/text_call.py's MAX_CHARS, which drift, a higher
# layer, checks again): longer text is not collected.
MAX_CHARS = 64 * 1024


def plain_texts(protocol: str, raw: bytes) -> list[str]:
    """The text of each message of a plain answer in `protocol` (chat: one per choice)."""
    if len(raw) > 4 * MAX_CHARS:
        return []
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return doc_texts(protocol, doc)


def doc_texts(protocol: str, doc: Any) -> list[str]:
    """The text of each message of a plain answer in `protocol`, already parsed."""
    if not isinstance(doc, dict):
        return []
    if protocol == "chat":
        choices = doc.get("choices")
        messages = [_get(c, "message") for c in choices] if isinstance(choices, list) else []
        return [t for m in messages if (t := _content_text(_get(m, "content")))]
    if protocol == "responses":
        output = doc.get("output")
        items = [i for i in output if _get(i, "type") == "message"] if isinstance(output, list) else []
        return [t for i in items if (t := _content_text(_get(i, "content"), "output_text"))]
    if protocol == "messages":
        text = _content_text(doc.get("content"))
        return [text] if text else []
    return []


class TextCollector:
    """A stream's assistant text, gathered from the events the client gets (chat: per choice)."""

    __slots__ = ("_parts", "_size", "protocol")

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self._parts: dict[int, list[str]] = {}
        self._size = 0

    def feed(self, event: Event) -> None:
        marker = _DELTA_MARKERS.get(self.protocol)
        if self._size > MAX_CHARS or marker is None or marker not in event.data:
            return  # most events carry no text: not parsed
        try:
            doc = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(doc, dict):
            return
        for index, delta in self._deltas(doc):
            self._parts.setdefault(index, []).append(delta)
            self._size += len(delta)

    def texts(self) -> list[str]:
        if self._size > MAX_CHARS:
            return []
        return ["".join(parts) for parts in self._parts.values()]

    def _deltas(self, doc: dict[str, Any]) -> list[tuple[int, str]]:
        kind = doc.get("type")
        if self.protocol == "chat":
            choices = doc.get("choices")
            found: list[tuple[int, str]] = []
            for choice in choices if isinstance(choices, list) else []:
                content = _get(_get(choice, "delta"), "content")
                index = _get(choice, "index")
                if isinstance(content, str) and content:
                    found.append((index if isinstance(index, int) else 0, content))
            return found
        if self.protocol == "responses" and kind == "response.output_text.delta":
            delta, index = doc.get("delta"), doc.get("output_index")
            return [(index if isinstance(index, int) else 0, delta)] if isinstance(delta, str) else []
        if self.protocol == "messages" and kind == "content_block_delta":
            delta = doc.get("delta")
            text = _get(delta, "text") if _get(delta, "type") == "text_delta" else None
            return [(0, text)] if isinstance(text, str) else []  # one message: its text blocks joined
        return []


# What an event carrying text always spells, checked before it is parsed (a marker written with
# escapes is missed: a call not counted, never one counted wrongly).
_DELTA_MARKERS = {"chat": '"content"', "responses": '"response.output_text.delta"', "messages": '"text_delta"'}


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _content_text(content: Any, part_type: str = "text") -> str:
    """A content field's text: a string, or the text parts of a list of parts, joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(t for p in content if _get(p, "type") == part_type and isinstance(t := _get(p, "text"), str))
