"""The tool budget's rules (gatekeeper.rules.budget), its config and pins, and the in-process
registry held to it: what is kept when a request is trimmed, which names a conversation uses,
what a bad value is told, and `list_for_llm` under each mode."""

from __future__ import annotations

import pytest
from conftest import make_profile, seed_store, settings_for, tool

from gatekeeper import Gatekeeper, ToolBudgetExceeded, ToolRegistry
from gatekeeper.config import Pin, Settings, load_settings
from gatekeeper.errors import ConfigError
from gatekeeper.rules.budget import BudgetCheck, mentioned_tools, trim
from gatekeeper.rules.tiers import Tier

NAMES = ["a", "b", "c", "d", "e"]


def test_over_only_past_a_known_budget() -> None:
    assert BudgetCheck(5, 4).over
    assert not BudgetCheck(4, 4).over
    assert not BudgetCheck(500, None).over


def test_trim_keeps_the_client_order_within_the_budget() -> None:
    assert trim(NAMES, 3, [], set()) == ["a", "b", "c"]


def test_trim_puts_used_tools_first_then_priority_in_its_order() -> None:
    assert trim(NAMES, 3, ["e", "d"], {"c"}) == ["c", "d", "e"]
    assert trim(NAMES, 3, ["?"], set()) == ["a", "b", "c"]  # a pattern matching all: client order


def test_trim_never_drops_a_used_tool_even_past_the_budget() -> None:
    assert trim(NAMES, 2, [], {"b", "d", "e"}) == ["b", "d", "e"]


def test_mentioned_tools_are_the_conversations_and_the_choices_never_the_offer() -> None:
    body = {
        "tools": [{"type": "function", "function": {"name": "offered_only"}}],
        "messages": [
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "chat_call"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "name": "messages_call", "input": {}}]},
            {"role": "assistant", "content": [{"type": "mcp_tool_use", "server_name": "gh", "name": "issue"}]},
        ],
        "input": [{"type": "function_call", "name": "responses_call", "arguments": "{}"}],
        "tool_choice": {"type": "function", "function": {"name": "forced"}},
    }
    found = mentioned_tools(body)
    assert {"chat_call", "messages_call", "gh.issue", "responses_call", "forced"} <= found
    assert "offered_only" not in found


# -- config --------------------------------------------------------------------------------------


def test_a_pin_may_carry_a_budget_beside_plain_pins() -> None:
    settings = Settings.model_validate({"pins": {"m": {"tier": "medium", "tool_budget": 16}, "n": "large"}})
    assert settings.pin_entry("m", "low") == Pin(tier=Tier.MEDIUM, tool_budget=16)
    assert settings.pin_entry("n", "default") == Pin(tier=Tier.LARGE)
    assert settings.pin_for("m", "low") is Tier.MEDIUM


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("tools: {budget: cut}", "tools.budget: Input should be 'route', 'trim', 'refuse' or 'report', got 'cut'"),
        ("tools: {budget: route}", "tools.budget: 'route' sends"),
        ("pins: {m: {tier: medium, tool_budget: 0}}", "pins.m.Pin.tool_budget"),
        ("pins: {m: {tier: medium, budget: 4}}", "pins.m.Pin.budget: unknown key"),
        ("tools: {budget_priority: ['']}", "tools.budget_priority.0"),
    ],
)
def test_bad_budget_config_names_the_key(tmp_path, config, named) -> None:
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(config + "\n")
    with pytest.raises(ConfigError) as error:
        load_settings(path)
    assert named in str(error.value)


def test_the_default_mode_is_report() -> None:
    assert Settings().tools.budget == "report"


# -- in process ----------------------------------------------------------------------------------


def registry_for(upstream, store_path, default_suite, mode: str, budget: int | None = 2, **tools) -> ToolRegistry:
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite, tool_budget=budget))
    gk = Gatekeeper(settings_for(upstream.base_url, store_path, tools={"budget": mode} | tools))
    registry = ToolRegistry(gk)
    for name in NAMES:
        registry.register(tool(name, path="string"))
    return registry


def listed(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def test_list_for_llm_trims_by_priority_then_registration_order(upstream, store_path, default_suite) -> None:
    registry = registry_for(upstream, store_path, default_suite, "trim", budget_priority=["e"])
    try:
        assert listed(registry.list_for_llm("m")) == ["a", "e"]
    finally:
        registry.gk.close()


def test_list_for_llm_refuses_or_reports(upstream, store_path, default_suite) -> None:
    refusing = registry_for(upstream, store_path, default_suite, "refuse")
    try:
        with pytest.raises(ToolBudgetExceeded, match=r"offers 5 tools.*at most 2"):
            refusing.list_for_llm("m")
    finally:
        refusing.gk.close()
    reporting = registry_for(upstream, store_path, default_suite, "report")
    try:
        assert listed(reporting.list_for_llm("m")) == NAMES
    finally:
        reporting.gk.close()


def test_list_for_llm_without_a_budget_is_whole(upstream, store_path, default_suite) -> None:
    registry = registry_for(upstream, store_path, default_suite, "refuse", budget=None)
    try:
        assert listed(registry.list_for_llm("m")) == NAMES
    finally:
        registry.gk.close()
