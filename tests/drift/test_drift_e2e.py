"""Live drift end to end: official openai clients (one API key each) -> real proxy -> scripted
upstream that drifts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import answers
import httpx
import openai
from conftest import agent_or_suite, running_proxy, settings_for, wait_until
from scripted import ScriptedServer, SuiteScript
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gatekeeper.suite.loader import DEFAULT_SUITE_DIR

ADMIN = {"Authorization": "Bearer admin-secret"}
PAIR = "agent-model@default"


def tool(name: str, properties: dict[str, Any]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        },
    }


TOOLS = [
    tool("read_file", {"path": {"type": "string"}}),
    tool("execute_command", {"command": {"type": "string"}, "timeout_s": {"type": "integer"}}),
]

SOUND = [
    {"name": "read_file", "arguments": {"path": "/etc/hosts"}},
    {"name": "execute_command", "arguments": {"command": "ls", "timeout_s": 5}},
]
DRIFTED = [
    {"name": "read_file", "arguments": '{"path": 5}'},  # wrong type
    {"name": "execute_command", "arguments": '{"command": "ls", "timeout_s": NaN}'},  # not JSON
    {"name": "format_disk", "arguments": "{}"},
]  # invented


class Agent:
    """The agent-facing side of the scripted model: its tool calls are switched by the test."""

    def __init__(self) -> None:
        self.calls: list[dict] | Callable[[], list[dict]] = SOUND

    def __call__(self, body: dict) -> dict:
        calls = self.calls() if callable(self.calls) else self.calls
        return {"content": None, "tool_calls": calls}


class DriftingModel(ScriptedServer):
    """Suite prompts are answered perfectly, the rest by `agent`. While `measuring` is clear,
    suite prompts wait (without holding up the agent's requests)."""

    def __init__(self, agent: Agent) -> None:
        self.script = SuiteScript(DEFAULT_SUITE_DIR)
        self.measuring = threading.Event()
        self.measuring.set()
        super().__init__(agent_or_suite(self.script, answers.perfect, agent))

    async def _chat(self, request: Request) -> Response:
        if request.headers.get("authorization") == "Bearer refused-key":  # the upstream checks keys
            return JSONResponse({"error": {"message": "invalid api key", "type": "auth"}}, status_code=401)
        try:
            self.script.locate(json.loads(await request.body()))
        except (KeyError, StopIteration, ValueError):
            return await super()._chat(request)  # an agent request
        if not await asyncio.to_thread(self.measuring.wait, 30):
            return Response("the test never let the measurement go on", status_code=500)
        return await super()._chat(request)

    def __exit__(self, *exc: object) -> None:
        self.measuring.set()  # a failed test must not leave a measurement waiting
        super().__exit__(*exc)


def suite_runs(upstream: ScriptedServer) -> int:
    """Measurements so far: each one asks every suite test; count one test's first prompt."""
    first = next(iter(SuiteScript(DEFAULT_SUITE_DIR).tests))
    return sum(
        1
        for body in upstream.requests
        if body["messages"]
        and next((m["content"] for m in body["messages"] if m["role"] == "user"), None) == first
        and sum(m["role"] == "assistant" for m in body["messages"]) == 0
    )


def client(proxy, key: str) -> openai.OpenAI:
    """An agent of its own: the drift identity is the hash of its key."""
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=30)


def ask(proxy, stream: bool = False, key: str = "client-key"):
    messages = [{"role": "user", "content": "tidy up the server"}]
    agent = client(proxy, key)
    if stream:
        with agent.chat.completions.with_streaming_response.create(
            model="agent-model", messages=messages, tools=TOOLS, stream=True
        ) as raw:
            for _ in raw.iter_lines():
                pass
            return raw.headers
    return agent.chat.completions.with_raw_response.create(model="agent-model", messages=messages, tools=TOOLS).headers


def served(headers) -> tuple[str, str]:
    return headers["x-gatekeeper-profile"], headers["x-gatekeeper-tier"]


