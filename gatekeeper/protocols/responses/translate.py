"""Responses API <-> Chat Completions, for upstreams that speak only chat (llama.cpp's server).

`to_chat` turns a gated Responses request into a chat request; `from_chat` a chat answer into a
Responses answer; `ResponsesFromChat` a chat stream into Responses stream events. What chat cannot
express (stored state via `previous_response_id`, custom and MCP tools, a tool choice forcing a
built-in) is refused with RequestInvalid naming the field. A built-in tool the tier admits
(`web_search`, `file_search`, ...: what the upstream itself would run, or a call only a Responses
model emits) is left out of the chat request instead (`untranslated` names them, the pipeline logs
them): a chat model has no way to call one, so leaving it out takes nothing from the model that
the upstream could have served, and a client that offers one by default (Codex offers
`web_search`) keeps working. Enforcement runs after translation, on the Responses answer the
client will read.

Namespaced functions (a `namespace` tool's functions, as Codex sends them) become chat functions
named `<namespace>__<function>`, and a chat call to such a name comes back as a `function_call`
item with `namespace` and `name` set. The mapping is built from the request's own tools, so a
call maps back only to a function the request offered; a request where two tools would get the
same chat name (a function literally named `crm__read` next to namespace `crm`'s `read`) is
refused rather than guessed.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import orjson

from gatekeeper.errors import RequestInvalid
from gatekeeper.observe.redact import new_id
from gatekeeper.protocols.base import Event, Translator
from gatekeeper.protocols.chat.read import ChatAnswer, FromChatStream, read_answer, text_of
from gatekeeper.protocols.responses.codec import CODEC as RESPONSES
from gatekeeper.protocols.responses.gate import effort_of
from gatekeeper.rules.tools import builtin_family

_STATEFUL = ("previous_response_id", "conversation", "background")
_PASSED = ("model", "temperature", "top_p", "user", "parallel_tool_calls", "stream", "top_logprobs")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    for key in _STATEFUL:
        if body.get(key):
            raise RequestInvalid(f"'{key}' needs server-side state that a chat-only upstream does not keep")
    chat: dict[str, Any] = {k: body[k] for k in _PASSED if body.get(k) is not None}
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": text_of(body["instructions"], "instructions")})
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise RequestInvalid("'input' must be a string or an array")
    for i, item in enumerate(items):
        _add_item(messages, item, f"input[{i}]")
    chat["messages"] = messages
    if body.get("tools") and (tools := _chat_tools(body["tools"])):
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if choice is not None:
        _set_choice(chat, choice)
    if "tools" not in chat:  # none, or only built-ins left out: nothing for a choice to choose
        if chat.get("tool_choice") == "required":
            raise RequestInvalid("tool_choice 'required' needs a function tool: a chat-only upstream runs no built-in")
        chat.pop("tool_choice", None)
        chat.pop("parallel_tool_calls", None)
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    effort = effort_of(body)  # the one the gate used: the last configuration_update's, if any
    if effort is not None:
        chat["reasoning_effort"] = effort
    text = body.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        fmt = text["format"]
        if fmt.get("type") == "json_schema":
            chat["response_format"] = {
                "type": "json_schema",
                "json_schema": {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt},
            }
        elif fmt.get("type") == "json_object":
            chat["response_format"] = {"type": "json_object"}
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat


def _add_item(messages: list[dict[str, Any]], item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise RequestInvalid(f"{where} must be an object")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise RequestInvalid(f"{where}.role must be user, assistant, system or developer, got {role!r}")
        messages.append(
            {
                "role": "system" if role == "developer" else role,
                "content": _content(item.get("content"), f"{where}.content"),
            }
        )
    elif kind == "function_call":
        name = item.get("name")
        if item.get("namespace") is not None and isinstance(name, str):
            name = chat_name(item["namespace"], name)
        call = {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": name, "arguments": item.get("arguments", "")},
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        messages.append(
            {
                "role": "tool",
                "tool_call_id": item.get("call_id"),
                "content": output if isinstance(output, str) else text_of(output, f"{where}.output"),
            }
        )
    elif kind == "reasoning":
        return  # the chat upstream cannot take reasoning items back; they carry no instruction
    elif kind == "configuration_update" and set(item) <= {"type", "id", "reasoning"}:
        return  # its effort is the request's `reasoning_effort` (effort_of); a text format is not
    else:
        raise RequestInvalid(f"{where} of type {kind!r} cannot be sent to a chat-only upstream")


def _content(content: Any, where: str) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestInvalid(f"{where} must be a string or an array")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part.get("refusal", "")})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise RequestInvalid(f"{where}[{i}] of type {kind!r} cannot be sent to a chat-only upstream")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


NAMESPACE_SEPARATOR = "__"


def chat_name(namespace: str, name: str) -> str:
    """The chat function name of a namespaced function."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}"


