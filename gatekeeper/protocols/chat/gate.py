"""Chat Completions request gating: the fields of a request checked against the allowlists
(protocols/chat/fields.py), then its tools gated. Pure: no I/O.

A request field that could carry tools is understood and gated, or refused (RequestInvalid):
`tools` (function, custom and typed built-in tools), legacy `functions`, every `tool_choice`
and `function_call` form, `parallel_tool_calls`, and tool lists nested in
`chat_template_kwargs` (which servers such as vLLM and llama.cpp render into the prompt).
"""

from __future__ import annotations

from typing import Any

from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.protocols import schema as S
from gatekeeper.protocols.builtin_tools import MESSAGES_BUILTIN_NAMES
from gatekeeper.protocols.chat import fields as F
from gatekeeper.protocols.gate import Gated, named_id, narrowed, nonempty, require_boolean, tool_id
from gatekeeper.protocols.memo import JsonChecked
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolKind, ToolPolicy, builtin_family


def _legacy_id(function: Any, where: str) -> ToolId:
    if not isinstance(function, dict) or nonempty(function.get("name")) is None:
        raise RequestInvalid(f"{where}.name must be a non-empty string")
    return ToolId.function(str(function["name"]))


_CHOICE_WORDS = frozenset({"none", "auto", "required", "any"})
_DEMANDS_A_CALL = frozenset({"required", "any"})


