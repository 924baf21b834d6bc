"""No log line or span carries a tool call's argument values (issue 40): a secret planted in the
arguments of failing calls (wrong types, not JSON, a tool never offered), answered by a scripted
upstream through the real proxy to the official openai client, plain and streamed, until drift
demotes the pair; every structlog line and OpenTelemetry span is searched for it, and so is the
admin API (which shows values only when `drift.evidence_values` opts in)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import structlog
from conftest import make_profile, running_proxy, seed_store, settings_for
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from scripted import ScriptedServer

from gatekeeper.rules.tiers import Tier

SECRET = "sk-planted-4f1e9a7c2b"
ADMIN = {"Authorization": "Bearer admin-secret-0123456789"}
QUICK = {"ceilings": {"large": {"not_offered": 0.05, "invalid_json": 0.05, "invalid_args": 0.05}}}


def tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


TOOLS = [
    tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}),
    tool("execute_command", {"command": {"type": "string"}, "timeout_s": {"type": "integer"}}),
]
FAILING = [
    {"name": "write_file", "arguments": json.dumps({"path": 5, "content": f"key={SECRET}"})},  # wrong type
    {"name": "execute_command", "arguments": '{"command": "echo ' + SECRET + '", "timeout_s": NaN}'},  # not JSON
    {"name": "exfiltrate", "arguments": json.dumps({"token": SECRET})},  # never offered
]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the global provider is set once per process
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def ask(proxy, stream: bool) -> str:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="agent-key", max_retries=0, timeout=30)
    messages = [{"role": "user", "content": "save the key"}]
    if stream:
        with client.chat.completions.with_streaming_response.create(
            model="agent-model", messages=messages, tools=TOOLS, stream=True
        ) as raw:
            for _ in raw.iter_lines():
                pass
            return raw.headers["x-gatekeeper-profile"]
    raw = client.chat.completions.with_raw_response.create(model="agent-model", messages=messages, tools=TOOLS)
    return raw.headers["x-gatekeeper-profile"]


def test_a_secret_in_failing_calls_arguments_is_in_no_log_line_span_or_admin_answer(
    store_path, default_suite, spans: InMemorySpanExporter
):
    seed_store(store_path, make_profile("agent-model", Tier.LARGE, default_suite))
    with ScriptedServer(lambda body: {"content": None, "tool_calls": FAILING}) as upstream:
        settings = settings_for(upstream.base_url, store_path, drift=QUICK, admin_key=ADMIN["Authorization"][7:])
        with structlog.testing.capture_logs() as lines, running_proxy(settings) as proxy:
            sent = 0
            while ask(proxy, stream=sent % 2 == 1) != "demoted":
                sent += 1
                assert sent < 120, "never demoted"
            report = httpx.get(proxy.url + "/admin/drift", headers=ADMIN, timeout=10).json()
    assert upstream.requests and sent > 0
    (demoted,) = [e for e in lines if e["event"] == "drift_demoted"]
    # The evidence is there, and says what went wrong: the tool, the fault, the shape.
    example = next(e for e in demoted["examples"] if e["name"] == "write_file")
    assert example == {
        "fault": "invalidArgs",
        "name": "write_file",
        "shape": {
            "type": "object",
            "chars": len(FAILING[0]["arguments"]),
            "keys": {"path": "integer", "content": "string(25)"},
        },
    }
    assert {e["fault"] for e in demoted["examples"]} <= {"invalidArgs", "invalidJson", "notOffered"}
    for line in lines:
        assert SECRET not in json.dumps(line, default=str), line
    finished = spans.get_finished_spans()
    assert finished, "no span was recorded"
    for span in finished:
        assert SECRET not in span.to_json(), span.name
    assert SECRET not in json.dumps(report)
