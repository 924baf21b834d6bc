"""The routing decision over plain data (gatekeeper.core.route_choice): no store, no server."""

from __future__ import annotations

import pytest

from gatekeeper.core.route_choice import Need, RouteChoice, RoutingRules, choose_route, rank
from gatekeeper.rules.requirements import Capability
from gatekeeper.rules.tiers import Tier

S, M, L = Tier.SMALL, Tier.MEDIUM, Tier.LARGE
ESCALATE = RoutingRules()


def known_from(pairs: dict[str, Capability]):
    """A `known` lookup over `model@effort` -> capability; records what was asked."""
    asked: list[str] = []

    def known(model: str, effort: str) -> Capability | None:
        asked.append(f"{model}@{effort}")
        return pairs.get(f"{model}@{effort}")

    known.asked = asked  # type: ignore[attr-defined]
    return known


def cap(tier: Tier, **bounds: float) -> Capability:
    return Capability(tier, bounds)


def route(
    model: str, effort: str, need: Need | None, pairs: dict[str, Capability], rules=ESCALATE, **kw
) -> RouteChoice:
    return choose_route(model, effort, need, pairs.get(f"{model}@{effort}", cap(S)), rules, known_from(pairs), **kw)


def test_efforts_are_ordered_and_default_is_not_ranked():
    assert [rank(e) for e in ("none", "minimal", "low", "medium", "high", "xhigh")] == [0, 1, 2, 3, 4, 5]
    assert rank("default") is None and rank("max") is None


def test_need_is_the_highest_tier_and_the_strictest_minimum_of_each_category():
    need = Need.of([(S, {"json": 0.5}), (L, {}), (M, {"json": 0.9, "toolCalling": 0.7})])
    assert need == Need(L, {"json": 0.9, "toolCalling": 0.7})


def test_a_request_without_tools_is_never_routed():
    pairs = {"m@low": cap(S), "m@high": cap(L)}
    assert route("m", "low", Need.of([]), pairs) == RouteChoice("m", "low", "none")


def test_escalates_to_the_cheapest_higher_effort_that_admits_the_tools():
    pairs = {"m@low": cap(S), "m@medium": cap(M), "m@high": cap(L), "m@xhigh": cap(L)}
    decision = route("m", "low", Need(M), pairs)
    assert (decision.model, decision.effort, decision.reason) == ("m", "medium", "escalated")
    assert decision.capability == cap(M)


def test_never_escalates_to_a_lower_effort_even_when_it_would_admit():
    pairs = {"m@none": cap(L), "m@high": cap(S)}
    assert route("m", "high", Need(L), pairs).reason == "none"


def test_max_effort_caps_escalation():
    pairs = {"m@low": cap(S), "m@high": cap(M), "m@xhigh": cap(L)}
    capped = RoutingRules(max_effort="high")
    assert route("m", "low", Need(L), pairs, capped).reason == "none"
    assert route("m", "low", Need(M), pairs, capped).effort == "high"


def test_a_request_at_default_may_escalate_to_any_ranked_effort():
    pairs = {"m@default": cap(S), "m@none": cap(S), "m@low": cap(M)}
    decision = route("m", "default", Need(M), pairs)
    assert (decision.effort, decision.reason) == ("low", "escalated")


def test_default_is_never_an_escalation_target():
    pairs = {"m@low": cap(S), "m@default": cap(L)}
    assert route("m", "low", Need(L), pairs).reason == "none"


def test_an_unranked_effort_is_not_escalated():
    pairs = {"m@max": cap(S), "m@xhigh": cap(L)}
    assert route("m", "max", Need(L), pairs).reason == "none"


def test_without_escalate_effort_the_same_model_is_not_tried():
    pairs = {"m@low": cap(S), "m@high": cap(L)}
    assert route("m", "low", Need(L), pairs, RoutingRules(escalate_effort=False)).reason == "none"


def test_falls_back_to_the_first_model_of_the_first_matching_pattern():
    rules = RoutingRules(fallback=(("gemma-*", ("big", "other")), ("*", ("never",))))
    pairs = {"gemma-2b@low": cap(S), "big@default": cap(M), "other@default": cap(L), "never@default": cap(L)}
    decision = route("gemma-2b", "low", Need(L), pairs, rules)
    assert (decision.model, decision.effort, decision.reason) == ("other", "default", "fallback")


def test_a_fallback_model_is_used_at_its_cheapest_effort_that_admits_before_default():
    rules = RoutingRules(fallback=(("small", ("big",)),))
    pairs = {"small@default": cap(S), "big@none": cap(S), "big@low": cap(L), "big@default": cap(L)}
    assert route("small", "default", Need(L), pairs, rules).effort == "low"


def test_max_effort_caps_a_fallback_models_effort_but_not_its_default():
    rules = RoutingRules(fallback=(("small", ("big",)),), max_effort="low")
    pairs = {"small@default": cap(S), "big@xhigh": cap(L), "big@default": cap(L)}
    assert route("small", "default", Need(L), pairs, rules).effort == "default"


