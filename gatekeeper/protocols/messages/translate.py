"""Anthropic Messages API <-> Chat Completions, for upstreams that speak only chat.

`to_chat` turns a gated Messages request into a chat request, `from_chat` a chat answer into a
Messages answer, `MessagesFromChat` a chat stream into Messages stream events. What chat cannot
express (typed server/client tools such as `bash_...`, MCP servers, documents) is refused with
RequestInvalid naming the field. Enforcement runs after translation, on what the client reads.
"""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import AnswerInvalid, RequestInvalid
from gatekeeper.observe.redact import new_id
from gatekeeper.protocols.base import Event, Translator
from gatekeeper.protocols.chat.read import FromChatStream, read_answer, text_of
from gatekeeper.protocols.messages.codec import CODEC as MESSAGES
from gatekeeper.protocols.messages.gate import effort_of
from gatekeeper.suite.jsonrepair import extract_json

_STOP = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("mcp_servers"):
        raise RequestInvalid("'mcp_servers' cannot be sent to a chat-only upstream")
    if body.get("thread"):
        # A continued thread sends only the new turn (the server holds the rest): dropped, the chat
        # upstream would get a conversation without its start. Refused from the first turn, which
        # asks for the thread, so a client never runs half a conversation.
        raise RequestInvalid(
            "'thread' needs server-side state that a chat-only upstream does not keep "
            "(Anthropic's tool runner: pass thread=False)"
        )
    chat: dict[str, Any] = {
        k: body[k]
        for k in ("model", "temperature", "top_p", "top_k", "stream", "max_tokens")
        if body.get(k) is not None
    }
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": text_of(body["system"], "system")})
    for i, message in enumerate(body.get("messages") or []):
        _add_message(messages, message, f"messages[{i}]")
    chat["messages"] = messages
    if body.get("tools"):
        chat["tools"] = [_function_tool(t, f"tools[{i}]") for i, t in enumerate(body["tools"])]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind: Any = choice.get("type")
        chat["tool_choice"] = (
            {"type": "function", "function": {"name": choice.get("name")}}
            if kind == "tool"
            else {"any": "required"}.get(kind, kind)
        )
        if choice.get("disable_parallel_tool_use") and chat.get("tools"):
            chat["parallel_tool_calls"] = False
        if "tools" not in chat:
            chat.pop("tool_choice")
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    effort = effort_of(body)
    if effort is not None:
        chat["reasoning_effort"] = effort
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat


def _add_message(messages: list[dict[str, Any]], message: Any, where: str) -> None:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise RequestInvalid(f"{where} must be an object with role 'user' or 'assistant'")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        messages.append({"role": role, "content": content})
        return
    if not isinstance(content, list):
        raise RequestInvalid(f"{where}.content must be a string or an array of blocks")
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        at = f"{where}.content[{i}]"
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block.get("source"), at)}})
        elif kind == "tool_use" and role == "assistant":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": orjson.dumps(block.get("input", {})).decode()},
                }
            )
        elif kind == "tool_result" and role == "user":
            result = block.get("content", "")
            text = result if isinstance(result, str) else text_of(result, f"{at}.content")
            # Tool results answer the previous assistant turn: they go before the user's own text.
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": f"Error: {text}" if block.get("is_error") else text,
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue  # chat upstreams cannot take thinking blocks back
        else:
            raise RequestInvalid(f"{at} of type {kind!r} cannot be sent to a chat-only upstream")
    if not parts and not calls:
        return
    text_only = all(p["type"] == "text" for p in parts)
    out: dict[str, Any] = {"role": role, "content": "".join(p["text"] for p in parts) if text_only else parts}
    if calls:
        out["tool_calls"] = calls
        out["content"] = out["content"] or None
    messages.append(out)


def _image_url(source: Any, where: str) -> str:
    if isinstance(source, dict) and source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if isinstance(source, dict) and source.get("type") == "url":
        return str(source.get("url"))
    raise RequestInvalid(f"{where}.source must be a base64 or url image source")


def _function_tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    if tool.get("type") not in (None, "custom"):
        raise RequestInvalid(
            f"{where} of type {tool.get('type')!r} cannot be sent to a chat-only upstream "
            "(only client tools with an input_schema translate)"
        )
    function = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


# -- answers -------------------------------------------------------------------------------


def _new_id(prefix: str) -> str:
    return f"{prefix}_{new_id(96)}"


