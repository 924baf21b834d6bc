"""A hostile review of the MCP door (issue 23): a real proxy on a real port, real MCP servers
started by the tests (tests/mcp/toy_server.py, tests/mcp/hostile_servers.py, SDK servers over
Streamable HTTP), the official `mcp` client, and raw HTTP where a client would not misbehave.

What got through, and what happens now:
- A path and an `X-Gatekeeper-Model` header naming different models (or the header twice): the
  path won silently, so a client overrode the model a reverse proxy set in the header. Now a 400
  naming both.
- A DELETE of a session under another model (which the SDK refuses, 404) still made the gateway
  forget that session: its owner no longer heard list_changed. Now only an accepted DELETE does.
- A session was watched for list_changed for 30 minutes from its last tools/list, however long it
  stayed open: an agent that lists once and then only calls stopped hearing of tier changes. Now
  it is watched as long as the SDK keeps it open.
- A request of the 2026 single-exchange protocol carrying an `mcp-session-id` header (which the
  SDK does not check on that path) replaced that session's watch with its own model: whoever knew
  a session's id could silence its list_changed. Now only handshake-era sessions are watched.
- Notifications went to one session after another, each waiting up to 5 s for a client that does
  not read its stream: a hundred such sessions held everyone's list_changed for 500 s a pass.
  Now all are told at once, each stuck one costing only its own wait.
- A cursor of non-ASCII digits (`p²`) or of 5,000 digits was an internal error (code 0, Python's
  own message). Now `-32602` naming the cursor.
- A server's JSON-RPC error or tool error quoting what it was given (its `headers`, `env`) was
  relayed to the client as it was. Now those values read `***`.
- A model demoted by the proxy for one client (drift, that client's own traffic) was served at
  its measured tier to that client's agent at the door: the door asked for everyone's demotions
  only. Now it asks for the client's own too, by the proxy's identity rule (`drift.client_header`
  from a trusted front proxy, else the credential).
- Resource templates were not relayed (`resources/templates/list` was "method not found"), and a
  `resources/read` of a URI that no session had listed (a templated one, one a tool result linked
  to, any after a restart) was "not found". Now templates are the servers' union, and a read goes
  to the server that lists the URI (listed again on a miss), else the one server whose template
  matches it (several: refused, not guessed), else the server whose result linked to it (a link
  never takes a listed URI from its server).
- A reload that removed a key left that key's open GET streams (and in-flight requests) running:
  a revoked key kept hearing its sessions' notifications. Now they are ended.
- An allowed origin written with its scheme's default port (`https://app.example:443`) matched
  nothing: browsers never send that port. Now default ports are dropped before comparing.
- A session was bound to its key's place in `mcp.api_keys`: after a reload removed an earlier key,
  the key's own sessions answered 404 and the key that moved into its place could use them. Now a
  session is bound to the key itself.

What held (pinned here so it stays so): keys in another scheme, in the query string, or wrong
(401; ten of them do not lock the right key out); `Origin` null, lookalike, port and scheme variants
(403); odd efforts, a percent-encoded or over-long model name (400), an unknown model (the unknown
tier); a tool hidden after the tier dropped is refused though the session never listed again;
JSON-RPC batches (refused whole, nothing forwarded); a cursor from a larger model's listing shows
no hidden tool; a hanging tool call times out and costs nothing else; a server listing more than
10,000 tools or paging past its deadline loses only its own tools, slow pages within it list
whole; a tool the server renamed without saying so is refused under its new name; tool names with
`__`, case variants and `-` are each their own tool, ruled by their own name; no server secret nor
MCP key in a log line, a metric or the console; a stdio server's environment is the SDK's short
list plus its own `env` (not the gateway's keys).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from conftest import await_until, make_profile
from gateway_helpers import KEY, connect, gateway, tool_names, toy
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from scripted import ThreadedServer
from starlette.types import Receive, Scope, Send

from gatekeeper.rules.tiers import Tier

HOSTILE = Path(__file__).with_name("hostile_servers.py")
NOTES_SMALL = ["notes__read_note", "notes__broken_tool"]
NOTES_ALL = ["notes__read_note", "notes__write_note", "notes__progress_steps", "notes__broken_tool", "notes__crash"]
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
SIGNED = ACCEPT | {"Authorization": f"Bearer {KEY}"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


def hostile(mode: str, folder: Path, *args: str, **extra: Any) -> dict[str, Any]:
    config = {"command": [sys.executable, str(HOSTILE), mode, *args], "env": {"TOY_DIR": str(folder)}, "timeout_s": 5}
    return config | extra


def calls(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


def answer(response: httpx.Response) -> Any:
    """The JSON-RPC message of a raw POST's answer (JSON, or the last event of an SSE stream)."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    return json.loads(text)


