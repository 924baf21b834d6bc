"""Live drift end to end: official openai client -> real proxy -> scripted upstream that drifts."""

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
from conftest import agent_or_suite, running_proxy, settings_for, wait_until
from scripted import ScriptedServer, SuiteScript
from starlette.requests import Request
from starlette.responses import Response

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


def ask(proxy, stream: bool = False):
    messages = [{"role": "user", "content": "tidy up the server"}]
    if stream:
        with proxy.client.chat.completions.with_streaming_response.create(
            model="agent-model", messages=messages, tools=TOOLS, stream=True
        ) as raw:
            for _ in raw.iter_lines():
                pass
            return raw.headers
    return proxy.client.chat.completions.with_raw_response.create(
        model="agent-model", messages=messages, tools=TOOLS
    ).headers


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


def test_a_drifting_model_is_demoted_loses_its_large_tools_and_is_remeasured(store_path):
    agent = Agent()
    with DriftingModel(agent) as upstream:
        settings = settings_for(
            upstream.base_url,
            store_path,
            unknown_models="wait",
            admin_key="admin-secret",
            drift={"window_calls": 60, "min_calls": 10},
        )
        with running_proxy(settings) as proxy:
            # Measured large on its first request; serves the large tool.
            headers = ask(proxy)
            assert (headers["x-gatekeeper-profile"], headers["x-gatekeeper-tier"]) == ("measured", "large")
            assert forwarded(upstream) == ["read_file", "execute_command"]
            measured_once = suite_runs(upstream)
            assert measured_once > 0
            for _ in range(5):
                ask(proxy)
            assert drift_report(proxy)["window"]["calls"] >= 2  # the worker may still be at it

            # It drifts: invalid arguments, broken JSON and an invented tool in every answer.
            upstream.measuring.clear()  # the re-measurement waits until the demoted request was seen
            agent.calls = DRIFTED
            sent = 0
            while not drift_report(proxy).get("demoted"):
                assert sent < 20, "not demoted within the window (60 calls)"
                ask(proxy, stream=sent % 2 == 1)  # plain and streamed answers both count
                sent += 1
            report = drift_report(proxy)
            demotion = report["demoted"]
            assert (demotion["fromTier"], demotion["toTier"]) == ("large", "medium")
            assert {b["fault"] for b in demotion["breaches"]} >= {"invalidArgs", "notOffered"}
            assert {e["name"] for e in demotion["examples"]} <= {"read_file", "execute_command", "format_disk"}

            # The very next request gets the lower tier: the large tool is gone.
            agent.calls = SOUND[:1]
            headers = ask(proxy)
            assert (headers["x-gatekeeper-profile"], headers["x-gatekeeper-tier"]) == ("demoted", "medium")
            assert forwarded(upstream) == ["read_file"]
            upstream.measuring.set()

            # It was re-measured, once; the new profile decides (the suite still passes: large).
            wait_until(
                lambda: any(e["event"] == "ended" for e in drift_report(proxy)["history"]),
                "the re-measurement to land",
                timeout_s=60,
            )
            headers = ask(proxy)
            assert (headers["x-gatekeeper-profile"], headers["x-gatekeeper-tier"]) == ("measured", "large")
            assert suite_runs(upstream) == 2 * measured_once

            # The admin API tells the whole story, next to the profile too.
            report = drift_report(proxy)
            events = [e["event"] for e in report["history"]]
            assert events == ["demoted", "remeasure", "ended"], events
            assert "re-measured: tier large" in report["history"][-1]["detail"]
            assert report["demoted"] is None
            profiles = httpx.get(f"{proxy.url}/admin/profiles", headers=ADMIN, timeout=10).json()["profiles"]
            assert profiles[PAIR]["drift"]["history"] == report["history"]


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
            profiles = {ask(proxy)["x-gatekeeper-profile"] for _ in range(100)}
            report = wait_until(
                lambda: (r := drift_report(proxy)) and r["window"]["calls"] == 200 and r,
                "the worker to count every call",
                timeout_s=60,
            )
    assert profiles == {"measured"}
    assert report["window"]["invalidArgs"] == 4
    assert report["rates"]["invalidArgs"]["lower"] < report["rates"]["invalidArgs"]["ceiling"]
    assert report["demoted"] is None and not report["drifting"] and report["history"] == []


def test_an_admin_clears_a_demotion(store_path):
    agent = Agent()
    agent.calls = DRIFTED
    with DriftingModel(agent) as upstream:
        settings = settings_for(
            upstream.base_url,
            store_path,
            unknown_models="wait",
            admin_key="admin-secret",
            drift={"min_calls": 10, "remeasure": False},
        )
        with running_proxy(settings) as proxy:
            for _ in range(5):
                ask(proxy)
            wait_until(lambda: drift_report(proxy).get("demoted"), "the demotion", timeout_s=60)
            shown = cli("profiles", "--store", str(store_path), "--proxy", proxy.url, "--admin-key", "admin-secret")
            assert shown.returncode == 0, shown.stderr
            assert "demoted large -> medium" in shown.stdout and PAIR in shown.stdout
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
            assert as_json["drift"][PAIR]["demoted"]["toTier"] == "medium"
            cleared = httpx.delete(f"{proxy.url}/admin/drift/{PAIR}", headers=ADMIN, timeout=10)
            assert cleared.json() == {"cleared": PAIR, "existed": True}
            assert ask(proxy)["x-gatekeeper-profile"] == "measured"
            history = drift_report(proxy)["history"]
            assert [e["event"] for e in history] == ["demoted", "ended"] and history[-1]["detail"] == "cleared by admin"
            missing = httpx.delete(f"{proxy.url}/admin/drift/{PAIR}", headers=ADMIN, timeout=10)
            assert missing.json() == {"cleared": PAIR, "existed": False}