def namespaced_names(tools: Any) -> dict[str, tuple[str, str]]:
    """chat name -> (namespace, function) for the namespaced functions of a Responses `tools`
    list (the answer side maps calls back with it)."""
    found: dict[str, tuple[str, str]] = {}
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    found[chat_name(tool["name"], inner["name"])] = (tool["name"], inner["name"])
    return found


def untranslated(body: dict[str, Any]) -> list[str]:
    """The built-in tools of a gated request that its chat translation leaves out (by type)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    return [t["type"] for t in tools if isinstance(t, dict) and t.get("type") != "function" and _is_builtin(t)]


def _is_builtin(tool: dict[str, Any]) -> bool:
    kind = tool.get("type")
    return isinstance(kind, str) and builtin_family(kind) is not None


def _chat_tools(tools: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind == "function":
            out.append(_function_tool(tool, f"tools[{i}]"))
            continue
        if _is_builtin(tool):
            continue  # a chat model cannot call it: left out (see the module docstring)
        if kind == "namespace":
            for j, inner in enumerate(tool.get("tools") or []):
                function = _function_tool(inner, f"tools[{i}].tools[{j}]")
                function["function"]["name"] = chat_name(tool["name"], inner["name"])
                out.append(function)
        else:
            out.append(_function_tool(tool, f"tools[{i}]"))
    counts = Counter(t["function"]["name"] for t in out)  # linear: a request may offer 50,000 tools
    twice = sorted(n for n, k in counts.items() if k > 1)
    if twice:
        raise RequestInvalid(
            f"tools: {twice} would name two different tools in chat (a namespaced function becomes "
            f"'<namespace>{NAMESPACE_SEPARATOR}<function>'); rename one"
        )
    return out


def _function_tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise RequestInvalid(
            f"{where} of type {tool.get('type')!r} cannot be sent to a chat-only upstream "
            "(only function tools translate)"
        )
    function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
    for key in ("description", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _target(entry: dict[str, Any]) -> Any:
    """The chat name of a function a tool_choice (or allowed_tools entry) designates."""
    name = entry.get("name")
    namespace = entry.get("namespace")
    return chat_name(namespace, name) if isinstance(namespace, str) and isinstance(name, str) else name


def _set_choice(chat: dict[str, Any], choice: Any) -> None:
    if isinstance(choice, str):
        chat["tool_choice"] = choice
    elif choice.get("type") == "function":
        chat["tool_choice"] = {"type": "function", "function": {"name": _target(choice)}}
    elif choice.get("type") == "allowed_tools":
        # Chat servers rarely know allowed_tools: offer only the allowed ones instead.
        names = {_target(t) for t in choice.get("tools", [])}
        chat["tools"] = [t for t in chat.get("tools", []) if t["function"]["name"] in names]
        chat["tool_choice"] = choice.get("mode", "auto")
        if not chat["tools"]:
            chat.pop("tools")
            chat["tool_choice"] = "none"
    else:
        raise RequestInvalid(f"tool_choice of type {choice.get('type')!r} cannot be sent to a chat-only upstream")


# -- answers -------------------------------------------------------------------------------


def _new_id(prefix: str) -> str:
    return f"{prefix}_{new_id(96)}"


def _usage(usage: dict[str, int]) -> dict[str, Any]:
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


_PART_TEXT = {"output_text": "text", "refusal": "refusal"}  # a part's type -> its text field


def _part(kind: str, text: str = "") -> dict[str, Any]:
    if kind == "refusal":
        return {"type": "refusal", "refusal": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str, status: str = "completed", refusal: str | None = None) -> dict[str, Any]:
    """An assistant message: its text, and the model's refusal (chat's `refusal`) as its own part."""
    parts = [_part("output_text", text)] if text or not refusal else []
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": parts + ([_part("refusal", refusal)] if refusal else []),
    }


def _call_item(
    item_id: str,
    call_id: str,
    name: str,
    arguments: str,
    status: str = "completed",
    namespaced: dict[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
    if namespaced and name in namespaced:  # a chat name of a namespaced function: mapped back
        item["namespace"], item["name"] = namespaced[name]
    return item


def _response(
    request: dict[str, Any],
    response_id: str,
    output: list[dict[str, Any]],
    status: str,
    usage: dict[str, Any] | None,
    created: int,
) -> dict[str, Any]:
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request.get("model"),
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": False,
        "temperature": request.get("temperature", 1.0),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools", []),
        "top_p": request.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage,
        "metadata": request.get("metadata") or {},
    }


def from_chat(doc: Any, request: dict[str, Any]) -> dict[str, Any]:
    answer: ChatAnswer = read_answer(doc)
    output = []
    if answer.text or answer.refusal:
        output.append(_message_item(_new_id("msg"), answer.text or "", refusal=answer.refusal))
    namespaced = namespaced_names(request.get("tools"))
    for call in answer.calls:
        output.append(_call_item(_new_id("fc"), call.id, call.name, call.arguments, namespaced=namespaced))
    status = "incomplete" if answer.finish_reason == "length" else "completed"
    request = request if request.get("model") else request | {"model": answer.model}
    return _response(request, _new_id("resp"), output, status, _usage(answer.usage), int(time.time()))


class ResponsesFromChat(FromChatStream):
    """Chat stream events in, Responses stream events out (created, in_progress, item events,
    completed); the shared reading is FromChatStream's."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__(request)
        self._namespaced = namespaced_names(request.get("tools"))
        self.id = _new_id("resp")
        self.created = int(time.time())
        self._sequence = 0
        self._output: list[dict[str, Any]] = []  # items in output order, as they stand
        self._message: int | None = None  # output index of the open message item
        self._positions: dict[int, int] = {}  # chat tool-call index -> output index

    def _emit(self, kind: str, **fields: Any) -> Event:
        doc = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return Event(data=orjson.dumps(doc).decode(), event=kind)

    def _snapshot(self, status: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        return _response(self.request, self.id, list(self._output), status, usage, self.created)

    def _begin(self) -> list[Event]:
        return [
            self._emit("response.created", response=self._snapshot("in_progress")),
            self._emit("response.in_progress", response=self._snapshot("in_progress")),
        ]

    def _error(self, message: str) -> Event:
        return RESPONSES.stream_error(message, "upstream_error", "upstream_error", self._sequence)

    def _text(self, text: str) -> list[Event]:
        return self._part_delta("output_text", text)

    def _refusal(self, text: str) -> list[Event]:
        return self._part_delta("refusal", text)

    def _part_delta(self, kind: str, text: str) -> list[Event]:
        """Text for the open message's one part, of `kind` (a message of another kind is closed
        first: each message the converter opens holds one part, text or refusal)."""
        out = self._close_message() if self._message is not None and self._kind() != kind else []
        out += self._open_message(kind) if self._message is None else []
        item = self._output[self._message]  # type: ignore[index]
        item["content"][0][_PART_TEXT[kind]] += text
        at = {"item_id": item["id"], "output_index": self._message, "content_index": 0}
        if kind == "refusal":
            return [*out, self._emit("response.refusal.delta", **at, delta=text)]
        return [*out, self._emit("response.output_text.delta", **at, delta=text, logprobs=[])]

    def _kind(self) -> str:
        kind: str = self._output[self._message]["content"][0]["type"]  # type: ignore[index]
        return kind

    def _call(self, index: int, call_id: str | None, name: str) -> list[Event]:
        out = self._close_message()
        self._positions[index] = len(self._output)
        item = _call_item(_new_id("fc"), call_id or _new_id("call"), name, "", "in_progress", self._namespaced)
        self._output.append(item)
        return [*out, self._emit("response.output_item.added", output_index=self._positions[index], item=item)]

    def _arguments(self, index: int, arguments: str) -> list[Event]:
        if not arguments:
            return []
        item = self._output[self._positions[index]]
        item["arguments"] += arguments
        return [
            self._emit(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=self._positions[index],
                delta=arguments,
            )
        ]

    def _open_message(self, kind: str) -> list[Event]:
        self._message = len(self._output)
        item = _message_item(_new_id("msg"), "", "in_progress")
        item["content"] = [_part(kind)]
        self._output.append(item)
        return [
            self._emit("response.output_item.added", output_index=self._message, item=item | {"content": []}),
            self._emit(
                "response.content_part.added",
                item_id=item["id"],
                output_index=self._message,
                content_index=0,
                part=_part(kind),
            ),
        ]

    def _close_message(self) -> list[Event]:
        if self._message is None:
            return []
        index, self._message = self._message, None
        item = self._output[index]
        item["status"] = "completed"
        part = item["content"][0]
        at = {"item_id": item["id"], "output_index": index, "content_index": 0}
        done = (
            self._emit("response.refusal.done", **at, refusal=part["refusal"])
            if part["type"] == "refusal"
            else self._emit("response.output_text.done", **at, text=part["text"], logprobs=[])
        )
        return [
            done,
            self._emit("response.content_part.done", **at, part=part),
            self._emit("response.output_item.done", output_index=index, item=item),
        ]

    def _complete(self) -> list[Event]:
        out = self._close_message()
        for index in self._positions.values():
            item = self._output[index]
            item["status"] = "completed"
            out += [
                self._emit(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                ),
                self._emit("response.output_item.done", output_index=index, item=item),
            ]
        status = "incomplete" if self._finish == "length" else "completed"
        out.append(self._emit(f"response.{status}", response=self._snapshot(status, _usage(self._usage))))
        return out


class ResponsesTranslator(Translator):
    """The Translator the pipeline uses (see protocols/base.py); `request` is the gated client
    request, which lets the answer echo its instructions, tools and model (optional)."""

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return to_chat(body)

    def untranslated(self, body: dict[str, Any]) -> list[str]:
        return untranslated(body)

    def from_chat(self, doc: dict[str, Any], request: dict[str, Any] | None = None) -> dict[str, Any]:
        return from_chat(doc, request or {})

    def stream_from_chat(self, request: dict[str, Any] | None = None) -> ResponsesFromChat:
        return ResponsesFromChat(request or {})
