"""The OpenAI Responses answer side: which output items call which tool, plain answers and streams."""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid
from gatekeeper.observe import logs
from gatekeeper.protocols.base import Allowed, Call, Enforced, Event, Offered
from gatekeeper.protocols.enforce import (
    ItemJudge,
    Positions,
    as_allowed,
    enforce_items,
    settle,
)
from gatekeeper.protocols.strict_json import read_object
from gatekeeper.rules.tools import ToolId

_log = logs.get_logger(__name__)


# Output item types of the Responses API (openai/types/responses/response_output_item.py) that
# call nothing: a message, reasoning, the tools a tool search loaded (gated when sent back).
NOT_CALLS = frozenset({"message", "reasoning", "compaction", "additional_tools", "tool_search_output"})
# The outputs of calls, by the field naming their call: removed with the call they answer.
_OUTPUTS = {
    "function_call_output": "call_id",
    "computer_call_output": "call_id",
    "local_shell_call_output": "call_id",
    "shell_call_output": "call_id",
    "apply_patch_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "program_output": "call_id",
    "mcp_approval_response": "approval_request_id",
}
# Built-in call item type -> the exact tool types whose offer lets it through (the first one
# stands for the family in an explanation). Never a prefix: a function named `computer_notes` is
# not the `computer` built-in. Every type here is in gating.BUILTIN_FAMILIES (a test checks).
_BUILTIN_CALLS: dict[str, tuple[str, ...]] = {
    "web_search_call": ("web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"),
    "file_search_call": ("file_search",),
    "code_interpreter_call": ("code_interpreter",),
    "computer_call": ("computer_use_preview", "computer"),
    "image_generation_call": ("image_generation",),
    "local_shell_call": ("local_shell",),
    "shell_call": ("shell",),
    "apply_patch_call": ("apply_patch",),
    "tool_search_call": ("tool_search",),
    "program": ("programmatic_tool_calling",),
}
_MCP_CALLS = frozenset({"mcp_call", "mcp_approval_request"})
# What an output item calls: a later event of a held call must not change any of it.
_IDENTITY = ("type", "name", "namespace", "server_label")
# Events that end a Responses stream: nothing after one reaches the client.
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
# Events about the whole response: their `response.output` is enforced like a plain answer.
_RESPONSE_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"} | _TERMINAL - {"error"})
# Events about one output item: each names its `output_index`
# (openai/types/responses/response_stream_event.py; a test compares with the installed SDK).
_ITEM_EVENTS = frozenset(
    {
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.compaction.compacting",
        "response.content_part.added",
        "response.content_part.done",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.file_search_call.completed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.image_generation_call.completed",
        "response.image_generation_call.generating",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.partial_image",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.mcp_list_tools.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.output_text.annotation.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.refusal.delta",
        "response.refusal.done",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.web_search_call.completed",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
    }
)
# Events about neither: audio output. Any other event type is not one this codec knows: dropped.
_AUDIO_EVENTS = frozenset(
    {"response.audio.delta", "response.audio.done", "response.audio.transcript.delta", "response.audio.transcript.done"}
)
_KNOWN_EVENTS = _TERMINAL | _RESPONSE_EVENTS | _ITEM_EVENTS | _AUDIO_EVENTS


# -- answer enforcement --------------------------------------------------------------------


