"""Which tools a tier may see, and enforcement on both sides of a call. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked  # noqa: F401  (re-exported)
from gatekeeper.tiers import Tier



class ToolPolicy:
    """Required tier per tool name: exact names first, then shell-style patterns in config order."""

    def __init__(self, required_tier: dict[str, Tier] | None = None, default_tier: Tier = Tier.SMALL) -> None:
        rules = required_tier or {}
        self.default_tier = default_tier
        self._exact = {k: v for k, v in rules.items() if not any(c in k for c in "*?[")}
        self._patterns = [(k, v) for k, v in rules.items() if k not in self._exact]
        self._memo: dict[str, Tier] = {}

    def required_tier(self, name: str) -> Tier:
        tier = self._memo.get(name)
        if tier is None:
            tier = self._exact.get(name) or next(
                (t for pattern, t in self._patterns if fnmatchcase(name, pattern)), self.default_tier
            )
            if len(self._memo) < 100_000:  # names come from clients: bound the memo
                self._memo[name] = tier
        return tier

    def allows(self, tier: Tier, name: str) -> bool:
        return tier.allows(self.required_tier(name))


@dataclass
class Gated:
    """The outcome of gating one request's tools."""

    kept: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)


def tool_name(tool: Any, where: str) -> str:
    """The function name of an OpenAI tool (`{"type": "function", "function": {...}}`)."""
    if not isinstance(tool, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(tool).__name__}")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise RequestInvalid(f"{where}.function.name must be a non-empty string")
    return function["name"]


def _legacy_name(function: Any, where: str) -> str:
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise RequestInvalid(f"{where}.name must be a non-empty string")
    return function["name"]


def gate_request(body: dict, tier: Tier, policy: ToolPolicy) -> Gated:
    """Remove from `body` (in place) the tools above `tier`; drop empty tool fields.

    Raises RequestInvalid for malformed tool fields and ToolChoiceBlocked when `tool_choice`
    (or legacy `function_call`) forces a removed tool.
    """
    gated = Gated()
    for field_name, choice_name, name_of in (
        ("tools", "tool_choice", tool_name),
        ("functions", "function_call", _legacy_name),
    ):
        if field_name not in body:
            continue
        items = body[field_name]
        if items is None:
            continue
        if not isinstance(items, list):
            raise RequestInvalid(f"'{field_name}' must be an array, got {type(items).__name__}")
        kept = []
        for i, item in enumerate(items):
            name = name_of(item, f"{field_name}[{i}]")
            if policy.allows(tier, name):
                kept.append(item)
                gated.kept.append(name)
            else:
                gated.hidden.append(name)
        forced = _forced_name(body.get(choice_name), choice_name)
        if forced is not None and not policy.allows(tier, forced):
            raise ToolChoiceBlocked(forced, policy.required_tier(forced), tier)
        if len(kept) != len(items):
            if kept:
                body[field_name] = kept
            else:
                # An empty `tools` array is rejected by several servers: drop the fields instead.
                del body[field_name]
                body.pop(choice_name, None)
    return gated


def _forced_name(choice: Any, where: str) -> str | None:
    if choice is None or isinstance(choice, str):
        return None
    if not isinstance(choice, dict):
        raise RequestInvalid(f"'{where}' must be a string or an object, got {type(choice).__name__}")
    target = choice.get("function", choice)
    name = target.get("name") if isinstance(target, dict) else None
    if not isinstance(name, str):
        raise RequestInvalid(f"'{where}' object must name a function")
    return name


def allowed_names(body: dict) -> set[str]:
    """Names of the tools a (gated) request actually offers the model."""
    names = {t["function"]["name"] for t in body.get("tools") or []}
    names.update(f["name"] for f in body.get("functions") or [])
    return names


def enforce_message(message: dict, allowed: set[str]) -> list[str]:
    """Remove (in place) tool calls to tools that were not offered; return the removed names."""
    removed: list[str] = []
    calls = message.get("tool_calls")
    if calls:
        keep = [c for c in calls if ((c.get("function") or {}).get("name")) in allowed]
        removed += [(c.get("function") or {}).get("name") or "" for c in calls if c not in keep]
        if keep:
            message["tool_calls"] = keep
        else:
            del message["tool_calls"]
    call = message.get("function_call")
    if isinstance(call, dict) and call.get("name") not in allowed:
        removed.append(call.get("name") or "")
        del message["function_call"]
    return removed


def enforce_choice(choice: dict, allowed: set[str]) -> list[str]:
    """Enforce one response choice; when no call remains, `finish_reason` becomes `stop`."""
    message = choice.get("message")
    if not isinstance(message, dict):
        return []
    removed = enforce_message(message, allowed)
    if removed and not message.get("tool_calls") and not message.get("function_call"):
        if choice.get("finish_reason") in ("tool_calls", "function_call"):
            choice["finish_reason"] = "stop"
    return removed
