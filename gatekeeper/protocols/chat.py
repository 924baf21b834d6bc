"""The OpenAI Chat Completions codec (`POST /v1/chat/completions`).

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
  * kept calls are renumbered so the client sees contiguous indexes.
"""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import AnswerIncomplete, AnswerInvalid, RequestInvalid
from gatekeeper.gating import Gated, ToolId, ToolKind, ToolPolicy, builtin_family, gate_request, tool_name
from gatekeeper.protocols import fields as F
from gatekeeper.protocols.base import Allowed, Call, Enforced, Event, Offered, RequestInfo
from gatekeeper.protocols.enforce import allowed, settle
from gatekeeper.tiers import Tier

_MARKERS = (b"tool_calls", b"function_call")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def loads(raw: bytes | str, what: str) -> Any:
    """Strict JSON (orjson: no NaN/Infinity, valid UTF-8 only)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise AnswerInvalid(f"{what} is not valid JSON: {exc}") from None


def _template_effort(body: dict[str, Any], effort: str | None) -> str | None:
    """The effort a request really runs at. Servers such as vLLM let `chat_template_kwargs`
    override the top-level field (`reasoning_effort` for gpt-oss templates; `enable_thinking` /
    `thinking` false turn reasoning off, effort `none`): the tier must be the one of that effort,
    so a template effort is the request's effort, and one that contradicts `reasoning_effort` is
    refused (a high effort's tier for a low-effort run)."""
    kwargs = body.get("chat_template_kwargs")
    if not isinstance(kwargs, dict):
        return effort
    implied = kwargs.get("reasoning_effort")
    if implied is not None and (not isinstance(implied, str) or not implied or "@" in implied):
        raise RequestInvalid("'chat_template_kwargs.reasoning_effort' must be a non-empty string without '@'")
    for key in ("enable_thinking", "thinking"):
        # Only true and false are read here; a template may take 0, "" or "false" for off.
        if kwargs.get(key) is not None and not isinstance(kwargs[key], bool):
            raise RequestInvalid(f"'chat_template_kwargs.{key}' must be true or false")
    off = [k for k in ("enable_thinking", "thinking") if kwargs.get(k) is False]
    if off and implied not in (None, "none"):
        raise RequestInvalid(
            f"'chat_template_kwargs.{off[0]}' false (no reasoning) contradicts "
            f"'chat_template_kwargs.reasoning_effort' {implied[:32]!r}"
        )
    implied = implied or ("none" if off else None)
    if implied is None or effort == implied:
        return effort
    if effort is not None:
        where = "reasoning_effort" if "reasoning_effort" in kwargs else f"{off[0]}: false"
        raise RequestInvalid(
            f"'chat_template_kwargs.{where}' contradicts 'reasoning_effort' {effort[:32]!r}: the server "
            f"would run at effort {implied[:32]!r}; send one effort, in 'reasoning_effort'"
        )
    return implied


class ChatCodec:
    name = "chat"
    upstream_path = "/chat/completions"
    markers: tuple[bytes, ...] = _MARKERS
    plain_types: frozenset[bytes] | None = (
        None  # a chat answer's calls are its `tool_calls` / `function_call`: the markers
    )

    def parse(self, body: dict[str, Any]) -> RequestInfo:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestInvalid("'model' is required and must be a non-empty string")
        effort = body.get("reasoning_effort")
        if effort is not None and (not isinstance(effort, str) or not effort):
            raise RequestInvalid("'reasoning_effort' must be a non-empty string")
        if effort is not None and "@" in effort:
            raise RequestInvalid("'reasoning_effort' must not contain '@'")
        if not isinstance(body.get("messages"), list):
            raise RequestInvalid("'messages' is required and must be an array")
        stream = body.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise RequestInvalid("'stream' must be a boolean")
        return RequestInfo(model, _template_effort(body, effort), bool(stream))

    def gate(self, body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
        check_request(body, policy.unknown_fields)
        gated = gate_request(body, tier, policy)
        if body.get("web_search_options") is not None:
            # It switches on the search models' built-in web search: gated as that built-in.
            search = ToolId.builtin("web_search")
            if policy.allows(tier, search):
                gated.kept.append(search.name)
            else:
                del body["web_search_options"]
                gated.hidden.append(search.name)
        return gated

    def offered(self, body: dict[str, Any]) -> Offered:
        tools: list[tuple[ToolId, dict[str, Any] | None]] = []
        for tool in body.get("tools") or []:
            kind = tool.get("type", "function")
            if kind in ("function", "custom"):
                make = ToolId.function if kind == "function" else ToolId.custom
                tools.append((make(tool_name(tool, "tools[]")), _schema(tool.get(kind))))
            else:
                tools.append((ToolId.builtin(kind), None))  # chat answers carry no call to one
        for function in body.get("functions") or []:
            tools.append((ToolId.function(function["name"]), _schema(function)))
        return Offered(tools)

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        allow = allowed(offered)
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

    def stream_filter(self, offered: Allowed | Offered) -> ChatStreamFilter:
        return ChatStreamFilter(offered)

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "code": code}}

    def stream_error(self, message: str, kind: str, code: str | None) -> Event:
        # openai-python and -node raise APIError on a chunk with an `error` member.
        return Event(orjson.dumps(self.error_body(0, message, kind, code)).decode())