class RawSession:
    """One MCP session spoken in raw JSON-RPC over HTTP, for what the official client won't send."""

    def __init__(self, http: httpx.Client, url: str, headers: dict[str, str] | None = None) -> None:
        self.http, self.url = http, url
        opened = http.post(url, json=INIT, headers=SIGNED | (headers or {}))
        assert opened.status_code == 200, opened.text
        self.headers = SIGNED | (headers or {})
        self.headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(url, json=initialized, headers=self.headers).status_code == 202

    def post(self, message: Any) -> httpx.Response:
        return self.http.post(self.url, json=message, headers=self.headers)

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        message = {"jsonrpc": "2.0", "id": 7, "method": method} | ({"params": params} if params else {})
        return answer(self.post(message))


@asynccontextmanager
async def watched_session(url: str, heard: list[object]) -> AsyncIterator[tuple[ClientSession, Callable[[], str]]]:
    """An official client session whose notifications land in `heard`, and its session id."""
    seen: list[str] = []

    async def keep_id(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            seen.append(response.headers["mcp-session-id"])

    async def on_message(message: object) -> None:
        heard.append(message)

    hooks = {"response": [keep_id]}
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30, event_hooks=hooks) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        yield session, lambda: seen[0]


def list_changed(heard: list[object]) -> int:
    return sum(isinstance(m, types.ToolListChangedNotification) for m in heard)


async def wait_listed(url: str, expected: list[str], timeout_s: float = 60) -> None:
    async def listed() -> bool:
        async with connect(url) as session:
            return set(expected) <= set(await tool_names(session))

    await await_until(listed, f"the tools {expected}", timeout_s=timeout_s)


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    return folder


# -- the door: keys, origins, the model ---------------------------------------------------------


def test_keys_in_another_scheme_the_query_or_wrong_are_refused_and_ten_do_not_lock_out_the_right_one(
    tmp_path, default_suite, notes_dir
):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        url = proxy.url + "/mcp/large-model"
        with httpx.Client(timeout=10) as http:
            for wrong in (f"Basic {KEY}", f"Token {KEY}", KEY, f"Bearer  {KEY}", f"Bearer {KEY}x", "Bearer other"):
                refused = http.post(url, json=INIT, headers=ACCEPT | {"Authorization": wrong})
                assert refused.status_code in (401, 429), wrong
                assert KEY not in refused.text
            in_query = http.post(f"{url}?api_key={KEY}&key={KEY}&access_token={KEY}", json=INIT, headers=ACCEPT)
            assert in_query.status_code in (401, 429)
            assert http.post(url, json=INIT, headers=SIGNED).status_code == 200  # past ten wrong ones


def test_an_origin_that_is_not_exactly_an_allowed_one_is_a_403(tmp_path, default_suite, notes_dir):
    mcp = {"allowed_origins": ["http://app.example:3000"]}
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, mcp=mcp) as proxy:
        url = proxy.url + "/mcp/large-model"
        with httpx.Client(timeout=10) as http:
            for origin in (
                "null",
                "http://app.example:3000.evil.example",
                "http://app.example.evil.example:3000",
                "http://app.example:3001",
                "http://app.example",
                "https://app.example:3000",
                "http://app.example:3000/",
            ):
                refused = http.post(url, json=INIT, headers=SIGNED | {"Origin": origin})
                assert refused.status_code == 403, origin
            assert http.post(url, json=INIT, headers=SIGNED | {"Origin": "HTTP://APP.EXAMPLE:3000"}).status_code == 200
            assert http.post(url, json=INIT, headers=SIGNED).status_code == 200  # not a browser


def test_an_allowed_origin_with_its_default_port_matches_what_browsers_send(tmp_path, default_suite, notes_dir):
    mcp = {"allowed_origins": ["https://app.example:443", "http://plain.example"]}
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, mcp=mcp) as proxy:
        url = proxy.url + "/mcp/large-model"
        with httpx.Client(timeout=10) as http:
            for origin in ("https://app.example", "https://app.example:443", "http://plain.example:80"):
                assert http.post(url, json=INIT, headers=SIGNED | {"Origin": origin}).status_code == 200, origin
            for origin in ("https://app.example:8443", "http://app.example", "http://plain.example:8080"):
                assert http.post(url, json=INIT, headers=SIGNED | {"Origin": origin}).status_code == 403, origin


