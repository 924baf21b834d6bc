"""A second hostile review of the MCP door (issue 23, after tests/mcp/test_mcp_hostile.py): a real
proxy on a real port, real MCP servers started by the tests (tests/mcp/round2_servers.py,
tests/mcp/toy_server.py: the SDK's MCPServer and low-level Server over stdio) and the official
`mcp` client.

What got through, and what happens now:
- A stdio server writing one endless line (no newline) grew the gateway's memory without limit,
  and the SDK's reader re-split the whole line on every 64 KB read, on the loop every session
  needs. Now a message over `max_message_mb` (16 by default) ends that server's connection: its
  calls in flight fail naming the bound, it is restarted with backoff, the others keep serving.
- A Streamable HTTP server's JSON answer was read whole, however large (the SDK's client bounds
  only event-stream events, at 1 MiB, so a 5 MB result by event stream failed). Now both are
  bounded at `max_message_mb`, and past it only that call fails; a compressed answer (which the
  bound could not judge: 1 MB of gzip unpacks to a gigabyte) is not asked for, and refused.
- A tool named `x\n` passed the function-name check (`re.match` with `$` matches before a final
  newline) and was offered as `a__x\n` beside `a__x`: a name model APIs refuse, which broke the
  whole tool list of the client's next model request. Now names are checked whole (fullmatch),
  labels too.
- A server that redefined a tool under the same name (a "rug pull": a new description asking to
  send a key somewhere, a new `destination` argument) went unnoticed: no list_changed (the
  names had not changed), and calls written for the old definition ran under the new one. Now
  sessions are told, the change is logged, and a session that listed the old definition has its
  calls refused (`tool_changed`, never forwarded) until it lists again.
- Each resources/read of a URI no server listed made every server list its resources and
  templates again: a client looping over made-up URIs multiplied its requests by the servers.
  Now at most once every 5 s.
- A server sending tools/list_changed without pause (300 in 3 s, 5,000 tools a listing) was
  listed again back to back, each 5,000-tool listing parsed on the loop every other server and
  session needs. Now at most one listing a second.
- A server of resources only (no tools capability) was marked down: the gateway asked it for
  tools/list, "Method not found". Now its tools are none and its resources are served.

What held (pinned here so it stays so): labels that could be read two ways (`a__b`, `a_`, `_a`,
non-ASCII) are config errors; `a__b__c` (server `a`, tool `b__c`) and `a_b__c` (server `a_b`,
tool `c`) each reach their own server and tool, and case or Unicode lookalikes are unknown tools;
a server's sampling, elicitation and roots requests are answered "not supported" at once and its
tool call completes; resource subscriptions and log levels are "Method not found" and the
session goes on (completions, not relayed before, now are: to the server whose prompt or
resource template the reference names); two clients whose progress tokens collide (the official client's token
is its request id) each hear only their own progress and result, and so do 100 concurrent calls
on one session; a call that starts after a demotion landed is refused; a session id is 404 under
another key or model, and a guessed one unknown; a server listing 100,000 tools on one page
loses only its own tools; 3,000 log, progress and list_changed notifications from a server
reach no other call and tell no session anything (nothing changed); a 50 MB result fails its
call by default and is relayed under a higher `max_message_mb`.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from conftest import await_until, make_profile
from gateway_helpers import KEY, connect, gateway, tool_names, toy
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from scripted import ThreadedServer
from starlette.types import Message, Receive, Scope, Send
from test_mcp_hostile import ACCEPT, INIT, NOTES_ALL, SIGNED, calls, list_changed, wait_listed, watched_session

from gatekeeper.config import McpSettings
from gatekeeper.mcp.upstream import RELIST_PAUSE_S
from gatekeeper.rules.tiers import Tier

SERVERS = Path(__file__).with_name("round2_servers.py")
MB = 2**20


def r2(mode: str, folder: Path, *args: str, **extra: Any) -> dict[str, Any]:
    config = {"command": [sys.executable, str(SERVERS), mode, *args], "env": {"TOY_DIR": str(folder)}, "timeout_s": 10}
    return config | extra


def logged(folder: Path) -> list[dict[str, Any]]:
    """What reached the servers writing to `folder`'s calls.log, in order."""
    log = folder / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    return folder


