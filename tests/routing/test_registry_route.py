"""ToolRegistry with routing and tools.requires (the in-process front end)."""

from __future__ import annotations

import pytest
from conftest import make_profile, seed_store, settings_for, tool

from gatekeeper import ToolRegistry
from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.errors import ToolNotAllowed
from gatekeeper.rules.tiers import Tier

SURE = {"instruction": [0.95, 1.0], "json": [0.95, 1.0], "toolCalling": [0.95, 1.0]}


@pytest.fixture
def gk(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.LARGE, default_suite, effort="high", score_intervals=SURE),
        make_profile("m", Tier.LARGE, default_suite, effort="xhigh"),
    )
    settings = settings_for(
        "http://127.0.0.1:9/v1", store_path, routing={}, tools={"requires": {"emit_invoice": {"json": 0.9}}}
    )
    with Gatekeeper(settings) as gatekeeper:
        yield gatekeeper


def registry_of(gk: Gatekeeper) -> ToolRegistry:
    registry = ToolRegistry(gk)
    registry.register(tool("read_file"), handler=lambda: "read")
    registry.register(tool("write_file"), required_tier="large", handler=lambda: "written")
    registry.register(tool("emit_invoice"), handler=lambda: "invoiced")
    return registry


def names(tools):
    return [t["function"]["name"] for t in tools]


def test_route_for_llm_escalates_to_the_effort_that_sees_every_tool(gk):
    routed = registry_of(gk).route_for_llm("m", effort="low")
    assert (routed.model, routed.effort, routed.reason) == ("m", "high", "escalated")
    assert names(routed.tools) == ["read_file", "write_file", "emit_invoice"]


async def test_aroute_for_llm_is_the_same_decision(gk):
    routed = await registry_of(gk).aroute_for_llm("m", effort="low")
    assert (routed.effort, routed.reason) == ("high", "escalated")


def test_list_for_llm_hides_a_tool_whose_minimum_is_unmet(gk):
    registry = registry_of(gk)
    # xhigh is large, but stores no interval: the json minimum cannot be judged.
    assert names(registry.list_for_llm("m", effort="xhigh")) == ["read_file", "write_file"]
    assert names(registry.list_for_llm("m", effort="high")) == ["read_file", "write_file", "emit_invoice"]


def test_call_refuses_a_tool_whose_minimum_is_unmet(gk):
    registry = registry_of(gk)
    with pytest.raises(ToolNotAllowed, match=r"json >= 0.9 \(not measured\)"):
        registry.call("m", "emit_invoice", {}, effort="xhigh")
    assert registry.call("m", "emit_invoice", {}, effort="high") == "invoiced"
