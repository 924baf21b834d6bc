"""The worked example of docs/routing.md of capability routing, row by row (through the core's decision)."""

from __future__ import annotations

import pytest
from conftest import make_profile, seed_store, settings_for, tool

from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.rules.tiers import Tier

ROUTING = {
    "escalate_effort": True,
    "economize_effort": False,
    "fallback": {"gemma-*": ["big-model", "other-model"]},
    "max_effort": "high",
}
RULES = {"default_tier": "small", "required_tier": {"write_file": "medium", "execute_command": "large"}}


@pytest.fixture
def gk(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("qwen3-8b", Tier.SMALL, default_suite, effort="low"),
        make_profile("qwen3-8b", Tier.MEDIUM, default_suite, effort="medium"),
        make_profile("qwen3-8b", Tier.LARGE, default_suite, effort="xhigh"),
        make_profile("gemma-3-4b", Tier.SMALL, default_suite),
        make_profile("big-model", Tier.LARGE, default_suite),
    )
    settings = settings_for("http://127.0.0.1:9/v1", store_path, tools=RULES, routing=ROUTING)
    with Gatekeeper(settings) as gatekeeper:
        yield gatekeeper


@pytest.mark.parametrize(
    ("model", "effort", "tools", "pair", "routed", "tier"),
    [
        ("qwen3-8b", "low", ["read_file", "write_file"], "qwen3-8b@medium", True, Tier.MEDIUM),
        ("qwen3-8b", "medium", ["read_file", "write_file"], "qwen3-8b@medium", False, Tier.MEDIUM),
        ("qwen3-8b", "low", ["execute_command"], "qwen3-8b@low", False, Tier.SMALL),
        ("gemma-3-4b", None, ["execute_command"], "big-model@default", True, Tier.LARGE),
    ],
)
def test_the_worked_example(gk, model, effort, tools, pair, routed, tier):
    route = gk.route(model, effort, [tool(n) for n in tools])
    assert (route.pair, route.routed, route.resolution.tier) == (pair, routed, tier)