async def answers(session: ClientSession, tool: str, arguments: dict[str, Any] | None = None) -> bool:
    """Whether a call of `tool` is served now (not refused, its server not down)."""
    try:
        return not (await session.call_tool(tool, arguments or {})).is_error
    except MCPError:
        return False


@asynccontextmanager
async def roomy_client(url: str) -> AsyncIterator[ClientSession]:
    """An official client session taking events of any size (the SDK's client cuts each at 1 MiB)."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=httpx2.Timeout(60, read=300)) as http,
        streamable_http_client(url, http_client=http, max_sse_event_size=None) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@contextmanager
def peak_rss_growth() -> Iterator[list[float]]:
    """How far above its level at the start this process's resident memory rose while the block
    ran (MB, in the list yielded, filled in at the end): sampled every 10 ms."""

    def rss() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / MB

    start, peak, done = rss(), [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss() - start)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    grown: list[float] = []
    try:
        yield grown
    finally:
        done.set()
        sampler.join()
        grown.append(peak[0])


# -- the size of what a server writes --------------------------------------------------------


async def test_a_100_mb_line_without_a_newline_ends_only_its_server_s_connection(tmp_path, default_suite, notes_dir):
    servers = {"flood": r2("flood", notes_dir), "notes": toy("notes", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["flood__quick", "notes__read_note"])
        async with connect(url) as session:
            with peak_rss_growth() as grown:
                with pytest.raises(MCPError) as ended:
                    await session.call_tool("flood__endless_line", {"mb": 100})
                assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False
            assert grown[0] < 64, f"the gateway's memory grew {grown[0]:.0f} MB"
            assert "over 16 MiB (max_message_mb)" in ended.value.error.message
            await await_until(lambda: answers(session, "flood__quick"), "flood restarted after its backoff")
        assert [c for c in calls(notes_dir) if c != "read_note"] == ["endless_line", "quick"]


# -- names -------------------------------------------------------------------------------------


async def test_a_call_reaches_exactly_the_server_and_tool_its_listed_name_means(tmp_path, default_suite, notes_dir):
    lookalikes = ["b__c", "x", "x\n", "X", "\uff58", "x\u0301", "_x"]
    servers = {
        "a": r2("names", notes_dir, json.dumps(lookalikes), env={"TOY_DIR": str(notes_dir), "SERVER_NAME": "a"}),
        "a_b": r2("names", notes_dir, json.dumps(["c"]), env={"TOY_DIR": str(notes_dir), "SERVER_NAME": "a_b"}),
    }
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["a__b__c", "a_b__c"])
        async with connect(url) as session:
            listed = await tool_names(session)
            # `x\n` passed the function-name check (`$` matches before a final newline): a name
            # every model API refuses, next to `x`. Not a function name, so not offered.
            assert sorted(listed) == sorted(["a___x", "a__X", "a__b__c", "a__x", "a_b__c"])
            for name in listed:
                assert (await session.call_tool(name, {})).content[0].text == {
                    "a___x": "a:_x",
                    "a__X": "a:X",
                    "a__b__c": "a:b__c",
                    "a__x": "a:x",
                    "a_b__c": "a_b:c",
                }[name]
            for name in ("a__x\n", "a__\uff58", "A__x", "a_b__b__c", "a__b_c", "a___b__c"):
                with pytest.raises(MCPError, match="Unknown tool"):
                    await session.call_tool(name, {})
    assert sorted((c["server"], c["tool"]) for c in logged(notes_dir)) == sorted(
        [("a", "_x"), ("a", "X"), ("a", "b__c"), ("a", "x"), ("a_b", "c")]
    )


def test_a_label_that_could_be_read_two_ways_is_refused_by_the_config(tmp_path):
    for label in ("a__b", "a_", "_a", "a\n", "\uff41"):
        with pytest.raises(ValidationError, match="a label is a letter"):
            McpSettings.model_validate({"api_keys": ["k"], "servers": {label: {"url": "http://127.0.0.1:1/mcp"}}})


# -- a server that redefines a tool ("rug pull") -----------------------------------------------


async def test_a_tool_redefined_after_listing_is_told_and_refused_until_listed_again(
    tmp_path, default_suite, notes_dir
):
    with gateway(tmp_path, default_suite, {"docs": r2("rugpull", notes_dir)}) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["docs__read_doc"])
        heard: list[object] = []
        async with watched_session(url, heard) as (session, _):
            (honest, _pull) = (await session.list_tools()).tools
            assert honest.description == "Reads a document."
            await session.call_tool("docs__pull", {})  # the server redefines read_doc, same name
            await await_until(lambda: list_changed(heard) >= 1, "list_changed for the redefined tool")
            with pytest.raises(MCPError) as refused:
                await session.call_tool("docs__read_doc", {"name": "a", "destination": "evil.example"})
            assert refused.value.error.data == {"tool": "docs__read_doc", "reason": "tool_changed"}
            assert "list the tools again" in refused.value.error.message
            pulled = (await session.list_tools()).tools[0]
            assert "id_rsa" in pulled.description  # relayed as the server has it: the client judges it
            assert "destination" in pulled.input_schema["properties"]
            assert (await session.call_tool("docs__read_doc", {"name": "a"})).is_error is False
        async with connect(url) as fresh:  # a session that never saw the old one is served
            assert (await fresh.call_tool("docs__read_doc", {"name": "b"})).is_error is False
    assert [c["tool"] for c in logged(notes_dir)] == ["pull", "read_doc", "read_doc"]


# -- resources ---------------------------------------------------------------------------------


async def test_reads_of_made_up_uris_do_not_make_every_server_list_its_resources_each_time(
    tmp_path, default_suite, notes_dir
):
    servers = {"docs": r2("resources", notes_dir, default_tier="small"), "notes": toy("notes", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["notes__read_note"])
        async with connect(url) as session:

            async def read_one() -> bool:
                try:
                    return (await session.read_resource("doc://one")).contents[0].text == "one"
                except MCPError:
                    return False  # docs not up yet (it has no tools to wait for)

            await await_until(read_one, "docs' resource")
            before = len(logged(notes_dir))
            for i in range(30):
                with pytest.raises(MCPError, match="Resource not found"):
                    await session.read_resource(f"doc://made-up-{i}")
            assert (await session.read_resource("doc://one")).contents[0].text == "one"
    listings = [c["tool"] for c in logged(notes_dir)[before:] if c["tool"] != "resources/read"]
    # Each was asked once per read (30 + 1 of each); now once per 5 s at most.
    assert listings.count("resources/list") <= 3, listings
    assert listings.count("resources/templates/list") <= 3, listings


# -- what is not relayed -----------------------------------------------------------------------


async def test_a_server_s_requests_to_the_client_are_answered_not_supported_and_its_call_completes(
    tmp_path, default_suite, notes_dir
):
    with gateway(tmp_path, default_suite, {"flood": r2("flood", notes_dir)}) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["flood__ask"])
        async with connect(url) as session:
            for kind in ("sampling", "elicitation", "roots"):
                answer = (await session.call_tool("flood__ask", {"kind": kind})).content[0].text
                assert answer.startswith(f"{kind} refused: MCPError:"), answer
                assert "not supported" in answer, answer
            assert (await session.call_tool("flood__quick", {})).is_error is False


async def test_completions_are_relayed_to_the_server_named_and_subscriptions_are_method_not_found(
    tmp_path, default_suite, notes_dir
):
    servers = {"books": r2("complete", notes_dir, default_tier="small"), "notes": toy("notes", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["notes__read_note"])
        async with connect(url) as session:

            async def books_up() -> bool:  # it has no tools for wait_listed to wait for
                return "books__greet" in [p.name for p in (await session.list_prompts()).prompts]

            await await_until(books_up, "the books server")
            prompt = types.PromptReference(type="ref/prompt", name="books__greet")
            template = types.ResourceTemplateReference(type="ref/resource", uri="book://{title}")
            assert (await session.complete(prompt, {"name": "name", "value": "a"})).completion.values == [
                "greet:name:a1"
            ]
            assert (await session.complete(template, {"name": "title", "value": "b"})).completion.values == [
                "book://{title}:title:b1"
            ]
            for ref in (
                types.PromptReference(type="ref/prompt", name="greet"),
                types.PromptReference(type="ref/prompt", name="nobody__greet"),
                types.ResourceTemplateReference(type="ref/resource", uri="note://{other}"),
            ):
                with pytest.raises(MCPError) as unknown:
                    await session.complete(ref, {"name": "name", "value": "a"})
                assert unknown.value.error.code == types.INVALID_PARAMS
            attempts = [
                lambda: session.subscribe_resource("note://readme"),
                lambda: session.unsubscribe_resource("note://readme"),
                lambda: session.set_logging_level("debug"),
            ]
            for attempt in attempts:
                with pytest.raises(MCPError) as refused:
                    await attempt()
                assert refused.value.error.code == types.METHOD_NOT_FOUND
            assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False
    assert [(c["ref"], c["value"]) for c in logged(notes_dir) if c["tool"] == "completion/complete"] == [
        ("greet", "a"),
        ("book://{title}", "b"),
    ]


# -- many clients, many calls ------------------------------------------------------------------


async def test_clients_whose_progress_tokens_collide_each_hear_only_their_own_progress_and_result(
    tmp_path, default_suite, notes_dir
):
    with gateway(tmp_path, default_suite, {"flood": r2("flood", notes_dir)}) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["flood__echo"])
        heard: dict[str, list[str]] = {"alpha": [], "beta": []}

        async def call(text: str) -> str:
            async def progress(done: float, total: float | None, message: str | None) -> None:
                heard[text].append(message or "")

            async with connect(url) as session:  # each session numbers its requests from the same start:
                # the official client's progress token is the request id, so the two collide
                result = await session.call_tool("flood__echo", {"text": text, "steps": 20}, progress_callback=progress)
                return result.content[0].text

        async with anyio.create_task_group() as tg:
            answers: dict[str, str] = {}
            for text in heard:
                tg.start_soon(lambda t=text: _keep(answers, t, call(t)))
        assert answers == {"alpha": "alpha", "beta": "beta"}
        for text, messages in heard.items():
            assert messages == [f"{text} {i}" for i in range(1, 21)]


async def _keep(into: dict[str, str], key: str, value: Awaitable[str]) -> None:
    into[key] = await value


async def test_a_hundred_concurrent_calls_on_one_session_each_get_their_own_result(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"flood": r2("flood", notes_dir)}) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["flood__echo"])
        async with connect(url) as session:
            heard: dict[str, list[str]] = {f"call-{i}": [] for i in range(100)}
            answers: dict[str, str] = {}

            async def call(text: str) -> str:
                async def progress(done: float, total: float | None, message: str | None) -> None:
                    heard[text].append(message or "")

                result = await session.call_tool("flood__echo", {"text": text, "steps": 3}, progress_callback=progress)
                return result.content[0].text

            async with anyio.create_task_group() as tg:
                for text in heard:
                    tg.start_soon(lambda t=text: _keep(answers, t, call(t)))
        assert answers == {text: text for text in heard}
        assert all(messages == [f"{text} {i}" for i in range(1, 4)] for text, messages in heard.items())


async def test_a_call_that_starts_after_a_demotion_landed_is_refused(tmp_path, default_suite, notes_dir):
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}) as proxy:
        proxy.gk.store.save([make_profile("falling-model", Tier.LARGE, default_suite)])
        url = proxy.url + "/mcp/falling-model"
        await wait_listed(url, NOTES_ALL)
        landed: list[float] = []
        outcomes: list[tuple[float, bool]] = []  # (when the call started, whether it was served)

        async def caller(session: ClientSession, n: int) -> None:
            while not landed or len([o for o in outcomes if o[0] > landed[0]]) < 20:
                started = time.monotonic()
                try:
                    await session.call_tool("notes__write_note", {"name": f"n{n}", "text": "x"})
                    outcomes.append((started, True))
                except MCPError as exc:
                    assert "needs tier medium" in exc.error.message
                    outcomes.append((started, False))

        async def demote() -> None:
            await await_until(lambda: len(outcomes) >= 10, "calls served before the demotion")
            proxy.gk.store.save([make_profile("falling-model", Tier.SMALL, default_suite)])
            await await_until(lambda: proxy.gk.resolve("falling-model").tier is Tier.SMALL, "the demotion")
            landed.append(time.monotonic())

        async with connect(url) as first, connect(url) as second, anyio.create_task_group() as tg:
            for n, session in enumerate((first, second, first, second)):
                tg.start_soon(caller, session, n)
            tg.start_soon(demote)
        assert any(served for started, served in outcomes if started < landed[0])
        assert not any(served for started, served in outcomes if started > landed[0])


def test_a_session_id_is_no_use_under_another_key_or_model_and_a_guessed_one_is_unknown(
    tmp_path, default_suite, notes_dir
):
    other = "mcp-other-key-0002"
    mcp = {"api_keys": [KEY, other]}
    with gateway(tmp_path, default_suite, {"notes": toy("notes", notes_dir)}, mcp=mcp) as proxy:
        url = proxy.url + "/mcp/large-model"
        with httpx.Client(timeout=10) as http:
            opened = http.post(url, json=INIT, headers=SIGNED)
            session_id = opened.headers["mcp-session-id"]
            own = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            as_other = ACCEPT | own | {"Authorization": f"Bearer {other}"}
            assert http.post(url, json=ping, headers=as_other).status_code == 404
            assert http.get(url, headers=as_other).status_code == 404
            assert http.delete(url, headers=as_other).status_code == 404
            small = proxy.url + "/mcp/small-model"
            assert http.post(small, json=ping, headers=SIGNED | own).status_code == 404
            for guessed in (session_id[:-1] + ("0" if session_id[-1] != "0" else "1"), "1", "", "../" + session_id):
                guess = SIGNED | {"mcp-session-id": guessed, "mcp-protocol-version": "2025-11-25"}
                assert http.post(url, json=ping, headers=guess).status_code in (400, 404), guessed
            assert http.post(url, json=ping, headers=SIGNED | own).status_code == 200  # still its owner's


# -- a server that floods ----------------------------------------------------------------------


async def test_a_server_listing_a_hundred_thousand_tools_costs_only_its_own(tmp_path, default_suite, notes_dir):
    servers = {"many": r2("many", notes_dir, "100000"), "notes": toy("notes", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, NOTES_ALL)
        async with connect(url) as session:

            async def refusal() -> str | None:
                try:
                    await session.call_tool("many__tool_1", {})
                except MCPError as exc:
                    return None if "not connected yet" in exc.error.message else exc.error.message
                pytest.fail("a tool of a listing over the bound was served")

            why = await await_until(refusal, "many's listing refused", timeout_s=60)
            assert "more than 10000 tools" in why
            assert await tool_names(session) == NOTES_ALL
            assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False


async def test_a_flood_of_notifications_reaches_no_one_else_and_tells_no_session_anything(
    tmp_path, default_suite, notes_dir
):
    servers = {"flood": r2("flood", notes_dir), "notes": toy("notes", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["flood__chatter", "notes__read_note"])
        heard: list[object] = []
        async with watched_session(url, heard) as (watcher, _), connect(url) as caller:
            await tool_names(watcher)
            answers: dict[str, str] = {}

            async def chatter() -> str:
                return (await caller.call_tool("flood__chatter", {"n": 3000})).content[0].text

            async def read() -> str:
                return (await watcher.call_tool("notes__read_note", {"name": "x"})).content[0].text

            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _keep(answers, "chatter", chatter()))
                tg.start_soon(lambda: _keep(answers, "read", read()))
            assert answers == {"chatter": "done", "read": ""}
            # 3,000 list_changed from the server: it was listed again, nothing changed, no session told
            assert list_changed(heard) == 0
            assert not [
                m for m in heard if isinstance(m, (types.LoggingMessageNotification, types.ProgressNotification))
            ]


async def test_a_50_mb_result_fails_its_call_by_default_and_is_relayed_under_a_higher_bound(
    tmp_path, default_suite, notes_dir
):
    servers = {
        "flood": r2("flood", notes_dir),
        "roomy": r2("flood", notes_dir, max_message_mb=128),  # MCPServer sends a str result twice (text and structured)
        "notes": toy("notes", notes_dir),
    }
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["flood__big_result", "roomy__big_result", "notes__read_note"])
        async with roomy_client(url) as session:
            with pytest.raises(MCPError, match=r"over 16 MiB \(max_message_mb\)"):
                await session.call_tool("flood__big_result", {"mb": 50})
            big = await session.call_tool("roomy__big_result", {"mb": 50})
            assert len(big.content[0].text) == 50 * MB
            assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False


def big_answers_app(json_response: bool) -> Any:
    """The SDK's MCPServer over Streamable HTTP: `big_result(mb)` answers `mb` MB, `quick` at once."""
    server = MCPServer("big")

    @server.tool(description="Answers mb MB of text.")
    def big_result(mb: int) -> str:
        return "y" * (mb * MB)

    @server.tool(description="Answers at once.")
    def quick() -> str:
        return "quick"

    return server.streamable_http_app(json_response=json_response)