def _schema(function: Any) -> dict[str, Any] | None:
    schema = function.get("parameters") if isinstance(function, dict) else None
    return schema if isinstance(schema, dict) else None


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
        fate = settle((Call(name, arguments, tool is not None and allow.admits(tool)), tool), result, allow)
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
        if keep:
            message["tool_calls"] = keep
        else:
            del message["tool_calls"]
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
        and "function_call" not in message
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


# -- request fields (the allowlists are in protocols/fields.py) -----------------------------------


def check_request(body: dict[str, Any], unknown: str) -> None:
    """Every field of a chat request, its messages, tools and tool choice is one the chat tables
    know (else refused, or dropped when `unknown` is "drop"); raises RequestInvalid."""
    F.check(body, F.CHAT_REQUEST, "", unknown)
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            raise RequestInvalid(f"messages[{i}] must be an object, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or role not in F.CHAT_MESSAGE:
            raise RequestInvalid(f"messages[{i}].role must be one of {sorted(F.CHAT_MESSAGE)}")
        F.check(message, F.CHAT_MESSAGE[role], f"messages[{i}]", unknown)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise RequestInvalid(f"'chat_template_kwargs' must be an object, got {type(kwargs).__name__}")
        F.check(kwargs, F.CHAT_TEMPLATE_KWARGS, "chat_template_kwargs", unknown)
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        _check_tool(tool, f"tools[{i}]", unknown)
    functions = body.get("functions")
    for i, function in enumerate(functions if isinstance(functions, list) else []):
        if isinstance(function, dict):
            F.check(function, F.CHAT_LEGACY_FUNCTION, f"functions[{i}]", unknown)
    legacy = body.get("function_call")
    if isinstance(legacy, dict):
        F.check(legacy, F.CHAT_NAMED, "function_call", unknown)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = F.check_typed(choice, F.CHAT_TOOL_CHOICE, "tool_choice", unknown)
        inner = choice.get(kind)
        if kind == "allowed_tools" and isinstance(inner, dict):
            F.check(inner, F.CHAT_ALLOWED_TOOLS, "tool_choice.allowed_tools", unknown)
            entries = inner.get("tools")
            for i, tool in enumerate(entries if isinstance(entries, list) else []):
                _check_tool(tool, f"tool_choice.allowed_tools.tools[{i}]", unknown)
        elif isinstance(inner, dict):
            F.check(inner, F.CHAT_NAMED, f"tool_choice.{kind}", unknown)


def _check_tool(tool: Any, where: str, unknown: str) -> None:
    if not isinstance(tool, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(tool).__name__}")
    kind = tool.get("type", "function")
    if isinstance(kind, str) and builtin_family(kind) is not None:
        # A typed built-in some chat servers take (as Responses or Messages define it): its own
        # fields, gated by its type.
        table = F.RESPONSES_TOOL.get(kind) or F.MESSAGES_TOOL.get(kind) or {"type": F.GATED}
        F.check(tool, table, where, unknown)
        fixed = F.MESSAGES_BUILTIN_NAMES.get(kind)
        if "name" in tool and tool["name"] != fixed:
            raise RequestInvalid(f"{where}.name must be {fixed!r} for a {kind!r} tool (its name is fixed)")
        return
    kind = F.check_typed(tool, F.CHAT_TOOL, where, unknown, default="function")
    inner = tool.get(kind)
    if isinstance(inner, dict):
        F.check(inner, F.CHAT_FUNCTION if kind == "function" else F.CHAT_CUSTOM, f"{where}.{kind}", unknown)


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
        self.allow = allowed(offered)
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

    def feed(self, event: Event) -> list[Event]:
        if self.done:
            return []  # clients stop reading at [DONE]; whatever follows is not theirs
        data = event.data
        if data.startswith("[DONE]"):
            self.done = True
            return [Event("[DONE]")]
        # Fast path: no marker and no escape that could spell one: it cannot carry a call. (A
        # structured answer's chunks are all read: where an explanation goes depends on its text.)
        if (
            "tool_calls" not in data
            and "function_call" not in data
            and "\\u" not in data
            and "\x00" not in data
            and not self.allow.structured
        ):
            return [event]
        doc = loads(data, "upstream stream event")
        for choice in _choices(doc, "upstream stream event"):
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
        return CODEC.stream_error(message, kind, code)

    def _choice(self, choice: dict[str, Any]) -> None:
        ci = choice.get("index", 0)
        if not _is_int(ci):
            raise AnswerInvalid("upstream stream event: 'choices[].index' must be an integer")
        _refuse_calls_in(choice.get("message"), "a stream event's 'message'")
        delta = choice.get("delta")
        if delta is None:
            return  # clients accumulate deltas only
        if not isinstance(delta, dict):
            raise AnswerInvalid("upstream stream event: 'choices[].delta' must be an object")
        calls = delta.get("tool_calls")
        if calls is not None:
            _check_calls(calls, "choices[].delta.tool_calls", "upstream stream event")
            kept = []
            for call in calls:
                out = self._call(ci, call)
                if out is not None:
                    kept.append(out)
            if kept:
                delta["tool_calls"] = kept
            else:
                del delta["tool_calls"]
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
        if key not in self._index:
            self._decided.add(ci)
            shown = str(tool) if tool is not None else name or ""
            call = Call(shown, arguments if isinstance(arguments, str) else None, bool(name) and self._admits(tool))
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
        return tool is not None and self.allow.admits(tool)


CODEC = ChatCodec()
