"""The MCP gateway end to end: a real proxy on a real port, real MCP servers (the SDK's, started
over stdio), the official MCP client."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from conftest import await_until
from gateway_helpers import KEY, connect, gateway, tool_names, toy
from mcp import types
from mcp.shared.exceptions import MCPError

from gatekeeper.store.profile import profile_key

NOTES_SMALL = ["notes__read_note", "notes__broken_tool"]
NOTES_MEDIUM = [*NOTES_SMALL, "notes__write_note"]
NOTES_ALL = ["notes__read_note", "notes__write_note", "notes__progress_steps", "notes__broken_tool", "notes__crash"]


def sample(proxy_url: str, name: str, **labels: str) -> float:
    """A sample of the proxy's /metrics. The registry is the process's: tests compare before and after."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(proxy_url + "/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def calls(folder: Path) -> list[dict]:
    log = folder / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def wait_listed(url: str, expected: list[str], **connect_args: object) -> None:
    """Servers start in the background: wait until a large model sees `expected` tools."""

    async def listed() -> bool:
        async with connect(url, **connect_args) as session:  # type: ignore[arg-type]
            return set(expected) <= set(await tool_names(session))

    await await_until(listed, f"the tools {expected}", timeout_s=60)


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    return folder


async def test_each_model_lists_only_the_tools_its_tier_admits(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        changes = sample(proxy.url, "gatekeeper_mcp_list_changed_total")
        hidden = sample(proxy.url, "gatekeeper_mcp_tools_hidden_total", server="notes", model="small-model@default")
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert await tool_names(session) == NOTES_SMALL
        assert (
            sample(proxy.url, "gatekeeper_mcp_tools_hidden_total", server="notes", model="small-model@default")
            == hidden + 3
        )
        async with connect(proxy.url + "/mcp/medium-model") as session:
            assert sorted(await tool_names(session)) == sorted(NOTES_MEDIUM)
        async with connect(proxy.url + "/mcp/large-model") as session:
            tools = (await session.list_tools()).tools
        assert [t.name for t in tools] == NOTES_ALL
        write = next(t for t in tools if t.name == "notes__write_note")
        assert write.description == "Write a note (replaces it)."  # descriptions and schemas untouched
        assert set(write.input_schema["properties"]) == {"name", "text"}
        assert sample(proxy.url, "gatekeeper_mcp_list_changed_total") == changes  # nothing changed, nobody told


async def test_a_hidden_tool_call_is_refused_and_never_reaches_the_server(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        labels = {"server": "notes", "model": "small-model@default"}
        before = sample(proxy.url, "gatekeeper_mcp_calls_refused_total", **labels)
        async with connect(proxy.url + "/mcp/small-model") as session:
            with pytest.raises(MCPError) as refused:
                await session.call_tool("notes__write_note", {"name": "n", "text": "from a small model"})
        assert refused.value.code == types.INVALID_PARAMS
        assert "notes__write_note" in refused.value.message and "needs tier medium" in refused.value.message
        assert refused.value.data["required_tier"] == "medium" and refused.value.data["tier"] == "small"
        assert calls(notes_dir) == []  # never forwarded
        assert not (notes_dir / "n.txt").exists()
        assert sample(proxy.url, "gatekeeper_mcp_calls_refused_total", **labels) == before + 1


async def test_an_unknown_tool_is_refused_naming_it(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/large-model") as session:
            for name in ("write_note", "notes__nope", "other__write_note", "notes.write_note"):
                with pytest.raises(MCPError) as refused:
                    await session.call_tool(name, {})
                assert name in refused.value.message and "not forwarded" in refused.value.message
        assert calls(notes_dir) == []


async def test_an_allowed_call_is_forwarded_and_its_result_relayed(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/medium-model") as session:
            wrote = await session.call_tool("notes__write_note", {"name": "n", "text": "hello"})
            read = await session.call_tool("notes__read_note", {"name": "n"})
            broken = await session.call_tool("notes__broken_tool", {})
        assert (notes_dir / "n.txt").read_text() == "hello"
        assert wrote.content[0].text == "wrote 5 characters" and not wrote.is_error
        assert read.content[0].text == "hello"
        assert broken.is_error and "broke on purpose" in broken.content[0].text  # a tool error is a result
        async with connect(proxy.url + "/mcp/large-model") as session:
            seen: list[tuple[float, float | None, str | None]] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append((value, total, message))

            counted = await session.call_tool("notes__progress_steps", {"n": 3}, progress_callback=progress)
        assert counted.structured_content == {"counted": 3}
        assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
        assert [c["tool"] for c in calls(notes_dir)] == ["write_note", "read_note", "broken_tool", "progress_steps"]


async def test_no_model_is_the_unknown_tier_and_the_header_names_one(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, unknown_tier="small") as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp") as session:
            assert await tool_names(session) == NOTES_SMALL
        async with connect(proxy.url + "/mcp", headers={"X-Gatekeeper-Model": "large-model"}) as session:
            assert await tool_names(session) == NOTES_ALL
        async with connect(proxy.url + "/mcp/never-measured") as session:  # fail closed while unmeasured
            assert await tool_names(session) == NOTES_SMALL


async def test_an_effort_in_the_path_selects_that_profile(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, pins={"pinned@high": "large"}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/pinned@high") as session:
            assert await tool_names(session) == NOTES_ALL
        async with connect(proxy.url + "/mcp/pinned@low") as session:
            assert await tool_names(session) == NOTES_SMALL


async def test_tools_list_pages_through_every_tool(tmp_path, default_suite, notes_dir, monkeypatch):
    from gatekeeper.mcp import gateway as gateway_module

    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/large-model") as session:
            first = await session.list_tools()
            assert len(first.tools) == 2 and first.next_cursor is not None
            assert await tool_names(session) == NOTES_ALL
            with pytest.raises(MCPError) as bad:
                await session.list_tools(params=types.PaginatedRequestParams(cursor="not-a-cursor"))
        assert bad.value.code == types.INVALID_PARAMS


async def test_open_sessions_hear_list_changed_when_their_tier_changes(tmp_path, default_suite, notes_dir):
    from conftest import make_profile

    from gatekeeper.rules.tiers import Tier

    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        sent = sample(proxy.url, "gatekeeper_mcp_list_changed_total")
        heard: list[object] = []

        async def on_message(message: object) -> None:
            heard.append(message)

        async with (
            connect(proxy.url + "/mcp/rising-model", message_handler=on_message) as rising,
            connect(proxy.url + "/mcp/small-model", message_handler=on_message) as bystander,
        ):
            assert await tool_names(rising) == NOTES_SMALL
            assert await tool_names(bystander) == NOTES_SMALL
            proxy.gk.store.save([make_profile("rising-model", Tier.LARGE, default_suite)])  # a measurement lands

            def changed() -> int:
                return sum(isinstance(m, types.ToolListChangedNotification) for m in heard)

            await await_until(changed, "notifications/tools/list_changed")
            assert await tool_names(rising) == NOTES_ALL
            assert changed() == 1  # only the session whose tools changed heard it
            proxy.gk.invalidate("rising-model")  # and back down: it hears again
            await await_until(lambda: changed() == 2, "a second list_changed")
            assert await tool_names(rising) == NOTES_SMALL
        assert sample(proxy.url, "gatekeeper_mcp_list_changed_total") == sent + 2


async def test_an_unknown_model_is_measured_lazily_and_its_session_told(tmp_path, default_suite, notes_dir):
    from conftest import measuring_upstream

    with measuring_upstream(default_suite) as upstream:
        servers = {"notes": toy("notes", notes_dir)}
        with gateway(tmp_path, default_suite, servers, upstream={"base_url": upstream.base_url}) as proxy:
            await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
            heard: list[object] = []

            async def on_message(message: object) -> None:
                heard.append(message)

            async with connect(proxy.url + "/mcp/fresh-model", message_handler=on_message) as session:
                assert await tool_names(session) == NOTES_SMALL  # fail closed while it is measured
                await await_until(
                    lambda: any(isinstance(m, types.ToolListChangedNotification) for m in heard),
                    "the measurement to land and the session to hear of it",
                    timeout_s=60,
                )
                assert await tool_names(session) == NOTES_ALL
            assert proxy.gk.lookup("fresh-model").source == "measured"
            assert profile_key("fresh-model", None) in proxy.gk.profiles()


async def test_a_session_cannot_be_moved_to_another_model(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        headers = {
            "Authorization": f"Bearer {KEY}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        with httpx.Client(timeout=10) as http:
            opened = http.post(proxy.url + "/mcp/small-model", json=init, headers=headers)
            assert opened.status_code == 200
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            moved = http.post(proxy.url + "/mcp/large-model", json=listing, headers=headers | session)
            assert moved.status_code == 404
            header_moved = http.post(
                proxy.url + "/mcp", json=listing, headers=headers | session | {"X-Gatekeeper-Model": "large-model"}
            )
            assert header_moved.status_code == 404


def test_the_door_needs_a_key_an_allowed_origin_and_throttles_guessing(tmp_path, default_suite, notes_dir):
    servers = {"notes": toy("notes", notes_dir)}
    mcp = {"allowed_origins": ["http://app.example:3000"]}
    with gateway(tmp_path, default_suite, servers, mcp=mcp) as proxy:
        url = proxy.url + "/mcp/large-model"
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        accept = {"Accept": "application/json, text/event-stream"}
        with httpx.Client(timeout=10) as http:
            missing = http.post(url, json=ping, headers=accept)
            assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
            assert "mcp.api_keys" in missing.json()["error"]["message"]
            good = accept | {"Authorization": f"Bearer {KEY}"}
            evil = http.post(url, json=ping, headers=good | {"Origin": "http://evil.example"})
            assert evil.status_code == 403 and "evil.example" in evil.json()["error"]["message"]
            allowed = http.post(url, json=ping, headers=good | {"Origin": "http://app.example:3000"})
            assert allowed.status_code != 403
            lower = http.post(url, json=ping, headers=accept | {"Authorization": f"bearer {KEY}"})
            assert lower.status_code not in (401, 429)  # the scheme's case is not the key's
            assert http.post(proxy.url + "/mcp/large-model@bogus", json=ping, headers=good).status_code == 400
            for _ in range(10):  # the right key above cleared the missing one's count
                assert http.post(url, json=ping, headers=accept | {"Authorization": "Bearer guess"}).status_code == 401
            throttled = http.post(url, json=ping, headers=accept | {"Authorization": "Bearer guess"})
            assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) >= 1
            assert http.post(url, json=ping, headers=good).status_code not in (401, 429)  # a right key still passes
            for _ in range(100):  # past 100 wrong keys a minute, no key is read
                http.post(url, json=ping, headers=accept | {"Authorization": "Bearer guess"})
            assert http.post(url, json=ping, headers=good).status_code == 429


def test_without_mcp_servers_there_is_no_mcp_endpoint(tmp_path, default_suite):
    from conftest import running_proxy, settings_for

    settings = settings_for("http://127.0.0.1:9/v1", tmp_path / "p.json")
    with running_proxy(settings) as proxy:
        assert httpx.post(proxy.url + "/mcp/large-model", json={}).status_code == 404
        assert httpx.post(proxy.url + "/mcp", json={}).status_code == 404


def up(proxy_url: str) -> dict[str, float]:
    """gatekeeper_mcp_server_up per server, from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(proxy_url + "/metrics", timeout=10).text
    return {
        sample.labels["server"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gatekeeper_mcp_server_up"
    }


async def test_a_misbehaving_server_costs_only_its_own_tools(tmp_path, default_suite, notes_dir):
    servers = {
        "notes": toy("notes", notes_dir),
        "dup": toy("duplicate", notes_dir),
        "hang": toy("hang", notes_dir, timeout_s=1),
        "junk": toy("garbage", notes_dir),
        "missing": {"command": [str(tmp_path / "no-such-server")]},
    }
    with gateway(tmp_path, default_suite, servers) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/large-model") as session:
            assert await tool_names(session) == NOTES_ALL  # the others keep serving

            async def refusal(name: str) -> str | None:
                try:
                    await session.call_tool(name, {})
                except MCPError as exc:
                    return None if "not connected yet" in exc.message else exc.message
                pytest.fail(f"{name} was served")

            errors = {
                label: await await_until(lambda name=f"{label}__{tool}": refusal(name), f"{label}'s first failure")
                for label, tool in (("dup", "twice"), ("hang", "any"), ("junk", "any"), ("missing", "any"))
            }
            assert all("not forwarded" in error for error in errors.values())
            assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False
        gauges = up(proxy.url)  # one process registry: other tests' servers are in it too
        assert {label: gauges[label] for label in servers} == {"notes": 1, "dup": 0, "hang": 0, "junk": 0, "missing": 0}
        assert "listed the tool 'twice' twice" in errors["dup"]
        assert "did not answer in time" in errors["hang"]
        assert "ValidationError" in errors["junk"]
        # A command's path is the operator's: the client reads that it cannot be started (the
        # log line and the console name the command).
        assert "its command cannot be started" in errors["missing"] and "no-such-server" not in errors["missing"]


async def test_a_crashed_stdio_server_is_restarted(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/large-model") as session:
            with pytest.raises(MCPError) as crashed:
                await session.call_tool("notes__crash", {})
            assert "notes" in crashed.value.message
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)  # back after its backoff
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False
        assert [c["tool"] for c in calls(notes_dir)] == ["crash", "read_note"]


async def test_the_console_shows_servers_and_what_each_model_was_shown_and_refused(tmp_path, default_suite, notes_dir):
    servers = {"notes": toy("notes", notes_dir), "dup": toy("duplicate", notes_dir)}
    with gateway(tmp_path, default_suite, servers, admin_key="console-key") as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/small-model") as session:
            await tool_names(session)
            with pytest.raises(MCPError):
                await session.call_tool("notes__write_note", {"name": "n", "text": "t"})
        with httpx.Client(base_url=proxy.url, timeout=10) as http:
            signed = http.post("/admin/login", data={"key": "console-key"}, headers={"origin": proxy.url})
            assert signed.status_code == 303

            def failed_listing() -> str | None:
                section = http.get("/admin/").text.split('id="mcp"', 1)[1]
                return section if "listed the tool &#39;twice&#39; twice" in section else None

            section = await await_until(failed_listing, "the misbehaving server shown down, with why")
        assert "<code>notes</code>" in section and "up</span>" in section
        row = section.split("<td><code>notes</code></td><td><code>small-model@default</code></td>", 1)[1].split(
            "</tr>"
        )[0]
        assert row.replace(" ", "") == '<tdclass="num">2</td><tdclass="num">3</td><tdclass="num">1</td>'


async def test_resources_and_prompts_are_relayed(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/small-model") as session:
            resources = (await session.list_resources()).resources
            assert [str(r.uri) for r in resources] == ["note://readme"]
            read = await session.read_resource("note://readme")
            assert read.contents[0].text == "notes server readme"
            with pytest.raises(MCPError):
                await session.read_resource("note://unlisted")
            prompts = (await session.list_prompts()).prompts
            assert [p.name for p in prompts] == ["notes__summarise"]
            prompt = await session.get_prompt("notes__summarise", {"name": "plan"})
            assert "Summarise the note plan." in prompt.messages[0].content.text


async def test_a_reload_of_pins_or_rules_tells_open_sessions(tmp_path, default_suite, notes_dir):
    import yaml
    from scripted import ThreadedServer

    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.server.app import create_app

    config = tmp_path / "gatekeeper.yaml"
    doc = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "store": str(tmp_path / "profiles.json"),
        "mcp": {"api_keys": [KEY], "servers": {"notes": toy("notes", notes_dir)}},
        "tools": {
            "required_tier": {"notes.write_note": "medium", "notes.progress_steps": "large", "notes.crash": "large"}
        },
        "pins": {"team-model": "small"},
    }
    config.write_text(yaml.safe_dump(doc))
    with Gatekeeper.from_config(config) as gk, ThreadedServer(create_app(gk)) as server:
        url = f"http://127.0.0.1:{server.port}/mcp/team-model"
        heard: list[object] = []

        async def on_message(message: object) -> None:
            heard.append(message)

        def changes() -> int:
            return sum(isinstance(m, types.ToolListChangedNotification) for m in heard)

        await wait_listed(url.replace("team-model", "nobody"), NOTES_SMALL)
        async with connect(url, message_handler=on_message) as session:
            assert await tool_names(session) == NOTES_SMALL
            config.write_text(yaml.safe_dump(doc | {"pins": {"team-model": "medium"}}))
            gk.reload()
            await await_until(lambda: changes() == 1, "list_changed after the pin changed")
            assert sorted(await tool_names(session)) == sorted(NOTES_MEDIUM)
            rules = doc["tools"]["required_tier"] | {"notes.write_note": "large"}
            config.write_text(
                yaml.safe_dump(doc | {"pins": {"team-model": "medium"}, "tools": {"required_tier": rules}})
            )
            gk.reload()
            await await_until(lambda: changes() == 2, "list_changed after the rule changed")
            assert await tool_names(session) == NOTES_SMALL


async def test_the_2026_single_exchange_protocol_is_gated_the_same(tmp_path, default_suite, notes_dir):
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as http,
            streamable_http_client(proxy.url + "/mcp/small-model", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.discover()  # no handshake, no session: every request carries its envelope
            assert session.protocol_version == "2026-07-28"
            assert [t.name for t in (await session.list_tools()).tools] == NOTES_SMALL
            with pytest.raises(MCPError) as refused:
                await session.call_tool("notes__write_note", {"name": "n", "text": "t"})
        assert "needs tier medium" in refused.value.message
        assert calls(notes_dir) == []


async def test_tools_requires_hides_an_mcp_tool_whose_minimums_the_model_misses(tmp_path, default_suite, notes_dir):
    from conftest import make_profile
    from gateway_helpers import RULES

    from gatekeeper.rules.tiers import Tier

    tools = {"required_tier": RULES, "requires": {"notes.write_note": {"toolCalling": 0.95}}}
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, tools=tools) as proxy:
        bounds = {c: [0.97, 1.0] for c in ("instruction", "json", "toolCalling")}
        proxy.gk.store.save([make_profile("bounded-model", Tier.LARGE, default_suite, score_intervals=bounds)])
        await wait_listed(proxy.url + "/mcp/bounded-model", NOTES_ALL)  # its lower bound 0.97 meets 0.95
        async with connect(proxy.url + "/mcp/large-model") as session:  # large, but no bound measured
            assert "notes__write_note" not in await tool_names(session)
            with pytest.raises(MCPError) as refused:
                await session.call_tool("notes__write_note", {"name": "n", "text": "t"})
        assert refused.value.data["reason"] == "requirements_unmet"
        assert "tools.requires" in refused.value.message
        assert calls(notes_dir) == []


async def test_an_unknown_model_outside_lazy_allow_stays_at_the_unknown_tier(tmp_path, default_suite, notes_dir):
    from conftest import measuring_upstream

    with measuring_upstream(default_suite) as upstream:
        changes = {"upstream": {"base_url": upstream.base_url}, "lazy": {"allow": ["approved-*"]}}
        with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, **changes) as proxy:
            await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
            async with connect(proxy.url + "/mcp/stranger-model") as session:
                assert await tool_names(session) == NOTES_SMALL
            assert proxy.gk.lookup("stranger-model") is None  # not measured: outside lazy.allow
            assert upstream.requests == []


async def test_a_server_s_new_tools_reach_open_sessions(tmp_path, default_suite, notes_dir):
    servers = {"notes": toy("notes", notes_dir), "grows": toy("growing", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", [*NOTES_ALL, "grows__grow"])
        heard: list[object] = []

        async def on_message(message: object) -> None:
            heard.append(message)

        async with connect(proxy.url + "/mcp/small-model", message_handler=on_message) as session:
            assert await tool_names(session) == [*NOTES_SMALL, "grows__grow"]
            assert (await session.call_tool("grows__grow", {})).content[0].text == "grown"
            await await_until(
                lambda: any(isinstance(m, types.ToolListChangedNotification) for m in heard),
                "list_changed after the server listed a new tool",
            )
            assert await tool_names(session) == [*NOTES_SMALL, "grows__grow", "grows__grown_tool"]


async def test_a_whole_server_rule_and_names_that_cannot_be_function_names(tmp_path, default_suite, notes_dir):
    from gateway_helpers import RULES

    servers = {"notes": toy("notes", notes_dir), "odd": toy("odd_names", notes_dir)}
    tools = {"required_tier": RULES | {"notes": "large"}}  # the whole notes server: large only
    with gateway(tmp_path, default_suite, servers, tools=tools) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", [*NOTES_ALL, "odd__good_one"])
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert await tool_names(session) == ["odd__good_one"]  # the dotted and the long name not offered
            with pytest.raises(MCPError) as refused:
                await session.call_tool("notes__read_note", {"name": "x"})
        assert "needs tier large" in refused.value.message
        async with connect(proxy.url + "/mcp/large-model") as session:
            assert "odd__has.dot" not in await tool_names(session)
            with pytest.raises(MCPError):
                await session.call_tool("odd__has.dot", {})
