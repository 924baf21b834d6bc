"""The Anthropic Messages answer side: which content blocks call which tool, plain answers and streams."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid
from gatekeeper.protocols.base import Allowed, Call, Enforced, Event, Offered
from gatekeeper.protocols.enforce import (
    ItemJudge,
    Positions,
    as_allowed,
    enforce_items,
    settle,
)
from gatekeeper.protocols.messages.fields import MESSAGES_BUILTIN_NAMES
from gatekeeper.protocols.strict_json import read_object
from gatekeeper.rules.tools import BUILTIN_FAMILIES, ToolId

NOT_CALLS = frozenset({"text", "thinking", "redacted_thinking", "container_upload", "compaction", "fallback"})
CITATIONS = frozenset(
    {"char_location", "page_location", "content_block_location", "web_search_result_location", "search_result_location"}
)
# The results of server-run calls, each naming its call in `tool_use_id`: removed with that call.
_RESULTS = frozenset(
    {
        "web_search_tool_result",
        "web_fetch_tool_result",
        "advisor_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_result",
    }
)
# A `tool_use` block calls a client tool by name: a custom tool's own name, or the fixed name a
# client-run built-in type is called by (anthropic/types/tool_bash_20250124_param.py: `name:
# Literal["bash"]`, ...). Exact types: a custom tool named `bash` is a function, not this.
_CLIENT_FAMILIES = ("bash", "computer", "memory", "text_editor")  # typed tools the client runs
_TOOL_USE_NAMES = {t: name for t, name in MESSAGES_BUILTIN_NAMES.items() if BUILTIN_FAMILIES[t] in _CLIENT_FAMILIES}


def _family_types(family: str) -> tuple[str, ...]:
    """The Messages API's types of one built-in family: the dated ones (`web_search_20250305`);
    the undated types of the family are OpenAI's."""
    return tuple(t for t, f in BUILTIN_FAMILIES.items() if f == family and t[-8:].isdigit())


# A `server_tool_use` block's name (anthropic/types/server_tool_use_block.py) -> the server tool
# types whose offer lets it through (the first stands for the family in an explanation).
_SERVER_CALLS: dict[str, tuple[str, ...]] = {
    "web_search": _family_types("web_search"),
    "web_fetch": _family_types("web_fetch"),
    "code_execution": _family_types("code_execution"),
    "bash_code_execution": _family_types("code_execution"),
    "text_editor_code_execution": _family_types("code_execution"),
    "tool_search_tool_regex": ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
    "tool_search_tool_bm25": ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
    "advisor": _family_types("advisor"),
}
_TERMINAL = frozenset({"message_stop", "error"})  # events that end a Messages stream
# Stream events and content block delta types the Messages API defines
# (anthropic/types/beta/beta_raw_message_stream_event.py, beta_raw_content_block_delta.py); any
# other event, or a delta of another type, is not one this codec knows: dropped.
_EVENTS = frozenset(
    {"message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta"}
    | {"content_block_stop", "ping", "error"}
)
_DELTAS = frozenset(
    {"text_delta", "input_json_delta", "citations_delta", "thinking_delta", "signature_delta", "compaction_delta"}
)
# What a message_delta / message_stop event may say (anthropic/types/beta/beta_raw_message_delta_event.py,
# beta_raw_message_stop_event.py): the content arrives in content_block events only, so anything
# else in these (a `content` list with a tool_use, a whole `message`) is removed, never relayed.
_MESSAGE_DELTA = frozenset({"type", "delta", "usage", "context_management"})
_DELTA_FIELDS = frozenset({"stop_reason", "stop_sequence", "stop_details", "container"})


# -- answer enforcement --------------------------------------------------------------------


class _Judge(ItemJudge):
    """What each content block of an answer calls (see enforce.ItemJudge)."""

    noun = "a content block"
    not_calls = NOT_CALLS
    answers = dict.fromkeys(_RESULTS, "tool_use_id")
    listing, listing_server = "mcp_tool_listing", "mcp_server_name"
    __slots__ = ("input_text",)

    def __init__(self, allow: Allowed) -> None:
        super().__init__(allow)
        # A streamed block's input as its `input_json_delta` parts spelled it (set by the stream
        # filter for the block it judges whole): what the client parses, judged as sent.
        self.input_text: str | None = None

    def _call(self, kind: str, block: dict[str, Any]) -> tuple[Call, ToolId | None]:
        # `input` arrives parsed; its JSON text is what the drift tracker validates.
        arguments = orjson.dumps(block["input"]).decode() if "input" in block else None
        raw = block.get("input")
        judged = self.input_text if self.input_text is not None else raw if isinstance(raw, dict) else None
        if self.input_text is not None:
            arguments = self.input_text
        if kind not in ("tool_use", "server_tool_use", "mcp_tool_use"):  # not a type this codec knows
            return Call(kind, arguments, False), None
        name = block.get("name")
        if not isinstance(name, str):
            raise AnswerInvalid(f"a {kind} block has no string 'name'")
        offered = self.allow.offered.tools
        if kind == "mcp_tool_use":
            server = block.get("server_name")
            if not isinstance(server, str):
                raise AnswerInvalid("an mcp_tool_use block has no string 'server_name'")
            tool = ToolId.mcp(server, name)
            return Call(str(tool), arguments, self.admits(tool, judged)), tool
        if kind == "tool_use":
            function = ToolId.function(name)
            if function in offered:
                return Call(name, arguments, self.admits(function, judged)), function
            typed = [t for t, called in _TOOL_USE_NAMES.items() if called == name]
            builtin = next((t for t in typed if ToolId.builtin(t) in offered), None)
            if builtin is not None:
                return Call(builtin, arguments, self.admits(ToolId.builtin(builtin), judged)), ToolId.builtin(builtin)
            return Call(name, arguments, False), ToolId.builtin(typed[0]) if typed else function
        types = _SERVER_CALLS.get(name, ())
        matched = next((t for t in types if ToolId.builtin(t) in offered), None)
        stands_for = ToolId.builtin(matched or types[0]) if types else None
        kept = matched is not None and self.admits(ToolId.builtin(matched), judged)
        return Call(matched or name, arguments, kept), stands_for