def test_the_path_and_the_header_naming_different_models_is_a_400(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        with httpx.Client(timeout=10) as http:
            both = http.post(
                proxy.url + "/mcp/small-model", json=INIT, headers=SIGNED | {"X-Gatekeeper-Model": "large-model"}
            )
            assert both.status_code == 400
            assert "'small-model'" in both.text and "'large-model'" in both.text
            twice = [("X-Gatekeeper-Model", "small-model"), ("X-Gatekeeper-Model", "large-model")]
            two_headers = http.post(proxy.url + "/mcp", json=INIT, headers=[*SIGNED.items(), *twice])
            assert two_headers.status_code == 400 and "'large-model'" in two_headers.text
            agreeing = http.post(
                proxy.url + "/mcp/large-model", json=INIT, headers=SIGNED | {"X-Gatekeeper-Model": "large-model"}
            )
            assert agreeing.status_code == 200


async def test_odd_model_names_are_a_400_and_an_unknown_model_gets_the_unknown_tier(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, unknown_tier="small") as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        with httpx.Client(timeout=30) as http:
            for path in ("large-model@", "@high", "large-model@HIGH", "large-model@turbo", "large%00model", "m" * 300):
                refused = http.post(f"{proxy.url}/mcp/{path}", json=INIT, headers=SIGNED)
                assert refused.status_code == 400, path
            huge = http.post(proxy.url + "/mcp", json=INIT, headers=SIGNED | {"X-Gatekeeper-Model": "m" * 1_000_000})
            assert huge.status_code in (400, 431) and len(huge.content) < 2_000
            for path, expected in (
                ("large%2Dmodel", NOTES_ALL),  # the same name, percent-encoded: the same model
                ("large-model%40default", NOTES_ALL),
                ("LARGE-MODEL", NOTES_SMALL),  # another model: never measured, the unknown tier
                ("large-model/x", NOTES_SMALL),
            ):
                session = RawSession(http, f"{proxy.url}/mcp/{path}")
                listed = session.request("tools/list")["result"]["tools"]
                assert [t["name"] for t in listed] == expected, path


# -- sessions -------------------------------------------------------------------------------------


async def test_a_tool_hidden_after_the_tier_dropped_is_refused_though_the_session_never_listed_again(
    tmp_path, default_suite, notes_dir
):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        proxy.gk.store.save([make_profile("falling-model", Tier.LARGE, default_suite)])
        await wait_listed(proxy.url + "/mcp/falling-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/falling-model") as session:
            assert await tool_names(session) == NOTES_ALL
            proxy.gk.store.save([make_profile("falling-model", Tier.SMALL, default_suite)])
            await await_until(lambda: proxy.gk.resolve("falling-model").tier is Tier.SMALL, "the new profile")
            with pytest.raises(MCPError) as refused:
                await session.call_tool("notes__write_note", {"name": "n", "text": "after the drop"})
        assert "needs tier medium" in refused.value.message and "tier small" in refused.value.message
        assert calls(notes_dir) == [] and not (notes_dir / "n.txt").exists()


async def test_a_refused_delete_of_a_session_under_another_model_keeps_its_notifications(
    tmp_path, default_suite, notes_dir
):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        heard: list[object] = []
        async with watched_session(proxy.url + "/mcp/rising-model", heard) as (session, session_id):
            assert await tool_names(session) == NOTES_SMALL
            with httpx.Client(timeout=10) as http:
                moved = {"mcp-session-id": session_id(), "mcp-protocol-version": "2025-11-25"}
                assert http.delete(proxy.url + "/mcp/large-model", headers=SIGNED | moved).status_code == 404
            proxy.gk.store.save([make_profile("rising-model", Tier.LARGE, default_suite)])
            await await_until(lambda: list_changed(heard) == 1, "list_changed to the session's owner")
            assert await tool_names(session) == NOTES_ALL


async def test_a_session_that_listed_long_ago_still_hears_list_changed(tmp_path, default_suite, notes_dir, monkeypatch):
    import anyio

    from gatekeeper.mcp import gateway as gateway_module

    # The watch expired this long after the session's last tools/list (the SDK's idle period, 30
    # minutes, though the session stayed open): shortened so that the test can wait past it.
    monkeypatch.setattr(gateway_module, "DEFAULT_SESSION_IDLE_TIMEOUT", 1, raising=False)
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        heard: list[object] = []
        async with watched_session(proxy.url + "/mcp/later-model", heard) as (session, _):
            assert await tool_names(session) == NOTES_SMALL
            for _ in range(3):  # busy with calls, never listing again
                await anyio.sleep(0.6)
                assert not (await session.call_tool("notes__read_note", {"name": "x"})).is_error
            proxy.gk.store.save([make_profile("later-model", Tier.LARGE, default_suite)])
            await await_until(lambda: list_changed(heard) == 1, "list_changed long after the listing")


def test_a_session_stays_its_key_s_after_a_reload_removes_another_key(tmp_path, default_suite, notes_dir):
    import yaml

    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.server.app import create_app

    first, second, third = "mcp-key-first-0001", "mcp-key-second-0002", "mcp-key-third-0003"
    config = tmp_path / "gatekeeper.yaml"
    doc = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "store": str(tmp_path / "profiles.json"),
        "mcp": {"api_keys": [first, second], "servers": {"notes": toy("notes", notes_dir)}},
    }
    config.write_text(yaml.safe_dump(doc))
    with Gatekeeper.from_config(config) as gk, ThreadedServer(create_app(gk)) as server, httpx.Client() as http:
        url = f"http://127.0.0.1:{server.port}/mcp/some-model"
        opened = http.post(url, json=INIT, headers=ACCEPT | {"Authorization": f"Bearer {second}"})
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        config.write_text(yaml.safe_dump(doc | {"mcp": doc["mcp"] | {"api_keys": [second, third]}}))
        gk.reload()
        own = http.post(url, json=ping, headers=ACCEPT | session | {"Authorization": f"Bearer {second}"})
        assert own.status_code == 200, own.text
        other = http.post(url, json=ping, headers=ACCEPT | session | {"Authorization": f"Bearer {third}"})
        assert other.status_code == 404