def forwarded(upstream: ScriptedServer) -> list[str]:
    return [t["function"]["name"] for t in upstream.requests[-1].get("tools", [])]


def drift_report(proxy) -> dict:
    answer = httpx.get(f"{proxy.url}/admin/drift", headers=ADMIN, timeout=10)
    answer.raise_for_status()
    return answer.json()["pairs"].get(PAIR, {})


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "250"},
    )


# Ceilings of 5% instead of 1-2%: a demotion ends after ~90 clean calls per client instead of
# ~460, which keeps these tests short; the statistics are the same.
QUICK = {"ceilings": {"large": {"not_offered": 0.05, "invalid_json": 0.05, "invalid_args": 0.05}}}


def demote(proxy, upstream, *keys: str) -> int:
    """Drifted answers to each of `keys` in turn until the last one is served demoted."""
    sent = 0
    while served(ask(proxy, stream=sent % 2 == 1, key=keys[sent % len(keys)]))[0] != "demoted":
        assert sent < 60 * len(keys), "not demoted"
        sent += 1
    return sent


def test_one_clients_failing_traffic_demotes_the_model_for_that_client_only(store_path):
    agent = Agent()
    with DriftingModel(agent) as upstream:
        settings = settings_for(
            upstream.base_url, store_path, unknown_models="wait", admin_key="admin-secret", drift=QUICK
        )
        with running_proxy(settings) as proxy:
            assert served(ask(proxy, key="honest")) == ("measured", "large")
            measured_once = suite_runs(upstream)

            # One client's requests draw broken calls (however it provokes them): plain and
            # streamed answers both count.
            agent.calls = DRIFTED
            demote(proxy, upstream, "attacker")
            assert served(ask(proxy, key="attacker")) == ("demoted", "medium")
            assert forwarded(upstream) == ["read_file"]  # the large tool is gone for it

            # Everyone else keeps the large tool, and nothing was measured again.
            agent.calls = SOUND
            assert served(ask(proxy, key="honest")) == ("measured", "large")
            assert forwarded(upstream) == ["read_file", "execute_command"]
            assert suite_runs(upstream) == measured_once

            report = drift_report(proxy)
            assert report["demoted"] is None and len(report["clientsDemoted"]) == 1
            (demotion,) = report["clientsDemoted"].values()
            assert demotion["client"].startswith("key:") and "attacker" not in json.dumps(report)
            assert (demotion["fromTier"], demotion["toTier"]) == ("large", "medium")
            assert {b["fault"] for b in demotion["breaches"]} <= {"invalidArgs", "notOffered", "invalidJson"}


