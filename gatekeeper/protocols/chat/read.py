"""What both translations (Responses <-> chat, Messages <-> chat) read from Chat Completions
answers: a checked view of one plain answer and of each streamed chunk. Anything that is not
exactly the shape Chat Completions defines raises AnswerInvalid: a translation never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid, RequestInvalid
from gatekeeper.protocols.base import Event
from gatekeeper.protocols.strict_json import loads


@dataclass
class ChatCall:
    id: str
    name: str
    arguments: str


@dataclass
class ChatAnswer:
    """The first choice of a chat answer, checked."""

    id: str
    text: str | None
    calls: list[ChatCall]
    finish_reason: str | None
    usage: dict[str, int]
    model: str | None = None
    refusal: str | None = None  # the model declined (structured outputs): its own text


def _str(value: Any, where: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise AnswerInvalid(f"chat answer: {where} must be a string, got {type(value).__name__}")
    return value


def _usage(doc: dict[str, Any]) -> dict[str, int]:
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        return {"prompt_tokens": 0, "completion_tokens": 0}
    return {
        k: v if isinstance(v, int) and not isinstance(v, bool) else 0
        for k, v in ((k, usage.get(k)) for k in ("prompt_tokens", "completion_tokens"))
    }


def read_answer(doc: Any) -> ChatAnswer:
    """The first choice of a plain chat answer."""
    if not isinstance(doc, dict):
        raise AnswerInvalid(f"chat answer must be a JSON object, got {type(doc).__name__}")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise AnswerInvalid("chat answer: 'choices' must be a non-empty array of objects")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise AnswerInvalid("chat answer: choices[0].message must be an object")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise AnswerInvalid("chat answer: 'tool_calls' must be an array")
    calls = []
    for i, call in enumerate(raw_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise AnswerInvalid(f"chat answer: tool_calls[{i}].function must be an object")
        calls.append(
            ChatCall(
                id=_str(call.get("id") or f"call_{i}", f"tool_calls[{i}].id"),
                name=_str(function.get("name"), f"tool_calls[{i}].function.name"),
                arguments=_str(function.get("arguments", ""), f"tool_calls[{i}].function.arguments"),
            )
        )
    legacy = message.get("function_call")
    if legacy is not None and not calls:
        # A legacy-only upstream: its one call. Next to `tool_calls` the legacy field is ignored:
        # it duplicates them (llama.cpp's even carries a stale name there), and the translated
        # answer is built from what is read, so an ignored field never reaches the client.
        if not isinstance(legacy, dict):
            raise AnswerInvalid("chat answer: 'function_call' must be an object")
        calls.append(
            ChatCall(
                id="call_legacy",
                name=_str(legacy.get("name"), "function_call.name"),
                arguments=_str(legacy.get("arguments", ""), "function_call.arguments"),
            )
        )
    return ChatAnswer(
        id=_str(doc.get("id", "chatcmpl"), "id"),
        text=_str(message.get("content"), "content", True),
        calls=calls,
        finish_reason=_str(choices[0].get("finish_reason"), "finish_reason", True),
        usage=_usage(doc),
        model=doc.get("model") if isinstance(doc.get("model"), str) else None,
        refusal=_str(message.get("refusal"), "refusal", True),
    )


@dataclass
class ChatDelta:
    """One streamed chunk of the first choice, checked."""

    text: str | None = None
    refusal: str | None = None
    calls: list[tuple[int, str | None, str | None, str]] = field(default_factory=list)  # index, id, name, args
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    error: str | None = None
    done: bool = False
    model: str | None = None


def read_chunk(event: Event) -> ChatDelta:
    if event.data.strip() == "[DONE]":
        return ChatDelta(done=True)
    doc = loads(event.data, "chat stream: an event")
    if not isinstance(doc, dict):
        raise AnswerInvalid(f"chat stream: an event must be a JSON object, got {type(doc).__name__}")
    if doc.get("error") is not None:
        error = doc["error"]
        message = error.get("message") if isinstance(error, dict) else error
        return ChatDelta(error=str(message))
    out = ChatDelta(
        usage=_usage(doc) if isinstance(doc.get("usage"), dict) else None,
        model=doc.get("model") if isinstance(doc.get("model"), str) else None,
    )
    choices = doc.get("choices") or []
    if not isinstance(choices, list):
        raise AnswerInvalid("chat stream: 'choices' must be an array")
    for choice in choices:
        if not isinstance(choice, dict):
            raise AnswerInvalid("chat stream: a choice must be an object")
        if choice.get("index", 0) != 0:
            raise AnswerInvalid("chat stream: only one choice (n=1) can be translated")
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise AnswerInvalid("chat stream: 'delta' must be an object")
        out.text = _str(delta.get("content"), "delta.content", True)
        out.refusal = _str(delta.get("refusal"), "delta.refusal", True)
        out.finish_reason = _str(choice.get("finish_reason"), "finish_reason", True)
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list):
            raise AnswerInvalid("chat stream: 'tool_calls' must be an array")
        legacy = delta.get("function_call")
        if legacy is not None and not calls:  # as in read_answer: only a legacy-only delta counts
            if not isinstance(legacy, dict):
                raise AnswerInvalid("chat stream: 'function_call' must be an object")
            calls = [{"index": -1, "function": legacy}]
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("index"), int):
                raise AnswerInvalid("chat stream: a tool call delta must be an object with an integer 'index'")
            function = call.get("function") or {}
            if not isinstance(function, dict):
                raise AnswerInvalid("chat stream: a tool call's 'function' must be an object")
            out.calls.append(
                (
                    call["index"],
                    _str(call.get("id"), "tool_calls.id", True),
                    _str(function.get("name"), "function.name", True),
                    _str(function.get("arguments") or "", "function.arguments"),
                )
            )
    return out


def text_of(content: Any, where: str) -> str:
    """Plain text of a content value that may be a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                raise RequestInvalid(f"{where}[{i}] must be a text part to be sent to a chat-only upstream")
            parts.append(part["text"])
        return "".join(parts)
    raise RequestInvalid(f"{where} must be a string or an array of text parts")


