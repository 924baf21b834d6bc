"""Server-sent events, read and written as the specification says
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).

Upstream framing is not trusted: lines end in CRLF, LF or a lone CR; `event:`, `id:`, `retry:`
and comment lines may come anywhere in an event; one event's data may span several `data:`
lines; a chunk may end at any byte (inside a line, between CR and LF, inside a UTF-8 sequence).
Every event is parsed here and re-written canonically (`data: ...\\n\\n`, LF only), so what a
client reads is exactly what the enforcer read, whatever its own parser does with odd framing.
"""

from __future__ import annotations

import re

from gatekeeper.errors import AnswerInvalid
from gatekeeper.protocols.base import Event

_BOM = b"\xef\xbb\xbf"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class SSEParser:
    """Incremental parser: `feed(bytes)` returns the events completed by that chunk."""

    __slots__ = ("_buf", "_data", "_event", "_id", "_retry", "_skip_lf", "_started", "comments")

    def __init__(self) -> None:
        self._buf: list[bytes] = []
        self._data: list[bytes] = []
        self._event: bytes | None = None
        self._id: bytes | None = None
        self._retry: int | None = None
        self._skip_lf = False  # the last chunk ended in CR: a leading LF is that CR's pair
        self._started = False
        self.comments = 0  # comment lines seen (keep-alives); the relay may answer with its own

    def feed(self, chunk: bytes) -> list[Event]:
        if not chunk:
            return []
        if not self._started:
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\n" not in chunk and b"\r" not in chunk:
            self._buf.append(chunk)  # no line ends here: kept without rescanning (a long line in
            return []  # tiny chunks stays linear)
        buf = b"".join((*self._buf, chunk)) if self._buf else chunk
        if b"\r" in buf:
            # Normalise to LF. The retained tail never holds a CR, so this is idempotent.
            self._skip_lf = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        tail = lines.pop()  # the unterminated rest (b"" when the chunk ended a line)
        self._buf = [tail] if tail else []
        events: list[Event] = []
        data = self._data
        for line in lines:
            if line.startswith(b"data:"):  # the common line, handled inline: this is the hot path
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line:
                self._field(line)
            elif data:
                self._dispatch(events)
                data = self._data
            else:
                self._event, self._id, self._retry = None, None, None  # a blank line: nothing to dispatch
        return events

    def finish(self) -> list[Event]:
        """End of stream: a complete event missing only its closing blank line is dispatched
        (servers that close right after `data: [DONE]\\n` exist); an unterminated line is not."""
        self._buf = []
        events: list[Event] = []
        self._dispatch(events)
        return events

    def _field(self, line: bytes) -> None:
        """Any line but `data:` and the blank one."""
        if line[0] == 0x3A:  # ":" a comment
            self.comments += 1
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id" and b"\x00" not in value:
            self._id = value
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)
        # any other field name is ignored, as the specification says

    def _dispatch(self, events: list[Event]) -> None:
        data, event, id_, retry = self._data, self._event, self._id, self._retry
        self._data = []
        if not data:
            self._event, self._id, self._retry = None, None, None
            return  # no data line: nothing is dispatched (comments, lone event/id lines)
        try:
            text = (data[0] if len(data) == 1 else b"\n".join(data)).decode("utf-8")
            if event is None and id_ is None and retry is None:
                events.append(Event(text))
                return
            self._event, self._id, self._retry = None, None, None
            name = event.decode("utf-8") if event is not None else None
            ident = id_.decode("utf-8") if id_ is not None else None
        except UnicodeDecodeError as exc:
            raise AnswerInvalid(f"upstream stream event is not valid UTF-8: {exc}") from None
        events.append(Event(text, name or None, ident, retry))


def encode(event: Event) -> bytes:
    """One event, framed canonically: optional event/id/retry lines, data lines, a blank line."""
    data = event.data
    if event.event is None and event.id is None and event.retry is None and "\n" not in data and "\r" not in data:
        return b"data: " + data.encode() + b"\n\n"
    parts: list[str] = []
    if event.event is not None:
        parts.append(f"event: {_one_line(event.event)}\n")
    if event.id is not None:
        parts.append(f"id: {_one_line(event.id)}\n")
    if event.retry is not None:
        parts.append(f"retry: {int(event.retry)}\n")
    parts.extend(f"data: {line}\n" for line in _LINE_BREAK.split(data))
    parts.append("\n")
    return "".join(parts).encode()


def _one_line(value: str) -> str:
    return _LINE_BREAK.sub("", value).replace("\x00", "")


KEEPALIVE = b":\n\n"  # a comment: keeps idle connections open, dispatches nothing
