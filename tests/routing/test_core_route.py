"""Gatekeeper.route / aroute and tools.requires in the core, over a seeded JSON store."""

from __future__ import annotations

from conftest import make_profile, measuring_upstream, seed_store, settings_for, tool, wait_until

from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.rules.tiers import Tier

WRITE, EXEC, READ = tool("write_file", path="string"), tool("execute_command", command="string"), tool("read_file")
SURE = {"instruction": [0.95, 1.0], "json": [0.95, 1.0], "toolCalling": [0.95, 1.0]}


def seeded(store_path, suite, upstream_url="http://127.0.0.1:9/v1", **settings) -> Gatekeeper:
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, suite, effort="low"),
        make_profile("m", Tier.MEDIUM, suite, effort="medium"),
        make_profile("m", Tier.LARGE, suite, effort="high", score_intervals=SURE),
        make_profile("gemma-2b", Tier.SMALL, suite),
        make_profile("big-model", Tier.LARGE, suite),
    )
    return Gatekeeper(settings_for(upstream_url, store_path, **settings))


def test_route_escalates_the_effort(store_path, default_suite):
    with seeded(store_path, default_suite, routing={}) as gk:
        route = gk.route("m", "low", [READ, WRITE])
    assert (route.model, route.effort, route.reason) == ("m", "medium", "escalated")
    assert route.resolution.tier is Tier.MEDIUM and route.asked.key == "m@low"
    assert route.pair == "m@medium"


async def test_aroute_falls_back_to_another_model(store_path, default_suite):
    with seeded(store_path, default_suite, routing={"fallback": {"gemma-*": ["big-model"]}}) as gk:
        route = await gk.aroute("gemma-2b", None, [EXEC])
    assert (route.model, route.effort, route.reason) == ("big-model", "default", "fallback")


def test_route_without_a_routing_section_is_the_asked_pair(store_path, default_suite):
    with seeded(store_path, default_suite) as gk:
        route = gk.route("m", "low", [EXEC])
    assert (route.pair, route.reason, route.routed) == ("m@low", "none", False)
    assert route.resolution.tier is Tier.SMALL


def test_a_tool_with_a_category_minimum_routes_to_a_pair_that_meets_it(store_path, default_suite):
    requires = {
        "default_tier": "small",
        "required_tier": {"emit_invoice": "medium"},
        "requires": {"emit_invoice": {"json": 0.9}},
    }
    with seeded(store_path, default_suite, routing={}, tools=requires) as gk:
        route = gk.route("m", "low", [tool("emit_invoice")])
        # medium reaches the tier but stores no interval (one sample): its bound is unknown, unmet.
        assert route.pair == "m@high"
        assert gk.filter_tools("m", "medium", [tool("emit_invoice")]) == []
        assert gk.filter_tools("m", "high", [tool("emit_invoice")]) == [tool("emit_invoice")]


def test_a_pin_sets_the_tier_but_not_a_category_minimum(store_path, default_suite):
    tools = {"requires": {"emit_invoice": {"json": 0.9}}}
    with seeded(store_path, default_suite, tools=tools, pins={"pinned": "large", "m@high": "large"}) as gk:
        assert gk.filter_tools("pinned", None, [tool("emit_invoice"), READ]) == [READ]
        # A pinned pair with a valid measurement of its own: the minimum is judged on it.
        assert gk.filter_tools("m", "high", [tool("emit_invoice")]) == [tool("emit_invoice")]


def test_allowed_by_tier_alone_hides_tools_with_minimums(store_path, default_suite):
    with seeded(store_path, default_suite, tools={"requires": {"emit_invoice": {"json": 0.1}}}) as gk:
        assert gk.allowed(Tier.LARGE, [tool("emit_invoice"), READ]) == [READ]


def test_a_model_wide_pin_is_a_fallback_target_at_default_only(store_path, default_suite):
    rules = {"fallback": {"gemma-*": ["pinned"]}}
    with seeded(store_path, default_suite, routing=rules, pins={"pinned": "large"}) as gk:
        route = gk.route("gemma-2b", "low", [EXEC])
    assert route.pair == "pinned@default" and route.resolution.source == "pinned"


def test_an_unmeasured_candidate_is_measured_lazily_and_used_once_measured(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        rules = {"escalate_effort": False, "fallback": {"gemma-*": ["fresh"]}}
        with seeded(store_path, default_suite, upstream.base_url, routing=rules) as gk:
            first = gk.route("gemma-2b", None, [EXEC])
            assert first.reason == "none"  # never waited for
            wait_until(lambda: gk.lookup("fresh", None), "fresh@default to be measured")
            second = gk.route("gemma-2b", None, [EXEC])
    assert (second.pair, second.reason) == ("fresh@default", "fallback")


def intervals(low: float) -> dict[str, list[float]]:
    return {c: [low, 1.0] for c in ("instruction", "json", "toolCalling")}


def test_economize_sends_a_request_to_a_cheaper_effort_no_worse_in_any_category(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.LARGE, default_suite, effort="none", score_intervals=intervals(0.80)),
        make_profile("m", Tier.LARGE, default_suite, effort="low", score_intervals=intervals(0.93)),
        make_profile("m", Tier.LARGE, default_suite, effort="high", score_intervals=intervals(0.92)),
    )
    settings = settings_for("http://127.0.0.1:9/v1", store_path, routing={"economize_effort": True})
    with Gatekeeper(settings) as gk:
        route = gk.route("m", "high", [WRITE])
        assert (route.pair, route.reason) == ("m@low", "economized")  # none is cheaper, but worse
        assert gk.route("m", "high", []).reason == "none"  # no tools: never routed
    with Gatekeeper(settings_for("http://127.0.0.1:9/v1", store_path, routing={})) as gk:
        assert gk.route("m", "high", [WRITE]).reason == "none"  # economize_effort is off by default
