"""Which tools a tier may see, and Chat Completions request gating. Pure: no I/O.

A request field that could carry tools is understood and gated, or refused (RequestInvalid):
`tools` (function, custom and typed built-in tools), legacy `functions`, every `tool_choice`
and `function_call` form, `parallel_tool_calls`, and tool lists nested in
`chat_template_kwargs` (which servers such as vLLM and llama.cpp render into the prompt).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from cachetools import Cache

from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.tiers import Tier

__all__ = [
    "Gated",
    "RequestInvalid",
    "ToolChoiceBlocked",
    "ToolPolicy",
    "allowed_names",
    "enforce_choice",
    "enforce_message",
    "gate_request",
    "tool_name",
]


class ToolPolicy:
    """Required tier per tool name: exact names first, then shell-style patterns in config order."""

    def __init__(self, required_tier: dict[str, Tier] | None = None, default_tier: Tier = Tier.SMALL) -> None:
        rules = required_tier or {}
        self.default_tier = default_tier
        self._exact = {k: v for k, v in rules.items() if not any(c in k for c in "*?[")}
        self._patterns = [(k, v) for k, v in rules.items() if k not in self._exact]
        # Names come from clients, so the memo is bounded (the oldest name goes first). A plain
        # cachetools.Cache, not an LRU: a read does not reorder, so the hot path reads unlocked.
        self._memo: Cache[str, Tier] = Cache(maxsize=100_000)
        self._memo_lock = threading.Lock()

    def required_tier(self, name: str) -> Tier:
        tier = self._memo.get(name)
        if tier is None:
            tier = self._exact.get(name) or next(
                (t for pattern, t in self._patterns if fnmatchcase(name, pattern)), self.default_tier
            )
            with self._memo_lock:
                self._memo[name] = tier
        return tier

    def allows(self, tier: Tier, name: str) -> bool:
        return tier.allows(self.required_tier(name))


@dataclass
class Gated:
    """The outcome of gating one request's tools."""

    kept: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)


