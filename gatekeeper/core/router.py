"""The routing decision (gatekeeper.core.route_choice) over the core's data: candidates are what the tier
resolver knows (pins and valid profiles), unknown candidates are measured lazily through the
measurement scheduler (within the lazy limits) and never waited for.

It also binds the tool policy to one pair (`policy_for`): the tier rules, plus `tools.requires`
judged on the pair's measured bounds (gatekeeper.rules.requirements).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gatekeeper.config import Settings
from gatekeeper.core.gate import check_fields
from gatekeeper.core.resolver import Resolution, TierResolver
from gatekeeper.core.route_choice import (
    RANKED_EFFORTS,
    Need,
    Reachable,
    Reason,
    RouteChoice,
    RoutingRules,
    choose_route,
)
from gatekeeper.errors import RequestInvalid
from gatekeeper.observe import logs
from gatekeeper.protocols import table as protocol_table
from gatekeeper.protocols.base import Codec, RequestInfo
from gatekeeper.protocols.reroute import effort_targets, rerouted
from gatekeeper.rules.requirements import Capability, PairPolicy, Requirements, bounds_of
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile, profile_key

log = logs.get_logger(__name__)

_CAPABILITIES_KEPT = 4096  # pairs' capabilities remembered (cleared whole past it: model names come from clients)

# start(model, effort) -> the pair's running flight, or None when no measurement may start.
StartFn = Callable[[str, str], "concurrent.futures.Future[Profile] | None"]


@dataclass(frozen=True)
class Route:
    """The pair a request is served by, and why (see gatekeeper.core.route_choice).

    `resolution` is the pair actually used (its tier and source go in the answer's headers) and
    `policy` the tool policy bound to it: gate the request with both, so the answer side enforces
    the tools offered to that pair. `reason == "none"`: the asked pair, as without routing.
    """

    model: str
    effort: str  # the effort key: "default" means no effort field
    reason: Reason
    resolution: Resolution
    policy: ToolPolicy
    asked: Resolution

    @property
    def routed(self) -> bool:
        return self.reason != "none"

    @property
    def pair(self) -> str:
        return profile_key(self.model, self.effort)


class Router:
    """One per settings snapshot (a reload builds a new one)."""

    def __init__(self, settings: Settings, policy: ToolPolicy, resolver: TierResolver, start: StartFn) -> None:
        self.settings, self.policy, self.resolver, self._start = settings, policy, resolver, start
        self.requirements = Requirements(settings.tools.requires, policy.named_groups)
        # id(resolution) -> (resolution, its capability); the resolution is kept so its id is not reused.
        self._capabilities: dict[int, tuple[Resolution, Capability]] = {}
        self.rules: RoutingRules | None = RoutingRules.of(settings.routing) if settings.routing is not None else None

    # -- one pair ------------------------------------------------------------------------------

    def capability(self, resolution: Resolution) -> Capability:
        """The tier the pair is gated at, and the bounds its category minimums are judged on."""
        # The resolver hands out the same Resolution for a pair for a while: remember its answer.
        cached = self._capabilities.get(id(resolution))
        if cached is not None and cached[0] is resolution:
            return cached[1]
        found = self._capability(resolution)
        if resolution.source in ("measured", "pinned"):  # the others are new objects per request
            if len(self._capabilities) >= _CAPABILITIES_KEPT:
                self._capabilities.clear()
            self._capabilities[id(resolution)] = (resolution, found)
        return found

    def _capability(self, resolution: Resolution) -> Capability:
        budget = resolution.tool_budget
        if resolution.source == "measured":
            return Capability(resolution.tier, bounds_of(resolution.profile), tool_budget=budget)
        if resolution.source == "pinned":
            # A pin vouches for a tier; minimums are judged on a measurement when one exists.
            bounds: dict[str, float] = {}
            if self.requirements:
                stored = self.resolver.store.get(resolution.key)
                if stored is not None and stored.is_valid_for(self.resolver.suite):
                    bounds = bounds_of(stored)
            return Capability(resolution.tier, bounds, pinned=True, tool_budget=budget)
        return Capability(resolution.tier, tool_budget=budget)  # demoted, pending, unmeasured: no bounds to trust

    def policy_for(self, resolution: Resolution) -> ToolPolicy:
        """The tool policy for one pair: the tier rules alone when there are no requirements."""
        if not self.requirements:
            return self.policy
        return PairPolicy(self.policy, self.requirements, self.capability(resolution).bounds)

    def need(self, names: Iterable[str | ToolId]) -> Need | None:
        """What tools of these names need (None: no tools)."""
        return Need.of((self.policy.required_tier(n), self.requirements.of(n)) for n in names)

    # -- routing -------------------------------------------------------------------------------

    def route(
        self,
        asked: Resolution,
        model: str,
        effort: str | None,
        need: Need | None,
        targets: Sequence[str] = RANKED_EFFORTS,
        *,
        measure: bool = True,
        client: str | None = None,
        reachable: Reachable | None = None,
    ) -> Route:
        """Where a request for `model@effort` (already resolved: `asked`) whose tools need `need`
        goes. Never blocks on a measurement: it reads the resolver and may start one. `client`:
        the caller's drift identity; a candidate demoted for it is judged at its demoted tier.
        `reachable(model, effort)`: whether the request can be sent there (None: anywhere)."""
        effort = effort or DEFAULT_EFFORT
        if self.rules is None or need is None:
            return Route(model, effort, "none", asked, self.policy_for(asked), asked)
        found: dict[tuple[str, str], Resolution] = {}

        def known(m: str, e: str) -> Capability | None:
            # The client's demotions too: a pair demoted for this client alone would otherwise be
            # chosen for a tier it does not serve this client at, and the tools hidden after all.
            resolution = self.resolver.lookup(m, e, client)
            if resolution is None or not self._target(resolution, m, e):
                return None
            found[(m, e)] = resolution
            return self.capability(resolution)

        decision = choose_route(model, effort, need, self.capability(asked), self.rules, known, targets, reachable)
        if measure and decision.measure:
            self._measure_lazily(decision)
        if not decision.routed:
            return Route(model, effort, "none", asked, self.policy_for(asked), asked)
        used = found[(decision.model, decision.effort)]
        return Route(decision.model, decision.effort, decision.reason, used, self.policy_for(used), asked)

    def route_body(
        self, codec: Codec, body: dict[str, Any], info: RequestInfo, asked: Resolution, client: str | None = None
    ) -> Route | None:
        """Routing for a parsed client request (the proxy): the need of the tools it offers, the
        decision, and, when routed, `body` rewritten in place for the routed pair (the protocol's
        own model and effort fields). Gate `body` with the result's resolution and policy.
        None: routing does not apply (no `routing:` section, or the request offers no tool)."""
        if self.rules is None:
            return None
        need = self.need_of_body(codec, body)
        if need is None:
            return None
        rewritten: dict[tuple[str, str], dict[str, Any]] = {}

        def reachable(model: str, effort: str) -> bool:
            out = rerouted(codec, body, model, effort)
            why = self._unservable(codec, out, model) if out is not None else "the protocol's fields cannot say it"
            if out is None or why is not None:
                log.info("route_not_taken", asked=asked.key, to=profile_key(model, effort), why=why)
                return False
            rewritten[(model, effort)] = out
            return True

        route = self.route(
            asked, info.model, info.effort, need, effort_targets(codec.name), client=client, reachable=reachable
        )
        if route.routed:
            body.clear()
            body.update(rewritten[(route.model, route.effort)])
        return route

    def _unservable(self, codec: Codec, body: dict[str, Any], model: str) -> str | None:
        """Why the upstream serving `model` cannot take this request (None: it can). A `models:`
        route speaks chat only; a request of another protocol is translated, and what cannot be
        translated (a built-in tool, server-held state) would make routing turn a request the
        asked pair serves, with the tool hidden, into a 400."""
        native = ("chat",) if self.settings.model_route(model) is not None else tuple(self.settings.upstream.protocols)
        if codec.name in native:
            return None
        translator = protocol_table.translator(codec.name)
        if translator is None:
            return f"its upstream does not speak {codec.name}"
        try:
            translator.to_chat(body)
        except RequestInvalid as exc:
            return f"its upstream speaks chat only: {exc}"
        # A built-in tool a translation leaves out could not be used there: not where to route it.
        if left_out := translator.untranslated(body):
            return f"its upstream speaks chat only and runs no built-in tool ({', '.join(left_out)})"
        return None

    def need_of_body(self, codec: Codec, body: dict[str, Any]) -> Need | None:
        """What the tools a request body offers need: the codec gates it with a policy that hides
        nothing and records every tool it is asked about (so every protocol's tool forms count,
        exactly as its gating names them). None: the body offers no tool."""
        recorder = check_fields(codec, body, self.policy)
        needs = [(self.policy.required_tier(t), self.requirements.of(t)) for t in recorder.tools]
        needs += [self._whole_group(group) for group in recorder.groups]
        need = Need.of(needs)
        if need is not None and self.settings.tools.budget == "route":
            # Each listed tool counts, and a server offered whole as one (its tools are not listed).
            need = replace(need, tools=len(set(map(str, recorder.tools))) + len(set(recorder.groups)))
        return need

    def _whole_group(self, group: str) -> tuple[Tier, dict[str, float]]:
        """An MCP server or namespace offered whole needs every rule under it: the lowest tier at
        which no tier rule hides part of it, and every category minimum of a requirement under it."""
        tier = next(
            (t for t in (Tier.SMALL, Tier.MEDIUM) if self.policy.rule_hiding_part_of(group, t) is None), Tier.LARGE
        )
        minimums: dict[str, float] = {}
        for rule, mins in self.requirements.items():
            if self.requirements.overlaps(rule, group):
                for category, minimum in mins.items():
                    minimums[category] = max(minimum, minimums.get(category, minimum))
        return tier, minimums

    def _target(self, resolution: Resolution, model: str, effort: str) -> bool:
        """May routing send a request to this pair? A valid profile or a pin naming this effort
        makes it a target. A pin of the whole model (`m`, `m@*`) sets the tier of every effort a
        client asks for, but says nothing about which effort fields the model accepts: of those,
        only `default` (no effort field) is a target, so routing never invents an effort."""
        if resolution.source != "pinned" or effort == DEFAULT_EFFORT:
            return True
        if f"{model}@{effort}" in self.settings.pins:
            return True
        stored = self.resolver.store.get(resolution.key)
        return stored is not None and stored.is_valid_for(self.resolver.suite)

    def _measure_lazily(self, decision: RouteChoice) -> None:
        """Start the first unknown candidate the scheduler accepts (it is joined while it runs, so
        one model's candidates are measured one after another, each counted by the lazy limits).
        A pinned pair is never measured for routing: its pin would choose_route its tier anyway."""
        for model, effort in decision.measure:
            if self.settings.pin_for(model, effort) is None and self._start(model, effort) is not None:
                return
