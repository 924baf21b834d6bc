"""A hostile and conformance review of capability routing (issue 22), through the real proxy on a
real port, real scripted upstreams and the official clients (openai for chat and Responses,
anthropic for Messages), and the in-process API.

What was wrong, and what happens now:

1. Drift demotions of one client were not seen in candidate selection. Candidates were looked up
   with everyone's demotions only, and the client's own demotion was applied afterwards to the
   pair chosen: a request escalated (or economized, or sent to a fallback model) to a pair
   demoted for that client alone was served there at the demoted tier, with the very tools it
   was routed for hidden, although another pair served them. Now every candidate is judged at
   the tier it has for this client (`Router.route(client=...)`), so the next pair that admits the
   tools is chosen, and the pair used carries no bounds while demoted (its `tools.requires` unmet).
2. `economize_effort` went to a pair the admin pinned lower than its measurement, and from a
   pinned pair, whenever `tools.requires` was configured (a pinned pair then carries its stored
   profile's bounds, and those were compared as if they had decided its tier); without
   `tools.requires` it did not. Now a pin is never economized from or to (`no_worse`), as the
   docs/routing.md says, whatever else the config holds.
3. `Gatekeeper.route` read a flat list's tools by their chat name: a built-in by its bare type
   (`web_search_preview` escaped a `web_search: large` rule, so the request was not routed and
   the tool was hidden after all) and a Responses or Messages tool refused, where `filter_tools`
   and the proxy judge each by its identity. Now it reads them as `filter_tools` does.
4. A fallback model on a `models:` route (litellm, chat only) was chosen for a Responses or
   Messages request carrying what only a native upstream takes (a built-in tool, server-held
   state): its translation refused it, so routing turned a request the asked pair serves (with
   the tool hidden) into a 400. Now a candidate the request cannot be sent to is passed over for
   the next one (`choose_route(reachable=...)`, asked only of the pair that would be chosen), else the
   request goes as asked.
5. An error the proxy answered itself for a routed request (its upstream unreachable) carried
   the routed pair's `x-gatekeeper-tier` but no `x-gatekeeper-routed`: the client could not tell
   that tier was not its asked pair's. Now error answers carry it too.
6. `gatekeeper tools MODEL` and the console said only "hidden" for the row of every tool the
   config does not name (`tools.default_tier`), not which requirement hides it. Now they say
   `tier small < medium` there too.

What was tried and held is pinned here too: `routing:` with nothing under it is null, and null
is no routing, as without the key (an error was tried and reverted: a dumped `Settings` writes
`routing: null`, and such a file must load); a fallback model on another upstream route (a
`models:` litellm route with its own key) gets the request re-encoded as chat for that route, at
the cheapest effort that admits the tools, and the answer is enforced against the tools offered
to the pair used; a reload that removes `routing:` while a request uploads leaves that request
routed by the settings it started with; unmeasured candidates are never waited for, one is
measured at a time however many requests ask, and none outside `lazy.allow`; a request the
asked pair admits reaches the upstream exactly as without `routing:`; `Gatekeeper.route` and
`ToolRegistry.route_for_llm` agree with the proxy; a Messages thinking budget is an effort that
routing rewrites in `output_config.effort` and in the budget, and a route it cannot express is not taken.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import answers
import anthropic
import httpx
import openai
import pytest
from conftest import (
    Proxy,
    agent_or_suite,
    make_profile,
    running_proxy,
    seed_store,
    settings_for,
    tool,
    wait_until,
)
from scripted import ScriptedServer, SuiteScript, free_port
from starlette.requests import Request
from starlette.responses import Response
from upstreams import NativeServer

from gatekeeper import ToolRegistry
from gatekeeper.config import Settings, load_settings
from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.core.route_choice import Need, RoutingRules, choose_route
from gatekeeper.drift.identity import client_identity
from gatekeeper.protocols.base import Call
from gatekeeper.rules.requirements import Capability
from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import Suite

HI = [{"role": "user", "content": "hi"}]
KEY = "client-key"  # every official client below sends it as `Authorization: Bearer client-key`
SURE = {"instruction": [0.95, 1.0], "json": [0.95, 1.0], "toolCalling": [0.95, 1.0]}
NATIVE = ["chat", "responses", "messages"]
PROTOCOLS = ["chat", "responses", "messages"]
STREAMED = [False, True]
EFFORT_FIELD = {
    "chat": ("reasoning_effort",),
    "responses": ("reasoning", "effort"),
    "messages": ("output_config", "effort"),
}

# Calls whose arguments do not fit the schema: what drift counts against a pair.
DRIFT_OFFERED = {"count": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}
DRIFT_BAD = [Call("count", '{"n": "5"}', True)]


# -- helpers -------------------------------------------------------------------------------------


def calling(*names: str):
    return lambda body: {"content": "done", "tool_calls": [{"name": n, "arguments": {}} for n in names]}


def quiet(upstream_url: str, store: Path, **changes: Any) -> Settings:
    """settings_for with no lazy measurement (unless `lazy` is given): nothing but the requests a
    test sends reaches its upstream."""
    changes.setdefault("lazy", {"allow": []})
    return settings_for(upstream_url, store, **changes)


def native(settings: Settings) -> Settings:
    """`settings` with an upstream that speaks all three protocols natively."""
    return settings.model_copy(update={"upstream": settings.upstream.model_copy(update={"protocols": NATIVE})})


def ask(
    proxy: Proxy, protocol: str, model: str, effort: str | None, tools: list[str], stream: bool = False, key: str = KEY
) -> tuple[httpx.Headers, list[str]]:
    """One request through the official client of `protocol`: the answer's headers and the tool
    calls the client read."""
    if protocol == "chat":
        client = proxy.client if key == KEY else proxy.client.with_options(api_key=key)
        extra: dict[str, Any] = {"reasoning_effort": effort} if effort else {}
        schemas = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in tools]
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=HI, tools=schemas, stream=stream, **extra
        )
        if stream:
            chunks = list(raw.parse())
            calls = [
                c.function.name
                for ch in chunks
                for d in ch.choices
                for c in d.delta.tool_calls or []
                if c.function.name
            ]
        else:
            calls = [c.function.name for c in raw.parse().choices[0].message.tool_calls or []]
        return raw.headers, calls
    if protocol == "responses":
        client = proxy.client if key == KEY else proxy.client.with_options(api_key=key)
        extra = {"reasoning": {"effort": effort}} if effort else {}
        schemas = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in tools]
        raw = client.responses.with_raw_response.create(model=model, input="hi", tools=schemas, stream=stream, **extra)
        final = next(e.response for e in raw.parse() if e.type == "response.completed") if stream else raw.parse()
        return raw.headers, [item.name for item in final.output if item.type == "function_call"]
    claude = anthropic.Anthropic(base_url=proxy.url, auth_token=key, max_retries=0)  # Authorization: Bearer
    extra = {"output_config": {"effort": effort}} if effort else {}
    schemas = [{"name": n, "input_schema": {"type": "object"}} for n in tools]
    raw = claude.messages.with_raw_response.create(
        model=model, max_tokens=50, messages=HI, tools=schemas, stream=stream, **extra
    )
    if stream:
        calls = [
            e.content_block.name
            for e in raw.parse()
            if e.type == "content_block_start" and e.content_block.type == "tool_use"
        ]
    else:
        calls = [b.name for b in raw.parse().content if b.type == "tool_use"]
    return raw.headers, calls


def last_sent(upstream: NativeServer, protocol: str) -> dict[str, Any]:
    found = {
        "chat": upstream.requests,
        "responses": upstream.responses_requests,
        "messages": upstream.messages_requests,
    }
    return found[protocol][-1]


def sent_effort(body: dict[str, Any], protocol: str) -> Any:
    value: Any = body
    for key in EFFORT_FIELD[protocol]:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def demote(gk: Gatekeeper, model: str, effort: str | None, client: str) -> None:
    """Live drift evidence from `client` alone until `model@effort` is demoted for that client."""
    for _ in range(60):
        gk.drift.submit(gk.resolve(model, effort, client=client), DRIFT_BAD, DRIFT_OFFERED, client)
    gk.drift.drain()
    assert gk.resolve(model, effort, client=client).source == "demoted"
    assert gk.resolve(model, effort).source != "demoted"  # for this client only


def identity(settings: Settings, key: str = KEY) -> str:
    return client_identity({"authorization": f"Bearer {key}"}, settings)


# -- 1. a pair demoted for this client is no candidate at its measured tier -----------------------


@pytest.fixture
def writing() -> Iterator[NativeServer]:
    with NativeServer(calling("write_file")) as server:
        yield server


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_escalation_passes_over_an_effort_demoted_for_this_client(writing, store_path, default_suite, protocol, stream):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="high"),
    )
    settings = native(quiet(writing.base_url, store_path, routing={}))
    with running_proxy(settings) as proxy:
        demote(proxy.gk, "m", "medium", identity(settings))
        headers, calls = ask(proxy, protocol, "m", "low", ["write_file"], stream)
        # Was: routed to m@medium, served there at small (demoted for this client), write_file hidden.
        assert headers["x-gatekeeper-routed"] == "m@high"
        assert (headers["x-gatekeeper-tier"], headers["x-gatekeeper-profile"]) == ("medium", "measured")
        assert sent_effort(last_sent(writing, protocol), protocol) == "high"
        assert calls == ["write_file"]
        # Another client's requests still go to the cheaper effort: the demotion is not theirs.
        assert (
            ask(proxy, protocol, "m", "low", ["write_file"], stream, key="other-key")[0]["x-gatekeeper-routed"]
            == "m@medium"
        )


def test_economy_never_lands_on_an_effort_demoted_for_this_client(writing, store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.LARGE, default_suite, effort="low", score_intervals=SURE),
        make_profile("m", Tier.LARGE, default_suite, effort="high", score_intervals=SURE),
    )
    settings = quiet(writing.base_url, store_path, routing={"economize_effort": True})
    with running_proxy(settings) as proxy:
        assert ask(proxy, "chat", "m", "high", ["write_file"], key="other-key")[0]["x-gatekeeper-routed"] == "m@low"
        demote(proxy.gk, "m", "low", identity(settings))
        headers, calls = ask(proxy, "chat", "m", "high", ["write_file"])
    # Was: economized to m@low, served at its demoted tier medium: no worse on paper, not in fact.
    assert "x-gatekeeper-routed" not in headers
    assert headers["x-gatekeeper-tier"] == "large" and writing.requests[-1]["reasoning_effort"] == "high"
    assert calls == ["write_file"]


def test_a_fallback_model_demoted_for_this_client_gives_way_to_the_next(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("gemma-2b", Tier.SMALL, default_suite),
        make_profile("big-a", Tier.LARGE, default_suite),
        make_profile("big-b", Tier.LARGE, default_suite),
    )
    with NativeServer(calling("execute_command")) as upstream:
        routing = {"fallback": {"gemma-*": ["big-a", "big-b"]}}
        settings = quiet(upstream.base_url, store_path, routing=routing)
        with running_proxy(settings) as proxy:
            demote(proxy.gk, "big-a", None, identity(settings))
            headers, calls = ask(proxy, "chat", "gemma-2b", None, ["execute_command"])
            assert ask(proxy, "chat", "gemma-2b", None, ["execute_command"], key="other-key")[0][
                "x-gatekeeper-routed"
            ] == ("big-a@default")
    assert headers["x-gatekeeper-routed"] == "big-b@default" and headers["x-gatekeeper-tier"] == "large"
    assert calls == ["execute_command"]


def test_a_demoted_pair_meets_no_category_minimum_when_routing_looks_for_one(writing, store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.LARGE, default_suite, effort="medium", score_intervals=SURE),
        make_profile("m", Tier.LARGE, default_suite, effort="high", score_intervals=SURE),
    )
    tools = {"required_tier": {"write_file": "medium"}, "requires": {"write_file": {"json": 0.9}}}
    settings = quiet(writing.base_url, store_path, routing={}, tools=tools)
    with running_proxy(settings) as proxy:
        demote(proxy.gk, "m", "medium", identity(settings))  # large -> medium: the tier still reaches medium
        headers, calls = ask(proxy, "chat", "m", "low", ["write_file"])
    # Was: m@medium, its tier medium reaching the rule, its minimum judged on bounds it no longer has.
    assert headers["x-gatekeeper-routed"] == "m@high"
    assert calls == ["write_file"]


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_economy_reaches_the_upstream_at_the_cheaper_effort_in_every_protocol(
    writing, store_path, default_suite, protocol, stream
):
    seed_store(
        store_path,
        make_profile("m", Tier.LARGE, default_suite, effort="low", score_intervals=SURE),
        make_profile("m", Tier.LARGE, default_suite, effort="xhigh", score_intervals=SURE),
    )
    with running_proxy(native(quiet(writing.base_url, store_path, routing={"economize_effort": True}))) as proxy:
        headers, calls = ask(proxy, protocol, "m", "xhigh", ["write_file"], stream)
    assert headers["x-gatekeeper-routed"] == "m@low" and headers["x-gatekeeper-tier"] == "large"
    assert sent_effort(last_sent(writing, protocol), protocol) == "low" and calls == ["write_file"]


# -- 2. economize: never from or to a pin -------------------------------------------------------


REQUIRES = {"required_tier": {"write_file": "medium"}, "requires": {"emit_invoice": {"json": 0.5}}}


@pytest.mark.parametrize("tools", [{"required_tier": {"write_file": "medium"}}, REQUIRES], ids=["rules", "requires"])
@pytest.mark.parametrize("pins", [{"m@low": "small"}, {"m@low": "large"}, {"m@xhigh": "large"}], ids=str)
def test_economy_never_goes_to_or_from_a_pinned_pair(writing, store_path, default_suite, pins, tools):
    seed_store(
        store_path,
        make_profile("m", Tier.LARGE, default_suite, effort="low", score_intervals=SURE),
        make_profile("m", Tier.LARGE, default_suite, effort="xhigh", score_intervals=SURE),
    )
    settings = quiet(writing.base_url, store_path, routing={"economize_effort": True}, pins=pins, tools=tools)
    with running_proxy(settings) as proxy:
        headers, _ = ask(proxy, "chat", "m", "xhigh", ["read_file"])
    # Was, with tools.requires configured: m@low (pinned small by the admin, or from a pinned m@xhigh).
    assert "x-gatekeeper-routed" not in headers
    assert writing.requests[-1]["reasoning_effort"] == "xhigh"


# -- held: routing: with nothing under it --------------------------------------------------------


def test_an_empty_routing_key_is_no_routing_and_a_dumped_config_loads(tmp_path, store_path):
    config = tmp_path / "gk.yaml"
    config.write_text("routing:\n#  escalate_effort: true\n")
    assert load_settings(config).routing is None
    config.write_text("routing: {}\n")
    assert load_settings(config).routing is not None  # the defaults: escalate_effort on
    config.write_text(json.dumps(quiet("http://127.0.0.1:9/v1", store_path).model_dump(mode="json")))  # JSON is YAML
    assert load_settings(config).routing is None


# -- 3. the requirement that hides a tool the config does not name ------------------------------


def test_the_tools_command_says_why_an_unnamed_tool_is_hidden(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.SMALL, default_suite))
    config = tmp_path / "gk.yaml"
    config.write_text(f"store: {store}\ntools: {{default_tier: medium, required_tier: {{read_file: small}}}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "tools", "m", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    other = next(line for line in done.stdout.splitlines() if "(any other tool)" in line)
    assert "hidden: tier small < medium" in other


def test_the_console_says_why_an_unnamed_tool_is_hidden(store_path, default_suite):
    key = "console-hostile-key-4242"
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    tools = {"default_tier": "medium", "required_tier": {"read_file": "small"}}
    settings = quiet("http://127.0.0.1:9/v1", store_path, admin_key=key, tools=tools)
    with running_proxy(settings) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as client:
        assert client.post("/admin/login", data={"key": key}, headers={"origin": proxy.url}).status_code == 303
        page = client.get("/admin/model", params={"name": "m"}).text
    other = page.split('data-rule="any other tool"', 1)[1].split("</tr>", 1)[0]
    assert "tier small &lt; medium" in other


# -- held: pins and everyone's demotions in candidate selection; efforts a protocol has ------------


def test_escalation_passes_over_an_effort_pinned_below_its_measurement_and_one_demoted_for_everyone(
    writing, store_path, default_suite
):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.LARGE, default_suite, effort="medium"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="high"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="xhigh"),
    )
    settings = quiet(writing.base_url, store_path, routing={}, pins={"m@medium": "small"})
    with running_proxy(settings) as proxy:
        for key in ("a", "b", "c"):  # drift.min_clients clients: demoted for everyone
            demote_everyone = identity(settings, key)
            for _ in range(60):
                proxy.gk.drift.submit(
                    proxy.gk.resolve("m", "high", client=demote_everyone), DRIFT_BAD, DRIFT_OFFERED, demote_everyone
                )
        proxy.gk.drift.drain()
        assert proxy.gk.resolve("m", "high").source == "demoted"
        headers, calls = ask(proxy, "chat", "m", "low", ["write_file"])
    assert headers["x-gatekeeper-routed"] == "m@xhigh" and headers["x-gatekeeper-tier"] == "medium"
    assert calls == ["write_file"]


@pytest.mark.parametrize(
    ("protocol", "routed"), [("chat", "m@none"), ("responses", "m@none"), ("messages", "m@medium")]
)
def test_a_protocol_is_routed_only_to_efforts_its_field_can_carry(writing, store_path, default_suite, protocol, routed):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite),
        make_profile("m", Tier.LARGE, default_suite, effort="none"),
        make_profile("m", Tier.LARGE, default_suite, effort="medium"),
    )
    with running_proxy(native(quiet(writing.base_url, store_path, routing={}))) as proxy:
        headers, _ = ask(proxy, protocol, "m", None, ["write_file"])
    # Anthropic's output_config.effort has no `none` (nor `minimal`): its cheapest reaching level is medium.
    assert headers["x-gatekeeper-routed"] == routed
    assert sent_effort(last_sent(writing, protocol), protocol) == routed.partition("@")[2]


MCP_URL = "https://mcp.example.com/mcp"


@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_an_mcp_tool_named_by_a_label_tool_rule_is_escalated_for_with_its_server(
    writing, store_path, default_suite, protocol
):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
    )
    rules = {"required_tier": {"files.delete_file": "medium"}}
    with running_proxy(native(quiet(writing.base_url, store_path, routing={}, tools=rules))) as proxy:
        if protocol == "responses":
            mcp = {"type": "mcp", "server_label": "files", "server_url": MCP_URL, "allowed_tools": ["delete_file"]}
            raw = proxy.client.responses.with_raw_response.create(
                model="m", input="hi", reasoning={"effort": "low"}, tools=[mcp | {"require_approval": "never"}]
            )
        else:
            claude = anthropic.Anthropic(base_url=proxy.url, auth_token=KEY, max_retries=0)
            server = {"type": "url", "name": "files", "url": MCP_URL}
            server |= {"tool_configuration": {"allowed_tools": ["delete_file"]}}
            raw = claude.beta.messages.with_raw_response.create(
                model="m",
                max_tokens=50,
                messages=HI,
                output_config={"effort": "low"},
                mcp_servers=[server],
                betas=["mcp-client-2025-04-04"],
            )
        raw.parse()
    sent = last_sent(writing, protocol)
    assert raw.headers["x-gatekeeper-routed"] == "m@medium" and sent_effort(sent, protocol) == "medium"
    assert MCP_URL in json.dumps(sent)  # the server went with the request


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_error_answer_to_a_routed_request_says_which_pair_its_tier_is(store_path, default_suite, protocol):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
    )
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: the proxy answers 502 itself
    with running_proxy(native(quiet(dead, store_path, routing={}))) as proxy:
        with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as raised:
            ask(proxy, protocol, "m", "low", ["write_file"])
    headers = raised.value.response.headers
    # Was: the routed pair's tier, and nothing to say it was not the asked pair's.
    assert raised.value.status_code == 502
    assert (headers["x-gatekeeper-tier"], headers["x-gatekeeper-routed"]) == ("medium", "m@medium")


# -- held: a fallback model on another upstream route ---------------------------------------------


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_fallback_on_a_litellm_route_gets_the_request_in_chat_with_the_routes_key(
    store_path, default_suite, protocol, stream
):
    seed_store(
        store_path,
        make_profile("gemma-2b", Tier.SMALL, default_suite),
        make_profile("big-model", Tier.MEDIUM, default_suite, effort="low"),
        make_profile("big-model", Tier.LARGE, default_suite, effort="high"),
    )
    # The route's model also calls a tool nobody offered: the answer side must remove it.
    with (
        NativeServer(calling("execute_command")) as pool,
        ScriptedServer(calling("execute_command", "rm_rf")) as routed,
    ):
        route = {"name": "big-model", "litellm_model": "openai/big-upstream", "api_key": "route-key-0042"}
        settings = quiet(
            pool.base_url,
            store_path,
            routing={"escalate_effort": False, "fallback": {"gemma-*": ["big-model"]}},
            models=[route | {"api_base": routed.base_url}],
        )
        with running_proxy(native(settings)) as proxy:
            headers, calls = ask(proxy, protocol, "gemma-2b", None, ["execute_command"], stream)
        assert pool.received() == []  # the fallback's route, not the pool, got it
    assert headers["x-gatekeeper-routed"] == "big-model@high" and headers["x-gatekeeper-tier"] == "large"
    sent, auth = routed.requests[-1], routed.headers[-1]["authorization"]
    assert (sent["model"], sent["reasoning_effort"], auth) == ("big-upstream", "high", "Bearer route-key-0042")
    assert [t["function"]["name"] for t in sent["tools"]] == ["execute_command"]  # re-encoded as chat
    assert calls == ["execute_command"]  # rm_rf was never offered: removed


def untranslatable(proxy: Proxy, protocol: str, stream: bool) -> httpx.Headers:
    """A request carrying what only a native upstream takes: Responses' built-in web_search, a
    Messages typed bash tool (each needs large under the rules below)."""
    if protocol == "responses":
        raw = proxy.client.responses.with_raw_response.create(
            model="gemma-2b", input="hi", tools=[{"type": "web_search"}], stream=stream
        )
    else:
        claude = anthropic.Anthropic(base_url=proxy.url, auth_token=KEY, max_retries=0)
        raw = claude.messages.with_raw_response.create(
            model="gemma-2b",
            max_tokens=50,
            messages=HI,
            tools=[{"type": "bash_20250124", "name": "bash"}],
            stream=stream,
        )
    _ = list(raw.parse()) if stream else raw.parse()
    return raw.headers


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_a_fallback_whose_chat_only_route_cannot_carry_the_request_gives_way_to_the_next(
    store_path, default_suite, protocol, stream
):
    seed_store(
        store_path,
        make_profile("gemma-2b", Tier.SMALL, default_suite),
        make_profile("big-model", Tier.LARGE, default_suite),
        make_profile("big-pool", Tier.LARGE, default_suite),
    )
    with NativeServer(lambda body: {"content": "ok"}) as pool, ScriptedServer() as routed:
        route = {"name": "big-model", "litellm_model": "openai/big-upstream", "api_key": "route-key-0042"}
        rules = {"required_tier": {"web_search": "large", "bash": "large"}}
        for fallback, expected in ((["big-model", "big-pool"], "big-pool@default"), (["big-model"], None)):
            settings = quiet(
                pool.base_url,
                store_path,
                routing={"fallback": {"gemma-*": fallback}},
                tools=rules,
                models=[route | {"api_base": routed.base_url}],
            )
            with running_proxy(native(settings)) as proxy:
                headers = untranslatable(proxy, protocol, stream)
            # Was: sent to big-model's chat-only route, whose translation refused the tool: a 400
            # (the SDK raises) for a request the asked pair serves, with the tool hidden.
            assert headers.get("x-gatekeeper-routed") == expected
            assert last_sent(pool, protocol)["model"] == (expected.split("@")[0] if expected else "gemma-2b")
        assert routed.requests == []


def test_no_escalation_to_where_a_chat_only_upstream_would_refuse_the_kept_tool(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.LARGE, default_suite, effort="high"),
    )
    with ScriptedServer() as chat_only:
        settings = quiet(chat_only.base_url, store_path, routing={}, tools={"required_tier": {"web_search": "large"}})
        with running_proxy(settings) as proxy:
            raw = proxy.client.responses.with_raw_response.create(
                model="m", input="hi", reasoning={"effort": "low"}, tools=[{"type": "web_search"}]
            )
            raw.parse()
    # Was: escalated to m@high, where web_search is kept and cannot be translated: a 400. As asked,
    # the tool is hidden and the request is answered.
    assert "x-gatekeeper-routed" not in raw.headers and raw.headers["x-gatekeeper-tier"] == "small"
    assert chat_only.requests[-1]["reasoning_effort"] == "low" and "tools" not in chat_only.requests[-1]


def test_reachable_is_asked_only_of_the_pair_that_would_be_chosen_and_passes_it_over():
    pairs = {("m", "medium"): Capability(Tier.MEDIUM), ("m", "high"): Capability(Tier.LARGE)}
    pairs |= {("big", "default"): Capability(Tier.LARGE), ("bigger", "default"): Capability(Tier.LARGE)}
    asked: list[tuple[str, str]] = []

    def reachable(model: str, effort: str) -> bool:
        asked.append((model, effort))
        return model != "big" and effort != "high"

    rules = RoutingRules(fallback=(("m", ("big", "bigger")),))
    decision = choose_route(
        "m",
        "low",
        Need(Tier.LARGE),
        Capability(Tier.SMALL),
        rules,
        lambda m, e: pairs.get((m, e)),
        ("medium", "high"),
        reachable,
    )
    assert (decision.model, decision.effort, decision.reason) == ("bigger", "default", "fallback")
    assert asked == [("m", "high"), ("big", "default"), ("bigger", "default")]  # m@medium admits nothing


# -- held: one settings snapshot per request, whatever a reload does meanwhile -------------------


CONFIG = """upstream: {{base_url: "{url}", api_key: upstream-key}}
store: "{store}"
tools: {{required_tier: {{write_file: medium}}}}
lazy: {{allow: []}}
blocked_calls: strip
"""


def test_a_reload_that_removes_routing_mid_upload_leaves_the_request_routed(
    writing, store_path, default_suite, tmp_path
):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
    )
    config = tmp_path / "gk.yaml"
    without_routing = CONFIG.format(url=writing.base_url, store=store_path)
    config.write_text(without_routing + "routing: {}\n")
    body = {"model": "m", "reasoning_effort": "low", "messages": HI, "tools": [tool("write_file", path="string")]}
    raw = json.dumps(body).encode()
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
    with running_proxy(load_settings(config), config_path=config) as proxy:
        taken = threading.Event()
        snapshot = proxy.gk.snapshot

        def snapshot_seen() -> Any:  # the request took its snapshot (before it reads its body)
            found = snapshot()
            taken.set()
            return found

        proxy.gk.snapshot = snapshot_seen  # type: ignore[method-assign]

        def upload() -> Iterator[bytes]:
            yield raw[:20]
            assert taken.wait(20), "the proxy never took the request's snapshot"
            config.write_text(without_routing)
            proxy.gk.reload()
            assert proxy.gk.settings.routing is None
            yield raw[20:]

        during = httpx.post(proxy.url + "/v1/chat/completions", content=upload(), headers=headers, timeout=30)
        sent_during = writing.requests[-1]
        after = httpx.post(proxy.url + "/v1/chat/completions", content=raw, headers=headers, timeout=30)
    assert during.status_code == 200 and during.headers["x-gatekeeper-routed"] == "m@medium"
    assert sent_during["reasoning_effort"] == "medium" and len(sent_during["tools"]) == 1
    assert after.status_code == 200 and "x-gatekeeper-routed" not in after.headers  # the new settings
    assert writing.requests[-1]["reasoning_effort"] == "low" and "tools" not in writing.requests[-1]


# -- held: unmeasured candidates: measured lazily, one at a time, within lazy:, never waited for ---


class HeldSuite(ScriptedServer):
    """A measuring upstream whose suite prompts wait until `release` is set (without blocking
    its event loop: agent requests are answered meanwhile)."""

    def __init__(self, suite: Suite, agent: Any) -> None:
        self.script = SuiteScript(suite)
        self.release = threading.Event()
        super().__init__(agent_or_suite(self.script, answers.perfect, agent))

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())  # Starlette keeps the body for the handler
        try:
            self.script.locate(body)
            held = True
        except (KeyError, StopIteration):
            held = False
        while held and not self.release.is_set():
            await asyncio.sleep(0.01)
        return await super()._chat(request)


def test_candidates_are_measured_one_at_a_time_within_lazy_allow_and_never_waited_for(store_path, default_suite):
    seed_store(store_path, make_profile("gemma-2b", Tier.SMALL, default_suite))
    with HeldSuite(default_suite, calling("execute_command")) as upstream:
        settings = quiet(
            upstream.base_url,
            store_path,
            routing={"escalate_effort": False, "fallback": {"gemma-*": ["fresh", "outsider"]}},
            lazy={"allow": ["gemma-*", "fresh"]},
        )
        with running_proxy(settings) as proxy:
            for _ in range(5):  # answered while the measurement is held: nobody waits for it
                headers, calls = ask(proxy, "chat", "gemma-2b", None, ["read_file", "execute_command"])
                assert "x-gatekeeper-routed" not in headers and calls == []
                assert upstream.requests[-1]["model"] == "gemma-2b"
            running = [p.key for p in proxy.gk.progress()]
            assert running == ["fresh@default"]  # one flight, joined by every later request; no outsider
            upstream.release.set()
            wait_until(lambda: proxy.gk.lookup("fresh", None), "fresh@default to be measured")
            headers, calls = ask(proxy, "chat", "gemma-2b", None, ["read_file", "execute_command"])
            assert headers["x-gatekeeper-routed"] == "fresh@default" and calls == ["execute_command"]
            assert not any(p.key.startswith("outsider@") for p in proxy.gk.progress())


# -- held: not routed means untouched ------------------------------------------------------------


BODIES = {
    "/v1/chat/completions": {
        "model": "m",
        "reasoning_effort": "medium",
        "messages": HI,
        "tools": [
            {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}, "strict": True}}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
    },
    "/v1/responses": {
        "model": "m",
        "reasoning": {"summary": "auto", "effort": "medium"},
        "input": "hi",
        "tools": [
            {"type": "function", "name": "write_file", "parameters": {"type": "object"}},
            {
                "type": "mcp",
                "server_label": "files",
                "server_url": "https://mcp.example.com/mcp",
                "require_approval": "never",
            },
        ],
    },
    "/v1/messages": {
        "model": "m",
        "max_tokens": 50,
        "output_config": {"effort": "medium"},
        "messages": HI,
        "tools": [
            {"name": "write_file", "input_schema": {"type": "object"}},
            {"type": "mcp_toolset", "mcp_server_name": "files"},
        ],
        "mcp_servers": [{"type": "url", "name": "files", "url": "https://mcp.example.com/mcp"}],
    },
}


def test_a_request_the_asked_pair_admits_reaches_the_upstream_as_without_routing(store_path, default_suite):
    seen: dict[str, list[str]] = {}
    for name, routing in (("without", None), ("with", {"economize_effort": True, "fallback": {"*": ["big"]}})):
        seed_store(
            store_path,
            make_profile("m", Tier.SMALL, default_suite, effort="low"),
            make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
            make_profile("big", Tier.LARGE, default_suite),
        )
        with NativeServer(lambda body: {"content": "ok"}) as upstream:
            extra = {"routing": routing} if routing is not None else {}
            settings = quiet(upstream.base_url, store_path, tools={"required_tier": {"write_*": "medium"}}, **extra)
            with running_proxy(native(settings)) as proxy:
                for path, body in BODIES.items():
                    answer = httpx.post(
                        proxy.url + path,
                        json=body,
                        headers={"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"},
                        timeout=30,
                    )
                    assert answer.status_code == 200, answer.text
                    assert "x-gatekeeper-routed" not in answer.headers
            seen[name] = [json.dumps(b) for b in upstream.received()]  # keys in their order too
    assert seen["with"] == seen["without"] and len(seen["with"]) == 3


# -- held: in process, the same decision as the proxy --------------------------------------------


CASES = [
    ("m", "low", ["read_file", "write_file"]),  # escalated
    ("m", "low", ["execute_command"]),  # past max_effort, no fallback: none
    ("m", "medium", ["write_file"]),  # admitted
    ("m", "xhigh", ["read_file"]),  # economized
    ("m", None, ["emit_invoice"]),  # from default, to the effort meeting json >= 0.9
    ("gemma-2b", None, ["execute_command"]),  # fallback
    ("gemma-2b", "low", ["impossible"]),  # a requirement no pair meets: none
]


def test_gatekeeper_route_and_the_registry_agree_with_the_proxy(writing, store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
        make_profile("m", Tier.LARGE, default_suite, effort="high", score_intervals=SURE),
        make_profile("m", Tier.LARGE, default_suite, effort="xhigh", score_intervals=SURE),
        make_profile("gemma-2b", Tier.SMALL, default_suite),
        make_profile("big-model", Tier.LARGE, default_suite),
    )
    tools = {
        "required_tier": {"write_file": "medium", "execute_command": "large", "emit_invoice": "medium"},
        "requires": {"emit_invoice": {"json": 0.9}, "impossible": {"json": 0.99}},
    }
    routing = {"economize_effort": True, "fallback": {"gemma-*": ["big-model"]}, "max_effort": "xhigh"}
    settings = quiet(writing.base_url, store_path, routing=routing, tools=tools, pins={"gemma-2b@low": "small"})
    with running_proxy(settings) as proxy:
        gk = proxy.gk
        for model, effort, names in CASES:
            headers, _ = ask(proxy, "chat", model, effort, names)
            sent = writing.requests[-1]
            via_proxy = (
                headers.get("x-gatekeeper-routed"),
                headers["x-gatekeeper-tier"],
                [t["function"]["name"] for t in sent.get("tools", [])],
            )
            route = gk.route(model, effort, [tool(n) for n in names])
            in_core = (route.pair if route.routed else None, route.resolution.tier.value)
            registry = ToolRegistry(gk)
            for name in names:
                registry.register(tool(name))
            routed = registry.route_for_llm(model, effort)
            in_registry = (
                routed.route.pair if routed.route.routed else None,
                [t["function"]["name"] for t in routed.tools],
            )
            case = f"{model}@{effort} {names}"
            assert in_core == via_proxy[:2], case
            assert in_registry == (via_proxy[0], via_proxy[2]), case
            if route.routed:
                assert (sent["model"], sent.get("reasoning_effort") or "default") == (route.model, route.effort), case


BUILTINS = {"required_tier": {"web_search": "large", "computer": "large", "write_file": "medium"}}


@pytest.mark.parametrize(
    ("protocol", "listed"),
    [
        ("responses", {"type": "web_search_preview"}),  # the web_search family
        (
            "messages",
            {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
        ),
        ("responses", {"type": "function", "name": "write_file", "parameters": {"type": "object"}}),
        ("messages", {"name": "write_file", "input_schema": {"type": "object"}}),
    ],
    ids=["builtin-family", "builtin-typed", "responses-shape", "messages-shape"],
)
def test_gatekeeper_route_judges_a_listed_tool_by_its_identity_as_the_proxy_does(
    writing, store_path, default_suite, protocol, listed
):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.LARGE, default_suite, effort="high"),
    )
    settings = native(quiet(writing.base_url, store_path, routing={}, tools=BUILTINS))
    with running_proxy(settings) as proxy:
        route = proxy.gk.route("m", "low", [listed])
        path = f"/v1/{protocol}"
        body: dict[str, Any] = {"model": "m", "tools": [listed]}
        if protocol == "messages":
            body |= {"max_tokens": 50, "messages": HI, "output_config": {"effort": "low"}}
        else:
            body |= {"input": "hi", "reasoning": {"effort": "low"}}
        answer = httpx.post(
            proxy.url + path,
            json=body,
            headers={"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"},
            timeout=30,
        )
    # Was: a built-in judged by its bare type (no family rule: not routed, then hidden), and a
    # Responses or Messages tool refused, where filter_tools and the proxy take them.
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-gatekeeper-routed"] == "m@high"
    assert (route.pair, route.reason, route.resolution.tier) == ("m@high", "escalated", Tier.LARGE)


# -- held: Messages, a thinking budget is an effort ----------------------------------------------


@pytest.mark.parametrize("stream", STREAMED)
def test_a_thinking_budget_is_escalated_in_output_config_and_an_inexpressible_route_is_not_taken(
    writing, store_path, default_suite, stream
):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.MEDIUM, default_suite, effort="medium"),
        make_profile("big", Tier.LARGE, default_suite),
    )
    settings = native(quiet(writing.base_url, store_path, routing={"fallback": {"m": ["big"]}}))
    thinking = {"type": "enabled", "budget_tokens": 2000}  # 1024 <= budget < 4096: effort low
    with running_proxy(settings) as proxy:
        claude = anthropic.Anthropic(base_url=proxy.url, auth_token=KEY, max_retries=0)
        tools = [{"name": "write_file", "input_schema": {"type": "object"}}]
        raw = claude.messages.with_raw_response.create(
            model="m", max_tokens=5000, messages=HI, tools=tools, thinking=thinking, stream=stream
        )
        list(raw.parse()) if stream else raw.parse()
        escalated = writing.messages_requests[-1]
        assert raw.headers["x-gatekeeper-routed"] == "m@medium"
        assert escalated["output_config"] == {"effort": "medium"}
        assert escalated["thinking"] == {"type": "enabled", "budget_tokens": 4096}  # the budget moves too
        # big@default would drop the effort field, and the budget would still say low: not routed.
        tools = [{"name": "execute_command", "input_schema": {"type": "object"}}]
        raw = claude.messages.with_raw_response.create(
            model="m", max_tokens=5000, messages=HI, tools=tools, thinking=thinking, stream=stream
        )
        list(raw.parse()) if stream else raw.parse()
    kept = writing.messages_requests[-1]
    assert "x-gatekeeper-routed" not in raw.headers and raw.headers["x-gatekeeper-tier"] == "small"
    assert kept["model"] == "m" and "tools" not in kept and "output_config" not in kept