def answer_side(offered: Allowed | Offered) -> Allowed:
    """A structured answer (`output_config.format`) gets no explanation: every text block is what
    the SDK's `parse` validates as the format, and Messages has no other place for text."""
    allow = as_allowed(offered)
    return dataclasses.replace(allow, explain=False) if allow.structured and allow.explain else allow


def _stand_in(block: dict[str, Any], position: int, text: str) -> dict[str, Any]:
    """The text block that replaces a removed call under `blocked_calls: explain`."""
    return {"type": "text", "text": text}


def enforce_message(message: dict[str, Any], allow: Allowed, result: Enforced) -> None:
    content = message.get("content")
    if content is None:
        return
    kept = enforce_items(content, "content", _Judge(allow), result, _stand_in, allow)
    for block in content if kept is None and isinstance(content, list) else kept or ():
        _known_citations(block)
    if kept is None:
        return
    message["content"] = kept
    if message.get("stop_reason") == "tool_use" and not any(b.get("type") == "tool_use" for b in kept):
        message["stop_reason"] = "end_turn"


def _known_citations(block: Any) -> None:
    """Remove a text block's citations of types the API does not define (a client reads each by
    its type: a call-shaped object there is not one the codec judged)."""
    citations = block.get("citations") if isinstance(block, dict) else None
    if isinstance(citations, list):
        block["citations"] = [c for c in citations if isinstance(c, dict) and c.get("type") in CITATIONS]


