"""Per-tool category requirements (`tools.requires`) over plain data, and their config."""

from __future__ import annotations

import pytest
from conftest import make_profile, tool
from pydantic import ValidationError

from gatekeeper.config import Settings, describe_errors
from gatekeeper.protocols.chat.gate import gate_request
from gatekeeper.rules.requirements import PairPolicy, Requirements, bounds_of, unmet
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

POLICY = ToolPolicy({"emit_invoice": Tier.MEDIUM, "delete_*": Tier.SMALL})
REQUIRES = Requirements({"emit_invoice": {"json": 0.9}, "delete_*": {"toolCalling": 0.95}})


def test_exact_names_first_then_patterns_in_order():
    rules = Requirements({"d*": {"json": 0.1}, "delete_*": {"json": 0.2}, "delete_all": {"json": 0.3}})
    assert rules.rule("delete_all") == ("delete_all", {"json": 0.3})
    assert rules.rule("delete_one") == ("d*", {"json": 0.1})
    assert rules.rule("read_file") == (None, {})


def test_a_tool_is_offered_only_when_tier_and_minimums_both_hold():
    met = PairPolicy(POLICY, REQUIRES, {"json": 0.91})
    assert met.allows(Tier.MEDIUM, "emit_invoice")
    assert not met.allows(Tier.SMALL, "emit_invoice")  # tier
    assert not PairPolicy(POLICY, REQUIRES, {"json": 0.89}).allows(Tier.LARGE, "emit_invoice")  # minimum


def test_a_minimum_without_a_bound_is_unmet():
    assert not PairPolicy(POLICY, REQUIRES, {}).allows(Tier.LARGE, "delete_repo")
    assert unmet({"toolCalling": 0.95}, {}) == ["toolCalling >= 0.95 (not measured)"]


def test_why_hidden_names_the_requirement():
    policy = PairPolicy(POLICY, REQUIRES, {"json": 0.8})
    assert policy.why_hidden(Tier.SMALL, "emit_invoice") == "tier small < medium; json >= 0.9 (bound 0.800)"
    assert policy.why_hidden(Tier.LARGE, "read_file") is None


def test_bounds_are_the_lower_ends_of_the_stored_intervals(default_suite):
    profile = make_profile("m", Tier.LARGE, default_suite, score_intervals={"json": [0.82, 1.0]})
    assert bounds_of(profile) == {"json": 0.82}
    assert bounds_of(make_profile("m", Tier.LARGE, default_suite)) == {}  # the seed's one-sample format


def test_chat_gating_hides_a_tool_whose_minimum_is_unmet():
    body = {"model": "m", "tools": [tool("emit_invoice"), tool("read_file")]}
    gated = gate_request(body, Tier.LARGE, PairPolicy(POLICY, REQUIRES, {"json": 0.5}))
    assert gated.hidden == ["emit_invoice"] and gated.kept == ["read_file"]


def test_config_accepts_requires_with_patterns():
    settings = Settings.model_validate({"tools": {"requires": {"emit_invoice": {"json": 0.9}, "delete_*": {}}}})
    assert settings.tools.requires["emit_invoice"] == {"json": 0.9}


@pytest.mark.parametrize(
    ("requires", "message"),
    [
        ({"emit_invoice": {"jsn": 0.9}}, "tools.requires.emit_invoice.jsn"),
        ({"emit_invoice": {"json": 1.5}}, "tools.requires.emit_invoice.json: Input should be less than or equal to 1"),
        ({"emit_invoice": {"json": -0.1}}, "tools.requires.emit_invoice.json: Input should be greater than"),
        ({"emit_invoice": 0.9}, "tools.requires.emit_invoice: Input should be a valid dictionary"),
    ],
)
def test_config_refuses_bad_requirements_naming_the_key(requires, message):
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"tools": {"requires": requires}})
    assert message in describe_errors(caught.value)


def test_a_builtin_is_judged_by_its_type_and_its_family():
    rules = Requirements({"web_search": {"json": 0.5}, "web_search_2025_08_26": {"json": 0.7, "toolCalling": 0.6}})
    assert rules.of(ToolId.builtin("web_search_2025_08_26")) == {"json": 0.7, "toolCalling": 0.6}
    assert rules.of(ToolId.builtin("web_search_preview")) == {"json": 0.5}


def test_an_mcp_tool_is_judged_by_its_server_and_its_own_rule():
    rules = Requirements({"github": {"json": 0.5}, "github.delete_*": {"toolCalling": 0.95}})
    assert rules.of(ToolId.mcp("github", "delete_repo")) == {"json": 0.5, "toolCalling": 0.95}
    assert rules.of(ToolId.mcp("github", "list_issues")) == {"json": 0.5}


def test_a_server_offered_whole_is_narrowed_when_a_requirement_under_it_is_unmet():
    rules = Requirements({"github.delete_*": {"toolCalling": 0.95}})
    assert PairPolicy(ToolPolicy(), rules, {"toolCalling": 0.9}).rule_hiding_part_of("github", Tier.LARGE) == (
        "github.delete_*"
    )
    assert PairPolicy(ToolPolicy(), rules, {"toolCalling": 0.96}).rule_hiding_part_of("github", Tier.LARGE) is None
