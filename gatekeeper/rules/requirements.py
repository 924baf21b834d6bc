"""Per-tool category requirements (`tools.requires`), judged on a pair's measured lower bounds. Pure.

A tier is a coarse summary of three category scores. A rule such as `"emit_invoice": {json: 0.9}`
lets an operator ask more of one tool: it is offered only when the pair's tier reaches the tool's
required tier AND the lower confidence bound of each named category reaches its minimum.

What counts as the pair's bounds (`Capability.bounds`):
  * a measured pair: `Profile.lower_bound(category)`, the bound its tier was decided on; a profile
    that stores no interval (the seed's one-sample format) has no bound, so a minimum is unmet;
  * a pinned pair: a pin decides the tier only. Its category minimums are judged on the pair's
    valid measured profile when one is stored, else they are unmet (an admin vouches for a tier,
    not for a score nobody measured);
  * a demoted pair (live drift), a pending or an unmeasured one: no bounds, every minimum unmet.
Fail closed: a requirement that cannot be judged hides its tool.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from cachetools import Cache

from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import MEMO_NAME_LIMIT, PolicyOver, ToolId, ToolKind, ToolPolicy, covering_names
from gatekeeper.rules.tools import named_groups as gating_named_groups
from gatekeeper.store.profile import Profile
from gatekeeper.suite.loader import CATEGORIES

__all__ = [
    "Capability",
    "PairPolicy",
    "Requirements",
    "bounds_of",
    "describe_minimums",
    "meets",
    "overlaps_group",
    "unmet",
]

Minimums = Mapping[str, float]  # category -> the lower bound it must reach
_NONE: dict[str, float] = {}


@dataclass(frozen=True)
class Capability:
    """What one `model@effort` offers a request: its tier, and the measured lower bounds of its
    categories (empty: nothing measured that category minimums can be judged on). `pinned`: an
    admin's pin sets the tier, so the bounds (a stored measurement's, if any) are not what it
    was decided on and cannot show that another pair is as good (gatekeeper.core.route_choice.no_worse)."""

    tier: Tier
    bounds: Mapping[str, float] = field(default_factory=dict)
    pinned: bool = False
    tool_budget: int | None = None  # None: not measured, no budget applies (gatekeeper.rules.budget)


def bounds_of(profile: Profile | None) -> dict[str, float]:
    """A profile's one-sided lower bounds per category (categories without one are left out)."""
    if profile is None:
        return {}
    found = {c: profile.lower_bound(c) for c in CATEGORIES}
    return {c: b for c, b in found.items() if b is not None}


def unmet(minimums: Minimums, bounds: Mapping[str, float]) -> list[str]:
    """The minimums `bounds` does not reach, each as `category >= minimum (bound b | not measured)`."""
    missing = []
    for category, minimum in minimums.items():
        bound = bounds.get(category)
        if bound is None:
            missing.append(f"{category} >= {minimum:g} (not measured)")
        elif bound < minimum:
            missing.append(f"{category} >= {minimum:g} (bound {bound:.3f})")
    return missing


def meets(minimums: Minimums, bounds: Mapping[str, float]) -> bool:
    # The hot path: no strings built.
    for category, minimum in minimums.items():
        bound = bounds.get(category)
        if bound is None or bound < minimum:
            return False
    return True


def overlaps_group(rule: str, group: str) -> bool:
    """Could `rule` name some tool of the MCP server or namespace `group` (`github.delete_*`,
    `git*`, `*`)? Patterns are judged by their literal prefix, erring towards yes."""
    prefix = f"{group}."
    literal = rule
    for c in "*?[":
        literal = literal.split(c, 1)[0]
    return rule.startswith(prefix) or (literal != rule and prefix.startswith(literal))