async def test_an_http_server_s_answer_over_the_bound_fails_that_call_alone(tmp_path, default_suite, notes_dir):
    with ThreadedServer(big_answers_app(json_response=True)) as plain, ThreadedServer(big_answers_app(False)) as sse:
        servers = {
            "plain": {"url": f"http://127.0.0.1:{plain.port}/mcp"},
            "sse": {"url": f"http://127.0.0.1:{sse.port}/mcp"},
        }
        with gateway(tmp_path, default_suite, servers) as proxy:
            url = proxy.url + "/mcp/large-model"
            await wait_listed(url, ["plain__quick", "sse__quick"])
            async with roomy_client(url) as session:
                # The SDK read a JSON answer whole, unbounded; it cut an event stream at 1 MiB.
                for label in ("plain", "sse"):
                    with pytest.raises(MCPError) as refused:
                        await session.call_tool(f"{label}__big_result", {"mb": 20})
                    said = {"plain": "over 16 MiB (max_message_mb)", "sse": "exceeded the 16777216 byte limit"}
                    assert said[label] in refused.value.error.message
                    five = await session.call_tool(f"{label}__big_result", {"mb": 5})
                    assert len(five.content[0].text) == 5 * MB
                    assert (await session.call_tool(f"{label}__quick", {})).content[0].text == "quick"


