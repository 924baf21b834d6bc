"""The MCP door by tier beyond tools (issue 32): resources, resource templates, prompts and
completions are listed and read only when the tier admits them, through a real proxy on a real
port, a real MCP server (tests/mcp/reads_server.py, the SDK's MCPServer over stdio) and the
official `mcp` client. A hidden one is left out of its listing; reading, getting or completing it
is a JSON-RPC error and never reaches the server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import await_until
from gateway_helpers import RULES, connect, gateway
from mcp import ClientSession, types
from mcp.shared.exceptions import MCPError
from reads_server import SECRET
from test_mcp_hostile import wait_listed

VAULT = Path(__file__).with_name("reads_server.py")
HIDDEN_TOOLS = {"required_tier": {**RULES, "vault.*": "large"}}  # every tool of vault: large only
PROMPT = types.PromptReference(type="ref/prompt", name="vault__hello")
TEMPLATE = types.ResourceTemplateReference(type="ref/resource", uri="act://{name}")


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"  # where the servers log what reached them
    folder.mkdir()
    return folder


def vault(folder: Path, **extra: Any) -> dict[str, Any]:
    return {"command": [sys.executable, str(VAULT)], "env": {"TOY_DIR": str(folder)}, "timeout_s": 10} | extra


def reached(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


async def shown(session: ClientSession) -> dict[str, list[str]]:
    return {
        "resources": sorted(str(r.uri) for r in (await session.list_resources()).resources),
        "templates": sorted(t.uri_template for t in (await session.list_resource_templates()).resource_templates),
        "prompts": sorted(p.name for p in (await session.list_prompts()).prompts),
    }


async def refused(attempt: Any, *words: str) -> types.ErrorData:
    with pytest.raises(MCPError) as caught:
        await attempt
    error = caught.value.error
    assert error.code == types.INVALID_PARAMS, error
    assert error.data["reason"] == "tier_too_low" and "not forwarded" in error.message, error
    for word in words:
        assert word in error.message, error.message
    assert SECRET not in error.message
    return error


EVERYTHING = {
    "resources": ["doc://readme", "secret://token"],
    "templates": ["act://{name}"],
    "prompts": ["vault__hello", "vault__leak"],
}


async def test_a_server_whose_tools_are_all_hidden_is_hidden_whole(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"vault": vault(notes_dir)}, tools=HIDDEN_TOOLS) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", ["vault__deploy"])
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert await shown(session) == {"resources": [], "templates": [], "prompts": []}
            await refused(session.read_resource("secret://token"), "'vault'", "none of its tools")
            await refused(session.read_resource("act://shutdown"))  # the read that acts
            await refused(session.get_prompt("vault__leak"))
            await refused(session.complete(PROMPT, {"name": "who", "value": "a"}))
            await refused(session.complete(TEMPLATE, {"name": "name", "value": "a"}))
        assert reached(notes_dir) == []  # nothing of it reached the server
        async with connect(proxy.url + "/mcp/large-model") as session:  # its tools are shown: so is it
            assert await shown(session) == EVERYTHING
            assert (await session.read_resource("secret://token")).contents[0].text == SECRET
            assert (await session.read_resource("act://deploy")).contents[0].text == "performed deploy"
            assert SECRET in (await session.get_prompt("vault__leak")).messages[0].content.text
            assert (await session.complete(PROMPT, {"name": "who", "value": "a"})).completion.values == ["hello:a1"]
        assert reached(notes_dir) == ["read token", "act", "get leak", "complete"]


async def test_rules_and_the_server_default_tier_decide_each_resource_template_and_prompt(
    tmp_path, default_suite, notes_dir
):
    mcp = {
        "resources": {"vault.readme": "small", "vault.a*": "large"},  # `act`, the template
        "prompts": {"vault.hello": "small"},
    }
    servers = {"vault": vault(notes_dir, default_tier="medium")}
    with gateway(tmp_path, default_suite, servers, tools=HIDDEN_TOOLS, mcp=mcp) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", ["vault__deploy"])
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert await shown(session) == {"resources": ["doc://readme"], "templates": [], "prompts": ["vault__hello"]}
            assert (await session.read_resource("doc://readme")).contents[0].text == "the vault readme"
            assert "Hello bo" in (await session.get_prompt("vault__hello", {"who": "bo"})).messages[0].content.text
            assert (await session.complete(PROMPT, {"name": "who", "value": "a"})).completion.values == ["hello:a1"]
            error = await refused(session.read_resource("secret://token"), "default_tier")
            assert (error.data["required_tier"], error.data["tier"]) == ("medium", "small")
            await refused(session.get_prompt("vault__leak"), "default_tier")
            # A completion follows what it completes: the template is large.
            await refused(session.complete(TEMPLATE, {"name": "name", "value": "a"}), "'vault.act'")
        async with connect(proxy.url + "/mcp/medium-model") as session:
            assert await shown(session) == {**EVERYTHING, "templates": []}
            assert (await session.read_resource("secret://token")).contents[0].text == SECRET
            error = await refused(session.read_resource("act://shutdown"), "'vault.act'")
            assert error.data["required_tier"] == "large"
        assert "act" not in reached(notes_dir)


async def test_a_server_with_no_tools_is_read_only_under_a_rule_or_its_default_tier(tmp_path, default_suite, notes_dir):
    from test_mcp_round2 import r2

    servers = {"docs": r2("resources", notes_dir), "vault": vault(notes_dir)}
    with gateway(tmp_path, default_suite, servers, tools=HIDDEN_TOOLS, mcp={"prompts": {"vault.*": "small"}}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", ["vault__deploy"])
        async with connect(proxy.url + "/mcp/large-model") as session:

            async def docs_listed() -> bool:
                await session.list_resources()
                return "resources/list" in reached(notes_dir)

            await await_until(docs_listed, "docs to be asked for its resources")
            assert "doc://one" not in (await shown(session))["resources"]  # no tools, no rule, no default
            await refused(session.read_resource("doc://one"), "'docs'")
        async with connect(proxy.url + "/mcp/small-model") as session:
            # A rule opens what it names, and only that: vault's prompts, not its resources.
            assert await shown(session) == {
                "resources": [],
                "templates": [],
                "prompts": ["vault__hello", "vault__leak"],
            }
        assert "resources/read" not in reached(notes_dir)


# -- the rules alone (gatekeeper.mcp.reads: pure) ----------------------------------------------


def test_an_exact_rule_beats_a_pattern_and_patterns_go_in_config_order() -> None:
    from gatekeeper.mcp.reads import ReadRules
    from gatekeeper.rules.tiers import Tier

    rules = ReadRules({"v.a*": Tier.LARGE, "v.*": Tier.MEDIUM, "v.abc": Tier.SMALL}, {}, {})
    assert rules.judge(Tier.SMALL, "resource", "v", "abc", False).allowed
    assert rules.judge(Tier.MEDIUM, "resource", "v", "abd", True).required == Tier.LARGE
    assert rules.judge(Tier.MEDIUM, "resource", "v", "x", False).allowed
    assert not rules.judge(Tier.LARGE, "prompt", "v", "abc", False).allowed  # prompts have their own rules


def test_a_lookalike_name_gets_the_strictest_rule_and_a_linked_uri_its_server_default() -> None:
    from gatekeeper.mcp.reads import ReadRules
    from gatekeeper.rules.tiers import Tier

    rules = ReadRules({"v.readme": Tier.SMALL, "v.secret": Tier.LARGE}, {}, {"v": Tier.MEDIUM})
    assert rules.judge(Tier.MEDIUM, "resource", "v", "readme\u200b", True).required == Tier.LARGE
    assert rules.judge(Tier.MEDIUM, "resource", "v", None, False).allowed  # no name: the default
    assert not rules.judge(Tier.SMALL, "resource", "v", None, True).allowed
    assert ReadRules({}, {}, {}).judge(Tier.SMALL, "resource", "w", None, True).allowed  # its tools decide


# -- rules by URI, and reads that act (issue 40) -------------------------------------------------

URI_RULES = [
    {"uri": "act://*", "server": "vault", "action": True},  # every read of the template is an action: `vault.act`
    {"uri": "act://deploy", "acts_as": "vault.deploy"},  # this one does what `deploy` does
    {"uri": "doc://*", "tier": "medium"},
]


async def test_a_template_whose_read_acts_needs_what_the_tool_doing_the_same_needs(tmp_path, default_suite, notes_dir):
    tools = {"required_tier": {**RULES, "vault.deploy": "large", "vault.act": "medium"}}
    servers = {"vault": vault(notes_dir, default_tier="small")}  # without URI rules: all of it small
    mcp = {"resource_uris": URI_RULES}
    with gateway(tmp_path, default_suite, servers, tools=tools, mcp=mcp) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", ["vault__deploy"])
        async with connect(proxy.url + "/mcp/small-model") as session:
            # The template is hidden (its read is `vault.act`, medium) and so is doc:// (medium).
            assert await shown(session) == {
                "resources": ["secret://token"],
                "templates": [],
                "prompts": ["vault__hello", "vault__leak"],
            }
            error = await refused(session.read_resource("act://shutdown"), "acts as the tool 'vault.act'")
            assert error.data["required_tier"] == "medium"
            await refused(session.read_resource("doc://readme"), "URI 'doc://*'")
        async with connect(proxy.url + "/mcp/medium-model") as session:
            assert (await shown(session))["templates"] == ["act://{name}"]
            assert (await session.read_resource("act://shutdown")).contents[0].text == "performed shutdown"
            # The read that deploys needs what deploying needs, however the URI is written.
            for uri in ("act://deploy", "act://DEPLOY", "act://%64eploy", "act://%2564eploy"):
                error = await refused(session.read_resource(uri), "acts as the tool 'vault.deploy'")
                assert error.data["required_tier"] == "large"
        assert reached(notes_dir) == ["act"]  # only medium's shutdown reached the server
        async with connect(proxy.url + "/mcp/large-model") as session:
            assert (await session.read_resource("act://deploy")).contents[0].text == "performed deploy"
        assert reached(notes_dir) == ["act", "act"]


def test_uri_rules_match_every_form_a_server_may_read_and_only_raise() -> None:
    from gatekeeper.mcp.reads import ReadRules, UriRule, uri_forms
    from gatekeeper.rules.tiers import Tier

    assert "file:///etc/passwd" in uri_forms("file:///tmp/../etc/passwd")
    assert "file:///etc/passwd" in uri_forms("file:////etc//passwd")
    assert "file:///etc/passwd" in uri_forms("file:///%65tc/passwd")
    assert "file:///etc/passwd" in uri_forms("file:/etc/passwd")
    rules = ReadRules({}, {}, {"v": Tier.SMALL}, [UriRule("file:///etc/*", tier=Tier.LARGE)])
    for uri in ("file:///etc/shadow", "FILE:///ETC/shadow", "file:///tmp/./../etc/shadow", "file:///%2565tc/x"):
        verdict = rules.judge(Tier.MEDIUM, "resource", "v", "f", True, (uri,))
        assert not verdict.allowed and verdict.required == Tier.LARGE, uri
    assert rules.judge(Tier.MEDIUM, "resource", "v", "f", True, ("file:///tmp/x",)).allowed
    assert rules.judge(Tier.LARGE, "resource", "v", "f", True, ("file:///etc/x",)).allowed
    # A URI outside printable ASCII (a lookalike `е`) meets every rule of its server.
    assert not rules.judge(Tier.MEDIUM, "resource", "v", "f", True, ("file:///\u0435tc/x",)).allowed
    # A rule never lowers: a name rule's large stays large under a URI rule's small.
    strict = ReadRules({"v.f": Tier.LARGE}, {}, {}, [UriRule("file:///*", tier=Tier.SMALL)])
    assert not strict.judge(Tier.MEDIUM, "resource", "v", "f", True, ("file:///tmp/x",)).allowed
    # A rule that names a tool with nobody to judge it refuses (fail closed).
    acting = ReadRules({}, {}, {"v": Tier.SMALL}, [UriRule("act://*", acts_as="v.deploy")])
    assert not acting.judge(Tier.LARGE, "resource", "v", "act", True, ("act://x",)).allowed
    assert acting.judge(Tier.SMALL, "resource", "v", "act", True, ("act://x",), lambda t: (True, Tier.SMALL)).allowed
    # Prompts are not ruled by URI.
    assert acting.judge(Tier.SMALL, "prompt", "v", "act", True, ("act://x",)).allowed