class _Judge(ItemJudge):
    """What each output item of an answer calls (see enforce.ItemJudge)."""

    noun = "an output item"
    not_calls = NOT_CALLS
    answers = _OUTPUTS
    listing, listing_server = "mcp_list_tools", "server_label"
    call_ids = ("id", "call_id")
    __slots__ = ()

    def _call(self, kind: str, item: dict[str, Any]) -> tuple[Call, ToolId | None]:
        arguments = _arguments(item)
        if kind in ("function_call", "custom_tool_call"):
            name = item.get("name")
            if not isinstance(name, str):
                raise AnswerInvalid(f"a {kind} item has no string 'name'")
            namespace = item.get("namespace")
            if namespace is not None and not isinstance(namespace, str):
                raise AnswerInvalid(f"a {kind} item's 'namespace' is not a string")
            if namespace is not None:
                tool = ToolId.namespaced(namespace, name)
            else:
                tool = ToolId.function(name) if kind == "function_call" else ToolId.custom(name)
            if kind == "custom_tool_call":
                arguments = None  # free-form input, not JSON: nothing for the drift tracker to validate
            return Call(str(tool), arguments, self.admits(tool, arguments)), tool
        if kind in _MCP_CALLS:
            label, name = item.get("server_label"), item.get("name")
            if not isinstance(label, str) or not isinstance(name, str):
                raise AnswerInvalid(f"an {kind} item has no string 'server_label' / 'name'")
            tool = ToolId.mcp(label, name)
            return Call(str(tool), arguments, self.admits(tool, arguments)), tool
        types = _BUILTIN_CALLS.get(kind)
        if types is None:  # a type this codec does not know: it may be a call, so it goes
            return Call(kind, arguments, False), None
        offered = next((t for t in types if ToolId.builtin(t) in self.allow.offered.tools), None)
        tool = ToolId.builtin(offered or types[0])
        # A built-in call's arguments, for argument rules: its `action` object (`command`, ...).
        action = item.get("action")
        kept = offered is not None and self.admits(tool, action if isinstance(action, dict) else None)
        return Call(offered or kind, arguments, kept), tool


def _arguments(item: dict[str, Any]) -> str | None:
    for field in ("arguments", "input"):
        value = item.get(field)
        if isinstance(value, str):
            return value
    return None


def _stand_in_id(item: dict[str, Any], position: int) -> str:
    """The id of the message that stands in for a removed item: the same in a stream's events and
    in the response snapshots (the client matches them by id)."""
    own = item.get("id")
    return f"msg_gk_{own}" if isinstance(own, str) else f"msg_gk_{position}"


def _stand_in(item: dict[str, Any], position: int, text: str, refusal: bool = False) -> dict[str, Any]:
    """The assistant message that replaces a removed call under `blocked_calls: explain`. Its text
    is a `refusal` part when the answer is structured (`Allowed.structured`): `responses.parse`
    validates every `output_text` part as the format, and reads no refusal."""
    part = {"type": "refusal", "refusal": text} if refusal else {"type": "output_text", "text": text, "annotations": []}
    return {
        "type": "message",
        "id": _stand_in_id(item, position),
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }


def _structured_stand_in(item: dict[str, Any], position: int, text: str) -> dict[str, Any]:
    return _stand_in(item, position, text, refusal=True)


def enforce_response(response: dict[str, Any], allow: Allowed, result: Enforced) -> None:
    output = response.get("output")
    if output is None:
        return
    replace = _structured_stand_in if allow.structured else _stand_in
    kept = enforce_items(output, "output", _Judge(allow), result, replace, allow)
    if kept is not None:
        response["output"] = kept
    for item in response["output"] if isinstance(response["output"], list) else ():
        _known_annotations(item)


# Output text annotations the API defines (openai/types/responses/response_output_text.py): a
# client reads each by its type, so one of another type (a call-shaped object) is removed.
_ANNOTATIONS = frozenset({"url_citation", "file_citation", "container_file_citation", "file_path"})


def _known_annotations(item: Any) -> None:
    """Remove the annotations of unknown types from a message item's content parts."""
    parts = item.get("content") if isinstance(item, dict) and item.get("type") == "message" else None
    for part in parts if isinstance(parts, list) else ():
        _known_part_annotations(part)


def _known_part_annotations(part: Any) -> None:
    annotations = part.get("annotations") if isinstance(part, dict) else None
    if isinstance(annotations, list):
        part["annotations"] = [a for a in annotations if isinstance(a, dict) and a.get("type") in _ANNOTATIONS]