class MessagesStreamFilter:
    """Drops the content_block_start/_delta/_stop events of a removed block (or, under `explain`,
    sends a whole stand-in text block in its place), renumbers later `index` values, and turns
    the final `stop_reason` `tool_use` into `end_turn` when no `tool_use` block reached the client.
    Events are re-serialised from what was parsed, with `event:` set to the data's own `type`. The
    stream ends at `message_stop` (or `error`); one that ends before is incomplete."""

    def __init__(self, offered: Allowed | Offered) -> None:
        self.allow = as_allowed(offered)
        self.result = Enforced()
        self._judge = _Judge(self.allow)
        self._positions = Positions()
        self._removed: set[int] = set()  # upstream indexes whose own events never reach the client
        self._open: set[int] = set()
        self._tool_uses_kept = 0
        self._arguments: dict[int, tuple[int, list[str]]] = {}  # index -> (position in calls, input parts)
        # Blocks whose tier depends on their input (`Allowed.holds`): index -> (the block, its
        # events so far, its input parts). None of their events is sent before the block stops
        # and is judged on its whole input.
        self._held: dict[int, tuple[dict[str, Any], list[dict[str, Any]], list[str]]] = {}
        self._ended = False

    def feed(self, event: Event) -> list[Event]:
        if self._ended or event.data.strip() == "[DONE]":
            return []  # [DONE] is not a Messages event: the stream ends at message_stop
        doc = read_object(event, "Messages")
        kind = doc["type"]
        if kind not in _EVENTS:
            if "index" in doc or "content_block" in doc:
                raise AnswerInvalid(f"an event of unknown type {kind!r} carries a content block")
            return []  # a type this codec does not know: it may carry a call, so it goes
        docs = [doc]
        if kind.startswith("content_block_"):
            docs = self._route(kind, doc)
        elif kind == "message_start":
            message = doc.get("message")
            if not isinstance(message, dict):
                raise AnswerInvalid("a message_start event has no 'message' object")
            scratch = Enforced()  # blocks arrive as content_block events; this only cleans the snapshot
            enforce_message(message, self.allow, scratch)
        elif kind == "message_delta":
            delta = doc.get("delta")
            if not isinstance(delta, dict):
                raise AnswerInvalid("a message_delta event has no 'delta' object")
            if delta.get("stop_reason") == "tool_use" and self.result.removed and not self._tool_uses_kept:
                delta["stop_reason"] = "end_turn"
            docs = [{k: v for k, v in doc.items() if k in _MESSAGE_DELTA}]
            docs[0]["delta"] = {k: v for k, v in delta.items() if k in _DELTA_FIELDS}
        elif kind == "message_stop":
            docs = [{"type": "message_stop"}]
        elif "index" in doc or "content_block" in doc:
            raise AnswerInvalid(f"a {kind!r} event carries a content block index it should not")
        self._ended = kind in _TERMINAL
        return [Event(data=orjson.dumps(d).decode(), event=d["type"], id=event.id, retry=event.retry) for d in docs]

    def _route(self, kind: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
        index = doc.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise AnswerInvalid(f"a {kind!r} event has an invalid index {index!r}")
        if kind == "content_block_start":
            return self._start(index, doc)
        if kind not in ("content_block_delta", "content_block_stop"):
            raise AnswerInvalid(f"unknown content block event {kind!r}")
        if index not in self._open:
            raise AnswerInvalid(f"a {kind!r} event for block {index}, which is not open")
        delta = doc.get("delta")
        if kind == "content_block_delta" and not (isinstance(delta, dict) and delta.get("type") in _DELTAS):
            return []  # a delta of a type this codec does not know: dropped
        if isinstance(delta, dict) and delta.get("type") == "citations_delta":
            citation = delta.get("citation")
            if not (isinstance(citation, dict) and citation.get("type") in CITATIONS):
                return []  # a citation of a type the API does not define: removed
        if index in self._held:
            return self._hold(kind, index, doc, delta)
        if index in self._arguments and isinstance(delta, dict) and delta.get("type") == "input_json_delta":
            part = delta.get("partial_json")
            if isinstance(part, str):
                self._arguments[index][1].append(part)
        if kind == "content_block_stop":
            self._open.discard(index)
            if index in self._arguments:  # the streamed input, for the drift tracker
                position, parts = self._arguments.pop(index)
                seen = self.result.calls[position]
                self.result.calls[position] = Call(seen.name, "".join(parts) or "{}", seen.offered)
        if index in self._removed:
            return []
        doc["index"] = self._positions[index]
        return [doc]

    def _start(self, index: int, doc: dict[str, Any]) -> list[dict[str, Any]]:
        if index in self._positions or index in self._held:
            raise AnswerInvalid(f"content block {index} was started twice")
        block = doc.get("content_block")
        if not isinstance(block, dict):
            raise AnswerInvalid("a content_block_start event has no 'content_block' object")
        _known_citations(block)
        self._open.add(index)
        self._judge.partial = True  # its input streams after this event: the tool alone, first
        try:
            verdict = self._judge(block)
        finally:
            self._judge.partial = False
        if self._judge.held(verdict):
            self._held[index] = (block, [doc], [])
            return []
        # Not held: nothing about it depends on its input, so the verdict is already whole.
        if verdict is not True and verdict is not False:
            self._arguments[index] = (len(self.result.calls), [])  # its streamed input, for the record
        return self._placed(index, block, settle(verdict, self.result, self.allow), [doc])

    def _placed(
        self, index: int, block: dict[str, Any], fate: bool | str, docs: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """A judged block's events as the client gets them: renumbered, removed, or replaced by a
        stand-in text block under `explain`."""
        position = self._positions.place(index, fate is not False)
        if fate is True:
            self._tool_uses_kept += block.get("type") == "tool_use"
            for doc in docs:
                doc["index"] = position
            return docs
        self._removed.add(index)
        if fate is False or position is None:
            return []
        return [
            {"type": "content_block_start", "index": position, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": position, "delta": {"type": "text_delta", "text": fate}},
            {"type": "content_block_stop", "index": position},
        ]

    def _hold(self, kind: str, index: int, doc: dict[str, Any], delta: Any) -> list[dict[str, Any]]:
        """An event of a held block: kept back; at its stop, the block judged on its whole input
        (the text its `input_json_delta` parts spell, which is what the client parses)."""
        block, docs, parts = self._held[index]
        docs.append(doc)
        if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
            part = delta.get("partial_json")
            if not isinstance(part, str):
                raise AnswerInvalid("an input_json_delta has no string 'partial_json'")
            parts.append(part)
        if kind != "content_block_stop":
            return []
        del self._held[index]
        self._open.discard(index)
        self._judge.input_text = "".join(parts) if parts else orjson.dumps(block.get("input", {})).decode()
        try:
            verdict = self._judge(block)
        finally:
            self._judge.input_text = None
        return self._placed(index, block, settle(verdict, self.result, self.allow), docs)

    def finish(self) -> list[Event]:
        if not self._ended:
            raise AnswerIncomplete("upstream stream ended before message_stop")
        return []

    def error(self, message: str, kind: str, code: str | None) -> Event:
        """The event that ends this stream in error."""
        return stream_error(message, kind, code)


# HTTP status -> Anthropic error type (https://docs.anthropic.com/en/api/errors); the SDK maps the
# status to its exception class and reads `error.type` / `error.message`.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
    kind = kind if kind in _ERROR_TYPES.values() or kind == "api_error" else _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def stream_error(message: str, kind: str, code: str | None) -> Event:
    # anthropic-python raises its APIStatusError on an `event: error` in a stream.
    body = error_body(500, message, kind, code)
    return Event(data=orjson.dumps(body).decode(), event="error")
