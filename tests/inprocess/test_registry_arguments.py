"""ToolRegistry under argument rules (`tools.arguments`): a tool is listed where some call of it
is admitted, and `call` judges each call's arguments before its handler runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import make_profile, names, seed_store, settings_for, tool

from gatekeeper import Gatekeeper, ToolNotAllowed, ToolRegistry
from gatekeeper.rules.tiers import Tier

ARGUMENTS = {
    "execute_command": [{"match": {"command": "ls *"}, "tier": "small"}],
    "read_file": [{"match": {"path": "/secrets/*"}, "tier": "large"}],
    "deploy": [{"match": {"env": {"equals": "staging"}}, "tier": "small"}],
}


@pytest.fixture
def registry(store_path, default_suite) -> Iterator[tuple[ToolRegistry, list[tuple[str, dict]]]]:
    seed_store(
        store_path,
        make_profile("small-model", Tier.SMALL, default_suite),
        make_profile("large-model", Tier.LARGE, default_suite),
    )
    rules = {"default_tier": "small", "required_tier": {"execute_command": "large"}, "arguments": ARGUMENTS}
    gk = Gatekeeper(settings_for("http://127.0.0.1:9/v1", store_path, tools=rules))
    ran: list[tuple[str, dict]] = []
    registry = ToolRegistry(gk)
    for name, param in (("execute_command", "command"), ("read_file", "path")):
        registry.register(tool(name, **{param: "string"}), handler=lambda _n=name, **kw: ran.append((_n, kw)) or "ok")
    # A tier given at registration is the tool's own requirement; argument rules still lower it.
    registry.register(
        tool("deploy", env="string"), required_tier="large", handler=lambda **kw: ran.append(("deploy", kw))
    )
    yield registry, ran
    gk.close()


def test_a_tool_is_listed_where_some_call_is_admitted(registry):
    reg, _ = registry
    assert names(reg.list_for_llm("small-model")) == ["execute_command", "read_file", "deploy"]


def test_a_call_is_judged_on_its_arguments_before_it_runs(registry):
    reg, ran = registry
    assert reg.call("small-model", "execute_command", '{"command": "ls -la"}') == "ok"
    for arguments in ('{"command": "ls; rm -rf /"}', '{"command": "rm -rf /"}', "not json", None):
        with pytest.raises(ToolNotAllowed, match="with these arguments requires tier 'large'"):
            reg.call("small-model", "execute_command", arguments)
    with pytest.raises(ToolNotAllowed):
        reg.call("small-model", "read_file", {"path": "/secrets/key"})
    assert reg.call("small-model", "read_file", {"path": "/tmp/a"}) == "ok"
    assert reg.call("large-model", "read_file", {"path": "/secrets/key"}) == "ok"
    assert ran == [
        ("execute_command", {"command": "ls -la"}),
        ("read_file", {"path": "/tmp/a"}),
        ("read_file", {"path": "/secrets/key"}),
    ]


def test_a_registered_tier_is_the_own_requirement_argument_rules_judge_against(registry):
    reg, ran = registry
    reg.call("small-model", "deploy", {"env": "staging"})
    with pytest.raises(ToolNotAllowed):
        reg.call("small-model", "deploy", {"env": "production"})
    assert ran == [("deploy", {"env": "staging"})]


async def test_acall_judges_arguments_too(registry):
    reg, ran = registry
    with pytest.raises(ToolNotAllowed):
        await reg.acall("small-model", "execute_command", {"command": "ls && rm -rf /"})
    assert ran == []
