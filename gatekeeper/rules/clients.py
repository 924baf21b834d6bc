"""Per-client policy (`clients:`): a client, named by what the drift identity reads (the
credential the upstream checks, or the trusted `drift.client_header`), may have its own tool
allowlist and denylist, a tier ceiling and argument rules. Pure: no I/O.

    clients:
      ci-bot:
        match: {credential_sha256: 9f86d08...}   # sha256 of the credential, hex: never the key itself
        tools: {allow: ["read_*", "git_*"], deny: ["git_push"]}
        max_tier: medium
        arguments:
          execute_command: [{match: {command: "ls *"}, tier: small}]
      dashboards:
        match: {header: team-dashboards}        # the value of drift.client_header (a trusted proxy's)

The effective rule is the stricter of the global one and the client's: a tool is seen only when
both admit it, a call needs the higher of the two tiers its arguments need, the tier is at most the
ceiling. A client no entry matches gets the global rules. A client is named in logs, the admin
API and the console by its config name only.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gatekeeper.rules.arguments import ArgumentRule, fold
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import PolicyOver, ToolId, ToolPolicy, covering_names


class ClientMatch(BaseModel):
    """What names a client: one of the SHA-256 (hex) of the credential the upstream checks, or the
    value of the trusted `drift.client_header`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    credential_sha256: str | None = None
    header: str | None = Field(default=None, min_length=1)

    @field_validator("credential_sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise ValueError("expected the SHA-256 of the credential, 64 hex digits (printf %s KEY | sha256sum)")
        return value.lower() if value is not None else None

    @model_validator(mode="after")
    def _one(self) -> ClientMatch:
        if (self.credential_sha256 is None) == (self.header is None):
            raise ValueError("expected exactly one of credential_sha256, header")
        return self


class ClientTools(BaseModel):
    """Tool names or shell-style patterns (as `tools.required_tier` names tools): `allow` set, only
    the tools it names; `deny`, never these (deny wins)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)


class ClientRules(BaseModel):
    """One client's own rules (`clients.<name>`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    match: ClientMatch
    tools: ClientTools = Field(default_factory=ClientTools)
    max_tier: Tier | None = None
    arguments: dict[str, list[ArgumentRule]] = Field(default_factory=dict)


def credential_digest(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


class Clients:
    """`clients:`, compiled: which configured client a request's presented identity is."""

    def __init__(self, clients: Mapping[str, ClientRules] | None = None) -> None:
        self.rules = dict(clients or {})
        self._by_digest = {r.match.credential_sha256: n for n, r in self.rules.items() if r.match.credential_sha256}
        self._by_header = {r.match.header: n for n, r in self.rules.items() if r.match.header}

    def __bool__(self) -> bool:
        return bool(self.rules)

    def name_of(self, presented: tuple[str, str] | None) -> str | None:
        """The configured name of the client that presented `(kind, value)` (`key`: the checked
        credential, `hdr`: the trusted client header), or None (the global rules apply)."""
        if presented is None or not self.rules:
            return None
        kind, value = presented
        if kind == "hdr":
            return next((n for h, n in self._by_header.items() if hmac.compare_digest(h, value)), None)
        digest = credential_digest(value)
        return next((n for d, n in self._by_digest.items() if hmac.compare_digest(d, digest)), None)

    def describe(self) -> list[dict[str, Any]]:
        """Each client's rules as the admin API shows them (its match by kind, never its value)."""
        return [
            {
                "client": name,
                "matched_by": "credential_sha256" if r.match.credential_sha256 else "header",
                "allow": r.tools.allow,
                "deny": r.tools.deny,
                "max_tier": r.max_tier.value if r.max_tier else None,
                "arguments": sorted(r.arguments),
            }
            for name, r in self.rules.items()
        ]


def _names_match(names: Sequence[str], patterns: Sequence[str], folded: bool) -> bool:
    for name in names:
        for pattern in patterns:
            if fnmatchcase(name, pattern) or (folded and fnmatchcase(fold(name), fold(pattern))):
                return True
    return False


class ClientPolicy(PolicyOver):
    """The stricter of `base` (the global policy of the pair) and one client's rules: a drop-in
    wherever a ToolPolicy gates (as PairPolicy is)."""

    def __init__(self, base: ToolPolicy, name: str, rules: ClientRules) -> None:
        super().__init__(base)
        self.client, self._rules = name, rules
        self._own = ToolPolicy(arguments=rules.arguments)  # its argument rules over a small own tier

    def permits(self, tool: str | ToolId) -> bool:
        """Its allowlist and denylist: denied by any name that covers the tool, or reads like one;
        allowed only by a name that covers it exactly."""
        names = covering_names(tool)
        if _names_match(names, self._rules.tools.deny, folded=True):
            return False
        allow = self._rules.tools.allow
        return allow is None or _names_match(names, allow, folded=False)

    def required_tier(self, tool: str | ToolId) -> Tier:
        return max(self.base.required_tier(tool), self._own.required_tier(tool))

    def own_tier(self, tool: str | ToolId) -> Tier:
        return max(self.base.own_tier(tool), self._own.own_tier(tool))

    def allows(self, tier: Tier, tool: str | ToolId) -> bool:
        return self.permits(tool) and self.base.allows(tier, tool) and self._own.allows(tier, tool)

    def judges_arguments(self, tool: str | ToolId) -> bool:
        return self.base.judges_arguments(tool) or self._own.judges_arguments(tool)

    def call_tier(self, tool: str | ToolId, arguments: Any, own: Tier | None = None) -> Tier:
        return max(self.base.call_tier(tool, arguments, own), self._own.call_tier(tool, arguments))

    def lowest_call_tier(self, tool: str | ToolId, own: Tier) -> Tier:
        return max(self.base.lowest_call_tier(tool, own), self._own.required_tier(tool))

    def narrows(self) -> bool:
        return self.base.narrows() or self._own.narrows()

    def narrowed(self, tier: Tier, tool: str | ToolId, schema: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.base.narrowed(tier, tool, schema) or self._own.narrowed(tier, tool, schema)

    def rule_hiding_part_of(self, group: str, tier: Tier) -> str | None:
        """As the base's; a client with an allowlist or a denylist may hide part of any server."""
        found = self.base.rule_hiding_part_of(group, tier)
        if found is None and (self._rules.tools.allow is not None or self._rules.tools.deny):
            return f"clients.{self.client}.tools"
        return found


def ceiling(tier: Tier, rules: ClientRules | None) -> Tier:
    """The tier a client's request is gated at: at most its `max_tier`."""
    if rules is None or rules.max_tier is None:
        return tier
    return min(tier, rules.max_tier)