class FromChatStream:
    """What both chat-to-X stream converters share (responses/translate.py, messages/translate.py):
    reading each chunk strictly, the model name, the opening events, an error chunk, [DONE], text
    and call deltas, the finish reason and usage. A subclass says how each piece is spelled in its
    protocol (`_begin`, `_text`, `_call`, `_arguments`, `_complete`, `_error`). A tool call keeps
    the name its first delta gave it; a later delta may repeat it, and one naming another tool
    makes the stream unreadable (as in the chat filter: a client that concatenates names, or keeps
    the last one, would call something else than what the client protocol's enforcer judged)."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.request = request
        self._calls: dict[int, str] = {}  # chat tool-call index started -> its name
        self._finish: str | None = None
        self._usage: dict[str, int] = {}
        self._started = False
        self._ended = False

    def feed(self, event: Event) -> list[Event]:
        if self._ended:
            return []
        delta = read_chunk(event)
        if not self.request.get("model") and delta.model:
            self.request = self.request | {"model": delta.model}
        out: list[Event] = []
        if not self._started:
            self._started = True
            out += self._begin()
        if delta.error is not None:
            self._ended = True
            return [*out, self._error(delta.error)]
        if delta.done:
            if self._finish is None:
                raise AnswerInvalid("chat stream ended without a finish_reason")
            self._ended = True
            return out + self._complete()
        if delta.text:
            out += self._text(delta.text)
        if delta.refusal:
            out += self._refusal(delta.refusal)
        for index, call_id, name, arguments in delta.calls:
            if index not in self._calls:
                if not name:
                    raise AnswerInvalid(f"chat stream: tool call {index} starts without a function name")
                self._calls[index] = name
                out += self._call(index, call_id, name)
            elif name and name != self._calls[index]:
                raise AnswerInvalid(f"chat stream renames tool call {self._calls[index]!r} to {name!r}")
            out += self._arguments(index, arguments)
        if delta.finish_reason:
            self._finish = delta.finish_reason
        if delta.usage:
            self._usage = delta.usage
        return out

    def finish(self) -> list[Event]:
        """The upstream stream ended: [DONE] must have completed the answer already."""
        if self._ended:
            return []
        raise AnswerIncomplete("chat stream ended before [DONE]")

    def _begin(self) -> list[Event]:
        """The events that open the client's stream."""
        raise NotImplementedError

    def _text(self, text: str) -> list[Event]:
        raise NotImplementedError

    def _refusal(self, text: str) -> list[Event]:
        """The model's refusal text (chat's `refusal`); as text where the protocol has no refusal."""
        return self._text(text)

    def _call(self, index: int, call_id: str | None, name: str) -> list[Event]:
        """A new tool call (chat index `index`) starts."""
        raise NotImplementedError

    def _arguments(self, index: int, arguments: str) -> list[Event]:
        """Argument text for a started call (possibly empty)."""
        raise NotImplementedError

    def _complete(self) -> list[Event]:
        """The closing events, after [DONE] (a finish reason was seen)."""
        raise NotImplementedError

    def _error(self, message: str) -> Event:
        """The client protocol's error event for an upstream error chunk."""
        raise NotImplementedError