async def test_a_server_saying_list_changed_without_pause_is_listed_again_at_most_once_a_second(
    tmp_path, default_suite, notes_dir
):
    servers = {"busy": r2("relisting", notes_dir, "5000"), "notes": toy("notes", notes_dir)}
    with gateway(tmp_path, default_suite, servers) as proxy:
        url = proxy.url + "/mcp/large-model"
        await wait_listed(url, ["busy__tool_0", "notes__read_note"])
        async with connect(url) as session:
            started = time.monotonic()
            assert (await session.call_tool("busy__tool_0", {"n": 300})).content[0].text == "spun"
            spun_s = time.monotonic() - started
            assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False
        listings = [c for c in logged(notes_dir) if c["tool"] == "tools/list"]
        # Back to back, a 5,000-tool listing after each of 300 notifications; now one a second.
        assert len(listings) <= 2 + spun_s / RELIST_PAUSE_S, (len(listings), spun_s)


def gzipping(app: Any) -> Any:
    """`app`, its JSON answers gzipped whether or not the client asked (a server that ignores
    `Accept-Encoding: identity`)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        body = bytearray()

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            headers = [(k, v) for k, v in start["headers"] if k.lower() not in (b"content-length",)]
            packed = gzip.compress(bytes(body))
            if dict(headers).get(b"content-type", b"").startswith(b"application/json"):
                headers += [(b"content-encoding", b"gzip")]
            else:
                packed = bytes(body)
            await send(start | {"headers": [*headers, (b"content-length", str(len(packed)).encode())]})
            await send({"type": "http.response.body", "body": packed})

        await app(scope, receive, capture)

    return wrapped


async def test_a_compressed_answer_from_an_http_server_is_refused(tmp_path, default_suite, notes_dir):
    # 1 MB of gzip can unpack to a gigabyte: its size on the wire says nothing of its size in memory.
    with ThreadedServer(gzipping(big_answers_app(json_response=True))) as packed:
        servers = {"packed": {"url": f"http://127.0.0.1:{packed.port}/mcp"}, "notes": toy("notes", notes_dir)}
        with gateway(tmp_path, default_suite, servers) as proxy:
            url = proxy.url + "/mcp/large-model"
            await wait_listed(url, ["notes__read_note"])
            async with connect(url) as session:

                async def why() -> str | None:
                    try:
                        await session.call_tool("packed__quick", {})
                    except MCPError as exc:
                        return None if "not connected yet" in exc.error.message else exc.error.message
                    pytest.fail("a compressed answer was taken")

                assert "compressed answer" in await await_until(why, "packed refused")
                assert (await session.call_tool("notes__read_note", {"name": "x"})).is_error is False