# -- JSON-RPC: batches, cursors -------------------------------------------------------------------


async def test_a_batch_with_a_hidden_call_is_refused_and_nothing_is_forwarded(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        write = {"name": "notes__write_note", "arguments": {"name": "b", "text": "batched"}}
        batch = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "notes__read_note", "arguments": {}},
            },
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": write},
        ]
        with httpx.Client(timeout=10) as http:
            answered = RawSession(http, proxy.url + "/mcp/small-model").post(batch)
        assert answered.status_code == 400  # batches left JSON-RPC in MCP 2025-06-18
        assert calls(notes_dir) == [] and not (notes_dir / "b.txt").exists()


async def test_garbled_cursors_are_invalid_params_and_a_larger_model_s_cursor_shows_nothing_hidden(
    tmp_path, default_suite, notes_dir, monkeypatch
):
    from gatekeeper.mcp import gateway as gateway_module

    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 1)
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        with httpx.Client(timeout=10) as http:
            large = RawSession(http, proxy.url + "/mcp/large-model")
            cursor = large.request("tools/list", {"cursor": "p1"})["result"]["nextCursor"]
            assert large.request("tools/list", {"cursor": cursor})["result"]["tools"][0]["name"] == NOTES_ALL[2]
            small = RawSession(http, proxy.url + "/mcp/small-model")
            seen = [small.request("tools/list", {"cursor": c}).get("result", {}).get("tools", []) for c in ("p0", "p1")]
            assert [t["name"] for page in seen for t in page] == NOTES_SMALL
            past_the_end = small.request("tools/list", {"cursor": cursor})["result"]  # p2: after both small tools
            assert past_the_end["tools"] == [] and "nextCursor" not in past_the_end
            for garbled in ("p\u00b2", "p\uff11", "p" + "9" * 5000, "p-1", "", "q1"):
                error = small.request("tools/list", {"cursor": garbled})["error"]
                assert error["code"] == types.INVALID_PARAMS and "invalid cursor" in error["message"], garbled
                assert len(error["message"]) < 200


# -- what servers answer ------------------------------------------------------------------------

SECRET = "header-secret-4d1a9"


def echoing_server() -> Any:
    """The SDK's MCPServer over Streamable HTTP: it takes only its configured header, and its
    tool's error quotes that header back (as a careless server's error does)."""
    server = MCPServer("echoes")

    @server.tool(description="Fails quoting the credential it was sent.")
    def whoami() -> str:
        raise MCPError(-32001, f"token Bearer {SECRET} lacks the scope", {"header": f"Bearer {SECRET}"})

    inner = server.streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {SECRET}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await inner(scope, receive, send)

    return app


async def test_a_server_s_echo_of_its_headers_or_env_never_reaches_the_client(tmp_path, default_suite, notes_dir):
    token = "env-token-77c3e0"
    with ThreadedServer(echoing_server()) as echoes:
        servers = {
            "http": {"url": f"http://127.0.0.1:{echoes.port}/mcp", "headers": {"Authorization": f"Bearer {SECRET}"}},
            "stdio": hostile(
                "echo", notes_dir, env={"TOY_DIR": str(notes_dir), "ECHO_TOKEN": token, "ECHO_MODE": "production"}
            ),
        }
        with gateway(tmp_path, default_suite, servers) as proxy:
            await wait_listed(proxy.url + "/mcp/large-model", ["http__whoami", "stdio__rpc_error", "stdio__tool_error"])
            async with connect(proxy.url + "/mcp/large-model") as session:
                with pytest.raises(MCPError) as from_http:
                    await session.call_tool("http__whoami", {})
                with pytest.raises(MCPError) as from_stdio:
                    await session.call_tool("stdio__rpc_error", {})
                tool_error = await session.call_tool("stdio__tool_error", {})
    shown = [from_http.value.message, str(from_http.value.data), from_stdio.value.message, str(from_stdio.value.data)]
    shown.append(tool_error.content[0].text)
    assert "lacks the scope" in shown[0] and tool_error.is_error
    assert "401 for token=*** in production mode" in shown[4]  # a credential's env value, not any value
    assert all(SECRET not in text and token not in text for text in shown), shown


