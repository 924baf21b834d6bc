"""Tool rules and request/response gating: pure functions, no server."""

from __future__ import annotations

import pytest

from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.protocols.chat.gate import gate_request
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolPolicy

POLICY = ToolPolicy({"execute_command": Tier.LARGE, "write_*": Tier.MEDIUM, "write_log": Tier.SMALL}, Tier.SMALL)


def tools(*names):
    return [{"type": "function", "function": {"name": n}} for n in names]


def test_exact_name_beats_pattern():
    assert POLICY.required_tier("write_log") == Tier.SMALL
    assert POLICY.required_tier("write_file") == Tier.MEDIUM
    assert POLICY.required_tier("anything") == Tier.SMALL


def test_default_tier_applies_to_unnamed_tools():
    assert ToolPolicy({}, Tier.MEDIUM).required_tier("x") == Tier.MEDIUM


def test_a_name_outside_ascii_gets_the_strictest_rule_unless_a_rule_names_it_exactly():
    """A Cyrillic е in еxecute_command folds to no rule: no table tells a lookalike from another
    script, so the name is judged by the strictest rule (never below the default)."""
    assert POLICY.required_tier("\u0435xecute_command") == Tier.LARGE
    assert POLICY.required_tier("r\u00e9sum\u00e9") == Tier.LARGE
    assert POLICY.required_tier("read_file") == Tier.SMALL  # ASCII: the rules as written
    catch_all = ToolPolicy({"*": Tier.SMALL, "execute_command": Tier.LARGE, "\u00e9crire": Tier.MEDIUM}, Tier.SMALL)
    assert catch_all.required_tier("\u0435xecute_command") == Tier.LARGE  # a pattern is no exact name
    assert catch_all.required_tier("\u00e9crire") == Tier.MEDIUM  # the operator named it as written
    assert ToolPolicy({"x": Tier.SMALL}, Tier.MEDIUM).required_tier("\u0445") == Tier.MEDIUM


def test_gate_removes_tools_above_the_tier():
    body = {"tools": tools("read", "write_file", "execute_command"), "tool_choice": "auto"}
    gated = gate_request(body, Tier.MEDIUM, POLICY)
    assert [t["function"]["name"] for t in body["tools"]] == ["read", "write_file"]
    assert gated.hidden == ["execute_command"] and body["tool_choice"] == "auto"


def test_gate_leaves_body_untouched_when_everything_is_allowed():
    body = {"tools": tools("read"), "x": 1}
    original = {"tools": tools("read"), "x": 1}
    gate_request(body, Tier.SMALL, POLICY)
    assert body == original


def test_forced_choice_of_allowed_tool_passes():
    body = {
        "tools": tools("read", "execute_command"),
        "tool_choice": {"type": "function", "function": {"name": "read"}},
    }
    gate_request(body, Tier.SMALL, POLICY)
    assert body["tool_choice"]["function"]["name"] == "read"


def test_legacy_function_call_forcing_hidden_function_is_blocked():
    body = {"functions": [{"name": "execute_command"}], "function_call": {"name": "execute_command"}}
    with pytest.raises(ToolChoiceBlocked, match="execute_command"):
        gate_request(body, Tier.SMALL, POLICY)


@pytest.mark.parametrize(
    "bad", [{"tools": "x"}, {"tools": [1]}, {"tools": [{"function": {}}]}, {"tools": tools("a"), "tool_choice": 5}]
)
def test_malformed_tool_fields_are_rejected(bad):
    with pytest.raises(RequestInvalid):
        gate_request(bad, Tier.LARGE, POLICY)