def _input(arguments: str, name: str) -> dict[str, Any]:
    """A chat call's argument text as the object Messages requires (small models' near-JSON repaired)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        value = extract_json(arguments)
    if not isinstance(value, dict):
        raise AnswerInvalid(f"chat answer: the arguments of tool call {name!r} are not a JSON object")
    return value


def from_chat(doc: Any, request: dict[str, Any]) -> dict[str, Any]:
    answer = read_answer(doc)
    content: list[dict[str, Any]] = []
    text = (answer.text or "") + (answer.refusal or "")  # Messages has no refusal block: as the stream spells it
    if text:
        content.append({"type": "text", "text": text})
    for call in answer.calls:
        content.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments, call.name)}
        )
    stop = _STOP.get(answer.finish_reason or "stop", "end_turn")
    if answer.calls:
        stop = "tool_use"
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": request.get("model") or answer.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": answer.usage.get("prompt_tokens", 0),
            "output_tokens": answer.usage.get("completion_tokens", 0),
        },
    }


class MessagesFromChat(FromChatStream):
    """Chat stream events in, Messages stream events out (the shared reading is FromChatStream's).
    One content block is open at a time (as Anthropic streams them): a delta for a call whose
    block is already closed cannot be translated (AnswerInvalid)."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__(request)
        self._blocks = 0
        self._open: tuple[str, int] | None = None  # ("text", -1) or ("tool", chat index)

    @staticmethod
    def _emit(kind: str, **fields: Any) -> Event:
        return Event(data=orjson.dumps({"type": kind, **fields}).decode(), event=kind)

    def _begin(self) -> list[Event]:
        message: dict[str, Any] = {
            "id": _new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": self.request.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [self._emit("message_start", message=message)]

    def _error(self, message: str) -> Event:
        return MESSAGES.stream_error(message, "api_error", None)

    def _text(self, text: str) -> list[Event]:
        out: list[Event] = []
        if self._open != ("text", -1):
            out += self._close() + self._start({"type": "text", "text": ""})
            self._open = ("text", -1)
        delta = {"type": "text_delta", "text": text}
        return [*out, self._emit("content_block_delta", index=self._blocks - 1, delta=delta)]

    def _call(self, index: int, call_id: str | None, name: str) -> list[Event]:
        block = {"type": "tool_use", "id": call_id or _new_id("toolu"), "name": name, "input": {}}
        out = self._close() + self._start(block)
        self._open = ("tool", index)
        return out

    def _arguments(self, index: int, arguments: str) -> list[Event]:
        if self._open != ("tool", index):
            raise AnswerInvalid(f"chat stream: tool call {index} continues after another block began")
        if not arguments:
            return []
        delta = {"type": "input_json_delta", "partial_json": arguments}
        return [self._emit("content_block_delta", index=self._blocks - 1, delta=delta)]

    def _start(self, block: dict[str, Any]) -> list[Event]:
        self._blocks += 1
        return [self._emit("content_block_start", index=self._blocks - 1, content_block=block)]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        return [self._emit("content_block_stop", index=self._blocks - 1)]

    def _complete(self) -> list[Event]:
        stop = "tool_use" if self._calls else _STOP.get(self._finish or "stop", "end_turn")
        return self._close() + [
            self._emit(
                "message_delta",
                delta={"stop_reason": stop, "stop_sequence": None},
                usage={"output_tokens": self._usage.get("completion_tokens", 0)},
            ),
            self._emit("message_stop"),
        ]


class MessagesTranslator(Translator):
    """The Translator the pipeline uses (see protocols/base.py)."""

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return to_chat(body)

    def from_chat(self, doc: dict[str, Any], request: dict[str, Any] | None = None) -> dict[str, Any]:
        return from_chat(doc, request or {})

    def stream_from_chat(self, request: dict[str, Any] | None = None) -> MessagesFromChat:
        return MessagesFromChat(request or {})

    def count_tokens(self, body: dict[str, Any]) -> dict[str, Any]:
        """An estimate for `/v1/messages/count_tokens` when the upstream cannot count: ~4 bytes a
        token over the chat request gatekeeper would send (the gated tools included)."""
        chat = to_chat(body | {"stream": False})
        size = len(orjson.dumps({k: chat[k] for k in ("messages", "tools") if k in chat}))
        return {"input_tokens": max(1, size // 4)}
