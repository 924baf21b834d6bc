"""Capability routing: which `model@effort` a request is sent to so that its tools can be used. Pure.

Gating alone hides the tools a pair has not earned. With a `routing:` section the gateway first
looks, in its own measurements, for a pair that has earned them all:

    needed = the highest required tier among the offered tools, and the strictest category
             minimum of each category (`tools.requires`); a request without tools is never routed
    (under `tools.budget: route`, a pair admits them only if their number is within its budget)
    asked pair admits them   -> economize (opt-in): the cheapest lower effort of the same model
                                that admits them too and whose bounds are no worse in any
                                category; else the asked pair, untouched
    it does not              -> escalate (opt-in, default on): the cheapest higher effort of the
                                same model, up to `max_effort`, that admits them
                             -> else fallback: the models of the first `fallback` pattern that
                                matches the asked model, in order, each at its cheapest effort
                                that admits them (up to `max_effort`), else at `default`
                             -> else none: the asked pair, with the tools above it hidden.

Efforts are ordered none < minimal < low < medium < high < xhigh. `default` (no effort field) is
not ranked: it is never an escalation or economy target, only a fallback model's last resort; a
request at `default` may escalate to any ranked effort. Any other effort a client sends (Anthropic's
`max`, a vendor's own word) cannot be ordered, so it is neither escalated nor economized.

Only pins and valid measurements are candidates (`known`). A candidate that is not known yet is
listed in `RouteChoice.measure` when it would have been preferred to the choice: the caller starts
its lazy measurement and uses it on a later request, never waiting for it now. A candidate that
admits the tools but that this request cannot be sent to (`reachable`: its upstream cannot carry
what the request holds) is passed over for the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal

from gatekeeper.config import Routing
from gatekeeper.rules.requirements import Capability, meets
from gatekeeper.rules.tiers import Tier

__all__ = ["RANKED_EFFORTS", "Need", "Reason", "RouteChoice", "RoutingRules", "choose_route", "rank"]

RANKED_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh")
_RANK = {effort: i for i, effort in enumerate(RANKED_EFFORTS)}
DEFAULT = "default"

_TIERS = (Tier.SMALL, Tier.MEDIUM, Tier.LARGE)
_TIER_RANK = {t.value: i for i, t in enumerate(_TIERS)}

Reason = Literal["escalated", "economized", "fallback", "none"]
Known = Callable[[str, str], Capability | None]  # (model, effort) -> a pin's or a valid profile's capability
Reachable = Callable[[str, str], bool]  # (model, effort) -> can this request be sent there


def rank(effort: str) -> int | None:
    """The effort's place in the order, or None when it is not ranked (`default`, vendor words)."""
    return _RANK.get(effort)


@dataclass(frozen=True)
class Need:
    """What a request's tools need from the pair that serves them."""

    tier: Tier = Tier.SMALL
    minimums: Mapping[str, float] = field(default_factory=dict)
    # Under `tools.budget: route`, the number of tools offered: a pair whose budget is below it
    # does not admit them (None: budgets are not routed on).
    tools: int | None = None

    @classmethod
    def of(cls, needs: Iterable[tuple[Tier, Mapping[str, float]]]) -> Need | None:
        """The combined need of tools given as (required tier, category minimums); None: no tools."""
        rank = -1
        minimums: dict[str, float] = {}
        for required, mins in needs:
            rank = max(rank, _TIER_RANK[required.value])  # by value: an enum's hash is slow Python
            for category, minimum in mins.items():
                minimums[category] = max(minimum, minimums.get(category, minimum))
        return None if rank < 0 else cls(_TIERS[rank], minimums)


def admits(capability: Capability, need: Need) -> bool:
    return capability.tier.allows(need.tier) and meets(need.minimums, capability.bounds) and fits(capability, need)


def fits(capability: Capability, need: Need) -> bool:
    """Within the pair's tool budget (a pair without one has no limit: gatekeeper.rules.budget)."""
    return need.tools is None or capability.tool_budget is None or need.tools <= capability.tool_budget


def no_worse(cheaper: Capability, asked: Capability) -> bool:
    """True when `cheaper` is measured at least as well as `asked` in every category `asked` has a
    bound for (and `asked` has one at all: a one-sample profile cannot be compared). Never from or
    to a pin: its tier is the admin's, not its bounds' (a pin below the measurement says the
    admin does not trust it), whatever profile happens to be stored for the pair."""
    if asked.pinned or cheaper.pinned or not asked.bounds:
        return False
    return all(cheaper.bounds.get(c, -1.0) >= bound for c, bound in asked.bounds.items())


