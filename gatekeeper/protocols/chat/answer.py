"""The OpenAI Chat Completions answer side (`POST /v1/chat/completions`): plain answers and streams.

Answers are read strictly: any wrong type where a call could be (choices, message, delta,
tool_calls, function, name, index) raises AnswerInvalid, never a guess.

Streamed calls (the rule, safe under both client accumulation styles: openai-python concatenates
a call's name fragments, openai-node keeps the last non-empty one):
  * a call is decided on its first delta, by the name that delta gives; no name = not offered;
  * later deltas for the same (choice, index) never carry a name to the client: a repeat of the
    same name (or an empty one) is removed from the delta; a DIFFERENT name for a kept call makes
    the stream unreadable (AnswerInvalid: it ends with an error event); for a removed call it
    changes nothing (the call stays removed);
  * a delta without `index` is a call of its own (some servers send each call whole in one delta
    without one); it gets a fresh index and is decided like any first delta;
  * kept calls are renumbered so the client sees contiguous indexes;
  * a call whose tier depends on its arguments (`tools.arguments`: `Allowed.holds`) is held: none
    of its deltas reaches the client until its choice finishes (`finish_reason`, or [DONE]), when
    it is judged on its whole arguments and sent as one delta, or removed."""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid
from gatekeeper.protocols.base import Allowed, Call, Enforced, Event, Offered
from gatekeeper.protocols.enforce import as_allowed, settle
from gatekeeper.protocols.strict_json import loads
from gatekeeper.rules.tools import ToolId, ToolKind


def parameters_of(function: Any) -> dict[str, Any] | None:
    schema = function.get("parameters") if isinstance(function, dict) else None
    return schema if isinstance(schema, dict) else None


def _put_calls(doc: dict[str, Any], calls: list[Any]) -> None:
    """`tool_calls` set to the calls that remain, or removed when none does."""
    if calls:
        doc["tool_calls"] = calls
    else:
        del doc["tool_calls"]


def _called(call: Any) -> tuple[ToolId, str | None] | None:
    """The tool a chat tool call (or delta) calls, by the one key that carries its name
    (`function` or `custom`: two kinds never match), and its argument text; None when it names
    nothing, or names two things, or its `type` says another kind than its key (a reader could
    take either)."""
    if not isinstance(call, dict):
        return None
    named = [
        (key, inner)
        for key in ("function", "custom")
        if isinstance(inner := call.get(key), dict) and isinstance(inner.get("name"), str)
    ]
    if len(named) != 1 or call.get("type", named[0][0]) != named[0][0]:
        return None
    key, inner = named[0]
    if key == "custom":  # free-form input, not JSON: nothing for the drift tracker to validate
        return ToolId.custom(inner["name"]), None
    arguments = inner.get("arguments")
    return ToolId.function(inner["name"]), arguments if isinstance(arguments, str) else None


def _enforce_choice(choice: dict[str, Any], message: dict[str, Any], allow: Allowed, result: Enforced) -> None:
    """Remove (in place) one answer choice's calls to tools that were not offered; when no call
    remains, `finish_reason` becomes `stop`. Under `explain`, the removed calls' texts are added
    to the message's content."""
    texts: list[str] = []

    def kept(tool: ToolId | None, name: str, arguments: str | None) -> bool:
        fate = settle(
            (Call(name, arguments, tool is not None and allow.admits_call(tool, arguments)), tool), result, allow
        )
        if isinstance(fate, str):
            texts.append(fate)
        return fate is True

    calls = message.get("tool_calls")
    if calls is not None:
        keep = []
        for call in calls:
            called = _called(call)
            tool, arguments = called if called is not None else (None, None)
            if kept(tool, str(tool) if tool is not None else _any_name(call), arguments):
                keep.append(call)
        _put_calls(message, keep)
    legacy = message.get("function_call")
    if legacy is not None:
        args = legacy.get("arguments")
        if not kept(ToolId.function(legacy["name"]), legacy["name"], args if isinstance(args, str) else None):
            del message["function_call"]
    removed = bool(calls and len(message.get("tool_calls") or []) != len(calls)) or (
        legacy is not None and "function_call" not in message
    )
    if (
        removed
        and not message.get("tool_calls")
        and message.get("function_call") is None  # `"function_call": null` (LiteLLM's, SDK dumps) is no call
        and choice.get("finish_reason") in ("tool_calls", "function_call")
    ):
        choice["finish_reason"] = "stop"
    if texts and not allow.structured:
        _add_text(message, "\n".join(texts))
    elif texts and not message.get("content"):
        _add_refusal(message, "\n".join(texts))
    # else: a structured answer's JSON text is left as it is (the header names the removed calls)