class Requirements:
    """Category minimums per tool: for each name that covers it (`covering_names`), exact rule
    names first, then shell-style patterns in config order, as `tools.required_tier`; when several
    names have a rule, the strictest minimum of each category applies (fail closed).

    A tool of an MCP server whose label no rule names (nor `named_groups`: the tier
    policy's, with the config's bindings) may be any server's, as in ToolPolicy: it meets every
    `server.tool` rule whose tool part matches it, and the whole-server rule of every named group."""

    def __init__(
        self, rules: Mapping[str, Mapping[Any, float]] | None = None, named_groups: Iterable[str] = ()
    ) -> None:
        """`rules`: tool name or pattern -> {category: minimum} (config's `tools.requires`)."""
        rules = rules or {}
        self._exact = {k: dict(v) for k, v in rules.items() if not any(c in k for c in "*?[")}
        self._patterns = [(k, dict(v)) for k, v in rules.items() if k not in self._exact]
        # Names come from clients: a bounded memo, read unlocked (a plain Cache does not reorder).
        self._memo: Cache[str, tuple[str | None, dict[str, float]]] = Cache(maxsize=100_000)
        self._merged: Cache[str | ToolId, dict[str, float]] = Cache(maxsize=100_000)
        self._memo_lock = threading.Lock()
        self.named_groups = frozenset(named_groups) | gating_named_groups(rules)
        # What a tool of an unnamed group must meet: every rule by its tool part, every named
        # group's whole-server rule.
        self._any_group = [(rule.partition(".")[2], dict(m)) for rule, m in rules.items() if "." in rule]
        self._any_group += [("*", m) for g in sorted(self.named_groups) if (m := self.rule(g)[1])]

    def overlaps(self, rule: str, group: str) -> bool:
        """Could `rule` name some tool of `group` (`overlaps_group`)? A rule for a bare name
        (`delete_*`) could, as in ToolPolicy; of a group no rule names, so could any `server.tool`
        rule and any named group's whole-server rule."""
        if overlaps_group(rule, group) or ("." not in rule and rule != group):
            return True
        return group not in self.named_groups and ("." in rule or rule in self.named_groups)

    def __bool__(self) -> bool:
        return bool(self._exact or self._patterns)

    def rule(self, name: str) -> tuple[str | None, dict[str, float]]:
        """(the rule key that applies to `name`, its minimums); (None, {}) when no rule does."""
        found = self._memo.get(name)
        if found is None:
            if name in self._exact:
                found = (name, self._exact[name])
            else:
                found = next(((k, v) for k, v in self._patterns if fnmatchcase(name, k)), (None, _NONE))
            if len(name) <= MEMO_NAME_LIMIT:
                with self._memo_lock:
                    self._memo[name] = found
        return found

    def of(self, tool: str | ToolId) -> dict[str, float]:
        """The category minimums `tool` must meet ({} when no rule names it)."""
        found = self._merged.get(tool)
        if found is None:
            found = {}
            minimums = [self.rule(name)[1] for name in covering_names(tool)]
            group = tool.group if isinstance(tool, ToolId) else None
            if isinstance(tool, ToolId) and tool.kind is ToolKind.MCP and group not in self.named_groups:
                bare = tool.name.partition(".")[2]
                minimums += [m for part, m in self._any_group if fnmatchcase(bare, part)]
            for rule_minimums in minimums:
                for category, minimum in rule_minimums.items():
                    found[category] = max(minimum, found.get(category, minimum))
            if len(str(tool)) <= MEMO_NAME_LIMIT:
                with self._memo_lock:
                    self._merged[tool] = found
        return found

    def items(self) -> list[tuple[str, dict[str, float]]]:
        """Every rule, exact names first, then patterns in config order."""
        return [*self._exact.items(), *self._patterns]


class PairPolicy(PolicyOver):
    """The tool policy as it applies to one pair: the tier rules of `base`, and the category
    minimums of `requirements` judged on the pair's `bounds`.

    A drop-in for ToolPolicy wherever a codec gates (`allows(tier, name)`, `required_tier(name)`),
    so every protocol's gating honours `tools.requires` without knowing about it.
    """

    def __init__(self, base: ToolPolicy, requirements: Requirements, bounds: Mapping[str, float]) -> None:
        super().__init__(base)
        self.requirements, self.bounds = requirements, bounds

    def allows(self, tier: Tier, tool: str | ToolId) -> bool:
        return self.base.allows(tier, tool) and meets(self.requirements.of(tool), self.bounds)

    def rule_hiding_part_of(self, group: str, tier: Tier) -> str | None:
        """As ToolPolicy's, counting also a requirement rule under `group.` whose minimums this
        pair does not meet (a server offered whole must then be narrowed or refused)."""
        found = self.base.rule_hiding_part_of(group, tier)
        if found is not None:
            return found
        for rule, minimums in self.requirements.items():
            if self.requirements.overlaps(rule, group) and not meets(minimums, self.bounds):
                return rule
        return None

    def why_hidden(self, tier: Tier, tool: str | ToolId) -> str | None:
        """Why the pair does not see `tool` (`tier small < medium`, `json >= 0.9 (bound 0.820)`),
        or None when it does."""
        return self.why_not(tier, self.base.required_tier(tool), self.requirements.of(tool))

    def why_not(self, tier: Tier, required: Tier, minimums: Minimums) -> str | None:
        """Why the pair at `tier` does not meet a rule of `required` and `minimums` (`why_hidden`
        for a rule itself: a pattern's own text names no tool it matches), or None."""
        reasons = [f"tier {tier.value} < {required.value}"] if not tier.allows(required) else []
        reasons += unmet(minimums, self.bounds)
        return "; ".join(reasons) or None


def describe_minimums(minimums: Minimums) -> str:
    return ", ".join(f"{c} >= {m:g}" for c, m in minimums.items())
