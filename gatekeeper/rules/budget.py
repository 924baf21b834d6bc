"""The tool budget: how many offered tools a pair may be shown at once. Pure: no I/O.

A model choosing among many tools picks the wrong one more often (issue 41); a pair's budget is
the largest number of offered tools at which its choice was certified (`toolBudget`, measured by
gatekeeper.measuring.budget) or vouched for by a pin (`tool_budget`). A request that offers more
tools than that, counted after the tier's filtering, is over budget, and `tools.budget` says what
happens to it:

    report   forwarded as it is; the answer carries `x-gatekeeper-tool-budget`, a log line and
             a metric (the default: an upgrade changes no request, see docs/configuration.md)
    trim     cut to the budget (`trim`): the tools the conversation already used or that the
             tool choice names, then `tools.budget_priority`, then the client's order
    refuse   a 400 naming the budget and the number offered (ToolBudgetExceeded)
    route    capability routing (core/router.py) sends it to a pair whose budget fits; when
             none does, it is reported

No budget (not measured, or a pin without one) means no limit. That is the fail-open side, and
deliberately so: the budget never grants a tool (the tier does), it only bounds how many of the
tools the tier already admits are shown at once, so an unknown budget cannot widen what a model
may call.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import PolicyOver, ToolId, ToolPolicy

BudgetMode = Literal["route", "trim", "refuse", "report"]
BUDGET_MODES: tuple[BudgetMode, ...] = ("route", "trim", "refuse", "report")

# Top-level request fields that offer tools (chat's `functions`, Messages' `mcp_servers`): their
# names are the offer, never a use. Every other field (the conversation, the tool choice) names
# tools the request already relies on.
OFFERING_FIELDS = frozenset({"tools", "functions", "mcp_servers"})


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """One request against its pair's budget: `offered` tools after the tier's filtering."""

    offered: int
    budget: int | None  # None: not measured, no budget applies

    @property
    def over(self) -> bool:
        return self.budget is not None and self.offered > self.budget

    def header(self) -> str:
        """`x-gatekeeper-tool-budget`: `offered/budget`, e.g. `40/16` (`40/none` unmeasured)."""
        return f"{self.offered}/{'none' if self.budget is None else self.budget}"


def trim(names: Sequence[str], budget: int, priority: Sequence[str], used: Collection[str]) -> list[str]:
    """The names of `names` kept under `budget`, in the client's order.

    Chosen in this order: every tool in `used` (the conversation called it or the tool choice
    names it; kept even past the budget: removing a tool the conversation relies on breaks the
    next turn), then the tools matching `priority` (shell-style patterns, in the order listed),
    then the client's order."""
    chosen: dict[str, None] = {name: None for name in names if name in used}
    for pattern in priority:
        for name in names:
            if len(chosen) >= budget:
                break
            if fnmatchcase(name, pattern):
                chosen.setdefault(name)
    for name in names:
        if len(chosen) >= budget:
            break
        chosen.setdefault(name)
    return [name for name in names if name in chosen]


def mentioned_tools(body: dict[str, Any]) -> set[str]:
    """Every tool name a request body mentions outside the fields that offer tools: calls in its
    conversation (chat `tool_calls`, Responses `function_call` items, Messages `tool_use` blocks,
    MCP calls as `server.tool`) and its tool choice. Protocol-blind on purpose: it collects every
    `name`, so it may keep a tool a message merely shares a name with, which only keeps more."""
    found: set[str] = set()
    for key, value in body.items():
        if key not in OFFERING_FIELDS:
            found.update(_names(value))
    return found


def _names(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        name = value.get("name")
        if isinstance(name, str):
            yield name
            server = value.get("server_label") or value.get("server_name")
            if isinstance(server, str):
                yield f"{server}.{name}"
        for inner in value.values():
            yield from _names(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _names(inner)


class BudgetPolicy(PolicyOver):
    """`base`, also hiding the tools a trim left out: regating a body with it removes them in
    every protocol's own way. A server offered whole is never cut (its tools are not listed)."""

    def __init__(self, base: ToolPolicy, cut: Iterable[str]) -> None:
        super().__init__(base)
        self.cut = frozenset(cut)

    def allows(self, tier: Tier, tool: str | ToolId) -> bool:
        return str(tool) not in self.cut and self.base.allows(tier, tool)
