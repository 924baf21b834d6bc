"""A tool call written as text, live: an upstream that answers an offered tool's call in its
content (`<tool_call>{...}</tool_call>`) instead of making it, through the real proxy to the
official clients of the three protocols, plain and streamed: the drift report and the metric
count each answer as `textCall`, and no log line carries the call's argument values."""

from __future__ import annotations

import json
from collections.abc import Callable

import anthropic
import httpx
import openai
import pytest
import structlog
from conftest import make_profile, running_proxy, seed_store, settings_for, wait_until
from scripted import ScriptedServer

from gatekeeper.observe.metrics import REGISTRY
from gatekeeper.rules.tiers import Tier

SECRET = "sk-planted-77c1d0"
ADMIN = {"Authorization": "Bearer admin-secret-0123456789"}
PAIR = "agent-model@default"
WRITTEN = '<tool_call>{"name": "read_file", "arguments": {"path": "' + SECRET + '"}}</tool_call>'
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
ASK = "read the notes"


def chat(proxy, stream: bool) -> None:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="agent-key", max_retries=0, timeout=30)
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}}]
    messages = [{"role": "user", "content": ASK}]
    if stream:
        for _ in client.chat.completions.create(model="agent-model", messages=messages, tools=tools, stream=True):
            pass
    else:
        client.chat.completions.create(model="agent-model", messages=messages, tools=tools)


def responses(proxy, stream: bool) -> None:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="agent-key", max_retries=0, timeout=30)
    tools = [{"type": "function", "name": "read_file", "parameters": SCHEMA}]
    if stream:
        for _ in client.responses.create(model="agent-model", input=ASK, tools=tools, stream=True):
            pass
    else:
        client.responses.create(model="agent-model", input=ASK, tools=tools)


def messages(proxy, stream: bool) -> None:
    client = anthropic.Anthropic(base_url=proxy.url, api_key="agent-key", max_retries=0, timeout=30)
    tools = [{"name": "read_file", "input_schema": SCHEMA}]
    asked = [{"role": "user", "content": ASK}]
    if stream:
        for _ in client.messages.create(model="agent-model", max_tokens=64, messages=asked, tools=tools, stream=True):
            pass
    else:
        client.messages.create(model="agent-model", max_tokens=64, messages=asked, tools=tools)


def counted() -> float:
    return REGISTRY.get_sample_value("gatekeeper_drift_calls_total", {"fault": "textCall"}) or 0.0


def window(proxy) -> dict:
    answer = httpx.get(proxy.url + "/admin/drift", headers=ADMIN, timeout=10)
    answer.raise_for_status()
    return answer.json()["pairs"].get(PAIR, {}).get("window", {})


@pytest.mark.parametrize("protocol", [chat, responses, messages], ids=["chat", "responses", "messages"])
def test_a_call_written_as_text_is_counted_plain_and_streamed(
    store_path, default_suite, protocol: Callable[..., None]
) -> None:
    seed_store(store_path, make_profile("agent-model", Tier.LARGE, default_suite))
    before = counted()
    with ScriptedServer(lambda body: {"content": WRITTEN}) as upstream:
        settings = settings_for(upstream.base_url, store_path, admin_key=ADMIN["Authorization"][7:])
        with structlog.testing.capture_logs() as lines, running_proxy(settings) as proxy:
            protocol(proxy, stream=False)
            wait_until(lambda: window(proxy).get("textCall") == 1, "the plain answer counted")
            protocol(proxy, stream=True)
            wait_until(lambda: window(proxy).get("textCall") == 2, "the streamed answer counted")
            report = httpx.get(proxy.url + "/admin/drift", headers=ADMIN, timeout=10).json()
    assert window_of(report)["calls"] == 2
    assert counted() - before == 2
    rate = report["pairs"][PAIR]["rates"]["textCall"]
    assert rate["count"] == 2 and rate["rate"] == 1.0
    assert rate["ceiling"] is None  # counted and shown; judged only where an operator sets a ceiling
    assert SECRET not in json.dumps(report)
    for line in lines:
        assert SECRET not in json.dumps(line, default=str), line


def window_of(report: dict) -> dict:
    return report["pairs"][PAIR]["window"]


def test_prose_naming_a_tool_and_a_made_call_are_not_counted(store_path, default_suite) -> None:
    seed_store(store_path, make_profile("agent-model", Tier.LARGE, default_suite))
    replies = iter(
        [
            {"content": "I would use read_file here, with a path."},
            {"content": None, "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
        ]
    )
    with ScriptedServer(lambda body: next(replies)) as upstream:
        settings = settings_for(upstream.base_url, store_path, admin_key=ADMIN["Authorization"][7:])
        with running_proxy(settings) as proxy:
            chat(proxy, stream=False)
            chat(proxy, stream=False)
            wait_until(lambda: window(proxy).get("calls") == 1, "the made call counted")
            assert window(proxy)["textCall"] == 0


def test_with_a_ceiling_calls_written_as_text_demote_and_the_evidence_holds_no_value(store_path, default_suite) -> None:
    seed_store(store_path, make_profile("agent-model", Tier.LARGE, default_suite))
    judged = {"ceilings": {"large": {"text_call": 0.05}}}
    with ScriptedServer(lambda body: {"content": WRITTEN}) as upstream:
        settings = settings_for(upstream.base_url, store_path, drift=judged, admin_key=ADMIN["Authorization"][7:])
        with structlog.testing.capture_logs() as lines, running_proxy(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="agent-key", max_retries=0, timeout=30)
            tools = [{"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}}]
            sent = 0
            while True:
                answer = client.chat.completions.with_raw_response.create(
                    model="agent-model", messages=[{"role": "user", "content": ASK}], tools=tools
                )
                if answer.headers["x-gatekeeper-profile"] == "demoted":
                    break
                sent += 1
                # The sequential test needs about 100 such answers; the monitor judges them off the
                # request path, so a client this fast sends a few dozen more before the header says
                # so (100 to 154 answers in all here, by how its thread is scheduled).
                assert sent < 400, "never demoted"
    (demoted,) = [e for e in lines if e["event"] == "drift_demoted"]
    assert {b["fault"] for b in demoted["breaches"]} == {"textCall"}
    assert demoted["examples"][0] == {
        "fault": "textCall",
        "name": "read_file",
        "shape": {
            "type": "object",
            "chars": len(json.dumps({"path": SECRET})),
            "keys": {"path": f"string({len(SECRET)})"},
        },
    }
    for line in lines:
        assert SECRET not in json.dumps(line, default=str), line