def test_failing_traffic_from_three_clients_demotes_everyone_until_clean_traffic_ends_it(store_path):
    agent = Agent()
    with DriftingModel(agent) as upstream:
        settings = settings_for(
            upstream.base_url, store_path, unknown_models="wait", admin_key="admin-secret", drift=QUICK
        )
        with running_proxy(settings) as proxy:
            assert served(ask(proxy, key="a")) == ("measured", "large")
            measured_once = suite_runs(upstream)
            upstream.measuring.clear()  # the re-measurement waits until the test has seen the demotion
            agent.calls = DRIFTED
            keys = ("a", "b", "c")
            while not drift_report(proxy).get("demoted"):
                demote(proxy, upstream, *keys)
            assert served(ask(proxy, key="newcomer")) == ("demoted", "medium")  # everyone
            assert forwarded(upstream) == ["read_file"]
            upstream.measuring.set()

            # The re-measurement runs (the suite still passes: large) and changes nothing.
            wait_until(lambda: suite_runs(upstream) == 2 * measured_once, "the re-measurement", timeout_s=60)
            wait_until(
                lambda: any(e["event"] == "remeasured" for e in drift_report(proxy)["history"]),
                "the re-measurement to land",
                timeout_s=60,
            )
            assert served(ask(proxy, key="newcomer")) == ("demoted", "medium")

            # The fault is fixed: once the clients' clean calls show it, large again for all.
            # How many it takes depends on how many drifted answers the worker counted after the
            # demotion began (more on a loaded machine); past the tally's size (window_calls x
            # min_clients calls, two per answer here) none of them is left, so it must end.
            agent.calls = SOUND
            for sent in range(1000 * 3 // 2 + 300):
                if sent % 15 == 0 and not drift_report(proxy).get("demoted"):
                    break
                ask(proxy, key=keys[sent % 3])
            wait_until(
                lambda: not drift_report(proxy).get("demoted"),
                "clean traffic to end the demotion",
                timeout_s=60,
            )
            assert served(ask(proxy, key="newcomer")) == ("measured", "large")
            history = drift_report(proxy)["history"]
            assert [e["event"] for e in history if e["detail"].startswith("everyone")][-1] == "ended"
            assert "remeasure" in [e["event"] for e in history]


def test_a_healthy_model_with_an_occasional_bad_call_is_never_demoted(store_path):
    agent = Agent()
    answered = 0

    def mostly_sound() -> list[dict]:
        nonlocal answered
        answered += 1
        return DRIFTED[:1] + SOUND[1:] if answered % 25 == 0 else SOUND  # one bad call in 50

    agent.calls = mostly_sound
    with DriftingModel(agent) as upstream:
        settings = settings_for(upstream.base_url, store_path, unknown_models="wait", admin_key="admin-secret")
        with running_proxy(settings) as proxy:
            profiles = {served(ask(proxy, key=f"k{i % 3}"))[0] for i in range(150)}
            report = wait_until(
                lambda: (r := drift_report(proxy)) and r["window"]["calls"] == 300 and r,
                "the worker to count every call",
                timeout_s=60,
            )
    assert profiles == {"measured"}
    assert report["window"]["invalidArgs"] == 6
    assert report["rates"]["invalidArgs"]["score"] < report["rates"]["invalidArgs"]["threshold"]
    assert report["demoted"] is None and report["clientsDemoted"] == {} and report["history"] == []


def test_an_answer_to_a_refused_credential_carries_no_evidence(store_path):
    agent = Agent()
    agent.calls = DRIFTED
    with DriftingModel(agent) as upstream:
        settings = settings_for(upstream.base_url, store_path, unknown_models="wait", admin_key="admin-secret")
        with running_proxy(settings) as proxy:
            ask(proxy, key="a")  # measured, and one answer of drift evidence
            calls = wait_until(lambda: drift_report(proxy).get("window", {}).get("calls"), "the first answer")
            for _ in range(30):
                try:
                    ask(proxy, key="refused-key")
                except openai.AuthenticationError:
                    continue
                raise AssertionError("the upstream refused the key: the client must get the 401")
            ask(proxy, key="a")
            wait_until(lambda: drift_report(proxy)["window"]["calls"] == 2 * calls, "the second answer")
            assert drift_report(proxy)["clientsDemoted"] == {}


def test_an_admin_clears_a_demotion(store_path):
    agent = Agent()
    agent.calls = DRIFTED
    with DriftingModel(agent) as upstream:
        settings = settings_for(
            upstream.base_url,
            store_path,
            unknown_models="wait",
            admin_key="admin-secret",
            drift={"remeasure": False},
        )
        with running_proxy(settings) as proxy:
            for _ in range(15):  # 15 faults of each kind: its evidence 15 x ln 3 = 16.5 > 12.1
                ask(proxy)
            wait_until(lambda: drift_report(proxy).get("clientsDemoted"), "the demotion", timeout_s=60)
            shown = cli("profiles", "--store", str(store_path), "--proxy", proxy.url, "--admin-key", "admin-secret")
            assert shown.returncode == 0, shown.stderr
            assert "demoted large -> medium for 1 client" in shown.stdout and PAIR in shown.stdout
            as_json = json.loads(
                cli(
                    "profiles",
                    "--store",
                    str(store_path),
                    "--proxy",
                    proxy.url,
                    "--json",
                    "--admin-key",
                    "admin-secret",
                ).stdout
            )
            (demotion,) = as_json["drift"][PAIR]["clientsDemoted"].values()
            assert demotion["toTier"] == "medium"
            cleared = httpx.delete(f"{proxy.url}/admin/drift/{PAIR}", headers=ADMIN, timeout=10)
            assert cleared.json() == {"cleared": PAIR, "existed": True}
            assert served(ask(proxy))[0] == "measured"
            history = drift_report(proxy)["history"]
            assert [e["event"] for e in history] == ["demoted", "ended"]
            assert history[-1]["detail"].endswith("cleared by admin")
            missing = httpx.delete(f"{proxy.url}/admin/drift/{PAIR}", headers=ADMIN, timeout=10)
            assert missing.json() == {"cleared": PAIR, "existed": False}


def presenting(proxy, key: str, **headers: str) -> openai.OpenAI:
    """A client sending `key` as its bearer token and `headers` beside it."""
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=30, default_headers=headers)


