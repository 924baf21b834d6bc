"""The tool budget applied to one gated request (`tools.budget`; the rules: gatekeeper.rules.budget).

Runs after the tier's gating, on the tools the tier kept: a request within its pair's budget, or a
pair without one, passes untouched; one over it is reported, trimmed (regated with the cut tools
hidden, so each protocol removes them its own way) or refused. `route` was decided before gating
(core/router.py routes a request over budget to a pair whose budget fits); a request it could not
place is reported here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.config import Settings
from gatekeeper.core.resolver import Resolution
from gatekeeper.core.router import Route
from gatekeeper.errors import ToolBudgetExceeded
from gatekeeper.observe import logs, metrics
from gatekeeper.protocols.base import Codec
from gatekeeper.protocols.gate import Gated
from gatekeeper.rules.budget import BudgetCheck, BudgetPolicy, mentioned_tools, trim
from gatekeeper.rules.tools import ToolPolicy

log = logs.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Budgeted:
    """What the budget did to one request: `action` is None within budget (or with none)."""

    check: BudgetCheck
    action: str | None = None  # reported | trimmed | refused | routed
    cut: list[str] = field(default_factory=list)

    def header(self) -> str | None:
        """`x-gatekeeper-tool-budget`, e.g. `offered=40; budget=16; action=trimmed` (None: within)."""
        if self.action is None:
            return None
        return f"offered={self.check.offered}; budget={self.check.budget}; action={self.action}"


def held_to_budget(
    settings: Settings,
    resolution: Resolution,
    names: Sequence[str],
    used: Collection[str] | Callable[[], Collection[str]] = (),
) -> tuple[list[str], Budgeted]:
    """The names of `names` (the tools the tier kept, in the client's order) the pair is shown
    under `tools.budget`, and what the budget did. Raises ToolBudgetExceeded under `refuse`.
    `used`: the tools the conversation used, which a trim keeps first (a function: asked only
    when a trim needs it, as it walks the whole conversation)."""
    check = BudgetCheck(len(names), resolution.tool_budget)
    if not check.over or check.budget is None:
        return list(names), Budgeted(check)
    mode = settings.tools.budget
    action = {"refuse": "refused", "trim": "trimmed"}.get(mode, "reported")  # route: no pair fitted
    log.info("tool_budget_exceeded", offered=check.offered, budget=check.budget, mode=mode, action=action)
    metrics.TOOL_BUDGET.labels(action).inc()
    if mode == "refuse":
        raise ToolBudgetExceeded(check.offered, check.budget, resolution.key)
    if mode != "trim":
        return list(names), Budgeted(check, action)
    kept = trim(names, check.budget, settings.tools.budget_priority, used() if callable(used) else used)
    keep = set(kept)
    cut = [name for name in names if name not in keep]
    log.info("tools_trimmed", cut=cut)
    return kept, Budgeted(check, action, cut)


def apply_budget(
    settings: Settings,
    codec: Codec,
    body: dict[str, Any],
    resolution: Resolution,
    policy: ToolPolicy,
    gated: Gated,
) -> tuple[Gated, Budgeted]:
    """`gated` (the tier's outcome for `body`) held to the pair's budget under `tools.budget`.
    Raises ToolBudgetExceeded under `refuse`; under `trim` regates `body` in place."""

    # A server offered whole (`server.*`) is one entry and never cut: its tools are not listed.
    def used() -> set[str]:
        return mentioned_tools(body) | {name for name in gated.kept if name.endswith(".*")}

    _, budgeted = held_to_budget(settings, resolution, gated.kept, used)
    if not budgeted.cut:
        return gated, budgeted
    regated = codec.gate(body, resolution.tier, BudgetPolicy(policy, budgeted.cut))
    # Hidden stays the tier's verdicts (drift and the tools-hidden metric read it); the cut is ours.
    return Gated(regated.kept, gated.hidden, regated.servers), budgeted


def routed_for_budget(route: Route, within: Budgeted) -> Budgeted:
    """`within` (the routed pair's check), marked `routed` when the asked pair's budget is what
    routing moved the request for (`tools.budget: route`)."""
    asked = BudgetCheck(within.check.offered, route.asked.tool_budget)
    if not asked.over:
        return within
    log.info("tool_budget_exceeded", offered=asked.offered, budget=asked.budget, mode="route", action="routed")
    metrics.TOOL_BUDGET.labels("routed").inc()
    return Budgeted(asked, "routed")
