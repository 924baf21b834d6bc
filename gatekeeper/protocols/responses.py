"""The OpenAI Responses API codec (`POST /v1/responses`).

How this protocol carries tools, and what gatekeeper calls each one (the name `tools.required_tier`
rules match):
  * `function` / `custom` tools: their `name`; inside a `namespace` tool: `namespace.name`;
  * `mcp` tools: the server's `server_label` gates the whole server; each entry of its
    `allowed_tools` is gated as `server_label.tool` (a server without `allowed_tools` is gated
    as a whole: name its tools there to gate them one by one);
  * every other (built-in) tool: its `name` when it has one, else its `type` (`web_search`,
    `file_search`, `code_interpreter`, `computer_use_preview`, `image_generation`, `local_shell`...).

Answers carry calls as `output` items (`function_call`, `custom_tool_call`, `mcp_call`,
`web_search_call`, ...). An item that calls a tool the gated request did not offer is removed;
so is an item of a type this codec does not know (it cannot tell whether it is a call). Streams
are read event by event (each event names its `output_index`); the events of a removed item are
dropped and later indexes renumbered, so the client's accumulation stays consistent.
"""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import AnswerInvalid, RequestInvalid, ToolChoiceBlocked
from gatekeeper.gating import Gated, ToolPolicy
from gatekeeper.protocols.base import Call, Enforced, Event, RequestInfo
from gatekeeper.tiers import Tier

# Output item types that carry no call (a message, reasoning, or the output of an earlier call).
_NOT_CALLS = frozenset(
    {
        "message",
        "reasoning",
        "compaction",
        "additional_tools",
        "function_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "custom_tool_call_output",
        "mcp_approval_response",
        "tool_search_output",
        "program_output",
    }
)
# Built-in call item type -> the tool types that offer it (a tool type starting with one of them:
# `web_search` covers `web_search_preview` and dated variants such as `web_search_2025_08_26`).
_BUILTIN_CALLS: dict[str, tuple[str, ...]] = {
    "web_search_call": ("web_search",),
    "file_search_call": ("file_search",),
    "code_interpreter_call": ("code_interpreter",),
    "computer_call": ("computer",),
    "image_generation_call": ("image_generation",),
    "local_shell_call": ("local_shell",),
    "shell_call": ("shell",),
    "apply_patch_call": ("apply_patch",),
    "tool_search_call": ("tool_search",),
    "program": ("programmatic_tool_calling",),
}
# Events about the whole response: their `response.output` is enforced like a plain answer.
_RESPONSE_EVENTS = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "response.queued",
    }
)
_MCP_ANY = ".*"  # offered-key suffix: every tool of an MCP server offered without allowed_tools


