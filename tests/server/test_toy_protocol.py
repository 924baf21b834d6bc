"""A protocol added in one folder (tests/fixtures/toy_protocol/) plus one registry line is served
and gated end to end by the real proxy: its route, its tools hidden by tier, its choice of a
hidden tool refused, its answers enforced, its errors in its own shape."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import make_profile, running_proxy, seed_store, settings_for
from fixtures.toy_protocol import TOY
from fixtures.toy_protocol.upstream import ToyUpstream

from gatekeeper import PROTOCOLS, register_protocol
from gatekeeper.rules.tiers import Tier

TOOLS = [{"name": "read_file"}, {"name": "write_file"}, {"name": "execute_command"}]


@pytest.fixture
def toy() -> Iterator[None]:
    register_protocol(TOY)  # the one line
    try:
        yield
    finally:
        PROTOCOLS.pop(TOY.name)


@pytest.fixture
def proxy(toy, store_path, default_suite):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with ToyUpstream() as upstream:
        settings = settings_for(
            upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "protocols": ["toy"]}
        )
        with running_proxy(settings) as running:
            running.upstream = upstream
            yield running


def generate(proxy, **body) -> httpx.Response:
    return httpx.post(f"{proxy.url}/v1/toy/generate", json={"model": "small-model", "prompt": "hi"} | body, timeout=30)


def test_the_toy_protocol_is_gated_at_the_models_tier(proxy):
    answer = generate(proxy, tools=TOOLS)
    assert answer.status_code == 200
    assert proxy.upstream.requests[-1]["tools"] == [{"name": "read_file"}]
    assert answer.headers["x-gatekeeper-tier"] == "small"
    # The upstream called a tool it was never offered: removed from the answer.
    assert [c["name"] for c in answer.json()["calls"]] == ["read_file"]
    assert answer.headers["x-gatekeeper-blocked-calls"] == "execute_command"


def test_forcing_a_hidden_tool_is_refused_in_the_toy_error_shape(proxy):
    answer = generate(proxy, tools=TOOLS, force="execute_command")
    assert answer.status_code == 400
    assert "execute_command" in answer.json()["toy_error"]["message"]
    assert proxy.upstream.requests == []


def test_an_unknown_toy_field_is_refused_before_any_measurement(proxy):
    answer = generate(proxy, model="unmeasured-model", tools=TOOLS, smuggled=1)
    assert answer.status_code == 400 and "smuggled" in answer.json()["toy_error"]["message"]
    assert proxy.gk.progress() == [] and proxy.upstream.requests == []


def test_an_unregistered_protocol_has_no_route(store_path, upstream):
    with running_proxy(settings_for(upstream.base_url, store_path)) as running:
        answer = httpx.post(f"{running.url}/v1/toy/generate", json={"model": "m"}, timeout=30)
    assert answer.status_code == 404
