"""OpenTelemetry spans: named and attributed per the GenAI conventions where they apply, recorded
by the SDK's in-memory exporter; nothing is recorded without a tracer provider."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TOOLS, make_profile, running_proxy, seed_store, settings_for
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gatekeeper.config import Settings
from gatekeeper.measuring.backends import MockBackend
from gatekeeper.measuring.service import MeasurementService
from gatekeeper.observe import telemetry
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import JsonFileStore
from gatekeeper.types import Answer

_EXPORTER = InMemorySpanExporter()
_EXPORTING: list[TracerProvider] = []  # the provider _EXPORTER is attached to


@pytest.fixture
def spans() -> InMemorySpanExporter:
    # The global provider can be set once per process: the first test (of any module) sets it, the
    # rest share it, each adding its own exporter to it once.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if provider not in _EXPORTING:
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _EXPORTING.append(provider)
    _EXPORTER.clear()
    return _EXPORTER


def test_a_span_carries_the_genai_names_and_gatekeeper_decisions(spans: InMemorySpanExporter) -> None:
    with telemetry.span("chat", "gpt-4o", protocol="chat", tier="small", tools_hidden=["execute_command"]) as s:
        s.set("gatekeeper.calls.blocked", ["execute_command"])
    (done,) = spans.get_finished_spans()
    assert done.name == "chat gpt-4o"
    assert done.attributes is not None
    assert done.attributes["gen_ai.operation.name"] == "chat"
    assert done.attributes["gen_ai.request.model"] == "gpt-4o"
    assert done.attributes["gatekeeper.tier"] == "small"
    assert tuple(done.attributes["gatekeeper.tools.hidden"]) == ("execute_command",)
    assert tuple(done.attributes["gatekeeper.calls.blocked"]) == ("execute_command",)


def test_an_error_marks_the_span_and_still_propagates(spans: InMemorySpanExporter) -> None:
    with pytest.raises(ValueError), telemetry.span("measure", "m"):
        raise ValueError("boom")
    (done,) = spans.get_finished_spans()
    assert done.status.status_code == trace.StatusCode.ERROR
    assert done.attributes is not None and done.attributes["error.type"] == "ValueError"


def test_without_a_tracer_provider_nothing_is_recorded() -> None:
    # A fresh interpreter: the API's default provider makes non-recording spans, and `set` is free.
    code = (
        "from gatekeeper.observe import telemetry\n"
        "with telemetry.span('chat', 'm', tier='small') as s:\n"
        "    s.set('gatekeeper.x', 1)\n"
        "    print(type(s).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "_NoSpan"
    assert out.stderr == ""


def test_a_proxied_request_is_one_span_with_what_the_gate_decided(
    spans: InMemorySpanExporter, upstream, store_path, default_suite
) -> None:
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        proxy.client.chat.completions.create(
            model="small-model", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
        )
    (done,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert done.name == "chat small-model"
    assert done.kind == trace.SpanKind.SERVER
    attributes = dict(done.attributes or {})
    assert attributes["gen_ai.request.model"] == "small-model"
    assert attributes["gatekeeper.protocol"] == "chat"
    assert attributes["gatekeeper.tier"] == "small"
    assert attributes["gatekeeper.profile"] == "measured"
    assert tuple(attributes["gatekeeper.tools.kept"]) == ("read_file",)
    assert set(attributes["gatekeeper.tools.hidden"]) == {"write_file", "execute_command"}
    assert attributes["http.response.status_code"] == 200


def test_a_measurement_is_one_span_with_its_tier_scores_and_bounds(
    spans: InMemorySpanExporter, tmp_path: Path, default_suite
) -> None:
    # A model that answers every prompt with plain text: it fails the tool tests, passes little else.
    service = MeasurementService(
        Settings(), default_suite, JsonFileStore(tmp_path / "p.json"), lambda model: MockBackend(lambda r: Answer("ok"))
    )
    profile = asyncio.run(service.measure("texter"))
    (done,) = [s for s in spans.get_finished_spans() if s.name == "measure texter"]
    attributes = dict(done.attributes or {})
    assert attributes["gen_ai.request.model"] == "texter"
    assert tuple(attributes["gatekeeper.efforts"]) == ("default",)
    assert attributes["gatekeeper.tier"] == profile.tier.value
    assert attributes["gatekeeper.score.toolCalling"] == profile.scores["toolCalling"]
    assert attributes["gatekeeper.calls"] > 0