def ask_as(agent: openai.OpenAI):
    messages = [{"role": "user", "content": "tidy up the server"}]
    return agent.chat.completions.with_raw_response.create(model="agent-model", messages=messages, tools=TOOLS).headers


def test_a_demoted_client_cannot_shed_its_demotion_with_a_second_credential(store_path):
    agent = Agent()
    with DriftingModel(agent) as upstream:
        settings = settings_for(
            upstream.base_url, store_path, unknown_models="wait", admin_key="admin-secret", drift=QUICK
        )
        with running_proxy(settings) as proxy:
            assert served(ask(proxy, key="honest")) == ("measured", "large")
            agent.calls = DRIFTED
            demote(proxy, upstream, "attacker")
            agent.calls = SOUND
            sent = len(upstream.requests)
            for extra in ({"x-api-key": "made-up"}, {"api-key": "made-up"}):
                try:
                    ask_as(presenting(proxy, "attacker", **extra))
                except openai.BadRequestError as exc:
                    assert exc.code == "conflicting_credentials" and "made-up" not in str(exc)
                else:
                    raise AssertionError(f"{extra}: a second, different credential must be refused")
            assert len(upstream.requests) == sent  # never forwarded
            # The same key in both headers is the same client, still demoted.
            assert served(ask_as(presenting(proxy, "attacker", **{"x-api-key": "attacker"}))) == ("demoted", "medium")
            assert served(ask(proxy, key="honest")) == ("measured", "large")


def test_made_up_bearer_tokens_beside_an_azure_api_key_demote_nobody_else(store_path):
    agent = Agent()
    with DriftingModel(agent) as upstream:
        settings = settings_for(
            upstream.base_url,
            store_path,
            unknown_models="wait",
            admin_key="admin-secret",
            drift={**QUICK, "credential_header": "api-key"},  # what an Azure host derives (auto)
        )
        with running_proxy(settings) as proxy:
            real = presenting(proxy, "real-azure-key", **{"api-key": "real-azure-key"})
            assert served(ask_as(real)) == ("measured", "large")
            agent.calls = DRIFTED
            # Beside the real key, each made-up token is refused, never a client of its own.
            for i in range(3):
                try:
                    ask_as(presenting(proxy, f"made-up-{i}", **{"api-key": "real-azure-key"}))
                except openai.BadRequestError as exc:
                    assert exc.code == "conflicting_credentials"
                else:
                    raise AssertionError("a made-up bearer beside the real api-key must be refused")
            # Alone (the upstream reads api-key, not these), they are one anonymous client: more
            # drifted answers than three real clients need to demote a model for everyone.
            for i in range(90):
                ask_as(presenting(proxy, f"made-up-{i % 3}"))
            report = drift_report(proxy)
            assert report["window"]["calls"] > 0 and report["demoted"] is None
            assert [d["client"] for d in report["clientsDemoted"].values()] == ["anonymous"]
            agent.calls = SOUND
            assert served(ask_as(real)) == ("measured", "large")