def test_escalation_is_preferred_to_fallback():
    rules = RoutingRules(fallback=(("m", ("big",)),))
    pairs = {"m@low": cap(S), "m@high": cap(L), "big@default": cap(L)}
    assert route("m", "low", Need(L), pairs, rules).reason == "escalated"


def test_untouched_when_the_asked_pair_admits_the_tools():
    rules = RoutingRules(fallback=(("*", ("big",)),))
    pairs = {"m@low": cap(M), "m@high": cap(L), "big@default": cap(L)}
    assert route("m", "low", Need(M), pairs, rules) == RouteChoice("m", "low", "none")


def test_nothing_admits_the_tools_so_they_are_hidden_as_today():
    rules = RoutingRules(fallback=(("*", ("big",)),))
    pairs = {"m@low": cap(S), "m@high": cap(M), "big@default": cap(M)}
    assert route("m", "low", Need(L), pairs, rules).reason == "none"


def test_category_minimums_are_judged_on_bounds_when_routing():
    need = Need(M, {"json": 0.9})
    pairs = {"m@low": cap(L, json=0.8), "m@medium": cap(M), "m@high": cap(M, json=0.92)}
    decision = route("m", "low", need, pairs)
    # medium has no bound at all (a pin, or a one-sample profile): its minimum is unmet.
    assert (decision.effort, decision.reason) == ("high", "escalated")


def test_economizes_to_the_cheapest_effort_no_worse_in_any_category():
    rules = RoutingRules(economize_effort=True)
    high = cap(L, json=0.9, toolCalling=0.9, instruction=0.9)
    pairs = {
        "m@none": cap(L, json=0.95, toolCalling=0.85, instruction=0.99),  # worse at toolCalling
        "m@low": cap(L, json=0.9, toolCalling=0.91, instruction=0.9),
        "m@medium": cap(L, json=0.99, toolCalling=0.99, instruction=0.99),
        "m@high": high,
    }
    decision = route("m", "high", Need(M), pairs, rules)
    assert (decision.effort, decision.reason) == ("low", "economized")


def test_does_not_economize_without_bounds_to_compare():
    rules = RoutingRules(economize_effort=True)
    pairs = {"m@low": cap(L, json=0.99), "m@high": cap(L)}  # high is pinned: nothing to compare with
    assert route("m", "high", Need(M), pairs, rules).reason == "none"


def test_economize_is_off_by_default():
    pairs = {"m@low": cap(L, json=0.99), "m@high": cap(L, json=0.5)}
    assert route("m", "high", Need(M), pairs).reason == "none"


def test_economize_keeps_the_needed_tier_and_minimums():
    rules = RoutingRules(economize_effort=True)
    pairs = {"m@low": cap(M, json=0.9), "m@high": cap(L, json=0.9)}
    assert route("m", "high", Need(L), pairs, rules).reason == "none"
    pairs = {"m@low": cap(L, json=0.85), "m@high": cap(L, json=0.95)}
    assert route("m", "high", Need(M, {"json": 0.9}), pairs, rules).reason == "none"


def test_protocol_targets_limit_the_efforts_routing_may_set():
    pairs = {"m@low": cap(S), "m@none": cap(S), "m@minimal": cap(L), "m@high": cap(L)}
    decision = route("m", "default", Need(L), pairs, targets=("low", "medium", "high", "xhigh"))
    assert decision.effort == "high"


def test_unknown_candidates_before_the_choice_are_listed_for_lazy_measurement():
    pairs = {"m@low": cap(S), "m@xhigh": cap(L)}
    decision = route("m", "low", Need(L), pairs)
    assert decision.effort == "xhigh"  # used now; the cheaper ones are measured for next time
    assert decision.measure == (("m", "medium"), ("m", "high"))


def test_an_unmeasured_fallback_model_is_measured_at_default_first():
    rules = RoutingRules(fallback=(("m", ("big",)),), max_effort="low")
    decision = route("m", "low", Need(L), {"m@low": cap(S)}, rules)
    assert decision.reason == "none"
    assert decision.measure[:2] == (("big", "default"), ("big", "none"))


def test_the_asked_model_is_not_its_own_fallback():
    rules = RoutingRules(escalate_effort=False, fallback=(("m*", ("m",)),))
    pairs = {"m@low": cap(S), "m@default": cap(L)}
    assert route("m", "low", Need(L), pairs, rules).reason == "none"


@pytest.mark.parametrize("asked", [None, cap(S)])
def test_an_unknown_asked_pair_is_routed_like_a_small_one(asked):
    pairs = {"m@high": cap(L)}
    decision = choose_route("m", "low", Need(L), asked, ESCALATE, known_from(pairs))
    assert decision.effort == "high"