def _any_name(call: Any) -> str:
    """Some name for a call that names no one tool (for the record only)."""
    for key in ("function", "custom"):
        inner = call.get(key) if isinstance(call, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            return str(inner["name"])
    return ""


def _add_refusal(message: dict[str, Any], text: str) -> None:
    """Append text to a message's `refusal`: under a structured format, the one text an SDK's
    `parse` does not validate as the format (the content it parses is the model's alone)."""
    refusal = message.get("refusal")
    message["refusal"] = f"{refusal}\n\n{text}" if isinstance(refusal, str) and refusal else text


def _add_text(message: dict[str, Any], text: str) -> None:
    """Append assistant text to a message's content (a string, null or a list of parts)."""
    content = message.get("content")
    if isinstance(content, list):
        content.append({"type": "text", "text": text})
    elif isinstance(content, str) and content:
        message["content"] = f"{content}\n\n{text}"
    else:
        message["content"] = text


def _choices(doc: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise AnswerInvalid(f"{what} must be a JSON object, got {type(doc).__name__}")
    choices = doc.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise AnswerInvalid(f"{what}: 'choices' must be an array of objects")
    return choices


def _refuse_calls_in(part: Any, where: str) -> None:
    """Calls in the other shape's field (a `message` in a stream chunk, a `delta` in a plain answer)
    are not what clients accumulate, but a client reading raw JSON would see them: never relayed."""
    if part is not None and (not isinstance(part, dict) or "tool_calls" in part or "function_call" in part):
        raise AnswerInvalid(f"upstream answer: {where} carries tool calls where none belong")


def _check_calls(calls: Any, where: str, what: str = "upstream answer") -> None:
    if calls is None:
        return
    if not isinstance(calls, list):
        raise AnswerInvalid(f"{what}: '{where}' must be an array, got {type(calls).__name__}")
    for call in calls:
        if not isinstance(call, dict):
            raise AnswerInvalid(f"{what}: '{where}[]' must be objects")
        for key in ("function", "custom"):
            inner = call.get(key)
            if inner is None:
                continue
            if not isinstance(inner, dict):
                raise AnswerInvalid(f"{what}: '{where}[].{key}' must be an object")
            for field in ("name", "arguments", "input"):
                if inner.get(field) is not None and not isinstance(inner[field], str):
                    raise AnswerInvalid(f"{what}: '{where}[].{key}.{field}' must be a string")


class ChatStreamFilter:
    """Per-stream state of the chat answer filter (the rule is in the module docstring)."""

    def __init__(self, offered: Allowed | Offered) -> None:
        self.allow = as_allowed(offered)
        self.result = Enforced()
        self.done = False
        self._index: dict[tuple[int, int | None], int | None] = {}  # (choice, upstream index) -> client index
        self._names: dict[tuple[int, int | None], str] = {}
        self._arguments: dict[tuple[int, int | None], tuple[int, list[str]]] = {}  # -> (calls position, parts)
        self._kept: dict[int, int] = {}  # choice -> calls kept so far
        self._decided: set[int] = set()  # choices that had any call
        self._texts: list[str] = []  # explanations of the calls this event removed
        self._wrote: set[int] = set()  # choices whose deltas carried text (read when structured)
        self._anonymous = 0
        self._held: dict[tuple[int, int], _Held] = {}  # calls judged once their arguments are whole
        self._last: dict[str, Any] = {}  # the last parsed chunk's envelope, for a chunk of released calls
        self._whole: set[tuple[int, int]] = set()  # held calls released: judged whole, nothing may follow

    def feed(self, event: Event) -> list[Event]:
        if self.done:
            return []  # clients stop reading at [DONE]; whatever follows is not theirs
        data = event.data
        if data.startswith("[DONE]"):
            self.done = True
            return [*self._release_all(), Event("[DONE]")]
        # Fast path: no marker and no escape that could spell one: it cannot carry a call. (A
        # structured answer's chunks are all read: where an explanation goes depends on its text;
        # so is every chunk while a call is held: a finish_reason releases it.)
        if (
            not self._held
            and "tool_calls" not in data
            and "function_call" not in data
            and "\\u" not in data
            and "\x00" not in data
            and not self.allow.structured
        ):
            return [event]
        doc = loads(data, "upstream stream event")
        choices = _choices(doc, "upstream stream event")
        self._last = {k: doc[k] for k in ("id", "object", "created", "model") if k in doc}
        for choice in choices:
            self._choice(choice)
        if isinstance(doc.get("choices"), list):
            doc["choices"] = [
                c
                for c in doc["choices"]
                if c.get("delta") or c.get("finish_reason") or c.get("logprobs") or "delta" not in c
            ]
            if (
                not doc["choices"]
                and "usage" not in doc
                and not (doc.keys() - {"choices", "id", "object", "created", "model", "system_fingerprint"})
            ):
                return []
        return [Event(orjson.dumps(doc).decode(), event.event, event.id, event.retry)]

    def finish(self) -> list[Event]:
        for position, parts in self._arguments.values():
            call = self.result.calls[position]
            self.result.calls[position] = Call(call.name, "".join(parts), call.offered)
        if not self.done:
            raise AnswerIncomplete("upstream stream ended before [DONE]")
        return []

    def error(self, message: str, kind: str, code: str | None) -> Event:
        """The event that ends this stream in error."""
        return stream_error(message, kind, code)

    def _release_all(self) -> list[Event]:
        """At [DONE]: the calls still held (their choices sent no finish_reason), judged whole,
        in one chunk before it."""
        if not self._held:
            return []
        choices = []
        for ci in sorted({ci for ci, _ in self._held}):
            choice: dict[str, Any] = {"index": ci, "delta": {}, "finish_reason": None}
            self._choice(choice, release=True)
            if choice["delta"]:
                choices.append(choice)
        if not choices:
            return []
        chunk = {"id": "", "object": "chat.completion.chunk", "created": 0, "model": "", **self._last}
        return [Event(orjson.dumps(chunk | {"choices": choices}).decode())]

    def _released(self, ci: int) -> list[dict[str, Any]]:
        """The held calls of choice `ci`, judged on their whole arguments: those kept, each as one
        whole delta (a removed one's explanation goes to `_texts`)."""
        out: list[dict[str, Any]] = []
        for key in [k for k in self._held if k[0] == ci]:
            held = self._held.pop(key)
            self._whole.add(key)
            arguments = "".join(held.parts)
            call = Call(str(held.tool), arguments, self.allow.admits_call(held.tool, arguments))
            fate = settle((call, held.tool), self.result, self.allow)
            if fate is not True:
                self._index[key] = None
                if fate is not False:
                    self._texts.append(fate)
                continue
            index = self._kept.get(ci, 0)
            self._index[key] = index
            self._kept[ci] = index + 1
            self._names[key] = held.name
            self._arguments[key] = (len(self.result.calls) - 1, list(held.parts))
            whole = {"name": held.name, "arguments": arguments}
            if key[1] == -1:  # the legacy `function_call`
                out.append({"function_call": whole})
            else:
                out.append({**held.first, "index": index, "function": whole})
        return out

    def _choice(self, choice: dict[str, Any], release: bool = False) -> None:
        ci = choice.get("index", 0)
        if not _is_int(ci):
            raise AnswerInvalid("upstream stream event: 'choices[].index' must be an integer")
        _refuse_calls_in(choice.get("message"), "a stream event's 'message'")
        delta = choice.get("delta")
        if delta is None and choice.get("finish_reason") and any(k[0] == ci for k in self._held):
            delta = choice["delta"] = {}  # the finish releases held calls: they go in this delta
        if delta is None:
            return  # clients accumulate deltas only
        if not isinstance(delta, dict):
            raise AnswerInvalid("upstream stream event: 'choices[].delta' must be an object")
        calls = delta.get("tool_calls")
        if calls is not None:
            _check_calls(calls, "choices[].delta.tool_calls", "upstream stream event")
            _put_calls(delta, [out for call in calls if (out := self._call(ci, call)) is not None])
        legacy = delta.get("function_call")
        if legacy is not None:
            if not isinstance(legacy, dict) or any(
                legacy.get(k) is not None and not isinstance(legacy[k], str) for k in ("name", "arguments")
            ):
                raise AnswerInvalid("upstream stream event: 'delta.function_call' must be an object of strings")
            name = legacy.get("name")
            tool = ToolId.function(name) if name else None
            verdict = self._decide(ci, -1, tool, name, legacy.get("arguments"))
            if verdict is None:
                del delta["function_call"]
            elif verdict is False:
                delta["function_call"] = {k: v for k, v in legacy.items() if k != "name"}
        # The finish of a choice releases its held calls (after its own deltas are read).
        if release or choice.get("finish_reason"):
            released = self._released(ci)
            legacy_released = [r["function_call"] for r in released if "function_call" in r]
            whole_calls = [r for r in released if "function_call" not in r]
            if whole_calls:
                delta["tool_calls"] = [*(delta.get("tool_calls") or []), *whole_calls]
            if legacy_released and delta.get("function_call") is None:
                delta["function_call"] = legacy_released[0]
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._wrote.add(ci)
        if self._texts:  # explanations of removed calls, in this same delta
            text = "\n".join(self._texts)
            self._texts.clear()
            if not self.allow.structured:  # as assistant text
                delta["content"] = f"{content}\n\n{text}" if isinstance(content, str) and content else text
            elif ci not in self._wrote:  # a structured answer: its refusal, unless it had text (kept JSON)
                refusal = delta.get("refusal")
                delta["refusal"] = f"{refusal}\n\n{text}" if isinstance(refusal, str) and refusal else text
        if (
            ci in self._decided
            and choice.get("finish_reason") in ("tool_calls", "function_call")
            and not self._kept.get(ci)
        ):
            choice["finish_reason"] = "stop"

    def _call(self, ci: int, call: dict[str, Any]) -> dict[str, Any] | None:
        ui = call.get("index")
        if ui is None:
            self._anonymous += 1
            ui = -1 - self._anonymous  # its own call; never continued by another delta
        elif not _is_int(ui) or ui < 0:
            raise AnswerInvalid("upstream stream event: 'tool_calls[].index' must be a non-negative integer")
        names = {
            inner["name"]
            for key in ("function", "custom")
            if isinstance(inner := call.get(key), dict) and isinstance(inner.get("name"), str)
        }
        if len(names) > 1:
            raise AnswerInvalid("upstream stream event: a tool call delta gives two different names")
        called = _called(call)
        inner = call.get("function") or {}
        arguments = inner.get("arguments") if called is None or called[0].kind is ToolKind.FUNCTION else None
        verdict = self._decide(ci, ui, called[0] if called else None, next(iter(names), None), arguments)
        held = self._held.get((ci, ui))
        if held is not None and not held.first:
            held.first = {k: call[k] for k in ("id", "type") if k in call}
        if verdict is None:
            return None
        out = dict(call, index=self._index[(ci, ui)])
        if verdict is False:  # a later delta: the client must never see a second name
            for key in ("function", "custom"):
                if isinstance(out.get(key), dict) and "name" in out[key]:
                    out[key] = {k: v for k, v in out[key].items() if k != "name"}
        return out

    def _decide(self, ci: int, ui: int, tool: ToolId | None, name: str | None, arguments: Any) -> bool | None:
        """None: drop this delta. True: the first delta of a kept call. False: a later one."""
        key = (ci, ui)
        held = self._held.get(key)
        if held is not None:  # a later delta of a held call: its arguments, kept for the judgement
            if name and name != held.name:
                raise AnswerInvalid(f"upstream stream renames tool call {held.name!r} to {name!r}")
            if isinstance(arguments, str):
                held.parts.append(arguments)
            return None
        if key in self._whole:
            raise AnswerInvalid("upstream stream continues a tool call after its choice finished")
        if key not in self._index:
            self._decided.add(ci)
            shown = str(tool) if tool is not None else name or ""
            call = Call(shown, arguments if isinstance(arguments, str) else None, bool(name) and self._admits(tool))
            if call.offered and tool is not None and tool.kind is ToolKind.FUNCTION and self.allow.holds(tool):
                self._held[key] = _Held(tool, name or "", [arguments] if isinstance(arguments, str) else [])
                return None
            fate = settle((call, tool), self.result, self.allow)
            if fate is True:
                index = self._kept.get(ci, 0)
                self._index[key] = index
                self._kept[ci] = index + 1
                self._names[key] = name or ""
                self._arguments[key] = (len(self.result.calls) - 1, [arguments] if isinstance(arguments, str) else [])
                return True
            self._index[key] = None
            if fate is not False:
                self._texts.append(fate)
            return None
        if self._index[key] is None:
            return None
        if name and name != self._names[key]:
            raise AnswerInvalid(f"upstream stream renames tool call {self._names[key]!r} to {name!r}")
        if isinstance(arguments, str):
            self._arguments[key][1].append(arguments)  # for the drift tracker (Call.arguments)
        return False

    def _admits(self, tool: ToolId | None) -> bool:
        # A function call held for its arguments is judged on them when whole; a custom tool's
        # free-form input is no JSON object: argument rules judge it at their strictest.
        if tool is None:
            return False
        return self.allow.admits(tool) if tool.kind is ToolKind.FUNCTION else self.allow.admits_call(tool, None)


class _Held:
    """A streamed call held until its arguments are whole: what it calls, the name its first
    delta gave, its argument parts, and its first delta's `id` and `type` (sent with it)."""

    __slots__ = ("first", "name", "parts", "tool")

    def __init__(self, tool: ToolId, name: str, parts: list[str]) -> None:
        self.tool, self.name, self.parts = tool, name, parts
        self.first: dict[str, Any] = {}


def error_body(status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def stream_error(message: str, kind: str, code: str | None) -> Event:
    # openai-python and -node raise APIError on a chunk with an `error` member.
    return Event(orjson.dumps(error_body(0, message, kind, code)).decode())


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def enforce(doc: Any, offered: Allowed | Offered) -> Enforced:
    """A plain answer with its calls to tools not offered removed (in place), and what was removed."""
    allow = as_allowed(offered)
    result = Enforced()
    for choice in _choices(doc, "upstream answer"):
        _refuse_calls_in(choice.get("delta"), "a plain answer's 'delta'")
        message = choice.get("message")
        if message is None:
            continue
        if not isinstance(message, dict):
            raise AnswerInvalid("upstream answer: 'choices[].message' must be an object")
        _check_calls(message.get("tool_calls"), "choices[].message.tool_calls")
        legacy = message.get("function_call")
        if legacy is not None and not (isinstance(legacy, dict) and isinstance(legacy.get("name"), str)):
            raise AnswerInvalid("upstream answer: 'function_call' must be an object with a string 'name'")
        _enforce_choice(choice, message, allow, result)
    return result