def gate_request(body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
    """Remove from `body` (in place) the tools above `tier`; drop tool fields left empty.

    Raises RequestInvalid for malformed tool fields and ToolChoiceBlocked when the tool choice
    forces a removed tool, or demands a call ("required", "any", an `allowed_tools` list in
    `required` mode) when every tool it could call was removed.
    """
    _refuse_nested_tools(body)
    require_boolean(body, "parallel_tool_calls")
    gated = Gated()
    narrows = policy.narrows()
    for field_name, choice_name, id_of in (
        ("tools", "tool_choice", tool_id),
        ("functions", "function_call", _legacy_id),
    ):
        items = body.get(field_name)
        hidden_here: list[ToolId] = []
        kept: list[Any] = []
        if items is not None:
            if not isinstance(items, list):
                raise RequestInvalid(f"'{field_name}' must be an array, got {type(items).__name__}")
            for i, item in enumerate(items):
                tool = id_of(item, f"{field_name}[{i}]")
                if policy.allows(tier, tool):
                    kept.append(_narrowed(item, field_name, tier, policy, tool) if narrows else item)
                    gated.kept.append(tool.name)
                else:
                    hidden_here.append(tool)
                    gated.hidden.append(tool.name)
        _gate_choice(body, choice_name, tier, policy, bool(items) and not kept, hidden_here)
        if items is not None and (
            len(kept) != len(items) or any(k is not i for k, i in zip(kept, items, strict=False))
        ):
            if kept:
                body[field_name] = kept
            else:
                # An empty `tools` array is rejected by several servers, and OpenAI answers 400 to
                # `parallel_tool_calls` without tools: drop the fields instead.
                del body[field_name]
                body.pop(choice_name, None)
                if field_name == "tools":
                    body.pop("parallel_tool_calls", None)
    return gated


def _narrowed(item: Any, field_name: str, tier: Tier, policy: ToolPolicy, tool: ToolId) -> Any:
    """A kept function with its `parameters` narrowed to what argument rules admit at `tier`."""
    if field_name == "functions":
        return narrowed(item, "parameters", tier, policy, tool)
    function = item.get("function") if tool.kind is ToolKind.FUNCTION else None
    if not isinstance(function, dict):
        return item
    found = narrowed(function, "parameters", tier, policy, tool)
    return item if found is function else {**item, "function": found}


def _gate_choice(
    body: dict[str, Any], where: str, tier: Tier, policy: ToolPolicy, none_left: bool, hidden: list[ToolId]
) -> None:
    choice = body.get(where)
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in _CHOICE_WORDS:
            raise RequestInvalid(f"'{where}' must be one of {sorted(_CHOICE_WORDS)} or an object, got {choice!r}")
        if choice in _DEMANDS_A_CALL and none_left:
            _blocked(hidden, tier, policy)
        return
    if not isinstance(choice, dict):
        raise RequestInvalid(f"'{where}' must be a string or an object, got {type(choice).__name__}")
    if choice.get("type") == "allowed_tools":
        _gate_allowed_tools(body, where, choice, tier, policy)
        return
    forced = _forced(choice, where)
    if not policy.allows(tier, forced):
        raise ToolChoiceBlocked(forced.name, policy.required_tier(forced), tier)


def _forced(choice: dict[str, Any], where: str) -> ToolId:
    """The tool a `tool_choice` object forces: {"type": "function", "function": {"name"}},
    {"type": "custom", "custom": {"name"}}, legacy {"name"} (function_call), or a typed
    built-in by its type."""
    kind = choice.get("type")
    if kind is None and "function" not in choice:  # legacy function_call: {"name": ...}
        name = nonempty(choice.get("name"))
        if name is None:
            raise RequestInvalid(f"'{where}' object must name a tool")
        return ToolId.function(name)
    kind = kind or "function"
    if not isinstance(kind, str):
        raise RequestInvalid(f"'{where}.type' must be a string")
    return named_id(choice, kind, where)


def _gate_allowed_tools(
    body: dict[str, Any], where: str, choice: dict[str, Any], tier: Tier, policy: ToolPolicy
) -> None:
    spec = choice.get("allowed_tools")
    if not isinstance(spec, dict) or not isinstance(spec.get("tools"), list):
        raise RequestInvalid(f"'{where}.allowed_tools.tools' must be an array")
    mode = spec.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise RequestInvalid(f"'{where}.allowed_tools.mode' must be 'auto' or 'required', got {mode!r}")
    kept: list[Any] = []
    hidden: list[ToolId] = []
    for i, item in enumerate(spec["tools"]):
        tool = tool_id(item, f"{where}.allowed_tools.tools[{i}]")
        if policy.allows(tier, tool):
            kept.append(item)
        else:
            hidden.append(tool)
    if not hidden:
        return
    if not kept:
        if mode == "required" or not spec["tools"]:
            _blocked(hidden, tier, policy)
        body[where] = "none"  # `auto` over nothing callable: the model may call nothing
        return
    body[where] = {**choice, "allowed_tools": {**spec, "tools": kept}}


def _blocked(hidden: list[ToolId], tier: Tier, policy: ToolPolicy) -> None:
    """A choice that demands a call when only hidden tools could answer it."""
    names = [t.name for t in hidden] or ["(no tool)"]
    required = min((policy.required_tier(t) for t in hidden), key=lambda t: t.rank, default=tier)
    raise ToolChoiceBlocked(", ".join(names), required, tier)


def _refuse_nested_tools(body: dict[str, Any]) -> None:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        return
    if not isinstance(kwargs, dict):
        raise RequestInvalid(f"'chat_template_kwargs' must be an object, got {type(kwargs).__name__}")
    for key in kwargs:
        lowered = str(key).lower()
        if "tool" in lowered or "function" in lowered:
            raise RequestInvalid(
                f"'chat_template_kwargs.{key}' is refused: a template variable that carries "
                "tools is not gated; send tools in 'tools'"
            )


# -- the request's fields (the allowlists are in protocols/chat/fields.py) -----------------------


def check_request(body: dict[str, Any], unknown: str) -> None:
    """Every field of a chat request, its messages, tools and tool choice is one the chat tables
    know (else refused, or dropped when `unknown` is "drop"); raises RequestInvalid."""
    S.check(body, F.CHAT_REQUEST, "", unknown)
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            raise RequestInvalid(f"messages[{i}] must be an object, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or role not in F.CHAT_MESSAGE:
            raise RequestInvalid(f"messages[{i}].role must be one of {sorted(F.CHAT_MESSAGE)}")
        S.check(message, F.CHAT_MESSAGE[role], f"messages[{i}]", unknown)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise RequestInvalid(f"'chat_template_kwargs' must be an object, got {type(kwargs).__name__}")
        S.check(kwargs, F.CHAT_TEMPLATE_KWARGS, "chat_template_kwargs", unknown)
    tools = body.get("tools")
    if isinstance(tools, list):
        key = _TOOLS_CHECKED.key(tools, unknown)
        if not _TOOLS_CHECKED.passed(key, tools):
            for i, tool in enumerate(tools):
                _check_tool(tool, f"tools[{i}]", unknown)
            _TOOLS_CHECKED.remember(key, tools, unknown)
    functions = body.get("functions")
    for i, function in enumerate(functions if isinstance(functions, list) else []):
        if isinstance(function, dict):
            S.check(function, F.CHAT_LEGACY_FUNCTION, f"functions[{i}]", unknown)
    legacy = body.get("function_call")
    if isinstance(legacy, dict):
        S.check(legacy, F.CHAT_NAMED, "function_call", unknown)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = S.check_typed(choice, F.CHAT_TOOL_CHOICE, "tool_choice", unknown)
        inner = choice.get(kind)
        if kind == "allowed_tools" and isinstance(inner, dict):
            S.check(inner, F.CHAT_ALLOWED_TOOLS, "tool_choice.allowed_tools", unknown)
            entries = inner.get("tools")
            for i, tool in enumerate(entries if isinstance(entries, list) else []):
                _check_tool(tool, f"tool_choice.allowed_tools.tools[{i}]", unknown)
        elif isinstance(inner, dict):
            S.check(inner, F.CHAT_NAMED, f"tool_choice.{kind}", unknown)


# A conversation sends the same tools with every request: checked once per exact JSON (and mode).
_TOOLS_CHECKED = JsonChecked()


def _check_tool(tool: Any, where: str, unknown: str) -> None:
    if not isinstance(tool, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(tool).__name__}")
    kind = tool.get("type", "function")
    if isinstance(kind, str) and builtin_family(kind) is not None:
        # A typed built-in some chat servers take: what chat does not read of it is refused.
        S.check(tool, F.CHAT_BUILTIN_TOOL[kind], where, unknown)
        fixed = MESSAGES_BUILTIN_NAMES.get(kind)
        if "name" in tool and tool["name"] != fixed:
            raise RequestInvalid(f"{where}.name must be {fixed!r} for a {kind!r} tool (its name is fixed)")
        return
    kind = S.check_typed(tool, F.CHAT_TOOL, where, unknown, default="function")
    inner = tool.get(kind)
    if isinstance(inner, dict):
        S.check(inner, F.CHAT_FUNCTION if kind == "function" else F.CHAT_CUSTOM, f"{where}.{kind}", unknown)