def _nonempty(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def tool_name(tool: Any, where: str) -> str:
    """The name a chat tool is gated by: `function.name`, `custom.name`; for any other typed
    tool its `name` (or `<type>.name`), else its `type` (so `required_tier` can name built-ins)."""
    if not isinstance(tool, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(tool).__name__}")
    kind = tool.get("type", "function")
    if not isinstance(kind, str) or not kind:
        raise RequestInvalid(f"{where}.type must be a non-empty string")
    if kind == "function" or kind == "custom":
        inner = tool.get(kind)
        name = _nonempty(inner.get("name")) if isinstance(inner, dict) else None
        if name is None:
            raise RequestInvalid(f"{where}.{kind}.name must be a non-empty string")
        return name
    inner = tool.get(kind)
    return _nonempty(tool.get("name")) or (_nonempty(inner.get("name")) if isinstance(inner, dict) else None) or kind


def _legacy_name(function: Any, where: str) -> str:
    if not isinstance(function, dict) or _nonempty(function.get("name")) is None:
        raise RequestInvalid(f"{where}.name must be a non-empty string")
    return str(function["name"])


_CHOICE_WORDS = frozenset({"none", "auto", "required", "any"})
_DEMANDS_A_CALL = frozenset({"required", "any"})


def gate_request(body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
    """Remove from `body` (in place) the tools above `tier`; drop tool fields left empty.

    Raises RequestInvalid for malformed tool fields and ToolChoiceBlocked when the tool choice
    forces a removed tool, or demands a call ("required", "any", an `allowed_tools` list in
    `required` mode) when every tool it could call was removed.
    """
    _refuse_nested_tools(body)
    gated = Gated()
    for field_name, choice_name, name_of in (
        ("tools", "tool_choice", tool_name),
        ("functions", "function_call", _legacy_name),
    ):
        items = body.get(field_name)
        offered: list[str] = []
        kept: list[Any] = []
        if items is not None:
            if not isinstance(items, list):
                raise RequestInvalid(f"'{field_name}' must be an array, got {type(items).__name__}")
            for i, item in enumerate(items):
                name = name_of(item, f"{field_name}[{i}]")
                offered.append(name)
                if policy.allows(tier, name):
                    kept.append(item)
                    gated.kept.append(name)
                else:
                    gated.hidden.append(name)
        hidden_here = [n for n in offered if not policy.allows(tier, n)]
        _gate_choice(body, choice_name, tier, policy, bool(offered) and not kept, hidden_here)
        if items is not None and len(kept) != len(items):
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


def _gate_choice(
    body: dict[str, Any], where: str, tier: Tier, policy: ToolPolicy, none_left: bool, hidden: list[str]
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
    name = _forced_name(choice, where)
    if not policy.allows(tier, name):
        raise ToolChoiceBlocked(name, policy.required_tier(name), tier)


def _forced_name(choice: dict[str, Any], where: str) -> str:
    """The tool a `tool_choice` object forces: {"type": "function", "function": {"name"}},
    {"type": "custom", "custom": {"name"}}, legacy {"name"}, or a typed tool by name or type."""
    kind = choice.get("type")
    inner = choice.get(kind) if isinstance(kind, str) else choice.get("function")
    if inner is None and "function" in choice:
        inner = choice["function"]
    name = _nonempty(inner.get("name")) if isinstance(inner, dict) else None
    name = name or _nonempty(choice.get("name"))
    if name is None and kind not in (None, "function", "custom"):
        name = _nonempty(kind)
    if name is None:
        raise RequestInvalid(f"'{where}' object must name a tool")
    return name


def _gate_allowed_tools(
    body: dict[str, Any], where: str, choice: dict[str, Any], tier: Tier, policy: ToolPolicy
) -> None:
    spec = choice.get("allowed_tools")
    if not isinstance(spec, dict) or not isinstance(spec.get("tools"), list):
        raise RequestInvalid(f"'{where}.allowed_tools.tools' must be an array")
    mode = spec.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise RequestInvalid(f"'{where}.allowed_tools.mode' must be 'auto' or 'required', got {mode!r}")
    kept: list[tuple[Any, str]] = []
    hidden: list[tuple[Any, str]] = []
    for i, item in enumerate(spec["tools"]):
        name = tool_name(item, f"{where}.allowed_tools.tools[{i}]")
        (kept if policy.allows(tier, name) else hidden).append((item, name))
    if not hidden:
        return
    if not kept:
        if mode == "required" or not spec["tools"]:
            _blocked([n for _, n in hidden], tier, policy)
        body[where] = "none"  # `auto` over nothing callable: the model may call nothing
        return
    body[where] = {**choice, "allowed_tools": {**spec, "tools": [item for item, _ in kept]}}


def _blocked(hidden: list[str], tier: Tier, policy: ToolPolicy) -> None:
    """A choice that demands a call when only hidden tools could answer it."""
    names = hidden or ["(no tool)"]
    required = min((policy.required_tier(n) for n in hidden), key=lambda t: t.rank, default=tier)
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


def allowed_names(body: dict[str, Any]) -> set[str]:
    """Names of the tools a (gated) request actually offers the model."""
    names = {tool_name(t, "tools[]") for t in body.get("tools") or []}
    names.update(f["name"] for f in body.get("functions") or [])
    return names


def enforce_message(message: dict[str, Any], allowed: set[str] | dict[str, Any]) -> list[str]:
    """Remove (in place) tool calls to tools that were not offered; return the removed names.
    The message must already be validated (see protocols/chat.py)."""
    removed: list[str] = []
    calls = message.get("tool_calls")
    if calls:
        keep = []
        for call in calls:
            name = call_name(call)
            if name is not None and name in allowed:
                keep.append(call)
            else:
                removed.append(name or "")
        if keep:
            message["tool_calls"] = keep
        else:
            del message["tool_calls"]
    elif calls is not None:
        del message["tool_calls"]
    call = message.get("function_call")
    if call is not None and (not isinstance(call, dict) or call.get("name") not in allowed):
        removed.append((call.get("name") if isinstance(call, dict) else None) or "")
        del message["function_call"]
    return removed


def call_name(call: Any) -> str | None:
    """The one name a chat tool call gives, from `function.name` or `custom.name`; None when it
    names nothing or names two different things (a reader could take either)."""
    if not isinstance(call, dict):
        return None
    names = {
        inner["name"]
        for key in ("function", "custom")
        if isinstance(inner := call.get(key), dict) and isinstance(inner.get("name"), str)
    }
    return names.pop() if len(names) == 1 else None


def enforce_choice(choice: dict[str, Any], allowed: set[str] | dict[str, Any]) -> list[str]:
    """Enforce one response choice; when no call remains, `finish_reason` becomes `stop`."""
    message = choice.get("message")
    if not isinstance(message, dict):
        return []
    removed = enforce_message(message, allowed)
    if (
        removed
        and not message.get("tool_calls")
        and not message.get("function_call")
        and choice.get("finish_reason") in ("tool_calls", "function_call")
    ):
        choice["finish_reason"] = "stop"
    return removed