async def test_a_hanging_call_times_out_and_costs_nothing_else(tmp_path, default_suite, notes_dir):
    import anyio

    servers = {"notes": toy("notes", notes_dir), "slow": hostile("slow", notes_dir, timeout_s=2)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", [*NOTES_ALL, "slow__wait_forever"])
        async with connect(proxy.url + "/mcp/large-model") as session:
            failure: list[MCPError] = []

            async def hang() -> None:
                with pytest.raises(MCPError) as timed_out:
                    await session.call_tool("slow__wait_forever", {})
                failure.append(timed_out.value)

            async with anyio.create_task_group() as tg:
                tg.start_soon(hang)
                await await_until(lambda: "wait_forever" in calls(notes_dir), "the hanging call to arrive")
                # meanwhile the same server and the others answer
                assert (await session.call_tool("slow__quick", {})).content[0].text == "quick"
                assert not (await session.call_tool("notes__read_note", {"name": "x"})).is_error
        assert "did not answer" in failure[0].message and "within 2 s" in failure[0].message


async def test_huge_or_late_listings_cost_only_their_own_server(tmp_path, default_suite, notes_dir):
    servers = {
        "notes": toy("notes", notes_dir),
        "huge": hostile("paged", notes_dir, "10001", "2000", "0"),
        "late": hostile("paged", notes_dir, "6", "2", "3", timeout_s=2),  # each page past the deadline
        "slowly": hostile("paged", notes_dir, "6", "2", "0.5", timeout_s=2),  # slow pages, each in time
    }
    with gateway(tmp_path, default_suite, servers) as proxy:
        every_slow_page = [f"slowly__tool_{i}" for i in range(6)]
        await wait_listed(proxy.url + "/mcp/large-model", [*NOTES_ALL, *every_slow_page])
        async with connect(proxy.url + "/mcp/large-model") as session:
            names = await tool_names(session)
            assert not any(name.startswith(("huge__", "late__")) for name in names)

            async def why(label: str) -> str | None:
                try:
                    await session.call_tool(f"{label}__tool_0", {})
                except MCPError as exc:
                    return None if "not connected yet" in exc.message else exc.message
                return None

            assert "more than 10000 tools" in await await_until(lambda: why("huge"), "huge's failure")
            assert "did not answer in time" in await await_until(lambda: why("late"), "late's failure")


async def test_a_tool_renamed_without_notice_is_refused_under_its_new_name(tmp_path, default_suite, notes_dir):
    tools = {"required_tier": {"renames.write_*": "large", "renames.*": "small"}}
    servers = {"renames": hostile("renames", notes_dir)}
    with gateway(tmp_path, default_suite, servers, tools=tools) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", ["renames__read_item", "renames__swap"])
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert (await session.call_tool("renames__swap", {})).content[0].text == "swapped"
            with pytest.raises(MCPError) as refused:
                await session.call_tool("renames__write_item", {})  # the server has it now, unannounced
            assert "not forwarded" in refused.value.message
            stale = await session.call_tool("renames__read_item", {})  # listed and admitted: forwarded
        assert stale.is_error  # the server's own answer: it no longer has that tool
        assert calls(notes_dir) == ["swap"]


async def test_lookalike_tool_names_are_each_their_own_tool_ruled_by_their_own_name(tmp_path, default_suite, notes_dir):
    rules = {"tricky": "small", "tricky.*": "large", "tricky.read_x": "small", "tricky.read__x": "small"}
    tools = {"required_tier": rules}  # the server's catch-all large, two exact names small
    with gateway(tmp_path, default_suite, {"tricky": hostile("tricky", notes_dir)}, tools=tools) as proxy:
        every = ["tricky__read__x", "tricky__Read_X", "tricky__read-x", "tricky__read_x"]
        await wait_listed(proxy.url + "/mcp/large-model", every)
        async with connect(proxy.url + "/mcp/small-model") as session:
            assert await tool_names(session) == ["tricky__read__x", "tricky__read_x"]
            for name in (
                "tricky__Read_X",
                "tricky__read-x",
                "tricky__READ_X",
                "tricky__read_x\u0456",
                "Tricky__read_x",
            ):
                with pytest.raises(MCPError) as refused:
                    await session.call_tool(name, {})
                assert "not forwarded" in refused.value.message, name
            assert (await session.call_tool("tricky__read__x", {})).content[0].text == "ran read__x"
        assert calls(notes_dir) == ["read__x"]


# -- the tier: the proxy's own demotions ------------------------------------------------------------

DRIFTED = [
    {"name": "read_file", "arguments": '{"path": 5}'},  # wrong type
    {"name": "read_file", "arguments": '{"path": NaN}'},  # not JSON
    {"name": "format_disk", "arguments": "{}"},  # never offered
]


async def test_a_client_s_own_demotion_reaches_its_agent_at_the_door(tmp_path, default_suite, notes_dir):
    import openai
    from scripted import ScriptedServer

    read_file = {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
    # Ceilings of 5% (the drift tests' QUICK): a demotion after a few dozen drifted answers.
    ceilings = {"large": {"not_offered": 0.05, "invalid_json": 0.05, "invalid_args": 0.05}}
    drift = {"client_header": "x-user", "ceilings": ceilings}
    with ScriptedServer(lambda body: {"content": None, "tool_calls": DRIFTED}) as model:
        servers = {"notes": toy("notes", notes_dir)}
        with gateway(tmp_path, default_suite, servers, upstream={"base_url": model.base_url}, drift=drift) as proxy:
            proxy.gk.store.save([make_profile("agent-model", Tier.LARGE, default_suite)])
            await wait_listed(proxy.url + "/mcp/agent-model", NOTES_ALL)
            alice = openai.OpenAI(
                base_url=proxy.url + "/v1", api_key="k", max_retries=0, default_headers={"x-user": "alice"}
            )

            def served_to_alice() -> dict[str, str] | None:
                """One more drifted answer to alice; the headers once the proxy serves her demoted
                (the monitor judges in the background, so the demotion lands a few answers late)."""
                asked = alice.chat.completions.with_raw_response.create(
                    model="agent-model", messages=[{"role": "user", "content": "read it"}], tools=[read_file]
                )
                return dict(asked.headers) if asked.headers["x-gatekeeper-profile"] == "demoted" else None

            headers = await await_until(served_to_alice, "alice's traffic to demote the model for her", timeout_s=60)
            assert headers["x-gatekeeper-tier"] == "medium"
            async with connect(proxy.url + "/mcp/agent-model", headers={"x-user": "alice"}) as session:
                assert sorted(await tool_names(session)) == sorted(["notes__write_note", *NOTES_SMALL])
                with pytest.raises(MCPError) as refused:
                    await session.call_tool("notes__progress_steps", {"n": 1})
            assert "needs tier large" in refused.value.message and "(demoted)" in refused.value.message
            async with connect(proxy.url + "/mcp/agent-model", headers={"x-user": "bob"}) as session:
                assert await tool_names(session) == NOTES_ALL  # her demotion is hers
        assert calls(notes_dir) == []


# -- resources ------------------------------------------------------------------------------------


async def test_resource_templates_are_relayed_and_a_templated_read_goes_to_the_one_server_it_names(
    tmp_path, default_suite, notes_dir
):
    servers = {
        "notes": toy("notes", notes_dir),
        "books": hostile("library", notes_dir, "book", default_tier="small"),
        "films": hostile("library", notes_dir, "film", default_tier="small"),
        "more": hostile("library", notes_dir, "film", default_tier="small"),  # the same template as films
    }
    with gateway(tmp_path, default_suite, servers) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/small-model") as session:

            async def templates() -> list[str] | None:
                listed = sorted(t.uri_template for t in (await session.list_resource_templates()).resource_templates)
                return listed if len(listed) == 3 else None

            assert await await_until(templates, "every server's templates") == [
                "book://{title}",
                "film://{title}",
                "film://{title}",
            ]
            read = await session.read_resource("book://dune")
            assert read.contents[0].text == "book book dune"
            with pytest.raises(MCPError) as ambiguous:
                await session.read_resource("film://alien")  # two servers could: neither is guessed
            assert "films" in ambiguous.value.message and "more" in ambiguous.value.message
            with pytest.raises(MCPError):
                await session.read_resource("tape://x")
            assert (await session.read_resource("note://readme")).contents[0].text == "notes server readme"


async def test_a_resource_a_result_links_to_is_read_from_its_server_which_cannot_take_over_a_listed_one(
    tmp_path, default_suite, notes_dir
):
    servers = {"notes": toy("notes", notes_dir), "tricky": hostile("tricky", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", [*NOTES_ALL, "tricky__read_x"])
        async with connect(proxy.url + "/mcp/large-model") as session:
            with pytest.raises(MCPError):
                await session.read_resource("linked://doc")  # nobody lists or linked it yet
            result = await session.call_tool("tricky__read_x", {})
            assert [str(c.uri) for c in result.content if c.type == "resource_link"] == [
                "linked://doc",
                "note://readme",
            ]
            assert (await session.read_resource("linked://doc")).contents[0].text == "tricky's linked://doc"
            assert (await session.read_resource("note://readme")).contents[0].text == "notes server readme"


async def test_no_server_secret_nor_an_mcp_key_reaches_a_log_line_a_metric_or_the_console(
    tmp_path, default_suite, notes_dir, caplog
):
    import logging

    caplog.set_level(logging.DEBUG, logger="gatekeeper")
    token, in_path, in_query, wrong_header = (
        "env-token-77c3e0",
        "pathsecret0123456789",
        "querysecret-5e2",
        "wrong-hdr-1b7c9",
    )
    with ThreadedServer(echoing_server()) as echoes:
        base = f"http://127.0.0.1:{echoes.port}"
        servers = {
            "http": {"url": f"{base}/mcp", "headers": {"Authorization": f"Bearer {SECRET}"}},
            "stdio": hostile("echo", notes_dir, env={"TOY_DIR": str(notes_dir), "ECHO_TOKEN": token}),
            # refused by the server (a wrong header), at a URL carrying its key in the path and query
            "refused": {"url": f"{base}/s/{in_path}/mcp?token={in_query}", "headers": {"X-Key": wrong_header}},
        }
        with gateway(tmp_path, default_suite, servers, admin_key="console-key") as proxy:
            await wait_listed(proxy.url + "/mcp/large-model", ["http__whoami", "stdio__rpc_error"])
            async with connect(proxy.url + "/mcp/large-model") as session:
                for name in ("http__whoami", "stdio__rpc_error", "stdio__tool_error"):
                    with contextlib.suppress(MCPError):
                        await session.call_tool(name, {})

                async def refused_why() -> str | None:
                    try:
                        await session.call_tool("refused__anything", {})
                    except MCPError as exc:
                        return None if "not connected yet" in exc.message else exc.message
                    return None

                shown = [await await_until(refused_why, "the refused server's reason")]
            with httpx.Client(base_url=proxy.url, timeout=10) as http:
                near_miss = http.post(
                    "/mcp/large-model", json=INIT, headers=ACCEPT | {"Authorization": f"Bearer {KEY}x"}
                )
                shown.append(near_miss.text)
                shown.append(http.get("/metrics").text)
                http.post("/admin/login", data={"key": "console-key"}, headers={"origin": proxy.url})
                shown.append(http.get("/admin/").text)
    shown += [record.getMessage() for record in caplog.records]
    for secret in (SECRET, token, in_path, in_query, wrong_header, KEY):
        assert not any(secret in text for text in shown), secret


async def test_a_stdio_server_gets_a_short_environment_without_the_gateway_s_keys(
    tmp_path, default_suite, notes_dir, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-secret")
    monkeypatch.setenv("GATEKEEPER_MCP_KEY", KEY)
    servers = {"env": hostile("environ", notes_dir, env={"TOY_DIR": str(notes_dir), "ONLY_THIS": "1"})}
    with gateway(tmp_path, default_suite, servers) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", ["env__names"])
        async with connect(proxy.url + "/mcp/large-model") as session:
            names = (await session.call_tool("env__names", {})).structured_content["result"]
    assert set(names) <= {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "TOY_DIR", "ONLY_THIS", "LC_CTYPE"}
    assert "ONLY_THIS" in names


async def test_a_session_that_does_not_read_its_stream_does_not_hold_up_the_others_list_changed(
    tmp_path, default_suite, notes_dir, monkeypatch
):
    import anyio
    from conftest import seed_store, settings_for

    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.mcp import gateway as gateway_module
    from gatekeeper.server.app import create_app

    class Stuck:
        """A session whose client never reads: its notification waits until the timeout."""

        async def send_tool_list_changed(self) -> None:
            await anyio.sleep_forever()

    monkeypatch.setattr(gateway_module, "_NOTIFY_TIMEOUT_S", 600)  # each stuck session's own wait
    store = tmp_path / "profiles.json"
    seed_store(store, make_profile("large-model", Tier.LARGE, default_suite))
    mcp = {"api_keys": [KEY], "servers": {"notes": toy("notes", notes_dir)}}
    tools = {"required_tier": {"notes.write_note": "medium", "notes.progress_steps": "large", "notes.crash": "large"}}
    settings = settings_for("http://127.0.0.1:9/v1", store, mcp=mcp, tools=tools)
    with Gatekeeper(settings) as gk:
        app = create_app(gk)
        with ThreadedServer(app) as server:
            url = f"http://127.0.0.1:{server.port}/mcp/"
            await wait_listed(url + "large-model", NOTES_ALL)
            heard: list[object] = []
            async with (
                watched_session(url + "rising-model", []) as (stuck, stuck_id),
                watched_session(url + "rising-model", heard) as (listening, _),
            ):
                assert await tool_names(stuck) == await tool_names(listening) == NOTES_SMALL
                # First both are heard (so the listening client's event stream is surely open:
                # a notification sent before the client opened it would be lost, stuck or not).
                gk.store.save([make_profile("rising-model", Tier.MEDIUM, default_suite)])
                await await_until(lambda: list_changed(heard) == 1, "list_changed before any session is stuck")
                app.state.mcp._watched[stuck_id()].session = Stuck()  # listed first: told first
                gk.store.save([make_profile("rising-model", Tier.LARGE, default_suite)])
                await await_until(lambda: list_changed(heard) == 2, "list_changed beside a stuck session")


async def test_a_sessionless_request_naming_another_s_session_id_does_not_take_over_its_notifications(
    tmp_path, default_suite, notes_dir
):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        heard: list[object] = []
        async with watched_session(proxy.url + "/mcp/rising-model", heard) as (victim, victim_id):
            assert await tool_names(victim) == NOTES_SMALL
            # The 2026 single-exchange protocol, carrying the victim's session id as a header.
            claimed = {"Authorization": f"Bearer {KEY}", "mcp-session-id": victim_id()}
            async with (
                httpx2.AsyncClient(headers=claimed) as http,
                streamable_http_client(proxy.url + "/mcp/large-model", http_client=http) as (read, write),
                ClientSession(read, write) as sessionless,
            ):
                await sessionless.discover()
                assert sessionless.protocol_version == "2026-07-28"
                assert [t.name for t in (await sessionless.list_tools()).tools] == NOTES_ALL
            proxy.gk.store.save([make_profile("rising-model", Tier.LARGE, default_suite)])
            await await_until(lambda: list_changed(heard) == 1, "list_changed to the session's owner")


async def test_a_server_s_tool_names_reach_the_console_escaped(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"tricky": hostile("tricky", notes_dir)}, admin_key="console-key") as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", ["tricky__read_x"])
        with httpx.Client(base_url=proxy.url, timeout=10) as http:
            http.post("/admin/login", data={"key": "console-key"}, headers={"origin": proxy.url})
            page = http.get("/admin/").text
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


async def test_under_unknown_models_reject_an_unknown_model_lists_and_calls_nothing(tmp_path, default_suite, notes_dir):
    servers = {"notes": toy("notes", notes_dir)}
    with gateway(tmp_path, default_suite, servers, unknown_models="reject") as proxy:
        await wait_listed(proxy.url + "/mcp/large-model", NOTES_ALL)
        async with connect(proxy.url + "/mcp/stranger-model") as session:
            with pytest.raises(MCPError) as listing:
                await session.list_tools()
            with pytest.raises(MCPError) as calling:
                await session.call_tool("notes__read_note", {"name": "x"})
        assert "stranger-model" in listing.value.message and "stranger-model" in calling.value.message
        assert calls(notes_dir) == []


async def test_a_reload_that_removes_a_key_ends_that_key_s_open_streams(tmp_path, default_suite, notes_dir):
    import anyio
    import yaml

    from gatekeeper.core.gatekeeper import Gatekeeper
    from gatekeeper.server.app import create_app

    kept, revoked = "mcp-key-kept-0001", "mcp-key-revoked-0002"
    config = tmp_path / "gatekeeper.yaml"
    doc = {
        "upstream": {"base_url": "http://127.0.0.1:9/v1"},
        "store": str(tmp_path / "profiles.json"),
        "mcp": {"api_keys": [kept, revoked], "servers": {"notes": toy("notes", notes_dir)}},
    }
    config.write_text(yaml.safe_dump(doc))
    with Gatekeeper.from_config(config) as gk, ThreadedServer(create_app(gk)) as server:
        url = f"http://127.0.0.1:{server.port}/mcp/some-model"
        async with httpx2.AsyncClient(timeout=30) as http:
            signed = ACCEPT | {"Authorization": f"Bearer {revoked}"}
            opened = await http.post(url, json=INIT, headers=signed)
            session = signed | {
                "mcp-session-id": opened.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            opened, ended = anyio.Event(), anyio.Event()

            async def hold_the_stream() -> None:
                async with http.stream("GET", url, headers=session | {"Accept": "text/event-stream"}) as stream:
                    assert stream.status_code == 200
                    opened.set()
                    with contextlib.suppress(httpx2.HTTPError):
                        async for _ in stream.aiter_bytes():
                            pass
                ended.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(hold_the_stream)
                await opened.wait()  # it ends only when the server ends it
                config.write_text(yaml.safe_dump(doc | {"mcp": doc["mcp"] | {"api_keys": [kept]}}))
                gk.reload()
                await await_until(ended.is_set, "the revoked key's stream to end")
            again = await http.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers=session)
            assert again.status_code == 401
