"""Typed tool identity (`ToolId`), the built-in family table and how rules reach each kind."""

from __future__ import annotations

import typing
from typing import Any, Union, get_args, get_origin

import pytest

from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import BUILTIN_FAMILIES, ToolId, ToolKind, ToolPolicy, builtin_family


def _union_members(union: Any) -> list[Any]:
    members = get_args(union) if get_origin(union) is Union else [union]
    return [get_args(m)[0] if get_origin(m) is typing.Annotated else m for m in members]


def _type_literals(td: Any) -> tuple[Any, ...]:
    kind = typing.get_type_hints(td, include_extras=True).get("type")
    while get_origin(kind) in (typing.Required, typing.NotRequired, typing.Annotated):
        kind = get_args(kind)[0]
    return get_args(kind)


def _sdk_tool_types() -> set[str]:
    from anthropic.types.beta.beta_tool_union_param import BetaToolUnionParam
    from anthropic.types.tool_union_param import ToolUnionParam
    from openai.types.responses.tool_param import ToolParam

    found: set[str] = set()
    for union in (ToolParam, ToolUnionParam, BetaToolUnionParam):
        for member in _union_members(union):
            found.update(t for t in _type_literals(member) if isinstance(t, str))
    return found


# Types of the SDKs' tool unions that are not built-ins (they are gated as their own kind).
_NOT_BUILTIN = {"function", "custom", "mcp", "namespace", "mcp_toolset"}


def test_every_sdk_builtin_type_has_a_family() -> None:
    missing = _sdk_tool_types() - _NOT_BUILTIN - set(BUILTIN_FAMILIES)
    assert not missing, f"built-in tool types of the installed SDKs missing from BUILTIN_FAMILIES: {sorted(missing)}"


def test_family_rule_covers_every_version() -> None:
    policy = ToolPolicy({"web_search": Tier.LARGE})
    versions = [t for t, f in BUILTIN_FAMILIES.items() if f == "web_search"]
    assert {"web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26"} <= set(versions)
    for version in versions:
        assert policy.required_tier(ToolId.builtin(version)) == Tier.LARGE, version


def test_versioned_rule_and_family_rule_the_higher_wins() -> None:
    policy = ToolPolicy({"web_search": Tier.LARGE, "web_search_preview": Tier.SMALL})
    assert policy.required_tier(ToolId.builtin("web_search_preview")) == Tier.LARGE
    policy = ToolPolicy({"web_search": Tier.SMALL, "web_search_preview": Tier.LARGE})
    assert policy.required_tier(ToolId.builtin("web_search_preview")) == Tier.LARGE
    assert policy.required_tier(ToolId.builtin("web_search")) == Tier.SMALL


def test_kinds_never_match_each_other() -> None:
    assert ToolId.function("web_search") != ToolId.builtin("web_search")
    assert ToolId.function("github.x") != ToolId.mcp("github", "x")
    assert ToolId.mcp("ns", "f") != ToolId.namespaced("ns", "f")
    assert len({ToolId.function("a"), ToolId.custom("a"), ToolId.builtin("a")}) == 3


def test_no_prefix_matching_for_functions() -> None:
    policy = ToolPolicy({"computer": Tier.LARGE})
    assert policy.required_tier(ToolId.function("computer_notes")) == Tier.SMALL
    assert policy.required_tier(ToolId.builtin("computer_20250124")) == Tier.LARGE
    assert builtin_family("computer_notes") is None


@pytest.mark.parametrize(
    ("rules", "tool", "expected"),
    [
        ({"github.delete_*": Tier.LARGE}, ToolId.mcp("github", "delete_repo"), Tier.LARGE),
        ({"github.delete_*": Tier.LARGE}, ToolId.mcp("github", "read_file"), Tier.SMALL),
        ({"github": Tier.MEDIUM}, ToolId.mcp("github", "read_file"), Tier.MEDIUM),
        ({"github": Tier.LARGE, "github.read_file": Tier.SMALL}, ToolId.mcp("github", "read_file"), Tier.LARGE),
        ({"ns.f": Tier.LARGE}, ToolId.namespaced("ns", "f"), Tier.LARGE),
        ({"ns": Tier.MEDIUM}, ToolId.namespaced("ns", "g"), Tier.MEDIUM),
    ],
)
def test_group_rules(rules: dict[str, Tier], tool: ToolId, expected: Tier) -> None:
    assert ToolPolicy(rules).required_tier(tool) == expected


def test_rule_hiding_part_of_a_group() -> None:
    policy = ToolPolicy({"github.delete_*": Tier.LARGE, "files.write": Tier.MEDIUM})
    assert policy.rule_hiding_part_of("github", Tier.SMALL) == "github.delete_*"
    assert policy.rule_hiding_part_of("github", Tier.LARGE) is None
    assert policy.rule_hiding_part_of("files", Tier.SMALL) == "files.write"
    assert policy.rule_hiding_part_of("files", Tier.MEDIUM) is None
    # A label no rule names may be any server (gatekeeper.rules.mcp_identity): every server-scoped
    # rule may name one of its tools; with none above the tier it is offered whole.
    assert policy.rule_hiding_part_of("docs", Tier.SMALL) == "files.write"
    assert policy.rule_hiding_part_of("docs", Tier.LARGE) is None
    assert ToolPolicy({"docs": Tier.LARGE}).rule_hiding_part_of("docs", Tier.SMALL) is None  # hidden whole
    assert ToolPolicy({"*": Tier.LARGE}).rule_hiding_part_of("docs", Tier.SMALL) == "*"
    assert ToolPolicy({"*.delete": Tier.LARGE}).rule_hiding_part_of("docs", Tier.SMALL) == "*.delete"
    # A bare-name rule may name one of the group's tools: the group cannot be offered whole.
    assert ToolPolicy({"write_*": Tier.MEDIUM}).rule_hiding_part_of("files", Tier.SMALL) == "write_*"


def test_a_bare_name_rule_reaches_into_groups() -> None:
    policy = ToolPolicy({"execute_command": Tier.LARGE})
    assert policy.required_tier(ToolId.namespaced("ops", "execute_command")) == Tier.LARGE
    assert policy.required_tier(ToolId.mcp("shell", "execute_command")) == Tier.LARGE
    assert policy.required_tier(ToolId.mcp("shell", "list")) == Tier.SMALL


def test_group_and_str() -> None:
    assert ToolId.mcp("github", "a.b").group == "github"
    assert ToolId.namespaced("ns", "f").group == "ns"
    assert ToolId.function("f").group is None
    assert str(ToolId.mcp("github", "x")) == "github.x"
    assert ToolId.builtin("bash_20250124").kind is ToolKind.BUILTIN