class ResponsesStreamFilter:
    """Drops every event of a removed output item (or, under `explain`, sends a whole stand-in
    message in its place) and renumbers `output_index` and `sequence_number`, so the client sees
    a consistent stream. Every event is re-serialised from what was parsed, with `event:` set to
    the data's own `type`. The stream ends at its first terminal event (`response.completed`,
    `.incomplete`, `.failed`, `error`); one that ends before any is incomplete."""

    def __init__(self, offered: Allowed | Offered) -> None:
        self.allow = as_allowed(offered)
        self.result = Enforced()
        self._judge = _Judge(self.allow)
        self._positions = Positions()
        self._items: dict[int, tuple[Any, Any]] = {}  # upstream output_index -> (type, name) seen at 'added'
        self._removed: set[int] = set()  # upstream indexes whose own events never reach the client
        # Calls whose tier depends on their arguments (`Allowed.holds`): index -> their events so
        # far, none sent before `output_item.done`, when the call is judged on its whole item.
        self._held: dict[int, list[dict[str, Any]]] = {}
        self._whole: set[int] = set()  # held calls released: nothing of theirs may follow
        self._sequence = 0
        self._ended = False

    def feed(self, event: Event) -> list[Event]:
        if self._ended or event.data.strip() == "[DONE]":
            return []  # [DONE] is not a Responses event: the stream ends at its terminal event
        doc = read_object(event, "Responses")
        kind = doc["type"]
        if kind not in _KNOWN_EVENTS:
            if "output_index" in doc or "item" in doc:
                raise AnswerInvalid(f"an event of unknown type {kind!r} carries an output item")
            return []  # a type this codec does not know: it may belong to a removed item, so it goes
        docs = [doc]
        if kind == "response.output_text.annotation.added":
            annotation = doc.get("annotation")
            if not (isinstance(annotation, dict) and annotation.get("type") in _ANNOTATIONS):
                return []  # an annotation of a type the API does not define: removed
        _known_annotations(doc.get("item"))
        _known_part_annotations(doc.get("part"))
        if kind in _ITEM_EVENTS:
            if "output_index" not in doc:
                raise AnswerInvalid(f"a {kind!r} event has no output_index")
            docs = self._route(kind, doc)
        elif "output_index" in doc or "item" in doc or "item_id" in doc:
            raise AnswerInvalid(f"a {kind!r} event names an output item it should not")
        if isinstance(doc.get("response"), dict):
            scratch = Enforced()  # the stream's own decisions are the record; this cleans the snapshot
            enforce_response(doc["response"], self.allow, scratch)
        elif "response" in doc and doc["response"] is not None:
            raise AnswerInvalid(f"a {kind!r} event's 'response' is not an object")
        elif kind in _RESPONSE_EVENTS:
            raise AnswerInvalid(f"a {kind!r} event has no 'response' object")
        if kind == "error" and not isinstance(doc.get("error"), dict):
            # The upstream's own error event, given the object that makes the official client raise.
            doc["error"] = {"type": "upstream_error", "code": doc.get("code"), "message": doc.get("message")}
        self._ended = kind in _TERMINAL
        return [self._numbered(d, event) for d in docs]

    def _numbered(self, doc: dict[str, Any], event: Event) -> Event:
        doc["sequence_number"] = self._sequence
        self._sequence += 1
        return Event(data=orjson.dumps(doc).decode(), event=doc["type"], id=event.id, retry=event.retry)

    def _route(self, kind: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The client's events for one item-level event (renumbered in place; none when it belongs
        to a removed item; a stand-in message when a removed item is explained)."""
        index = doc["output_index"]
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise AnswerInvalid(f"a {kind!r} event has an invalid output_index {index!r}")
        item = doc.get("item")
        if item is not None and not isinstance(item, dict):
            raise AnswerInvalid(f"a {kind!r} event's 'item' is not an object")
        if index in self._held:
            return self._hold(kind, index, doc, item)
        if index in self._whole:
            raise AnswerInvalid(f"output_index {index} continues after its output_item.done")
        if index in self._positions:
            if kind == "response.output_item.added":
                raise AnswerInvalid(f"output_index {index} was added twice")
            self._check_same(kind, index, doc, item)
            if index in self._removed:
                return []
            doc["output_index"] = self._positions[index]
            return [doc]
        if kind != "response.output_item.added" or item is None:
            raise AnswerInvalid(f"a {kind!r} event for output_index {index} came before its output_item.added")
        self._items[index] = (item["type"], item.get("name"))
        self._judge.partial = True  # its arguments stream after this event: the tool alone, first
        try:
            verdict = self._judge(item)
        finally:
            self._judge.partial = False
        if self._judge.held(verdict):
            self._held[index] = [doc]
            return []
        # Not held: nothing about it depends on its arguments, so the verdict is already whole.
        return self._placed(index, item, settle(verdict, self.result, self.allow), [doc])

    def _placed(
        self, index: int, item: dict[str, Any], fate: bool | str, docs: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """A judged item's events as the client gets them: renumbered, removed, or a stand-in."""
        position = self._positions.place(index, fate is not False)
        if fate is True:
            for doc in docs:
                doc["output_index"] = position
            return docs
        self._removed.add(index)
        if fate is False or position is None:
            return []
        return _stand_in_events(_stand_in(item, index, fate, self.allow.structured), position)

    def _hold(self, kind: str, index: int, doc: dict[str, Any], item: dict[str, Any] | None) -> list[dict[str, Any]]:
        """An event of a held call: kept back; at `output_item.done`, the call judged on its done
        item, whose arguments must be what its delta and done events spelled (a client may read
        either)."""
        docs = self._held[index]
        if kind == "response.output_item.added":
            raise AnswerInvalid(f"output_index {index} was added twice")
        first = docs[0]["item"]
        if item is not None and any(item.get(k) != first.get(k) for k in _IDENTITY):
            raise AnswerInvalid(f"output_index {index} changed what it calls mid-stream")
        if doc.get("name") is not None and doc.get("name") != first.get("name"):
            raise AnswerInvalid(f"a {kind!r} event names another tool for output_index {index}")
        docs.append(doc)
        if kind != "response.output_item.done":
            return []
        del self._held[index]
        self._whole.add(index)
        if item is None:
            raise AnswerInvalid(f"the output_item.done event of output_index {index} has no item")
        final = item.get("arguments")
        spelled: list[str] = []
        for d in docs:
            if d["type"].endswith("_arguments.delta"):
                if not isinstance(d.get("delta"), str):
                    raise AnswerInvalid(f"an arguments delta for output_index {index} is not a string")
                spelled.append(d["delta"])
        done = [d.get("arguments") for d in docs if d["type"].endswith("_arguments.done")]
        if (spelled and "".join(spelled) != final) or any(text != final for text in done):
            raise AnswerInvalid(f"output_index {index}: its streamed arguments differ from its item's")
        return self._placed(index, item, settle(self._judge(item), self.result, self.allow), docs)

    def _check_same(self, kind: str, index: int, doc: dict[str, Any], item: dict[str, Any] | None) -> None:
        """A later event must not retype or rename its item: the client would see the new name."""
        decided_type, decided_name = self._items[index]
        if item is not None:
            if (item.get("type"), item.get("name")) != (decided_type, decided_name):
                raise AnswerInvalid(
                    f"output_index {index} changed from {decided_type}/{decided_name} to "
                    f"{item.get('type')}/{item.get('name')} mid-stream"
                )
            verdict = self._judge(item)  # the same name, but a changed server_label or namespace?
            shown = verdict is True or (verdict is not False and verdict[0].offered)
            if shown == (index in self._removed):
                raise AnswerInvalid(f"output_index {index} changed what it calls mid-stream")
        name = doc.get("name")
        if name is not None and name != decided_name:
            raise AnswerInvalid(f"a {kind!r} event names {name!r} for output_index {index} ({decided_name!r})")

    def finish(self) -> list[Event]:
        if not self._ended:
            raise AnswerIncomplete("upstream stream ended before response.completed")
        return []

    def error(self, message: str, kind: str, code: str | None) -> Event:
        """The event that ends this stream in error, numbered as its next event."""
        return stream_error(message, kind, code, self._sequence)


def _stand_in_events(message: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """A whole stand-in message as the events a Responses stream spells it with."""
    item_id = message["id"]
    part = message["content"][0]
    at = {"item_id": item_id, "output_index": index, "content_index": 0}
    if part["type"] == "refusal":
        text = [
            {"type": "response.refusal.delta", **at, "delta": part["refusal"]},
            {"type": "response.refusal.done", **at, "refusal": part["refusal"]},
        ]
    else:
        text = [
            {"type": "response.output_text.delta", **at, "delta": part["text"], "logprobs": []},
            {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []},
        ]
    empty = part | ({"refusal": ""} if part["type"] == "refusal" else {"text": ""})
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": message | {"status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": empty},
        *text,
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": message},
    ]


def error_body(status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def stream_error(message: str, kind: str, code: str | None, sequence_number: int = 0) -> Event:
    # The Responses `error` event (openai/types/responses/response_error_event.py), plus an
    # `error` object: openai-python raises APIError on a streamed event whose data has one.
    doc = {
        "type": "error",
        "code": code,
        "message": message,
        "param": None,
        "sequence_number": sequence_number,
        "error": {"type": kind, "code": code, "message": message},
    }
    return Event(data=orjson.dumps(doc).decode(), event="error")
