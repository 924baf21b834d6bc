"""What every codec's request gating shares: a chat tool object's identity (a flat list's of any
protocol is the registry's, protocols/table.py `listed_tool_id`), the outcome of gating one request (Gated), one request's gating state
(RequestGate) and the name checks. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gatekeeper.errors import RequestInvalid
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy


@dataclass
class Gated:
    """The outcome of gating one request's tools."""

    kept: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    # A client's MCP server label -> the label whose rules gate it, where they differ (a server
    # bound by its URL in tools.mcp_servers, offered under another label): for the answer side.
    servers: dict[str, str] = field(default_factory=dict)


def nonempty(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def tool_id(tool: Any, where: str) -> ToolId:
    """The identity of a chat tool: `function.name` (FUNCTION), `custom.name` (CUSTOM); any other
    typed tool is a BUILTIN by its `type` (a `name` the client put on it is never used)."""
    if type(tool) is dict and tool.get("type", "function") == "function":  # the common case, read once
        inner = tool.get("function")
        name = inner.get("name") if type(inner) is dict else None
        if type(name) is str and name:
            return ToolId.function(name)
    if not isinstance(tool, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(tool).__name__}")
    kind = tool.get("type", "function")
    if not isinstance(kind, str) or not kind:
        raise RequestInvalid(f"{where}.type must be a non-empty string")
    return named_id(tool, kind, where)


def named_id(obj: dict[str, Any], kind: str, where: str) -> ToolId:
    """A chat tool's (or tool choice's) identity: `function` / `custom` by the name in its object of
    that kind, any other type a BUILTIN by that type. `where` names `obj` in errors."""
    if kind == "function" or kind == "custom":
        inner = obj.get(kind)
        name = nonempty(inner.get("name")) if isinstance(inner, dict) else None
        if name is None:
            raise RequestInvalid(f"{where}.{kind}.name must be a non-empty string")
        return ToolId.function(name) if kind == "function" else ToolId.custom(name)
    return ToolId.builtin(kind)


def tool_name(tool: Any, where: str) -> str:
    """The name a chat tool is gated and logged by (`str(tool_id(...))`)."""
    return tool_id(tool, where).name


@dataclass
class RequestGate:
    """One request's gating: the verdicts (`gated`), the hidden tools' identities (for 400
    messages) and the MCP listings the request itself carries (server -> tool names)."""

    tier: Tier
    policy: ToolPolicy
    unknown: str  # upstream.unknown_fields: refuse | drop
    gated: Gated = field(default_factory=Gated)
    hidden: list[ToolId | str] = field(default_factory=list)
    listings: dict[str, list[str]] = field(default_factory=dict)
    _labels: set[str] = field(default_factory=set)  # MCP server labels identified so far

    def __post_init__(self) -> None:
        self._narrows = self.policy.narrows()  # asked once: are there argument rules at all?

    def identify(self, label: str, offered: list[tuple[str, str, object]], where: str) -> None:
        """Learn which server the request's MCP server `label` is (ServerBindings.identify); every
        later `server(label)` and `mcp(label, tool)` of this request uses it. A label offered twice
        for servers of different identities is refused (an answer's call names only the label)."""
        identity = self.policy.servers.identify(label, offered, where)
        known = self.gated.servers.get(label, label) if label in self._labels else None
        if known is not None and known != identity:
            raise RequestInvalid(f"{where}: MCP server label {label!r} is offered twice, for different servers")
        self._labels.add(label)
        if identity != label:
            self.gated.servers[label] = identity

    def server(self, label: str) -> str:
        """The label whose rules gate the request's MCP server `label`."""
        return self.gated.servers.get(label, label)

    def any_server(self, label: str) -> str:
        """For a 400: why the rules of other servers apply to `label` ("" when its own do)."""
        if self.server(label) in self.policy.named_groups:
            return ""
        return f" (no rule names {label!r} and tools.mcp_servers does not bind it: it may be any server)"

    def mcp(self, label: str, tool: str) -> ToolId:
        """The identity a tool of the request's MCP server `label` is gated by."""
        return ToolId.mcp(self.server(label), tool)

    def narrowed(self, obj: dict[str, Any], key: str, tool: ToolId) -> dict[str, Any]:
        """`narrowed` at this request's tier and policy."""
        return narrowed(obj, key, self.tier, self.policy, tool) if self._narrows else obj

    def admits(self, tool: ToolId | str, record_kept: bool = True) -> bool:
        """Is `tool` admitted? Recorded as kept (unless `record_kept` is False: a server or
        namespace whose tools are recorded one by one) or hidden."""
        return self.record(tool, self.policy.allows(self.tier, tool), record_kept)

    def record(self, tool: ToolId | str, admitted: bool, record_kept: bool = True) -> bool:
        """Record the verdict `admitted` the policy gave on `tool` (as `admits` does); returns it."""
        if admitted:
            if record_kept:
                self.gated.kept.append(str(tool))
            return True
        self.gated.hidden.append(str(tool))
        self.hidden.append(tool)
        return False


def narrowed(obj: dict[str, Any], key: str, tier: Tier, policy: ToolPolicy, tool: ToolId) -> dict[str, Any]:
    """A kept tool object with its argument schema (under `key`) narrowed to the calls argument
    rules admit at `tier` (`ToolPolicy.narrowed`): a copy, or `obj` itself when nothing narrows."""
    schema = obj.get(key)
    found = policy.narrowed(tier, tool, schema) if isinstance(schema, dict) else None
    return obj if found is None else {**obj, key: found}


def require_boolean(body: dict[str, Any], key: str) -> None:
    """A GATED switch (`parallel_tool_calls`) is true, false or absent: the codec reads it, so any
    other value would be forwarded unread."""
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise RequestInvalid(f"'{key}' must be true or false, got {type(value).__name__}")


def required_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise RequestInvalid(f"{where} must be a non-empty string")
    return value


def group_name(value: Any, where: str) -> str:
    """An MCP server label or namespace name: rules spell its tools `group.tool`."""
    name = required_name(value, where)
    if "." in name:
        raise RequestInvalid(f"{where} must not contain '.' (rules name its tools as '<group>.<tool>')")
    return name