class ResponsesCodec:
    name = "responses"
    upstream_path = "/responses"
    # Every call item type spells one of these (`function_call`, `web_search_call`, `mcp_call`,
    # `mcp_list_tools`, `program`, ...): an answer with none of them is relayed unparsed.
    markers: tuple[bytes, ...] = (b"_call", b"mcp", b"program", b"tool")

    # -- requests ---------------------------------------------------------------------------

    def parse(self, body: dict[str, Any]) -> RequestInfo:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestInvalid("'model' is required and must be a non-empty string")
        reasoning = body.get("reasoning")
        effort = None
        if reasoning is not None:
            if not isinstance(reasoning, dict):
                raise RequestInvalid(f"'reasoning' must be an object, got {type(reasoning).__name__}")
            effort = reasoning.get("effort")
            if effort is not None and (not isinstance(effort, str) or not effort):
                raise RequestInvalid("'reasoning.effort' must be a non-empty string")
        if "input" in body and not isinstance(body["input"], (str, list)):
            raise RequestInvalid("'input' must be a string or an array")
        stream = body.get("stream", False)
        if not isinstance(stream, bool) and stream is not None:
            raise RequestInvalid("'stream' must be a boolean")
        return RequestInfo(model=model, effort=effort, stream=bool(stream))

    def gate(self, body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
        if body.get("prompt") is not None:
            # A stored prompt can bring its own tools, which gatekeeper cannot see: refuse it.
            raise RequestInvalid(
                "'prompt' (a stored prompt template) may carry tools gatekeeper cannot gate; "
                "send the instructions and tools in the request instead"
            )
        gated = Gated()
        tools = body.get("tools")
        kept: list[Any] = []
        if tools is not None:
            if not isinstance(tools, list):
                raise RequestInvalid(f"'tools' must be an array, got {type(tools).__name__}")
            for i, tool in enumerate(tools):
                narrowed = _gate_tool(tool, f"tools[{i}]", tier, policy, gated)
                if narrowed is not None:
                    kept.append(narrowed)
        choice = body.get("tool_choice")
        new_choice = _gate_choice(choice, tier, policy, gated, bool(kept))
        if kept:
            body["tools"] = kept
        else:
            body.pop("tools", None)
            body.pop("parallel_tool_calls", None)  # OpenAI answers 400 to it without tools
        if new_choice is _DROP:
            body.pop("tool_choice", None)
        elif new_choice is not _KEEP:
            body["tool_choice"] = new_choice
        return gated

    def offered(self, body: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
        offered: dict[str, dict[str, Any] | None] = {}
        for tool in body.get("tools") or []:
            kind = tool.get("type")
            if kind in ("function", "custom"):
                offered[tool["name"]] = tool.get("parameters") if kind == "function" else None
            elif kind == "namespace":
                for inner in tool.get("tools") or []:
                    offered[f"{tool['name']}.{inner['name']}"] = inner.get("parameters")
            elif kind == "mcp":
                for name in _mcp_allowed_names(tool) or [_MCP_ANY[1:]]:
                    offered[f"{tool['server_label']}.{name}"] = None
            else:
                offered[tool.get("name") if isinstance(tool.get("name"), str) else kind] = None
        return offered

    # -- answers ----------------------------------------------------------------------------

    def enforce(self, doc: Any, offered: dict[str, dict[str, Any] | None]) -> Enforced:
        if not isinstance(doc, dict):
            raise AnswerInvalid(f"a Responses answer must be a JSON object, got {type(doc).__name__}")
        result = Enforced()
        _enforce_response(doc, offered, result)
        return result

    def stream_filter(self, offered: dict[str, dict[str, Any] | None]) -> ResponsesStreamFilter:
        return ResponsesStreamFilter(offered)

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def stream_error(self, message: str, kind: str, code: str | None) -> Event:
        # The Responses `error` event's own fields, plus an `error` object: openai-python raises
        # APIError on a streamed event whose data carries one.
        doc = {
            "type": "error",
            "code": code,
            "message": message,
            "param": None,
            "error": {"type": kind, "code": code, "message": message},
        }
        return Event(data=orjson.dumps(doc).decode(), event="error")


# -- request gating ------------------------------------------------------------------------

_KEEP, _DROP = object(), object()


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise RequestInvalid(f"{where} must be a non-empty string")
    return value


def _gating_name(tool: dict[str, Any], where: str) -> str:
    """The name a (non-MCP) tool is gated by: function/custom by name, built-ins by name or type."""
    kind = _name(tool.get("type"), f"{where}.type")
    if kind in ("function", "custom"):
        return _name(tool.get("name"), f"{where}.name")
    name = tool.get("name")
    return name if isinstance(name, str) and name else kind


def _gate_tool(tool: Any, where: str, tier: Tier, policy: ToolPolicy, gated: Gated) -> Any:
    """The tool as the model may see it (narrowed), or None when it is hidden."""
    if not isinstance(tool, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(tool).__name__}")
    kind = _name(tool.get("type"), f"{where}.type")
    if kind == "mcp":
        return _gate_mcp(tool, where, tier, policy, gated)
    if kind == "namespace":
        namespace = _name(tool.get("name"), f"{where}.name")
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise RequestInvalid(f"{where}.tools must be an array")
        kept = []
        for i, item in enumerate(inner):
            if not isinstance(item, dict):
                raise RequestInvalid(f"{where}.tools[{i}] must be an object")
            full = f"{namespace}.{_name(item.get('name'), f'{where}.tools[{i}].name')}"
            if policy.allows(tier, full):
                kept.append(item)
                gated.kept.append(full)
            else:
                gated.hidden.append(full)
        return tool | {"tools": kept} if kept else None
    name = _gating_name(tool, where)
    if policy.allows(tier, name):
        gated.kept.append(name)
        return tool
    gated.hidden.append(name)
    return None


def _mcp_allowed_names(tool: dict[str, Any]) -> list[str] | None:
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, dict):
        allowed = allowed.get("tool_names")
    return allowed if isinstance(allowed, list) else None


def _gate_mcp(tool: dict[str, Any], where: str, tier: Tier, policy: ToolPolicy, gated: Gated) -> Any:
    label = _name(tool.get("server_label"), f"{where}.server_label")
    if not policy.allows(tier, label):
        gated.hidden.append(label)
        return None
    allowed = tool.get("allowed_tools")
    if allowed is None:
        gated.kept.append(label)
        return tool
    names = _mcp_allowed_names(tool)
    if names is None:
        if isinstance(allowed, dict) and set(allowed) <= {"read_only"}:
            gated.kept.append(label)  # a filter on read-only-ness alone names no tool
            return tool
        raise RequestInvalid(f"{where}.allowed_tools must be an array of names or {{'tool_names': [...]}}")
    kept = []
    for i, name in enumerate(names):
        full = f"{label}.{_name(name, f'{where}.allowed_tools[{i}]')}"
        if policy.allows(tier, full):
            kept.append(name)
            gated.kept.append(full)
        else:
            gated.hidden.append(full)
    if not kept:
        return None  # an empty allowed_tools list would mean "every tool" to some servers
    if len(kept) == len(names):
        return tool
    return tool | {"allowed_tools": kept if isinstance(allowed, list) else allowed | {"tool_names": kept}}


def _blocked(name: str, tier: Tier, policy: ToolPolicy) -> ToolChoiceBlocked:
    return ToolChoiceBlocked(name, policy.required_tier(name), tier)


def _all_hidden(gated: Gated, tier: Tier, policy: ToolPolicy, what: str) -> ToolChoiceBlocked:
    names = ",".join(gated.hidden) or "(no tools offered)"
    required = max((policy.required_tier(n) for n in gated.hidden), key=lambda t: t.rank, default=tier)
    exc = ToolChoiceBlocked(names, required, tier)
    exc.args = (
        f"tool_choice {what} demands a tool call, but every offered tool is hidden at tier {tier.value!r}: {names}",
    )
    return exc


def _choice_target(choice: dict[str, Any], where: str) -> str:
    """The gating name of a tool_choice (or allowed_tools entry) that designates one tool."""
    kind = _name(choice.get("type"), f"{where}.type")
    if kind == "mcp":
        label = _name(choice.get("server_label"), f"{where}.server_label")
        name = choice.get("name")
        return f"{label}.{name}" if isinstance(name, str) and name else label
    return _gating_name(choice, where)


def _gate_choice(choice: Any, tier: Tier, policy: ToolPolicy, gated: Gated, any_kept: bool) -> Any:
    """The tool_choice to send (_KEEP unchanged, _DROP removed, or a new value)."""
    if choice is None:
        return _KEEP
    if isinstance(choice, str):
        if choice == "required" and not any_kept and gated.hidden:
            raise _all_hidden(gated, tier, policy, "'required'")
        if choice not in ("auto", "none", "required"):
            raise RequestInvalid(f"'tool_choice' must be 'auto', 'none', 'required' or an object, got {choice!r}")
        return _KEEP if any_kept else _DROP
    if not isinstance(choice, dict):
        raise RequestInvalid(f"'tool_choice' must be a string or an object, got {type(choice).__name__}")
    if choice.get("type") == "allowed_tools":
        entries = choice.get("tools")
        if not isinstance(entries, list):
            raise RequestInvalid("'tool_choice.tools' must be an array")
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise RequestInvalid(f"'tool_choice.mode' must be 'auto' or 'required', got {mode!r}")
        kept, hidden = [], []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise RequestInvalid(f"tool_choice.tools[{i}] must be an object")
            target = _choice_target(entry, f"tool_choice.tools[{i}]")
            if policy.allows(tier, target):
                kept.append(entry)
            else:
                hidden.append(target)
        if kept and any_kept:
            return _KEEP if not hidden else choice | {"tools": kept}
        if mode == "required":
            names = ",".join(hidden) or "(none)"
            exc = ToolChoiceBlocked(
                names, max((policy.required_tier(n) for n in hidden), key=lambda t: t.rank, default=tier), tier
            )
            exc.args = (
                f"tool_choice allowed_tools (mode 'required') lists only tools hidden at tier {tier.value!r}: {names}",
            )
            raise exc
        # mode auto, nothing left to allow: the model may call none of them (not "any other tool").
        return "none" if any_kept else _DROP
    target = _choice_target(choice, "tool_choice")
    if not policy.allows(tier, target):
        raise _blocked(target, tier, policy)
    return _KEEP if any_kept else _DROP


# -- answer enforcement --------------------------------------------------------------------


def _call_key(item: dict[str, Any], offered: dict[str, dict[str, Any] | None]) -> tuple[str, bool] | None:
    """(name, offered?) for an item that calls a tool; None for an item that calls nothing."""
    kind = item.get("type")
    if not isinstance(kind, str):
        raise AnswerInvalid("an output item has no string 'type'")
    if kind in _NOT_CALLS or kind.endswith("_output"):
        return None
    if kind in ("function_call", "custom_tool_call"):
        name = item.get("name")
        if not isinstance(name, str):
            raise AnswerInvalid(f"a {kind} item has no string 'name'")
        namespace = item.get("namespace")
        if namespace is not None:
            if not isinstance(namespace, str):
                raise AnswerInvalid(f"a {kind} item's 'namespace' is not a string")
            name = f"{namespace}.{name}"
        return name, name in offered
    if kind in ("mcp_call", "mcp_approval_request", "mcp_list_tools"):
        label = item.get("server_label")
        name = item.get("name", "*") if kind != "mcp_list_tools" else "*"
        if not isinstance(label, str) or not isinstance(name, str):
            raise AnswerInvalid(f"an {kind} item has no string 'server_label' / 'name'")
        key = f"{label}.{name}"
        ok = key in offered or f"{label}{_MCP_ANY}" in offered
        if kind == "mcp_list_tools":  # listing a server's tools is fine when any of them was offered
            ok = any(k.startswith(f"{label}.") for k in offered)
        return key, ok
    families = _BUILTIN_CALLS.get(kind)
    if families is None:  # a type this codec does not know: it may be a call, so it goes
        return kind, False
    return kind, any(k.startswith(families) for k in offered)


def _arguments(item: dict[str, Any]) -> str | None:
    for field in ("arguments", "input"):
        value = item.get(field)
        if isinstance(value, str):
            return value
    return None


def _enforce_response(response: dict[str, Any], offered: dict[str, dict[str, Any] | None], result: Enforced) -> None:
    output = response.get("output")
    if output is None:
        return
    if not isinstance(output, list):
        raise AnswerInvalid(f"'output' must be an array, got {type(output).__name__}")
    kept = []
    for item in output:
        if not isinstance(item, dict):
            raise AnswerInvalid(f"an output item must be an object, got {type(item).__name__}")
        call = _call_key(item, offered)
        if call is None:
            kept.append(item)
            continue
        name, ok = call
        result.calls.append(Call(name=name, arguments=_arguments(item), offered=ok))
        if ok:
            kept.append(item)
        else:
            result.removed.append(name)
    if len(kept) != len(output):
        response["output"] = kept


class ResponsesStreamFilter:
    """Drops every event of a removed output item and renumbers `output_index` (and
    `sequence_number`) so the client sees a consistent stream. Every event is re-serialised from
    what was parsed, with `event:` set to the data's own `type`."""

    def __init__(self, offered: dict[str, dict[str, Any] | None]) -> None:
        self.offered = offered
        self.result = Enforced()
        self._index: dict[int, int | None] = {}  # upstream output_index -> client index (None: removed)
        self._items: dict[int, tuple[str, Any]] = {}  # upstream output_index -> (type, name) seen at 'added'
        self._next = 0
        self._sequence = 0

    def feed(self, event: Event) -> list[Event]:
        if event.data.strip() == "[DONE]":
            return [event]
        try:
            doc = orjson.loads(event.data)
        except orjson.JSONDecodeError as exc:
            raise AnswerInvalid(f"a Responses stream event is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise AnswerInvalid(f"a Responses stream event must be a JSON object, got {type(doc).__name__}")
        kind = doc.get("type")
        if not isinstance(kind, str):
            raise AnswerInvalid("a Responses stream event has no string 'type'")
        if "output_index" in doc:
            if not self._route(kind, doc):
                return []
        elif "item" in doc:
            raise AnswerInvalid(f"a {kind!r} event carries an item but no output_index")
        if isinstance(doc.get("response"), dict):
            scratch = Enforced()  # the stream's own decisions are the record; this only cleans the snapshot
            _enforce_response(doc["response"], self.offered, scratch)
        elif "response" in doc and doc["response"] is not None:
            raise AnswerInvalid(f"a {kind!r} event's 'response' is not an object")
        elif kind in _RESPONSE_EVENTS:
            raise AnswerInvalid(f"a {kind!r} event has no 'response' object")
        if "sequence_number" in doc:
            doc["sequence_number"] = self._sequence
        self._sequence += 1
        return [Event(data=orjson.dumps(doc).decode(), event=kind, id=event.id, retry=event.retry)]

    def _route(self, kind: str, doc: dict[str, Any]) -> bool:
        """Renumber an item-level event in place; False when it belongs to a removed item."""
        index = doc["output_index"]
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise AnswerInvalid(f"a {kind!r} event has an invalid output_index {index!r}")
        item = doc.get("item")
        if item is not None and not isinstance(item, dict):
            raise AnswerInvalid(f"a {kind!r} event's 'item' is not an object")
        if index not in self._index:
            if kind != "response.output_item.added" or item is None:
                raise AnswerInvalid(f"a {kind!r} event for output_index {index} came before its output_item.added")
            call = _call_key(item, self.offered)
            ok = True
            if call is not None:
                name, ok = call
                self.result.calls.append(Call(name=name, arguments=_arguments(item), offered=ok))
                if not ok:
                    self.result.removed.append(name)
            self._items[index] = (item["type"], item.get("name"))
            self._index[index] = self._next if ok else None
            if ok:
                self._next += 1
        elif kind == "response.output_item.added":
            raise AnswerInvalid(f"output_index {index} was added twice")
        else:
            self._check_same(kind, index, doc, item)
        client_index = self._index[index]
        if client_index is None:
            return False
        doc["output_index"] = client_index
        return True

    def _check_same(self, kind: str, index: int, doc: dict[str, Any], item: dict[str, Any] | None) -> None:
        """A later event must not retype or rename its item: the client would see the new name."""
        decided_type, decided_name = self._items[index]
        if item is not None:
            if (item.get("type"), item.get("name")) != (decided_type, decided_name):
                raise AnswerInvalid(
                    f"output_index {index} changed from {decided_type}/{decided_name} to "
                    f"{item.get('type')}/{item.get('name')} mid-stream"
                )
            call = _call_key(item, self.offered)  # the same name, but a changed server_label or namespace?
            if call is not None and (self._index[index] is None) == call[1]:
                raise AnswerInvalid(f"output_index {index} changed what it calls mid-stream")
        name = doc.get("name")
        if name is not None and name != decided_name:
            raise AnswerInvalid(f"a {kind!r} event names {name!r} for output_index {index} ({decided_name!r})")

    def finish(self) -> list[Event]:
        return []


CODEC = ResponsesCodec()