@dataclass(frozen=True)
class RoutingRules:
    """The `routing:` section as plain data (config.Routing converts to it)."""

    escalate_effort: bool = True
    economize_effort: bool = False
    fallback: Sequence[tuple[str, Sequence[str]]] = ()  # (shell-style pattern, models), in config order
    max_effort: str | None = None  # a ranked effort; None: no cap

    @classmethod
    def of(cls, section: Routing) -> RoutingRules:
        fallback = tuple((pattern, tuple(models)) for pattern, models in section.fallback.items())
        return cls(section.escalate_effort, section.economize_effort, fallback, section.max_effort)


@dataclass(frozen=True)
class RouteChoice:
    """Where to send the request: `model@effort`, and why. `reason == "none"` is today's
    behaviour (the asked pair, its hidden tools hidden). `measure`: pairs to measure lazily."""

    model: str
    effort: str
    reason: Reason
    capability: Capability | None = None  # the chosen pair's (None for "none": the caller has it)
    measure: tuple[tuple[str, str], ...] = ()

    @property
    def routed(self) -> bool:
        return self.reason != "none"


def choose_route(
    model: str,
    effort: str,
    need: Need | None,
    asked: Capability | None,
    rules: RoutingRules,
    known: Known,
    targets: Sequence[str] = RANKED_EFFORTS,
    reachable: Reachable | None = None,
) -> RouteChoice:
    """The pair a request for `model@effort` whose tools need `need` is sent to.

    `asked`: the asked pair's capability as the request would be gated today (its pin, profile,
    or the unknown tier while unmeasured). `targets`: the ranked efforts the client's protocol can
    carry (Anthropic's `output_config.effort` has no `none` or `minimal`), cheapest first.
    `reachable`: asked only of a candidate that would be chosen (None: every pair is).
    """
    if need is None:
        return RouteChoice(model, effort, "none")
    unknown: list[tuple[str, str]] = []

    def first(pairs: Iterable[tuple[str, str]], ok: Callable[[Capability], bool]) -> tuple[str, str, Capability] | None:
        for m, e in pairs:
            found = known(m, e)
            if found is None:
                unknown.append((m, e))
            elif ok(found) and (reachable is None or reachable(m, e)):
                return m, e, found
        return None

    max_rank = rank(rules.max_effort) if rules.max_effort is not None else None
    cap = len(RANKED_EFFORTS) if max_rank is None else max_rank  # config.Routing admits ranked efforts only
    ranked = [(e, r) for e in targets if (r := rank(e)) is not None]
    asked_rank = rank(effort)
    chosen: tuple[str, str, Capability] | None = None
    reason: Reason = "none"
    if asked is not None and admits(asked, need):
        if rules.economize_effort and asked_rank is not None:
            cheaper = [(model, e) for e, r in ranked if r < asked_rank]
            chosen = first(cheaper, lambda c: admits(c, need) and no_worse(c, asked))
            reason = "economized"
    else:
        if rules.escalate_effort and (asked_rank is not None or effort == DEFAULT):
            floor = -1 if asked_rank is None else asked_rank
            above = [(model, e) for e, r in ranked if floor < r <= cap]
            chosen = first(above, lambda c: admits(c, need))
            reason = "escalated"
        if chosen is None:
            models = next((ms for pattern, ms in rules.fallback if fnmatchcase(model, pattern)), ())
            efforts = [e for e, r in ranked if r <= cap] + [DEFAULT]
            pairs = [(m, e) for m in models if m != model for e in efforts]
            chosen = first(pairs, lambda c: admits(c, need))
            reason = "fallback"
    measure = _measuring_order(unknown) if unknown else ()
    if chosen is None:
        return RouteChoice(model, effort, "none", measure=measure)
    return RouteChoice(chosen[0], chosen[1], reason, chosen[2], measure)


def _measuring_order(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Unknown candidates in the order worth measuring: a model's `default` first (the level most
    clients send and `bench` sweeps first), then its efforts cheapest first; models in the order
    they were preferred. Measuring `none` first would cost a fallback model up to six measurements
    before its usual level is known."""
    first_seen = {m: i for i, (m, _) in reversed(list(enumerate(pairs)))}
    return tuple(sorted(pairs, key=lambda p: (first_seen[p[0]], p[1] != DEFAULT)))
