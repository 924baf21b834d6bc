"""Which tier may list and read what the gateway's servers offer besides tools: resources,
resource templates, prompts, and the completions of the last two. Pure.

Each one has a required tier, found in order:

- a rule naming it as `<label>.<name>` (its server's label, its own `name`; shell-style
  patterns, exact names first, then patterns in config order): `mcp.resources` for resources
  and resource templates, `mcp.prompts` for prompts;
- else its server's `mcp.servers.<label>.default_tier`;
- else its server's tools decide: it is shown to a tier that is shown at least one of them. A
  server whose tools are all hidden (or that has none) is hidden whole: its resources would
  otherwise be a way round its tools' rules (a secret in a resource, a template whose read acts).

A name outside printable ASCII gets the strictest rule there is, or its default when that is
stricter: rules are written in ASCII, and a lookalike must not take a looser one's place.
A completion is judged as the prompt or resource template it completes (gatekeeper.mcp.gateway).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from gatekeeper.rules.tiers import Tier

Kind = Literal["resource", "prompt"]  # a resource template is ruled as a resource
_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class Verdict:
    """What a tier may do with one item: `allowed`, and why (the rule or default that decided)."""

    allowed: bool
    required: Tier | None  # None: decided by the server's tools (none shown at this tier)
    why: str


class ReadRules:
    """The rules of one settings version (`mcp.resources`, `mcp.prompts`, the servers' defaults)."""

    def __init__(
        self,
        resources: Mapping[str, Tier],
        prompts: Mapping[str, Tier],
        defaults: Mapping[str, Tier | None],
    ) -> None:
        self._rules = {"resource": dict(resources), "prompt": dict(prompts)}
        self._defaults = dict(defaults)

    def judge(self, tier: Tier, kind: Kind, label: str, name: str | None, tools_shown: bool) -> Verdict:
        """May `tier` list or read the `kind` called `name` (None: a resource known only by the
        URI a tool result linked to) of server `label`, whose tools `tools_shown` to it or not?"""
        rules = self._rules[kind]
        ruled = f"{label}.{name}" if name is not None else None
        found = _match(rules, ruled) if ruled is not None else None
        default = self._defaults.get(label)
        if ruled is not None and not (ruled.isascii() and ruled.isprintable()):
            found = max((t for t in (found, *rules.values(), default) if t is not None), key=_rank, default=None)
        if found is not None:
            return Verdict(tier.allows(found), found, f"the rule for {ruled!r} (mcp.{kind}s) needs tier {found.value}")
        if default is not None:
            why = f"server {label!r} needs tier {default.value} (mcp.servers.{label}.default_tier)"
            return Verdict(tier.allows(default), default, why)
        why = (
            f"server {label!r} shows tier {tier.value} none of its tools, and no rule (mcp.{kind}s) or "
            f"mcp.servers.{label}.default_tier says otherwise"
        )
        return Verdict(tools_shown, None, why)


def _match(rules: Mapping[str, Tier], name: str) -> Tier | None:
    exact = rules.get(name)
    if exact is not None:
        return exact
    return next(
        (t for pattern, t in rules.items() if _WILDCARDS & set(pattern) and fnmatchcase(name, pattern)),
        None,
    )


def _rank(tier: Tier) -> int:
    return tier.rank
